"""Hidden checks for exercise 10 (softmax_kernel, flash_attention_kernel, flash_attention): randomized
cases on the CPU (the grading sandbox has no GPU: the kernels run in Triton's interpreter).

The kernels are launched where the student's code runs (``_adapter.launch``: the tensors they write
come back); the launcher is called like any function. Oracles are independent of the solution:
``torch.softmax`` in float64, and attention as an explicit float64 softmax of ``q k^T / sqrt(D)``
with the causal mask built here (``_attention``), never a tiled computation. Outputs are views at
the front of larger NaN-filled buffers: a kernel that stores past its last row overwrites the next
head's first rows, which the comparison sees. Every hidden check's tolerance is in its message.
"""

from __future__ import annotations

import math

import torch

from attention_workbook.checks.ex10 import NO_SDPA, flash_builtins

from . import _adapter as A
from ._base import CheckFailed, call, close, fail_values, guard, own_code, randint, rng

TOL = 1e-5


def _attention(q, k, v, causal):
    """softmax(q k^T / sqrt(D)) v in float64, written out (the oracle)."""
    q, k, v = q.double(), k.double(), v.double()
    s = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.size(-1))
    if causal:
        T = q.size(-2)
        s = s.masked_fill(torch.arange(T)[None, :] > torch.arange(T)[:, None], float("-inf"))
    w = torch.exp(s - s.amax(-1, keepdim=True))
    return torch.einsum("bhts,bhsd->bhtd", w / w.sum(-1, keepdim=True), v)


def _front(shape, dtype=torch.float32, extra=256):
    """A tensor of ``shape`` at the front of a NaN-filled buffer ``extra`` rows longer (a store past its end
    lands there, in memory the check owns)."""
    n = math.prod(shape)
    big = torch.full((n + extra * max(shape[-1], 16),), float("nan"), dtype=dtype)
    return big[:n].view(shape)


# ----------------------------------------------------------------------------------------
# softmax_kernel
# ----------------------------------------------------------------------------------------
def _softmax(kernel, x, y, block):
    A.launch(kernel, (x.size(0),), x, y, x.stride(0), y.stride(0), x.size(1), name="softmax_kernel", BLOCK=block)


def softmax_kernel_values(softmax_kernel) -> None:
    g = rng(1001)
    for case in range(5):
        n = randint(g, 1, 40)
        block = 1 << max(4, (n - 1).bit_length()) << randint(g, 0, 1)       # a power of 2 >= n, >= 16
        rows = randint(g, 1, 6)
        x = torch.randn(rows, n, generator=g) * randint(g, 1, 8) + (1000.0 if case == 4 else 0.0)
        y = _front((rows, n))
        _softmax(softmax_kernel, x, y, block)
        want = torch.softmax(x.double(), dim=-1)
        if not close(y, want, atol=TOL):
            fail_values("softmax_kernel", y, want, f"x {tuple(x.shape)}, BLOCK {block}", f"{TOL:g} absolute")


def softmax_kernel_strides(softmax_kernel) -> None:
    g = rng(1002)
    for _ in range(3):
        rows, n = randint(g, 2, 6), randint(g, 3, 30)
        block = 1 << max(4, (n - 1).bit_length())
        off = randint(g, 0, 5)
        wide = torch.randn(rows, n + off + randint(g, 1, 9), generator=g) * 3
        x = wide[:, off:off + n]
        ybig = torch.full((rows + 2, n + randint(g, 1, 12)), float("nan"))
        y = ybig[:rows, :n]
        _softmax(softmax_kernel, x, y, block)
        want = torch.softmax(x.double(), dim=-1)
        case = f"x a ({rows}, {n}) slice of {tuple(wide.shape)} (stride {x.stride(0)}), y stride {y.stride(0)}"
        if not close(y, want, atol=TOL):
            fail_values("softmax_kernel", y, want, case, f"{TOL:g} absolute")


