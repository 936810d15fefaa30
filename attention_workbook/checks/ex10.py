"""Visible checks for exercise 10_flash_attention_triton: softmax_kernel, flash_attention_kernel and
the launcher flash_attention.

The kernels are launched here as the exercise specifies (``kernel[grid](...)``), under Triton's
interpreter where no CUDA GPU is visible (``attention_workbook.tritonenv``; this module imports
no Triton itself). Oracles: ``torch.softmax`` and ``F.scaled_dot_product_attention`` in float64.
When a result is wrong the check recomputes what the common kernel mistakes produce, tile by
tile in PyTorch (``flash_variants``: the accumulator not rescaled, padded keys not masked, the
causal loop stopping one tile early, addresses computed as if the tensors were contiguous, ...)
and names the one the output matches.

What a kernel reads or writes outside its tensors is made deterministic: every input is a view
inside a larger buffer whose other elements are NaN (a load past the last row reads NaN, as the
unwritten rows of a key/value cache would, instead of whatever memory happens to hold), and every
output sits in a NaN-filled buffer (a store past the last row or column is read back). The
causal check also launches the first query tile alone with NaN in the keys and values after its
diagonal: a kernel that does not skip those tiles reads them.

The launcher is judged on its own: while its checks run, ``flash_attention_kernel`` in its
namespace is a stand-in (``KernelStandIn``) that records the launch and computes what a correct
kernel would from the pointers, strides and flags it is given. A mistake in the kernel costs the
kernel's cells, never the launcher's.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import math
import os
import textwrap
import types

import torch
import torch.nn.functional as F

from . import own
from .core import (CheckFailed, call, close, expect_shape, expect_tensor, first_match, forbid, guard, max_abs_diff,
                   passed, softmax_builtins)

LECTURE = "lectures/10_flash_attention_triton.ipynb"
SEC_MODEL = f"lecture 10, section 2 'Triton's programming model' ({LECTURE}#triton-model)"
SEC_BLOCKS = f"lecture 10, section 4 'The Triton a kernel needs' ({LECTURE}#triton-blocks)"
SEC_SOFTMAX = f"lecture 10, section 5 'A fused row softmax' ({LECTURE}#fused-softmax)"
SEC_ONLINE = f"lecture 10, section 6 'The online softmax, tile by tile' ({LECTURE}#online-softmax)"
SEC_FLASH = f"lecture 10, section 7 'FlashAttention's forward pass as a kernel' ({LECTURE}#flash-forward)"
SEC_CAUSAL = f"lecture 10, section 8 'Causal masking that skips whole tiles' ({LECTURE}#causal-tiles)"
SEC_PRECISION = f"lecture 10, section 9 'Precision: fp16 in, fp32 inside' ({LECTURE}#precision)"
SEC_UNCHECKED = f"lecture 10, section 10 'What the interpreter does not check' ({LECTURE}#unchecked)"

NO_SDPA = ("the attention is the kernel's work: F.scaled_dot_product_attention and the softmax built-ins are off "
           "limits in flash_attention")
LOG2E = 1 / math.log(2)            # log2(e): exp(x) = exp2(x * log2(e))
PAD_ROWS = 64                      # NaN rows after every tensor: a whole query tile (BLOCK_M <= 64) past row T - 1
# and before it, at least a whole tensor's worth: an address computed with a sign slipped (b * stride_b subtracted)
# lands in NaN the check owns, not in memory the notebook needs (the interpreter checks no address)


def device() -> str:
    """Where the kernels' tensors live: the GPU where Triton compiles for one, else the CPU (interpreter);
    ``tritonenv.DEVICE`` where the notebook imported it (the same rule)."""
    env = __import__("sys").modules.get("attention_workbook.tritonenv")
    if env is not None:
        return env.DEVICE
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0") or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


def atol() -> float:
    """float32 tolerance: exact-ish in the interpreter; on a GPU tl.dot may round float32 inputs to TF32."""
    return 1e-5 if device() == "cpu" else 3e-3


def flash_builtins() -> list[tuple[object, str]]:
    return softmax_builtins() + [(F, "scaled_dot_product_attention")]


def diff_text(got: torch.Tensor, want: torch.Tensor) -> str:
    """``max |yours - exact|`` as a number, or where the output holds NaN (or inf) the exact answer has not."""
    g, w = got.detach().cpu().double(), want.detach().cpu().double()
    bad = (torch.isnan(g) & ~torch.isnan(w)) if g.shape == w.shape else torch.isnan(g)
    if bool(bad.any()):
        return f"your output holds nan in {int(bad.sum())} of its {g.numel()} entries"
    inf = (torch.isinf(g) & ~torch.isinf(w)) if g.shape == w.shape else torch.isinf(g)
    if bool(inf.any()):
        return f"your output holds inf in {int(inf.sum())} of its {g.numel()} entries"
    return f"{max_abs_diff(g, w):.3g}"


# ----------------------------------------------------------------------------------------
# tensors inside NaN: what a kernel reads or writes outside them is seen, never uninitialised memory
# ----------------------------------------------------------------------------------------
def in_nan(values: torch.Tensor, size: int, make_view, dtype=None, dev=None) -> torch.Tensor:
    """``make_view(buffer)`` of a NaN-filled 1-D buffer of ``size`` elements, holding ``values``."""
    buf = torch.full((size,), float("nan"), dtype=dtype or values.dtype, device=dev or device())
    view = make_view(buf)
    view.copy_(values.to(view.dtype))
    return view


def _lead(n: int, d: int) -> int:
    """NaN elements before a tensor of ``n`` elements and rows of ``d``."""
    return n + PAD_ROWS * d


def front(values: torch.Tensor, dtype=None, dev=None) -> torch.Tensor:
    """``values`` (..., T, D) as a contiguous tensor in the middle of a NaN buffer (a tensor's worth and PAD_ROWS
    rows before it, PAD_ROWS rows after it)."""
    d = values.size(-1)
    n = values.numel()
    lead = _lead(n, d)
    return in_nan(values, lead + n + PAD_ROWS * d, lambda buf: buf[lead:lead + n].view(values.shape), dtype, dev)


def nan_output(shape, dtype=torch.float32, dev=None) -> torch.Tensor:
    """An output view in the middle of a NaN-filled buffer (as ``front``): what a kernel stores outside it stays
    in the buffer, where ``outside_changed`` reads it."""
    n = math.prod(shape)
    lead = _lead(n, shape[-1])
    buf = torch.full((lead + n + PAD_ROWS * shape[-1],), float("nan"), dtype=dtype, device=dev or device())
    return buf[lead:lead + n].view(shape)


def storage_of(t: torch.Tensor) -> torch.Tensor:
    """The whole buffer ``t`` is a view of, as a 1-D tensor."""
    return t.detach().as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)


def outside_changed(t: torch.Tensor) -> bool:
    """Was anything written into the buffer of ``t`` outside ``t`` itself (it was NaN)?"""
    flat = storage_of(t)
    inside = torch.zeros(flat.shape, dtype=torch.bool, device=flat.device)
    inside.as_strided(t.shape, t.stride(), t.storage_offset()).fill_(True)
    return not bool(torch.isnan(flat[~inside]).all())


def refill_outside(t: torch.Tensor, value: float) -> None:
    """Set every element of the buffer of ``t`` outside ``t`` to ``value``."""
    flat = storage_of(t)
    inside = torch.zeros(flat.shape, dtype=torch.bool, device=flat.device)
    inside.as_strided(t.shape, t.stride(), t.storage_offset()).fill_(True)
    flat.masked_fill_(~inside, value)


# ----------------------------------------------------------------------------------------
# launching a kernel
# ----------------------------------------------------------------------------------------
def is_kernel(obj) -> bool:
    return own.kernel_function(obj) is not None


def launch_kernel(kernel, grid, args, kwargs) -> None:
    """``kernel[grid](*args, **kwargs)``; the interpreter's wrapped exceptions unwrapped where they
    say what happened (a stub's NotImplementedError, a kernel that is not a kernel)."""
    if not is_kernel(kernel):
        raise TypeError(f"{getattr(kernel, '__name__', type(kernel).__name__)} is not a Triton kernel: decorate it "
                        "with @triton.jit")
    try:
        kernel[tuple(grid)](*args, **kwargs)
    except Exception as e:  # named below, or raised as it was
        if "NotImplementedError()" in f"{type(e).__name__}({e})" or "NotImplementedError()" in str(e):   # a stub's
            raise NotImplementedError() from None
        raise


# What Triton says when a kernel breaks one of its rules (the interpreter's message, or the compiler's on
# a GPU), and what that means here. Anything else from Triton gets the general line below, never a hint
# about PyTorch's masks.
TRITON_ERRORS = [
    (("equal reduction dimensions", "incompatible dimensions", "shape mismatch in dot", "First input shape"),
     "tl.dot(a, b) multiplies (M, K) by (K, N): the scores are q times K's tile transposed (tl.trans), "
     "a (BLOCK_M, D) by (D, BLOCK_N) product; is K not transposed?"),
    (("Both operands must be same dtype", "same dtype"),
     "tl.dot's two operands need one dtype: cast the probabilities to V's dtype before the product with V "
     "(tl.dot accumulates in float32 whatever its inputs)"),
    (("Loop-carried variable",),
     "a variable carried through the loop (m, l or acc) changes dtype inside it: start m, l and acc in float32 "
     "(tl.zeros(..., tl.float32)) and keep them float32"),
    (("arange's range must be a power of 2", "power of 2"),
     "tl.arange(0, n) needs n a power of 2 (a tl.constexpr): use BLOCK, BLOCK_M, BLOCK_N or D and mask what "
     "lies past the end"),
    (("unsupported tensor index", "must be a constexpr", "constexpr"),
     "shapes in a kernel are compile-time constants: tile sizes come from tl.constexpr parameters "
     "(BLOCK, BLOCK_M, BLOCK_N, D), never from T or n_cols"),
]
TRITON_GENERAL = ("Triton refused the kernel: read the message above (the interpreter names the operation); "
                  "tile shapes, dtypes and masks must agree inside one expression")


def triton_hint(text: str) -> str:
    for needles, hint in TRITON_ERRORS:
        if any(n in text for n in needles):
            return hint
    return TRITON_GENERAL


def _launch(kernel, grid, args, kwargs, name, reread):
    """The kernel launched through ``core.call`` (its own work first: not the workbook's reference), with
    Triton's errors explained as Triton's."""
    own.check(kernel, name)
    try:
        call(launch_kernel, kernel, grid, args, kwargs, name=name, reread=reread)
    except CheckFailed as e:
        from_triton = any(w in e.title for w in ("InterpreterError", "CompilationError", "Triton"))
        if " raised " not in e.title or not (from_triton or "masks are bool" in (e.hint or "")):
            raise
        raise CheckFailed(e.title, hint=triton_hint(" ".join([e.title, *e.details])), reread=e.reread,
                          details=e.details, student_tb=e.student_tb) from None


# ----------------------------------------------------------------------------------------
# what a kernel's source says: masked loads of K and V without other=
# ----------------------------------------------------------------------------------------
def masked_loads_without_other(kernel, params=(1, 2)) -> list[str]:
    """Lines of ``kernel``'s source that ``tl.load`` from its parameters number ``params`` (K and V of the
    forward kernel), or from a pointer computed from them, with a mask and no ``other=``. In the interpreter
    the masked lanes read 0; on a GPU they hold whatever was there."""
    fn = own.kernel_function(kernel)
    if fn is None:
        return []
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    func = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
    if func is None:
        return []
    names = [a.arg for a in func.args.args]
    tracked = {names[i] for i in params if i < len(names)}
    # pointers derived from K and V: names assigned from an expression that mentions one (to a fixed point)
    for _ in range(4):
        for node in ast.walk(func):
            targets, value = [], None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets, value = [node.target], node.value
            if value is not None and {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} & tracked:
                tracked |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    found = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                and node.args):
            continue
        if not {n.id for n in ast.walk(node.args[0]) if isinstance(n, ast.Name)} & tracked:
            continue
        kws = {k.arg for k in node.keywords}
        masked = "mask" in kws or len(node.args) >= 2
        other = "other" in kws or len(node.args) >= 3
        if masked and not other:
            found.append(f"line {node.lineno}: {ast.unparse(node)[:90]}")
    return found


