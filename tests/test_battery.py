"""The learner's battery (attention_workbook.checks.battery), fast and in-process, for every exercise:

* its points table equals the nbgrader points of the released notebooks, cell by cell, and each
  item runs the visible check its test cell calls;
* the solution passes every item with full points, writing nothing to stderr;
* every catalogued mistake (its source exec'ed in the solution's namespace) fails at least one
  item it loses at grading, and where the mistake has a visible hint the battery's message
  names it the same way; nothing reaches stderr;
* its seeds are not grading's; it is skipped while nbgrader grades; the last cell of every
  exercise calls it.
"""

import contextlib
import io
import os
import re
import warnings

import nbformat
import pytest

import nbrun
from attention_workbook.checks import battery
from awb_grader import catalog
from awb_grader.core.course import EXERCISES, REPO, SOLUTIONS, assignments


def namespace(assignment: str, overrides: dict[str, str] | None = None) -> dict:
    """The notebook's globals after its answer and plain cells ran in-process (tests/nbrun.py), with
    ``overrides`` in place of some answer cells (long demos skip, as under grading)."""
    return nbrun.namespace(assignment, overrides)


def _run(assignment, ns, cells=None, capsys=None):
    items = battery.ITEMS[assignment]
    if cells is not None:
        saved = list(items)
        battery.ITEMS[assignment] = [it for it in items if it.cell in cells]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")       # as in a kernel with PYTHONWARNINGS=always
            return battery.run(assignment, ns, progress=False)
    finally:
        if cells is not None:
            battery.ITEMS[assignment] = saved


