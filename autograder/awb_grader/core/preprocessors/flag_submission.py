"""``FlagSubmission``: after ``SaveAutoGrades``, a flagged submission is flagged in nbgrader's gradebook."""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from ..metadata import META


class FlagSubmission(NbGraderPreprocessor):
    """After ``SaveAutoGrades``: a flagged submission is flagged in nbgrader's gradebook too (and a
    regraded one that is no longer flagged is not), and
    a student nbgrader created with no name gets the id as name (formgrader shows "last, first":
    "None, None" otherwise; ``core.gradebook.name_students``)."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook, MissingEntry

        from ..gradebook import name_students

        info = resources["nbgrader"]
        flagged = nb.metadata.get(META, {}).get("status") == "flagged"
        with Gradebook(info["db_url"]) as gb:
            name_students(gb, [info["student"]])
            try:
                sub = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
            except MissingEntry:
                if flagged:
                    raise
            else:
                # this grading's verdict, over an earlier one's: nbgrader keeps the flag of a regraded
                # submission, and a grade whose kernel an accident killed stayed flagged once regraded
                sub.flagged = flagged
            gb.db.commit()
        return nb, resources
