"""Hidden checks for exercise 03 (simplified self-attention): randomized shapes, fixed seeds.

Oracles are written differently from the solution: the raw-weight version is a float64 loop
over positions (with the batch handled by an outer loop), the softmax version a float64 einsum
with an explicit max-shifted exponential (no torch.softmax). Inputs are (S, D) and (B, S, D)
with S, D, B drawn independently (S = 1 included). Tolerance: atol 1e-5 + rtol 1e-4 (float32).
"""

from __future__ import annotations

import torch

from ._base import guard, CheckFailed, call, close, fail_values, own_code, randint, rng

TOL = "atol 1e-5 + rtol 1e-4"


def _simple_oracle(x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 3:
        return torch.stack([_simple_oracle(seq) for seq in x])
    xd = x.double()
    S = xd.shape[0]
    rows = []
    for i in range(S):
        acc = torch.zeros(xd.shape[1], dtype=torch.float64)
        for j in range(S):
            acc = acc + float((xd[i] * xd[j]).sum()) * xd[j]
        rows.append(acc / S)
    return torch.stack(rows).float()


def _softmax_oracle(x: torch.Tensor) -> torch.Tensor:
    xd = x.double()
    s = torch.einsum("...id,...jd->...ij", xd, xd)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    w = e / e.sum(dim=-1, keepdim=True)
    return torch.einsum("...ij,...jd->...id", w, xd).float()


def _inputs(g, batched: bool, n: int, scale: float = 1.0):
    for _ in range(n):
        S, D = randint(g, 1, 7), randint(g, 1, 9)
        shape = (randint(g, 1, 4), S, D) if batched else (S, D)
        yield torch.randn(shape, generator=g) * scale


def _grade(fn, name, oracle, seed, batched, n=6, scale=1.0):
    own_code(fn, name)
    g = rng(seed)
    for x in _inputs(g, batched, n, scale):
        x_before = x.clone()
        out = call(fn, x, name=name)
        if not isinstance(out, torch.Tensor):
            raise CheckFailed(f"hidden test: {name} did not return a tensor")
        if not torch.equal(x, x_before):
            raise CheckFailed(f"hidden test: {name} modified its input in place",
                              details=[f"case: x of shape {tuple(x.shape)}"])
        want = oracle(x)
        if not close(out, want):
            fail_values(name, out, want, f"x of shape {tuple(x.shape)}", TOL)


def loops_values(simple_self_attention_loops) -> None:
    _grade(simple_self_attention_loops, "simple_self_attention_loops", _simple_oracle, 301, batched=False)


def loops_batch(simple_self_attention_loops) -> None:
    _grade(simple_self_attention_loops, "simple_self_attention_loops", _simple_oracle, 302, batched=True, n=4)


def simple_values(simple_self_attention) -> None:
    _grade(simple_self_attention, "simple_self_attention", _simple_oracle, 303, batched=False)


def simple_batch(simple_self_attention) -> None:
    _grade(simple_self_attention, "simple_self_attention", _simple_oracle, 304, batched=True)


def softmax_values(softmax_self_attention) -> None:
    _grade(softmax_self_attention, "softmax_self_attention", _softmax_oracle, 305, batched=False, scale=1.5)


def softmax_batch(softmax_self_attention) -> None:
    _grade(softmax_self_attention, "softmax_self_attention", _softmax_oracle, 306, batched=True, scale=1.5)


guard(globals())  # every check records warnings instead of printing them (core.guard)
