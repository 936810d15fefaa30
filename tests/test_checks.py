"""Every exercise's test cells, run in-process (no kernel, no nbgrader; tests/nbrun.py), parametrized
over the graded items that attention_workbook/checks/graded.py reads from the release:

* the solution notebook has exactly those answer and test cells, each test cell a visible check
  then a hidden one, every answer passed to some check;
* the solution passes every test cell, visible and hidden parts, and prints the green line;
* every answer left as the release's stub fails each of its test cells with "not implemented yet";
* every catalogued mistake fails every test cell it names (visible and hidden parts together) with
  its hint in a visible message, the visible part alone fails those cells (except where listed in
  HIDDEN_DECIDES), and the hidden part alone fails them too (except where listed below); from the
  same run (one per mistake, each test cell in its place, its two parts apart), the grade table names
  the mistake (tests/test_visible_hints.py's ``grade_table_names``; left to tests/test_catalog.py
  where the run grades that mistake through nbgrader).

Exercise-specific checks (oracles against PyTorch, blocked built-ins, the package's references)
are in tests/test_checks_exNN.py; hints and contracts in tests/test_visible_hints.py; the battery
in tests/test_battery.py; the same catalog through nbgrader in tests/test_catalog.py.
"""

from functools import lru_cache

import nbformat
import pytest

import nbrun
from attention_workbook.checks import graded
from awb_grader import catalog
from awb_grader.core.course import EXERCISES, assignments
from test_visible_hints import after_first, grade_table_names, visible_messages_say

ASSIGNMENTS = assignments()
CELLS = [(a, t[0]) for a in ASSIGNMENTS for t in graded.TESTS[a]]
ANSWERS = [(a, f) for a in ASSIGNMENTS for f in graded.ANSWERS[a]]
MISTAKES = [(a, m) for a in ASSIGNMENTS for m in catalog.mistakes(a)]

# Mistakes the hidden part alone catches in only some of the cells they lose (the visible part
# catches the rest: a contract the visible check states, e.g. a mask shape), or in none.
HIDDEN_CATCHES_SOME = {
    "04_queries_keys_values": {"sdpa_mask_gets_batch_axis"},
    "05_multi_head_attention": {"merge_view_after_transpose", "mask_wrong_axis"},
    "06_transformer_block": {"pe_sin_cos_swapped", "pe_halves", "ln_plain_tensors"},
    "07_encoder_decoder": {"decoder_masks_required", "decoder_fixed_heads"},
}
# Mistakes whose visible part passes some of the cells they lose: only the hidden part (which runs
# outside the student's kernel) fails those cells.
HIDDEN_DECIDES = {
    "08_train_a_gpt": {"top_k_threshold_without_keepdim": {"test_generate_basics"}},
}
HIDDEN_CATCHES_NONE = {
    "02_attention_as_lookup": {"soft_numpy_detached"},   # right values, no gradient: a visible check's finding
    # a 33-row positions buffer: the hidden check compares parameters through the adapter (which
    # does not carry buffers); the visible check compares parameters and buffers and loses the cell
    "07_encoder_decoder": {"s2s_default_max_len_33"},
    # a store past n_cols lands beside the row: the visible check reads the NaN there; the outside verdict
    # gets back only the output's own elements (replay.py mirrors the tensor argument, not its storage)
    # the interpreter reads 0 in a masked lane without other=: no value shows it; the visible check reads the
    # kernel's source (a GPU would read whatever memory holds there)
    "10_flash_attention_triton": {"softmax_store_unmasked", "flash_loads_without_other"},
}


@lru_cache(maxsize=None)
def _solution(assignment):
    return nbrun.run(assignment, part="both")[1]


