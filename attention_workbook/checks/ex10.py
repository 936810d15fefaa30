"""Visible checks for exercise 10_flash_attention_triton: softmax_kernel, flash_attention_kernel and
the launcher flash_attention.

The kernels are launched here as the exercise specifies (``kernel[grid](...)``), under Triton's
interpreter where no CUDA GPU is visible (``attention_workbook.tritonenv``; this module imports
no Triton itself). Oracles: ``torch.softmax`` and ``F.scaled_dot_product_attention`` in float64.
When a result is wrong the check recomputes what the common kernel mistakes produce, tile by
tile in PyTorch (``flash_variants``: the accumulator not rescaled, padded keys not masked, the
causal loop stopping one tile early, addresses computed as if the tensors were contiguous, ...)
and names the one the output matches. Output buffers sit inside larger ones filled with NaN, so
a store past the last row or column is seen too.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

from .core import (CheckFailed, call, close, expect_shape, expect_tensor, first_match, forbid, guard, max_abs_diff,
                   passed, softmax_builtins)

LECTURE = "lectures/10_flash_attention_triton.ipynb"
SEC_MODEL = f"lecture 10, section 2 'Triton's programming model' ({LECTURE}#triton-model)"
SEC_SOFTMAX = f"lecture 10, section 4 'A fused row softmax' ({LECTURE}#fused-softmax)"
SEC_FLASH = f"lecture 10, section 5 'FlashAttention's forward pass as a kernel' ({LECTURE}#flash-forward)"
SEC_CAUSAL = f"lecture 10, section 6 'Causal masking that skips whole tiles' ({LECTURE}#causal-tiles)"
SEC_PRECISION = f"lecture 10, section 7 'Precision: fp16 in, fp32 inside' ({LECTURE}#precision)"

NO_SDPA = ("the attention is the kernel's work: F.scaled_dot_product_attention and the softmax built-ins are off "
           "limits in flash_attention")


def device() -> str:
    """Where the kernels' tensors live: the GPU where Triton compiles for one, else the CPU (interpreter)."""
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0") or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


def atol() -> float:
    """float32 tolerance: exact-ish in the interpreter; on a GPU tl.dot may round float32 inputs to TF32."""
    return 1e-5 if device() == "cpu" else 3e-3


def flash_builtins() -> list[tuple[object, str]]:
    return softmax_builtins() + [(F, "scaled_dot_product_attention")]


# ----------------------------------------------------------------------------------------
# launching a kernel
# ----------------------------------------------------------------------------------------
def launch_kernel(kernel, grid, args, kwargs) -> None:
    """``kernel[grid](*args, **kwargs)``; the interpreter's wrapped exceptions unwrapped where they
    say what happened (a stub's NotImplementedError, a kernel that is not a kernel)."""
    if not hasattr(kernel, "__getitem__"):
        raise TypeError(f"{getattr(kernel, '__name__', 'it')} is not a Triton kernel: decorate it with @triton.jit")
    try:
        kernel[tuple(grid)](*args, **kwargs)
    except Exception as e:  # named below, or raised as it was
        if "NotImplementedError()" in f"{type(e).__name__}({e})" or "NotImplementedError()" in str(e):   # a stub's
            raise NotImplementedError() from None
        raise


def _launch(kernel, grid, args, kwargs, name, reread):
    call(launch_kernel, kernel, grid, args, kwargs, name=name, reread=reread)


def _buffer(shape, pad, dtype=torch.float32, dev=None):
    """A NaN-filled buffer ``pad`` larger along the last two axes (and one more row at the end): the view the
    kernel writes is its corner, so a store past the view's last row or column lands in NaN the check reads,
    never outside memory the check owns."""
    big = torch.full((*shape[:-2], shape[-2] + pad[0], shape[-1] + pad[1]), float("nan"), dtype=dtype,
                     device=dev or device())
    spare = torch.full((big.numel() + (shape[-2] + pad[0]) * (shape[-1] + pad[1]),), float("nan"), dtype=dtype,
                       device=dev or device())
    big = spare[:big.numel()].view(big.shape)
    return big, big[..., :shape[-2], :shape[-1]]