OTHER = ("a masked tl.load without other= leaves the masked lanes undefined on a GPU (the interpreter reads 0 "
         "there, so no output here shows it): the padded keys' values may be nan or inf, and a probability 0 times "
         "nan is nan. Give the loads of K and V other=0.0")


# ----------------------------------------------------------------------------------------
# softmax_kernel
# ----------------------------------------------------------------------------------------
def softmax_variants(x: torch.Tensor, block: int) -> dict[str, torch.Tensor]:
    """What the common fused-softmax mistakes give for the rows of ``x`` (n_cols = x.size(-1))."""
    n = x.size(-1)
    xf = x.float().cpu()
    pad = torch.cat([xf, torch.zeros(x.size(0), block - n)], dim=1)
    e = torch.exp(pad - pad.amax(dim=1, keepdim=True))
    e2 = torch.exp((xf - xf.amax(dim=1, keepdim=True)) * math.log(2))
    return {
        "the padded columns (past n_cols) count in the sum: load them with other=-inf, whose exp is 0 (without "
        "other=, masked lanes read 0 in the interpreter and anything on a GPU)":
            (e / e.sum(dim=1, keepdim=True))[:, :n],
        "no maximum is subtracted: exp of large values overflows to inf (inf / inf = nan); subtract the row's "
        "maximum before tl.exp": torch.exp(xf) / torch.exp(xf).sum(dim=1, keepdim=True),
        "the row is not normalised: divide exp(x - max) by its sum over the row":
            torch.exp(xf - xf.amax(dim=1, keepdim=True)),
        "tl.exp2 without log2(e): 2^x is e^(x ln 2), so exp2 needs its argument multiplied by log2(e) = 1.4427":
            e2 / e2.sum(dim=1, keepdim=True),
    }


