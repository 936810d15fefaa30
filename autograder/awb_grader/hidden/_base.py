"""Shared pieces of the hidden checks (never shown to students: feedback shows only the call)."""

from __future__ import annotations

import torch

from attention_workbook.checks.core import CheckFailed, as_int, close, guard, max_abs_diff
from attention_workbook.checks.core import call as _call

__all__ = ["CheckFailed", "as_int", "call", "close", "guard", "max_abs_diff", "rng", "randint", "own_code",
           "fail_values"]


def call(fn, *args, name: str | None = None, **kwargs):
    """core.call, with failures labelled as hidden tests (the student sees which kind failed)."""
    try:
        return _call(fn, *args, name=name, **kwargs)
    except CheckFailed as e:
        if e.title.startswith("hidden test"):
            raise
        raise CheckFailed("hidden test: " + e.title, hint=e.hint, reread=e.reread, details=e.details,
                          student_tb=e.student_tb) from None


def rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randint(g: torch.Generator, lo: int, hi: int) -> int:
    """Uniform integer in [lo, hi] from the check's own generator (deterministic grading)."""
    return int(torch.randint(lo, hi + 1, (1,), generator=g))


def own_code(fn, name: str) -> None:
    """The graded function must be the student's, not a reference imported from our package."""
    mod = getattr(fn, "__module__", "") or ""
    if mod.startswith("attention_workbook") or mod.startswith("awb_grader") or mod.startswith("torch"):
        raise CheckFailed(f"hidden test: {name} is imported from {mod}, not written in the notebook",
                          hint="the exercise grades your own implementation")


def fail_values(what: str, got: torch.Tensor, want: torch.Tensor, case: str, tol: str) -> None:
    if tuple(got.shape) != tuple(want.shape):
        raise CheckFailed(f"hidden test: {what} has shape {tuple(got.shape)}, expected {tuple(want.shape)}",
                          details=[f"case: {case}"])
    raise CheckFailed(f"hidden test: {what} differs from the reference",
                      details=[f"case: {case}", f"max abs error {max_abs_diff(got, want):.3g} (tolerance {tol})"])
