"""Which catalogued mistakes tests/test_catalog.py grades through nbgrader in ``make test`` (:func:`sample`)
and which it leaves to ``make test-catalog`` (:func:`the_rest`); tests/conftest.py reads it too."""

from functools import lru_cache

from attention_workbook.checks import graded
from awb_grader import catalog
from awb_grader.catalog.shortcuts import contract_breaking


@lru_cache(maxsize=None)
def graded_elsewhere(assignment: str) -> list:
    """The first contract-breaking mistake of each of 04-09: graded, with every shortcut, in the sandboxed
    cohort run of tests/test_shortcuts.py (one run for all of them instead of a second grading here)."""
    return [m for a, m in contract_breaking(assignment)][:1]


@lru_cache(maxsize=None)
def sample(assignment: str) -> list:
    """The mistakes ``make test`` grades through nbgrader, in catalog order: the first contract-breaking
    one where the shortcut cohort grades none (nbgrader takes points where the visible check fails and
    nowhere else; tests/test_visible_hints.py shows it of the others in-process), every one only the
    outside verdict catches (tests/test_checks.py's HIDDEN_DECIDES), the first of each answer cell,
    then, while a test cell is lost by none of them, the mistake that loses most of those."""
    from test_checks import HIDDEN_DECIDES

    mistakes = [m for m in catalog.mistakes(assignment) if m not in graded_elsewhere(assignment)]
    chosen = [] if graded_elsewhere(assignment) else [m for m in mistakes if m.visible][:1]
    chosen += [m for m in mistakes if m.id in HIDDEN_DECIDES.get(assignment, {}) and m not in chosen]
    for cell in graded.ANSWERS[assignment]:
        if not any(m.cell == cell for m in chosen):
            chosen += [m for m in mistakes if m.cell == cell][:1]
    left = {t[0] for t in graded.TESTS[assignment]} - {c for m in chosen for c in m.must_fail}
    while left:
        best = max(mistakes, key=lambda m: len(left & set(m.must_fail)))    # the first of the best: catalog order
        if not left & set(best.must_fail):
            break                               # lost only by a mistake graded elsewhere
        chosen.append(best)
        left -= set(best.must_fail)
    return [m for m in mistakes if m in chosen]


def the_rest(assignment: str) -> list:
    return [m for m in catalog.mistakes(assignment) if m not in graded_elsewhere(assignment) + sample(assignment)]
