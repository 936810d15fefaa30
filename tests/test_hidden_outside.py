"""The hidden checks of a student's upload run only outside its process, through the replay and
proxies (``verdict.recheck``); the in-process check tests (``tests/nbrun.py``, ``tests/test_checks.py``)
run them on the real objects. Both must give the same verdicts on the catalog. Where they could
differ:

* a catalogued mistake's cells: the visible part alone fails each of them, so the kernel decides
  and the hidden check never matters, except for the pairs ``test_checks.HIDDEN_DECIDES`` lists
  (``tests/test_checks.py`` shows that, in-process);
* the correct alternatives: the catalog tests grade them through nbgrader, the outside path
  included (``tests/test_catalog.py``: in ``make test`` the reference and a sample of the
  alternatives, ``tests/catalog_parts.py``; the rest in ``make test-catalog``).

So this test compares the two ways, cell by cell, for the rest: every alternative of 00-03 that
``make test`` does not grade through nbgrader and every mistake ``HIDDEN_DECIDES`` lists.
In-process: the test cell (visible and hidden parts) run on the real objects (``tests/nbrun.py``);
outside: the visible part there, the hidden part through ``verdict.check_solution`` (the replay,
unsandboxed here: the code is the course's own).
"""

import pytest

import nbrun
from awb_grader import catalog
from awb_grader.devtools.variants import check_solution
from catalog_parts import alternative_rest
from test_checks import HIDDEN_DECIDES

SAMPLE = [(a, f"alternative-{alt.id}", dict(alt.cells)) for a in
          ("00_tensor_shapes", "01_rnn_limitations", "02_attention_as_lookup", "03_simplified_self_attention")
          for alt in alternative_rest(a)]
SAMPLE += [(a, f"mistake-{m.id}", {m.cell: m.source, **m.extra_cells}) for a, ids in HIDDEN_DECIDES.items()
           for m in catalog.mistakes(a) if m.id in ids]


@pytest.mark.slow
@pytest.mark.parametrize("assignment,variant,cells", SAMPLE, ids=[f"{a[:2]}-{v}" for a, v, _ in SAMPLE])
def test_hidden_checks_give_the_same_verdicts_in_the_kernel_and_outside(assignment, variant, cells, tmp_path):
    ns = nbrun.namespace(assignment, cells)
    tests = list(nbrun.tests(assignment))
    visible = {t: r.message is None for t, r in nbrun.run_tests(assignment, ns, tests, "visible").items()}
    earned = [t for t in tests if visible[t]]
    # in-process: a test cell whole, the hidden part after the visible one passed
    local = {t: r.message is None for t, r in nbrun.run_tests(assignment, ns, earned, "hidden").items()}
    in_kernel = {t: visible[t] and local[t] for t in tests}
    outside = check_solution(assignment, tmp_path, overrides=cells, cells=earned)
    assert not [v for v in outside.values() if v.startswith("unsupported")], outside
    outside_pass = {t: visible[t] and outside.get(t) == "pass" for t in tests}
    assert outside_pass == in_kernel, {t: outside.get(t) for t in tests if outside_pass[t] != in_kernel[t]}
    if variant.startswith("alternative"):
        assert all(in_kernel.values()), variant


# -- fast: the autograde steps on a notebook, no kernel -------------------------------------------
A4 = "04_queries_keys_values"


def _solution_notebook():
    import nbformat

    from awb_grader.core.course import SOLUTIONS, solution_cells

    nb = nbformat.read(SOLUTIONS / A4 / f"{A4}.ipynb", as_version=4)
    sol = solution_cells(A4)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("solution"):
            c.source = sol[c.metadata["nbgrader"]["grade_id"]]
    return nb


def _tests_of(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
            and not c.metadata["nbgrader"].get("solution")]


