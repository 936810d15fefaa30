"""Parallel grading in shards merged into one gradebook == a sequential run, cell by cell,
including a regrade of a resubmission over an existing grade."""

import csv

import nbformat
import pytest

from awb_grader import catalog
from awb_grader.course import EXERCISES, Course
from awb_grader.parallel import Task, grade_parallel, gradebook_dump
from awb_grader.pipeline import grade_submissions
from awb_grader.variants import student_notebook
from awb_grader.warm import warm_kernels

A = "04_queries_keys_values"
RELEASE = EXERCISES / A / f"{A}.ipynb"

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cohort")]


def _csv(path):
    with open(path) as fh:
        return sorted(tuple(r.items()) for r in csv.DictReader(fh))


def test_parallel_shards_give_the_sequential_gradebook_and_csv(tmp_path):
    m = next(x for x in catalog.mistakes(A) if x.id == "sdpa_mask_after_softmax")
    stripped = student_notebook(RELEASE, A)
    for c in stripped.cells:
        c.metadata.pop("nbgrader", None)
    subs = {"ada": student_notebook(RELEASE, A), "dev": student_notebook(RELEASE, A, {m.cell: m.source}),
            "hana": stripped}
    files = {}
    for s, nb in subs.items():
        files[s] = tmp_path / "in" / f"{s}.ipynb"
        files[s].parent.mkdir(exist_ok=True)
        nbformat.write(nb, files[s])
    again = tmp_path / "in" / "dev2.ipynb"                 # dev resubmits a corrected notebook
    nbformat.write(student_notebook(RELEASE, A), again)

    # warm kernels for both (forked from one zygote of this process, which the shard workers
    # inherit; they grade as new kernels do: tests/test_warm.py)
    with warm_kernels() as extra:
        seq = Course(tmp_path / "seq", release_dir=tmp_path / "seq" / "release", extra=dict(extra))
        seq.generate_assignment(A)
        rows_seq = grade_submissions(seq, A, files, feedback=False, progress=False)
        grade_submissions(seq, A, {"dev": again}, feedback=False, progress=False)
        seq.export_csv(tmp_path / "seq.csv")

        par = Course(tmp_path / "par", release_dir=tmp_path / "par" / "release", extra=dict(extra))
        par.generate_assignment(A)
        res = grade_parallel(par, [Task(A, s, str(p)) for s, p in files.items()], workers=2,
                             feedback=False, verdict=False, progress=False)
        assert {r.shard for r in res} == {0, 1}, "both workers graded"
        grade_parallel(par, [Task(A, "dev", str(again))], workers=2, feedback=False, verdict=False,
                       progress=False)
    par.export_csv(tmp_path / "par.csv")

    assert [(r.row.student, r.row.score, r.row.status) for r in res] == \
           [(r.student, r.score, r.status) for r in rows_seq]
    assert gradebook_dump(par.db) == gradebook_dump(seq.db)
    assert _csv(tmp_path / "par.csv") == _csv(tmp_path / "seq.csv")
    for s in files:                                      # the per-student folders were merged too
        assert (par.root / "autograded" / s / A / f"{A}.ipynb").exists()
    assert (par.root / "originals" / "hana" / A).exists()
