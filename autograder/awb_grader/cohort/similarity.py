"""Answers that look copied: pairs of students whose answer cells are unusually alike.

The tool is copydetect (PyPI, ``copydetect``): MOSS's winnowing over Pygments tokens, with the
identifiers of the code replaced by one letter (variables ``V``, functions ``F``) and comments
and blank space dropped, so a renamed, reformatted copy still matches. It was chosen over
Dolos (npm ``@dodona/dolos-lib``, the same winnowing over tree-sitter parse trees) because
the grader is a Python package: copydetect installs with pip where nbgrader does, on CI's
clean Debian machine as on an instructor's laptop, and is called in-process on strings,
while Dolos would add Node.js and native tree-sitter builds to the instructor's side for
the same algorithm.

Per exercise, each student's answer cells (the release's solution cells; every code cell
where a tampered notebook lost its nbgrader metadata) are compared cell by cell.
The release's own code (the stubs' signatures and docstrings, the import cell, the locked
checks) is copydetect's *boilerplate*: every k-gram it contains is removed from each student's
fingerprints before comparing, so the shared template never counts. A pair is listed when
one student's own answer code is mostly (``THRESHOLD``) found in the other's and the matching
code is long enough (``MIN_MATCH`` tokens: one short canonical function written alike by two
people is not evidence), and they are still alike once the reference solution's code
(``solutions/``) is discounted too: two students who both wrote the reference answer are not
a pair, they are listed once, in the group of answers that are mostly the reference's code.
Everything here is for a person to review; it changes no points.
"""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np

NOISE = 25          # copydetect's noise threshold (characters of filtered code): shorter matches are noise
THRESHOLD = 0.6     # a pair is listed when one student's own answer code is at least this share the other's,
MIN_MATCH = 150     # and the matching code is at least this many tokens (about two short functions)
REFERENCE = "the reference solution"


@dataclass
class Cell:
    """One answer cell of a pair: both students' code, and where it matches."""
    grade_id: str
    code_a: str
    code_b: str
    slices_a: np.ndarray       # 2 x N start/end offsets of the matching code in code_a
    slices_b: np.ndarray

    def highlighted(self) -> tuple[str, str]:
        """Both cells as HTML-escaped text with the matching code in ``<mark>``."""
        from copydetect.utils import highlight_overlap

        sides = ((self.code_a, self.slices_a), (self.code_b, self.slices_b))
        return tuple(highlight_overlap(code, sl, "<mark>", "</mark>", escape_html=True)[0] if sl.size
                     else str(_escape(code)) for code, sl in sides)


@dataclass
class Pair:
    assignment: str
    a: str
    b: str
    share_a: float             # of a's own answer code (tokens past the template), the share found in b's
    share_b: float
    matched: int               # tokens of matching code (the smaller of the two sides)
    cells: list                # [Cell] where they match, in release order

    @property
    def score(self) -> float:
        return max(self.share_a, self.share_b)

    def listed(self, threshold: float = THRESHOLD) -> bool:
        return self.matched >= MIN_MATCH and self.score >= threshold


@dataclass
class Findings:
    """One exercise's similarity: the pairs to review, the students whose answers are the
    reference solution's code ({student: share}), and how many pairs among those were folded."""
    assignment: str
    pairs: list
    reference: dict
    folded: int = 0
    compared: int = 0          # students with answer code of their own to compare


def _escape(text: str):
    from markupsafe import escape

    return escape(text)