def test_the_kernel_gets_the_visible_checks_only_and_the_verdict_puts_the_cells_back():
    from awb_grader.core.metadata import META
    from awb_grader.core.preprocessors import hold_out_hidden as holdout

    nb = _solution_notebook()
    before = {c.metadata.nbgrader.grade_id: c.source for c in _tests_of(nb)}
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source += "\n### BEGIN HIDDEN TESTS\n# the student's own text\n### END HIDDEN TESTS\n"
    mine = answer.source
    nb.metadata[META] = {"status": "ok", "reasons": [], "withheld": {}, "sandbox": "bwrap"}
    resources = {}
    nb, resources = holdout.HoldOutHiddenTests().preprocess(nb, resources)
    for c in _tests_of(nb):
        assert "HIDDEN" not in c.source and "awb_grader" not in c.source, c.source
        assert c.source.strip() and c.source.strip() in before[c.metadata.nbgrader.grade_id]
    assert answer.source == mine                                  # an answer cell is left as written
    assert holdout.held_tests(resources) == before


SECRET = "hidden test: attention weights differs from the reference; case: q (3, 5, 17), rng(401)"


def _verdict(monkeypatch, tmp_path, answer_extra=""):
    """OutsideVerdict on the solution of 04 (no kernel: every test cell earned), its hidden checks'
    verdicts replaced: two fail with a message full of internals, one could not be re-checked
    (the student's process said something on its way out)."""
    from awb_grader.core.metadata import META
    from awb_grader.core.preprocessors import hold_out_hidden as holdout
    from awb_grader.core.preprocessors.outside_verdict import OutsideVerdict
    from awb_grader.verdict import outside as verdict

    nb = _solution_notebook()
    if answer_extra:
        c = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
        c.source += answer_extra
    nb.metadata[META] = {"status": "ok", "reasons": [], "withheld": {}, "sandbox": "bwrap"}
    resources = {"nbgrader": {"assignment": A4}, "metadata": {"path": str(tmp_path)}}
    nb, resources = holdout.HoldOutHiddenTests().preprocess(nb, resources)

    def recheck(nb, cwd, cells, timeout=60, exercise=None, graded=()):
        assert all("### BEGIN HIDDEN TESTS" in c.source for c in _tests_of(nb))     # put back first
        out = {c: "pass" for c in cells}
        out["test_sdpa_values"] = out["test_sdpa_causal"] = f"fail: CheckFailed: {SECRET}"
        out["test_head_forward"] = f"unsupported: EOFError: the student's process ended: {SECRET}"
        return out, {}

    monkeypatch.setattr(verdict, "recheck", recheck)
    nb, _ = OutsideVerdict().preprocess(nb, resources)
    shown = {c.metadata.nbgrader.grade_id: [o.get("evalue", "") for o in c.outputs] for c in _tests_of(nb)}
    return nb.metadata[META], shown


def test_a_failing_hidden_check_is_a_wrong_answer_with_a_fixed_sentence(monkeypatch, tmp_path):
    from awb_grader.verdict import outside as verdict

    meta, shown = _verdict(monkeypatch, tmp_path)
    assert shown["test_sdpa_values"] == shown["test_sdpa_causal"] == [verdict.HIDDEN_MESSAGE]
    assert shown["test_head_forward"] == [verdict.UNCHECKED_MESSAGE]
    assert not [g for g, texts in shown.items() if any("rng(" in t or "case:" in t for t in texts)]
    # the details are the instructor's: in the metadata and the reasons, not in any output
    assert meta["hidden_failed"]["test_sdpa_values"] == f"CheckFailed: {SECRET}"
    assert meta["status"] == "flagged" and "could not be re-checked" in " ".join(meta["reasons"])
    assert not any("patched" in r for r in meta["reasons"])          # a wrong answer is not a flag


def test_a_failing_hidden_check_where_the_code_touches_the_machinery_is_flagged(monkeypatch, tmp_path):
    from awb_grader.verdict import outside as verdict

    meta, shown = _verdict(monkeypatch, tmp_path, "\nimport torch\ntorch.allclose = lambda *a, **k: True\n")
    assert shown["test_sdpa_values"] == [verdict.PATCHED_MESSAGE]
    assert meta["status"] == "flagged" and set(meta["withheld"]) >= {"test_sdpa_values", "test_sdpa_causal"}
    assert any("passed in the student's kernel but failed when re-checked outside it" in r for r in meta["reasons"])
    assert SECRET not in str(shown)
