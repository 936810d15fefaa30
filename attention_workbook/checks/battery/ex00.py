"""Battery for exercise 00 (tensor shape drills): random shapes, oracles built from indexing.

Oracles: ``torch.einsum`` written on single elements is what the exercise practises, so the
oracles here use other routes: broadcasting products summed over an axis, ``unbind``/``stack``
and ``torch.cat`` of slices, and explicit means.
"""

from __future__ import annotations

import torch

from .. import ex00 as visible
from ..core import forbid
from ._util import CheckFailed, call, exact, expect, guard, randint, tensor


def _pairwise(x):                        # (B, T, C) -> (B, T, T): broadcast products summed over C
    xd = x.double()
    return (xd[:, :, None, :] * xd[:, None, :, :]).sum(-1).float()


def pairwise_dots_shape(pairwise_dots, g) -> None:
    for _ in range(5):
        B, T, C = randint(g, 1, 5), randint(g, 1, 8), randint(g, 1, 10)
        out = tensor(call(pairwise_dots, torch.randn(B, T, C, generator=g), name="pairwise_dots"), "pairwise_dots")
        if tuple(out.shape) != (B, T, T):
            raise CheckFailed("pairwise_dots has the wrong shape",
                              details=[f"case: x ({B}, {T}, {C}); expected ({B}, {T}, {T}), got {tuple(out.shape)}"])


def pairwise_dots_values(pairwise_dots, g) -> None:
    for _ in range(5):
        B, T, C = randint(g, 1, 4), randint(g, 2, 7), randint(g, 1, 7)
        if T == C:
            C += 1
        x = torch.randn(B, T, C, generator=g)
        out = call(pairwise_dots, x, name="pairwise_dots")
        expect(out, _pairwise(x), "pairwise_dots(x)", f"x {(B, T, C)}")


def _split(x, n):
    hs = x.shape[-1] // n
    return torch.stack([x[..., i * hs:(i + 1) * hs] for i in range(n)], dim=-2)


def _split_case(g, lo_dims=0):
    lead = tuple(randint(g, 1, 4) for _ in range(randint(g, lo_dims, 3)))
    n, hs = randint(g, 1, 6), randint(g, 1, 6)
    if n == hs:
        hs += 1
    return lead, n, hs


def split_last_shape(split_last, g) -> None:
    for _ in range(6):
        lead, n, hs = _split_case(g)
        out = tensor(call(split_last, torch.randn(*lead, n * hs, generator=g), n, name="split_last"), "split_last")
        if tuple(out.shape) != (*lead, n, hs):
            raise CheckFailed(
                "split_last has the wrong shape",
                details=[f"case: x {(*lead, n * hs)}, n={n}; expected {(*lead, n, hs)}, got {tuple(out.shape)}"],
            )


def split_last_values(split_last, g) -> None:
    for case in range(6):
        lead, n, hs = _split_case(g, 0 if case < 3 else 2)
        x = torch.randn(*lead, n * hs, generator=g)
        if case >= 3:   # a non-contiguous view, as attention produces
            x = torch.randn(*lead[:-2], lead[-1], lead[-2], n * hs, generator=g).transpose(-2, -3)
        out = call(split_last, x, n, name="split_last")
        exact(out, _split(x, n), "split_last(x, n)",
              f"x {tuple(x.shape)}{' (non-contiguous)' if not x.is_contiguous() else ''}, n={n}")


def split_last_error(split_last, g) -> None:
    for _ in range(4):
        n = randint(g, 2, 6)
        D = n * randint(g, 1, 4) + randint(g, 1, n - 1)
        x = torch.randn(randint(g, 1, 3), D, generator=g)
        try:
            split_last(x, n)
        except ValueError:
            continue
        except Exception as e:  # noqa: BLE001
            raise CheckFailed(f"split_last(x of last size {D}, n={n}) raised {type(e).__name__}, not ValueError",
                              reread=visible.SEC_RESHAPE if hasattr(visible, "SEC_RESHAPE") else None) from None
        raise CheckFailed(
            f"split_last(x of last size {D}, n={n}) did not raise ValueError ({D} is not divisible by {n})"
        )
    n = randint(g, 2, 5)
    x = torch.randn(3, n * 3, generator=g)  # divisible: must not raise
    exact(
        call(split_last, x, n, name="split_last"),
        _split(x, n),
        "split_last(x, n)",
        f"x {tuple(x.shape)}, n={n} (divisible)",
    )


def _outer_case(g):
    B, m, n = randint(g, 2, 5), randint(g, 1, 7), randint(g, 1, 7)
    if m == n:
        n += 1
    return B, m, n


def batched_outer_shape(batched_outer, g) -> None:
    for _ in range(4):
        B, m, n = _outer_case(g)
        out = tensor(call(batched_outer, torch.randn(B, m, generator=g), torch.randn(B, n, generator=g),
                          name="batched_outer"), "batched_outer")
        if tuple(out.shape) != (B, m, n):
            raise CheckFailed(
                "batched_outer has the wrong shape",
                details=[f"case: a ({B}, {m}), b ({B}, {n}); expected ({B}, {m}, {n}), got {tuple(out.shape)}"],
            )


def batched_outer_values(batched_outer, g) -> None:
    for _ in range(4):
        B, m, n = _outer_case(g)
        a, b = torch.randn(B, m, generator=g), torch.randn(B, n, generator=g)
        want = (a.double()[:, :, None] * b.double()[:, None, :]).float()
        expect(
            call(batched_outer, a, b, name="batched_outer"), want, "batched_outer(a, b)", f"a ({B}, {m}), b ({B}, {n})"
        )


def _einsum_case(einsum_matmul, g, lead):
    n, k, m = randint(g, 1, 6), randint(g, 1, 7), randint(g, 1, 6)
    A, Bm = torch.randn(*lead, n, k, generator=g), torch.randn(*lead, k, m, generator=g)
    want = (A.double()[..., :, :, None] * Bm.double()[..., None, :, :]).sum(-2).float()
    with forbid(visible.matmul_builtins(), "einsum_matmul must use torch.einsum (no @, matmul, mm, bmm)"):
        out = call(einsum_matmul, A, Bm, name="einsum_matmul")
    expect(out, want, "einsum_matmul(A, B)", f"A {tuple(A.shape)}, B {tuple(Bm.shape)}")


def einsum_matmul_2d(einsum_matmul, g) -> None:
    for _ in range(5):
        _einsum_case(einsum_matmul, g, ())


def einsum_matmul_batched(einsum_matmul, g) -> None:
    for _ in range(4):
        _einsum_case(einsum_matmul, g, tuple(randint(g, 1, 3) for _ in range(randint(g, 1, 3))))


def center_tokens_values(center_tokens, g) -> None:
    cases = [(2, 5, 5), (1, 1, 3)] + [(randint(g, 1, 4), randint(g, 1, 7), randint(g, 2, 8)) for _ in range(3)]
    for B, T, C in cases:
        x = torch.randn(B, T, C, generator=g) * 2 - 3
        xd = x.double()
        want = (xd - xd.sum(-1, keepdim=True) / C).float()
        expect(call(center_tokens, x, name="center_tokens"), want, "center_tokens(x)", f"x {(B, T, C)}")


guard(globals())
