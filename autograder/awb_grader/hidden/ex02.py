"""Hidden checks for exercise 02 (hard_lookup, soft_lookup): randomized shapes, fixed seeds.

Oracles are written differently from the solution: the hard lookup scans the keys in a Python
loop with float64 dot products; the soft lookup builds its weights from a float64 einsum and an
explicit max-shifted exponential, without torch.softmax. Tolerance: atol 1e-5 + rtol 1e-4
(float32), except where stated.
"""

from __future__ import annotations

import torch

from ._base import guard, CheckFailed, call, close, fail_values, own_code, randint, rng

TOL = "atol 1e-5 + rtol 1e-4"


def _problem(g, n=None):
    m, d, dv = randint(g, 2, 9), randint(g, 1, 8), randint(g, 1, 8)
    keys = torch.randn(m, d, generator=g) * (0.5 + torch.rand(m, 1, generator=g) * 2)  # keys of varied length
    values = torch.randn(m, dv, generator=g) * 3
    q = torch.randn(d, generator=g) if n is None else torch.randn(n, d, generator=g)
    return q, keys, values


def _hard_oracle(q, keys, values):
    qs = q.reshape(-1, q.shape[-1]).double()
    rows = []
    for qi in qs:
        best, best_score = 0, None
        for j, k in enumerate(keys.double()):
            s = float(sum(float(a) * float(b) for a, b in zip(qi, k)))
            if best_score is None or s > best_score:
                best, best_score = j, s
        rows.append(values[best])
    out = torch.stack(rows)
    return out[0] if q.dim() == 1 else out


def _soft_oracle(q, keys, values, temperature=1.0):
    s = torch.einsum("...d,md->...m", q.double(), keys.double()) / temperature
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    w = e / e.sum(dim=-1, keepdim=True)
    return torch.einsum("...m,mv->...v", w, values.double()).float()


def _desc(q, keys, values, extra=""):
    return f"query {tuple(q.shape)}, keys {tuple(keys.shape)}, values {tuple(values.shape)}{extra}"


def _run(fn, name, *args, **kwargs):
    out = call(fn, *args, name=name, **kwargs)
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"hidden test: {name} did not return a tensor")
    return out


def hard_lookup_single(hard_lookup) -> None:
    own_code(hard_lookup, "hard_lookup")
    g = rng(201)
    for _ in range(8):
        q, keys, values = _problem(g)
        out = _run(hard_lookup, "hard_lookup", q, keys, values)
        want = _hard_oracle(q, keys, values)
        if not close(out, want):
            fail_values("hard_lookup", out, want, _desc(q, keys, values), TOL)


def hard_lookup_batch(hard_lookup) -> None:
    own_code(hard_lookup, "hard_lookup")
    g = rng(202)
    for _ in range(6):
        q, keys, values = _problem(g, n=randint(g, 1, 7))
        out = _run(hard_lookup, "hard_lookup", q, keys, values)
        want = _hard_oracle(q, keys, values)
        if not close(out, want):
            fail_values("hard_lookup", out, want, _desc(q, keys, values), TOL)


def soft_lookup_single(soft_lookup) -> None:
    own_code(soft_lookup, "soft_lookup")
    g = rng(203)
    for _ in range(8):
        q, keys, values = _problem(g)
        out = _run(soft_lookup, "soft_lookup", q, keys, values)
        want = _soft_oracle(q, keys, values)
        if not close(out, want):
            fail_values("soft_lookup", out, want, _desc(q, keys, values), TOL)


def soft_lookup_batch(soft_lookup) -> None:
    own_code(soft_lookup, "soft_lookup")
    g = rng(204)
    for _ in range(6):
        q, keys, values = _problem(g, n=randint(g, 1, 7))
        out = _run(soft_lookup, "soft_lookup", q, keys, values)
        want = _soft_oracle(q, keys, values)
        if not close(out, want):
            fail_values("soft_lookup", out, want, _desc(q, keys, values), TOL)


def soft_lookup_temperature(soft_lookup) -> None:
    own_code(soft_lookup, "soft_lookup")
    g = rng(205)
    for tau in (0.05, 0.3, 2.0, 7.5, 40.0):
        n = randint(g, 0, 5)
        q, keys, values = _problem(g, n=None if n == 0 else n)
        out = _run(soft_lookup, "soft_lookup", q, keys, values, temperature=tau)
        want = _soft_oracle(q, keys, values, tau)
        if not bool(torch.isfinite(out).all()) or not close(out, want):
            fail_values("soft_lookup", out, want, _desc(q, keys, values, f", temperature {tau}"), TOL)
    # a very low temperature: finite, and (nearly) the hard lookup's answer
    q, keys, values = _problem(g, n=4)
    q = q * 10
    out = _run(soft_lookup, "soft_lookup", q, keys, values, temperature=1e-3)
    want = _soft_oracle(q, keys, values, 1e-3)
    if not bool(torch.isfinite(out).all()) or not close(out, want, atol=1e-4):
        fail_values("soft_lookup", out, want, _desc(q, keys, values, ", temperature 0.001 (scores in the thousands)"),
                    "atol 1e-4 + rtol 1e-4")


guard(globals())  # every check records warnings instead of printing them (core.guard)
