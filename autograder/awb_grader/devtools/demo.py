"""The demo cohort: ten students' submissions for exercise 04, graded end to end.

The cohort is generated from the release, so it always matches the current exercise:
correct work, a correct alternative, partial work, catalogued misconceptions, a syntax
error, an infinite loop, stripped nbgrader metadata, deleted/edited test cells and a corrupt
file. ``run()`` releases, collects, checks/repairs, autogrades, generates feedback, exports
``grades.csv`` with nbgrader and prints the per-student table. Everything is written under
``build/demo`` (git-ignored) and rebuilt from scratch on every run, so re-running gives the
same table.
"""

from __future__ import annotations

import csv
import shutil
import time
from pathlib import Path

import nbformat

from .. import catalog
from ..cohort.pipeline import grade_submissions, table, write_flags
from ..core.course import REPO, Course
from ..core.metadata import cell_meta
from .variants import own_settings, student_notebook

ASSIGNMENT = "04_queries_keys_values"
DEMO_ROOT = REPO / "build" / "demo"
EXPECTED = REPO / "autograder" / "demo_cohort" / "expected.csv"
DEMO_TIMEOUT = 20  # s per cell: the course config uses 120 s; the demo cuts the infinite loop sooner


def _mistake(mid: str) -> dict[str, str]:
    m = next(m for m in catalog.mistakes(ASSIGNMENT) if m.id == mid)
    return {m.cell: m.source, **m.extra_cells}


def _alternative(aid: str) -> dict[str, str]:
    return dict(next(a for a in catalog.alternatives(ASSIGNMENT) if a.id == aid).cells)


def build_cohort(release_nb: Path, dest: Path) -> dict[str, Path]:
    """Write the demo submissions under ``dest``; returns {student: path}."""
    dest.mkdir(parents=True, exist_ok=True)
    subs: dict[str, Path] = {}

    def write(student: str, nb) -> None:
        p = dest / f"{student}.ipynb"
        nbformat.write(nb, p)
        subs[student] = p

    write("ada", student_notebook(release_nb, ASSIGNMENT))                                   # all correct
    write("ben", student_notebook(release_nb, ASSIGNMENT, _alternative("einsum_and_loops")))  # correct, other way
    write(
        "chloe",
        student_notebook(
            release_nb,
            ASSIGNMENT,  # partial: no attention yet
            unanswered=("scaled_dot_product_attention",),
        ),
    )
    write("dev", student_notebook(release_nb, ASSIGNMENT,                                     # two misconceptions
                                  {**_mistake("sdpa_no_scaling"), **_mistake("padding_mask_queries")}))
    write("emma", student_notebook(release_nb, ASSIGNMENT,
                                   {**_mistake("softmax_no_max_subtraction"), **_mistake("sdpa_mask_after_softmax")}))
    write("farid", student_notebook(release_nb, ASSIGNMENT, {                                 # syntax error
        "causal_mask": "def causal_mask(T):\n    return torch.ones(T, T, dtype=torch.bool).tril(\n"}))
    write("gita", student_notebook(release_nb, ASSIGNMENT, {                                  # infinite loop
        "padding_mask": "def padding_mask(lengths, T):\n    t = 0\n    while t < T:\n        pass\n"}))
    nb = student_notebook(release_nb, ASSIGNMENT)                                             # metadata stripped
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    write("hana", nb)
    nb = student_notebook(release_nb, ASSIGNMENT, _mistake("sdpa_mask_after_softmax"))        # hides failing tests
    nb.cells = [c for c in nb.cells if cell_meta(c).get("grade_id") != "test_sdpa_causal"]
    for c in nb.cells:
        if cell_meta(c).get("grade_id") == "test_sdpa_padding":
            c.source = "print('all good')"
    write("ivan", nb)
    p = dest / "jules.ipynb"                                                                  # corrupt file
    p.write_text(nbformat.writes(student_notebook(release_nb, ASSIGNMENT))[:1500])
    subs["jules"] = p
    return subs


def run(root: Path = DEMO_ROOT, quiet: bool = False) -> list:
    t0 = time.perf_counter()
    if root.exists():
        shutil.rmtree(root)
    say = (lambda *a: None) if quiet else print
    # graded as a student's upload is (the isolation tier's zygote; unprotected only where no tier runs)
    course = Course(root, release_dir=root / "release", timeout=DEMO_TIMEOUT, extra=own_settings())
    say(f"1/5 release: nbgrader generate_assignment {ASSIGNMENT}")
    course.generate_assignment(ASSIGNMENT)
    release_nb = course.release_root / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    say("2/5 cohort: writing 10 demo submissions from the release")
    subs = build_cohort(release_nb, root / "downloaded")
    say("3/5 check, repair and autograde each submission (nbgrader autograde), then feedback")
    rows = grade_submissions(course, ASSIGNMENT, subs, progress=not quiet)
    say("4/5 export: nbgrader's CSV export plugin")
    course.export_csv(root / "grades.csv")
    write_flags(rows, root / "flags.csv")
    from ..cohort import report

    where = report.write_all(root, course, rows)     # summary/index.html, alike answers, LMS imports
    say(f"5/5 done in {time.perf_counter() - t0:.0f} s\n")
    say(table(rows))
    say(f"\ngrades (nbgrader export): {root / 'grades.csv'}\nflags and reasons:        {root / 'flags.csv'}\n"
        f"feedback (HTML):          {root / 'feedback'}/<student>/{ASSIGNMENT}/\n"
        f"gradebook (sqlite):       {root / 'gradebook.db'}\n" + "\n".join(where))
    return rows


def expected_rows() -> list[dict]:
    with open(EXPECTED) as fh:
        return list(csv.DictReader(fh))
