"""Comparing a student's tensor with the expected one: type, shape, values (allclose written
out, NaN where the reference has NaN), and naming the known-wrong variant it equals."""

from __future__ import annotations

import math
from typing import Any

import torch

from .failure import CheckFailed


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
