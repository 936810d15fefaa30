"""Hidden checks for exercise 00 (tensor shape drills): randomized shapes, independent oracles.

Oracles are written element by element (Python loops over indices, float64), never with the
reshape/transpose/einsum a solution would use. Seeds are fixed (grading is deterministic).
Tolerance: atol 1e-5 + rtol 1e-4 (float32 inputs), exact equality for pure data movement.
"""

from __future__ import annotations

import itertools

import torch

from attention_workbook.checks.ex00 import matmul_builtins

from ._adapter import forbid
from ._base import guard, CheckFailed, call, close, fail_values, own_code, randint, rng

TOL = "atol 1e-5 + rtol 1e-4"


def _tensor(out, what):
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"hidden test: {what} did not return a tensor")
    return out


def _exact(got, want, what, case):
    if tuple(got.shape) != tuple(want.shape) or not torch.equal(got.to(want.dtype), want):
        fail_values(what, got, want, case, "exact: pure data movement")


# ----------------------------------------------------------------------------------------
def _pairwise_oracle(x):
    B, T, C = x.shape
    out = torch.zeros(B, T, T, dtype=torch.float64)
    xd = x.double()
    for b in range(B):
        for i in range(T):
            for j in range(T):
                out[b, i, j] = sum(float(xd[b, i, c]) * float(xd[b, j, c]) for c in range(C))
    return out


def pairwise_dots_shape(pairwise_dots) -> None:
    own_code(pairwise_dots, "pairwise_dots")
    g = rng(1)
    for _ in range(4):
        B, T, C = randint(g, 1, 4), randint(g, 1, 7), randint(g, 1, 9)
        out = _tensor(call(pairwise_dots, torch.randn(B, T, C, generator=g), name="pairwise_dots"), "pairwise_dots")
        if tuple(out.shape) != (B, T, T):
            raise CheckFailed("hidden test: pairwise_dots has the wrong shape",
                              details=[f"case: x ({B}, {T}, {C}); expected ({B}, {T}, {T}), got {tuple(out.shape)}"])


def pairwise_dots_values(pairwise_dots) -> None:
    g = rng(2)
    for _ in range(4):
        B, T, C = randint(g, 1, 3), randint(g, 2, 6), randint(g, 1, 6)
        while T == C:
            C = randint(g, 1, 6)
        x = torch.randn(B, T, C, generator=g)
        out = _tensor(call(pairwise_dots, x, name="pairwise_dots"), "pairwise_dots")
        want = _pairwise_oracle(x).float()
        if not close(out, want):
            fail_values("pairwise_dots(x)", out, want, f"x of shape {(B, T, C)}", TOL)


# ----------------------------------------------------------------------------------------
def _split_oracle(x, n):
    D = x.shape[-1]
    hs = D // n
    lead = tuple(x.shape[:-1])
    out = torch.zeros(*lead, n, hs, dtype=x.dtype)
    for idx in itertools.product(*[range(s) for s in lead]):
        for i in range(n):
            for c in range(hs):
                out[idx + (i, c)] = x[idx + (i * hs + c,)]
    return out


def _random_split_case(g, lo_dims=0, hi_dims=3):
    lead = tuple(randint(g, 1, 4) for _ in range(randint(g, lo_dims, hi_dims)))
    n, hs = randint(g, 1, 5), randint(g, 1, 5)
    while n == hs:
        hs = randint(g, 1, 5)
    return lead, n, hs


def split_last_shape(split_last) -> None:
    own_code(split_last, "split_last")
    g = rng(3)
    for _ in range(6):
        lead, n, hs = _random_split_case(g)
        x = torch.randn(*lead, n * hs, generator=g)
        out = _tensor(call(split_last, x, n, name="split_last"), "split_last")
        if tuple(out.shape) != (*lead, n, hs):
            raise CheckFailed(
                "hidden test: split_last has the wrong shape",
                details=[f"case: x {tuple(x.shape)}, n={n}; expected {(*lead, n, hs)}, got {tuple(out.shape)}"],
            )


def split_last_values(split_last) -> None:
    g = rng(4)
    for case in range(6):
        lead, n, hs = _random_split_case(g, 0 if case < 3 else 2)
        x = torch.randn(*lead, n * hs, generator=g)
        if case >= 3:       # non-contiguous input: a transposed view
            x = torch.randn(*lead[:-2], lead[-1], lead[-2], n * hs, generator=g).transpose(-2, -3)
        out = _tensor(call(split_last, x, n, name="split_last"), "split_last")
        _exact(out, _split_oracle(x, n), "split_last(x, n)",
               f"x {tuple(x.shape)}{' (non-contiguous)' if not x.is_contiguous() else ''}, n={n}")