def _front(shape, dtype=torch.float32, dev=None):
    """(buffer, view): a contiguous ``shape`` at the front of a NaN-filled buffer with room for 32 more rows of
    every head after it: a store past the last row of the last head lands in NaN the check reads."""
    n = math.prod(shape)
    buf = torch.full((n + math.prod(shape[:-2]) * 32 * shape[-1],), float("nan"), dtype=dtype, device=dev or device())
    return buf, buf[:n].view(shape)


def _untouched(big, shape) -> bool:
    rows, cols = shape[-2], shape[-1]
    return bool(torch.isnan(big[..., rows:, :]).all() and torch.isnan(big[..., :, cols:]).all())


# ----------------------------------------------------------------------------------------
# softmax_kernel
# ----------------------------------------------------------------------------------------
def softmax_variants(x: torch.Tensor, block: int) -> dict[str, torch.Tensor]:
    """What the common fused-softmax mistakes give for the rows of ``x`` (n_cols = x.size(-1))."""
    n = x.size(-1)
    xf = x.float().cpu()
    pad = torch.cat([xf, torch.zeros(x.size(0), block - n)], dim=1)
    e = torch.exp(pad - pad.amax(dim=1, keepdim=True))
    return {
        "the padded columns (past n_cols) count in the sum: load them with other=-inf, whose exp is 0, not 0.0":
            (e / e.sum(dim=1, keepdim=True))[:, :n],
        "no maximum is subtracted: exp of large values overflows to inf (inf / inf = nan); subtract the row's "
        "maximum before tl.exp": torch.exp(xf) / torch.exp(xf).sum(dim=1, keepdim=True),
        "the row is not normalised: divide exp(x - max) by its sum over the row":
            torch.exp(xf - xf.amax(dim=1, keepdim=True)),
    }


def _softmax_launch(kernel, x, y, block, name="softmax_kernel"):
    _launch(kernel, (x.size(0),), (x, y, x.stride(0), y.stride(0), x.size(1)), {"BLOCK": block}, name, SEC_SOFTMAX)


def _softmax_case(kernel, x, block, what):
    big, y = _buffer(x.shape, (0, block))
    _softmax_launch(kernel, x, y, block)
    want = torch.softmax(x.double(), dim=-1)
    if not close(y.cpu(), want, atol=atol()):
        name = first_match(y.cpu().double(), {k: v.double() for k, v in softmax_variants(x, block).items()
                                              if not close(v.double(), want, atol=1e-6)}, atol=1e-5)
        raise CheckFailed(f"softmax_kernel on {what} (BLOCK={block}) wrote the wrong values", reread=SEC_SOFTMAX,
                          hint=name or "load the row with a mask (padded columns -inf), subtract its maximum, "
                                       "exponentiate, divide by the sum, store with the same mask",
                          details=[f"max |yours - softmax| = {max_abs_diff(y.cpu(), want):.3g} (tolerance {atol():g})"])
    if not _untouched(big, x.shape):
        raise CheckFailed(f"softmax_kernel on {what} (BLOCK={block}) wrote past column n_cols", reread=SEC_SOFTMAX,
                          hint="the store needs the same mask as the load: columns n_cols .. BLOCK - 1 belong to "
                               "whatever lies next to the row")


def softmax_kernel_values(softmax_kernel) -> None:
    """One program per row: a full block, a padded block (n_cols < BLOCK) and values around 1000."""
    g = torch.Generator().manual_seed(10)
    dev = device()
    r = lambda *s: torch.randn(*s, generator=g).to(dev)
    _softmax_case(softmax_kernel, r(4, 16) * 2, 16, "x (4, 16)")
    _softmax_case(softmax_kernel, r(3, 10) * 2, 16, "x (3, 10): 6 padded columns")
    _softmax_case(softmax_kernel, r(2, 5), 16, "x (2, 5): 11 padded columns")
    _softmax_case(softmax_kernel, r(3, 12) * 20 + 1000, 16, "x (3, 12) around 1000")
    passed("softmax_kernel: the softmax of every row, padded columns masked, stable around 1000")


