"""Machinery shared by the visible checks (this package) and the hidden ones (autograder/).

A failed check raises :class:`CheckFailed`. IPython asks an exception for
``_render_traceback_()`` before formatting it, so a failure shows the student a short
hint (what went wrong, the likely mistake, the lecture section to reread) instead of a
long traceback into this package. nbgrader still sees an error and withholds the points.
"""

from __future__ import annotations

import contextlib
import linecache
import math
import sys
import traceback
from typing import Any, Callable, Iterable

import torch

RED, GREEN, BOLD, RESET = "\x1b[0;31m", "\x1b[0;32m", "\x1b[1m", "\x1b[0m"


class CheckFailed(AssertionError):
    """A check's verdict: ``title`` says what failed, ``hint`` the likely mistake,
    ``reread`` the lecture section, ``details`` extra lines (inputs, numbers)."""

    def __init__(self, title: str, hint: str | None = None, reread: str | None = None,
                 details: Iterable[str] = (), student_tb: list[str] | None = None):
        self.title, self.hint, self.reread = title, hint, reread
        self.details, self.student_tb = list(details), student_tb or []
        super().__init__(self.plain())

    def lines(self) -> list[str]:
        out = [f"{RED}{BOLD}Check failed:{RESET}{RED} {self.title}{RESET}"]
        out += [f"  {d}" for d in self.details]
        if self.student_tb:
            out.append("  Where it happened in your code:")
            out += [f"    {ln}" for ln in self.student_tb]
        if self.hint:
            out.append(f"{BOLD}Hint:{RESET} {self.hint}")
        if self.reread:
            out.append(f"{BOLD}Reread:{RESET} {self.reread}")
        return out

    def plain(self) -> str:
        text = "\n".join(self.lines())
        for code in (RED, GREEN, BOLD, RESET):
            text = text.replace(code, "")
        return text

    def _render_traceback_(self) -> list[str]:  # IPython hook: show this instead of a traceback
        return self.lines()


class ForbiddenCall(RuntimeError):
    pass


def passed(message: str) -> None:
    print(f"{GREEN}\u2714 {message}{RESET}")


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
    _own_work(fn, name)
    try:
        return fn(*args, **kwargs)
    except CheckFailed:
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
        raise CheckFailed(f"{name} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                          hint=_hint_for_exception(e), reread=reread, student_tb=tb) from None


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


def expect_tensor(out: Any, what: str, reread: str | None = None) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"{what} should return a torch.Tensor, got {type(out).__name__}",
                          hint="did you forget a `return`?" if out is None else None, reread=reread)
    return out


def expect_shape(out: torch.Tensor, shape, what: str, hint: str | None = None, reread: str | None = None,
                 inputs: str | None = None) -> None:
    if tuple(out.shape) != tuple(shape):
        details = [f"expected shape {tuple(shape)}, got {tuple(out.shape)}"]
        if inputs:
            details.insert(0, f"inputs: {inputs}")
        raise CheckFailed(f"{what} has the wrong shape", hint=hint, reread=reread, details=details)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.detach().double(), b.detach().double()
    both_inf = torch.isinf(a64) & torch.isinf(b64) & (torch.sign(a64) == torch.sign(b64))
    diff = (a64 - b64).abs()
    diff = torch.where(both_inf, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    return float(diff.max()) if diff.numel() else 0.0


def close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """allclose written out (so a notebook that patches torch.allclose changes nothing here)."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    a64, b64 = a.detach().double(), b.detach().double()
    nan_a, nan_b = torch.isnan(a64), torch.isnan(b64)
    if not torch.equal(nan_a, nan_b):  # nan in the same places counts as equal (e.g. fully masked rows)
        return False
    a64, b64 = a64.masked_fill(nan_a, 0.0), b64.masked_fill(nan_b, 0.0)
    return max_abs_diff(a64, b64) <= atol + rtol * float(b64.abs().nan_to_num(0, 0, 0).max() if b64.numel() else 0)


def expect_close(out: torch.Tensor, ref: torch.Tensor, what: str, hint: str | None = None,
                 reread: str | None = None, atol: float = 1e-5, rtol: float = 1e-4,
                 inputs: str | None = None) -> None:
    if not close(out, ref, atol, rtol):
        details = [f"max |yours - expected| = {max_abs_diff(out, ref):.3g} (tolerance {atol:g} + {rtol:g}*|expected|)"]
        if inputs:
            details.insert(0, f"inputs: {inputs}")
        raise CheckFailed(f"{what} has the wrong values", hint=hint, reread=reread, details=details)


def first_match(out: torch.Tensor, candidates: dict[str, torch.Tensor], atol: float = 1e-5) -> str | None:
    """Name of the first known-wrong result ``out`` equals (used to name the student's mistake)."""
    for name, cand in candidates.items():
        if tuple(cand.shape) == tuple(out.shape) and close(out, cand, atol=atol):
            return name
    return None
