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

The cohort tools use ``description`` to say what a failing check most often means.
"""

from __future__ import annotations

import importlib
import re
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
    visible: bool = False   # breaks only the contract: every must_fail cell fails visibly, naming `hint`

    def __post_init__(self):
        if self.visible and not self.hint:
            raise ValueError(f"mistake {self.id}: visible=True needs the hint its visible check shows")


@dataclass(frozen=True)
class Alternative:
    id: str
    cells: dict
    description: str


_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)


@lru_cache(maxsize=None)
def _solution_cells(assignment: str) -> dict[str, str]:
    import nbformat

    from ..course import SOLUTIONS

    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: _MARKERS.sub("", c.source)
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")}


def solution(assignment: str, cell: str) -> str:
    """The solution code of one answer cell (markers removed): what a correct student wrote."""
    return _solution_cells(assignment)[cell]


def edit(assignment: str, cell: str, *changes: tuple[str, str]) -> str:
    """The solution cell ``cell`` with each ``(old, new)`` replaced (every ``old`` must occur:
    a change to the solution that breaks an entry fails loudly instead of testing nothing)."""
    src = solution(assignment, cell)
    for old, new in changes:
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
