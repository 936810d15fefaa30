"""The platforms a course may grade on besides its own machine: Gradescope, PrairieLearn, and the
harness they share (one upload, graded by the same nbgrader core, reported in the platform's terms)."""
