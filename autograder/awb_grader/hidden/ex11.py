"""Hidden checks for exercise 11 (flash_forward_kernel, delta_kernel, dkdv_kernel, dq_kernel, FlashAttention,
FlashCausalSelfAttention): randomized cases on the CPU (the grading sandbox has no GPU: the kernels run in
Triton's interpreter).

The kernels are launched where the student's code runs (``_adapter.launch``: the tensors they write come
back); the autograd Function is run forward and backward there (``_adapter.vjp``: its gradients come back);
the GPT is built there around the student's attention modules (``_adapter.make("ex11.flash_gpt")``) and
trained from here (``A.grads`` for its gradients, SGD on copies of its weights, ``A.load`` to put them back).
Oracles are independent of the solution and of the visible checks: float64 autograd through attention
written with einsum and an explicit causal mask (``_oracle``), never a tiled computation; the GPT's oracle is
lecture 08's GPT (PyTorch's own attention) in float64 from the same seed. Inputs and outputs are views inside
larger NaN-filled buffers: an unmasked load past the last row reads NaN, a store past it overwrites NaN the
comparison sees. Every tolerance is in its message.
"""

from __future__ import annotations

import math

import torch

from attention_workbook.checks.ex11 import GPT_CONFIG, NO_SDPA, kernel_builtins, tiny_gpt

from . import _adapter as A
from ._base import CheckFailed, call, close, fail_values, guard, max_abs_diff, own_code, randint, rng

TOL = 2e-5


