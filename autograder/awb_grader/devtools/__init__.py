"""The developers' and the course author's tools, never on the path of a grade: the demo, synthetic
cohorts, the release and its generated facts, variants of the solutions graded for the tests."""
