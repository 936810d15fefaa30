"""A cohort, graded: collection from an LMS download, check and repair of each upload, grading in
parallel shards and the one merge into the gradebook, the exports and the summary."""
