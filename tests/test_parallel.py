"""Parallel grading in shards merged into one gradebook == a sequential run, cell by cell,
including a regrade of a resubmission over an existing grade; a grade the merge cannot record
flags that student, not the batch."""

import csv

import nbformat
import pytest

from awb_grader import catalog
from awb_grader.core.course import EXERCISES, Course
from awb_grader.cohort.parallel import Task, grade_parallel
from awb_grader.devtools.compare import gradebook_dump
from awb_grader.cohort.pipeline import grade_submissions
from awb_grader.devtools.variants import own_settings, student_notebook

A = "04_queries_keys_values"
RELEASE = EXERCISES / A / f"{A}.ipynb"



def _csv(path):
    with open(path) as fh:
        return sorted(tuple(r.items()) for r in csv.DictReader(fh))


@pytest.mark.slow
@pytest.mark.xdist_group("cohort")
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

    # both graded as a student's upload is: each kernel and replay forked from a zygote (the
    # sequential run's in this process, each shard worker's its own)
    seq = Course(tmp_path / "seq", release_dir=tmp_path / "seq" / "release", extra=own_settings())
    seq.generate_assignment(A)
    rows_seq = grade_submissions(seq, A, files, feedback=False, progress=False)
    grade_submissions(seq, A, {"dev": again}, feedback=False, progress=False)
    seq.export_csv(tmp_path / "seq.csv")

    par = Course(tmp_path / "par", release_dir=tmp_path / "par" / "release", extra=own_settings())
    par.generate_assignment(A)
    res = grade_parallel(par, [Task(A, s, str(p)) for s, p in files.items()], workers=2,
                         feedback=False, progress=False)
    assert {r.worker for r in res} == {0, 1}, "both workers graded"
    grade_parallel(par, [Task(A, "dev", str(again))], workers=2, feedback=False,
                   progress=False)
    par.export_csv(tmp_path / "par.csv")

    assert [(r.student, r.score, r.status) for r in res] == \
           [(r.student, r.score, r.status) for r in rows_seq]
    assert gradebook_dump(par.db) == gradebook_dump(seq.db)
    assert _csv(tmp_path / "par.csv") == _csv(tmp_path / "seq.csv")
    for s in files:                                      # the per-student folders were merged too
        assert (par.root / "autograded" / s / A / f"{A}.ipynb").exists()
    assert (par.root / "originals" / "hana" / A).exists()


def test_merge_records_a_submission_or_flags_it_and_keeps_the_batch_going(tmp_path, monkeypatch):
    """The main process merges each result as it comes back (``cohort.merge.merge_one``): the
    worker's record of the submission lands in the main gradebook unchanged; a grade that cannot
    be recorded flags that student (to grade again: no autograded copy is kept), not the batch."""
    import shutil

    from nbgrader.api import Gradebook

    from awb_grader.cohort import merge
    from awb_grader.core.gradebook import nbgrader_quirks_silenced, submission_data
    from awb_grader.core.records import Record

    main = Course(tmp_path / "main", release_dir=tmp_path / "main" / "release")
    main.generate_assignment(A)
    shard = tmp_path / "main" / "shards" / "w0"
    shard.mkdir(parents=True)
    shutil.copyfile(tmp_path / "main" / "gradebook.db", shard / "gradebook.db")
    results = {}
    with Gradebook(f"sqlite:///{shard / 'gradebook.db'}") as src:
        for s in ("ada", "bob"):
            src.add_student(s, first_name=s.title())
            with nbgrader_quirks_silenced():
                sub = src.add_submission(A, s)
            for i, g in enumerate(sub.notebooks[0].grades):
                g.auto_score = i % 3                       # something to copy, cell by cell
            src.db.commit()
            for step in ("autograded", "feedback"):
                (shard / step / s / A).mkdir(parents=True)
                (shard / step / s / A / "x.txt").write_text(s)
            results[s] = Record(A, s, worker=0, gradebook=submission_data(src, A, s))
    expected = [x for x in gradebook_dump(f"sqlite:///{shard / 'gradebook.db'}") if x[1] == "ada"]

    real = merge.store_submission

    def store(gb, assignment, student, data):
        if student == "bob":
            raise OSError("disk full")
        return real(gb, assignment, student, data)

    monkeypatch.setattr(merge, "store_submission", store)
    with Gradebook(main.db) as gb:
        for s in ("ada", "bob"):
            merge.merge_one(main, results[s], gb)

    assert [x for x in gradebook_dump(main.db) if x[1] == "ada"] == expected
    assert not [x for x in gradebook_dump(main.db) if x[1] == "bob"]
    assert (main.root / "autograded" / "ada" / A / "x.txt").read_text() == "ada"
    assert results["ada"].status == "ok" and not results["ada"].reasons
    bob = results["bob"]
    assert bob.status == "flagged" and "could not be recorded in the gradebook (OSError: disk full)" in bob.reasons[0]
    assert not (main.root / "autograded" / "bob" / A).exists()        # the next run grades bob again
