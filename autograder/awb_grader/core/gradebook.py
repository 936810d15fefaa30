"""Every write into nbgrader's gradebook, through nbgrader's own ``Gradebook`` API, and what
formgrader shows of it (``tests/test_formgrader.py`` reads it in a real browser).

* **Readable names.** Formgrader writes a student as "last name, first name", and "None, None"
  for a student nbgrader created with no name (``nbgrader autograde`` does: it only knows the
  id). A student these tools place in a gradebook gets the id as last name (and an empty first
  name), unless the gradebook already has a name (``nbgrader db student import`` sets real ones).
* **Ungradable submissions.** A file that is not a notebook never reaches nbgrader's autograde,
  so formgrader only listed it as "needs autograding" (its own autograde fails on it). It is
  recorded as graded instead: a submission in the gradebook with every graded cell at 0 and its
  notebook **flagged**, and, as its autograded notebook, the release with a first cell that
  says why it could not be graded (formgrader lists a notebook only where that file exists, and
  shows it when the instructor opens the submission). The file as submitted stays in
  ``submitted/``.
* **One submission, as plain data** (:func:`submission_data`, :func:`store_submission`): what
  the grading workers and the cluster's shards hand back, written into the course's gradebook.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path

from .metadata import META

UNGRADABLE_TITLE = "Not graded: this submission could not be read"


@contextmanager
def nbgrader_quirks_silenced():
    """Silence two warnings that nbgrader's own code raises while autograding and that say
    nothing about the submission or the course (each filtered by its message and module):

    * SQLAlchemy 2's ``SAWarning: Object of type <SubmittedAssignment> not in session``:
      ``Gradebook.add_submission`` builds the submission's rows, reads a relationship (an
      autoflush) and only then ``session.add``s them, which it does: nothing is lost;
    * nbformat's ``MissingIDFieldWarning``: the test cell nbgrader adds back when a student
      deleted it (``OverwriteCells.add_missing_cells``) is built without a cell id, which
      nbformat then gives it.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Object of type <Submitted\w+> not in session",
                                module=r"nbgrader\.api")
        warnings.filterwarnings("ignore", message="Cell is missing an id field", module=r"nbformat\.validator")
        yield


def readable_name(student: str, names: dict | None = None) -> dict:
    """``names`` ({first_name, last_name, ...}) with the id as last name where both are empty."""
    names = dict(names or {})
    if not names.get("last_name") and not names.get("first_name"):
        names.update(last_name=student, first_name="")
    return names


def name_students(gb, students) -> None:
    """Give each student in ``students`` a readable name in gradebook ``gb`` (creating the
    student if needed); a name already there is kept. The caller commits."""
    from nbgrader.api import MissingEntry

    for s in students:
        try:
            st = gb.find_student(s)
        except MissingEntry:
            gb.add_student(s, **readable_name(s))
            continue
        if not st.last_name and not st.first_name:
            st.last_name, st.first_name = s, ""


def reason_notebook(release_nb: Path, student: str, assignment: str, reasons: list[str]):
    """The release notebook (its graded cells, unanswered) under a first cell that says why the
    submission could not be graded."""
    import nbformat
    from nbformat.v4 import new_markdown_cell

    nb = nbformat.read(release_nb, as_version=4)
    why = "\n".join(f"- {r}" for r in reasons) or "- (no reason recorded)"
    nb.cells.insert(0, new_markdown_cell(
        f"## {UNGRADABLE_TITLE}\n\n{why}\n\nEvery graded cell scores 0 and the submission is flagged. "
        f"The file as submitted is kept in `submitted/{student}/{assignment}/`; the cells below are the "
        f"release's, not the student's. A readable resubmission is graded by the next run."))
    nb.metadata[META] = {"status": "ungradable", "reasons": list(reasons), "withheld": {}}
    return nb


def record_ungradable(course, assignment: str, student: str, reasons: list[str]) -> None:
    """Record an ungradable submission in ``course``'s gradebook as a flagged 0 (over any
    earlier grade), and write its autograded notebook (:func:`reason_notebook`)."""
    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory

    submitted = course.path("submitted", student, assignment)
    timestamp = CourseDirectory().get_existing_timestamp(str(submitted))   # as nbgrader's autograde reads it
    dest = course.path("autograded", student, assignment)
    dest.mkdir(parents=True, exist_ok=True)
    nbformat.write(reason_notebook(course.release_root / assignment / f"{assignment}.ipynb", student, assignment,
                                   reasons), dest / f"{assignment}.ipynb")
    with Gradebook(course.db) as gb, nbgrader_quirks_silenced():
        name_students(gb, [student])
        kw = {"timestamp": timestamp} if timestamp else {}
        sub = gb.update_or_create_submission(assignment, student, **kw)
        for nb in sub.notebooks:
            nb.flagged = True
            for g in nb.grades:
                g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade = 0.0, None, None, False
            for c in nb.comments:
                c.auto_comment, c.manual_comment = None, None
        gb.db.commit()


def submission_data(gb, assignment: str, student: str) -> dict | None:
    """Everything nbgrader recorded for one submission, as plain data (None if nothing)."""
    from nbgrader.api import MissingEntry

    try:
        sub = gb.find_submission(assignment, student)
    except MissingEntry:
        return None
    st = sub.student
    return {
        "student": {"first_name": st.first_name, "last_name": st.last_name, "email": st.email,
                    "lms_user_id": st.lms_user_id},
        "timestamp": sub.timestamp, "extension": sub.extension,
        "notebooks": [{"name": nb.name, "flagged": nb.flagged, "late_submission_penalty": nb.late_submission_penalty,
                       "grades": [(g.name, g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                                  for g in nb.grades],
                       "comments": [(c.name, c.auto_comment, c.manual_comment) for c in nb.comments]}
                      for nb in sub.notebooks],
    }


def store_submission(dst, assignment: str, student: str, data: dict) -> None:
    """Write :func:`submission_data` into gradebook ``dst`` (over an earlier grade, if any)."""
    from nbgrader.api import MissingEntry

    dst.update_or_create_student(student, **data["student"])
    try:
        d_sub = dst.find_submission(assignment, student)
        d_sub.timestamp = data["timestamp"]
    except MissingEntry:
        with nbgrader_quirks_silenced():
            d_sub = dst.add_submission(assignment, student, timestamp=data["timestamp"])
    d_sub.extension = data["extension"]
    for nb in data["notebooks"]:
        d_nb = dst.find_submission_notebook(nb["name"], assignment, student)
        d_nb.flagged = nb["flagged"]
        d_nb.late_submission_penalty = nb["late_submission_penalty"]
        for name, auto, manual, extra, needs in nb["grades"]:
            dg = dst.find_grade(name, nb["name"], assignment, student)
            dg.auto_score, dg.manual_score, dg.extra_credit, dg.needs_manual_grade = auto, manual, extra, needs
        for name, auto, manual in nb["comments"]:
            dc = dst.find_comment(name, nb["name"], assignment, student)
            dc.auto_comment, dc.manual_comment = auto, manual
    dst.db.commit()
