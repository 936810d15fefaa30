"""Which catalogued mistakes tests/test_catalog.py grades through nbgrader in ``make test`` (:func:`sample`)
and which it leaves to ``make test-catalog`` (:func:`the_rest`); tests/conftest.py reads it too. The same for
the catalogued shortcuts tests/test_shortcuts.py grades in its sandboxed cohort run (:func:`shortcut_sample`)."""

from functools import lru_cache

from attention_workbook.checks import graded
from awb_grader import catalog
from awb_grader.catalog.shortcuts import contract_breaking, shortcuts
from awb_grader.devtools.variants import solution_cells


def cover(candidates: list, covers, chosen: list, left: set) -> list:
    """``candidates`` in their (catalog) order that are in ``chosen`` or that a greedy cover of ``left``
    adds: while something of ``left`` is covered by none chosen, the candidate that covers most of it
    (``covers(candidate)``: a set; the first of the best). Stops where no candidate covers what is left."""
    chosen, left = list(chosen), set(left)
    while left:
        best = max(candidates, key=lambda c: len(left & covers(c)))
        if not left & covers(best):
            break
        chosen.append(best)
        left -= covers(best)
    return [c for c in candidates if c in chosen]


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
    outside verdict catches (tests/test_checks.py's HIDDEN_DECIDES), then, while a test cell is lost by
    none of the chosen ones or an answer cell is replaced by none, the mistake that covers most of those
    (the first of the best, in catalog order; what the shortcut cohort grades counts as covered)."""
    from test_checks import HIDDEN_DECIDES

    def covers(m) -> set[str]:
        return set(m.must_fail) | {f"answer {m.cell}"}

    mistakes = [m for m in catalog.mistakes(assignment) if m not in graded_elsewhere(assignment)]
    chosen = [] if graded_elsewhere(assignment) else [m for m in mistakes if m.visible][:1]
    chosen += [m for m in mistakes if m.id in HIDDEN_DECIDES.get(assignment, {}) and m not in chosen]
    left = {t[0] for t in graded.TESTS[assignment]} | {f"answer {c}" for c in graded.ANSWERS[assignment]}
    left -= {c for m in chosen + graded_elsewhere(assignment) for c in covers(m)}
    return cover(mistakes, covers, chosen, left)   # (what no mistake covers: test_catalog says so)


def the_rest(assignment: str) -> list:
    return [m for m in catalog.mistakes(assignment) if m not in graded_elsewhere(assignment) + sample(assignment)]


@lru_cache(maxsize=None)
def alternative_sample(assignment: str) -> list:
    """The correct alternatives ``make test`` grades through nbgrader, in catalog order: the first that
    raises warnings (nbgrader scores a test cell that writes to stderr 0: a warning must cost nothing),
    then, while an answer cell some alternative replaces is replaced by none of the chosen ones, the
    alternative that replaces most of those (the first of the best). tests/test_visible_hints.py and
    tests/test_battery.py run every alternative in-process on every run; ``make test-catalog`` grades
    the others through nbgrader."""
    every = catalog.alternatives(assignment)
    chosen = [a for a in every if a.id.startswith("warnings_")][:1]
    left = {c for a in every for c in a.cells} - {c for a in chosen for c in a.cells}
    return cover(every, lambda a: set(a.cells), chosen, left)


def alternative_rest(assignment: str) -> list:
    return [a for a in catalog.alternatives(assignment) if a not in alternative_sample(assignment)]


@lru_cache(maxsize=None)
def shortcut_sample() -> tuple:
    """The shortcuts ``make test``'s cohort run grades, in catalog order: while a kind of shortcut (a form of
    delegation, encoded tampering) or an exercise of 04-09 is graded by none of the chosen ones, the shortcut
    that adds most of those (the first of the best): every kind and every exercise's provided modules
    through the real sandbox. tests/test_own_work.py reads every one of them from the source on every
    run; ``make test-catalog`` grades the others the same way."""
    every = shortcuts()

    def covers(sc) -> set[str]:
        return {f"kind {sc.kind}", f"exercise {sc.assignment}"}

    return tuple(cover(every, covers, [], set().union(*map(covers, every))))


def shortcut_rest() -> tuple:
    return tuple(sc for sc in shortcuts() if sc not in shortcut_sample())


def named_earlier(assignment: str, mistake, groups) -> list[str]:
    """The entries the grade table (``groups``: catalog.named_by_errors) names in a function before the
    mistake's own: the rule tests/test_catalog.py, test_visible_hints.py and test_shortcuts.py apply (a
    later function's check may fail because of this mistake; an earlier one's must not be blamed)."""
    order = list(solution_cells(assignment))           # answer cells in notebook order
    own = (mistake.cell, *mistake.extra_cells)
    return [x.id for g in groups for x in g if x.cell not in own and order.index(x.cell) < order.index(mistake.cell)]