def _softmax_launch(kernel, x, y, block, name="softmax_kernel"):
    _launch(kernel, (x.size(0),), (x, y, x.stride(0), y.stride(0), x.size(1)), {"BLOCK": block}, name, SEC_SOFTMAX)


STORE_PAST_COLS = ("the store needs the same mask as the load: columns n_cols .. BLOCK - 1 belong to whatever lies "
                   "next to the row")


def _softmax_case(kernel, x, block, what):
    """x contiguous after NaN rows; y contiguous too (the row stride of x), NaN after its last row: a store past
    column n_cols of the last row lands there."""
    x = front(x)
    y = nan_output(tuple(x.shape))
    _softmax_launch(kernel, x, y, block)
    want = torch.softmax(x.double().cpu(), dim=-1)
    if outside_changed(y):
        raise CheckFailed(f"softmax_kernel on {what} (BLOCK={block}) wrote past column n_cols", reread=SEC_SOFTMAX,
                          hint=STORE_PAST_COLS)
    if not close(y.cpu(), want, atol=atol()):
        name = first_match(y.cpu().double(), {k: v.double() for k, v in softmax_variants(x, block).items()
                                              if not close(v.double(), want, atol=1e-6)}, atol=1e-5)
        raise CheckFailed(f"softmax_kernel on {what} (BLOCK={block}) wrote the wrong values", reread=SEC_SOFTMAX,
                          hint=name or "load the row with a mask (padded columns -inf), subtract its maximum, "
                                       "exponentiate, divide by the sum, store with the same mask",
                          details=[f"max |yours - softmax| = {diff_text(y, want)} (tolerance {atol():g})"])


def softmax_kernel_values(softmax_kernel) -> None:
    """One program per row: a full block, a padded block (n_cols < BLOCK) and values around 1000."""
    g = torch.Generator().manual_seed(10)
    r = lambda *s: torch.randn(*s, generator=g)
    _softmax_case(softmax_kernel, r(4, 16) * 2, 16, "x (4, 16)")
    _softmax_case(softmax_kernel, r(3, 10) * 2, 16, "x (3, 10): 6 padded columns")
    _softmax_case(softmax_kernel, r(2, 5), 16, "x (2, 5): 11 padded columns")
    _softmax_case(softmax_kernel, r(3, 12) * 20 + 1000, 16, "x (3, 12) around 1000")
    passed("softmax_kernel: the softmax of every row, padded columns masked, stable around 1000")


def softmax_stride_variants(x, wide, off, y_stride, want) -> dict[str, torch.Tensor]:
    """What the row-addressing mistakes write into y (NaN where nothing is written), for x = wide[:, off:off + n]."""
    rows, n = x.shape
    flat = wide.reshape(-1).cpu().double()                         # (wide: contiguous, its own rows only)
    packed = torch.stack([flat[off + r * n: off + r * n + n] for r in range(rows)])     # rows read n_cols apart
    out = {"the rows are read n_cols apart: row r of the input starts at X + r * stride_x": packed.softmax(-1)}

    def written(stride):
        sim = torch.full((rows * max(stride, y_stride) + n,), float("nan"), dtype=torch.float64)
        for r in range(rows):
            sim[r * stride:r * stride + n] = want[r].cpu()
        return sim.as_strided((rows, n), (y_stride, 1))
    out["the output is written with the input's stride: row r of the output starts at Y + r * stride_y"] = \
        written(x.stride(0))
    out["the output rows are written n_cols apart: row r of the output starts at Y + r * stride_y"] = written(n)
    return out


def softmax_kernel_strides(softmax_kernel) -> None:
    """Rows that do not follow each other: x a slice of a wider tensor, y with a stride of its own."""
    g = torch.Generator().manual_seed(11)
    dev = device()
    wide = in_nan(torch.randn(5, 24, generator=g) * 2, 16 * 24, lambda b: b[5 * 24:10 * 24].view(5, 24))
    x = wide[:, 3:13]                                               # (5, 10), row stride 24
    big = torch.full((16, 32), float("nan"), device=dev)
    y = big[5:10, :10]                                              # row stride 32
    _softmax_launch(softmax_kernel, x, y, 16)
    want = torch.softmax(x.double().cpu(), dim=-1)
    if close(y.cpu(), want, atol=atol()) and not outside_changed(y):
        passed("softmax_kernel: rows found by their own strides, in the input and in the output")
        return
    name = first_match(y.cpu().double(), softmax_stride_variants(x, wide, 3, 32, want), atol=1e-5)
    if name is None and close(y.cpu(), want, atol=atol()):
        name = ("wrote past column n_cols: the store needs the same mask as the load (the next columns belong to "
                "another tensor)")
    raise CheckFailed("softmax_kernel on x = wide[:, 3:13] (row stride 24) into y (row stride 32) is wrong",
                      reread=SEC_SOFTMAX,
                      hint=name or "row r starts at X + r * stride_x in the input and at Y + r * stride_y in the "
                                   "output; its n_cols entries are contiguous",
                      details=[f"max |yours - softmax| = {diff_text(y, want)}"])


