"""Battery for exercise 10 (softmax_kernel, flash_attention_kernel, flash_attention).

Oracles: ``torch.softmax`` and ``F.scaled_dot_product_attention`` in float64. Random rows, widths,
blocks, batch entries, heads, lengths and layouts; the kernels are launched through the visible
checks' helpers (outputs inside NaN-filled buffers), which name a failing case's mistake.
"""

from __future__ import annotations

import torch

from .. import ex10 as visible
from ._util import guard, randint


def _block(n: int) -> int:
    return 1 << max(4, (n - 1).bit_length())


def softmax_kernel_values(softmax_kernel, g) -> None:
    dev = visible.device()
    for case in range(3):
        n = randint(g, 1, 40)
        x = torch.randn(randint(g, 1, 5), n, generator=g) * randint(g, 1, 6) + (900.0 if case == 2 else 0.0)
        visible._softmax_case(softmax_kernel, x.to(dev), _block(n), f"random x {tuple(x.shape)}")


def softmax_kernel_strides(softmax_kernel, g) -> None:
    dev = visible.device()
    rows, n = randint(g, 2, 5), randint(g, 3, 30)
    off = randint(g, 0, 4)
    wide = torch.randn(rows, n + off + randint(g, 1, 8), generator=g).to(dev)
    x = wide[:, off:off + n]
    visible._softmax_case(softmax_kernel, x, _block(n), f"x a ({rows}, {n}) slice of {tuple(wide.shape)}")


def _shape(g, lo, hi):
    return randint(g, 1, 2), randint(g, 1, 2), randint(g, lo, hi), (16, 32)[randint(g, 0, 1)]


def _case(kernel, g, causal, lo, hi, multiple=False):
    B, H, T, D = _shape(g, lo, hi)
    bm = (16, 32)[randint(g, 0, 1)]
    if multiple:
        T = max(2, T // 32) * 32
    q, k, v = visible._qkv(g, B, H, T, D, scale=1.5)
    k[..., T // 2:, :] *= 2
    visible._flash_case(kernel, q, k, v, causal, bm, 16, f"random q, k, v {(B, H, T, D)}",
                        reread=visible.SEC_CAUSAL if causal else visible.SEC_FLASH)


def flash_kernel_values(flash_attention_kernel, g) -> None:
    _case(flash_attention_kernel, g, False, 32, 64, multiple=True)


def flash_kernel_padding(flash_attention_kernel, g) -> None:
    for _ in range(2):
        _case(flash_attention_kernel, g, False, 3, 40)


def flash_kernel_causal(flash_attention_kernel, g) -> None:
    for _ in range(2):
        _case(flash_attention_kernel, g, True, 17, 40)


def flash_kernel_strides(flash_attention_kernel, g) -> None:
    B, H, T, D = _shape(g, 10, 30)
    q, k, v, o = visible._layouts(g, B, H, T, D)
    visible._flash_case(flash_attention_kernel, q, k, v, bool(randint(g, 0, 1)), 16, 16,
                        f"random strided q, k, v {(B, H, T, D)}", o=o)


def flash_kernel_fp16(flash_attention_kernel, g) -> None:
    visible.flash_kernel_fp16(flash_attention_kernel, g=g, T=16 * randint(g, 4, 6))


def flash_attention_values(flash_attention, g) -> None:
    for causal in (None, True):
        B, H, T, D = _shape(g, 5, 30)
        q, k, v = visible._qkv(g, B, H, T, D, scale=1.5)
        visible._launcher_case(flash_attention, q, k, v, f"random q, k, v {(B, H, T, D)}", causal=causal)


def flash_attention_layouts(flash_attention, g) -> None:
    B, H, T, D = _shape(g, 5, 30)
    q, k, v, _ = visible._layouts(g, B, H, T, D)
    visible._launcher_case(flash_attention, q, k, v, f"random strided q, k, v {(B, H, T, D)}",
                           causal=bool(randint(g, 0, 1)), blocks=((16, 32)[randint(g, 0, 1)], 16))


guard(globals())
