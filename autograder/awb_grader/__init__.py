"""The workbook's grading side: nbgrader course plumbing, submission checks, hidden checks,
the misconception catalog and the demo cohort. Kept light: hidden test cells import
``awb_grader.hidden.*`` inside the grading kernel."""
