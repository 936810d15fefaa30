"""Visible checks: what students run in the exercise notebooks.

``core`` is the toolbox every check imports (safe calls into student code, and from its parts:
``failure`` short failure messages, ``reread`` links to the lecture, ``capture`` warnings,
``integers``, ``compare``); each ``exNN`` module holds the checks of one exercise notebook.
"""

from .core import CheckFailed, ForbiddenCall  # noqa: F401
