"""The autograde preprocessors the course adds to nbgrader's list (one class per module)."""
