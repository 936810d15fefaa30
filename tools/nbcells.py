#!/usr/bin/env python3
"""The cells that are the course's own, kept in sync in every notebook.

Notebooks are written and edited as percent-format scripts with jupytext (see CONTRIBUTING.md);
this tool adds only what jupytext cannot know:

* the Colab badge (the cell tagged ``awb-badge``) and the setup cell (``awb-setup``), generated
  from the repository and release in pyproject.toml;
* in lectures, a markdown cell that holds a section anchor (``<a id="scaling"></a>``) is named
  after it: cell id and Colab's ``metadata.id``, so "Reread" links open the notebook there
  (JupyterLab ``#cell-id=scaling``, Colab ``#scrollTo=scaling``);
* in solutions/, nbgrader's cell metadata: an answer cell written ``nbgrader={"solution": true,
  "grade_id": "softmax"}`` and a test cell written ``nbgrader={"grade": true, "grade_id":
  "test_softmax", "points": 2}`` get nbgrader's remaining fields, and every other cell becomes a
  locked read-only cell (autograding restores it if a student edits it).

    python tools/nbcells.py sync [NB.ipynb ...]     # default: every lecture and solution notebook

`make links` runs it, then regenerates exercises/ (`awb_grader release`).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from attention_workbook import config  # noqa: E402

ANCHOR = re.compile(r'<a id="([A-Za-z0-9_-]+)"></a>')


def _badge_path(nb_path: Path) -> str:
    """Repository path the Colab badge opens: solutions point at their student release."""
    rel = nb_path.resolve().relative_to(ROOT)
    if rel.parts[0] == "solutions":
        return str(Path("exercises", *rel.parts[1:]))
    return str(rel)


def _section_ids(nb, path: Path) -> None:
    """Name each lecture cell that holds a section anchor after the anchor."""
    if path.resolve().relative_to(ROOT).parts[0] != "lectures":
        return
    for cell in nb.cells:
        m = ANCHOR.search(cell.source) if cell.cell_type == "markdown" else None
        if m:
            cell.id = cell.metadata["id"] = m.group(1)
        elif cell.metadata.get("id") and cell.cell_type == "markdown":
            del cell.metadata["id"]


def _nbgrader_cells(nb, path: Path) -> None:
    """Complete nbgrader's metadata in a solutions notebook (see the module's docstring)."""
    if path.resolve().relative_to(ROOT).parts[0] != "solutions":
        return
    seen = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "grade_id" in c.metadata.get("nbgrader", {})}
    for cell in nb.cells:
        meta = dict(cell.metadata.get("nbgrader", {}))
        if meta.get("solution"):
            meta = {"grade": False, "locked": False, **meta}
        elif meta.get("grade"):
            if "points" not in meta:
                raise SystemExit(f"{path}: test cell {meta.get('grade_id')!r} needs points")
            meta = {"solution": False, "locked": True, **meta}
        else:
            meta = {"grade": False, "solution": False, "locked": True, **meta}
            if "grade_id" not in meta:
                base = "ro-" + hashlib.sha1(f"{cell.cell_type}\x00{cell.source}".encode()).hexdigest()[:8]
                gid, n = base, 1
                while gid in seen:
                    gid, n = f"{base}-{n}", n + 1
                meta["grade_id"] = gid
        if "grade_id" not in meta:
            raise SystemExit(f"{path}: an nbgrader cell needs a grade_id: {cell.source[:60]!r}")
        seen.add(meta["grade_id"])
        meta.update({"schema_version": 3, "task": False})
        cell.metadata["nbgrader"] = dict(sorted(meta.items()))


def sync(paths: list[Path]) -> list[Path]:
    """Bring the course's own cells of each notebook up to date; return the notebooks changed."""
    changed = []
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        before = nbformat.writes(nb)
        for cell in nb.cells:
            tags = cell.metadata.get("tags", [])
            if "awb-badge" in tags:
                cell.source = config.colab_badge(_badge_path(p))
            elif "awb-setup" in tags:
                cell.source = config.setup_cell_source()
        _section_ids(nb, p)
        _nbgrader_cells(nb, p)
        if nbformat.writes(nb) != before:
            nbformat.validate(nb)
            nbformat.write(nb, p)
            changed.append(p)
    return changed


def all_notebooks() -> list[Path]:
    return sorted(ROOT.glob("lectures/*.ipynb")) + sorted(ROOT.glob("solutions/*/*.ipynb"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sync", help="badge, setup cell, section ids and nbgrader metadata")
    s.add_argument("paths", nargs="*", type=Path)
    a = ap.parse_args(argv)
    changed = sync(a.paths or all_notebooks())
    for p in changed:
        print(f"updated {p}")
    if any(p.resolve().relative_to(ROOT).parts[0] == "solutions" for p in changed):
        print("solutions/ changed: regenerate exercises/ with `make release` (`make links` does both)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
