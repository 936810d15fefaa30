"""Hidden checks for exercise 10 (softmax_kernel, flash_attention_kernel, flash_attention): randomized
cases on the CPU (the grading sandbox has no GPU: the kernels run in Triton's interpreter).

The kernels are launched where the student's code runs (``_adapter.launch``: the tensors they write
come back); the launcher is called with a stand-in for its kernel (``_adapter.make("ex10.standin")``, bound to the
name ``flash_attention_kernel`` during the call: ``_adapter.call_rebound``), so it is judged on the
launch alone, whatever the student's kernel does. Oracles are independent of the solution:
``torch.softmax`` in float64, and attention as an explicit float64 softmax of ``q k^T / sqrt(D)``
with the causal mask built here (``_attention``), never a tiled computation. Inputs are views inside
NaN-filled buffers (what a kernel reads past the last row is NaN, never uninitialised memory);
outputs are views at the front of larger NaN-filled buffers: a kernel that stores past its last row
overwrites the next head's first rows, which the comparison sees. Causal kernels are also launched on
their first query tile alone, with NaN in the keys and values after its diagonal: a kernel that does not
skip those tiles reads them. Every hidden check's tolerance is in its message.
"""

from __future__ import annotations

import math

import torch

from attention_workbook.checks.ex10 import NO_SDPA, flash_builtins

from . import _adapter as A
from ._base import CheckFailed, close, fail_values, guard, own_code, randint, rng

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


def _inside_nan(x: torch.Tensor, after: int = 64) -> torch.Tensor:
    """``x`` (..., T, D) copied into a contiguous view of a NaN buffer: ``after`` rows of NaN behind it, and a
    tensor's worth and ``after`` rows ahead of it (an address with a sign slipped stays in NaN the check owns)."""
    d, n = x.size(-1), x.numel()
    lead = n + after * d
    buf = torch.full((lead + n + after * d,), float("nan"), dtype=x.dtype)
    view = buf[lead:lead + n].view(x.shape)
    view.copy_(x)
    return view


def _front(shape, dtype=torch.float32, extra=256):
    """A tensor of ``shape`` in a NaN-filled buffer, ``extra`` rows longer after it (a store past its end lands
    there, in memory the check owns) and as long again before it."""
    n = math.prod(shape)
    lead = n + extra * max(shape[-1], 16)
    big = torch.full((2 * lead + n,), float("nan"), dtype=dtype)
    return big[lead:lead + n].view(shape)


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
        wide = _inside_nan(torch.randn(rows, n + off + randint(g, 1, 9), generator=g) * 3)
        x = wide[:, off:off + n]
        ybig = torch.full((2 * rows + 2, n + randint(g, 1, 12)), float("nan"))
        y = ybig[rows:2 * rows, :n]
        _softmax(softmax_kernel, x, y, block)
        want = torch.softmax(x.double(), dim=-1)
        case = f"x a ({rows}, {n}) slice of {tuple(wide.shape)} (stride {x.stride(0)}), y stride {y.stride(0)}"
        if not close(y, want, atol=TOL):
            fail_values("softmax_kernel", y, want, case, f"{TOL:g} absolute")