def softmax_kernel_strides(softmax_kernel) -> None:
    """Rows that do not follow each other: x a slice of a wider tensor, y with a stride of its own."""
    g = torch.Generator().manual_seed(11)
    dev = device()
    wide = torch.randn(5, 24, generator=g).to(dev) * 2
    x = wide[:, 3:13]                                               # (5, 10), row stride 24
    big = torch.full((6, 32), float("nan"), device=dev)[:5]
    y = big[:, :10]                                                 # row stride 32
    _softmax_launch(softmax_kernel, x, y, 16)
    want = torch.softmax(x.double(), dim=-1)
    if close(y.cpu(), want, atol=atol()) and torch.isnan(big[:, 10:]).all():
        passed("softmax_kernel: rows found by their own strides, in the input and in the output")
        return
    flat = wide.reshape(-1).cpu()
    packed = torch.stack([flat[3 + r * 10: 3 + r * 10 + 10] for r in range(5)])     # rows read n_cols apart
    cands = {"the rows are read n_cols apart: row r of the input starts at X + r * stride_x": packed.double()
             .softmax(-1)}
    sim = torch.full((5 * 32,), float("nan"), dtype=torch.float64)
    for r in range(5):                                              # written with the input's stride
        sim[r * 24:r * 24 + 10] = want[r].cpu()
    cands["the output is written with the input's stride: row r of the output starts at Y + r * stride_y"] = \
        sim.view(5, 32)[:, :10]
    name = first_match(y.cpu().double(), cands, atol=1e-5)
    if name is None and close(y.cpu(), want, atol=atol()):
        name = ("wrote past column n_cols: the store needs the same mask as the load (the next columns belong to "
                "another tensor)")
    raise CheckFailed("softmax_kernel on x = wide[:, 3:13] (row stride 24) into y (row stride 32) is wrong",
                      reread=SEC_SOFTMAX,
                      hint=name or "row r starts at X + r * stride_x in the input and at Y + r * stride_y in the "
                                   "output; its n_cols entries are contiguous",
                      details=[f"max |yours - softmax| = {max_abs_diff(y.cpu(), want):.3g}"])


