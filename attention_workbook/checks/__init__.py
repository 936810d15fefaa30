"""Visible checks: what students run in the exercise notebooks.

``core`` holds the machinery (short failure messages, safe calls into student code); each
``exNN`` module holds the checks of one exercise notebook.
"""

from .core import CheckFailed, ForbiddenCall  # noqa: F401