def split_last_error(split_last) -> None:
    g = rng(5)
    for _ in range(3):
        n = randint(g, 2, 5)
        D = n * randint(g, 1, 4) + randint(g, 1, n - 1)
        x = torch.randn(randint(g, 1, 3), D, generator=g)
        try:
            split_last(x, n)
        except ValueError:
            continue
        except Exception as e:  # noqa: BLE001
            raise CheckFailed(
                f"hidden test: split_last(D={D}, n={n}) raised {type(e).__name__}, not ValueError"
            ) from None
        raise CheckFailed(f"hidden test: split_last(D={D}, n={n}) did not raise ValueError")
    x = torch.randn(2, 12, generator=g)     # divisible: must not raise
    out = _tensor(call(split_last, x, 4, name="split_last"), "split_last")
    _exact(out, _split_oracle(x, 4), "split_last(x, 4)", "x (2, 12), n=4 (divisible)")


# ----------------------------------------------------------------------------------------
def _outer_oracle(a, b):
    B, m = a.shape
    n = b.shape[1]
    out = torch.zeros(B, m, n, dtype=torch.float64)
    for k in range(B):
        for i in range(m):
            for j in range(n):
                out[k, i, j] = float(a[k, i]) * float(b[k, j])
    return out


def _outer_case(g):
    B, m, n = randint(g, 1, 5), randint(g, 1, 6), randint(g, 1, 6)
    while m == n:
        n = randint(g, 1, 6)
    return B, m, n


def batched_outer_shape(batched_outer) -> None:
    own_code(batched_outer, "batched_outer")
    g = rng(6)
    for _ in range(4):
        B, m, n = _outer_case(g)
        out = _tensor(call(batched_outer, torch.randn(B, m, generator=g), torch.randn(B, n, generator=g),
                           name="batched_outer"), "batched_outer")
        if tuple(out.shape) != (B, m, n):
            raise CheckFailed(
                "hidden test: batched_outer has the wrong shape",
                details=[f"case: a ({B}, {m}), b ({B}, {n}); expected ({B}, {m}, {n}), got {tuple(out.shape)}"],
            )


def batched_outer_values(batched_outer) -> None:
    g = rng(7)
    for _ in range(4):
        B, m, n = _outer_case(g)
        B = max(B, 2)
        a, b = torch.randn(B, m, generator=g), torch.randn(B, n, generator=g)
        out = _tensor(call(batched_outer, a, b, name="batched_outer"), "batched_outer")
        want = _outer_oracle(a, b).float()
        if not close(out, want):
            fail_values("batched_outer(a, b)", out, want, f"a ({B}, {m}), b ({B}, {n})", TOL)


# ----------------------------------------------------------------------------------------
def _matmul_oracle(A, B):
    lead = tuple(A.shape[:-2])
    n, k = A.shape[-2:]
    m = B.shape[-1]
    out = torch.zeros(*lead, n, m, dtype=torch.float64)
    for idx in itertools.product(*[range(s) for s in lead]):
        for i in range(n):
            for j in range(m):
                out[idx + (i, j)] = sum(float(A[idx + (i, c)]) * float(B[idx + (c, j)]) for c in range(k))
    return out


def _einsum_case(einsum_matmul, g, lead):
    n, k, m = randint(g, 1, 5), randint(g, 1, 6), randint(g, 1, 5)
    A, Bm = torch.randn(*lead, n, k, generator=g), torch.randn(*lead, k, m, generator=g)
    with forbid(matmul_builtins(), "einsum_matmul must use torch.einsum (no @, matmul, mm, bmm)"):
        out = _tensor(call(einsum_matmul, A, Bm, name="einsum_matmul"), "einsum_matmul")
    want = _matmul_oracle(A, Bm).float()
    if not close(out, want):
        fail_values("einsum_matmul(A, B)", out, want, f"A {tuple(A.shape)}, B {tuple(Bm.shape)}", TOL)


def einsum_matmul_2d(einsum_matmul) -> None:
    own_code(einsum_matmul, "einsum_matmul")
    g = rng(8)
    for _ in range(5):
        _einsum_case(einsum_matmul, g, ())


def einsum_matmul_batched(einsum_matmul) -> None:
    g = rng(9)
    for _ in range(4):
        lead = tuple(randint(g, 1, 3) for _ in range(randint(g, 1, 3)))
        _einsum_case(einsum_matmul, g, lead)


# ----------------------------------------------------------------------------------------
def _center_oracle(x):
    B, T, C = x.shape
    out = torch.zeros(B, T, C, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            mean = sum(float(x[b, t, c]) for c in range(C)) / C
            for c in range(C):
                out[b, t, c] = float(x[b, t, c]) - mean
    return out


def center_tokens_values(center_tokens) -> None:
    own_code(center_tokens, "center_tokens")
    g = rng(12)
    cases = [(1, 4, 4), (3, 3, 3)] + [(randint(g, 1, 4), randint(g, 1, 6), randint(g, 2, 7)) for _ in range(3)]
    for B, T, C in cases:
        x = torch.randn(B, T, C, generator=g) * 3 + 2
        out = _tensor(call(center_tokens, x, name="center_tokens"), "center_tokens")
        want = _center_oracle(x).float()
        if not close(out, want):
            fail_values("center_tokens(x)", out, want, f"x of shape {(B, T, C)}", TOL)


guard(globals())  # every check records warnings instead of printing them (core.guard)
