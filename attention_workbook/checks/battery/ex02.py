"""Battery for exercise 02 (hard_lookup, soft_lookup).

Oracles: the hard lookup scans the keys with Python's ``max`` over float64 dot products; the
soft lookup is PyTorch's ``F.scaled_dot_product_attention`` with ``scale = 1 / temperature``
(float64), which is softmax(q k^T / temperature) v.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import ex02 as visible
from ._util import call, expect, guard, randint


def _problem(g, n=None):
    m, d, dv = randint(g, 2, 10), randint(g, 1, 9), randint(g, 1, 9)
    keys = torch.randn(m, d, generator=g) * (0.4 + torch.rand(m, 1, generator=g) * 2.2)
    values = torch.randn(m, dv, generator=g) * 2
    q = torch.randn(d, generator=g) if n is None else torch.randn(n, d, generator=g)
    return q, keys, values


def _hard(q, keys, values):
    qs = q.reshape(-1, q.shape[-1]).double()
    k = keys.double()
    best = [max(range(k.shape[0]), key=lambda j: float((qi * k[j]).sum())) for qi in qs]
    out = values[torch.tensor(best)]
    return out[0] if q.dim() == 1 else out


def _soft(q, keys, values, temperature=1.0):
    qq = q.double().reshape(-1, q.shape[-1])
    out = F.scaled_dot_product_attention(qq, keys.double(), values.double(), scale=1.0 / temperature)
    return (out[0] if q.dim() == 1 else out).float()


def _desc(q, keys, values, extra=""):
    return f"query {tuple(q.shape)}, keys {tuple(keys.shape)}, values {tuple(values.shape)}{extra}"


def _hard_check(hard_lookup, g, batched, n):
    for _ in range(n):
        q, keys, values = _problem(g, randint(g, 1, 8) if batched else None)
        out = call(hard_lookup, q, keys, values, name="hard_lookup")
        expect(out, _hard(q, keys, values), "hard_lookup", _desc(q, keys, values),
               variants=lambda: visible.hard_wrong_variants(q, keys, values), reread=visible.SEC_HARD)


def hard_lookup_single(hard_lookup, g) -> None:
    _hard_check(hard_lookup, g, False, 8)


def hard_lookup_batch(hard_lookup, g) -> None:
    _hard_check(hard_lookup, g, True, 6)


def _soft_check(soft_lookup, g, batched, n):
    for _ in range(n):
        q, keys, values = _problem(g, randint(g, 1, 8) if batched else None)
        out = call(soft_lookup, q, keys, values, name="soft_lookup")
        expect(out, _soft(q, keys, values), "soft_lookup", _desc(q, keys, values),
               variants=lambda: visible.soft_wrong_variants(q, keys, values), reread=visible.SEC_SOFT)


def soft_lookup_single(soft_lookup, g) -> None:
    _soft_check(soft_lookup, g, False, 8)


def soft_lookup_batch(soft_lookup, g) -> None:
    _soft_check(soft_lookup, g, True, 6)


def soft_lookup_temperature(soft_lookup, g) -> None:
    for tau in (0.08, 0.5, 1.7, 5.0, 25.0):
        n = randint(g, 0, 6)
        q, keys, values = _problem(g, n or None)
        out = call(soft_lookup, q, keys, values, temperature=tau, name="soft_lookup")
        want = _soft(q, keys, values, tau)
        if isinstance(out, torch.Tensor) and not bool(torch.isfinite(out).all()):
            out = out.nan_to_num(1e30, 1e30, -1e30)   # reported as a value error below
        expect(out, want, "soft_lookup", _desc(q, keys, values, f", temperature {tau}"),
               variants=lambda: visible.soft_wrong_variants(q, keys, values, tau), reread=visible.SEC_TEMP)
    q, keys, values = _problem(g, 3)
    q = q * 12                                    # a tiny temperature: scores in the thousands
    out = call(soft_lookup, q, keys, values, temperature=2e-3, name="soft_lookup")
    expect(out, _soft(q, keys, values, 2e-3), "soft_lookup", _desc(q, keys, values, ", temperature 0.002"),
           atol=1e-4, reread=visible.SEC_TEMP)


guard(globals())
