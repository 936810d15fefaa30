"""``FlagSubmission``: after ``SaveAutoGrades``, a flagged submission is flagged in nbgrader's gradebook."""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from ..metadata import META


class FlagSubmission(NbGraderPreprocessor):
    """After ``SaveAutoGrades``: a flagged submission is flagged in nbgrader's gradebook too, and
    a student nbgrader created with no name gets the id as name (formgrader shows "last, first":
    "None, None" otherwise; ``core.gradebook.name_students``)."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook

        from ..gradebook import name_students

        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            name_students(gb, [info["student"]])
            if nb.metadata.get(META, {}).get("status") == "flagged":
                gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"]).flagged = True
            gb.db.commit()
        return nb, resources
