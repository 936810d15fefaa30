"""The protected grading core: nbgrader's course, its plugins (kernel manager, autograde
preprocessors), the gradebook writes, the records and statuses every door reports."""
