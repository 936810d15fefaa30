"""Attention Workbook helper package.

What the notebooks import: the visible checks students run (``attention_workbook.checks``),
plotting helpers (``attention_workbook.plotting``) and the reference models the lectures
build on. The hidden checks and their oracles live in ``autograder/``, not here.
"""

__version__ = "0.1.0"
