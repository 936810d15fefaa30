"""Battery for exercise 03 (simplified self-attention): (S, D) and (B, S, D) inputs.

Oracles: the raw-weight version as one float64 einsum over (i, j) pairs divided by S; the
softmax version as PyTorch's ``F.scaled_dot_product_attention(x, x, x, scale=1)`` in float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import ex03 as visible
from ._util import CheckFailed, call, expect, guard, randint


def _simple(x):
    xd = x.double()
    return (torch.einsum("...id,...jd,...je->...ie", xd, xd, xd) / x.shape[-2]).float()


def _softmax(x):
    xd = x.double()
    return F.scaled_dot_product_attention(xd, xd, xd, scale=1.0).float()


def _grade(fn, name, oracle, variants, reread, g, batched, n=6, scale=1.0):
    for _ in range(n):
        S, D = randint(g, 1, 8), randint(g, 1, 10)
        shape = (randint(g, 1, 5), S, D) if batched else (S, D)
        x = torch.randn(shape, generator=g) * scale
        x_before = x.clone()
        out = call(fn, x, name=name)
        if not torch.equal(x, x_before):
            raise CheckFailed(f"{name} modified its input in place", details=[f"case: x {tuple(x.shape)}"],
                              hint="write the outputs into a new tensor; every y_i is computed from the original x")
        expect(out, oracle(x), name, f"x {tuple(x.shape)}", variants=lambda: variants(x), reread=reread)


def loops_values(simple_self_attention_loops, g) -> None:
    _grade(simple_self_attention_loops, "simple_self_attention_loops", _simple, visible.simple_wrong_variants,
           visible.SEC_LOOPS, g, batched=False)


def loops_batch(simple_self_attention_loops, g) -> None:
    _grade(simple_self_attention_loops, "simple_self_attention_loops", _simple, visible.simple_wrong_variants,
           visible.SEC_LOOPS, g, batched=True, n=4)


def simple_values(simple_self_attention, g) -> None:
    _grade(simple_self_attention, "simple_self_attention", _simple, visible.simple_wrong_variants,
           visible.SEC_MATRIX, g, batched=False)


def simple_batch(simple_self_attention, g) -> None:
    _grade(simple_self_attention, "simple_self_attention", _simple, visible.simple_wrong_variants,
           visible.SEC_MATRIX, g, batched=True)


def softmax_values(softmax_self_attention, g) -> None:
    _grade(softmax_self_attention, "softmax_self_attention", _softmax, visible.softmax_wrong_variants,
           visible.SEC_SOFTMAX, g, batched=False, scale=1.4)


def softmax_batch(softmax_self_attention, g) -> None:
    _grade(softmax_self_attention, "softmax_self_attention", _softmax, visible.softmax_wrong_variants,
           visible.SEC_SOFTMAX, g, batched=True, scale=1.4)


guard(globals())