# ----------------------------------------------------------------------------------------
# the oracle: float64 autograd of attention written out
# ----------------------------------------------------------------------------------------
def _oracle(q, k, v, do=None, causal=False):
    """{"o", "L"} and with ``do`` {"dq", "dk", "dv", "delta"}: float64 autograd of softmax(q k^T / sqrt(D)) v."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.size(-1))
    if causal:
        s = s.masked_fill(torch.arange(k.size(-2))[None, :] > torch.arange(q.size(-2))[:, None], float("-inf"))
    L = torch.logsumexp(s, dim=-1)
    o = torch.einsum("bhts,bhsd->bhtd", torch.exp(s - L[..., None]), v)
    out = {"o": o.detach(), "L": L.detach()}
    if do is not None:
        do64 = do.detach().double()
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do64)
        out.update(dq=dq, dk=dk, dv=dv)
    return out


def _buffer(values, layout, dtype=None, pad=16):
    """A (B, H, T, D) view with ``layout`` inside a NaN-filled storage: a block as large as the view's layout needs,
    with as much NaN again before and after it (the interpreter checks no address: a kernel that misses its tensor
    by a sign or a stride lands in NaN, not in the student's heap)."""
    B, H, T, D = values.shape
    dtype = dtype or values.dtype
    blocks = {"front": (B * H * (T + pad) * D,), "transpose": (B, T + pad, H, D), "kT": (B, H, D, T + pad),
              "wide": (B, T + pad, H, D + pad), "slice": (B, H, T + pad, D + pad)}
    n = math.prod(blocks[layout])
    block = torch.full((3 * n,), float("nan"), dtype=dtype)[n:2 * n].view(blocks[layout])
    if layout == "front":
        view = block[:B * H * T * D].view(B, H, T, D)
    elif layout == "transpose":
        view = block[:, :T].transpose(1, 2)
    elif layout == "kT":
        view = block[..., :T].transpose(-1, -2)
    elif layout == "wide":                                         # heads split by a transpose, rows D + pad wide
        view = block[:, :T, :, pad:].transpose(1, 2)
    else:                                                          # "slice": the last D of rows D + pad wide
        view = block[:, :, :T, pad:]
    view.copy_(values.to(dtype))
    return view


def _empty(shape, layout="front", dtype=torch.float32):
    return _buffer(torch.full(shape, float("nan"), dtype=dtype), layout, dtype)


def _rows(values, shape):
    """A contiguous float32 (B, H, T) inside a NaN-filled storage, with room for 64 more rows of every head after it
    and as much before it (a kernel addressing it T_K apart stays inside)."""
    n = math.prod(shape)
    room = n + math.prod(shape[:-1]) * 64 + 64
    view = torch.full((2 * room + n,), float("nan"))[room:room + n].view(shape)
    if values is not None:
        view.copy_(values.float())
    return view


def _draw(g, causal=False, t_lo=5, t_hi=40, tq_eq_tk=False):
    B, H = randint(g, 1, 2), randint(g, 1, 2)
    D = (16, 32)[randint(g, 0, 1)]
    T_Q = randint(g, t_lo, t_hi)
    T_K = T_Q if (causal or tq_eq_tk) else randint(g, t_lo, t_hi)
    bm, bn = (16, 32)[randint(g, 0, 1)], (16, 32)[randint(g, 0, 1)]
    return B, H, T_Q, T_K, D, bm, bn


def _inputs(g, B, H, T_Q, T_K, D, scale=1.5, v_shift=0.0, do_shift=0.0):
    q = torch.randn(B, H, T_Q, D, generator=g) * scale
    k = torch.randn(B, H, T_K, D, generator=g) * scale
    k[..., T_K // 2:, :] *= 2                                      # later key tiles raise the running maximum
    v = torch.randn(B, H, T_K, D, generator=g) + v_shift
    do = torch.randn(B, H, T_Q, D, generator=g) + do_shift
    return q, k, v, do


def _strides(*ts):
    return [s for t in ts for s in t.stride()]


def _fp16_tol(want, steps=2.0):
    return steps * float((want.half().double() - want).abs().max()) + 1e-6


def _tol(want, dtype, bound=None):
    """float32: TOL relative; float16: 1.5 x the largest fp16 rounding error of the answer plus ``bound``, the most
    the fp16 casts of the tiles fed to tl.dot can move it."""
    if dtype == torch.float32:
        return TOL * max(1.0, float(want.abs().max()))
    return _fp16_tol(want, 1.5) + (0.0 if bound is None else float(bound.max()))


def _cast_bounds(q, k, v, do, L, delta, causal):
    """2^-11 x the sums of the absolute terms of dV = P^T dO, dK = scale dS^T Q, dQ = scale dS K (float64)."""
    q, k, v, do = (t.double() for t in (q, k, v, do))
    s = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.size(-1))
    if causal:
        s = s.masked_fill(torch.arange(k.size(-2))[None, :] > torch.arange(q.size(-2))[:, None], float("-inf"))
    p = torch.exp(s - L.double()[..., None])
    ds = (p * (torch.einsum("bhtd,bhsd->bhts", do, v) - delta.double()[..., None])).abs()
    u, sc = 2.0 ** -11, 1 / math.sqrt(q.size(-1))
    p_cast = (p - p.half().double()).abs() + 2.0 ** -20 * p          # P's own fp16 rounding (0 when exact)
    return {"dv": torch.einsum("bhts,bhtd->bhsd", p_cast, do.abs()),
            "dk": u * sc * torch.einsum("bhts,bhtd->bhsd", ds, q.abs()),
            "dq": u * sc * torch.einsum("bhts,bhsd->bhtd", ds, k.abs())}


def _case(shape, causal, bm, bn, dtype, layouts=False):
    B, H, T_Q, T_K, D = shape
    return (f"B={B}, H={H}, T_Q={T_Q}, T_K={T_K}, D={D}, CAUSAL={bool(causal)}, BLOCK_M={bm}, BLOCK_N={bn}, {dtype}"
            f"{', strided' if layouts else ''}")


def _outside(view) -> bool:
    """Every element of the view's storage outside the view is still NaN (nothing stored outside it)."""
    n = view.untyped_storage().nbytes() // view.element_size()
    flat = torch.empty(0, dtype=view.dtype).set_(view.untyped_storage(), 0, (n,), (1,))
    cover = torch.zeros(n, dtype=torch.bool)
    cover.as_strided(view.shape, view.stride(), view.storage_offset())[...] = True
    return bool(torch.isnan(flat[~cover]).all())


# ----------------------------------------------------------------------------------------
# flash_forward_kernel
# ----------------------------------------------------------------------------------------
LAYOUTS = {"q": "transpose", "k": "kT", "v": "slice", "do": "transpose", "o": "transpose", "dq": "slice",
           "dk": "transpose", "dv": "slice"}


def _forward_case(kernel, g, shape, causal, bm, bn, dtype=torch.float32, layouts=False, v_shift=0.0, scale=1.5):
    B, H, T_Q, T_K, D = shape
    q0, k0, v0, _ = _inputs(g, B, H, T_Q, T_K, D, scale=scale, v_shift=v_shift)
    lay = (lambda n: LAYOUTS[n]) if layouts else (lambda n: "front")
    q, k, v = _buffer(q0, lay("q"), dtype), _buffer(k0, lay("k"), dtype), _buffer(v0, lay("v"), dtype)
    o, L = _empty((B, H, T_Q, D), lay("o"), dtype), _rows(None, (B, H, T_Q))
    A.launch(kernel, (-(-T_Q // bm), B * H), q, k, v, o, L, *_strides(q, k, v, o), H, T_Q, T_K, 1 / math.sqrt(D),
             name="flash_forward_kernel", CAUSAL=bool(causal), BLOCK_M=bm, BLOCK_N=bn, D=D)
    want = _oracle(q, k, v, causal=causal)
    case = _case(shape, causal, bm, bn, dtype, layouts)
    tol = TOL if dtype == torch.float32 else _fp16_tol(want["o"])
    if not close(o, want["o"], atol=tol) or not _outside(o):
        fail_values("flash_forward_kernel's O", o, want["o"], case, f"{tol:.2g} absolute, nothing stored past T_Q")
    if not close(L, want["L"], atol=1e-4) or not _outside(L):
        fail_values("flash_forward_kernel's L (natural log-sum-exp)", L, want["L"], case,
                    "1e-4 absolute, nothing stored past T_Q")


def forward_values(flash_forward_kernel) -> None:
    g = rng(1101)
    for _ in range(2):
        B, H, T_Q, T_K, D, bm, bn = _draw(g)
        _forward_case(flash_forward_kernel, g, (B, H, T_Q, T_K, D), False, bm, bn)


def forward_causal(flash_forward_kernel) -> None:
    g = rng(1102)
    for _ in range(2):
        B, H, T_Q, T_K, D, bm, bn = _draw(g, causal=True, t_lo=17)
        _forward_case(flash_forward_kernel, g, (B, H, T_Q, T_K, D), True, bm, bn)


def forward_layouts(flash_forward_kernel) -> None:
    g = rng(1103)
    B, H, T_Q, T_K, D, bm, bn = _draw(g, causal=True, t_hi=30)
    _forward_case(flash_forward_kernel, g, (B, H, T_Q, T_K, D), True, bm, bn, layouts=True)
    T = 16 * randint(g, 3, 4)
    _forward_case(flash_forward_kernel, g, (1, 1, T, T, 16), False, 32, 16, dtype=torch.float16,
                  v_shift=float(randint(g, 5, 7)), scale=0.7)


# ----------------------------------------------------------------------------------------
# delta_kernel
# ----------------------------------------------------------------------------------------
def _delta_case(kernel, g, B, H, T, D, bm, dtype=torch.float32, layouts=False, o_shift=0.0):
    o0 = torch.randn(B, H, T, D, generator=g) + o_shift
    do0 = torch.randn(B, H, T, D, generator=g)
    o = _buffer(o0, "slice" if layouts else "front", dtype)
    do = _buffer(do0, "transpose" if layouts else "front", dtype)
    delta = _rows(None, (B, H, T))
    A.launch(kernel, (-(-T // bm), B * H), o, do, delta, *_strides(o, do), H, T, name="delta_kernel",
             BLOCK_M=bm, D=D)
    want = torch.einsum("bhtd,bhtd->bht", o.double(), do.double())
    tol = TOL * max(1.0, float(want.abs().max()))
    if not close(delta, want, atol=tol) or not _outside(delta):
        fail_values("delta_kernel", delta, want, f"O, dO {(B, H, T, D)}, BLOCK_M={bm}, {dtype}"
                    f"{', strided' if layouts else ''}", f"{tol:.2g} absolute, nothing stored past T_Q")


def delta_values(delta_kernel) -> None:
    g = rng(1104)
    for _ in range(2):
        B, H, T, _, D, bm, _ = _draw(g)
        _delta_case(delta_kernel, g, B, H, T, D, bm)


def delta_layouts(delta_kernel) -> None:
    g = rng(1105)
    B, H, T, _, D, bm, _ = _draw(g)
    _delta_case(delta_kernel, g, B, H, T, D, bm, layouts=True)
    _delta_case(delta_kernel, g, 1, 1, randint(g, 16, 32), 32, 16, dtype=torch.float16, o_shift=float(randint(g, 5, 7)))


# ----------------------------------------------------------------------------------------
# dkdv_kernel, dq_kernel
# ----------------------------------------------------------------------------------------
def _bwd_inputs(g, shape, causal, dtype, layouts, scale=1.5, v_shift=0.0, do_shift=0.0, do_layout="transpose",
                uniform=False):
    B, H, T_Q, T_K, D = shape
    q0, k0, v0, do0 = _inputs(g, B, H, T_Q, T_K, D, scale=scale, v_shift=v_shift, do_shift=do_shift)
    if uniform:                                                    # P = 1 / T_K: an exact fp16 cast
        q0.zero_()
    lay = (lambda n: do_layout if n == "do" else LAYOUTS[n]) if layouts else (lambda n: "front")
    q, k, v, do = (_buffer(t, lay(n), dtype) for t, n in ((q0, "q"), (k0, "k"), (v0, "v"), (do0, "do")))
    fwd = _oracle(q, k, v, causal=causal)
    want = _oracle(q, k, v, do, causal=causal)
    delta = (fwd["o"].to(dtype).double() * do.double()).sum(-1)          # from O as stored
    want["bounds"] = _cast_bounds(q, k, v, do, want["L"], delta, causal) if dtype == torch.float16 else {}
    return q, k, v, do, want, _rows(want["L"], (B, H, T_Q)), _rows(delta, (B, H, T_Q)), lay


def _dkdv_case(kernel, g, shape, causal, bm, bn, dtype=torch.float32, layouts=False, **kw):
    B, H, T_Q, T_K, D = shape
    q, k, v, do, want, L, delta, lay = _bwd_inputs(g, shape, causal, dtype, layouts, **kw)
    dk, dv = _empty((B, H, T_K, D), lay("dk"), dtype), _empty((B, H, T_K, D), lay("dv"), dtype)
    A.launch(kernel, (-(-T_K // bn), B * H), q, k, v, do, L, delta, dk, dv, *_strides(q, k, v, do, dk, dv),
             H, T_Q, T_K, 1 / math.sqrt(D), name="dkdv_kernel", CAUSAL=bool(causal), BLOCK_M=bm, BLOCK_N=bn, D=D)
    case = _case(shape, causal, bm, bn, dtype, layouts)
    for name, got in (("dK", dk), ("dV", dv)):
        ref = want["d" + name[1].lower()]
        tol = _tol(ref, dtype, want["bounds"].get("d" + name[1].lower()))
        if not close(got, ref, atol=tol) or not _outside(got):
            fail_values(f"dkdv_kernel's {name}", got, ref, case, f"{tol:.2g} absolute, nothing stored past T_K")


def _dq_case(kernel, g, shape, causal, bm, bn, dtype=torch.float32, layouts=False, **kw):
    B, H, T_Q, T_K, D = shape
    q, k, v, do, want, L, delta, lay = _bwd_inputs(g, shape, causal, dtype, layouts, **kw)
    dq = _empty((B, H, T_Q, D), lay("dq"), dtype)
    A.launch(kernel, (-(-T_Q // bm), B * H), q, k, v, do, L, delta, dq, *_strides(q, k, v, do, dq),
             H, T_Q, T_K, 1 / math.sqrt(D), name="dq_kernel", CAUSAL=bool(causal), BLOCK_M=bm, BLOCK_N=bn, D=D)
    tol = _tol(want["dq"], dtype, want["bounds"].get("dq"))
    if not close(dq, want["dq"], atol=tol) or not _outside(dq):
        fail_values("dq_kernel", dq, want["dq"], _case(shape, causal, bm, bn, dtype, layouts),
                    f"{tol:.2g} absolute, nothing stored past T_Q")


def _fp16_shape(g, long_axis):
    """(1, 1, T_Q, T_K, 16) with 62 to 64 tiles of 16 along the axis the kernel accumulates over (an fp16
    accumulator rounds at each), one tile along the other."""
    long, short = 16 * randint(g, 62, 64) - randint(g, 0, 5), 16
    return (1, 1, long, short, 16) if long_axis == "q" else (1, 1, short, long, 16)


def dkdv_values(dkdv_kernel) -> None:
    g = rng(1106)
    for _ in range(2):
        B, H, T_Q, T_K, D, bm, bn = _draw(g)
        _dkdv_case(dkdv_kernel, g, (B, H, T_Q, T_K, D), False, bm, bn)


def dkdv_causal(dkdv_kernel) -> None:
    g = rng(1107)
    for bm, bn in ((32, 16), (16, (16, 32)[randint(g, 0, 1)])):
        B, H, T_Q, T_K, D, _, _ = _draw(g, causal=True, t_lo=17)
        _dkdv_case(dkdv_kernel, g, (B, H, T_Q, T_K, D), True, bm, bn)


def dkdv_layouts(dkdv_kernel) -> None:
    g = rng(1108)
    B, H, T_Q, T_K, D, bm, _ = _draw(g, causal=True, t_lo=17, t_hi=30)
    _dkdv_case(dkdv_kernel, g, (B, H, T_Q, T_K, D), True, bm, 16, layouts=True)
    _dkdv_case(dkdv_kernel, g, _fp16_shape(g, "q"), False, 16, 16, dtype=torch.float16, scale=0.5, v_shift=2.0,
               do_shift=4.0, uniform=True)


def dq_values(dq_kernel) -> None:
    g = rng(1109)
    for _ in range(2):
        B, H, T_Q, T_K, D, bm, bn = _draw(g)
        _dq_case(dq_kernel, g, (B, H, T_Q, T_K, D), False, bm, bn)


def dq_causal(dq_kernel) -> None:
    g = rng(1110)
    for bm, bn in ((32, 16), (16, (16, 32)[randint(g, 0, 1)])):
        B, H, T_Q, T_K, D, _, _ = _draw(g, causal=True, t_lo=17)
        if bm == 32:                 # a multiple of BLOCK_N, not of BLOCK_M: the bound (i + 1) * BLOCK_M lies past T_K
            T_Q = T_K = 16 * (2 * randint(g, 1, 2) + 1)
        _dq_case(dq_kernel, g, (B, H, T_Q, T_K, D), True, bm, bn)


def dq_layouts(dq_kernel) -> None:
    g = rng(1111)
    B, H, T_Q, T_K, D, bm, _ = _draw(g, causal=True, t_lo=17, t_hi=30)
    _dq_case(dq_kernel, g, (B, H, T_Q, T_K, D), True, bm, 16, layouts=True, do_layout="wide")
    _dq_case(dq_kernel, g, _fp16_shape(g, "k"), False, 16, 16, dtype=torch.float16, scale=0.5, v_shift=2.0,
             do_shift=4.0)


# ----------------------------------------------------------------------------------------
# FlashAttention, through flash_attention(q, k, v, causal, block_m, block_n)
# ----------------------------------------------------------------------------------------
def _function_tols(q, k, v, do, causal, want, dtype) -> dict[str, float]:
    """float32: TOL relative. float16: O within 6 of its largest fp16 rounding errors, dv within 5, dq and dk within 6
    plus 4.5 times how much Delta from O rounded to fp16 (as stored) moves them (a Function may use either)."""
    if dtype == torch.float32:
        return {n: TOL * max(1.0, float(want[n].abs().max())) for n in ("o", "dq", "dk", "dv")}
    out = {"o": _fp16_tol(want["o"], 6.0), "dv": _fp16_tol(want["dv"], 5.0)}
    # dS moves by P * (Delta_exact - Delta_rounded): dq by scale * that @ k, dk by scale * that^T @ q
    s = torch.einsum("bhtd,bhsd->bhts", q.double(), k.double()) / math.sqrt(q.size(-1))
    if causal:
        s = s.masked_fill(torch.arange(k.size(-2))[None, :] > torch.arange(q.size(-2))[:, None], float("-inf"))
    p = torch.exp(s - want["L"][..., None])
    shift = (do.double() * (want["o"] - want["o"].to(dtype).double())).sum(-1)
    moved = p * shift[..., None] / math.sqrt(q.size(-1))
    diff = {"dq": moved @ k.double(), "dk": moved.transpose(-1, -2) @ q.double()}
    for n in ("dq", "dk"):
        out[n] = _fp16_tol(want[n], 6.0) + 4.5 * float(diff[n].abs().max())
    return out


def _function_case(fn, g, shape, causal, blocks, dtype=torch.float32, layouts=False, watch=None, big_l=False):
    B, H, T_Q, T_K, D = shape
    q0, k0, v0, do0 = _inputs(g, B, H, T_Q, T_K, D, scale=1.4 if big_l else 1.5)
    if big_l:
        k0[..., :1, :] = q0[..., :1, :] * 3                       # one large score per row: L around 10
    lay = (lambda n: LAYOUTS[n]) if layouts else (lambda n: "front")
    q, k, v, do = (_buffer(t, lay(n), dtype) for t, n in ((q0, "q"), (k0, "k"), (v0, "v"), (do0, "do")))
    kw = {} if causal is None else {"causal": bool(causal)}
    if blocks:
        kw.update(block_m=blocks[0], block_n=blocks[1])
    with A.forbid(kernel_builtins(), NO_SDPA):
        if watch is not None:
            watch("start")
        try:
            out = A.vjp(fn, q, k, v, grad_output=do, name="flash_attention (forward and backward)", **kw)
        finally:
            report = watch("stop") if watch is not None else None
    want = _oracle(q, k, v, do, causal=bool(causal))
    case = _case(shape, bool(causal), *(blocks or (16, 16)), dtype, layouts) + ("" if blocks else " (default blocks)")
    o, grads = out
    tols = _function_tols(q, k, v, do, bool(causal), want, dtype)
    tol = tols["o"]
    if not isinstance(o, torch.Tensor) or o.dtype != dtype or not close(o, want["o"], atol=tol):
        fail_values("FlashAttention's output", o if isinstance(o, torch.Tensor) else torch.empty(0), want["o"],
                    case, f"{tol:.2g} absolute, in q's dtype")
    for name, got in zip(("dq", "dk", "dv"), grads):
        ref = want[name]
        gtol = tols[name]
        if got is None or not close(got, ref, atol=gtol):
            fail_values(f"FlashAttention's {name}", got if got is not None else torch.empty(0), ref, case,
                        f"{gtol:.2g} absolute")
    return report


def function_grads(FlashAttention, flash_attention) -> None:
    own_code(FlashAttention, "FlashAttention")
    own_code(flash_attention, "flash_attention")
    g = rng(1112)
    B, H, T_Q, T_K, D, bm, _ = _draw(g, causal=True, t_lo=17)             # several key tiles of 16
    _function_case(flash_attention, g, (B, H, T_Q, T_K, D), True, (bm, 16))
    B, H, T_Q, T_K, D, _, _ = _draw(g, t_lo=17)                             # the default tiles (16, 16)
    _function_case(flash_attention, g, (B, H, T_Q, T_K, D), None, None)


def function_layouts(FlashAttention, flash_attention) -> None:
    own_code(FlashAttention, "FlashAttention")
    own_code(flash_attention, "flash_attention")
    g = rng(1113)
    B, H, T_Q, T_K, D, bm, bn = _draw(g, causal=True, t_hi=30)
    _function_case(flash_attention, g, (B, H, T_Q, T_K, D), True, (bm, bn), layouts=True)
    T = 16 * randint(g, 3, 4) - randint(g, 0, 3)
    _function_case(flash_attention, g, (1, 1, T, T, 16), True, (16, 16), dtype=torch.float16, big_l=True)
    T = randint(g, 48, 56)
    r = _function_case(flash_attention, g, (1, 1, T, T, 16), False, (16, 16), watch=A.make("ex09.watch", 16, None))
    if r["largest"][0] * 2 >= T * T:
        raise CheckFailed("hidden test: FlashAttention builds (half) a (T_Q, T_K) matrix in PyTorch: the attention "
                          "must be computed by the kernels",
                          details=[f"case: T = {T}: a tensor of {r['largest'][0]} numbers {tuple(r['largest'][1])}"])


# ----------------------------------------------------------------------------------------
# FlashCausalSelfAttention, and a GPT trained through it
# ----------------------------------------------------------------------------------------
def _attention_module(W, bW, Wo, bo, x, H, causal):
    """Lecture 08's causal self-attention from its weights (float64), attention written out."""
    B, T, Dm = x.shape
    q, k, v = (t.reshape(B, T, H, Dm // H).permute(0, 2, 1, 3) for t in (x @ W.T + bW).chunk(3, dim=-1))
    s = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(Dm // H)
    if causal:
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = torch.einsum("bhts,bhsd->bhtd", torch.softmax(s, dim=-1), v)
    return y.permute(0, 2, 1, 3).reshape(B, T, Dm) @ Wo.T + bo


def gpt_trains(FlashCausalSelfAttention) -> None:
    own_code(FlashCausalSelfAttention, "FlashCausalSelfAttention")
    g = rng(1114)
    cfg = dict(GPT_CONFIG, vocab_size=randint(g, 15, 30))
    Dm, H = cfg["d_model"], cfg["n_head"]
    mod = A.new(FlashCausalSelfAttention, Dm, H, name="FlashCausalSelfAttention")
    W = torch.randn(3 * Dm, Dm, generator=g) / math.sqrt(Dm)
    bW, bo = torch.randn(3 * Dm, generator=g) * 0.1, torch.randn(Dm, generator=g) * 0.1
    Wo = torch.randn(Dm, Dm, generator=g) / math.sqrt(Dm)
    A.load(mod, {"W_qkv.weight": W, "W_qkv.bias": bW, "W_o.weight": Wo, "W_o.bias": bo})
    x = torch.randn(2, 16 * randint(g, 1, 2), Dm, generator=g)     # whole tiles: rows past T are nobody's
    for causal in (False,):                                      # (causal: the GPT below; False: the default)
        with A.forbid(kernel_builtins(), NO_SDPA.replace("FlashAttention", "FlashCausalSelfAttention")):
            out = call(mod, x, name="FlashCausalSelfAttention")
        want = _attention_module(W.double(), bW.double(), Wo.double(), bo.double(), x.double(), H, causal)
        if not isinstance(out, torch.Tensor) or not close(out, want, atol=1e-4):
            fail_values("FlashCausalSelfAttention", out if isinstance(out, torch.Tensor) else torch.empty(0), want,
                        f"x {tuple(x.shape)}, {H} heads, is_causal={causal}, weights loaded", "1e-4 absolute")
    for what, kw in (("a mask", {"mask": torch.ones(x.size(1), x.size(1), dtype=torch.bool)}), ("kv", {"kv": x})):
        try:
            call(mod, x, name="FlashCausalSelfAttention", **kw)
        except CheckFailed as e:
            if "raised ValueError" in e.title:
                continue
            raise CheckFailed(f"hidden test: FlashCausalSelfAttention given {what}: {e.title}") from None
        raise CheckFailed(f"hidden test: FlashCausalSelfAttention given {what} raised no ValueError",
                          details=[f"case: x {tuple(x.shape)}"])
    seed = randint(g, 0, 999)
    mods = [A.new(FlashCausalSelfAttention, Dm, H, name="FlashCausalSelfAttention") for _ in range(cfg["n_layer"])]
    model = call(A.make, "ex11.flash_gpt", cfg, seed, mods, name="FlashCausalSelfAttention (in lecture 08's GPT)")
    oracle = tiny_gpt(cfg, seed).double()
    weights = {n: p.detach().double().clone() for n, p in oracle.named_parameters()}
    mine = {n: w.float() for n, w in A.params(model).items()}
    if set(mine) != set(weights):
        raise CheckFailed("hidden test: the GPT's parameters change when FlashCausalSelfAttention replaces its "
                          "attention",
                          details=[f"case: {cfg}, seed {seed}: {sorted(set(mine) ^ set(weights))[:4]}"])
    opt_mine = torch.optim.SGD([w.requires_grad_(True) for w in mine.values()], lr=0.5)
    opt_ref = torch.optim.SGD(oracle.parameters(), lr=0.5)
    for step in range(2):
        T = 32                                                     # two whole tiles of 16
        x = torch.randint(cfg["vocab_size"], (1, T), generator=g)
        y = torch.randint(cfg["vocab_size"], (1, T), generator=g)
        A.load(model, {n: w.detach() for n, w in mine.items()})
        loss, grad = call(A.grads, model, x, y, name="GPT forward + backward through FlashCausalSelfAttention")
        opt_ref.zero_grad()
        _, ref_loss = oracle(x, y)
        ref_loss.backward()
        ref_grads = {n: p.grad for n, p in oracle.named_parameters()}
        for n, w in mine.items():
            scale = max(1e-3, float(ref_grads[n].abs().max()))
            if max_abs_diff(grad[n].double(), ref_grads[n]) > 1e-4 * scale:
                raise CheckFailed("hidden test: a GPT with FlashCausalSelfAttention has other gradients than lecture "
                                  "08's GPT (float64, PyTorch's attention)",
                                  details=[f"case: {cfg}, seed {seed}, step {step}, parameter {n}: max |difference| "
                                           f"{max_abs_diff(grad[n].double(), ref_grads[n]):.3g} (tolerance 1e-4 x "
                                           f"{scale:.3g})"])
            w.grad = grad[n].float()
        if abs(loss - float(ref_loss)) > 1e-4:
            raise CheckFailed("hidden test: a GPT with FlashCausalSelfAttention trains along another loss curve",
                              details=[f"case: {cfg}, seed {seed}, step {step}: loss {loss:.5f}, expected "
                                       f"{float(ref_loss):.5f} (tolerance 1e-4)"])
        opt_mine.step()
        opt_ref.step()


guard(globals())
