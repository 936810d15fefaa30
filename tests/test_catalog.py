"""Every catalogued mistake loses points under nbgrader, every correct alternative, the reference
and the solution notebook itself get full marks. Each exercise's variants are autograded together in
one throwaway course (one nbgrader generate_assignment, one autograde per variant).

The grading kernels run with every Python warning turned on (PYTHONWARNINGS=always): nbgrader
scores a test cell that writes to stderr 0, and a warning must never cost points, so the
alternatives (some written to raise warnings) must still get full marks. A contract-breaking
mistake (``visible=True``) may lose points only in cells whose visible check already fails
(tests/test_visible_hints.py shows that part in-process).

``make test`` grades through nbgrader, for each exercise, the reference (the release with the
solution's answers, built as every variant is), a sample of the correct alternatives (the first that
raises warnings, and enough more that every answer cell an alternative replaces is replaced by one:
25 of 40) and a sample of the mistakes (tests/catalog_parts.py): the first contract-breaking one,
every one whose loss only the outside verdict decides, and enough more that every test cell is lost
and every answer cell replaced by at least one (58 of 392). Every catalogued mistake is still graded
on every run in-process, visible and hidden parts, the battery and the grade table
(tests/test_checks.py, tests/test_battery.py, tests/test_visible_hints.py), and every alternative,
visible and hidden parts and the battery. The rest of the mistakes and alternatives go through
nbgrader in ``make test-catalog`` (the ``full_catalog`` marker), with the solution notebook as it is
(solutions/'s file submitted: autograded, it is the reference with the answer cells' markers, the
same cells and scores in all twelve exercises): run it when you add an entry or change a check."""

import pytest

from attention_workbook.checks import graded
from awb_grader import catalog
from awb_grader.core.course import SOLUTIONS, assignments
from awb_grader.core.metadata import verdict_of
from awb_grader.core.outputs import error_text
from awb_grader.devtools.variants import grade_variants
from catalog_parts import alternative_rest, alternative_sample, graded_elsewhere, named_earlier, sample, the_rest


# Exercises whose every catalogued mistake loses exactly its must_fail cells, no more (exercise 10: a kernel
# mistake costs the kernel's cells, never the launcher's; the battery forecasts the same cells,
# tests/test_battery.py)
EXACT_LOSSES = {"10_flash_attention_triton"}


@pytest.mark.slow
@pytest.mark.parametrize("assignment", assignments())
def test_catalog(assignment, tmp_path, monkeypatch):
    """The reference, the sample of correct alternatives and the sample of mistakes."""
    grade_and_judge(assignment, sample(assignment), alternative_sample(assignment), tmp_path, monkeypatch,
                    reference=True)


@pytest.mark.slow
@pytest.mark.full_catalog
@pytest.mark.parametrize("assignment", assignments())
def test_catalog_rest(assignment, tmp_path, monkeypatch):
    """Every other catalogued mistake and correct alternative, and the solution notebook as it is
    (``make test-catalog``)."""
    grade_and_judge(assignment, the_rest(assignment), alternative_rest(assignment), tmp_path, monkeypatch,
                    solution_notebook=True)


def test_the_sample_loses_every_test_cell_and_the_two_parts_are_the_catalog():
    for assignment in assignments():
        mine, rest, elsewhere = sample(assignment), the_rest(assignment), graded_elsewhere(assignment)
        assert sorted(m.id for m in mine + rest + elsewhere) == sorted(m.id for m in catalog.mistakes(assignment))
        assert not set(m.id for m in mine) & set(m.id for m in rest)
        lost = {c for m in mine + elsewhere for c in m.must_fail}
        assert {t[0] for t in graded.TESTS[assignment]} <= lost, assignment
        assert set(graded.ANSWERS[assignment]) <= {m.cell for m in mine + elsewhere}, assignment
        contract = [m for m in catalog.mistakes(assignment) if m.visible]
        assert not contract or contract[0] in mine + elsewhere, assignment
        alts, others = alternative_sample(assignment), alternative_rest(assignment)
        assert sorted(a.id for a in alts + others) == sorted(a.id for a in catalog.alternatives(assignment))
        assert not {a.id for a in alts} & {a.id for a in others}
        assert {c for a in alts for c in a.cells} == {c for a in alts + others for c in a.cells}, assignment
        assert any(a.id.startswith("warnings_") for a in alts), assignment