def _ids(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def answer_cells(release_nb: Path) -> list[str]:
    """The grade_ids of the release's answer (solution) cells, in order."""
    nb = nbformat.read(release_nb, as_version=4)
    return [_ids(c) for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]


def template(release_nb: Path) -> list[str]:
    """Every code cell of the release: the stubs, the import cell, the checks."""
    nb = nbformat.read(release_nb, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def answers(nb_path: Path, cells: list[str]) -> dict[str, str] | None:
    """{grade_id: source} of the student's answer cells; where no cell carries an answer's
    grade_id (a notebook that lost its nbgrader metadata), every code cell by position
    (``cell-N``); None where the file is no notebook."""
    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception:  # noqa: BLE001 - an unreadable upload has no answers to compare
        return None
    code = [c for c in nb.cells if c.get("cell_type") == "code"]
    by_id = {_ids(c): c.get("source", "") for c in code if _ids(c) in cells}
    if by_id:
        return {gid: by_id[gid] for gid in cells if gid in by_id}
    return {f"cell-{i}": c.get("source", "") for i, c in enumerate(code)}


def _fingerprint(code: str, name: str, boilerplate):
    from copydetect import CodeFingerprint

    return CodeFingerprint(f"{name}.py", NOISE, 1, boilerplate=boilerplate, language="python", fp=io.StringIO(code))


def boilerplate_hashes(template_cells: list[str]) -> np.ndarray:
    """Every k-gram hash of every template cell (window 1: all of them, as copydetect reads
    its boilerplate directories)."""
    hashes = [h for i, code in enumerate(template_cells) for h in _fingerprint(code, f"t{i}", None).hashes]
    return np.unique(np.array(hashes, dtype=np.int64))


def _prints(documents: dict[str, dict[str, str]], bp) -> dict:
    out = {}
    for s, cells in sorted(documents.items()):
        fps = {gid: _fingerprint(code, f"{s}-{gid}", bp) for gid, code in (cells or {}).items() if code.strip()}
        fps = {gid: f for gid, f in fps.items() if f.token_coverage > 0}
        if fps:
            out[s] = fps
    return out


def compare(a: str, fa: dict, b: str, fb: dict, assignment: str = "") -> Pair:
    """Two students' fingerprinted answer cells compared cell by cell (no match spans two cells)."""
    from copydetect import compare_files

    found_a = found_b = 0.0
    matching = []
    for gid in [g for g in fa if g in fb]:
        overlap, (sa, sb), (sl_a, sl_b) = compare_files(fa[gid], fb[gid])
        if overlap:
            found_a += sa * fa[gid].token_coverage
            found_b += sb * fb[gid].token_coverage
            matching.append(Cell(gid, fa[gid].raw_code, fb[gid].raw_code, sl_a, sl_b))
    own_a = sum(f.token_coverage for f in fa.values())
    own_b = sum(f.token_coverage for f in fb.values())
    return Pair(assignment, a, b, found_a / own_a, found_b / own_b, int(min(found_a, found_b)), matching)


def similar_pairs(documents: dict[str, dict[str, str]], template_cells: list[str], assignment: str = "",
                  threshold: float = THRESHOLD, reference: dict[str, str] | None = None) -> Findings:
    """``documents``: {student: {grade_id: code}}; ``reference``: the solution's {grade_id: code}.
    Each answer cell is fingerprinted alone, with the template's k-grams removed; a student's
    share is the part of all their own answer code found in the other's same cells. With a
    reference, a pair is listed only if it is also alike past the reference solution's code
    (its k-grams removed too); pairs alike only through it are counted in ``folded``."""
    bp = boilerplate_hashes(template_cells)
    prints = _prints(documents, bp)
    ref, beyond = {}, None
    if reference:
        ref_fp = _prints({REFERENCE: reference}, bp).get(REFERENCE, {})
        for s, fs in prints.items():
            p = compare(s, fs, REFERENCE, ref_fp, assignment) if ref_fp else None
            if p and p.matched >= MIN_MATCH and p.share_a >= threshold:
                ref[s] = p.share_a
        beyond = _prints(documents, np.union1d(bp, boilerplate_hashes(list(reference.values()))))
    pairs, folded = [], 0
    for (a, fa), (b, fb) in itertools.combinations(sorted(prints.items()), 2):
        p = compare(a, fa, b, fb, assignment)
        if not p.listed(threshold):
            continue
        if beyond is not None and not (a in beyond and b in beyond
                                       and compare(a, beyond[a], b, beyond[b]).listed(threshold)):
            folded += 1
            continue
        pairs.append(p)
    pairs.sort(key=lambda p: (-p.score, -p.matched, p.a, p.b))
    return Findings(assignment, pairs, ref, folded, len(prints))


def cohort_findings(root: Path, release_root: Path, students_by_assignment: dict[str, list[str]],
                    threshold: float = THRESHOLD) -> dict[str, Findings]:
    """{assignment: Findings} over a course root's ``submitted/<student>/<assignment>/``
    notebooks (as submitted, after repair), each exercise's template from ``release_root``."""
    from ..catalog import solution

    out = {}
    for a, students in sorted(students_by_assignment.items()):
        release_nb = Path(release_root) / a / f"{a}.ipynb"
        if not release_nb.exists():
            continue
        cells = answer_cells(release_nb)
        docs = {s: answers(Path(root) / "submitted" / s / a / f"{a}.ipynb", cells) for s in students}
        try:
            ref = {gid: solution(a, gid) for gid in cells}
        except (FileNotFoundError, KeyError):       # no solutions/ beside the course: no reference
            ref = None
        out[a] = similar_pairs({s: d for s, d in docs.items() if d}, template(release_nb), a, threshold, ref)
    return out