# ----------------------------------------------------------------------------------------
# flash_attention_kernel
# ----------------------------------------------------------------------------------------
def _flash(kernel, q, k, v, o, causal, bm, bn, grid=None):
    B, H, T, D = q.shape
    strides = [s for t in (q, k, v, o) for s in t.stride()]
    A.launch(kernel, grid or (-(-T // bm), B * H), q, k, v, o, *strides, H, T, 1 / math.sqrt(D),
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
    if layouts:                                   # each in a NaN buffer twice as long as the longest layout
        P = 64
        cap = 2 * B * H * (T + P) * (2 * D + 8)
        nan = lambda n: torch.full((3 * cap,), float("nan"), dtype=dtype)[cap:cap + n]    # cap NaN on each side
        q = nan(B * (T + P) * H * D).view(B, T + P, H, D)[:, :T].transpose(1, 2)
        k = nan(B * H * D * (T + P)).view(B, H, D, T + P)[..., :T].transpose(-1, -2)
        w = D + randint(g, 1, 8)
        v = nan(B * H * (T + P) * w).view(B, H, T + P, w)[:, :, :T, -D:]
        for t in (q, k, v):
            t.copy_(torch.randn(B, H, T, D, generator=g))
        o = nan(B * (T + P) * H * D).view(B, T + P, H, D)[:, :T].transpose(1, 2)
    else:
        q, k, v = (_inside_nan((torch.randn(B, H, T, D, generator=g) * scale).to(dtype)) for _ in range(3))
        o = _front(shape, dtype)
    with torch.no_grad():
        k[..., T // 2:, :] *= 3                   # later key tiles raise the running maximum
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
    # every score far below 0 (q near c, k near -c, D = 16: about -4 c^2 <= -144): the running maximum must start
    # below every score, or exp(s - m) underflows for every key
    c = 6 + 2 * float(torch.rand(1, generator=g))
    T = 16 * randint(g, 2, 3)
    q = _inside_nan(c + 0.1 * torch.randn(1, 1, T, 16, generator=g))
    k = _inside_nan(-c + 0.1 * torch.randn(1, 1, T, 16, generator=g))
    v = _inside_nan(torch.randn(1, 1, T, 16, generator=g))
    o = _front((1, 1, T, 16))
    _flash(flash_attention_kernel, q, k, v, o, False, 16, 16)
    want = _attention(q, k, v, False)
    if not close(o, want, atol=TOL):
        fail_values("flash_attention_kernel", o, want, f"q near {c:.2f}, k near {-c:.2f} {(1, 1, T, 16)}: every score "
                    f"about {-4 * c * c:.0f}", f"{TOL:g} absolute")


def flash_kernel_padding(flash_attention_kernel) -> None:
    g = rng(1004)
    for _ in range(2):
        bm, bn = _blocks(g)
        shape = _shape(g, 17, 40)
        if shape[2] % bn == 0:
            shape = (*shape[:2], shape[2] + randint(g, 1, bn - 1), shape[3])
        _kernel_case(flash_attention_kernel, shape, False, bm, bn, g)


def flash_kernel_causal(flash_attention_kernel) -> None:
    g = rng(1005)
    for _ in range(2):
        bm, bn = _blocks(g)
        B, H, T, D = _shape(g, 17, 40)
        if T % bm == 0:                           # the last query tile hangs past T
            T += randint(g, 1, bm - 1)
        _kernel_case(flash_attention_kernel, (B, H, T, D), True, bm, bn, g)
    # the first query tile alone, NaN in every key and value after its diagonal tile: never loaded if skipped
    bm, bn = 32, 16
    B, H, T, D = randint(g, 1, 2), randint(g, 1, 2), randint(g, 48, 64), (16, 32)[randint(g, 0, 1)]
    q, k, v = (_inside_nan(torch.randn(B, H, T, D, generator=g) * 1.5) for _ in range(3))
    want = _attention(q[..., :bm, :], k[..., :bm, :], v[..., :bm, :], True)
    with torch.no_grad():
        k[..., bm:, :] = float("nan")
        v[..., bm:, :] = float("nan")
    o = _front((B, H, T, D))
    _flash(flash_attention_kernel, q, k, v, o, True, bm, bn, grid=(1, B * H))
    if not close(o[..., :bm, :], want, atol=TOL):
        fail_values("flash_attention_kernel", o[..., :bm, :], want,
                    f"q, k, v {(B, H, T, D)}, CAUSAL=True, BLOCK_M={bm}, BLOCK_N={bn}, only the first query tile "
                    "launched, keys and values after its diagonal nan (tiles after the diagonal must be skipped)",
                    f"{TOL:g} absolute")


def flash_kernel_strides(flash_attention_kernel) -> None:
    g = rng(1006)
    for causal in (False, True):
        B, H, T, D = _shape(g, 17, 40)
        bm = 32 if causal else 16
        if causal and T % bm == 0:                # the last query tile hangs past T
            T += randint(g, 1, bm - 1)
        _kernel_case(flash_attention_kernel, (B, H, T, D), causal, bm, 16, g, layouts=True)


def flash_kernel_fp16(flash_attention_kernel) -> None:
    g = rng(1007)
    T = 16 * randint(g, 4, 6)
    q, k = (torch.randn(1, 1, T, 16, generator=g) * 0.5 for _ in range(2))
    v = torch.randn(1, 1, T, 16, generator=g) * 0.5 + randint(g, 5, 7)
    q, k, v = (_inside_nan(t.half()) for t in (q, k, v))
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
    standin = A.make("ex10.standin")             # a correct kernel in the student's namespace meanwhile
    with A.forbid(flash_builtins(), NO_SDPA):
        if watch is not None:
            watch("start")
        try:
            out = A.call_rebound(fn, {"flash_attention_kernel": standin}, q, k, v, name="flash_attention", **kw)
        finally:
            report = watch("stop") if watch is not None else None
    if not A.get(standin, "count"):
        raise CheckFailed("hidden test: flash_attention never launched flash_attention_kernel",
                          details=[f"case: {case}"])
    problems = A.get(standin, "problems")
    if problems:
        raise CheckFailed("hidden test: flash_attention launched flash_attention_kernel wrongly",
                          details=[f"case: {case}", str(problems[0])[:200]])
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