# ----------------------------------------------------------------------------------------
# flash_attention_kernel: the mistakes, recomputed tile by tile (shared with the battery)
# ----------------------------------------------------------------------------------------
def flash_sim(q, k, v, causal, bm, bn, *, scale=None, rescale_acc=True, rescale_l=True, mask_pad=True,
              causal_end="diagonal", strict=False) -> torch.Tensor:
    """The forward kernel's algorithm in float64, tile by tile over (B, H, T, D), with a mistake switched
    on: ``causal_end`` "diagonal" (right), "early" (the loop stops before the diagonal tile) or "all"
    (no tile skipped); ``strict`` a query does not see itself."""
    q, k, v = (t.detach().cpu().double() for t in (q, k, v))
    B, H, T, D = q.shape
    scale = 1 / math.sqrt(D) if scale is None else scale
    out = torch.empty(B, H, T, D, dtype=torch.float64)
    for i in range(-(-T // bm)):
        rows = torch.arange(i * bm, i * bm + bm)
        qi = torch.zeros(B, H, bm, D, dtype=torch.float64)
        nr = min(T, i * bm + bm) - i * bm
        qi[:, :, :nr] = q[:, :, i * bm:i * bm + nr]
        m = torch.full((B, H, bm), float("-inf"), dtype=torch.float64)
        l = torch.zeros(B, H, bm, dtype=torch.float64)
        acc = torch.zeros(B, H, bm, D, dtype=torch.float64)
        end = T
        if causal:
            end = {"diagonal": min((i + 1) * bm, T), "early": i * bm, "all": T}[causal_end]
        for start in range(0, end, bn):
            cols = torch.arange(start, start + bn)
            nc = max(0, min(T, start + bn) - start)
            kj = torch.zeros(B, H, bn, D, dtype=torch.float64)
            vj = torch.zeros(B, H, bn, D, dtype=torch.float64)
            kj[:, :, :nc], vj[:, :, :nc] = k[:, :, start:start + nc], v[:, :, start:start + nc]
            s = qi @ kj.transpose(-1, -2) * scale
            keep = (cols[None, :] < T) if mask_pad else torch.ones(1, bn, dtype=torch.bool)
            if causal:
                keep = keep & ((cols[None, :] < rows[:, None]) if strict else (cols[None, :] <= rows[:, None]))
            s = s.masked_fill(~keep, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new[..., None])
            l = (l * alpha if rescale_l else l) + p.sum(-1)
            acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ vj
            m = m_new
        out[:, :, i * bm:i * bm + nr] = (acc / l[..., None])[:, :, :nr]
    return out


def flash_variants(q, k, v, causal, bm, bn) -> dict[str, torch.Tensor]:
    """What the common forward-kernel mistakes give (float64), named by their hints."""
    D = q.size(-1)
    out = {
        "the accumulator acc is not rescaled when a tile raises the maximum: multiply it by exp(m - m_new) before "
        "adding the tile's p @ v, as l is": flash_sim(q, k, v, causal, bm, bn, rescale_acc=False),
        "the running sum l is not rescaled when a tile raises the maximum: multiply it by exp(m - m_new) before "
        "adding the tile's sum": flash_sim(q, k, v, causal, bm, bn, rescale_l=False),
        "the padded keys are not masked: past T the loads give zeros, whose score 0 still counts in the softmax; "
        "set the scores of keys >= T to -inf": flash_sim(q, k, v, causal, bm, bn, mask_pad=False),
        "the scores are not multiplied by scale (1 / sqrt(D))": flash_sim(q, k, v, causal, bm, bn, scale=1.0),
    }
    if causal:
        out["the causal loop stops one tile early: the tile that holds the diagonal is skipped, so the first "
            "queries see no key at all; run the key tiles up to min((i + 1) * BLOCK_M, T)"] = \
            flash_sim(q, k, v, causal, bm, bn, causal_end="early")
        out["a query does not see its own key: the causal mask keeps keys <= the query's position"] = \
            flash_sim(q, k, v, causal, bm, bn, strict=True)
        out["the causal mask is not applied (CAUSAL=True must hide the keys after each query)"] = \
            flash_sim(q, k, v, False, bm, bn)
    else:
        out["causal masking applied though CAUSAL is False"] = flash_sim(q, k, v, True, bm, bn)
    out["the scores are scaled by 1 / D instead of 1 / sqrt(D)"] = flash_sim(q, k, v, causal, bm, bn, scale=1 / D)
    return out


def contiguous_reads(t: torch.Tensor) -> torch.Tensor:
    """What a kernel reads of ``t`` (B, H, T, D) when it computes addresses as if ``t`` were contiguous."""
    B, H, T, D = t.shape
    return torch.as_strided(t, t.shape, (H * T * D, T * D, D, 1))


def contiguous_writes(o: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """What the view ``o`` (NaN before) holds after ``values`` are written at contiguous addresses from its start."""
    n = o.untyped_storage().nbytes() // o.element_size()
    flat = torch.full((n,), float("nan"), dtype=torch.float64)
    flat[o.storage_offset():o.storage_offset() + values.numel()] = values.reshape(-1)
    return torch.as_strided(flat, o.shape, o.stride(), o.storage_offset())


def _strides(*ts):
    return [s for t in ts for s in t.stride()]


def _flash_launch(kernel, q, k, v, o, causal, bm, bn, scale=None, name="flash_attention_kernel", reread=SEC_FLASH):
    B, H, T, D = q.shape
    scale = 1 / math.sqrt(D) if scale is None else scale
    _launch(kernel, (-(-T // bm), B * H), (q, k, v, o, *_strides(q, k, v, o), H, T, scale),
            {"CAUSAL": bool(causal), "BLOCK_M": bm, "BLOCK_N": bn, "D": D}, name, reread)


STORE_PAST = ("store only the rows < T: the last query tile hangs past the end, and those rows belong to the next "
              "head (or to another tensor)")


def _flash_case(kernel, q, k, v, causal, bm, bn, what, reread=SEC_FLASH, tol=None, o=None):
    buf = None
    if o is None:
        buf, o = _front(q.shape, q.dtype)
    _flash_launch(kernel, q, k, v, o, causal, bm, bn, reread=reread)
    want = F.scaled_dot_product_attention(q.cpu().double(), k.cpu().double(), v.cpu().double(), is_causal=causal)
    tol = atol() if tol is None else tol
    case = f"{what}, CAUSAL={causal}, BLOCK_M={bm}, BLOCK_N={bn}"
    if buf is not None and not torch.isnan(buf[o.numel():]).all():
        raise CheckFailed(f"flash_attention_kernel on {case} wrote past row T - 1 of the last head", reread=reread,
                          hint=STORE_PAST)
    got = o.detach().cpu().double()
    if not close(got, want, atol=tol):
        name = first_match(got, {n: c for n, c in flash_variants(q, k, v, causal, bm, bn).items()
                                 if not close(c, want, atol=1e-6)}, atol=max(tol, 1e-5))
        if name is None:
            cont = {t: contiguous_reads(x) for t, x in (("q", q), ("k", k), ("v", v)) if not x.is_contiguous()}
            if cont:
                qc, kc, vc = (cont.get(n, x) for n, x in (("q", q), ("k", k), ("v", v)))
                wrong = F.scaled_dot_product_attention(qc.cpu().double(), kc.cpu().double(), vc.cpu().double(),
                                                       is_causal=causal)
                if close(got, wrong, atol=max(tol, 1e-5)):
                    name = (f"wrong strides for a non-contiguous input ({', '.join(cont)}): the addresses are "
                            "computed as if the tensors were contiguous; use each tensor's own four strides")
                elif not o.is_contiguous() and close(got, contiguous_writes(o, wrong), atol=max(tol, 1e-5)):
                    name = (f"wrong strides for the non-contiguous inputs ({', '.join(cont)}) and output O: the "
                            "addresses are computed as if the tensors were contiguous; use each tensor's own four "
                            "strides")
        if name is None and q.dtype == torch.float32 and torch.isnan(got).any() and not torch.isnan(want).any():
            name = "nan in the output: a row whose scores are all -inf (exp(-inf - (-inf))), or l = 0 at the end"
        raise CheckFailed(f"flash_attention_kernel on {case} has the wrong values", reread=reread,
                          hint=name or "per key tile: scores * scale, masked to -inf (padded keys, causal), new "
                                       "maximum, rescale l and acc by exp(m - m_new), add the tile's terms; divide "
                                       "acc by l once, after the loop",
                          details=[f"max |yours - SDPA| = {max_abs_diff(got, want):.3g} (tolerance {tol:g})"])
    return o


def _qkv(g, B, H, T, D, dtype=torch.float32, scale=1.0):
    dev = device()
    return tuple((torch.randn(B, H, T, D, generator=g) * scale).to(dev, dtype) for _ in range(3))


def flash_kernel_values(flash_attention_kernel) -> None:
    """No mask, T a multiple of both tiles: several batch entries and heads, a later tile raising the maximum."""
    g = torch.Generator().manual_seed(12)
    q, k, v = _qkv(g, 2, 2, 32, 16)
    k[..., 16:, :] *= 3                                              # the second key tile raises the maximum
    _flash_case(flash_attention_kernel, q, k, v, False, 32, 16, "q, k, v (2, 2, 32, 16)")
    q, k, v = _qkv(g, 1, 1, 32, 32)
    k[..., 16:, :] *= 3
    _flash_case(flash_attention_kernel, q, k, v, False, 16, 16, "q, k, v (1, 1, 32, 32)")
    passed("flash_attention_kernel: equal to SDPA for several batch entries and heads, with l and acc rescaled")


def flash_kernel_padding(flash_attention_kernel) -> None:
    """T not a multiple of BLOCK_M or BLOCK_N: padded keys masked, rows past T neither read nor stored."""
    g = torch.Generator().manual_seed(13)
    q, k, v = _qkv(g, 1, 2, 20, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, False, 16, 16, "q, k, v (1, 2, 20, 16)")
    q, k, v = _qkv(g, 2, 1, 37, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, False, 64, 32, "q, k, v (2, 1, 37, 16)")
    q, k, v = _qkv(g, 1, 1, 5, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, False, 16, 16, "q, k, v (1, 1, 5, 16): T < one tile")
    passed("flash_attention_kernel: T = 20, 37 and 5 with tiles of 16, 32 and 64: padded keys masked, only rows < T "
           "stored")


def flash_kernel_causal(flash_attention_kernel) -> None:
    """CAUSAL=True: query t sees keys 0 .. t, whole tiles after the diagonal skipped, T not a multiple of a tile."""
    g = torch.Generator().manual_seed(14)
    q, k, v = _qkv(g, 1, 2, 40, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, True, 16, 16, "q, k, v (1, 2, 40, 16)", reread=SEC_CAUSAL)
    q, k, v = _qkv(g, 2, 1, 24, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, True, 32, 16, "q, k, v (2, 1, 24, 16)", reread=SEC_CAUSAL)
    q, k, v = _qkv(g, 1, 1, 48, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, True, 32, 16, "q, k, v (1, 1, 48, 16)", reread=SEC_CAUSAL)
    passed("flash_attention_kernel: causal, with the diagonal tile masked inside and the tiles after it skipped")


def _layouts(g, B, H, T, D, dtype=torch.float32):
    """q, k, v and an output view, none of them contiguous: heads split by a transpose, keys stored
    transposed (stride_kd != 1), values a slice of wider rows, the output written through a transpose."""
    dev = device()
    q = torch.randn(B, T, H, D, generator=g).to(dev, dtype).transpose(1, 2)          # (B, H, T, D)
    k = torch.randn(B, H, D, T, generator=g).to(dev, dtype).transpose(-1, -2)
    v = torch.randn(B, H, T, 2 * D, generator=g).to(dev, dtype)[..., D:]
    o = torch.full((B, T + 32, H, D), float("nan"), device=dev, dtype=dtype)[:, :T].transpose(1, 2)
    return q, k, v, o


def flash_kernel_strides(flash_attention_kernel) -> None:
    """Non-contiguous q, k, v and O: every element found through its own tensor's four strides."""
    g = torch.Generator().manual_seed(15)
    q, k, v, o = _layouts(g, 1, 2, 24, 16)
    _flash_case(flash_attention_kernel, q, k, v, False, 32, 16,
                "q = x.transpose(1, 2), k stored transposed, v a slice, O written through a transpose", o=o)
    passed("flash_attention_kernel: non-contiguous q, k, v and O, read and written through their own strides")


FP16 = ("keep m, l and acc in float32 (tl.zeros(..., tl.float32)) whatever the input's dtype: cast only the "
        "probabilities to V's dtype for tl.dot, which accumulates in float32; an fp16 accumulator loses the small "
        "terms against the large sum")


def fp16_case(g, T=80, D=16):
    """fp16 inputs whose outputs are around 6 (an fp16 step of 0.004): what an fp16 accumulator gets wrong."""
    q, k = (torch.randn(1, 1, T, D, generator=g) * 0.5 for _ in range(2))
    v = torch.randn(1, 1, T, D, generator=g) * 0.5 + 6
    return q, k, v


def fp16_tolerance(want: torch.Tensor) -> float:
    """Twice the largest error of rounding the float64 answer to fp16 (one fp16 step of the output)."""
    return 2 * float((want.half().double() - want).abs().max())


def flash_kernel_fp16(flash_attention_kernel, g: torch.Generator | None = None, T: int = 80) -> None:
    """float16 q, k, v and O: the answer to within one fp16 step (accumulators in float32). The battery
    passes its own generator and length."""
    g = torch.Generator().manual_seed(16) if g is None else g
    q, k, v = fp16_case(g, T)
    dev = device()
    q16, k16, v16 = (t.to(dev, torch.float16) for t in (q, k, v))
    want = F.scaled_dot_product_attention(q16.cpu().double(), k16.cpu().double(), v16.cpu().double())
    tol = fp16_tolerance(want)
    o = _front(q.shape, torch.float16)[1]
    # key tiles of 16 (the T / 16 accumulation steps an fp16 accumulator rounds at), query tiles of 32: half
    # the programs, each row's sum the same
    _flash_launch(flash_attention_kernel, q16, k16, v16, o, False, 32, 16, reread=SEC_PRECISION)
    err = max_abs_diff(o.cpu(), want)
    if o.dtype == torch.float16 and err <= tol:
        passed(f"flash_attention_kernel: fp16 in and out, max error {err:.1e} <= one fp16 step ({tol:.1e})")
        return
    o32 = _front(q.shape)[1]
    _flash_launch(flash_attention_kernel, q16.float(), k16.float(), v16.float(), o32, False, 32, 16,
                  reread=SEC_PRECISION)
    right32 = close(o32.cpu(), want, atol=max(atol(), 1e-4))
    hint = FP16 if right32 and err < 0.2 else None
    raise CheckFailed(f"flash_attention_kernel on fp16 q, k, v (1, 1, {T}, 16) is less accurate than fp16 allows",
                      reread=SEC_PRECISION,
                      hint=hint or "first make the float32 checks above pass; then keep the accumulators in float32",
                      details=[f"max |yours - exact| = {err:.3g}, one fp16 step of the output = {tol:.3g}",
                               f"the same inputs in float32: {'right' if right32 else 'wrong too'}"])


# ----------------------------------------------------------------------------------------
# flash_attention (the launcher)
# ----------------------------------------------------------------------------------------
def _slices(got, want, tol):
    """(b, h) pairs whose output is right."""
    B, H = want.shape[:2]
    return [(b, h) for b in range(B) for h in range(H) if close(got[b, h], want[b, h], atol=tol)]


def launcher_variants(q, k, v, causal, bm, bn) -> dict[str, torch.Tensor]:
    D = q.size(-1)
    out = {
        "scale must be 1 / sqrt(D), D = q.shape[-1]": flash_sim(q, k, v, causal, bm, bn, scale=1.0),
        "scaled by 1 / D: scale is 1 / sqrt(D)": flash_sim(q, k, v, causal, bm, bn, scale=1 / D),
        "CAUSAL is not passed on: launch the kernel with CAUSAL=causal": flash_sim(q, k, v, not causal, bm, bn),
    }
    if k.stride() != q.stride() or v.stride() != q.stride():
        ks = torch.as_strided(k, k.shape, q.stride()) if _fits(k, q.stride()) else None
        vs = torch.as_strided(v, v.shape, q.stride()) if _fits(v, q.stride()) else None
        if ks is not None and vs is not None:
            out["k and v are read with q's strides: pass k.stride() and v.stride() for them"] = \
                F.scaled_dot_product_attention(q.double(), ks.double(), vs.double(), is_causal=causal)
    return out


def _fits(t, strides) -> bool:
    last = sum((n - 1) * s for n, s in zip(t.shape, strides)) + t.storage_offset()
    return last < t.untyped_storage().nbytes() // t.element_size()


def _launcher_case(fn, q, k, v, what, causal=None, blocks=None, reread=SEC_MODEL, watch=None):
    kw = {} if causal is None else {"causal": causal}
    if blocks is not None:
        kw.update(block_m=blocks[0], block_n=blocks[1])
    with forbid(flash_builtins(), NO_SDPA):
        if watch is not None:
            watch("start")
        try:
            out = call(fn, q, k, v, name="flash_attention", reread=reread, **kw)
        finally:
            if watch is not None:
                watch.seen = watch("stop")
    out = expect_tensor(out, "flash_attention", reread)
    expect_shape(out, q.shape, f"flash_attention on {what}", reread=reread,
                 hint="the output has q's shape (B, H, T, D)")
    if out.dtype != q.dtype:
        raise CheckFailed(f"flash_attention on {what} returned {out.dtype} for {q.dtype} inputs", reread=reread,
                          hint="allocate the output in q's dtype (the kernel converts on the store)")
    want = F.scaled_dot_product_attention(q.cpu().double(), k.cpu().double(), v.cpu().double(),
                                          is_causal=bool(causal))
    got = out.detach().cpu().double()
    tol = atol() if q.dtype == torch.float32 else fp16_tolerance(want) + 1e-3
    if close(got, want, atol=tol):
        return out
    bm, bn = blocks or (16, 16)
    name = first_match(got, {n: c for n, c in launcher_variants(q.cpu(), k.cpu(), v.cpu(), bool(causal), bm, bn).items()
                             if not close(c.double(), want, atol=1e-6)}, atol=max(tol, 1e-5))
    B, H = q.shape[:2]
    right = _slices(got, want, tol)
    if name is None and right and len(right) < B * H:
        if right == [(b, h) for b in range(B) for h in range(H) if b * H + h < B]:
            name = (f"only {B} of the B * H = {B * H} (batch, head) pairs are computed: the grid's second axis "
                    "must be B * H")
        else:
            name = f"only the (batch, head) pairs {right} are right: the grid is (cdiv(T, block_m), B * H)"
    if name is None and blocks is not None and close(got, flash_sim(q, k, v, bool(causal), 16, 16), atol=tol):
        name = "block_m and block_n are not passed on as BLOCK_M and BLOCK_N"
    raise CheckFailed(f"flash_attention on {what} has the wrong values", reread=reread,
                      hint=name or "launch flash_attention_kernel on the grid (cdiv(T, block_m), B * H) with each "
                                   "tensor's own strides, scale = 1 / sqrt(D), CAUSAL=causal and the block sizes",
                      details=[f"max |yours - SDPA| = {max_abs_diff(got, want):.3g} (tolerance {tol:.3g})"])


def flash_attention_values(flash_attention) -> None:
    """Contiguous q, k, v: several batch entries and heads, causal or not, other block sizes."""
    g = torch.Generator().manual_seed(17)
    q, k, v = _qkv(g, 2, 2, 20, 16, scale=1.5)
    _launcher_case(flash_attention, q, k, v, "q, k, v (2, 2, 20, 16) (causal left at its default)")
    q, k, v = _qkv(g, 1, 2, 33, 16, scale=1.5)
    _launcher_case(flash_attention, q, k, v, "q, k, v (1, 2, 33, 16), causal=True", causal=True)
    q, k, v = _qkv(g, 1, 1, 40, 32, scale=1.5)
    _launcher_case(flash_attention, q, k, v, "q, k, v (1, 1, 40, 32), block_m=32, block_n=16", causal=True,
                   blocks=(32, 16))
    passed("flash_attention: equal to SDPA for several batch entries and heads, causal or not, any block sizes")


def flash_attention_layouts(flash_attention) -> None:
    """Non-contiguous inputs with strides of their own, fp16, and the attention computed by the kernel."""
    g = torch.Generator().manual_seed(18)
    q, k, v, _ = _layouts(g, 2, 2, 20, 16)
    _launcher_case(flash_attention, q, k, v, "q = x.transpose(1, 2), k stored transposed, v a slice, block_m=32, "
                   "block_n=16", causal=True, blocks=(32, 16))
    q, k, v = (t.half() for t in _qkv(g, 1, 1, 24, 16))
    _launcher_case(flash_attention, q, k, v, "fp16 q, k, v (1, 1, 24, 16)", causal=False)
    from .ex09 import Watch

    q, k, v = _qkv(g, 1, 1, 48, 16)
    watch = Watch(16)
    _launcher_case(flash_attention, q, k, v, "q, k, v (1, 1, 48, 16)", watch=watch)
    largest = watch.seen["largest"]
    if largest[0] * 2 >= 48 * 48:
        raise CheckFailed(f"flash_attention creates a PyTorch tensor of {largest[0]} numbers ({tuple(largest[1])}): "
                          "as large as the (T, T) score matrix or half of it", reread=SEC_MODEL,
                          hint="the attention is the kernel's work: the launcher only allocates the output, computes "
                               "the grid and launches flash_attention_kernel")
    passed("flash_attention: non-contiguous and fp16 inputs; the attention computed by the kernel, not in PyTorch")


guard(globals())  # every check records warnings instead of printing them (core.guard)