# ----------------------------------------------------------------------------------------
# flash_attention_kernel
# ----------------------------------------------------------------------------------------
def _flash(kernel, q, k, v, o, causal, bm, bn):
    B, H, T, D = q.shape
    strides = [s for t in (q, k, v, o) for s in t.stride()]
    A.launch(kernel, (-(-T // bm), B * H), q, k, v, o, *strides, H, T, 1 / math.sqrt(D),
             name="flash_attention_kernel", CAUSAL=bool(causal), BLOCK_M=bm, BLOCK_N=bn, D=D)


def _shape(g, t_lo, t_hi, multiple_of=None):
    B, H = randint(g, 1, 2), randint(g, 1, 2)
    D = (16, 32)[randint(g, 0, 1)]
    T = randint(g, t_lo, t_hi)
    if multiple_of:
        T = multiple_of * max(1, T // multiple_of)
    return B, H, T, D


def _blocks(g):
    """(BLOCK_M, BLOCK_N): key tiles of 16 (T then spans several), query tiles of 16 or 32."""
    return (16, 32)[randint(g, 0, 1)], 16


def _kernel_case(kernel, shape, causal, bm, bn, g, scale=1.5, layouts=False, dtype=torch.float32, tol=TOL):
    B, H, T, D = shape
    if layouts:
        q = torch.randn(B, T, H, D, generator=g).transpose(1, 2)
        k = torch.randn(B, H, D, T, generator=g).transpose(-1, -2)
        v = torch.randn(B, H, T, D + randint(g, 1, 8), generator=g)[..., -D:]
        o = torch.full((B, T + 32, H, D), float("nan"))[:, :T].transpose(1, 2)
    else:
        q, k, v = (torch.randn(B, H, T, D, generator=g) * scale for _ in range(3))
        o = _front(shape, dtype)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    k[..., T // 2:, :] *= 2                       # later key tiles raise the running maximum
    _flash(kernel, q, k, v, o, causal, bm, bn)
    want = _attention(q, k, v, causal)
    if dtype == torch.float16:
        tol = 2 * float((want.half().double() - want).abs().max())
    if o.dtype != dtype or not close(o, want, atol=tol):
        fail_values("flash_attention_kernel", o, want,
                    f"q, k, v {tuple(q.shape)}{' (strided)' if layouts else ''} {dtype}, CAUSAL={causal}, "
                    f"BLOCK_M={bm}, BLOCK_N={bn}", f"{tol:.2g} absolute")


def flash_kernel_values(flash_attention_kernel) -> None:
    g = rng(1003)
    for _ in range(2):
        bm, bn = _blocks(g)
        _kernel_case(flash_attention_kernel, _shape(g, 32, 48, multiple_of=max(bm, bn)), False, bm, bn, g)


def flash_kernel_padding(flash_attention_kernel) -> None:
    g = rng(1004)
    for _ in range(2):
        bm, bn = _blocks(g)
        shape = _shape(g, 3, 40)
        if shape[2] % bn == 0:
            shape = (*shape[:2], shape[2] + randint(g, 1, bn - 1), shape[3])
        _kernel_case(flash_attention_kernel, shape, False, bm, bn, g)


def flash_kernel_causal(flash_attention_kernel) -> None:
    g = rng(1005)
    for _ in range(2):
        bm, bn = _blocks(g)
        _kernel_case(flash_attention_kernel, _shape(g, 17, 40), True, bm, bn, g)


def flash_kernel_strides(flash_attention_kernel) -> None:
    g = rng(1006)
    for causal in (False, True):
        _kernel_case(flash_attention_kernel, _shape(g, 10, 30), causal, 16, 16, g, layouts=True)


def flash_kernel_fp16(flash_attention_kernel) -> None:
    g = rng(1007)
    T = 16 * randint(g, 4, 6)
    q, k = (torch.randn(1, 1, T, 16, generator=g) * 0.5 for _ in range(2))
    v = torch.randn(1, 1, T, 16, generator=g) * 0.5 + randint(g, 5, 7)
    q, k, v = (t.half() for t in (q, k, v))
    o = _front(q.shape, torch.float16)
    _flash(flash_attention_kernel, q, k, v, o, False, 32, 16)          # T / 16 fp16 accumulation steps per row
    want = _attention(q, k, v, False)
    tol = 2 * float((want.half().double() - want).abs().max())
    if not close(o, want, atol=tol):
        fail_values("flash_attention_kernel", o, want, f"fp16 q, k, v {tuple(q.shape)}, outputs around "
                    f"{float(want.mean()):.0f}", f"{tol:.2g} absolute: one fp16 step of the output")


# ----------------------------------------------------------------------------------------
# flash_attention
# ----------------------------------------------------------------------------------------
def _launcher_case(fn, q, k, v, causal, blocks, case, watch=None):
    kw = {"causal": causal} if causal is not None else {}
    if blocks:
        kw.update(block_m=blocks[0], block_n=blocks[1])
    with A.forbid(flash_builtins(), NO_SDPA):
        if watch is not None:
            watch("start")
        try:
            out = call(fn, q, k, v, name="flash_attention", **kw)
        finally:
            report = watch("stop") if watch is not None else None
    want = _attention(q, k, v, bool(causal))
    tol = TOL if q.dtype == torch.float32 else 2 * float((want.half().double() - want).abs().max()) + 1e-3
    if not isinstance(out, torch.Tensor) or out.dtype != q.dtype or not close(out, want, atol=tol):
        fail_values("flash_attention", out if isinstance(out, torch.Tensor) else torch.empty(0), want,
                    f"{case}, {q.dtype}", f"{tol:.2g} absolute")
    return report


def flash_attention_values(flash_attention) -> None:
    own_code(flash_attention, "flash_attention")
    g = rng(1008)
    for causal in (None, True, False):
        B, H, T, D = _shape(g, 5, 30)
        q, k, v = (torch.randn(B, H, T, D, generator=g) * 1.5 for _ in range(3))
        blocks = _blocks(g) if causal is not None else None
        _launcher_case(flash_attention, q, k, v, causal, blocks,
                       f"q, k, v {(B, H, T, D)}, causal={causal}, blocks {blocks or 'default'}")


def flash_attention_layouts(flash_attention) -> None:
    own_code(flash_attention, "flash_attention")
    g = rng(1009)
    B, H, T, D = _shape(g, 5, 30)
    q = torch.randn(B, T, H, D, generator=g).transpose(1, 2)
    k = torch.randn(B, H, D, T, generator=g).transpose(-1, -2)
    v = torch.randn(B, H, T, 2 * D, generator=g)[..., :D]
    _launcher_case(flash_attention, q, k, v, True, None, f"strided q, k, v {(B, H, T, D)}")
    T = randint(g, 10, 30)
    q, k, v = (torch.randn(1, 1, T, 16, generator=g).half() for _ in range(3))
    _launcher_case(flash_attention, q, k, v, bool(randint(g, 0, 1)), None, f"q, k, v {tuple(q.shape)}")
    T = randint(g, 48, 64)
    q, k, v = (torch.randn(1, 1, T, 16, generator=g) for _ in range(3))
    r = _launcher_case(flash_attention, q, k, v, False, None, f"q, k, v (1, 1, {T}, 16)",
                       watch=A.make("ex09.watch", 16, None))
    if r["largest"][0] * 2 >= T * T:
        raise CheckFailed("hidden test: flash_attention builds (half) a (T, T) score matrix in PyTorch: the attention "
                          "must be computed by the kernel", details=[f"case: T = {T}: a tensor of {r['largest'][0]} "
                                                                     f"numbers {tuple(r['largest'][1])}"])


guard(globals())
