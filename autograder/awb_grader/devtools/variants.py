"""Build student submissions from the release and grade them through nbgrader.

``student_notebook`` fills a copy of the released notebook the way a student would (the
solution code without its markers, or replacement code for some cells); ``grade_variants``
autogrades a set of such submissions in a fresh course and returns nbgrader's scores. The
catalog tests, the alternatives tests and the demo cohort all go through here.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..core.course import SOLUTIONS, Course, ensure_kernel_path, solution_cells
from ..core.metadata import cell_meta

_ALL_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)[ \t]*\n?", re.M)


def notebook_cells(assignment: str) -> tuple[dict[str, str], dict[str, str], dict[str, float]]:
    """The solution notebook's answer cells, test cells (visible + hidden code, markers removed)
    and test points, each keyed by grade_id: what the in-process check tests execute."""
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    solutions, tests, points = {}, {}, {}
    for cell in nb.cells:
        meta = cell_meta(cell)
        if meta.get("solution"):
            solutions[meta["grade_id"]] = _ALL_MARKERS.sub("", cell.source)
        elif meta.get("grade"):
            tests[meta["grade_id"]] = _ALL_MARKERS.sub("", cell.source)
            points[meta["grade_id"]] = meta["points"]
    return solutions, tests, points


def student_notebook(release_nb: Path, assignment: str, overrides: dict[str, str] | None = None,
                     unanswered: tuple[str, ...] = ()) -> nbformat.NotebookNode:
    """The released notebook with every solution cell filled in: ``overrides`` for some
    cells, the reference solution for the rest, the stub left in place for ``unanswered``."""
    nb = nbformat.read(release_nb, as_version=4)
    solutions = solution_cells(assignment)
    overrides = overrides or {}
    unknown = set(overrides) - set(solutions)
    if unknown:
        raise KeyError(f"no solution cell(s) {sorted(unknown)} in {assignment}")
    for cell in nb.cells:
        gid = cell_meta(cell).get("grade_id")
        if cell_meta(cell).get("solution") and gid not in unanswered:
            cell.source = overrides.get(gid, solutions[gid])
    return nb


def own_settings() -> dict:
    """nbgrader settings for grading the course's own notebooks (the catalog, the demo, the suite):
    the path a student's upload takes (the isolation tier's zygote, hidden checks only outside the
    kernel). Where no isolation tier can run here, the same path with resource limits only: the
    notebooks are the course's own, and every grade says it is not protected."""
    from ..isolation import tiers

    return {} if tiers.protected() else {"SandboxGuard.unprotected": True}


@dataclass
class Graded:
    scores: dict[str, dict[str, float]]      # student -> {grade_id: score}
    max_scores: dict[str, float]              # grade_id -> max
    course: Course

    def total(self, student: str) -> float:
        return sum(self.scores[student].values())

    @property
    def max_total(self) -> float:
        return sum(self.max_scores.values())

    def autograded(self, student: str, assignment: str) -> nbformat.NotebookNode:
        p = self.course.path("autograded", student, assignment) / f"{assignment}.ipynb"
        return nbformat.read(p, as_version=4)


def grade_variants(assignment: str, variants: dict[str, dict[str, str]], root: Path | None = None,
                   timeout: int | None = None, files: dict[str, Path] | None = None) -> Graded:
    """Autograde one submission per entry of ``variants`` ({student: {grade_id: code}}) and
    per entry of ``files`` ({student: notebook to submit as it is}), the way a student's upload
    is graded (:func:`own_settings`): each kernel and replay a child of this process's zygote, in
    the isolation tier that runs here, the hidden checks only outside the kernel."""
    root = Path(root or tempfile.mkdtemp(prefix=f"awb-{assignment}-"))
    course = Course(root, release_dir=root / "release", timeout=timeout, extra=own_settings())
    course.generate_assignment(assignment)
    release_nb = course.release_root / assignment / f"{assignment}.ipynb"
    with tempfile.TemporaryDirectory() as tmp:
        for student, overrides in variants.items():
            p = Path(tmp) / f"{student}.ipynb"
            nbformat.write(student_notebook(release_nb, assignment, overrides), p)
            course.submit(student, assignment, p)
    for student, path in (files or {}).items():
        course.submit(student, assignment, path)
    scores = {}
    for student in [*variants, *(files or {})]:
        res = course.autograde(assignment, student)
        if not res["success"]:
            raise RuntimeError(f"autograde of {student} failed: {res.get('error')}\n{res.get('log')}")
        scores[student] = course.scores(assignment, student)
    return Graded(scores, course.max_scores(assignment), course)


def check_solution(assignment: str, workdir: Path, timeout: float = 60, overrides: dict[str, str] | None = None,
                   cells: list[str] | None = None) -> dict[str, str]:
    """Outside verdicts of the test cells ``cells`` (every one by default) for the reference
    solution, its answer cells replaced by ``overrides`` (no nbgrader): what the hidden checks
    say of that work when they run outside its process, as they do for a student's upload. Used
    by the test suite to show the re-check never takes points from correct work, and gives the
    verdicts the trusted path's in-kernel hidden checks give."""
    from ..verdict.outside import hidden_blocks, outside_verdicts

    ensure_kernel_path()
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    sol = {**solution_cells(assignment), **(overrides or {})}
    for cell in nb.cells:
        meta = cell_meta(cell)
        if meta.get("solution"):
            cell.source = sol[meta["grade_id"]]
    hidden = hidden_blocks(nb)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    return outside_verdicts(nb, Path(workdir), list(hidden) if cells is None else list(cells), timeout)
