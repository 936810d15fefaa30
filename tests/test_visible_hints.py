"""Visible checks, fast and in-process (no kernel, no nbgrader): the solution passes every
visible check, and every catalogued mistake that declares a hint fails a visible check whose
message contains that hint. (The nbgrader-level proof is tests/test_catalog.py.)"""

import os
import re

import nbformat
import pytest

from attention_workbook.checks import CheckFailed
from awb_grader import catalog
from awb_grader.course import SOLUTIONS, assignments

_HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", re.S)
_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)


def run_visible(assignment: str, overrides: dict[str, str]) -> dict[str, str | None]:
    """Execute the notebook's code in-process; {test cell id: failure message or None}."""
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    ns: dict = {"__name__": "__main__"}
    results: dict[str, str | None] = {}
    old = os.environ.get("NBGRADER_EXECUTION")
    os.environ["NBGRADER_EXECUTION"] = "autograde"  # notebooks skip long demos under grading
    cwd = os.getcwd()
    os.chdir(SOLUTIONS / assignment)
    try:
        for cell in nb.cells:
            if cell.cell_type != "code" or "awb-setup" in cell.metadata.get("tags", []):
                continue
            meta = cell.metadata.get("nbgrader", {})
            gid = meta.get("grade_id")
            if meta.get("solution"):
                src = overrides.get(gid, _MARKERS.sub("", cell.source))
            elif meta.get("grade"):
                src = _HIDDEN.sub("", cell.source)
            else:
                src = cell.source
            if not meta.get("grade"):
                try:
                    exec(compile(src, f"<cell {gid}>", "exec"), ns)  # noqa: S102 - our notebooks
                except Exception:  # noqa: BLE001 - a broken answer cell, like in a notebook
                    # with wrong code, later demo cells may fail too (as in a real notebook)
                    if not (meta.get("solution") or overrides):
                        raise
                continue
            try:
                exec(compile(src, f"<cell {gid}>", "exec"), ns)  # noqa: S102
                results[gid] = None
            except CheckFailed as e:
                results[gid] = e.plain()
            except Exception as e:  # noqa: BLE001
                results[gid] = f"{type(e).__name__}: {e}"
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")
        os.chdir(cwd)
        if old is None:
            os.environ.pop("NBGRADER_EXECUTION", None)
        else:
            os.environ["NBGRADER_EXECUTION"] = old
    return results


@pytest.mark.parametrize("assignment", assignments())
def test_solution_passes_visible_checks(assignment):
    results = run_visible(assignment, {})
    assert results, "no test cells found"
    failed = {k: v for k, v in results.items() if v}
    assert not failed, failed


HINTED = [(a, m) for a in assignments() for m in catalog.mistakes(a) if m.hint]


@pytest.mark.parametrize("assignment,mistake", HINTED, ids=[f"{a[:2]}-{m.id}" for a, m in HINTED])
def test_visible_hint_names_the_mistake(assignment, mistake):
    results = run_visible(assignment, {mistake.cell: mistake.source, **mistake.extra_cells})
    messages = [results.get(c) or "" for c in mistake.must_fail]
    assert any(messages), f"{mistake.id} passes every visible check it should fail"
    assert any(mistake.hint.lower() in m.lower() for m in messages), "\n---\n".join(m for m in messages if m)


def test_failure_renders_short_without_traceback():
    from attention_workbook.checks import ex04

    def softmax(x, dim=-1):
        raise NotImplementedError()

    with pytest.raises(CheckFailed) as info:
        ex04.softmax_values(softmax)
    lines = info.value._render_traceback_()
    assert len(lines) <= 4 and "not implemented yet" in lines[0]
    assert not any("File " in ln for ln in lines)
