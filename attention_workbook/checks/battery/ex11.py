"""Battery for exercise 11 (flash_forward_kernel, delta_kernel, dkdv_kernel, dq_kernel, FlashAttention,
FlashCausalSelfAttention).

Oracles: attention and its gradients in float64 (the visible module's ``reference``: the closed-form formulas,
which tests/test_checks_ex11.py holds to PyTorch's autograd) and lecture 08's GPT in float64. Random batch
entries, heads, lengths (T_Q != T_K without CAUSAL), head sizes, tile sizes and layouts; the kernels are
launched through the visible checks' case runners (inputs and outputs in NaN-filled buffers), which name a
failing case's mistake.
"""

from __future__ import annotations

import torch

from .. import ex11 as visible
from ._util import guard, randint


def _draw(g, causal=False, lo=5, hi=40):
    B, H = randint(g, 1, 2), randint(g, 1, 2)
    D = (16, 32)[randint(g, 0, 1)]
    T_Q = randint(g, lo, hi)
    T_K = T_Q if causal else randint(g, lo, hi)
    bm, bn = (16, 32)[randint(g, 0, 1)], (16, 32)[randint(g, 0, 1)]
    return visible.make_inputs(g, B, H, T_Q, T_K, D), bm, bn


def _strided(g):
    return {"q": "transpose", "k": "kT", "v": "slice", "do": ("transpose", "wide")[randint(g, 0, 1)]}


def forward_values(flash_forward_kernel, g) -> None:
    for _ in range(2):
        x, bm, bn = _draw(g)
        visible.forward_case(flash_forward_kernel, x, False, bm, bn)


def forward_causal(flash_forward_kernel, g) -> None:
    x, bm, bn = _draw(g, causal=True, lo=17)
    visible.forward_case(flash_forward_kernel, x, True, bm, bn, reread=visible.SEC_CAUSAL)


def forward_layouts(flash_forward_kernel, g) -> None:
    x, bm, bn = _draw(g, causal=True, hi=30)
    o_layout = ("transpose", "wide")[randint(g, 0, 1)]
    visible.forward_case(flash_forward_kernel, x, True, bm, bn,
                         layouts={"q": "transpose", "k": "kT", "v": "slice", "o": o_layout})
    T = 16 * randint(g, 4, 5)
    x = visible.make_inputs(g, 1, 1, T, T, 16, scale=0.7, raise_late=False, v_shift=float(randint(g, 5, 7)))
    visible.forward_case(flash_forward_kernel, x, False, 32, 16, dtype=torch.float16)


def delta_values(delta_kernel, g) -> None:
    for _ in range(2):
        B, H, T, D = randint(g, 1, 2), randint(g, 1, 2), randint(g, 3, 40), (16, 32)[randint(g, 0, 1)]
        visible.delta_case(delta_kernel, {"o": torch.randn(B, H, T, D, generator=g),
                                          "do": torch.randn(B, H, T, D, generator=g)}, (16, 32)[randint(g, 0, 1)])


def delta_layouts(delta_kernel, g) -> None:
    B, H, T, D = randint(g, 1, 2), 2, randint(g, 3, 30), 16
    visible.delta_case(delta_kernel, {"o": torch.randn(B, H, T, D, generator=g),
                                      "do": torch.randn(B, H, T, D, generator=g)}, 16,
                       layouts={"o": "transpose", "do": "slice"})
    T = randint(g, 17, 32)
    visible.delta_case(delta_kernel, {"o": torch.randn(1, 1, T, 32, generator=g) + randint(g, 5, 7),
                                      "do": torch.randn(1, 1, T, 32, generator=g)}, 16, dtype=torch.float16)


def dkdv_values(dkdv_kernel, g) -> None:
    for _ in range(2):
        x, bm, bn = _draw(g)
        visible.dkdv_case(dkdv_kernel, x, False, bm, bn)


def dkdv_causal(dkdv_kernel, g) -> None:
    for bm, bn in ((32, 16), (16, (16, 32)[randint(g, 0, 1)])):
        x, _, _ = _draw(g, causal=True, lo=17)
        visible.dkdv_case(dkdv_kernel, x, True, bm, bn, reread=visible.SEC_CAUSAL)


def dkdv_layouts(dkdv_kernel, g) -> None:
    x, bm, _ = _draw(g, causal=True, lo=17, hi=30)
    visible.dkdv_case(dkdv_kernel, x, True, bm, 16, layouts={**_strided(g), "dk": "transpose", "dv": "slice"})
    x = visible.fp16_bwd_inputs(g, 16 * randint(g, 62, 64) - randint(g, 0, 5), 16, uniform=True)
    visible.dkdv_case(dkdv_kernel, x, False, 16, 16, dtype=torch.float16)


def dq_values(dq_kernel, g) -> None:
    for _ in range(2):
        x, bm, bn = _draw(g)
        visible.dq_case(dq_kernel, x, False, bm, bn)


def dq_causal(dq_kernel, g) -> None:
    T = 16 * (2 * randint(g, 1, 2) + 1)          # a multiple of BLOCK_N = 16, not of BLOCK_M = 32
    visible.dq_case(dq_kernel, visible.make_inputs(g, 1, randint(g, 1, 2), T, T, 16), True, 32, 16,
                    reread=visible.SEC_CAUSAL)
    x, _, bn = _draw(g, causal=True, lo=17)
    visible.dq_case(dq_kernel, x, True, 16, bn, reread=visible.SEC_CAUSAL)


def dq_layouts(dq_kernel, g) -> None:
    x, bm, _ = _draw(g, causal=True, lo=17, hi=30)
    visible.dq_case(dq_kernel, x, True, bm, 16, layouts={**_strided(g), "do": "wide", "dq": "slice"})
    x = visible.fp16_bwd_inputs(g, 16, 16 * randint(g, 30, 32) - randint(g, 0, 5))
    visible.dq_case(dq_kernel, x, False, 16, 16, dtype=torch.float16)


def function_grads(FlashAttention, flash_attention, g) -> None:
    x, bm, bn = _draw(g, causal=True, lo=17, hi=36)
    visible._function_case(flash_attention, x, True, (bm, bn))
    x, bm, bn = _draw(g, hi=36)
    visible._function_case(flash_attention, x, False, (bm, bn))


def function_layouts(FlashAttention, flash_attention, g) -> None:
    x, bm, bn = _draw(g, causal=True, hi=30)
    visible._function_case(flash_attention, x, True, (bm, bn), layouts=_strided(g))
    T = 16 * randint(g, 2, 3) + randint(g, 0, 8)
    x = visible.make_inputs(g, 1, 1, T, T, 16, scale=1.4, raise_late=False)
    x["k"][..., :1, :] = x["q"][..., :1, :] * 3
    visible._function_case(flash_attention, x, True, (16, 16), dtype=torch.float16)


def gpt_trains(FlashCausalSelfAttention, g) -> None:
    visible.gpt_trains(FlashCausalSelfAttention, g=g, seed=randint(g, 0, 999))


guard(globals())
