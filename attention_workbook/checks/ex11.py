"""Visible checks for exercise 11_flash_attention_backward: flash_forward_kernel (O and the log-sum-exp L),
delta_kernel, dkdv_kernel, dq_kernel, the autograd Function FlashAttention and FlashCausalSelfAttention.

Kernels are launched as the exercise specifies (``kernel[grid](...)``, under Triton's interpreter where no
CUDA GPU is visible: ``checks.ex10.launch_kernel``). Each kernel is checked alone: the checks hand it exact
inputs (``L`` and ``Delta`` computed here in float64), so a mistake costs the points of the kernel it is in.
Oracles: attention and its gradients written out in float64 (``reference``); the Function and the GPT are
compared with float64 autograd through PyTorch's own attention.

Every tensor a kernel reads or writes is a view inside a larger buffer filled with NaN: a load past the
last row of a tile that is not masked reads NaN (so the result shows it, the same on every run), and a
store past the end lands in NaN the check reads back. When a result is wrong the check recomputes, tile
by tile in float64, what the common mistakes produce (``fwd_sim``, ``bwd_sim``: the scale missing or
twice, ``P`` without ``L`` or without the causal mask, ``Delta`` ignored or taken from one tile, the
causal loop one tile off, a transposed product, ...) and names the one the output matches.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .core import (CheckFailed, call, close, expect_shape, expect_tensor, first_match, forbid, guard, max_abs_diff,
                   passed, softmax_builtins)
from .ex10 import device, launch_kernel

LECTURE = "lectures/11_flash_attention_backward.ipynb"
SEC_DERIV = f"lecture 11, section 1 'The backward of attention, with shapes' ({LECTURE}#derivation)"
SEC_SAVE_L = f"lecture 11, section 2 'Save L, recompute P' ({LECTURE}#save-l)"
SEC_DELTA = f"lecture 11, section 3 'D = rowsum(dO * O)' ({LECTURE}#delta)"
SEC_DKDV = f"lecture 11, section 4 'dK and dV: a key tile per program' ({LECTURE}#dkdv)"
SEC_DQ = f"lecture 11, section 5 'dQ: a second kernel, or atomics' ({LECTURE}#dq)"
SEC_CAUSAL = f"lecture 11, section 6 'Causal tiles in the backward' ({LECTURE}#causal-backward)"
SEC_AUTOGRAD = f"lecture 11, section 8 'An autograd Function and a gradient check' ({LECTURE}#autograd)"
SEC_TRAINING = f"lecture 11, section 9 'Training lecture 08's GPT through it' ({LECTURE}#training)"
SEC_INTERP = f"lecture 11, section 10 'What the interpreter does not check' ({LECTURE}#interpreter)"

NO_SDPA = ("the attention is your kernels' work: F.scaled_dot_product_attention and the softmax built-ins are off "
           "limits in FlashAttention")
LOG2E = 1.0 / math.log(2.0)


def tol32() -> float:
    """float32 tolerance: the interpreter's tl.dot is exact-ish; on a GPU it may round float32 to TF32."""
    return 2e-5 if device() == "cpu" else 5e-3


def kernel_builtins() -> list:
    return softmax_builtins() + [(F, "scaled_dot_product_attention")]


# ----------------------------------------------------------------------------------------
# tensors inside NaN-filled buffers
# ----------------------------------------------------------------------------------------
LAYOUTS = ("front", "transpose", "kT", "slice", "wide")


def _guarded(shape, dtype, before: int, after: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(storage, block): a NaN-filled flat storage holding a ``shape`` block with ``before`` elements of NaN ahead of
    it and ``after`` behind it (the interpreter checks no address: a kernel that misses its tensor by a sign or a
    stride lands in NaN the check reads, not in the process's heap)."""
    n = math.prod(shape)
    flat = torch.full((before + n + after,), float("nan"), dtype=dtype, device=device())
    return flat, flat[before:before + n].view(shape)


def place(values: torch.Tensor | None, shape, layout: str = "front", dtype=None, pad: int = 16):
    """(storage, view): a (B, H, T, D) view with ``layout`` inside a storage of NaN, holding ``values`` (or NaN):
    "front" contiguous at the front of a longer block; "transpose" (B, T, H, D) storage seen through
    transpose(1, 2), as heads split by view + transpose are; "kT" stored transposed (stride_d != 1);
    "slice" the last D columns of rows 2 D wide; "wide" both (the last D of rows 2 D wide, seen through
    transpose(1, 2)). The block has a whole block's worth of NaN (and ``pad`` rows of every head) before it and
    after it; every element of the storage but the view's stays NaN."""
    B, H, T, D = shape
    dtype = dtype or (values.dtype if values is not None else torch.float32)
    blocks = {"front": (B * H * T * D + B * H * pad * D,), "transpose": (B, T + pad, H, D), "kT": (B, H, D, T + pad),
              "slice": (B, H, T + pad, 2 * D), "wide": (B, T + pad, H, 2 * D)}
    if layout not in blocks:
        raise ValueError(layout)
    n = math.prod(blocks[layout])
    flat, block = _guarded(blocks[layout], dtype, n + B * H * pad * D, n + B * H * pad * D)
    view = {"front": lambda b: b[:B * H * T * D].view(B, H, T, D), "transpose": lambda b: b[:, :T].transpose(1, 2),
            "kT": lambda b: b[..., :T].transpose(-1, -2), "slice": lambda b: b[:, :, :T, D:],
            "wide": lambda b: b[:, :T, :, D:].transpose(1, 2)}[layout](block)
    if values is not None:
        with torch.no_grad():
            view.copy_(values.to(dtype))
    return flat, view


def place_rows(values: torch.Tensor | None, shape, pad: int = 64):
    """(storage, view): a contiguous float32 (B, H, T) view (L, Delta) inside a NaN-filled storage with room for
    ``pad`` more rows of every head after it (a kernel that addresses it T_K apart stays inside it) and as much
    before it."""
    n = math.prod(shape)
    room = n + math.prod(shape[:-1]) * pad + pad
    flat, view = _guarded(shape, torch.float32, room, room)
    if values is not None:
        view.copy_(values.float())
    return flat, view


def untouched(buf: torch.Tensor, view: torch.Tensor) -> bool:
    """Whether every element of the storage ``buf`` outside ``view`` is still NaN (nothing stored outside the view)."""
    cover = torch.zeros(buf.numel(), dtype=torch.bool)
    cover.as_strided(view.shape, view.stride(), view.storage_offset() - buf.storage_offset())[...] = True
    rest = buf.detach().cpu().reshape(-1)[~cover]
    return bool(torch.isnan(rest).all())


STORE_PAST = ("the store needs a mask: rows past the end (t >= T) of the last tile belong to another head or to "
              "nothing; store only the rows that exist")


# ----------------------------------------------------------------------------------------
# the oracle (float64, written out)
# ----------------------------------------------------------------------------------------
def scores(q, k, causal):
    q, k = q.detach().cpu().double(), k.detach().cpu().double()
    s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))                # (B, H, T_Q, T_K)
    if causal:
        T_Q, T_K = s.shape[-2:]
        s = s.masked_fill(torch.arange(T_K)[None, :] > torch.arange(T_Q)[:, None], float("-inf"))
    return s


def reference(q, k, v, do=None, causal=False, o=None) -> dict:
    """o, L (natural log), and with ``do``: Delta, dq, dk, dv, all float64. ``o`` replaces the output in
    Delta (the forward's output as stored, e.g. rounded to fp16)."""
    s = scores(q, k, causal)
    L = torch.logsumexp(s, dim=-1)                                     # (B, H, T_Q)
    p = torch.exp(s - L[..., None])
    v64 = v.detach().cpu().double()
    out = {"o": p @ v64, "L": L, "p": p}
    if do is not None:
        do64 = do.detach().cpu().double()
        o64 = out["o"] if o is None else o.detach().cpu().double()
        delta = (do64 * o64).sum(-1)
        scale = 1 / math.sqrt(q.size(-1))
        ds = p * (do64 @ v64.transpose(-1, -2) - delta[..., None])
        out.update(delta=delta, dv=p.transpose(-1, -2) @ do64, dq=scale * ds @ k.detach().cpu().double(),
                   dk=scale * ds.transpose(-1, -2) @ q.detach().cpu().double(), _do=do64, _v=v64)
    return out


# ----------------------------------------------------------------------------------------
# the forward kernel's algorithm, tile by tile, with a mistake switched on (naming)
# ----------------------------------------------------------------------------------------
def _pad(x: torch.Tensor, n: int) -> torch.Tensor:
    """x (B, H, T, D) float64 with zero rows appended up to n rows."""
    out = torch.zeros(*x.shape[:-2], n, x.size(-1), dtype=torch.float64)
    out[..., :x.size(-2), :] = x.detach().cpu().double()
    return out