def grade_and_judge(assignment, mistakes, alternatives, tmp_path, monkeypatch, reference=False,
                    solution_notebook=False):
    """Autograde ``mistakes`` and ``alternatives`` (and the ``reference``: the release with the solution's
    answers, as every variant is built; the ``solution_notebook``: solutions/'s file as it is, which
    autograding makes the same notebook but for the answer cells' markers) in one throwaway course,
    and assert what the module's docstring says of each."""
    monkeypatch.setenv("PYTHONWARNINGS", "always")   # inherited by the grading kernels
    variants = {"reference": {}} if reference else {}
    variants.update({f"mistake-{m.id}": {m.cell: m.source, **m.extra_cells} for m in mistakes})
    variants.update({f"alternative-{a.id}": dict(a.cells) for a in alternatives})
    source_nb = SOLUTIONS / assignment / f"{assignment}.ipynb"
    files = {"solution-notebook": source_nb} if solution_notebook else {}
    graded = grade_variants(assignment, variants, tmp_path, timeout=60, files=files)

    problems, ambiguous, downstream = [], 0, 0
    whole = [*files, *(v for v in variants if v == "reference")]      # the solution as it is, and rebuilt
    for student in whole:
        if graded.total(student) != graded.max_total:
            problems.append(f"{student} scored {graded.total(student)}/{graded.max_total}: {graded.scores[student]}")
    for m in mistakes:
        student = f"mistake-{m.id}"
        scores = graded.scores[student]
        kept = [c for c in m.must_fail if scores.get(c) is None or scores[c] >= graded.max_scores[c]]
        if kept:
            problems.append(f"{m.id}: kept full points on {kept} (scores {scores})")
        if assignment in EXACT_LOSSES:
            lost = sorted(c for c, sc in scores.items() if sc < graded.max_scores[c])
            if lost != sorted(m.must_fail):
                problems.append(f"{m.id}: loses {lost}, its must_fail names {sorted(m.must_fail)}")
        if m.visible:
            surprise = [c for c, sc in scores.items() if sc < graded.max_scores[c] and c not in m.must_fail]
            if surprise:
                problems.append(f"{m.id} breaks only the contract, yet loses points in {surprise}, "
                                "cells its must_fail does not name (and whose visible check need not fail)")
        if m.hint:
            nb = graded.autograded(student, assignment)
            texts = [error_text(nb, c) for c in m.must_fail]
            if not any(m.hint.lower() in t.lower() for t in texts):
                first = next((t for t in texts if t), "(no error output)")
                problems.append(f"{m.id}: no failing cell's message contains {m.hint!r}; first message:\n{first}")
            # the grade table names the student's mistakes from these messages: this one (alone, or
            # as "it or another" where the messages cannot tell), nothing in an earlier function
            # (a later function's check may fail because of this one: counted, shown below)
            failed = [c for c, v in scores.items() if v < graded.max_scores[c]]
            groups = catalog.named_by_errors(assignment, failed, {c: error_text(nb, c) for c in failed})
            if not any(m in g for g in groups) or named_earlier(assignment, m, groups):
                problems.append(f"{m.id}: the grade table would name {[[x.id for x in g] for g in groups]}")
            ambiguous += any(m in g and len(g) > 1 for g in groups)
            downstream += any(x.cell not in (m.cell, *m.extra_cells) for g in groups for x in g)
    for a in alternatives:
        student = f"alternative-{a.id}"
        if graded.total(student) != graded.max_total:
            lost = {c: s for c, s in graded.scores[student].items() if s < graded.max_scores[c]}
            problems.append(f"correct alternative {a.id} lost points: {lost}")
    # correct work is never flagged: the outside verdict (hidden checks, the reading of the answer
    # cells for delegation and hidden code) finds nothing to say of it
    for student in (*whole, *(f"alternative-{a.id}" for a in alternatives)):
        meta = verdict_of(graded.course.path("autograded", student, assignment) / f"{assignment}.ipynb")
        if meta.get("status") != "ok" or meta.get("withheld"):
            problems.append(f"{student} was flagged: {meta.get('reasons')}")
    assert not problems, "\n".join(problems)
    print(
        f"\n{assignment}: {len(mistakes)}/{len(mistakes)} catalogued mistakes lose points; "
        + (f"{len(alternatives)} alternatives{' and the solution' if files or reference else ''} get "
           f"{graded.max_total:g}/{graded.max_total:g}; " if alternatives or files or reference else "")
        + f"the grade table names {ambiguous} of them as one of several it cannot tell apart, and for "
        f"{downstream} also a mistake in a later function whose check they break"
    )


# catalogued mistakes per answer cell: 3 at least, more where an item has more ways to go wrong
MIN_MISTAKES_PER_ANSWER = {"06_transformer_block": 4, "07_encoder_decoder": 4}


@pytest.mark.parametrize("assignment", assignments())
def test_catalog_is_substantial_and_covers_every_test_cell(assignment):
    """A test cell no known mistake fails could be a check that cannot fail."""
    mistakes = catalog.mistakes(assignment)
    assert catalog.alternatives(assignment), f"{assignment}: no correct alternative implementation catalogued"
    tests = {t[0] for t in graded.TESTS[assignment]}
    answers = graded.ANSWERS[assignment]
    per_answer = {a: sum(m.cell == a for m in mistakes) for a in answers}
    least = MIN_MISTAKES_PER_ANSWER.get(assignment, 3)
    assert min(per_answer.values()) >= least, f"fewer than {least} catalogued mistakes: {per_answer}"
    covered = {c for m in mistakes for c in m.must_fail}
    assert tests - covered == set(), f"test cells no catalogued mistake fails: {sorted(tests - covered)}"
    assert covered - tests == set(), f"catalog names unknown test cells: {sorted(covered - tests)}"
    unknown = {m.cell for m in mistakes} - set(answers)
    assert not unknown, f"catalog replaces unknown answer cells: {sorted(unknown)}"
    ids = [m.id for m in mistakes]
    assert len(ids) == len(set(ids)), "duplicate mistake ids"