# ----------------------------------------------------------------------------------------
# flash_attention_kernel: the mistakes, recomputed tile by tile (shared with the battery)
# ----------------------------------------------------------------------------------------
def flash_sim(q, k, v, causal, bm, bn, *, scale=None, rescale_acc=True, rescale_l=True, mask_pad=True,
              causal_end="diagonal", strict=False, m0=float("-inf"), l0=0.0, divide=True, k_transposed=True,
              dtype=torch.float64) -> torch.Tensor:
    """The forward kernel's algorithm tile by tile over (B, H, T, D) (float64 unless ``dtype``), with a mistake
    switched on: ``causal_end`` "diagonal" (right), "early" (the loop stops before the diagonal tile) or "all" (no
    tile skipped); ``strict`` a query does not see itself; ``m0``, ``l0`` where the running maximum and sum start;
    ``divide`` False: acc never divided by l; ``k_transposed`` False: tl.dot(q, k) (BLOCK_N == D)."""
    q, k, v = (t.detach().cpu().to(dtype) for t in (q, k, v))
    B, H, T, D = q.shape
    scale = 1 / math.sqrt(D) if scale is None else scale
    out = torch.empty(B, H, T, D, dtype=dtype)
    for i in range(-(-T // bm)):
        rows = torch.arange(i * bm, i * bm + bm)
        qi = torch.zeros(B, H, bm, D, dtype=dtype)
        nr = min(T, i * bm + bm) - i * bm
        qi[:, :, :nr] = q[:, :, i * bm:i * bm + nr]
        m = torch.full((B, H, bm), m0, dtype=dtype)
        l = torch.full((B, H, bm), l0, dtype=dtype)
        acc = torch.zeros(B, H, bm, D, dtype=dtype)
        end = T
        if causal:
            end = {"diagonal": min((i + 1) * bm, T), "early": i * bm, "all": T}[causal_end]
        for start in range(0, end, bn):
            cols = torch.arange(start, start + bn)
            nc = max(0, min(T, start + bn) - start)
            kj = torch.zeros(B, H, bn, D, dtype=dtype)
            vj = torch.zeros(B, H, bn, D, dtype=dtype)
            kj[:, :, :nc], vj[:, :, :nc] = k[:, :, start:start + nc], v[:, :, start:start + nc]
            s = (qi @ kj.transpose(-1, -2) if k_transposed else qi @ kj) * scale
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
        res = acc / l[..., None] if divide else acc
        out[:, :, i * bm:i * bm + nr] = res[:, :, :nr]
    return out.double()


CAUSAL_SHORT = ("the causal loop stops one tile early: the tile that holds the diagonal is skipped, so the first "
                "queries see no key at all; run the key tiles up to min((i + 1) * BLOCK_M, T)")
MAX_AT_ZERO = ("the running maximum m starts at 0: when every score of a row is far below 0 (here about -144), "
               "m stays 0, exp(s - 0) underflows to 0 for every key, l = 0 and acc / l is nan. Start m at -inf: the "
               "first tile's maximum then replaces it")
SUM_NOT_ZERO = ("the running sum l (or a log-sum-exp) does not start at 0 (-inf for a log-sum-exp): every row's "
                "sum gets an extra exp(0 - m), as if a key of score 0 and value 0 were there. Start l at 0 and m at "
                "-inf")


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
        "acc is never divided by l: the output is acc / l, divided once after the loop":
            flash_sim(q, k, v, causal, bm, bn, divide=False),
        "tl.exp2 without log2(e): 2^x is e^(x ln 2), so with exp2 the scale (and m) must be multiplied by log2(e) "
        "= 1.4427 (fold it into the scale once)": flash_sim(q, k, v, causal, bm, bn, scale=math.log(2) / math.sqrt(D)),
        MAX_AT_ZERO: flash_sim(q, k, v, causal, bm, bn, m0=0.0, dtype=torch.float32),
        SUM_NOT_ZERO: flash_sim(q, k, v, causal, bm, bn, m0=0.0, l0=1.0),
    }
    if bn == D:
        out["K is not transposed: the scores are q k^T, a (BLOCK_M, D) tile times K's (BLOCK_N, D) tile transposed "
            "(tl.trans); tl.dot(q, k) multiplies by K's rows as if they were columns"] = \
            flash_sim(q, k, v, causal, bm, bn, k_transposed=False)
    if causal:
        out[CAUSAL_SHORT] = flash_sim(q, k, v, causal, bm, bn, causal_end="early")
        out["a query does not see its own key: the causal mask keeps keys <= the query's position"] = \
            flash_sim(q, k, v, causal, bm, bn, strict=True)
        out["the causal mask is not applied (CAUSAL=True must hide the keys after each query)"] = \
            flash_sim(q, k, v, False, bm, bn)
    else:
        out["causal masking applied though CAUSAL is False"] = flash_sim(q, k, v, True, bm, bn)
    out["the scores are scaled by 1 / D instead of 1 / sqrt(D)"] = flash_sim(q, k, v, causal, bm, bn, scale=1 / D)
    return out


def _fits(t, strides) -> bool:
    last = sum((n - 1) * s for n, s in zip(t.shape, strides)) + t.storage_offset()
    return min(strides) >= 0 and last < t.untyped_storage().nbytes() // t.element_size()


def read_with(t: torch.Tensor, strides) -> torch.Tensor | None:
    """What a kernel reads of ``t`` (from its first element) with ``strides`` instead of its own, if that stays in
    its buffer."""
    strides = tuple(int(s) for s in strides)
    return torch.as_strided(t, t.shape, strides, t.storage_offset()) if _fits(t, strides) else None


def contiguous_reads(t: torch.Tensor) -> torch.Tensor | None:
    """What a kernel reads of ``t`` (B, H, T, D) when it computes addresses as if ``t`` were contiguous."""
    B, H, T, D = t.shape
    return read_with(t, (H * T * D, T * D, D, 1))


def contiguous_writes(o: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """What the view ``o`` (NaN before) holds after ``values`` are written at contiguous addresses from its start."""
    n = o.untyped_storage().nbytes() // o.element_size()
    flat = torch.full((n,), float("nan"), dtype=torch.float64)
    flat[o.storage_offset():o.storage_offset() + values.numel()] = values.reshape(-1)
    return torch.as_strided(flat, o.shape, o.stride(), o.storage_offset())


def _attention(q, k, v, causal):
    return F.scaled_dot_product_attention(q.cpu().double(), k.cpu().double(), v.cpu().double(), is_causal=causal)


def stride_variants(q, k, v, o, causal) -> dict[str, torch.Tensor]:
    """What a kernel computes when it finds elements with the wrong strides (non-contiguous inputs only)."""
    out = {}
    cont = {n: contiguous_reads(x) for n, x in (("q", q), ("k", k), ("v", v)) if not x.is_contiguous()}
    if cont and all(c is not None for c in cont.values()):
        qc, kc, vc = (cont.get(n, x) for n, x in (("q", q), ("k", k), ("v", v)))
        wrong = _attention(qc, kc, vc, causal)
        out[f"wrong strides for a non-contiguous input ({', '.join(cont)}): the addresses are computed as if the "
            "tensors were contiguous; use each tensor's own four strides"] = wrong
        if not o.is_contiguous():
            out[f"wrong strides for the non-contiguous inputs ({', '.join(cont)}) and output O: the addresses are "
                "computed as if the tensors were contiguous; use each tensor's own four strides"] = \
                contiguous_writes(o, wrong)
    if k.stride() != v.stride():
        ks, vs = read_with(k, v.stride()), read_with(v, k.stride())
        if ks is not None and vs is not None:
            out["K is read with V's strides and V with K's: K's element [b, h, t, d] is at K + b * stride_kb + "
                "h * stride_kh + t * stride_kt + d * stride_kd"] = _attention(q, ks, vs, causal)
    last = {n: read_with(x, (*x.stride()[:3], 1)) for n, x in (("q", q), ("k", k), ("v", v)) if x.stride(-1) != 1}
    if last and all(c is not None for c in last.values()):
        ql, kl, vl = (last.get(n, x) for n, x in (("q", q), ("k", k), ("v", v)))
        which = ", ".join(f"stride_{n}d = {x.stride(-1)}" for n, x in (("q", q), ("k", k), ("v", v)) if n in last)
        out[f"the last dimension is read as if contiguous (d instead of d * stride_kd): here {which} (k stored "
            "transposed); multiply d by each tensor's own last stride"] = _attention(ql, kl, vl, causal)
    return out


def _strides(*ts):
    return [s for t in ts for s in t.stride()]


def _flash_launch(kernel, q, k, v, o, causal, bm, bn, scale=None, name="flash_attention_kernel", reread=SEC_FLASH,
                  grid=None):
    B, H, T, D = q.shape
    scale = 1 / math.sqrt(D) if scale is None else scale
    grid = (-(-T // bm), B * H) if grid is None else grid
    _launch(kernel, grid, (q, k, v, o, *_strides(q, k, v, o), H, T, scale),
            {"CAUSAL": bool(causal), "BLOCK_M": bm, "BLOCK_N": bn, "D": D}, name, reread)


STORE_PAST = ("store only the rows < T: the last query tile hangs past the end, and those rows belong to the next "
              "head (or to another tensor)")
READS_PAST = ("your kernel reads rows of K or V at or past T (here they hold nan, as the unwritten rows of a "
              "key/value cache would; with 0 there the output is right): mask every load of K and V with the key "
              "positions < T (other=0.0), and end the causal loop at min((i + 1) * BLOCK_M, T)")


def _flash_case(kernel, q, k, v, causal, bm, bn, what, reread=SEC_FLASH, tol=None, o=None):
    """Launch on q, k, v (views inside NaN) into o (default: at the front of a NaN buffer); compare with SDPA and
    name the mistake."""
    if o is None:
        o = nan_output(tuple(q.shape), q.dtype)
    _flash_launch(kernel, q, k, v, o, causal, bm, bn, reread=reread)
    want = _attention(q, k, v, causal)
    tol = atol() if tol is None else tol
    case = f"{what}, CAUSAL={causal}, BLOCK_M={bm}, BLOCK_N={bn}"
    if outside_changed(o):
        raise CheckFailed(f"flash_attention_kernel on {case} wrote outside O (past row T - 1 of the last head, or "
                          "between its rows)", reread=reread, hint=STORE_PAST)
    got = o.detach().cpu().double()
    if close(got, want, atol=tol):
        return o
    name, seen = None, got
    zeroed = bool(torch.isnan(got).any()) and not bool(torch.isnan(want).any())
    if zeroed:                                  # nan read from around the inputs? run again with 0 there
        for t in (q, k, v):
            refill_outside(t, 0.0)
        storage_of(o).fill_(float("nan"))
        _flash_launch(kernel, q, k, v, o, causal, bm, bn, reread=reread)
        seen = o.detach().cpu().double()
        if close(seen, want, atol=tol):
            name = READS_PAST
    try:                                        # the known mistakes, on the inputs as the second run saw them
        if name is None:
            name = first_match(seen, {n: c for n, c in flash_variants(q, k, v, causal, bm, bn).items()
                                      if not close(c, want, atol=1e-6)}, atol=max(tol, 1e-5))
        if name is None:
            name = first_match(seen, {n: c for n, c in stride_variants(q, k, v, o, causal).items()
                                      if not close(c, want, atol=1e-6)}, atol=max(tol, 1e-5))
    finally:
        if zeroed:
            for t in (q, k, v):
                refill_outside(t, float("nan"))
    if name is None and q.dtype == torch.float32 and torch.isnan(got).any() and not torch.isnan(want).any():
        name = ("nan in the output: a row whose scores are all -inf (exp(-inf - (-inf))), l = 0 at the end, or "
                "nan read from memory a load does not mask")
    raise CheckFailed(f"flash_attention_kernel on {case} has the wrong values", reread=reread,
                      hint=name or "per key tile: scores * scale, masked to -inf (padded keys, causal), new "
                                   "maximum, rescale l and acc by exp(m - m_new), add the tile's terms; divide "
                                   "acc by l once, after the loop",
                      details=[f"max |yours - SDPA| = {diff_text(got, want)} (tolerance {tol:g})"])


def qkv(g, B, H, T, D, dtype=torch.float32, scale=1.0, dev=None):
    """q, k, v drawn on the CPU, each a contiguous view inside NaN (``front``), on the kernels' device."""
    return tuple(front(torch.randn(B, H, T, D, generator=g) * scale, dtype, dev) for _ in range(3))


_qkv = qkv


def flash_kernel_values(flash_attention_kernel) -> None:
    """No mask, T a multiple of both tiles: several batch entries and heads, a later tile raising the maximum,
    and scores all far below 0 (where a running maximum started at 0 breaks)."""
    g = torch.Generator().manual_seed(12)
    q, k, v = qkv(g, 2, 2, 32, 16)
    k[..., 16:, :] *= 3                                              # the second key tile raises the maximum
    _flash_case(flash_attention_kernel, q, k, v, False, 32, 16, "q, k, v (2, 2, 32, 16)", reread=SEC_ONLINE)
    q, k, v = qkv(g, 1, 1, 32, 32)
    k[..., 16:, :] *= 3
    _flash_case(flash_attention_kernel, q, k, v, False, 16, 16, "q, k, v (1, 1, 32, 32)", reread=SEC_ONLINE)
    q, k, v = (front(6 + 0.1 * torch.randn(1, 1, 32, 16, generator=g)),
               front(-6 + 0.1 * torch.randn(1, 1, 32, 16, generator=g)), front(torch.randn(1, 1, 32, 16, generator=g)))
    _flash_case(flash_attention_kernel, q, k, v, False, 16, 16, "q around 6, k around -6 (1, 1, 32, 16): every score "
                "about -144", reread=SEC_ONLINE)
    passed("flash_attention_kernel: equal to SDPA for several batch entries and heads, with l and acc rescaled, "
           "and for scores all far below 0")


def flash_kernel_padding(flash_attention_kernel) -> None:
    """T not a multiple of BLOCK_M or BLOCK_N: padded keys masked, rows past T neither read nor stored, and the
    loads of K and V given other= (what a GPU needs; the interpreter reads 0 in masked lanes)."""
    g = torch.Generator().manual_seed(13)
    q, k, v = qkv(g, 1, 2, 20, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, False, 16, 16, "q, k, v (1, 2, 20, 16)")
    q, k, v = qkv(g, 2, 1, 37, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, False, 64, 32, "q, k, v (2, 1, 37, 16)")
    q, k, v = qkv(g, 1, 1, 5, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, False, 16, 16, "q, k, v (1, 1, 5, 16): T < one tile")
    missing = masked_loads_without_other(flash_attention_kernel)
    if missing:
        raise CheckFailed("flash_attention_kernel loads K or V with a mask but no other=", reread=SEC_UNCHECKED,
                          hint=OTHER, details=missing[:3])
    passed("flash_attention_kernel: T = 20, 37 and 5 with tiles of 16, 32 and 64: padded keys masked (K and V loaded "
           "with other=), only rows < T stored")


SKIP = ("the key tiles after the diagonal are not skipped: program i loaded keys at or after (i + 1) * BLOCK_M, "
        "which no query of its tile may see (here they hold nan, so only a kernel that loads them sees them). Stop "
        "the loop over key tiles at min((i + 1) * BLOCK_M, T)")


def skip_case(kernel, g, B, H, T, D, bm, bn, what, reread=SEC_CAUSAL):
    """The first query tile alone (grid (1, B * H)) with nan in every key and value after its diagonal tile: a
    kernel that skips those tiles never loads them."""
    q, k, v = qkv(g, B, H, T, D, scale=1.5)
    seen = -(-bm // bn) * bn                                          # the key tiles program 0 may load
    want = _attention(q[..., :bm, :], k[..., :bm, :], v[..., :bm, :], True)
    with torch.no_grad():
        k[..., seen:, :] = float("nan")
        v[..., seen:, :] = float("nan")
    o = nan_output(tuple(q.shape), q.dtype)
    _flash_launch(kernel, q, k, v, o, True, bm, bn, reread=reread, grid=(1, B * H))
    got = o[..., :bm, :].detach().cpu().double()
    if close(got, want, atol=atol()):
        return
    hint = SKIP if torch.isnan(got).any() else None
    raise CheckFailed(f"flash_attention_kernel on {what}, CAUSAL=True, BLOCK_M={bm}, BLOCK_N={bn}, only the first "
                      "query tile launched, keys and values after its diagonal tile nan: its rows are wrong",
                      reread=reread, hint=hint or "program i may load only the key tiles up to its diagonal",
                      details=[f"max |yours - SDPA| = {diff_text(got, want)} (tolerance {atol():g})"])


def flash_kernel_causal(flash_attention_kernel) -> None:
    """CAUSAL=True: query t sees keys 0 .. t, T not a multiple of a tile, and whole tiles after the diagonal
    skipped (never loaded)."""
    g = torch.Generator().manual_seed(14)
    q, k, v = qkv(g, 1, 2, 40, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, True, 16, 16, "q, k, v (1, 2, 40, 16)", reread=SEC_CAUSAL)
    q, k, v = qkv(g, 2, 1, 24, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, True, 32, 16, "q, k, v (2, 1, 24, 16)", reread=SEC_CAUSAL)
    q, k, v = qkv(g, 1, 1, 48, 16, scale=1.5)
    _flash_case(flash_attention_kernel, q, k, v, True, 32, 16, "q, k, v (1, 1, 48, 16)", reread=SEC_CAUSAL)
    skip_case(flash_attention_kernel, g, 1, 2, 64, 16, 32, 16, "q, k, v (1, 2, 64, 16)")
    passed("flash_attention_kernel: causal, with the diagonal tile masked inside and the key tiles after it never "
           "loaded")


def layouts(g, B, H, T, D, dtype=torch.float32, dev=None):
    """q, k, v and an output view, none of them contiguous: heads split by a transpose, keys stored
    transposed (stride_kd != 1), values a slice of wider rows, the output written through a transpose. Each
    lives in a NaN buffer with PAD_ROWS positions after row T - 1, in the middle of NaN as long as the longest
    layout twice over on each side: read with another tensor's strides, or a sign slipped, each stays inside its
    own NaN."""
    P = PAD_ROWS
    shapes = {"q": (B, T + P, H, D), "k": (B, H, D, T + P), "v": (B, H, T + P, 2 * D), "o": (B, T + P, H, D)}
    cap = 2 * max(math.prod(s) for s in shapes.values())
    part = lambda name: (lambda buf: buf[cap:cap + math.prod(shapes[name])].view(shapes[name]))   # cap NaN before
    q = in_nan(torch.randn(B, T, H, D, generator=g), 3 * cap, lambda b: part("q")(b)[:, :T], dtype,
               dev).transpose(1, 2)
    k = in_nan(torch.randn(B, H, D, T, generator=g), 3 * cap, lambda b: part("k")(b)[..., :T], dtype,
               dev).transpose(-1, -2)
    v = in_nan(torch.randn(B, H, T, D, generator=g), 3 * cap, lambda b: part("v")(b)[:, :, :T, D:], dtype, dev)
    o = torch.full((3 * cap,), float("nan"), dtype=dtype, device=dev or device())
    o = part("o")(o)[:, :T].transpose(1, 2)
    return q, k, v, o


_layouts = layouts


def flash_kernel_strides(flash_attention_kernel) -> None:
    """Non-contiguous q, k, v and O: every element found through its own tensor's four strides, causal or not."""
    g = torch.Generator().manual_seed(15)
    q, k, v, o = layouts(g, 1, 2, 24, 16)
    _flash_case(flash_attention_kernel, q, k, v, False, 32, 16,
                "q = x.transpose(1, 2), k stored transposed, v a slice, O written through a transpose", o=o)
    q, k, v, o = layouts(g, 1, 1, 40, 16)
    _flash_case(flash_attention_kernel, q, k, v, True, 32, 16, "the same layouts, T = 40", o=o)
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
    q16, k16, v16 = (front(t, torch.float16) for t in (q, k, v))
    want = _attention(q16, k16, v16, False)
    tol = fp16_tolerance(want)
    o = nan_output(tuple(q.shape), torch.float16)
    # key tiles of 16 (the T / 16 accumulation steps an fp16 accumulator rounds at), query tiles of 32: half
    # the programs, each row's sum the same
    _flash_launch(flash_attention_kernel, q16, k16, v16, o, False, 32, 16, reread=SEC_PRECISION)
    err = max_abs_diff(o.cpu(), want)
    if o.dtype == torch.float16 and err <= tol:
        passed(f"flash_attention_kernel: fp16 in and out, max error {err:.1e} <= one fp16 step ({tol:.1e})")
        return
    o32 = nan_output(tuple(q.shape))
    _flash_launch(flash_attention_kernel, front(q16.float()), front(k16.float()), front(v16.float()), o32, False, 32,
                  16, reread=SEC_PRECISION)
    right32 = close(o32.cpu(), want, atol=max(atol(), 1e-4))
    hint = FP16 if right32 and err < 0.2 else None
    raise CheckFailed(f"flash_attention_kernel on fp16 q, k, v (1, 1, {T}, 16) is less accurate than fp16 allows",
                      reread=SEC_PRECISION,
                      hint=hint or "first make the float32 checks above pass; then keep the accumulators in float32",
                      details=[f"max |yours - exact| = {diff_text(o, want)}, one fp16 step of the output = {tol:.3g}",
                               f"the same inputs in float32: {'right' if right32 else 'wrong too'}"])


# ----------------------------------------------------------------------------------------
# flash_attention (the launcher), judged with a stand-in for the kernel
# ----------------------------------------------------------------------------------------
KERNEL = "flash_attention_kernel"
KERNEL_PARAMS = (["Q", "K", "V", "O"] + [f"stride_{t}{a}" for t in "qkvo" for a in "bhtd"]
                 + ["H", "T", "scale", "CAUSAL", "BLOCK_M", "BLOCK_N", "D"])
_SIGNATURE = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in KERNEL_PARAMS])


def _unwatched():
    """Tensor operations no dispatch mode sees (ex09's Watch): the stand-in's own work is not the launcher's."""
    try:
        from torch.utils._python_dispatch import _disable_current_modes
    except ImportError:                                                   # pragma: no cover - older PyTorch
        return contextlib.nullcontext()
    return _disable_current_modes()


class KernelStandIn:
    """Stands in for ``flash_attention_kernel`` while a launcher check runs: ``standin[grid](...)`` records the
    launch (grid, arguments) and computes what a correct kernel would, reading Q, K, V and writing O through the
    pointers and strides it is given (in float64, on the CPU, written back in O's dtype). So the launcher is
    judged on its own, whatever the learner's kernel does. Not a Triton kernel: the kernel checks refuse it.
    The first launch into an O fills it with NaN first (an O not sharing Q's, K's or V's memory): what no launch
    writes is then never right by chance (``torch.empty`` may hand back memory that held the very answer)."""

    def __init__(self):
        self.launches: list[dict] = []
        self.problems: list[str] = []
        self._filled: set[int] = set()      # the O buffers already filled with NaN

    @property
    def count(self) -> int:
        return len(self.launches)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self._launch(grid, args, kwargs)
        return launch

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{KERNEL} is a kernel: launch it as {KERNEL}[grid](...), not {KERNEL}(...)")

    def _launch(self, grid, args, kwargs) -> None:
        # launch options (num_warps, ...) and keywords the exercise's signature does not name (a kernel of one's
        # own may take more constexpr flags) are not the launch this judges
        kwargs = {k: v for k, v in kwargs.items() if k in KERNEL_PARAMS}
        if callable(grid):
            self.problems.append("the grid is a function: pass the tuple (cdiv(T, block_m), B * H)")
            return
        grid = tuple(int(n) for n in (grid if isinstance(grid, (tuple, list)) else (grid,)))
        try:
            bound = _SIGNATURE.bind(*args, **kwargs).arguments
        except TypeError as e:
            self.problems.append(f"{KERNEL} launched with arguments its signature does not take ({e}): "
                                 f"pass {', '.join(KERNEL_PARAMS[:5])}, ... in the order of its signature")
            self.launches.append({"grid": grid, "args": {}})
            return
        self.launches.append({"grid": grid, "args": dict(bound)})
        with _unwatched(), torch.no_grad():
            self._emulate(grid, bound)

    def _emulate(self, grid, a) -> None:
        tensors = [a[n] for n in "QKVO"]
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            self.problems.append("Q, K, V and O must be the tensors themselves (Triton passes a tensor as a pointer "
                                 "to its first element)")
            return
        try:
            H, T, D, bm, bn = int(a["H"]), int(a["T"]), int(a["D"]), int(a["BLOCK_M"]), int(a["BLOCK_N"])
            scale, causal = float(a["scale"]), bool(a["CAUSAL"])
            strides = {t: [int(a[f"stride_{t}{x}"]) for x in "bhtd"] for t in "qkvo"}
        except (TypeError, ValueError) as e:
            self.problems.append(f"H, T, D, BLOCK_M, BLOCK_N, scale, CAUSAL and the strides must be numbers ({e})")
            return
        if H < 1 or T < 0 or min(bm, bn, D) < 1:
            self.problems.append(f"H = {H}, T = {T}, D = {D}, BLOCK_M = {bm}, BLOCK_N = {bn}: sizes must be positive")
            return
        odd = [f"{n} = {x}" for n, x in (("BLOCK_M", bm), ("BLOCK_N", bn), ("D", D)) if x & (x - 1)]
        if odd:                                  # a real kernel's tl.arange(0, n) refuses them
            self.problems.append(f"{', '.join(odd)} passed: the kernel's tile sizes must be powers of 2 "
                                 "(block_m and block_n default to 16)")
            return
        Q, K, V, O = tensors
        mem = O.untyped_storage().data_ptr()
        if mem not in self._filled and O.is_floating_point() and all(
                mem != t.untyped_storage().data_ptr() for t in (Q, K, V)):
            O.fill_(float("nan"))
        self._filled.add(mem)
        flats = [storage_of(t).cpu().double() for t in (Q, K, V)]
        out_flat = storage_of(O)
        dims = torch.arange(D)
        g0, g1 = (grid + (1, 1))[:2]
        for i in range(g0):
            rows = torch.arange(i * bm, i * bm + bm)
            rows = rows[rows < T]
            if rows.numel() == 0:
                continue
            for bh in range(g1):
                b, h = bh // H, bh % H
                idx = {}
                for name, t, pos in (("q", Q, rows), ("k", K, torch.arange(T)), ("v", V, torch.arange(T)),
                                     ("o", O, rows)):
                    sb, sh, st, sd = strides[name]
                    ix = t.storage_offset() + b * sb + h * sh + pos[:, None] * st + dims[None, :] * sd
                    n = storage_of(t).numel()
                    if ix.numel() and (int(ix.min()) < 0 or int(ix.max()) >= n):
                        self.problems.append(f"the strides, sizes and grid passed for {name.upper()} reach outside its "
                                             f"memory (program ({i}, {bh}))")
                        return
                    idx[name] = ix
                qv, kv, vv = (flat[idx[n]] for flat, n in zip(flats, "qkv"))
                s = qv @ kv.transpose(0, 1) * scale                        # (rows, T)
                if causal:
                    s = s.masked_fill(torch.arange(T)[None, :] > rows[:, None], float("-inf"))
                p = torch.exp(s - s.amax(-1, keepdim=True))
                res = (p @ vv) / p.sum(-1, keepdim=True)
                out_flat[idx["o"].reshape(-1).to(out_flat.device)] = res.reshape(-1).to(out_flat.device, O.dtype)


@contextlib.contextmanager
def rebound(fn, name: str, obj):
    """``name`` in ``fn``'s global namespace is ``obj`` for the duration (restored after)."""
    glb = getattr(fn, "__globals__", None) if isinstance(fn, types.FunctionType) else None
    if glb is None:
        yield
        return
    missing = object()
    saved = glb.get(name, missing)
    glb[name] = obj
    try:
        yield
    finally:
        if saved is missing:
            glb.pop(name, None)
        else:
            glb[name] = saved


NOT_LAUNCHED = ("the attention is the kernel's work: flash_attention allocates the output, computes the grid and "
                f"launches {KERNEL}[grid](...) (by that name), then returns the output")


def diagnose_launch(rec: dict, q, k, v, out, causal: bool, bm: int, bn: int) -> str | None:
    """The first thing wrong with a recorded launch, for q, k, v and the tensor the launcher returned."""
    a, grid = rec.get("args") or {}, rec.get("grid") or ()
    if not a:
        return None
    B, H, T, D = q.shape
    rows = -(-T // bm)
    if len(grid) < 2 or grid[1] != B * H:
        if len(grid) >= 2 and grid[1] == B:
            return (f"only {B} of the B * H = {B * H} (batch, head) pairs are computed: the grid's second axis must "
                    "be B * H")
        return f"the grid is {tuple(grid)}: it is (cdiv(T, block_m), B * H) = {(rows, B * H)}"
    if grid[0] != rows:
        return f"the grid is {tuple(grid)}: its first axis is cdiv(T, block_m) = {rows} query tiles"
    for name, letter, t in (("Q", "q", q), ("K", "k", k), ("V", "v", v)):
        x = a.get(name)
        given = tuple(a.get(f"stride_{letter}{s}") for s in "bhtd")
        if isinstance(x, torch.Tensor) and given != tuple(x.stride()):
            if letter in "kv" and given == tuple(q.stride()):
                return "k and v are read with q's strides: pass k.stride() and v.stride() for them"
            if letter in "kv" and given == tuple((v if letter == "k" else k).stride()):
                return "the strides of k and v are swapped: pass k.stride() after q's and v.stride() after k's"
            return f"the strides passed for {name} are not {name}'s own: pass {letter}.stride() (all four)"
    o = a.get("O")
    if isinstance(o, torch.Tensor):
        given = tuple(a.get(f"stride_o{s}") for s in "bhtd")
        if given != tuple(o.stride()):
            return "the strides passed for O are not the output's own: pass o.stride() for the tensor you launch with"
        if isinstance(out, torch.Tensor) and out.data_ptr() != o.data_ptr():
            return "return the output tensor the kernel wrote (the O you launched it with)"
    for key, want in (("H", H), ("T", T), ("D", D)):
        if a.get(key) != want:
            return f"{key} = {a.get(key)} is passed, the tensors' is {want}"
    scale = a.get("scale")
    if isinstance(scale, (int, float)) and not math.isclose(scale, 1 / math.sqrt(D), rel_tol=1e-6):
        if math.isclose(scale, 1 / D, rel_tol=1e-6):
            return "scaled by 1 / D: scale is 1 / sqrt(D)"
        return "scale must be 1 / sqrt(D), D = q.shape[-1]"
    if bool(a.get("CAUSAL")) != bool(causal):
        return "CAUSAL is not passed on: launch the kernel with CAUSAL=causal"
    if (a.get("BLOCK_M"), a.get("BLOCK_N")) != (bm, bn):
        return "block_m and block_n are not passed on as BLOCK_M and BLOCK_N"
    return None


def _launcher_case(fn, q, k, v, what, causal=None, blocks=None, reread=SEC_MODEL, watch=None):
    kw = {} if causal is None else {"causal": causal}
    if blocks is not None:
        kw.update(block_m=blocks[0], block_n=blocks[1])
    standin = KernelStandIn()
    own.check(fn, "flash_attention")                 # (before the stand-in is in its namespace)
    with forbid(flash_builtins(), NO_SDPA), rebound(fn, KERNEL, standin):
        if watch is not None:
            watch("start")
        try:
            out = call(lambda *a, **kws: fn(*a, **kws), q, k, v, name="flash_attention", reread=reread, **kw)
        except CheckFailed as e:
            if "masks are bool" not in (e.hint or ""):      # core's dtype hint is about masks: not here
                raise
            raise CheckFailed(e.title, reread=e.reread, details=e.details, student_tb=e.student_tb,
                              hint="a dtype where PyTorch wants something else: the output is allocated with "
                                   "dtype=q.dtype and device=q.device; the tensors are passed as they are") from None
        finally:
            if watch is not None:
                watch.seen = watch("stop")
    if standin.problems:
        problem = standin.problems[0]
        hint = ("block_m and block_n are the kernel's BLOCK_M and BLOCK_N: powers of 2, 16 unless the caller says "
                "otherwise" if "powers of 2" in problem else
                "launch flash_attention_kernel[grid](q, k, v, o, the 16 strides, H, T, scale, CAUSAL=..., "
                "BLOCK_M=..., BLOCK_N=..., D=...)")
        raise CheckFailed(f"flash_attention on {what}: {problem}", reread=reread, hint=hint)
    if standin.count == 0:
        raise CheckFailed(f"flash_attention on {what} never launched {KERNEL}", reread=reread, hint=NOT_LAUNCHED)
    out = expect_tensor(out, "flash_attention", reread)
    expect_shape(out, q.shape, f"flash_attention on {what}", reread=reread,
                 hint="the output has q's shape (B, H, T, D)")
    if out.dtype != q.dtype:
        raise CheckFailed(f"flash_attention on {what} returned {out.dtype} for {q.dtype} inputs", reread=reread,
                          hint="allocate the output in q's dtype (the kernel converts on the store)")
    want = _attention(q, k, v, bool(causal))
    got = out.detach().cpu().double()
    tol = 1e-6 if q.dtype == torch.float32 else fp16_tolerance(want) + 1e-3
    if close(got, want, atol=tol):
        return out
    bm, bn = blocks or (16, 16)
    name = diagnose_launch(standin.launches[0], q, k, v, out, bool(causal), bm, bn)
    if name is None and standin.count > 1:
        name = f"{KERNEL} is launched {standin.count} times: launch it once, on the whole grid"
    # (where the launch itself is named, no value is quoted: a grid that misses part of the output leaves
    # that part as torch.empty found it, and the message must not depend on what memory held)
    raise CheckFailed(f"flash_attention on {what} has the wrong values", reread=reread,
                      hint=name or "launch flash_attention_kernel on the grid (cdiv(T, block_m), B * H) with each "
                                   "tensor's own strides, scale = 1 / sqrt(D), CAUSAL=causal and the block sizes",
                      details=[f"{KERNEL} was a correct stand-in while this check ran: what is wrong is the launch"]
                      if name else [f"max |yours - SDPA| = {diff_text(got, want)} (tolerance {tol:.3g}; {KERNEL} was "
                                    "a correct stand-in while this check ran: what is wrong is the launch)"])


def flash_attention_values(flash_attention) -> None:
    """Contiguous q, k, v: several batch entries and heads, causal or not, other block sizes. The kernel is a
    correct stand-in meanwhile: this judges the launch alone."""
    g = torch.Generator().manual_seed(17)
    q, k, v = qkv(g, 2, 2, 20, 16, scale=1.5)
    _launcher_case(flash_attention, q, k, v, "q, k, v (2, 2, 20, 16) (causal left at its default)")
    q, k, v = qkv(g, 1, 2, 33, 16, scale=1.5)
    _launcher_case(flash_attention, q, k, v, "q, k, v (1, 2, 33, 16), causal=True", causal=True)
    q, k, v = qkv(g, 1, 1, 40, 32, scale=1.5)
    _launcher_case(flash_attention, q, k, v, "q, k, v (1, 1, 40, 32), block_m=32, block_n=16", causal=True,
                   blocks=(32, 16))
    passed("flash_attention: launches the kernel on the right grid with the right arguments (several batch entries "
           "and heads, causal or not, any block sizes) and returns its output")


def flash_attention_layouts(flash_attention) -> None:
    """Non-contiguous inputs with strides of their own, fp16, and the attention computed by the kernel."""
    g = torch.Generator().manual_seed(18)
    q, k, v, _ = layouts(g, 2, 2, 20, 16)
    _launcher_case(flash_attention, q, k, v, "q = x.transpose(1, 2), k stored transposed, v a slice, block_m=32, "
                   "block_n=16", causal=True, blocks=(32, 16))
    q, k, v = qkv(g, 1, 1, 24, 16, dtype=torch.float16)
    _launcher_case(flash_attention, q, k, v, "fp16 q, k, v (1, 1, 24, 16)", causal=False)
    from .ex09 import Watch

    q, k, v = qkv(g, 1, 1, 48, 16)
    watch = Watch(16)
    _launcher_case(flash_attention, q, k, v, "q, k, v (1, 1, 48, 16)", watch=watch)
    largest = watch.seen["largest"]
    if largest[0] * 2 >= 48 * 48:
        raise CheckFailed(f"flash_attention creates a PyTorch tensor of {largest[0]} numbers ({tuple(largest[1])}): "
                          "as large as the (T, T) score matrix or half of it", reread=SEC_MODEL, hint=NOT_LAUNCHED)
    passed("flash_attention: each tensor's own strides passed for non-contiguous and fp16 inputs; the attention left "
           "to the kernel")


guard(globals())  # every check records warnings instead of printing them (core.guard)
