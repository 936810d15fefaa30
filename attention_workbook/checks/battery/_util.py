"""Pieces shared by the battery's randomized checks (one generator per item, given as ``g``)."""

from __future__ import annotations

import torch

from ..core import CheckFailed, as_int, call, close, first_match, guard, max_abs_diff  # noqa: F401

TOL = "atol 1e-5 + rtol 1e-4"


def randint(g: torch.Generator, lo: int, hi: int) -> int:
    """Uniform integer in [lo, hi] from the item's generator."""
    return int(torch.randint(lo, hi + 1, (1,), generator=g))


def tensor(out, what: str, case: str = "") -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"{what} returned {type(out).__name__}, not a tensor",
                          details=[f"case: {case}"] if case else (),
                          hint="did you forget a `return`?" if out is None else None)
    return out


def mismatch(what: str, got, want: torch.Tensor, case: str, tol: str = TOL, hint: str | None = None,
             reread: str | None = None) -> CheckFailed:
    """The failure of one random case: shape or values, the case, the tolerance, the named mistake."""
    if not isinstance(got, torch.Tensor):
        return CheckFailed(f"{what} returned {type(got).__name__}, not a tensor", details=[f"case: {case}"])
    if tuple(got.shape) != tuple(want.shape):
        return CheckFailed(f"{what} has shape {tuple(got.shape)}, expected {tuple(want.shape)}",
                           details=[f"case: {case}"], hint=hint, reread=reread)
    return CheckFailed(f"{what} differs from the oracle", hint=hint, reread=reread,
                       details=[f"case: {case}", f"max |yours - oracle| = {max_abs_diff(got, want):.3g} ({tol})"])


def expect(got, want: torch.Tensor, what: str, case: str, *, atol: float = 1e-5, rtol: float = 1e-4,
           variants=None, reread: str | None = None) -> None:
    """``got`` close to ``want``, or a failure naming the mistake: ``variants`` is a dict
    {visible hint: wrong result} (or a function returning one), as the visible checks build them."""
    if isinstance(got, torch.Tensor) and close(got, want, atol, rtol):
        return
    hint = None
    if variants is not None and isinstance(got, torch.Tensor):
        try:
            cands = variants() if callable(variants) else variants
            hint = first_match(
                got, {k: v for k, v in cands.items() if isinstance(v, torch.Tensor)}, atol=max(atol, 1e-5)
            )
        except Exception:  # noqa: BLE001 - a variant that does not apply to this case names nothing
            hint = None
    raise mismatch(what, got, want, case, f"atol {atol:g} + rtol {rtol:g}", hint, reread)


def exact(got, want: torch.Tensor, what: str, case: str, variants=None, reread: str | None = None) -> None:
    if (
        isinstance(got, torch.Tensor)
        and tuple(got.shape) == tuple(want.shape)
        and torch.equal(got.to(want.dtype), want)
    ):
        return
    expect(got, want, what, case, atol=0.0, rtol=0.0, variants=variants, reread=reread)
