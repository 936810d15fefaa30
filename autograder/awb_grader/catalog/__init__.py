"""The misconception catalog: known-wrong implementations, and known-right alternatives.

Each exercise has a module ``exNN`` with two lists:

* ``MISTAKES``: realistic student mistakes. Each replaces one solution cell (``cell`` = its
  grade_id) with wrong code. The test suite injects it into an otherwise correct submission,
  autogrades it with nbgrader and asserts every cell in ``must_fail`` loses its points; when
  ``hint`` is set, the visible check's message must contain it (so the student is told).
* ``ALTERNATIVES``: correct implementations written differently from the solution (einsum,
  loops, ...). They must get full marks: a check that rejects them is too strict.

The cohort tools use ``description`` to say what a failing check most often means.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mistake:
    id: str
    cell: str
    source: str
    description: str
    must_fail: tuple[str, ...]
    hint: str | None = None
    extra_cells: dict = field(default_factory=dict)  # other solution cells to replace too


@dataclass(frozen=True)
class Alternative:
    id: str
    cells: dict
    description: str


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
