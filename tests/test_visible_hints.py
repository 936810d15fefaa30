"""Visible checks, fast and in-process (no kernel, no nbgrader), for every exercise at once
(that the solution passes them, silently, is tests/test_checks.py's test_solution_passes):

* every catalogued mistake with a hint fails a visible check whose message contains that hint
  (asserted by tests/test_checks.py's test of each mistake, through :func:`visible_messages_say`);
  a contract-breaking mistake (``visible=True``: right on some of the inputs the text promises,
  wrong on others) fails the visible part of EVERY cell it loses at grading, so nothing is
  lost that the student could not see (tests/test_catalog.py checks nbgrader takes points only
  from those cells);
* every graded item has such a contract entry;
* no message a mistake produces hands out a line of the solution;
* the grade table, from the messages of every failing cell, names the mistake and nothing in an
  earlier function (:func:`grade_table_names`, asserted by the same test of each mistake);
* every correct alternative passes the visible and hidden parts of every test cell without
  writing anything to stderr while Python warnings are all turned on (nbgrader scores a cell
  that writes to stderr 0).
"""

import ast
import re
from pathlib import Path

import nbformat
import pytest

import nbrun
from catalog_parts import named_earlier
from attention_workbook.checks import CheckFailed
from awb_grader import catalog
from awb_grader.core.course import REPO, SOLUTIONS, assignments
from awb_grader.devtools.variants import solution_cells


def run_cells(assignment: str, overrides: dict[str, str]) -> dict[str, tuple[str | None, str]]:
    """{test cell id: (failure message or None, what the cell wrote to stderr)} after the notebook
    ran in-process (tests/nbrun.py), every test cell whole (visible and hidden parts). Every Python
    warning is turned on, as in a kernel with PYTHONWARNINGS=always."""
    results = nbrun.run(assignment, overrides, part="both")[1]
    return {k: (r.message, r.stderr) for k, r in results.items()}


# ----------------------------------------------------------------------------------------
# what the solution looks like, to recognise it in a message
# ----------------------------------------------------------------------------------------
def _line_fragments(line: str, min_len: int = 25) -> set[str]:
    """One solution line as the fragments a hint must not contain: the line without its
    comment, and the expression of a `return` or of an assignment, whitespace collapsed."""
    code = line.split("  #")[0].split("# ")[0] if "#" in line else line
    code = " ".join(code.split())
    if not code or code.startswith(("def ", "class ", "\"\"\"", "@")):
        return set()
    parts = [code]
    if code.startswith("return "):
        parts.append(code[len("return "):])
    m = re.match(r"^[\w\[\]., ()]+?\s*=\s*(.+)$", code)
    if m and "==" not in code.split("=")[0]:
        parts.append(m.group(1))
    return {p for p in parts if len(p) >= min_len}


def _spec_text(assignment: str) -> str:
    """The exercise's markdown, whitespace collapsed: code the text itself gives is the
    specification (attribute names, the interface), not an answer a hint would give away."""
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    return " ".join(" ".join(c.source for c in nb.cells if c.cell_type == "markdown").split())


def _answer_fragments(assignment: str, src: str) -> set[str]:
    """Fragments of the lines of a solution cell whose code the exercise text does not give."""
    spec = _spec_text(assignment)
    out = set()
    for line in src.splitlines():
        frags = _line_fragments(line)
        if not any(f in spec for f in frags):
            out |= frags
    return out


SOLUTION_FRAGMENTS = {a: {cell: _answer_fragments(a, src) for cell, src in solution_cells(a).items()}
                      for a in assignments()}


_STUDENT_LINE = re.compile(r"^\s+in [\w.<>]+, line \d+: .*$", re.M)


def _leaks(assignment: str, text: str) -> list[tuple[str, str]]:
    """Solution fragments in ``text``. The lines under "Where it happened in your code" quote the
    student's own code where it failed (a kernel keeps every cell's source, and so does
    tests/nbrun.py): those hand back what the student wrote, so they are left out, and only
    those."""
    flat = " ".join(_STUDENT_LINE.sub("", text).split())
    return [(cell, frag) for cell, frags in SOLUTION_FRAGMENTS[assignment].items() for frag in frags if frag in flat]


# ----------------------------------------------------------------------------------------
# mistakes
# ----------------------------------------------------------------------------------------
def visible_messages_say(assignment: str, mistake, messages: dict[str, str | None]) -> None:
    """What the visible parts of a mistake's must_fail cells say (``messages``: {cell: failure or None}):
    no solution code; a contract break fails every one of them; a named mistake is named. Called by
    tests/test_checks.py's test of each mistake, which runs those visible parts anyway."""
    messages = {c: messages.get(c) or "" for c in mistake.must_fail}
    leaks = {c: found for c, msg in messages.items() if (found := _leaks(assignment, msg))}
    assert not leaks, f"{mistake.id}: a message hands out solution code: {leaks}"
    if mistake.visible:
        silent = [c for c, msg in messages.items() if not msg]
        assert not silent, (
            f"{mistake.id} breaks the contract, yet the visible part of {silent} passes: "
            "the student would lose those points at grading without a warning"
        )
    if mistake.hint:
        assert any(messages.values()), f"{mistake.id} passes every visible check it should fail"
        assert any(mistake.hint.lower() in m.lower() for m in messages.values()), "\n---\n".join(
            m for m in messages.values() if m
        )


