"""The toolbox every check imports (visible ``checks.exNN`` and hidden ``awb_grader.hidden.exNN``).

This module runs student code: :func:`call` (any exception becomes a short ``CheckFailed`` that
names it; warnings are recorded, never printed; a graded item that delegates to the workbook's
reference fails at once) and :func:`forbid` (a built-in the exercise rules out). The rest of the
toolbox lives in one module per concern and is importable from here too (``core.expect_close``):

* ``failure``: ``CheckFailed`` (the short rendering), ``ForbiddenCall``, ``passed``;
* ``reread``: the "Reread" line as links to the lecture section;
* ``capture``: warnings recorded inside the checks (``guard``, ``guarded``, ``explain_warnings``);
* ``integers``: the one rule for integer answers (``as_int``, ``expect_int``);
* ``compare``: tensors against the expected ones (``expect_shape``, ``close``, ``expect_close``,
  ``first_match``).
"""

from __future__ import annotations

import contextlib
import linecache
import sys
import traceback
import warnings
from typing import Any, Callable

import torch

from .capture import (CAPTURED, WARNING_HINTS, _RECENT, _count, explain_warnings, guard,  # noqa: F401
                      guarded)
from .compare import close, expect_close, expect_shape, expect_tensor, first_match, max_abs_diff  # noqa: F401
from .failure import BOLD, GREEN, RED, RESET, CheckFailed, ForbiddenCall, passed  # noqa: F401
from .integers import INT_RULE, as_int, expect_int  # noqa: F401
from .reread import reread_html, reread_links, show_reread_links  # noqa: F401


# ----------------------------------------------------------------------------------------
# calling student code
# ----------------------------------------------------------------------------------------
def _student_frames(tb) -> list[str]:
    """Frames of a traceback that belong to notebook cells (student code), formatted short."""
    lines = []
    for fs in traceback.extract_tb(tb):
        fn = fs.filename
        if "ipykernel_" in fn or fn.startswith("<ipython-input") or fn.startswith("<cell"):
            src = (fs.line or linecache.getline(fn, fs.lineno) or "").strip()
            lines.append(f"in {fs.name}, line {fs.lineno}: {src}")
    return lines[-4:]


def call(fn: Callable, *args, name: str | None = None, reread: str | None = None, **kwargs) -> Any:
    """Call student code; turn any exception into a short CheckFailed that names it."""
    name = name or getattr(fn, "__name__", "your function")
    with warnings.catch_warnings(record=True) as seen:   # student warnings: recorded, never printed
        warnings.simplefilter("always")
        _own_work(fn, name)
        try:
            return fn(*args, **kwargs)
        except CheckFailed as e:
            explain_warnings(e, seen)
            raise
        except ForbiddenCall as e:
            raise CheckFailed(f"{name} called a built-in that this exercise rules out",
                              hint=str(e), reread=reread) from None
        except NotImplementedError:
            raise CheckFailed(f"{name} is not implemented yet",
                              hint="replace `raise NotImplementedError()` with your code, run that cell, then this one",
                              reread=reread) from None
        except Exception as e:  # noqa: BLE001 - any student error becomes a hint
            tb = _student_frames(sys.exc_info()[2])
            err = CheckFailed(f"{name} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                              hint=_hint_for_exception(e), reread=reread, student_tb=tb)
            explain_warnings(err, seen)
            raise err from None
        finally:
            _count(seen)
            _RECENT.extend(seen)    # a later failure of the check may be explained by them


def _own_work(fn: Callable, name: str) -> None:
    """A graded item that delegates to the workbook's reference implementation fails at once
    (see ``own.py``; the grader decides the same outside the student's process)."""
    from . import own

    own.check(fn, name)


def _hint_for_exception(e: Exception) -> str | None:
    msg = str(e)
    if "must match the size" in msg or "cannot be multiplied" in msg or "mat1 and mat2" in msg:
        return "a shape mismatch: write the shape of every tensor next to each line, e.g. # (B, T, d)"
    if "expected scalar type" in msg or "dtype" in msg:
        return "a dtype mismatch: masks are bool, scores are floating point"
    if isinstance(e, (NameError,)):
        return "a name is not defined: did you run every cell above this one?"
    return None


# ----------------------------------------------------------------------------------------
# built-ins an exercise rules out
# ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def forbid(targets: list[tuple[Any, str]], why: str):
    """Temporarily replace ``getattr(owner, attr)`` for each (owner, attr) with a function that
    raises ForbiddenCall(why). Used to say "write it yourself" when a built-in is called."""
    saved = []
    for owner, attr in targets:
        if hasattr(owner, attr):
            saved.append((owner, attr, getattr(owner, attr)))

            def _blocked(*a, _attr=attr, **k):
                raise ForbiddenCall(f"{why} (you called {_attr})")

            setattr(owner, attr, _blocked)
    try:
        yield
    finally:
        for owner, attr, orig in reversed(saved):
            setattr(owner, attr, orig)


def softmax_builtins() -> list[tuple[Any, str]]:
    import torch.nn.functional as F

    return [(torch, "softmax"), (F, "softmax"), (torch.Tensor, "softmax"), (torch.special, "softmax"),
            (torch, "log_softmax"), (F, "log_softmax"), (torch.Tensor, "log_softmax")]
