"""Check (and where possible repair) a submitted notebook before nbgrader grades it.

A notebook that is not JSON, or is empty, cannot be graded: it is flagged with the reason and
kept as it was. A notebook whose nbgrader cell metadata was stripped (a known way to score a
silent 0: nbgrader then sees no answer cells and re-adds stub cells over the student's work)
is repaired by matching its cells to the release: test and read-only cells by their text,
answer cells by the functions/classes they define. What cannot be matched is flagged.
Nothing is lost: the original file is copied aside before any repair.
"""

from __future__ import annotations

import ast
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..core.metadata import cell_meta
from ..core.records import FLAGGED, OK, REPAIRED, UNGRADABLE


@dataclass
class Inspection:
    status: str = OK
    reasons: list[str] = field(default_factory=list)

    @property
    def gradable(self) -> bool:
        return self.status != UNGRADABLE

    def note(self, status: str, reason: str) -> None:
        order = [OK, REPAIRED, FLAGGED, UNGRADABLE]
        if order.index(status) > order.index(self.status):
            self.status = status
        self.reasons.append(reason)


def _defined_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        # a student's cell with a syntax error: fall back to scanning def/class lines
        names = set()
        for line in source.splitlines():
            s = line.strip()
            for kw in ("def ", "class "):
                if s.startswith(kw):
                    names.add(s[len(kw):].split("(")[0].split(":")[0].strip())
        return names
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}


def norm(source: str) -> str:
    """A cell's source as compared: trailing blanks and surrounding blank lines ignored."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def inspect_notebook(path: Path, release_path: Path, originals_dir: Path | None = None) -> Inspection:
    """Check ``path`` against the release notebook; repair it in place when possible."""
    ins = Inspection()
    raw = Path(path).read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        from .uploads import NOT_UNPACKED, not_a_notebook

        kind = not_a_notebook(path)
        ins.note(UNGRADABLE, f"{kind}, not a notebook: {NOT_UNPACKED}" if kind
                 else f"not a readable notebook (invalid JSON: {str(e)[:80]})")
        return ins
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as e:  # noqa: BLE001 - any nbformat failure is a reason, not a crash
        ins.note(UNGRADABLE, f"not a valid Jupyter notebook ({type(e).__name__}: {str(e)[:80]})")
        return ins
    if not isinstance(nb.get("cells"), list) or not nb.cells:
        ins.note(UNGRADABLE, "empty notebook (no cells)")
        return ins

    release = nbformat.read(release_path, as_version=4)
    rel_cells = [c for c in release.cells if cell_meta(c).get("grade_id")]
    expected = [cell_meta(c)["grade_id"] for c in rel_cells]
    changed = False

    # duplicate grade_ids (a copied cell) make nbgrader fail: keep the first, unmark the rest
    seen: set[str] = set()
    for cell in nb.cells:
        gid = cell_meta(cell).get("grade_id")
        if gid in seen:
            del cell.metadata["nbgrader"]
            changed = True
            ins.note(REPAIRED, f"duplicate cell id {gid!r}: the copy was unmarked (only the first is graded)")
        elif gid:
            seen.add(gid)

    # cells whose id the release does not have (a notebook downloaded from an older version of
    # the exercise): nbgrader would strip the id but keep the rest of the metadata and then
    # crash (KeyError 'grade_id' in OverwriteCells); unmark them so they can be matched below
    rel_by_id = {cell_meta(c)["grade_id"]: c for c in rel_cells}
    foreign = []
    for cell in nb.cells:
        gid = cell_meta(cell).get("grade_id")
        if "nbgrader" in cell.get("metadata", {}) and gid not in rel_by_id:
            del cell.metadata["nbgrader"]
            changed = True
            if gid:
                foreign.append(gid)
    if foreign:
        ins.note(REPAIRED, f"{len(foreign)} cell id(s) not in the release ({', '.join(foreign[:3])}"
                           f"{', ...' if len(foreign) > 3 else ''}): downloaded from an older version of the exercise? "
                           f"unmarked, the release's cells are used")

    # locked cells edited by the student: nbgrader restores them from the release when grading
    edited_tests, edited_other = [], []
    for cell in nb.cells:
        gid = cell_meta(cell).get("grade_id")
        rel = rel_by_id.get(gid)
        if rel is not None and cell_meta(rel).get("locked") and norm(cell.source) != norm(rel.source):
            (edited_tests if cell_meta(rel).get("grade") else edited_other).append(gid)
    if edited_tests:
        ins.note(FLAGGED, f"edited test cell(s) {', '.join(edited_tests)}: restored from the release when grading")
    if edited_other:
        ins.note(REPAIRED, f"edited {len(edited_other)} read-only cell(s): restored from the release when grading")

    missing = [gid for gid in expected if gid not in seen]
    if missing:
        restored, unmatched = _restore_metadata(nb, rel_cells, missing)
        if restored:
            changed = True
            ins.note(REPAIRED, f"nbgrader metadata was missing on {len(restored)} cell(s); "
                               f"restored by matching them to the release")
        lost_answers = [
            g for g in unmatched
            if cell_meta(next(c for c in rel_cells if cell_meta(c)["grade_id"] == g)).get("solution")
        ]
        lost_tests = [g for g in unmatched if g not in lost_answers and
                      cell_meta(next(c for c in rel_cells if cell_meta(c)["grade_id"] == g)).get("grade")]
        if lost_answers:
            ins.note(
                FLAGGED, f"answer cell(s) not found: {', '.join(lost_answers)} (graded as unanswered; check by hand)"
            )
        if lost_tests:
            ins.note(REPAIRED, f"test cell(s) deleted: {', '.join(lost_tests)} (nbgrader adds them back when grading)")

    if changed:
        if originals_dir is not None:
            originals_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, originals_dir / Path(path).name)
        nbformat.write(nb, path)
    return ins


def _restore_metadata(nb, rel_cells, missing: list[str]) -> tuple[list[str], list[str]]:
    """Give cells without nbgrader metadata the metadata of the release cell they match."""
    free = [c for c in nb.cells if not cell_meta(c).get("grade_id")]
    restored, unmatched = [], []
    for rel in rel_cells:
        gid = cell_meta(rel)["grade_id"]
        if gid not in missing:
            continue
        match = None
        if cell_meta(rel).get("solution"):
            want = _defined_names(rel.source)
            if want:
                match = next(
                    (c for c in free if c.cell_type == rel.cell_type and want <= _defined_names(c.source)), None
                )
            if match is None and not want:  # an answer cell that defines nothing: match by its text
                match = next(
                    (c for c in free if c.cell_type == rel.cell_type and norm(c.source) == norm(rel.source)), None
                )
        else:
            match = next(
                (c for c in free if c.cell_type == rel.cell_type and norm(c.source) == norm(rel.source)), None
            )
            if match is None and cell_meta(rel).get("grade"):
                # a test cell whose text changed: match on its first line (the visible check call)
                first = norm(rel.source).splitlines()[:1]
                match = next(
                    (c for c in free if c.cell_type == "code" and norm(c.source).splitlines()[:1] == first), None
                )
        if match is None:
            unmatched.append(gid)
            continue
        free.remove(match)
        match.metadata["nbgrader"] = json.loads(json.dumps(dict(cell_meta(rel))))
        restored.append(gid)
    return restored, unmatched
