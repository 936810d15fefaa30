"""The misconception catalog: known-wrong implementations, and known-right alternatives.

Each exercise has a module ``exNN`` with two lists:

* ``MISTAKES``: realistic student mistakes. Each replaces one solution cell (``cell`` = its
  grade_id) with wrong code. The test suite injects it into an otherwise correct submission,
  autogrades it with nbgrader and asserts every cell in ``must_fail`` loses its points; when
  ``hint`` is set, the visible check's message must contain it (so the student is told).
  With ``visible=True`` the mistake breaks only the *contract* the exercise text promises (3-D
  inputs only, no batch axes, one mask shape, an edge case the text states): it is right on
  some of the promised inputs, and the visible checks must already show it. The suite then
  requires every cell in ``must_fail`` to fail visibly (one message containing ``hint``) and
  nbgrader to take points only from those cells: nothing is lost at grading that the student
  could not see.
* ``ALTERNATIVES``: correct implementations written differently from the solution (einsum,
  loops, ...). They must get full marks: a check that rejects them is too strict. Some are
  written to raise Python warnings (a deprecated call, a tensor kept with its graph): the
  suite grades them with warnings turned on, because a warning must never cost points.

New entries are best written as the one change they are: ``edit(assignment, cell, (old, new))``
returns the solution cell with ``old`` replaced by ``new``.

The cohort tools use ``description`` to say what a failing check most often means; the
per-student tables (``make demo``, ``awb_grader grade``) name each student's mistakes by their
``label``, a few words ("no sqrt(d) scaling"; default: the description up to its first colon).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache


@dataclass(frozen=True)
class Mistake:
    id: str
    cell: str
    source: str
    description: str
    must_fail: tuple[str, ...]
    hint: str | None = None
    extra_cells: dict = field(default_factory=dict)  # other solution cells to replace too
    label: str = ""                                  # a few words for a table row; see ``short``
    visible: bool = False   # breaks only the contract: every must_fail cell fails visibly, naming `hint`

    def __post_init__(self):
        if self.visible and not self.hint:
            raise ValueError(f"mistake {self.id}: visible=True needs the hint its visible check shows")

    @property
    def short(self) -> str:
        return self.label or self.description.split(":", 1)[0].strip()


@dataclass(frozen=True)
class Alternative:
    id: str
    cells: dict
    description: str


@lru_cache(maxsize=None)
def _solution_cells(assignment: str) -> dict[str, str]:
    from ..core.course import solution_cells

    return solution_cells(assignment)


def solution(assignment: str, cell: str) -> str:
    """The solution code of one answer cell (markers removed): what a correct student wrote."""
    return _solution_cells(assignment)[cell]


def edit(assignment: str, cell: str, *changes: tuple[str | tuple[str, str], str]) -> str:
    """The solution cell ``cell`` with each ``(old, new)`` replaced (every ``old`` must occur:
    a change to the solution that breaks an entry fails loudly instead of testing nothing).
    ``old`` may be a pair ``(first, last)``: the text from ``first`` (which must occur once)
    through the next ``last``, for a change that spans lines the entry need not copy."""
    src = solution(assignment, cell)
    for old, new in changes:
        if isinstance(old, tuple):
            first, last = old
            i = src.find(first) if src.count(first) == 1 else -1
            j = src.find(last, i + len(first)) if i >= 0 else -1
            if j < 0:
                raise ValueError(f"catalog edit of {assignment}/{cell}: no single {first!r} ... {last!r} in it")
            src = src[:i] + new + src[j + len(last):]
            continue
        if old not in src:
            raise ValueError(f"catalog edit of {assignment}/{cell}: {old!r} is not in the solution")
        src = src.replace(old, new)
    return src


def module_name(assignment: str) -> str:
    return f"ex{assignment[:2]}"


def load(assignment: str):
    """The catalog module of an assignment (``04_queries_keys_values`` -> ``catalog.ex04``)."""
    return importlib.import_module(f"awb_grader.catalog.{module_name(assignment)}")


def mistakes(assignment: str) -> list[Mistake]:
    try:
        return list(load(assignment).MISTAKES)
    except ModuleNotFoundError:
        return []


def alternatives(assignment: str) -> list[Alternative]:
    try:
        return list(getattr(load(assignment), "ALTERNATIVES", []))
    except ModuleNotFoundError:
        return []


def _shows(hint: str, text: str, case_sensitive: bool) -> bool:
    """``hint`` in ``text``; with ``case_sensitive``, a hint with capitals ("KEYS") must appear as
    written, while an all-lowercase one ("future") also matches "FUTURE"."""
    return hint in text if case_sensitive and hint != hint.lower() else hint.lower() in text.lower()


def explains(m: Mistake, failed_cells, errors: dict[str, str], case_sensitive: bool = False) -> bool:
    """Whether mistake ``m`` accounts for a submission's failures: the submission lost every
    cell in ``m.must_fail`` and, where ``m`` has a visible ``hint``, that hint appears in those
    cells' error output (``errors``: {grade_id: error text})."""
    if not m.must_fail or not set(m.must_fail) <= set(failed_cells):
        return False
    return m.hint is None or _shows(m.hint, " ".join(errors.get(c, "") for c in m.must_fail), case_sensitive)


def named_by_errors(assignment: str, failed_cells, errors: dict[str, str]) -> list[tuple[Mistake, ...]]:
    """The catalogued mistakes one submission's error output names: one tuple per answer cell
    (in catalog order), read "A or B" when the messages cannot tell its mistakes apart.

    The candidates are the mistakes that explain the failures through their visible hint (a
    hint with capitals as written: "KEYS" is not "keys (4, 3)"); one without a hint is never
    named for one student: nothing tells it apart from other ways to fail the same checks. Of
    one answer cell's candidates, a weaker reading is dropped: a hint that is part of another's
    ("dim=" in "softmax over dim="); a mistake whose lost cells are a strict part of another's;
    and, when some candidate has a message that names it alone (or with mistakes of the very
    same hint), every candidate that has none (a shape check's general advice may mention
    several). A mistake in an earlier function can make a later function's check fail and
    name a mistake there: the table repeats what the student's own check output says."""
    hits = [m for m in mistakes(assignment) if m.hint and explains(m, failed_cells, errors, case_sensitive=True)]
    texts = [errors.get(c, "") for c in failed_cells]
    out = []
    for cell in dict.fromkeys(m.cell for m in hits):
        cands = [m for m in hits if m.cell == cell]
        cands = [m for m in cands
                 if not any(len(o.hint) > len(m.hint) and m.hint.lower() in o.hint.lower() for o in cands)]
        cands = [m for m in cands if not any(set(m.must_fail) < set(o.must_fail) for o in cands)]
        alone = [m for m in cands if any(_shows(m.hint, t, True) and
                                         not any(o.hint != m.hint and _shows(o.hint, t, True) for o in cands)
                                         for t in texts)]
        out.append(tuple(alone or cands))
    return out
