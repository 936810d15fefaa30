"""Battery for exercise 10 (softmax_kernel, flash_attention_kernel, flash_attention).

Oracles: ``torch.softmax`` and ``F.scaled_dot_product_attention`` in float64. Random rows, widths,
blocks, batch entries, heads, lengths and layouts; the kernels are launched through the visible
checks' helpers (inputs inside NaN, outputs inside NaN-filled buffers), which name a failing case's
mistake; the launcher runs with the visible checks' stand-in kernel, as grading runs it.
"""

from __future__ import annotations

import torch

from .. import ex10 as visible
from ._util import guard, randint


def _block(n: int) -> int:
    return 1 << max(4, (n - 1).bit_length())


def softmax_kernel_values(softmax_kernel, g) -> None:
    for case in range(3):
        n = randint(g, 1, 40)
        x = torch.randn(randint(g, 1, 5), n, generator=g) * randint(g, 1, 6) + (900.0 if case == 2 else 0.0)
        visible._softmax_case(softmax_kernel, x, _block(n), f"random x {tuple(x.shape)}")


def softmax_kernel_strides(softmax_kernel, g) -> None:
    rows, n = randint(g, 2, 5), randint(g, 3, 30)
    off = randint(g, 0, 4)
    width = n + off + randint(g, 1, 8)
    wide = visible.in_nan(torch.randn(rows, width, generator=g), (2 * rows + 2) * width,
                          lambda b: b[rows * width:2 * rows * width].view(rows, width))   # NaN before and after
    x = wide[:, off:off + n]
    ys = n + randint(g, 1, 12)                      # the output's own row stride
    big = torch.full((2 * rows + 2, ys), float("nan"), device=visible.device())
    y = big[rows:2 * rows, :n]
    visible._softmax_launch(softmax_kernel, x, y, _block(n))
    want = torch.softmax(x.double().cpu(), dim=-1)
    if visible.close(y.cpu(), want, atol=visible.atol()) and not visible.outside_changed(y):
        return
    name = visible.first_match(y.cpu().double(), visible.softmax_stride_variants(x, wide, off, ys, want), atol=1e-5)
    raise visible.CheckFailed(f"softmax_kernel on x a ({rows}, {n}) slice of {tuple(wide.shape)} into y (row stride "
                              f"{ys}) is wrong", reread=visible.SEC_SOFTMAX,
                              hint=name or "row r starts at X + r * stride_x in the input and at Y + r * stride_y in "
                                           "the output; its n_cols entries are contiguous",
                              details=[f"max |yours - softmax| = {visible.diff_text(y, want)}"])


def _shape(g, lo, hi):
    return randint(g, 1, 2), randint(g, 1, 2), randint(g, lo, hi), (16, 32)[randint(g, 0, 1)]


def _case(kernel, g, causal, lo, hi, multiple=False, ragged=False):
    B, H, T, D = _shape(g, lo, hi)
    bm = (16, 32)[randint(g, 0, 1)]
    if multiple:
        T = max(2, T // 32) * 32
    if ragged and T % bm == 0:                  # the last query tile hangs past T
        T += randint(g, 1, bm - 1)
    q, k, v = visible.qkv(g, B, H, T, D, scale=1.5)
    with torch.no_grad():
        k[..., T // 2:, :] *= 3
    visible._flash_case(kernel, q, k, v, causal, bm, 16, f"random q, k, v {(B, H, T, D)}",
                        reread=visible.SEC_CAUSAL if causal else visible.SEC_FLASH)


def flash_kernel_values(flash_attention_kernel, g) -> None:
    _case(flash_attention_kernel, g, False, 32, 64, multiple=True)
    c = 6 + 2 * float(torch.rand(1, generator=g))          # every score about -4 c^2 <= -144
    T = 16 * randint(g, 2, 3)
    q = visible.front(c + 0.1 * torch.randn(1, 1, T, 16, generator=g))
    k = visible.front(-c + 0.1 * torch.randn(1, 1, T, 16, generator=g))
    v = visible.front(torch.randn(1, 1, T, 16, generator=g))
    visible._flash_case(flash_attention_kernel, q, k, v, False, 16, 16, f"q near {c:.1f}, k near {-c:.1f} "
                        f"{(1, 1, T, 16)}: every score far below 0", reread=visible.SEC_ONLINE)


def flash_kernel_padding(flash_attention_kernel, g) -> None:
    for _ in range(2):
        _case(flash_attention_kernel, g, False, 3, 40)
    missing = visible.masked_loads_without_other(flash_attention_kernel)
    if missing:
        raise visible.CheckFailed("flash_attention_kernel loads K or V with a mask but no other=",
                                  reread=visible.SEC_UNCHECKED, hint=visible.OTHER, details=missing[:3])


def flash_kernel_causal(flash_attention_kernel, g) -> None:
    for _ in range(2):
        _case(flash_attention_kernel, g, True, 17, 40, ragged=True)
    B, H, D = randint(g, 1, 2), randint(g, 1, 2), (16, 32)[randint(g, 0, 1)]
    visible.skip_case(flash_attention_kernel, g, B, H, randint(g, 48, 64), D, 32, 16,
                      f"random q, k, v {(B, H, '48..64', D)}")


def flash_kernel_strides(flash_attention_kernel, g) -> None:
    for causal in (False, True):
        B, H, T, D = _shape(g, 17, 40)
        bm = (16, 32)[randint(g, 0, 1)]
        if causal and T % bm == 0:              # the last query tile hangs past T
            T += randint(g, 1, bm - 1)
        q, k, v, o = visible.layouts(g, B, H, T, D)
        visible._flash_case(flash_attention_kernel, q, k, v, causal, bm, 16, f"random strided q, k, v {(B, H, T, D)}",
                            o=o)


def flash_kernel_fp16(flash_attention_kernel, g) -> None:
    visible.flash_kernel_fp16(flash_attention_kernel, g=g, T=16 * randint(g, 4, 6))


def flash_attention_values(flash_attention, g) -> None:
    for causal in (None, True):
        B, H, T, D = _shape(g, 5, 30)
        q, k, v = visible.qkv(g, B, H, T, D, scale=1.5)
        visible._launcher_case(flash_attention, q, k, v, f"random q, k, v {(B, H, T, D)}", causal=causal)


def flash_attention_layouts(flash_attention, g) -> None:
    B, H, T, D = _shape(g, 5, 30)
    q, k, v, _ = visible.layouts(g, B, H, T, D)
    visible._launcher_case(flash_attention, q, k, v, f"random strided q, k, v {(B, H, T, D)}",
                           causal=bool(randint(g, 0, 1)), blocks=((16, 32)[randint(g, 0, 1)], 16))


guard(globals())