@pytest.mark.parametrize("assignment", assignments())
def test_every_graded_item_has_a_contract_entry(assignment):
    """Each answer cell has at least one catalogued way to break only its contract, caught visibly."""
    answers = set(solution_cells(assignment))
    covered = {m.cell for m in catalog.mistakes(assignment) if m.visible}
    assert answers - covered == set(), f"graded items without a contract-breaking entry: {sorted(answers - covered)}"


# ----------------------------------------------------------------------------------------
# messages never hand out the answer
# ----------------------------------------------------------------------------------------
def _message_strings(path: Path) -> list[str]:
    """Every string constant of a check module (f-strings with their placeholders as '{}')."""
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
    return out


@pytest.mark.parametrize("assignment", assignments())
def test_check_texts_do_not_contain_solution_lines(assignment):
    """No string in the visible or hidden checks of an exercise is a line of its solution
    (25 characters or more): a hint describes the idea and points to the lecture."""
    n = assignment[:2]
    found = []
    for path in (REPO / f"attention_workbook/checks/ex{n}.py", REPO / f"autograder/awb_grader/hidden/ex{n}.py"):
        for text in _message_strings(path):
            found += [(path.name, frag) for _cell, frag in _leaks(assignment, text)]
    assert not found, found


# ----------------------------------------------------------------------------------------
# alternatives: full marks, silently, with every warning turned on
# ----------------------------------------------------------------------------------------
ALL_ALTERNATIVES = [(a, alt) for a in assignments() for alt in catalog.alternatives(a)]


def test_every_exercise_has_an_alternative_that_raises_warnings():
    missing = [a for a in assignments() if not any(alt.id.startswith("warnings_") for alt in catalog.alternatives(a))]
    assert not missing, f"exercises without a warnings_* alternative: {missing}"


@pytest.mark.parametrize("assignment,alt", ALL_ALTERNATIVES, ids=[f"{a[:2]}-{alt.id}" for a, alt in ALL_ALTERNATIVES])
def test_alternative_passes_without_a_word_on_stderr(assignment, alt):
    from attention_workbook.checks import core

    before = core.CAPTURED["warnings"]
    results = run_cells(assignment, dict(alt.cells))
    if alt.id.startswith("warnings_"):  # written to raise warnings: make sure it does (else this tests nothing)
        assert core.CAPTURED["warnings"] > before, f"{alt.id} raised no warning inside the checks"
    failed = {k: msg for k, (msg, _) in results.items() if msg}
    assert not failed, failed
    noisy = {k: err for k, (_, err) in results.items() if err}
    assert not noisy, f"these test cells write to stderr (nbgrader would score them 0): {noisy}"


def test_failure_renders_short_without_traceback():
    from attention_workbook.checks import ex04

    def softmax(x, dim=-1):
        raise NotImplementedError()

    with pytest.raises(CheckFailed) as info:
        ex04.softmax_values(softmax)
    lines = info.value._render_traceback_()
    assert len(lines) <= 4 and "not implemented yet" in lines[0]
    assert not any("File " in ln for ln in lines)


# ----------------------------------------------------------------------------------------
# the grade table names each mistake (early warning for tests/test_catalog.py's nbgrader run)
# ----------------------------------------------------------------------------------------
def after_first(assignment: str, overrides: dict[str, str]) -> list[str]:
    """The test cells after the first answer cell ``overrides`` replaces, in notebook order: in a kernel the
    ones before it run before the replaced code exists, and pass as the solution's do (test_checks.py)."""
    cells = nbrun.cells(assignment)
    first = min(i for i, c in enumerate(cells) if c.kind == "answer" and c.gid in overrides)
    return [c.gid for c in cells[first:] if c.kind == "test"]


def grade_table_names(assignment: str, mistake, results: dict) -> None:
    """From the messages of every failing cell (``results``: {test cell id: nbrun.Result of the whole cell},
    visible and hidden parts, in-process, every test cell after the first answer the mistake replaces),
    the grade table (catalog.named_by_errors) names this mistake and nothing in an earlier function: the
    same rule tests/test_catalog.py applies to nbgrader's output, minutes earlier in the edit loop (a new
    entry whose hint another's message also shows, or an older entry that declares fewer lost cells than
    it really loses, is caught here). Called by tests/test_checks.py's test of each mistake."""
    failed = [c for c, r in results.items() if r.message or r.stderr]
    errors = {c: (results[c].message or "") + results[c].stderr for c in failed}
    groups = catalog.named_by_errors(assignment, failed, errors)
    assert any(mistake in g for g in groups) and not named_earlier(assignment, mistake, groups), (
        f"{mistake.id}: the grade table would name {[[x.id for x in g] for g in groups]} (lost: {failed})"
    )
    if mistake.visible:     # test_catalog's rule for a contract break: points only where the visible check fails
        surprise = sorted(set(failed) - set(mistake.must_fail))
        assert not surprise, (f"{mistake.id} breaks only the contract, yet loses {surprise}, cells its must_fail "
                              "does not name (and whose visible check need not fail)")