@lru_cache(maxsize=None)
def _stubs(assignment):
    nb = nbformat.read(EXERCISES / assignment / f"{assignment}.ipynb", as_version=4)
    return {c.metadata.nbgrader.grade_id: c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_cells_and_points(assignment):
    assert list(nbrun.answers(assignment)) == graded.ANSWERS[assignment]
    tests = nbrun.tests(assignment)
    assert list(tests) == [t[0] for t in graded.TESTS[assignment]]
    for gid, _points, check, args in graded.TESTS[assignment]:
        assert tests[gid].visible.strip().startswith(f"checks.{check}({', '.join(args)})"), gid
        assert "hidden." in tests[gid].hidden, f"{gid}: no hidden part"
    checked = {a for t in graded.TESTS[assignment] for a in t[3]}
    assert set(graded.ANSWERS[assignment]) <= checked, "an answer no test cell checks"


@pytest.mark.parametrize("assignment,cell", CELLS, ids=[f"{a[:2]}-{c}" for a, c in CELLS])
def test_solution_passes(assignment, cell):
    result = _solution(assignment)[cell]
    assert result.message is None, result.message
    assert "\u2714" in result.stdout          # the green line was printed
    assert result.stderr == "", result.stderr


@pytest.mark.parametrize("assignment,answer", ANSWERS, ids=[f"{a[:2]}-{f}" for a, f in ANSWERS])
def test_unanswered_item_says_not_implemented(assignment, answer):
    ns = nbrun.namespace(assignment, {answer: _stubs(assignment)[answer]})
    mine = [t[0] for t in graded.TESTS[assignment] if answer in t[3]]
    for gid, result in nbrun.run_tests(assignment, ns, mine).items():
        assert result.message and "not implemented yet" in result.message, (gid, result.message)


@pytest.mark.parametrize("assignment,mistake", MISTAKES, ids=[f"{a[:2]}-{m.id}" for a, m in MISTAKES])
def test_mistake_loses_its_cells(assignment, mistake, graded_through_nbgrader):
    overrides = {mistake.cell: mistake.source, **mistake.extra_cells}
    # the grade table's part (a mistake with a hint): every test cell after the first replaced answer;
    # left to test_catalog where this run grades the mistake through nbgrader (tests/conftest.py)
    table = bool(mistake.hint) and (assignment, type(mistake).__name__, mistake.id) not in graded_through_nbgrader
    only = set(mistake.must_fail) | (set(after_first(assignment, overrides)) if table else set())
    # one run of the notebook, each test cell in its place, its visible part (what the student's kernel runs;
    # the hidden part runs outside it) and its hidden part apart
    results = nbrun.run(assignment, overrides, only=only, part="split")[1]
    visible = {t: results[t][0].message for t in mistake.must_fail}
    hidden = {t: results[t][1].message for t in mistake.must_fail}
    kept = [t for t in mistake.must_fail if visible[t] is None and hidden[t] is None]
    assert not kept, f"{mistake.id} keeps the points of {kept}"
    # the hint in a visible message, no solution code in any, a contract break seen (test_visible_hints.py)
    visible_messages_say(assignment, mistake, visible)
    # the cells only the hidden part fails: there the outside verdict decides, elsewhere the kernel's
    # visible check already did (tests/test_hidden_outside.py grades these both ways)
    decided = {t for t, msg in visible.items() if msg is None}
    assert decided == HIDDEN_DECIDES.get(assignment, {}).get(mistake.id, set()), \
        f"{mistake.id}: only the hidden part fails {sorted(decided)}: update HIDDEN_DECIDES"
    # the hidden checks are not a copy of the visible ones: alone, they fail the mistake too
    for msg in filter(None, hidden.values()):
        assert msg.startswith("Check failed: hidden test:") or "raised" in msg, msg
    caught = [t for t, msg in hidden.items() if msg]
    if mistake.id in HIDDEN_CATCHES_NONE.get(assignment, ()):
        assert not caught, f"{mistake.id}: the hidden part catches it now: remove it from HIDDEN_CATCHES_NONE"
    elif mistake.id in HIDDEN_CATCHES_SOME.get(assignment, ()):
        assert caught and len(caught) < len(hidden), \
            f"{mistake.id}: hidden part fails {caught} of {sorted(hidden)}: update HIDDEN_CATCHES_SOME"
    else:
        passed = sorted(set(hidden) - set(caught))
        assert not passed, f"{mistake.id}: the hidden part alone passes {passed}"
    if table:     # what each failing cell says as a whole (its hidden part only where its visible part passed)
        grade_table_names(assignment, mistake, {t: nbrun.whole(*r) for t, r in results.items()})