@pytest.mark.parametrize("assignment", assignments())
def test_points_table_matches_the_release(assignment):
    nb = nbformat.read(EXERCISES / assignment / f"{assignment}.ipynb", as_version=4)
    cells = [(c.metadata["nbgrader"]["grade_id"], c.metadata["nbgrader"]["points"], c.source.splitlines()[0])
             for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    want = [(it.cell, it.points, f"checks.{it.check}({', '.join(it.args)})") for it in battery.ITEMS[assignment]]
    assert [(c, p) for c, p, _ in cells] == [(c, p) for c, p, _ in want]
    assert [line.strip() for _, _, line in cells] == [call for _, _, call in want]
    assert battery.POINTS[assignment] == {c: p for c, p, _ in cells}


@pytest.mark.parametrize("assignment", assignments())
def test_solution_earns_every_point(assignment, capfd):
    report = _run(assignment, namespace(assignment))
    assert [r.cell for r in report.rows] == [it.cell for it in battery.ITEMS[assignment]]
    assert report.earned == report.total, report.table()
    out, err = capfd.readouterr()
    assert err == "", err


ALL_MISTAKES = [(a, m) for a in assignments() for m in catalog.mistakes(a)]
# exercises whose battery runs every item for each mistake and must lose exactly its must_fail cells: what
# grading takes (tests/test_catalog.py, EXACT_LOSSES), so the forecast is the grade
EXACT_FORECAST = {"10_flash_attention_triton"}


@pytest.mark.parametrize("assignment,mistake", ALL_MISTAKES, ids=[f"{a[:2]}-{m.id}" for a, m in ALL_MISTAKES])
def test_battery_names_each_mistake(assignment, mistake, capfd):
    ns = namespace(assignment, {mistake.cell: mistake.source, **mistake.extra_cells})
    exact = assignment in EXACT_FORECAST
    report = _run(assignment, ns, cells=None if exact else set(mistake.must_fail))
    failed = {r.cell: r.verdict for r in report.rows if not r.earned}
    assert failed, f"{mistake.id}: the battery passes every item the mistake loses at grading"
    if exact:   # the forecast is the grade: exactly the cells the mistake loses (tests/test_catalog.py)
        assert sorted(failed) == sorted(mistake.must_fail), report.table()
    if mistake.hint:
        assert any(mistake.hint.lower() in v.lower() for v in failed.values()), "\n---\n".join(failed.values())
    assert all(r.earned in (0, r.points) for r in report.rows)
    out, err = capfd.readouterr()
    assert err == "", err


ALL_ALTERNATIVES = [(a, alt) for a in assignments() for alt in catalog.alternatives(a)]


@pytest.mark.parametrize("assignment,alt", ALL_ALTERNATIVES, ids=[f"{a[:2]}-{x.id}" for a, x in ALL_ALTERNATIVES])
def test_correct_alternatives_earn_every_point(assignment, alt, capfd):
    """Correct code written differently (einsum, loops, code that raises warnings) gets full marks."""
    unknown = set(alt.cells) - set(nbrun.answers(assignment))
    assert not unknown, unknown
    report = _run(assignment, namespace(assignment, alt.cells))
    assert report.earned == report.total, report.table()
    out, err = capfd.readouterr()
    assert err == "", err


def test_seeds_are_not_gradings():
    hidden = "\n".join(p.read_text() for p in (REPO / "autograder/awb_grader/hidden").glob("ex*.py"))
    grading = {int(s) for s in re.findall(r"rng\((\d+)\)", hidden)}
    assert grading and max(grading) < 1_000_000
    ours = {battery._seed(s, a, it.cell) for s in (battery.DEFAULT_SEED, 0, 1)
            for a in assignments() for it in battery.ITEMS[a]}
    assert not ours & grading and min(ours) >= 1_000_000


def test_check_all_prints_a_table_and_is_skipped_under_grading(capfd, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    ns = namespace("02_attention_as_lookup")
    total = sum(it.points for it in battery.ITEMS["02_attention_as_lookup"])
    hard = sum(it.points for it in battery.ITEMS["02_attention_as_lookup"] if it.args == ("hard_lookup",))
    battery.check_all(2, ns)
    out, err = capfd.readouterr()
    assert err == ""
    assert "test_soft_lookup_temperature" in out and f"{total} / {total}" in out and "forecast" in out
    battery.check_all("02", hard_lookup=ns["hard_lookup"])    # the other answers missing: named
    out, _ = capfd.readouterr()
    assert "soft_lookup is not defined" in out and f"{hard} / {total}" in out and 0 < hard < total
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    battery.check_all(2, ns)
    out, _ = capfd.readouterr()
    assert "skipped" in out and "test_" not in out


def test_battery_needs_no_autograder(tmp_path):
    """On Colab only the helper package is installed: the battery imports nothing from awb_grader."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['awb_grader'] = None\n"
            "from attention_workbook.checks import battery\n"
            "import importlib\n"
            "for key in battery.ITEMS: importlib.import_module('attention_workbook.checks.battery.ex' + key[:2])\n"
            "print('ok')")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_an_unanswered_exercise_gets_one_line_per_item():
    nb = nbformat.read(EXERCISES / "04_queries_keys_values" / "04_queries_keys_values.ipynb", as_version=4)
    ns: dict = {"__name__": "__main__"}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if (cell.cell_type != "code" or "awb-setup" in cell.metadata.get("tags", []) or meta.get("grade")
                or "check_all(" in cell.source):
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(cell.source, "<cell>", "exec"), ns)  # noqa: S102 - imports and the released stubs
    report = _run("04_queries_keys_values", ns)
    assert report.earned == 0
    unanswered = [r.verdict.endswith("is not implemented yet") and "\n" not in r.verdict for r in report.rows]
    assert all(unanswered), report.table()


def test_an_imported_reference_earns_nothing():
    from attention_workbook.mha import MultiHeadAttention

    ns = namespace("05_multi_head_attention")
    ns["MultiHeadAttention"] = MultiHeadAttention
    report = _run("05_multi_head_attention", ns, cells={"test_mha_self"})
    assert report.earned == 0 and "imported from attention_workbook" in report.rows[0].verdict


@pytest.mark.parametrize("assignment", assignments())
def test_last_cell_of_every_exercise_calls_the_battery(assignment):
    for folder in (SOLUTIONS, EXERCISES):
        nb = nbformat.read(folder / assignment / f"{assignment}.ipynb", as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        last = code[-1]
        assert f'battery.check_all("{assignment[:2]}", globals())' in last.source, last.source
        assert not last.metadata.get("nbgrader", {}).get("grade")
        assert "forecast" in last.source or "forecast" in nb.cells[nb.cells.index(last) - 1].source
