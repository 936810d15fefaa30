"""Isolation of student code: the bubblewrap sandbox and its limits (the grading kernel's launcher),
and what each exercise provides inside it."""