def fwd_sim(q, k, v, causal, bm, bn, *, rescale_acc=True, rescale_l=True, mask_pad=True, causal_end="diagonal",
            keys="T_K", scale=None):
    """(o, m, l) of the forward kernel's loop in float64; ``keys`` "T_Q": the key loop and masks run to T_Q."""
    B, H, T_Q, D = q.shape
    T_K = k.size(-2)
    T_keys = T_K if keys == "T_K" else T_Q
    scale = 1 / math.sqrt(D) if scale is None else scale
    nq = -(-T_Q // bm)
    nk = -(-max(T_K, T_keys) // bn) + 1
    Q, K, V = _pad(q, nq * bm), _pad(k, nk * bn), _pad(v, nk * bn)
    o = torch.zeros(B, H, T_Q, D, dtype=torch.float64)
    M = torch.zeros(B, H, T_Q, dtype=torch.float64)
    Lsum = torch.zeros(B, H, T_Q, dtype=torch.float64)
    for i in range(nq):
        rows = torch.arange(i * bm, i * bm + bm)
        qi = Q[..., i * bm:i * bm + bm, :]
        m = torch.full((B, H, bm), float("-inf"), dtype=torch.float64)
        l = torch.zeros(B, H, bm, dtype=torch.float64)
        acc = torch.zeros(B, H, bm, D, dtype=torch.float64)
        end = T_keys
        if causal:
            end = {"diagonal": min((i + 1) * bm, T_keys), "early": min(i * bm, T_keys), "all": T_keys}[causal_end]
        for start in range(0, end, bn):
            cols = torch.arange(start, start + bn)
            s = qi @ K[..., start:start + bn, :].transpose(-1, -2) * scale
            keep = (cols[None, :] < T_keys) if mask_pad else torch.ones(1, bn, dtype=torch.bool)
            if causal:
                keep = keep & (cols[None, :] <= rows[:, None])
            s = s.masked_fill(~keep, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new[..., None])
            l = (l * alpha if rescale_l else l) + p.sum(-1)
            acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ V[..., start:start + bn, :]
            m = m_new
        n = min(T_Q, i * bm + bm) - i * bm
        o[..., i * bm:i * bm + n, :] = (acc / l[..., None])[..., :n, :]
        M[..., i * bm:i * bm + n], Lsum[..., i * bm:i * bm + n] = m[..., :n], l[..., :n]
    return o, M, Lsum


def forward_variants(q, k, v, causal, bm, bn) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{mistake: (O, L)} of the common forward-kernel mistakes (float64)."""
    D = q.size(-1)
    o, m, l = fwd_sim(q, k, v, causal, bm, bn)
    out = {
        "L is in base 2: a kernel that computes with tl.exp2 and scale * log2(e) has m and l in base 2; L must be "
        "the natural log-sum-exp: store (m2 + log2(l)) * ln(2), or compute with tl.exp":
            (o, (m + torch.log(l)) * LOG2E),
        "L = m + log2(l) mixes the bases: m is a natural-log maximum, so add tl.log(l)": (o, m + torch.log2(l)),
        "L is only the running maximum m: the log-sum-exp is m + log(l) (add the log of the running sum)": (o, m),
        "L is only log(l): the log-sum-exp is m + log(l) (add the running maximum back)": (o, torch.log(l)),
        "L is the running sum l itself: the log-sum-exp is m + log(l)": (o, l),
    }
    for name, kw in (("the accumulator acc is not rescaled when a tile raises the maximum: multiply it by "
                      "exp(m - m_new) before adding the tile's p @ v, as l is", dict(rescale_acc=False)),
                     ("the running sum l is not rescaled when a tile raises the maximum: multiply it by exp(m - m_new) "
                      "before adding the tile's sum", dict(rescale_l=False)),
                     ("the padded keys are not masked: past T_K the loads give zeros, whose score 0 still counts; set "
                      "the scores of keys >= T_K to -inf", dict(mask_pad=False)),
                     ("the scores are not multiplied by scale (1 / sqrt(D))", dict(scale=1.0)),
                     ("the scores are scaled by 1 / D instead of 1 / sqrt(D)", dict(scale=1 / D))):
        o2, m2, l2 = fwd_sim(q, k, v, causal, bm, bn, **kw)
        out[name] = (o2, m2 + torch.log(l2))
    if q.size(-2) < k.size(-2):
        o2, m2, l2 = fwd_sim(q, k, v, causal, bm, bn, keys="T_Q")
        out["the key loop or the key mask runs to T_Q: the keys' length is T_K (T_Q != T_K without CAUSAL)"] = \
            (o2, m2 + torch.log(l2))
    if causal:
        o2, m2, l2 = fwd_sim(q, k, v, causal, bm, bn, causal_end="early")
        out["the causal loop stops one tile early: the tile that holds the diagonal is skipped; run the key tiles "
            "up to min((i + 1) * BLOCK_M, T_K)"] = (o2, m2 + torch.log(l2))
        o2, m2, l2 = fwd_sim(q, k, v, False, bm, bn)
        out["the causal mask is not applied (CAUSAL=True must hide the keys after each query)"] = \
            (o2, m2 + torch.log(l2))
    return out


# ----------------------------------------------------------------------------------------
# the backward kernels' algorithm, tile by tile, with a mistake switched on (naming)
# ----------------------------------------------------------------------------------------
def bwd_sim(q, k, v, do, L, delta, causal, bm, bn, *, dk_scale=1, dq_scale=1, l_factor=1.0, s_scaled=True,
            p_mask=True, p_norm="L", ds="right", dp_t=False, ds_t=False, start="right", end="right",
            dq_overwrite=False, force_causal=False) -> dict[str, torch.Tensor]:
    """{"dq", "dk", "dv"} as the two backward kernels compute them (float64), with a mistake switched on:
    ``dk_scale``/``dq_scale`` the power of scale applied at the end; ``l_factor`` P = exp(S - l_factor * L)
    (0: without L; ln 2: tl.exp2 on a natural-log L); ``s_scaled`` False: S without scale; ``p_mask`` False: no
    causal mask in P; ``p_norm`` "tile" (a softmax over the key tile) or "tile_max" (exp(S - the tile's row
    maximum)); ``ds`` "no_delta" (P * dP), "tile_delta" (Delta from the tile's P * dP), "unweighted"
    (P * dP - Delta); ``dp_t`` dP transposed, ``ds_t`` dQ from dS^T (square tiles); ``start`` of the dK/dV
    causal loop "late" (one query tile after the right one) or "j_bm" (row j * BLOCK_M); ``end`` of the dQ
    causal loop "early" (one key tile short); ``dq_overwrite`` dQ = the last key tile's term only;
    ``force_causal`` the causal tiles and mask though the forward (L) was not causal."""
    B, H, T_Q, D = q.shape
    T_K = k.size(-2)
    causal = causal or force_causal
    scale = 1 / math.sqrt(D)
    nq, nk = -(-T_Q // bm) + 2, -(-T_K // bn) + 2
    Q, DO = _pad(q, nq * bm), _pad(do, nq * bm)
    K, V = _pad(k, nk * bn), _pad(v, nk * bn)
    Lp = torch.zeros(B, H, nq * bm, dtype=torch.float64)
    Dp = torch.zeros(B, H, nq * bm, dtype=torch.float64)
    Lp[..., :T_Q], Dp[..., :T_Q] = L.detach().cpu().double(), delta.detach().cpu().double()

    def tile(i0, j0):
        rows, cols = torch.arange(i0, i0 + bm), torch.arange(j0, j0 + bn)
        s = Q[..., i0:i0 + bm, :] @ K[..., j0:j0 + bn, :].transpose(-1, -2) * (scale if s_scaled else 1.0)
        keep = (rows[:, None] < T_Q) & (cols[None, :] < T_K)
        if causal and p_mask:
            keep = keep & (cols[None, :] <= rows[:, None])
        if p_norm == "L":
            p = torch.exp(s - l_factor * Lp[..., i0:i0 + bm, None])
        else:
            sm = s.masked_fill(~keep, float("-inf"))
            mx = sm.amax(-1, keepdim=True).nan_to_num(0.0, 0.0, 0.0).clamp(min=-1e30)
            p = torch.exp(sm - mx)
            if p_norm == "tile":
                p = p / p.sum(-1, keepdim=True).clamp(min=1e-300)
        p = torch.where(keep, p, torch.zeros((), dtype=torch.float64))
        dp = DO[..., i0:i0 + bm, :] @ V[..., j0:j0 + bn, :].transpose(-1, -2)
        if dp_t:
            dp = dp.transpose(-1, -2)
        dl = Dp[..., i0:i0 + bm, None]
        if ds == "no_delta":
            dS = p * dp
        elif ds == "tile_delta":
            dS = p * (dp - (p * dp).sum(-1, keepdim=True))
        elif ds == "unweighted":
            dS = p * dp - dl
        else:
            dS = p * (dp - dl)
        return p, dS

    dk = torch.zeros(B, H, nk * bn, D, dtype=torch.float64)
    dv = torch.zeros(B, H, nk * bn, D, dtype=torch.float64)
    for j in range(-(-T_K // bn)):
        j0 = j * bn
        first = 0
        if causal:
            first = {"right": j0 // bm * bm, "late": (j0 // bm + 1) * bm, "j_bm": j * bm}[start]
        for i0 in range(first, T_Q, bm):
            p, dS = tile(i0, j0)
            dv[..., j0:j0 + bn, :] += p.transpose(-1, -2) @ DO[..., i0:i0 + bm, :]
            dk[..., j0:j0 + bn, :] += dS.transpose(-1, -2) @ Q[..., i0:i0 + bm, :]
    dq = torch.zeros(B, H, nq * bm, D, dtype=torch.float64)
    for i in range(-(-T_Q // bm)):
        i0 = i * bm
        stop = T_K
        if causal:
            stop = {"right": min((i + 1) * bm, T_K), "early": min(i * bm, T_K)}[end]
        for j0 in range(0, stop, bn):
            _p, dS = tile(i0, j0)
            term = (dS.transpose(-1, -2) if ds_t else dS) @ K[..., j0:j0 + bn, :]
            dq[..., i0:i0 + bm, :] = term if dq_overwrite else dq[..., i0:i0 + bm, :] + term
    return {"dq": dq[..., :T_Q, :] * scale ** dq_scale, "dk": dk[..., :T_K, :] * scale ** dk_scale,
            "dv": dv[..., :T_K, :]}


def _common_bwd(causal, bm, bn, square: bool) -> dict[str, dict]:
    out = {
        "P is recomputed without subtracting L: P = exp(scale * Q K^T - L), L the forward's log-sum-exp, "
        "is what makes each row of P sum to 1": dict(l_factor=0.0),
        "P is recomputed with tl.exp2 on L in natural-log units: with exp2, multiply both the scaled scores "
        "and L by log2(e) (or use tl.exp)": dict(l_factor=math.log(2.0)),
        "the scores are not multiplied by scale before P = exp(S - L) is recomputed: S = scale * Q K^T, as in "
        "the forward": dict(s_scaled=False),
        "P is normalised within the key tile (a softmax over the tile): the row sums over all keys, which L "
        "holds; use P = exp(S - L)": dict(p_norm="tile"),
        "P is exp(S - the tile's row maximum), an unnormalised P: the forward's running maximum is not the "
        "backward's; use P = exp(S - L)": dict(p_norm="tile_max"),
        "Delta is ignored: dS = P * (dP - Delta), with Delta = rowsum(dO * O) from delta_kernel":
            dict(ds="no_delta"),
        "Delta is recomputed from the tile's P and dP: rowsum(P * dP) over one key tile is not the sum over "
        "all keys; use the Delta you are given (rowsum(dO * O))": dict(ds="tile_delta"),
        "Delta is subtracted outside the product: dS = P * (dP - Delta), not P * dP - Delta":
            dict(ds="unweighted"),
    }
    if causal:
        out["P is recomputed without the causal mask: keys after the query must get P = 0 (the diagonal "
            "tile holds both kinds)"] = dict(p_mask=False)
    else:
        out["the backward applies the causal mask though CAUSAL is False: without CAUSAL every query sees every "
            "key (every tile visited, no mask)"] = dict(force_causal=True)
    if square:
        out["dP is transposed: dP = dO V^T is (BLOCK_M, BLOCK_N), queries by keys"] = dict(dp_t=True)
    return out


def dkdv_variants(q, k, v, do, L, delta, causal, bm, bn) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{mistake: (dK, dV)} of the common dK/dV kernel mistakes."""
    specs = {
        "the scale is missing from dK: store scale * dK (dS = dL/dS is the gradient of the scaled scores)":
            dict(dk_scale=0),
        "the scale is applied twice to dK: once, either to dS or at the store": dict(dk_scale=2),
        **_common_bwd(causal, bm, bn, bm == bn),
    }
    if causal:
        specs["the causal loop over query tiles starts one tile late: it must start at the query tile that holds "
              "row j * BLOCK_N, whose lower rows see this tile's first keys"] = dict(start="late")
        if bm > bn:
            specs["the causal loop over query tiles starts at row j * BLOCK_M: key tile j begins at row j * BLOCK_N, "
                  "so start at the query tile that holds that row"] = dict(start="j_bm")
    out = {}
    for name, kw in specs.items():
        r = bwd_sim(q, k, v, do, L, delta, causal, bm, bn, **kw)
        out[name] = (r["dk"], r["dv"])
    return out


def dq_variants(q, k, v, do, L, delta, causal, bm, bn) -> dict[str, torch.Tensor]:
    """{mistake: dQ} of the common dQ kernel mistakes."""
    specs = {
        "the scale is missing from dQ: store scale * dQ (dS = dL/dS is the gradient of the scaled scores)":
            dict(dq_scale=0),
        "the scale is applied twice to dQ: once, either to dS or at the store": dict(dq_scale=2),
        "dQ is overwritten by each key tile: add every tile's dS K_j into a float32 accumulator":
            dict(dq_overwrite=True),
        **_common_bwd(causal, bm, bn, bm == bn),
    }
    if bm == bn:
        specs["dQ is computed from dS^T: dQ_i = dS K_j with dS (BLOCK_M, BLOCK_N), queries by keys"] = dict(ds_t=True)
    if causal:
        specs["the causal loop over key tiles stops one tile early: run it up to min((i + 1) * BLOCK_M, T_K), the "
              "tile that holds the diagonal included"] = dict(end="early")
    return {name: bwd_sim(q, k, v, do, L, delta, causal, bm, bn, **kw)["dq"] for name, kw in specs.items()}


# ----------------------------------------------------------------------------------------
# cases: inputs, launches, comparisons (the battery runs the same with its own inputs)
# ----------------------------------------------------------------------------------------
def make_inputs(g: torch.Generator, B, H, T_Q, T_K, D, *, scale=1.5, raise_late=True, do_shift=0.0,
                v_shift=0.0) -> dict[str, torch.Tensor]:
    """q, k, v, do (float32, CPU): later keys larger (a later tile raises the running maximum)."""
    q = torch.randn(B, H, T_Q, D, generator=g) * scale
    k = torch.randn(B, H, T_K, D, generator=g) * scale
    if raise_late:
        k[..., T_K // 2:, :] *= 2
    v = torch.randn(B, H, T_K, D, generator=g) + v_shift
    do = torch.randn(B, H, T_Q, D, generator=g) + do_shift
    return {"q": q, "k": k, "v": v, "do": do}


def _case_text(shape, causal, bm, bn, dtype, layouts) -> str:
    B, H, T_Q, T_K, D = shape
    lay = "" if all(x == "front" for x in layouts.values()) else \
        " (" + ", ".join(f"{n} {x}" for n, x in layouts.items() if x != "front") + ")"
    return (f"B={B}, H={H}, T_Q={T_Q}, T_K={T_K}, D={D}{', CAUSAL' if causal else ''}, BLOCK_M={bm}, BLOCK_N={bn}"
            f"{', float16' if dtype == torch.float16 else ''}{lay}")


LAYOUT_TEXT = {"transpose": "a head split by view + transpose", "kT": "stored transposed (stride_d != 1)",
               "slice": "a slice of wider rows", "wide": "a slice of wider rows, heads split by a transpose"}


def _strides(*ts):
    return [s for t in ts for s in t.stride()]


def _launch(kernel, name, grid, args, meta, reread):
    call(launch_kernel, kernel, grid, args, meta, name=name, reread=reread)


def _fp16_tol(want: torch.Tensor, steps: float = 2.0) -> float:
    """``steps`` times the largest error of rounding ``want`` to float16."""
    return steps * float((want.half().double() - want).abs().max()) + 1e-6


def _stride_culprits(run, layouts: dict[str, str]) -> list[str]:
    """The tensors whose strides the kernel mishandles: ``run(layouts)`` -> right or not, with one tensor strided at
    a time (the others contiguous)."""
    bad = []
    for name, lay in layouts.items():
        if lay != "front" and not run({n: (lay if n == name else "front") for n in layouts}):
            bad.append(name)
    return bad


def written_with(view: torch.Tensor, buf: torch.Tensor, values: torch.Tensor, others: dict[str, torch.Tensor]):
    """The name of the tensor in ``others`` whose strides, used to store ``values`` into ``view``'s buffer, give what
    ``view`` holds (None: no such one, or its addresses would leave the buffer)."""
    got = view.detach().cpu().double()
    size = buf.numel()
    for name, t in others.items():
        if t.stride() == view.stride():
            continue
        last = sum((n - 1) * st for n, st in zip(view.shape, t.stride())) + view.storage_offset() - buf.storage_offset()
        if last >= size:
            continue
        sim = torch.full((size,), float("nan"), dtype=torch.float64)
        sim.as_strided(view.shape, t.stride(), view.storage_offset() - buf.storage_offset()).copy_(values)
        seen = sim.as_strided(view.shape, view.stride(), view.storage_offset() - buf.storage_offset())
        if close(got, seen, atol=1e-4 * max(1.0, float(values.abs().max()))):
            return name
    return None


def _strides_hint(bad: list[str], kernel: str) -> str:
    if not bad:
        return (f"{kernel} is right when every tensor is contiguous and wrong with these strided ones: compute every "
                "address from the tensor's own four strides")
    return (f"wrong strides for {', '.join(bad)}: {kernel} is right when {'it is' if len(bad) == 1 else 'they are'} "
            "contiguous; find element [b, h, t, d] of each tensor through its own four strides (not another "
            "tensor's, not T * D)")


# -- flash_forward_kernel -------------------------------------------------------------------
def forward_case(kernel, x, causal, bm, bn, *, dtype=torch.float32, layouts=None, reread=SEC_SAVE_L,
                 o_tol=None, l_tol=None) -> None:
    """Launch flash_forward_kernel on x's q, k, v; compare O and L with the float64 oracle; name the mistake."""
    layouts = {"q": "front", "k": "front", "v": "front", "o": "front", **(layouts or {})}
    q0, k0, v0 = (x[n].to(dtype) for n in ("q", "k", "v"))
    B, H, T_Q, D = q0.shape
    T_K = k0.size(-2)
    case = _case_text((B, H, T_Q, T_K, D), causal, bm, bn, dtype, layouts)
    want = reference(q0, k0, v0, causal=causal)
    otol = o_tol if o_tol is not None else (tol32() if dtype == torch.float32 else _fp16_tol(want["o"]))
    ltol = l_tol if l_tol is not None else tol32()

    def run(lay):
        (_, q), (_, k), (_, v) = (place(t, t.shape, lay[n]) for n, t in (("q", q0), ("k", k0), ("v", v0)))
        obuf, o = place(None, (B, H, T_Q, D), lay["o"], dtype=dtype)
        lbuf, L = place_rows(None, (B, H, T_Q))
        _launch(kernel, "flash_forward_kernel", (-(-T_Q // bm), B * H),
                (q, k, v, o, L, *_strides(q, k, v, o), H, T_Q, T_K, 1 / math.sqrt(D)),
                dict(CAUSAL=bool(causal), BLOCK_M=bm, BLOCK_N=bn, D=D), reread)
        return obuf, o, lbuf, L

    obuf, o, lbuf, L = run(layouts)
    got_o, got_l = o.detach().cpu().double(), L.detach().cpu().double()
    ok_o, ok_l = close(got_o, want["o"], atol=otol), close(got_l, want["L"], atol=ltol)
    if ok_o and ok_l:
        if not untouched(obuf, o):
            raise CheckFailed(f"flash_forward_kernel on {case} wrote past the rows of O", reread=reread,
                              hint=STORE_PAST)
        if not untouched(lbuf, L):
            raise CheckFailed(f"flash_forward_kernel on {case} wrote past the last entry of L", reread=SEC_SAVE_L,
                              hint="store L with the mask rows < T_Q: the entries past T_Q belong to nothing")
        return
    details = [f"max |O - expected| = {max_abs_diff(got_o, want['o']):.3g} (tolerance {otol:.2g}), "
               f"max |L - expected| = {max_abs_diff(got_l, want['L']):.3g} (tolerance {ltol:.2g})"]
    name = None
    if dtype == torch.float32 or ok_o:
        variants = {n: c for n, c in forward_variants(q0, k0, v0, causal, bm, bn).items()
                    if not (close(c[0], want["o"], atol=1e-7) and close(c[1], want["L"], atol=1e-7))}
        for n, (co, cl) in variants.items():
            if close(got_o, co, atol=max(otol, 1e-5)) and close(got_l, cl, atol=max(ltol, 1e-5)):
                name = n
                break
    if name is None and ok_o and T_Q != T_K:
        sim = torch.full((lbuf.numel(),), float("nan"), dtype=torch.float64)
        at = L.storage_offset() - lbuf.storage_offset()
        for bh in range(B * H):
            sim[at + bh * T_K:at + bh * T_K + T_Q] = want["L"].reshape(B * H, T_Q)[bh]
        if close(lbuf.detach().cpu().double()[:sim.numel()], sim, atol=1e-4):
            name = ("L's entries are written T_K apart: the entry of query t of (b, h) is at L + (b * H + h) * T_Q "
                    "+ t (L has one entry per query)")
    if name is None and ok_l and layouts["o"] != "front":
        other = written_with(o, obuf, want["o"], {"q": place(q0, q0.shape, layouts["q"])[1]})
        if other:
            name = f"O is stored with {other}'s strides: store it with O's own four strides (stride_ob ... stride_od)"
    if name is None and any(lay != "front" for lay in layouts.values()):
        def right(lay):
            _, o2, _, L2 = run(lay)
            return close(o2.cpu().double(), want["o"], atol=otol) and close(L2.cpu().double(), want["L"], atol=ltol)
        if right({n: "front" for n in layouts}):
            name = _strides_hint(_stride_culprits(right, layouts), "flash_forward_kernel")
    if name is None and dtype == torch.float16:
        x32 = {n: t.to(torch.float16).float() for n, t in x.items()}
        try:
            forward_case(kernel, x32, causal, bm, bn, layouts=layouts, reread=reread)
            right32 = True
        except CheckFailed:
            right32 = False
        if right32:
            name = ("keep m, l and acc in float32 (tl.zeros(..., tl.float32)) whatever the input's dtype: cast only "
                    "the probabilities to V's dtype for tl.dot; an fp16 accumulator loses the small terms")
    if name is None and torch.isnan(got_o).any() and not torch.isnan(want["o"]).any():
        name = ("nan in O: a load of the last tile without a mask reads past the end (masks on every load of a tile "
                "that hangs past T_Q or T_K), or a row whose scores are all -inf")
    if name is None and ok_o:
        name = "O is right and L is not: L[b, h, t] = m + log(l) at the end of the loop, natural log, one per query row"
    raise CheckFailed(f"flash_forward_kernel on {case} has the wrong {'L' if ok_o else 'O' if ok_l else 'O and L'}",
                      reread=reread, details=details,
                      hint=name or "first make exercise 10's kernel right on these inputs (rescaling, padded keys, "
                                   "the causal bound, strides), then store L = m + log(l) for the rows < T_Q")


def forward_values(flash_forward_kernel) -> None:
    """No mask: O and L for several heads, T_Q = T_K a multiple of the tiles, then T_Q != T_K, neither a multiple."""
    g = torch.Generator().manual_seed(110)
    forward_case(flash_forward_kernel, make_inputs(g, 1, 2, 32, 32, 16), False, 16, 16)
    forward_case(flash_forward_kernel, make_inputs(g, 2, 1, 20, 37, 16), False, 16, 16)
    forward_case(flash_forward_kernel, make_inputs(g, 1, 1, 5, 5, 32), False, 16, 32)
    passed("flash_forward_kernel: O and L = log-sum-exp of every query, T_Q != T_K, padded tiles masked")


def forward_causal(flash_forward_kernel) -> None:
    """CAUSAL: the diagonal tile masked inside, the tiles after it skipped; BLOCK_M and BLOCK_N differ."""
    g = torch.Generator().manual_seed(111)
    forward_case(flash_forward_kernel, make_inputs(g, 1, 2, 40, 40, 16), True, 16, 16, reread=SEC_CAUSAL)
    forward_case(flash_forward_kernel, make_inputs(g, 1, 1, 24, 24, 16), True, 32, 16, reread=SEC_CAUSAL)
    passed("flash_forward_kernel: causal O and L, with BLOCK_M = BLOCK_N and BLOCK_M > BLOCK_N")


def forward_layouts(flash_forward_kernel) -> None:
    """q, k, v and O strided (each its own strides); float16 inputs with float32 accumulators."""
    g = torch.Generator().manual_seed(112)
    forward_case(flash_forward_kernel, make_inputs(g, 1, 2, 20, 20, 16), True, 16, 16,
                 layouts={"q": "transpose", "k": "kT", "v": "slice", "o": "transpose"})
    x = make_inputs(g, 1, 1, 64, 64, 16, scale=0.7, raise_late=False, v_shift=6.0)
    forward_case(flash_forward_kernel, x, False, 32, 16, dtype=torch.float16, reread=SEC_SAVE_L)
    passed("flash_forward_kernel: strided q, k, v and O; fp16 in and out, within one fp16 step")


# -- delta_kernel -----------------------------------------------------------------------------
def delta_case(kernel, x, bm, *, dtype=torch.float32, layouts=None) -> None:
    """Launch delta_kernel on o, do (x["o"], x["do"]); compare Delta with sum(do * o) in float64."""
    layouts = {"o": "front", "do": "front", **(layouts or {})}
    o0, do0 = x["o"].to(dtype), x["do"].to(dtype)
    B, H, T_Q, D = o0.shape
    case = _case_text((B, H, T_Q, T_Q, D), False, bm, bm, dtype, layouts).replace(", BLOCK_N=" + str(bm), "")
    want = (o0.double() * do0.double()).sum(-1)
    tol = tol32() * max(1.0, float(want.abs().max()))

    def run(lay):
        _, o = place(o0, o0.shape, lay["o"])
        _, do = place(do0, do0.shape, lay["do"])
        buf, delta = place_rows(None, (B, H, T_Q))
        _launch(kernel, "delta_kernel", (-(-T_Q // bm), B * H), (o, do, delta, *_strides(o, do), H, T_Q),
                dict(BLOCK_M=bm, D=D), SEC_DELTA)
        return buf, delta

    buf, delta = run(layouts)
    got = delta.detach().cpu().double()
    if close(got, want, atol=tol):
        if not untouched(buf, delta):
            raise CheckFailed(f"delta_kernel on {case} wrote past the last entry of Delta", reread=SEC_DELTA,
                              hint="store Delta with the mask rows < T_Q: the entries past T_Q belong to nothing")
        return
    name = None
    o64, do64 = o0.double(), do0.double()
    if D == bm:                             # tl.sum(..., axis=0) of a (BLOCK_M, D) tile stores D numbers per tile
        cols = torch.zeros(B, H, T_Q, dtype=torch.float64)
        prod = o64 * do64
        for i0 in range(0, T_Q, bm):
            n = min(T_Q - i0, bm)
            cols[..., i0:i0 + n] = prod[..., i0:i0 + bm, :].sum(-2)[..., :n]
        if close(got, cols, atol=max(tol, 1e-5)):
            name = "Delta sums over the wrong axis: reduce the (BLOCK_M, D) product over axis=1, the head dimension"
    if name is None and layouts["o"] != layouts["do"]:
        _, o_l = place(o0, o0.shape, layouts["o"])
        _, do_l = place(do0, do0.shape, layouts["do"])
        need = max(sum((n - 1) * s for n, s in zip(do_l.shape, o_l.stride())) + do_l.storage_offset(), 0)
        if need < do_l.untyped_storage().nbytes() // do_l.element_size():
            seen = torch.as_strided(do_l, do_l.shape, o_l.stride()).detach().cpu().double()
            if close(got, (o64 * seen).sum(-1), atol=max(tol, 1e-5)):
                name = "dO is read with O's strides: pass and use dO's own four strides"
    if name is None and any(lay != "front" for lay in layouts.values()):
        def right(lay):
            return close(run(lay)[1].detach().cpu().double(), want, atol=tol)
        if right({n: "front" for n in layouts}):
            name = _strides_hint(_stride_culprits(right, layouts), "delta_kernel")
    if name is None and dtype == torch.float16:
        right32 = close(run_delta32(kernel, o0, do0, bm), want, atol=tol32() * max(1.0, float(want.abs().max())))
        if right32:
            name = ("the products are summed in float16: cast the O and dO tiles to float32 (.to(tl.float32)) before "
                    "multiplying, so Delta keeps float32's precision")
    raise CheckFailed(f"delta_kernel on {case} has the wrong values", reread=SEC_DELTA,
                      details=[f"max |Delta - sum(dO * O)| = {max_abs_diff(got, want):.3g} (tolerance {tol:.2g})"],
                      hint=name or "per query row t < T_Q: Delta[t] = sum over d of dO[t, d] * O[t, d], in float32")


def run_delta32(kernel, o0, do0, bm) -> torch.Tensor:
    B, H, T_Q, D = o0.shape
    _, o = place(o0.float(), o0.shape)
    _, do = place(do0.float(), do0.shape)
    _, delta = place_rows(None, (B, H, T_Q))
    _launch(kernel, "delta_kernel", (-(-T_Q // bm), B * H), (o, do, delta, *_strides(o, do), H, T_Q),
            dict(BLOCK_M=bm, D=D), SEC_DELTA)
    return delta.detach().cpu().double()


def _od(g, B, H, T, D, o_shift=0.0):
    return {"o": torch.randn(B, H, T, D, generator=g) + o_shift, "do": torch.randn(B, H, T, D, generator=g)}


def delta_values(delta_kernel) -> None:
    """Several heads, T_Q not a multiple of BLOCK_M, BLOCK_M 16 and 32."""
    g = torch.Generator().manual_seed(113)
    delta_case(delta_kernel, _od(g, 1, 2, 20, 16), 16)
    delta_case(delta_kernel, _od(g, 2, 1, 37, 32), 32)
    passed("delta_kernel: Delta = rowsum(dO * O) for every query, rows past T_Q neither read nor stored")


def delta_layouts(delta_kernel) -> None:
    """O and dO with strides of their own; fp16 O and dO summed in float32."""
    g = torch.Generator().manual_seed(114)
    delta_case(delta_kernel, _od(g, 2, 2, 20, 16), 16, layouts={"o": "transpose", "do": "slice"})
    delta_case(delta_kernel, _od(g, 1, 1, 24, 32, o_shift=6.0), 16, dtype=torch.float16)
    passed("delta_kernel: strided O and dO; fp16 inputs summed in float32")


# -- dkdv_kernel and dq_kernel ------------------------------------------------------------------
def _bwd_inputs(x, causal, dtype):
    """q, k, v, do in ``dtype``, and L, Delta from the float64 oracle (Delta from O as stored in ``dtype``)."""
    q0, k0, v0, do0 = (x[n].to(dtype) for n in ("q", "k", "v", "do"))
    fwd = reference(q0, k0, v0, causal=causal)
    o_stored = fwd["o"].to(dtype)
    want = reference(q0, k0, v0, do0, causal=causal, o=o_stored)
    return q0, k0, v0, do0, want


def _bwd_tol(want: torch.Tensor, dtype, cast_bound: torch.Tensor | None = None) -> float:
    """float32: tol32() relative to the largest value. float16: 1.5 times the largest error of rounding the answer to
    fp16 (the one rounding of a float32 accumulator at the store), plus ``cast_bound``, the most the fp16 casts of
    the tiles fed to tl.dot can move it (2^-11 of the sum of the absolute terms)."""
    if dtype == torch.float16:
        return _fp16_tol(want, 1.5) + (0.0 if cast_bound is None else float(cast_bound.max()))
    return tol32() * max(1.0, float(want.abs().max()))


def cast_bounds(want: dict, q, k, causal) -> dict[str, torch.Tensor]:
    """How far casting P and dS to fp16 for tl.dot can move dV, dK, dQ: 2^-11 x the sums of the absolute terms."""
    s = scores(q, k, causal)
    p = torch.exp(s - want["L"][..., None])
    do64 = want["_do"]
    ds = (p * (do64 @ want["_v"].transpose(-1, -2) - want["delta"][..., None])).abs()
    sc, u = 1 / math.sqrt(q.size(-1)), 2.0 ** -11
    qa, ka = q.detach().cpu().double().abs(), k.detach().cpu().double().abs()
    p_cast = (p - p.half().double()).abs() + 2.0 ** -20 * p          # P's own fp16 rounding (0 when exact)
    return {"dv": p_cast.transpose(-1, -2) @ do64.abs(), "dk": u * sc * ds.transpose(-1, -2) @ qa,
            "dq": u * sc * ds @ ka}


def dkdv_case(kernel, x, causal, bm, bn, *, dtype=torch.float32, layouts=None, reread=SEC_DKDV) -> None:
    """Launch dkdv_kernel with exact L and Delta; compare dK and dV with the float64 oracle; name the mistake."""
    layouts = {"q": "front", "k": "front", "v": "front", "do": "front", "dk": "front", "dv": "front",
               **(layouts or {})}
    q0, k0, v0, do0, want = _bwd_inputs(x, causal, dtype)
    B, H, T_Q, D = q0.shape
    T_K = k0.size(-2)
    case = _case_text((B, H, T_Q, T_K, D), causal, bm, bn, dtype, layouts)
    bound = cast_bounds(want, q0, k0, causal) if dtype == torch.float16 else {}
    tk, tv = _bwd_tol(want["dk"], dtype, bound.get("dk")), _bwd_tol(want["dv"], dtype, bound.get("dv"))

    def run(lay, ins=(q0, k0, v0, do0), dt=dtype):
        (_, q), (_, k), (_, v), (_, do) = (place(t, t.shape, lay[n]) for n, t in zip(("q", "k", "v", "do"), ins))
        _, L = place_rows(want["L"], (B, H, T_Q))
        _, delta = place_rows(want["delta"], (B, H, T_Q))
        kbuf, dk = place(None, (B, H, T_K, D), lay["dk"], dtype=dt)
        vbuf, dv = place(None, (B, H, T_K, D), lay["dv"], dtype=dt)
        _launch(kernel, "dkdv_kernel", (-(-T_K // bn), B * H),
                (q, k, v, do, L, delta, dk, dv, *_strides(q, k, v, do, dk, dv), H, T_Q, T_K, 1 / math.sqrt(D)),
                dict(CAUSAL=bool(causal), BLOCK_M=bm, BLOCK_N=bn, D=D), reread)
        return kbuf, dk, vbuf, dv

    kbuf, dk, vbuf, dv = run(layouts)
    got_k, got_v = dk.detach().cpu().double(), dv.detach().cpu().double()
    ok_k, ok_v = close(got_k, want["dk"], atol=tk), close(got_v, want["dv"], atol=tv)
    if ok_k and ok_v:
        if not (untouched(kbuf, dk) and untouched(vbuf, dv)):
            raise CheckFailed(f"dkdv_kernel on {case} wrote past the rows of dK or dV", reread=reread,
                              hint=STORE_PAST.replace("t >= T", "key t >= T_K"))
        return
    details = [f"max |dK - expected| = {max_abs_diff(got_k, want['dk']):.3g} (tolerance {tk:.2g}), "
               f"max |dV - expected| = {max_abs_diff(got_v, want['dv']):.3g} (tolerance {tv:.2g})"]
    name = None
    if dtype == torch.float32:
        for n, (ck, cv) in dkdv_variants(q0, k0, v0, do0, want["L"], want["delta"], causal, bm, bn).items():
            if close(ck, want["dk"], atol=1e-7) and close(cv, want["dv"], atol=1e-7):
                continue
            if close(got_k, ck, atol=max(tk, 1e-5)) and close(got_v, cv, atol=max(tv, 1e-5)):
                name = n
                break
        if name is None and ok_v and close(got_k, want["dk"] * (q0.size(-1) ** 0.5), atol=max(tk, 1e-5)):
            name = "the scale is missing from dK: store scale * dK"
    if name is None and (layouts["dk"] != "front" or layouts["dv"] != "front"):
        ins = {n: place(t, t.shape, layouts[n])[1] for n, t in zip(("q", "k", "v", "do"), (q0, k0, v0, do0))}
        for out, view, buf, ok in (("dK", dk, kbuf, ok_k), ("dV", dv, vbuf, ok_v)):
            other = None if ok else written_with(view, buf, want[out.lower()], ins)
            if other:
                name = f"{out} is stored with {other}'s strides: store it with {out}'s own four strides"
                break
    if name is None and any(lay != "front" for lay in layouts.values()):
        def right(lay):
            _, a, _, b = run(lay)
            return close(a.cpu().double(), want["dk"], atol=tk) and close(b.cpu().double(), want["dv"], atol=tv)
        if right({n: "front" for n in layouts}):
            name = _strides_hint(_stride_culprits(right, layouts), "dkdv_kernel")
    if name is None and dtype == torch.float16:
        _, a, _, b = run({n: "front" for n in layouts}, ins=tuple(t.float() for t in (q0, k0, v0, do0)),
                         dt=torch.float32)
        if close(a.cpu().double(), want["dk"], atol=1e-4 * max(1.0, float(want["dk"].abs().max()))) and \
                close(b.cpu().double(), want["dv"], atol=1e-4 * max(1.0, float(want["dv"].abs().max()))):
            name = ("keep dK and dV in float32 accumulators (tl.zeros(..., tl.float32)) whatever the input's dtype: "
                    "cast P and dS to the other operand's dtype only for tl.dot; fp16 accumulators lose the small "
                    "terms")
    if name is None and (torch.isnan(got_k).any() or torch.isnan(got_v).any()):
        name = ("nan in dK or dV: a load of the last query or key tile without a mask reads past the end (mask the "
                "loads of Q, dO, L and Delta with rows < T_Q, of K and V with keys < T_K)")
    what = "dK and dV" if not (ok_k or ok_v) else ("dK" if ok_v else "dV")
    raise CheckFailed(f"dkdv_kernel on {case}: {what} {'is' if what != 'dK and dV' else 'are'} wrong", reread=reread,
                      details=details,
                      hint=name or "per query tile: S = scale * Q_i K_j^T, P = exp(S - L_i) (0 where masked), "
                                   "dV += P^T dO_i, dP = dO_i V_j^T, dS = P * (dP - Delta_i), dK += dS^T Q_i; store "
                                   "scale * dK and dV for the keys < T_K")


def dq_case(kernel, x, causal, bm, bn, *, dtype=torch.float32, layouts=None, reread=SEC_DQ) -> None:
    """Launch dq_kernel with exact L and Delta; compare dQ with the float64 oracle; name the mistake."""
    layouts = {"q": "front", "k": "front", "v": "front", "do": "front", "dq": "front", **(layouts or {})}
    q0, k0, v0, do0, want = _bwd_inputs(x, causal, dtype)
    B, H, T_Q, D = q0.shape
    T_K = k0.size(-2)
    case = _case_text((B, H, T_Q, T_K, D), causal, bm, bn, dtype, layouts)
    bound = cast_bounds(want, q0, k0, causal) if dtype == torch.float16 else {}
    tq = _bwd_tol(want["dq"], dtype, bound.get("dq"))

    def run(lay, ins=(q0, k0, v0, do0), dt=dtype):
        (_, q), (_, k), (_, v), (_, do) = (place(t, t.shape, lay[n]) for n, t in zip(("q", "k", "v", "do"), ins))
        _, L = place_rows(want["L"], (B, H, T_Q))
        _, delta = place_rows(want["delta"], (B, H, T_Q))
        qbuf, dq = place(None, (B, H, T_Q, D), lay["dq"], dtype=dt)
        _launch(kernel, "dq_kernel", (-(-T_Q // bm), B * H),
                (q, k, v, do, L, delta, dq, *_strides(q, k, v, do, dq), H, T_Q, T_K, 1 / math.sqrt(D)),
                dict(CAUSAL=bool(causal), BLOCK_M=bm, BLOCK_N=bn, D=D), reread)
        return qbuf, dq

    qbuf, dq = run(layouts)
    got = dq.detach().cpu().double()
    if close(got, want["dq"], atol=tq):
        if not untouched(qbuf, dq):
            raise CheckFailed(f"dq_kernel on {case} wrote past the rows of dQ", reread=reread,
                              hint=STORE_PAST.replace("t >= T", "query t >= T_Q"))
        return
    name = None
    if dtype == torch.float32:
        cands = {n: c for n, c in dq_variants(q0, k0, v0, do0, want["L"], want["delta"], causal, bm, bn).items()
                 if not close(c, want["dq"], atol=1e-7)}
        name = first_match(got, cands, atol=max(tq, 1e-5))
    if name is None and layouts["dq"] != "front":
        ins = {n: place(t, t.shape, layouts[n])[1] for n, t in zip(("q", "k", "v", "do"), (q0, k0, v0, do0))}
        other = written_with(dq, qbuf, want["dq"], ins)
        if other:
            name = (f"dQ is stored with {other}'s strides: store it with dQ's own four strides (stride_dqb ... "
                    "stride_dqd)")
    if name is None and any(lay != "front" for lay in layouts.values()):
        def right(lay):
            return close(run(lay)[1].cpu().double(), want["dq"], atol=tq)
        if right({n: "front" for n in layouts}):
            name = _strides_hint(_stride_culprits(right, layouts), "dq_kernel")
    if name is None and dtype == torch.float16:
        _, a = run({n: "front" for n in layouts}, ins=tuple(t.float() for t in (q0, k0, v0, do0)), dt=torch.float32)
        if close(a.cpu().double(), want["dq"], atol=1e-4 * max(1.0, float(want["dq"].abs().max()))):
            name = ("keep dQ in a float32 accumulator (tl.zeros(..., tl.float32)) whatever the input's dtype: cast dS "
                    "to K's dtype only for tl.dot; an fp16 accumulator loses the small terms")
    if name is None and torch.isnan(got).any():
        name = ("nan in dQ: a load of the last query or key tile without a mask reads past the end (mask the loads of "
                "Q, dO, L and Delta with rows < T_Q, of K and V with keys < T_K)")
        if causal:
            name += ("; under CAUSAL, also stop the loop at min((i + 1) * BLOCK_M, T_K), not (i + 1) * BLOCK_M, "
                     "which lies past T_K in the last query tile")
    raise CheckFailed(f"dq_kernel on {case}: dQ is wrong", reread=reread,
                      details=[f"max |dQ - expected| = {max_abs_diff(got, want['dq']):.3g} (tolerance {tq:.2g})"],
                      hint=name or "per key tile: S = scale * Q_i K_j^T, P = exp(S - L_i) (0 where masked), "
                                   "dP = dO_i V_j^T, dS = P * (dP - Delta_i), dQ += dS K_j; store scale * dQ for the "
                                   "rows < T_Q")


STRIDED_BWD = {"q": "transpose", "k": "kT", "v": "slice", "do": "transpose"}


def fp16_bwd_inputs(g, T_Q=512, T_K=16, D=16, uniform=False):
    """fp16 inputs whose gradients are sums over many tiles (32 to 64 of 16 rows: what an fp16 accumulator rounds at
    every step; a float32 accumulator rounds once, at the store). ``uniform``: q = 0, so P = 1 / T_K exactly (a power of
    2: its fp16 cast is exact) and dV = the sum of dO's rows / T_K, exact in float32 until its one rounding."""
    x = make_inputs(g, 1, 1, T_Q, T_K, D, scale=0.5, raise_late=False, do_shift=4.0, v_shift=2.0)
    if uniform:
        x["q"].zero_()
    return x


def dkdv_values(dkdv_kernel) -> None:
    """No mask: square tiles over several heads; T_Q != T_K, neither a multiple of the tiles."""
    g = torch.Generator().manual_seed(115)
    dkdv_case(dkdv_kernel, make_inputs(g, 1, 2, 32, 32, 16), False, 16, 16)
    dkdv_case(dkdv_kernel, make_inputs(g, 2, 1, 37, 20, 16), False, 16, 32)
    passed("dkdv_kernel: dK and dV equal float64 autograd's, T_Q != T_K, padded tiles masked")


def dkdv_causal(dkdv_kernel) -> None:
    """CAUSAL with BLOCK_M = BLOCK_N, BLOCK_M > BLOCK_N and BLOCK_M < BLOCK_N, T not a multiple of a tile."""
    g = torch.Generator().manual_seed(116)
    dkdv_case(dkdv_kernel, make_inputs(g, 1, 2, 40, 40, 16), True, 16, 16, reread=SEC_CAUSAL)
    dkdv_case(dkdv_kernel, make_inputs(g, 1, 1, 40, 40, 16), True, 32, 16, reread=SEC_CAUSAL)
    dkdv_case(dkdv_kernel, make_inputs(g, 1, 1, 24, 24, 16), True, 16, 32, reread=SEC_CAUSAL)
    passed("dkdv_kernel: causal dK and dV, the query tiles above each key tile skipped, none too many")


def dkdv_layouts(dkdv_kernel) -> None:
    """Every input and output strided; fp16 inputs and outputs with float32 accumulators."""
    g = torch.Generator().manual_seed(117)
    dkdv_case(dkdv_kernel, make_inputs(g, 1, 2, 20, 20, 16), True, 16, 16,
              layouts={**STRIDED_BWD, "dk": "transpose", "dv": "slice"})
    dkdv_case(dkdv_kernel, fp16_bwd_inputs(g, 1024, 16, uniform=True), False, 16, 16, dtype=torch.float16)
    passed("dkdv_kernel: strided Q, K, V, dO, dK and dV; fp16 in and out with float32 accumulators")


def dq_values(dq_kernel) -> None:
    """No mask: square tiles over several heads; T_Q != T_K, neither a multiple of the tiles."""
    g = torch.Generator().manual_seed(118)
    dq_case(dq_kernel, make_inputs(g, 1, 2, 32, 32, 16), False, 16, 16)
    dq_case(dq_kernel, make_inputs(g, 2, 1, 20, 37, 16), False, 32, 16)
    passed("dq_kernel: dQ equals float64 autograd's, T_Q != T_K, padded tiles masked")


def dq_causal(dq_kernel) -> None:
    """CAUSAL with square and unequal tiles, T not a multiple of a tile."""
    g = torch.Generator().manual_seed(119)
    dq_case(dq_kernel, make_inputs(g, 1, 2, 40, 40, 16), True, 16, 16, reread=SEC_CAUSAL)
    # T = 48: a multiple of BLOCK_N, not of BLOCK_M: the last query tile's bound (i + 1) * BLOCK_M = 64 lies past T_K
    dq_case(dq_kernel, make_inputs(g, 1, 1, 48, 48, 16), True, 32, 16, reread=SEC_CAUSAL)
    passed("dq_kernel: causal dQ, the key tiles after the diagonal skipped, the diagonal tile kept")


def dq_layouts(dq_kernel) -> None:
    """Every input and dQ strided; fp16 inputs and output with a float32 accumulator."""
    g = torch.Generator().manual_seed(120)
    dq_case(dq_kernel, make_inputs(g, 1, 2, 20, 20, 16), True, 16, 16,
            layouts={**STRIDED_BWD, "do": "wide", "dq": "slice"})
    dq_case(dq_kernel, fp16_bwd_inputs(g, 16, 512), False, 16, 16, dtype=torch.float16)
    passed("dq_kernel: strided Q, K, V, dO and dQ; fp16 in and out with a float32 accumulator")


# ----------------------------------------------------------------------------------------
# FlashAttention (the autograd Function), through flash_attention(q, k, v, causal, block_m, block_n)
# ----------------------------------------------------------------------------------------
def grads_of(fn, q, k, v, do, *, name="flash_attention", reread=SEC_AUTOGRAD, **kw):
    """(o, [dq, dk, dv]) of ``fn(q, k, v, **kw)`` with ``o.backward(do)``: q, k, v are leaves that require grad."""
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]

    def fwd_bwd(q, k, v, **kw):
        o = fn(q, k, v, **kw)
        if not isinstance(o, torch.Tensor):
            raise TypeError(f"it returned {type(o).__name__}, not a tensor")
        if tuple(o.shape) != tuple(do.shape):
            raise ValueError(f"its output has shape {tuple(o.shape)}, expected {tuple(do.shape)}")
        if not o.requires_grad:
            raise RuntimeError("its output does not require grad: return the output of FlashAttention.apply")
        o.backward(do)
        return o.detach(), [t.grad for t in (q, k, v)]

    return call(fwd_bwd, *leaves, name=name, reread=reread, **kw)


def _function_variants(q, k, v, do, causal, o_ref) -> dict[str, dict]:
    """{mistake: {"dq", "dk", "dv"}} of the launch mistakes a Function makes with right kernels."""
    out = {}
    r = reference(q, k, v, do, causal=causal, o=o_ref)
    if q.shape == k.shape:
        out["the gradients come back in the wrong order: backward returns dq, dk, dv (then None for causal, block_m, "
            "block_n), in the order of forward's inputs"] = {"dq": r["dk"], "dk": r["dq"], "dv": r["dv"]}
    if causal:
        s_all = scores(q, k, False)
        p = torch.exp(s_all - r["L"][..., None])
        do64, v64 = do.double(), v.double()
        ds = p * (do64 @ v64.transpose(-1, -2) - r["delta"][..., None])
        sc = 1 / math.sqrt(q.size(-1))
        out["CAUSAL is not passed to the backward kernels: launch them with the causal flag the forward saved on ctx"] \
            = {"dq": sc * ds @ k.double(), "dk": sc * ds.transpose(-1, -2) @ q.double(),
               "dv": p.transpose(-1, -2) @ do64}
    return out


def function_tolerances(want: dict, rounded: dict, dtype) -> dict[str, float]:
    """Tolerances of the Function's O and gradients against the float64 answer ``want`` (O exact in Delta).
    float32: tol32() relative. float16: a Function may take Delta from O as stored (rounded to fp16) or exact,
    ``rounded`` is the answer with the former; O within 6 of its largest fp16 rounding errors, dq and dk within 6
    plus 4.5 times the two answers' difference, dv within 5 (measured: the solution and the float32 PyTorch
    Function stay under a third of these on the check's inputs, the kernels' fp16-accumulator mistakes under half,
    L kept in float16 goes 1.6x to 3x over on dv)."""
    if dtype == torch.float32:
        return {n: tol32() * max(1.0, float(want[n].abs().max())) for n in ("o", "dq", "dk", "dv")}
    out = {"o": _fp16_tol(want["o"], 6.0), "dv": _fp16_tol(want["dv"], 5.0)}
    for n in ("dq", "dk"):
        out[n] = _fp16_tol(want[n], 6.0) + 4.5 * max_abs_diff(rounded[n], want[n])
    return out


def _function_case(fn, x, causal, blocks, *, dtype=torch.float32, layouts=None, reread=SEC_AUTOGRAD,
                   watch=None) -> None:
    layouts = {"q": "front", "k": "front", "v": "front", "do": "front", **(layouts or {})}
    ins = {n: place(x[n].to(dtype), x[n].shape, layouts[n])[1] for n in ("q", "k", "v", "do")}
    q, k, v, do = ins["q"], ins["k"], ins["v"], ins["do"]
    B, H, T_Q, D = q.shape
    T_K = k.size(-2)
    kw = {} if causal is None else {"causal": causal}
    if blocks is not None:
        kw.update(block_m=blocks[0], block_n=blocks[1])
    bm, bn = blocks or (16, 16)
    case = _case_text((B, H, T_Q, T_K, D), bool(causal), bm, bn, dtype, layouts)
    if blocks is None:
        case += " (block_m and block_n left at their defaults)"
    with forbid(kernel_builtins(), NO_SDPA):
        if watch is not None:
            watch("start")
        try:
            o, grads = grads_of(fn, q, k, v, do, reread=reread, **kw)
        finally:
            if watch is not None:
                watch.seen = watch("stop")
    want = reference(q, k, v, do, causal=bool(causal))
    o_ref = want["o"]
    tols = function_tolerances(want, reference(q, k, v, do, causal=bool(causal), o=o_ref.to(dtype)), dtype)
    if o.dtype != q.dtype:
        raise CheckFailed(f"flash_attention on {case} returned {o.dtype} for {q.dtype} inputs", reread=reread,
                          hint="allocate O in q's dtype (the kernel converts on the store)")
    tol_o = tols["o"]
    got_o = o.detach().cpu().double()
    if not close(got_o, want["o"], atol=tol_o):
        name = None
        if close(got_o, reference(q / math.sqrt(D), k, v, causal=bool(causal))["o"], atol=max(tol_o, 1e-5)):
            name = "scale is 1 / sqrt(D), D = q.shape[-1]; not 1 / D"
        elif causal and close(got_o, reference(q, k, v, causal=False)["o"], atol=max(tol_o, 1e-5)):
            name = "CAUSAL is not passed on to the forward kernel: launch it with CAUSAL=causal"
        raise CheckFailed(f"FlashAttention's forward on {case} returns the wrong output", reread=reread,
                          details=[f"max |O - SDPA| = {max_abs_diff(got_o, want['o']):.3g} (tolerance {tol_o:.2g})"],
                          hint=name or "if the forward kernel's checks above pass, look at the launch: grid "
                                       "(cdiv(T_Q, block_m), B * H), each tensor's own strides, T_Q and T_K, scale = "
                                       "1 / sqrt(D), CAUSAL=causal, the block sizes")
    missing = [n for n, gr in zip(("dq", "dk", "dv"), grads) if gr is None]
    if missing:
        raise CheckFailed(f"FlashAttention on {case}: no gradient for {', '.join(missing)}", reread=reread,
                          hint="backward returns dq, dk, dv (then None for causal, block_m, block_n)")
    got = {n: gr.detach().cpu().double() for n, gr in zip(("dq", "dk", "dv"), grads)}
    wrong = [n for n in ("dq", "dk", "dv") if not close(got[n], want[n], atol=tols[n])]
    if not wrong:
        return
    details = [f"max |{n} - float64 autograd| = {max_abs_diff(got[n], want[n]):.3g} (tolerance {tols[n]:.2g})"
               for n in ("dq", "dk", "dv")]
    name = None
    if dtype == torch.float32:
        for n, cand in _function_variants(q, k, v, do, bool(causal), o_ref).items():
            if all(close(got[g], cand[g], atol=max(tols[g], 1e-5)) for g in ("dq", "dk", "dv")):
                name = n
                break
    if name is None and layouts["do"] != "front":
        try:
            with forbid(kernel_builtins(), NO_SDPA):
                _, g2 = grads_of(fn, *(place(x[n].to(dtype), x[n].shape, layouts[n])[1] for n in ("q", "k", "v")),
                                 x["do"].to(dtype).to(device()), reread=reread, **kw)
            if all(close(a.detach().cpu().double(), want[n], atol=tols[n]) for a, n in zip(g2, ("dq", "dk", "dv"))):
                name = ("right with a contiguous dO, wrong with this strided one: pass do.stride() for dO (autograd "
                        "hands backward a dO of any layout), never O's strides")
        except CheckFailed:
            pass
    if name is None and dtype == torch.float16:
        name = ("keep L and Delta in float32 (B, H, T_Q) tensors whatever the inputs' dtype: in float16, L ~ 10 is "
                "rounded by 0.008 and P = exp(S - L) by as much")
    if name is None and set(wrong) == {"dq", "dk"}:
        name = ("dQ and dK are wrong and dV is right: dV does not use Delta, dQ and dK do: look at delta_kernel's "
                "launch (every query row: grid (cdiv(T_Q, block_m), B * H) with BLOCK_M=block_m)")
    if name is None and wrong == ["dq"]:
        name = ("dK and dV are right and dQ is wrong: if dq_kernel's checks pass, look at its launch (grid "
                "(cdiv(T_Q, block_m), B * H), dq's strides, T_Q and T_K)")
    if name is None and set(wrong) & {"dk", "dv"} and "dq" not in wrong:
        name = ("dQ is right and dK or dV is wrong: if dkdv_kernel's checks pass, look at its launch (grid "
                "(cdiv(T_K, block_n), B * H): one program per key tile of block_n keys; dk's and dv's strides)")
    raise CheckFailed(f"FlashAttention's backward on {case}: {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} "
                      "wrong", reread=reread, details=details,
                      hint=name or "if the kernels' checks above pass, look at the launches: Delta first, then "
                                   "dkdv_kernel on (cdiv(T_K, block_n), B * H) and dq_kernel on (cdiv(T_Q, block_m), "
                                   "B * H) with each tensor's own strides, T_Q, T_K, scale and CAUSAL")


def _is_function(FlashAttention) -> None:
    if not (isinstance(FlashAttention, type) and issubclass(FlashAttention, torch.autograd.Function)):
        raise CheckFailed("FlashAttention is not a torch.autograd.Function subclass", reread=SEC_AUTOGRAD,
                          hint="class FlashAttention(torch.autograd.Function) with static forward(ctx, ...) and "
                               "backward(ctx, do)")


def function_grads(FlashAttention, flash_attention) -> None:
    """O and dq, dk, dv against float64 autograd: causal and not (and causal left at its default), T_Q != T_K,
    unequal tiles, default tiles."""
    _is_function(FlashAttention)
    g = torch.Generator().manual_seed(121)
    _function_case(flash_attention, make_inputs(g, 1, 2, 24, 24, 16), None, None)
    _function_case(flash_attention, make_inputs(g, 2, 1, 20, 33, 16), False, (32, 16))
    _function_case(flash_attention, make_inputs(g, 1, 1, 40, 40, 16), True, (16, 32))
    passed("FlashAttention: O, dq, dk and dv equal float64 autograd's, causal or not, T_Q != T_K, any tiles")


def function_layouts(FlashAttention, flash_attention) -> None:
    """Strided q, k, v and dO; fp16; and the attention computed by the kernels, not in PyTorch."""
    from .ex09 import Watch

    _is_function(FlashAttention)
    g = torch.Generator().manual_seed(122)
    _function_case(flash_attention, make_inputs(g, 1, 2, 20, 20, 16), True, (16, 16), layouts=STRIDED_BWD)
    x = make_inputs(g, 1, 1, 48, 48, 16, scale=1.4, raise_late=False)
    x["k"][..., :1, :] = x["q"][..., :1, :] * 3          # one large score per row: L around 10
    _function_case(flash_attention, x, True, (16, 16), dtype=torch.float16)
    x = make_inputs(g, 1, 1, 48, 48, 16)
    watch = Watch(16)
    _function_case(flash_attention, x, False, (16, 16), watch=watch)
    largest = watch.seen["largest"]
    if largest[0] * 2 >= 48 * 48:
        raise CheckFailed(f"FlashAttention creates a PyTorch tensor of {largest[0]} numbers ({tuple(largest[1])}): as "
                          "large as the (T_Q, T_K) score matrix or half of it", reread=SEC_AUTOGRAD,
                          hint="the attention is your kernels' work: forward and backward only allocate O, L, Delta "
                               "and the gradients, and launch the kernels")
    passed("FlashAttention: strided q, k, v and dO, fp16, and no (T, T) tensor in PyTorch")


# ----------------------------------------------------------------------------------------
# FlashCausalSelfAttention: lecture 08's attention through flash_attention, and a GPT trained with it
# ----------------------------------------------------------------------------------------
GPT_CONFIG = dict(vocab_size=23, block_size=32, n_layer=1, n_head=2, d_model=32, dropout=0.0)


def module_variants(ref, x, is_causal) -> dict[str, torch.Tensor]:
    """{mistake: output} of the common mistakes of the module, from the reference module's weights (float64)."""
    B, T, Dm = x.shape
    H = ref.n_heads
    W, bW = ref.W_qkv.weight.double(), ref.W_qkv.bias.double()
    Wo, bo = ref.W_o.weight.double(), ref.W_o.bias.double()
    x64 = x.double()
    q, k, v = F.linear(x64, W, bW).split(Dm, dim=-1)

    def heads(t, split_right=True):
        return t.view(B, T, H, Dm // H).transpose(1, 2) if split_right else t.reshape(B, H, T, Dm // H)

    def attn(q, k, v, causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    y = attn(heads(q), heads(k), heads(v), is_causal)
    right = y.transpose(1, 2).reshape(B, T, Dm)
    out = {
        "the heads are merged without moving the head axis back: (B, H, T, Dh) -> transpose(1, 2) -> (B, T, Dm)":
            F.linear(y.reshape(B, T, Dm), Wo, bo),
        "the heads are split without the transpose: view (B, T, H, Dh), then transpose(1, 2) to (B, H, T, Dh)":
            F.linear(attn(heads(q, False), heads(k, False), heads(v, False), is_causal).transpose(1, 2)
                     .reshape(B, T, Dm), Wo, bo),
        "the output projection W_o is not applied after the heads are merged": right,
        "causal is not passed on: flash_attention(q, k, v, causal=is_causal)":
            F.linear(attn(heads(q), heads(k), heads(v), not is_causal).transpose(1, 2).reshape(B, T, Dm), Wo, bo),
    }
    if not is_causal:
        out["the attention is causal whatever is_causal says: pass causal=is_causal (is_causal=False: every query "
            "sees every key)"] = out.pop("causal is not passed on: flash_attention(q, k, v, causal=is_causal)")
    return out


def _module_case(cls, ref, x, is_causal, what):
    mod = call(cls, ref.d_model, ref.n_heads, name="FlashCausalSelfAttention", reread=SEC_TRAINING)
    try:
        mod.load_state_dict(ref.state_dict())
    except (RuntimeError, AttributeError) as e:
        raise CheckFailed("FlashCausalSelfAttention's parameters are not lecture 08's CausalSelfAttention's",
                          reread=SEC_TRAINING, details=[str(e).splitlines()[0][:160]],
                          hint="subclass CausalSelfAttention and keep its W_qkv and W_o (override forward only)")
    kw = {"is_causal": True} if is_causal else {}            # is_causal=False: its default
    with forbid(kernel_builtins(), NO_SDPA.replace("FlashAttention", "FlashCausalSelfAttention")):
        out = call(mod, x, name="FlashCausalSelfAttention", reread=SEC_TRAINING, **kw)
    out = expect_tensor(out, "FlashCausalSelfAttention", SEC_TRAINING)
    expect_shape(out, x.shape, f"FlashCausalSelfAttention on {what}", reread=SEC_TRAINING,
                 hint="the output has x's shape (B, T, D_model)")
    with torch.no_grad():
        want = ref.double()(x.double(), is_causal=is_causal)
        ref.float()
    got = out.detach().cpu().double()
    if close(got, want, atol=1e-4):
        return mod
    cands = module_variants(ref, x, is_causal)
    name = first_match(got, {n: c.detach() for n, c in cands.items() if not close(c.detach(), want, atol=1e-7)},
                       atol=1e-4)
    raise CheckFailed(f"FlashCausalSelfAttention on {what} differs from CausalSelfAttention with the same weights",
                      reread=SEC_TRAINING,
                      details=[f"max |yours - lecture 08's| = {max_abs_diff(got, want):.3g} (tolerance 1e-4)"],
                      hint=name or "q, k, v = W_qkv(x) split along the last axis, each viewed as (B, T, H, Dh) and "
                                   "transposed to (B, H, T, Dh); flash_attention(q, k, v, causal=is_causal); "
                                   "transpose back, reshape to (B, T, Dm), W_o")


def refuses_other_inputs(mod, x) -> None:
    """A mask, or keys and values of their own, are not supported: the module says so with a ValueError."""
    T = x.size(1)
    for what, kw in (("a mask", {"mask": torch.ones(T, T, dtype=torch.bool)}), ("kv (cross-attention)", {"kv": x})):
        try:
            mod(x, **kw)
        except ValueError:
            continue
        except Exception as e:  # noqa: BLE001 - any other error is the wrong answer to bad input
            raise CheckFailed(f"FlashCausalSelfAttention given {what} raised {type(e).__name__}, not ValueError",
                              reread=SEC_TRAINING, hint="check kv and mask first: if either is given, raise a "
                                                        "ValueError that says what is supported") from None
        raise CheckFailed(f"FlashCausalSelfAttention given {what} ran without a word", reread=SEC_TRAINING,
                          hint="kv and mask are not supported: raise a ValueError when either is given, instead of "
                               "silently computing causal self-attention")


def tiny_gpt(cfg: dict, seed: int, attention_cls=None):
    """Lecture 08's GPT (float32) after torch.manual_seed(seed); with ``attention_cls``, every block's attention
    replaced by an instance of it holding the same weights."""
    from ..gpt import GPT

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = GPT(**cfg)
    finally:
        torch.random.set_rng_state(state)
    if attention_cls is not None:
        install(model, [attention_cls(cfg["d_model"], cfg["n_head"]) for _ in model.blocks])
    return model


def install(model, modules) -> None:
    """Each block's attention replaced by ``modules[i]``, loaded with that block's weights."""
    for block, mod in zip(model.blocks, modules):
        mod.load_state_dict(block.attn.state_dict())
        block.attn = mod


def train_losses(model, batches, lr: float) -> tuple[list[float], dict]:
    """SGD on ``batches`` [(x, y)]: the loss before each step, and the gradients of the first step."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses, first = [], None
    for x, y in batches:
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        if first is None:
            first = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        losses.append(float(loss))
    return losses, first


def gpt_batches(g: torch.Generator, cfg: dict, steps: int, B: int = 2, T: int = 32):
    V = cfg["vocab_size"]
    return [(torch.randint(V, (B, T), generator=g), torch.randint(V, (B, T), generator=g)) for _ in range(steps)]


def gpt_trains(FlashCausalSelfAttention, g: torch.Generator | None = None, seed: int = 11) -> None:
    """The module equals lecture 08's attention (called with is_causal=False); a GPT with it in every block (which
    calls it with is_causal=True) has float64 PyTorch's gradients and trains along the same loss curve (SGD, two
    steps). The battery passes its own generator and seed."""
    from ..gpt import CausalSelfAttention

    g = torch.Generator().manual_seed(123) if g is None else g
    if not (isinstance(FlashCausalSelfAttention, type) and issubclass(FlashCausalSelfAttention, CausalSelfAttention)):
        raise CheckFailed("FlashCausalSelfAttention does not subclass lecture 08's CausalSelfAttention",
                          reread=SEC_TRAINING, hint="class FlashCausalSelfAttention(CausalSelfAttention): override "
                                                    "forward only, so a GPT's weights load into it")
    cfg = GPT_CONFIG
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ref = CausalSelfAttention(cfg["d_model"], cfg["n_head"])
    # T = 32, two tiles of the default 16 and none padded: the module's q, k, v are views of W_qkv(x), whose rows
    # past T are nobody's (a kernel that read past them would read whatever lies there)
    # (is_causal=True: the GPT below calls it so)
    x = torch.randn(2, 32, cfg["d_model"], generator=g)
    mod = _module_case(FlashCausalSelfAttention, ref, x, False, "x (2, 32, 32), 2 heads, is_causal left at its default")
    refuses_other_inputs(mod, x)
    batches = gpt_batches(g, cfg, 2, B=1)
    mine = call(tiny_gpt, cfg, seed, FlashCausalSelfAttention, name="FlashCausalSelfAttention", reread=SEC_TRAINING)
    oracle = tiny_gpt(cfg, seed).double()
    with forbid(kernel_builtins(), NO_SDPA.replace("FlashAttention", "FlashCausalSelfAttention")):
        losses, first = call(train_losses, mine, batches, 0.5, name="FlashCausalSelfAttention (a GPT trained with it)",
                             reread=SEC_TRAINING)
    want, want_first = train_losses(oracle, batches, 0.5)
    compare_training(losses, first, want, want_first)
    passed(f"FlashCausalSelfAttention: a GPT trained through your kernels follows PyTorch's loss curve "
           f"({', '.join(f'{x:.4f}' for x in losses)})")


def compare_training(losses, first, want, want_first, prefix: str = "") -> None:
    worst = max((max_abs_diff(first[n].double(), want_first[n]) / max(1e-3, float(want_first[n].abs().max())), n)
                for n in want_first)
    if worst[0] > 1e-4:
        raise CheckFailed(f"{prefix}the gradients of a GPT with FlashCausalSelfAttention differ from float64 PyTorch's",
                          reread=SEC_TRAINING,
                          details=[f"worst: {worst[1]}, max |difference| / max |gradient| = {worst[0]:.2g} "
                                   "(tolerance 1e-4)"],
                          hint="if FlashAttention's checks pass, the module's forward loses the gradient somewhere: "
                               "no .detach(), no torch.no_grad(), the heads as views of W_qkv(x)")
    diff = max(abs(a - b) for a, b in zip(losses, want))
    if diff > 1e-4:
        raise CheckFailed(f"{prefix}a GPT with FlashCausalSelfAttention trains along another loss curve than PyTorch's",
                          reread=SEC_TRAINING,
                          details=[f"yours {', '.join(f'{x:.5f}' for x in losses)}",
                                   f"PyTorch (float64) {', '.join(f'{x:.5f}' for x in want)} (tolerance 1e-4)"],
                          hint="if the gradients of the first step agree, look for state kept between calls "
                               "(a tensor cached on the module or on ctx across steps)")


guard(globals())  # every check records warnings instead of printing them (core.guard)
