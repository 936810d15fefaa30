"""The notebook metadata the grader reads and writes, read in one place.

* a cell's nbgrader metadata (``cell.metadata.nbgrader``: grade_id, solution, grade, locked,
  points), as nbgrader's own ``utils`` reads it;
* what the autograde steps decided about a submission, in the autograded notebook's metadata
  under :data:`META` (``awb_grader``): status, reasons, the withheld cells and why.
"""

from __future__ import annotations

from pathlib import Path

META = "awb_grader"          # the autograded notebook's metadata key: status, reasons, withheld cells


def cell_meta(cell) -> dict:
    """A cell's nbgrader metadata (``grade_id``, ``solution``, ``grade``, ``locked``, ``points``);
    {} where it has none. ``cell``: an nbformat cell or the plain dict of one."""
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def verdict_of(notebook_path: Path) -> dict:
    """What the autograde steps (``OutsideVerdict``) wrote into an autograded notebook ({} if nothing)."""
    import nbformat

    p = Path(notebook_path)
    if not p.exists():
        return {}
    return dict(nbformat.read(p, as_version=4).metadata.get(META, {}))
