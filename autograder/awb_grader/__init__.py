"""The workbook's grading side: nbgrader course plumbing, submission checks, hidden checks,
the misconception catalog and the demo cohort. The hidden checks (``awb_grader.hidden``) run only
in the grader's process; the student's process reads nothing of this package but the replay's
own two modules (``replay.py``, ``replay_support.py``)."""
