"""Visible checks for exercise 09_attention_at_scale: online_softmax, tiled_attention,
GroupedQueryAttention, apply_rope, sliding_window_mask and generate_cached.

Oracles: ``torch.softmax``, ``F.scaled_dot_product_attention``, lecture 05's
``MultiHeadAttention`` (weights loaded), a per-head loop, complex multiplication for RoPE, a
double loop for the mask, and lecture 08's uncached ``generate``. When a result is wrong the
check recomputes what the common mistakes produce (a running sum not rescaled, the output not
rescaled, key/value heads tiled instead of repeated in place, half-split RoPE pairs, a window
off by one, positions restarting at 0 in the cache, ...) and names the one the output matches;
two mistakes at once where they are common together (RoPE turned clockwise with shifted
frequencies). A nan where the softmax is finite is named by what makes it go away: the -inf
entries replaced by finite ones (the -inf guard, whatever the layout of the student's loop).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .core import (CheckFailed, call, close, expect_shape, expect_tensor, first_match, forbid, guard,
                   max_abs_diff, passed, softmax_builtins)

LECTURE = "lectures/09_attention_at_scale.ipynb"
SEC_CACHE = f"lecture 09, section 2 'The key/value cache' ({LECTURE}#kv-cache)"
SEC_CACHE_BUG = f"lecture 09, section 2 'The key/value cache', the paragraph 'The classic bug' ({LECTURE}#kv-cache)"
SEC_ONLINE = f"lecture 09, section 3 'Online softmax and tiled attention' ({LECTURE}#online-softmax)"
SEC_MASKED = f"lecture 09, section 3, 'Masked tiles and -inf' ({LECTURE}#masked-tiles)"
SEC_FLASH = f"lecture 09, section 3, 'Tiled attention' ({LECTURE}#tiled)"
SEC_GQA = f"lecture 09, section 4 'Multi-query and grouped-query attention' ({LECTURE}#gqa)"
SEC_ROPE = f"lecture 09, section 5 'Rotary position embeddings' ({LECTURE}#rope)"
SEC_ROPE_LAYOUTS = f"lecture 09, section 5, 'Two layouts of the pairs' ({LECTURE}#rope-layouts)"
SEC_LOCAL = f"lecture 09, section 6 'Local attention and low-rank keys' ({LECTURE}#local)"

NO_SOFTMAX = ("write the one-pass softmax yourself: torch.softmax, F.softmax, log_softmax and logsumexp are off "
              "limits here")
NO_SDPA = ("compute the tiles yourself: F.scaled_dot_product_attention and the softmax built-ins are off limits "
           "inside tiled_attention")


def online_builtins() -> list[tuple[object, str]]:
    return softmax_builtins() + [(torch, "logsumexp"), (torch.Tensor, "logsumexp")]


def tiled_builtins() -> list[tuple[object, str]]:
    return online_builtins() + [(F, "scaled_dot_product_attention")]


# ----------------------------------------------------------------------------------------
# the mistakes, recomputed (shared with the battery)
# ----------------------------------------------------------------------------------------
def _ref_zero(m):
    return torch.where(torch.isinf(m), torch.zeros_like(m), m)


def online_variants(x: torch.Tensor, block: int) -> dict[str, torch.Tensor]:
    """What the common online-softmax mistakes return for ``x`` (values named by their hint)."""
    out = {}
    n = x.size(-1)

    def run(rescale="right", full=True, stable=True, guard_inf=True, start=float("-inf")):
        m = torch.full(x.shape[:-1] + (1,), start, dtype=torch.float64)
        l = torch.zeros_like(m)
        xd = x.double()
        stop = n if full else (n // block) * block
        for s in range(0, stop, block):
            xb = xd[..., s:s + block]
            m_new = torch.maximum(m, xb.amax(-1, keepdim=True)) if stable else torch.zeros_like(m)
            ref = _ref_zero(m_new) if guard_inf else m_new
            factor = {"right": torch.exp(m - ref), "none": torch.ones_like(m), "inverted": torch.exp(ref - m)}[rescale]
            l = l * factor + torch.exp(xb - ref).sum(-1, keepdim=True)
            m = m_new
        return torch.exp(xd - (_ref_zero(m) if guard_inf else m)) / l

    with torch.no_grad():
        # (an all-nan output matches several: those right on small finite inputs come first)
        out["the running maximum starts at 0"] = run(start=0.0)
        out["no running maximum is subtracted"] = run(stable=False)
        out["nan where a whole block is -inf"] = run(guard_inf=False)
        out["the running sum is not rescaled when the maximum changes"] = run(rescale="none")
        out["the rescaling factor is inverted"] = run(rescale="inverted")
        out["the last, shorter block is skipped"] = run(full=False)
        out["softmax over the wrong axis"] = x.double().softmax(dim=0) if x.dim() > 1 else x.double() * float("nan")
    return out


_TILE_NAN = ("nan where a whole tile is masked: for a query whose keys in one tile are all masked, the running maximum "
             "is still -inf after that tile, and exp(-inf - (-inf)) is nan; subtract (and rescale by) 0 while the "
             "maximum is -inf, as in online_softmax")


def tiled_variants(q, k, v, mask, block) -> dict[str, torch.Tensor]:
    """What the common tiled-attention mistakes return (float64)."""
    q, k, v = q.double(), k.double(), v.double()
    Tq, Tk = q.size(-2), k.size(-2)
    if mask is not None:
        mask = mask.expand(*mask.shape[:-2], Tq, Tk)

    def run(scale=1 / math.sqrt(q.size(-1)), rescale_acc=True, rescale_l=True, per_tile=False, full=True,
            use_mask=True, invert=False, guard_inf=True):
        m = l = acc = None
        stop = Tk if full else (Tk // block) * block
        for s in range(0, stop, block):
            sc = q @ k[..., s:s + block, :].transpose(-2, -1) * scale
            if mask is not None and use_mask:
                mb = mask[..., s:s + block]
                sc = sc.masked_fill(mb if invert else ~mb, float("-inf"))
            if m is None:
                m = torch.full(sc.shape[:-1] + (1,), float("-inf"), dtype=torch.float64)
                l = torch.zeros_like(m)
                acc = torch.zeros(sc.shape[:-1] + (v.size(-1),), dtype=torch.float64)
            m_new = torch.maximum(m, sc.amax(-1, keepdim=True))
            ref = _ref_zero(m_new) if guard_inf else m_new
            alpha = torch.exp(m - ref)
            p = torch.exp(sc - ref)
            if per_tile:
                psum = p.sum(-1, keepdim=True)
                acc = acc * alpha + (p / psum) @ v[..., s:s + block, :]
            else:
                acc = (acc * alpha if rescale_acc else acc) + p @ v[..., s:s + block, :]
            l = (l * alpha if rescale_l else l) + p.sum(-1, keepdim=True)
            m = m_new
        return acc if per_tile else acc / l

    with torch.no_grad():
        return {
            "the running output acc is not rescaled when the maximum changes": run(rescale_acc=False),
            "the running sum l is not rescaled when the maximum changes": run(rescale_l=False),
            "each tile is normalised by its own sum": run(per_tile=True),
            "the scores are not scaled by 1/sqrt(d)": run(scale=1.0),
            "scaled by the value width: use 1/sqrt(d), d = q.shape[-1]": run(scale=1 / math.sqrt(v.size(-1))),
            "the last, shorter tile of keys is skipped": run(full=False),
            "the mask is ignored": run(use_mask=False),
            "the mask is inverted (True must mean: may attend)": run(invert=True),
            _TILE_NAN: run(guard_inf=False),
        }


# ----------------------------------------------------------------------------------------
# what a function computes on the way: the tensors it creates, its reductions, its reads of x
# ----------------------------------------------------------------------------------------
_REDUCTIONS = {"sum", "nansum", "mean", "amax", "amin", "max", "min", "logsumexp", "prod", "sort", "topk", "kthvalue"}


class Watch(TorchDispatchMode):
    """Sees every tensor operation while active (PyTorch's dispatch mode: the operations any Python
    code runs, built-in or not). Records the largest floating-point tensor created, reductions over an
    axis longer than ``block``, and, when ``x`` is given, which ops read the first and the last column
    of x (or of a copy of it) and in what order. Plain data out (``report``), so it also works when
    entered and left in separate calls (``start`` / ``stop``: the grader's replay process)."""

    def __init__(self, block: int, x: torch.Tensor | None = None):
        super().__init__()
        self.block, self.largest, self.wide, self.reads, self.widest = int(block), [0, []], [], [], 0
        self.x = None if x is None else x.detach().contiguous().clone()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch otherwise wraps __torch_dispatch__ in torch._disable_dynamo, whose first call imports
        # torch._dynamo: 3-8 s per grading kernel for nothing (no torch.compile runs here). False is the
        # opt-out TorchDispatchMode._should_skip_dynamo's docstring shows.
        return False

    def _is_x(self, t) -> bool:
        x = self.x
        if x is None or not t.is_floating_point():
            return False
        st = t.untyped_storage()
        if st.nbytes() != x.numel() * t.element_size():
            return False
        return torch.equal(t.as_strided((x.numel(),), (1,), 0), x.reshape(-1).to(t.dtype))

    def _columns(self, t) -> tuple[bool, bool]:
        n = self.x.size(-1)
        cols = (torch.arange(self.x.numel()) % n).as_strided(t.shape, t.stride(), t.storage_offset())
        return bool((cols == 0).any()), bool((cols == n - 1).any())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        shared = {t.untyped_storage().data_ptr() for t in ins}
        for t in outs:
            if t.is_floating_point() and t.untyped_storage().data_ptr() not in shared:
                n = t.untyped_storage().nbytes() // t.element_size()
                if n > self.largest[0]:
                    self.largest = [n, list(t.shape)]
        name = func.overloadpacket.__name__.rstrip("_")
        if name in _REDUCTIONS and ins and func._overloadname not in ("other", "binary_out", "out"):
            a = ins[0]
            names = [arg.name for arg in func._schema.arguments]
            at = names.index("dim") if "dim" in names else len(args)
            dim = kwargs.get("dim", args[at] if at < len(args) else None)
            dims = range(a.dim()) if dim is None or dim == [] else ([dim] if isinstance(dim, int) else list(dim))
            sizes = [a.shape[d] for d in dims] if a.dim() else [1]
            self.widest = max([self.widest, *sizes])
            if sizes and max(sizes) > self.block:
                self.wide.append([name, list(a.shape)])
        metadata_only = name.startswith("new_") or name.endswith("_like")          # x.new_zeros, zeros_like
        if self.x is not None and outs and not metadata_only and not any(self._is_x(t) for t in outs) \
                and not any(t.untyped_storage().data_ptr() in shared for t in outs):   # views, copies of x
            seen = [self._columns(t) for t in ins if self._is_x(t)]
            if seen:
                self.reads.append([any(f for f, _ in seen), any(last for _, last in seen)])
        return out

    # a pass over x: with the first op that reads x's last column, one sweep is over; after it only
    # the final exp(x - m) / l may read x again (counted both ways round, whatever the block order)
    def extra_sweeps(self) -> int:
        def after(a, b):
            i = next((k for k, r in enumerate(self.reads) if r[a]), None)
            return 0 if i is None else sum(1 for r in self.reads[i + 1:] if r[b])
        return min(after(1, 0), after(0, 1))

    def report(self) -> dict:
        return {"largest": list(self.largest), "wide": list(self.wide), "extra_sweeps": self.extra_sweeps(),
                "widest": self.widest}

    def __call__(self, command: str):
        """start / stop across calls (the replay process); stop returns the report."""
        if command == "start":
            self.__enter__()
            return None
        self.__exit__(None, None, None)
        return self.report()


def _dedupe(want: torch.Tensor, variants: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop variants that equal the right answer on these inputs (they name nothing)."""
    return {k: v for k, v in variants.items() if not close(v, want.double(), atol=1e-6)}


# ----------------------------------------------------------------------------------------
# online_softmax
# ----------------------------------------------------------------------------------------
def _online(fn, x, block):                         # block None: left at its default
    with forbid(online_builtins(), NO_SOFTMAX):
        out = call(fn, *((x.clone(),) if block is None else (x.clone(), block)), name="online_softmax",
                   reread=SEC_ONLINE)
    return expect_tensor(out, "online_softmax", SEC_ONLINE)


def value_details(out: torch.Tensor, want: torch.Tensor, what: str, tol: str = "1e-5") -> list[str]:
    """What differs: the nan (or inf) entries where the answer has none, by row, else the largest difference."""
    bad = (torch.isnan(out) | torch.isinf(out)) & torch.isfinite(want)
    if not bool(bad.any()):
        return [f"max |yours - {what}| = {max_abs_diff(out, want):.3g} (tolerance {tol})"]
    rows = bad.reshape(-1, out.size(-1)).any(-1).nonzero().flatten().tolist() if out.dim() else [0]
    kind = "nan" if bool(torch.isnan(out[bad]).any()) else "inf"
    where = (f"in row{'s' if len(rows) > 1 else ''} {rows[:6]}{' ...' if len(rows) > 6 else ''} (every row of "
             "every batch counted in order)" if out.dim() > 1 else "")
    return [f"{int(bad.sum())} of {out.numel()} entries are {kind} {where}".rstrip()
            + f", where {what} has finite values"]


def _blocks_all_inf(x: torch.Tensor, block: int) -> torch.Tensor:
    """Per row (..., ): does some block x[..., s:s + block] consist only of -inf?"""
    dead = torch.zeros(x.shape[:-1], dtype=torch.bool)
    for s in range(0, x.size(-1), block):
        dead |= torch.isneginf(x[..., s:s + block]).all(-1)
    return dead


def nan_from_inf(out, x, rerun) -> bool:
    """Is the nan of ``out`` (where the softmax is finite) caused by the -inf entries of ``x``, whatever the
    layout of the loop that computed it (block by block, lane by lane, entry by entry)? Every row with such a
    nan holds a -inf entry (a running maximum can be -inf only after seeing nothing but -inf), and ``rerun``
    (the student's function) on ``x`` with each -inf replaced by a finite value far below the other entries
    returns no nan there: then the nan is exp(-inf - (-inf)) of a maximum still at -inf."""
    if rerun is None or x.dim() == 0 or x.numel() == 0:
        return False
    neg, fin = torch.isneginf(x), torch.isfinite(x)
    bad = torch.isnan(out.detach()) & torch.isfinite(torch.softmax(x.double(), dim=-1))
    if not bool(bad.any()) or not bool(neg.any()) or not bool(fin.any()):
        return False
    if bool((bad.any(-1) & ~neg.any(-1)).any()):
        return False
    low = float(x[fin].min()) - 1000.0                      # exp(low - any maximum) is 0, as exp(-inf) is
    try:
        again = rerun(x.masked_fill(neg, low))
    except CheckFailed:
        return False
    return tuple(again.shape) == tuple(out.shape) and not bool(torch.isnan(again.detach())[bad].any())


def name_online_nan(out, x, block, rerun=None) -> str | None:
    """Name a nan the variants did not reproduce exactly. With ``rerun`` (the student's function): a nan the
    -inf entries cause (``nan_from_inf``) is the missing -inf guard, named by the blocks of -inf when it stays
    in rows that have one; without, by where it is alone: rows with a block of -inf. Then rows far below 0 (a
    maximum started at 0)."""
    if x.dim() == 0 or x.numel() == 0:
        return None
    nan_rows = torch.isnan(out.detach()).any(-1)
    if not bool(nan_rows.any()):
        return None
    in_dead_rows = bool((nan_rows & ~_blocks_all_inf(x, block)).any()) is False
    if rerun is not None and nan_from_inf(out, x, rerun):
        return "nan where a whole block is -inf" if in_dead_rows else NAN_GUARD
    if rerun is None and in_dead_rows:
        return "nan where a whole block is -inf"
    if bool((x.amax(-1)[nan_rows] < -80).all()):            # exp(-80) ~ 1e-35: float32 underflows soon after
        return "the running maximum starts at 0"
    return None


NAN_GUARD = "the -inf guard is missing"
NAN_GUARD_SEEN = ("with every -inf entry of x replaced by a finite value far below the others, your online_softmax "
                  "returns no nan there: the -inf entries cause it")


def _online_case(fn, x, block, what):
    out = _online(fn, x, block)
    want = torch.softmax(x.double(), dim=-1).to(x.dtype)
    expect_shape(out, x.shape, f"online_softmax on {what}", reread=SEC_ONLINE,
                 hint="the softmax has the shape of its input: reduce over the last axis, keep m and l as (..., 1)")
    if not close(out, want, atol=1e-5):
        name = first_match(out.double(), _dedupe(want, online_variants(x, block)), atol=1e-5)
        seen = []
        if name is None:
            name = name_online_nan(out, x, block, rerun=lambda z: _online(fn, z, block))
            seen = [NAN_GUARD_SEEN] if name in _GUARD_NAMES else []
        raise CheckFailed(f"online_softmax({what}, block={block}) has the wrong values",
                          reread=SEC_MASKED if name in _MASKED_NAMES else SEC_ONLINE,
                          hint=_ONLINE_HINTS.get(name, "walk the last axis block by block; when the maximum rises, "
                                                 "multiply the sum so far by exp(old max - new max)"),
                          details=value_details(out, want, "the softmax") + seen)


_GUARD_NAMES = ("nan where a whole block is -inf", NAN_GUARD)
_MASKED_NAMES = (*_GUARD_NAMES, "the running maximum starts at 0")


_ONLINE_HINTS = {
    "the running sum is not rescaled when the maximum changes":
        "the running sum is not rescaled when the maximum changes: the terms already in l were exp(x - old max); "
        "multiply l by exp(old max - new max) before adding the new block",
    "the rescaling factor is inverted":
        "the rescaling factor is inverted: it must shrink the old sum when the maximum rises, exp(old - new) <= 1",
    "the last, shorter block is skipped":
        "the last, shorter block is skipped: when n is not a multiple of block, the final slice x[..., s:s + block] "
        "is shorter, and it still counts",
    "no running maximum is subtracted":
        "no running maximum is subtracted: exp of large scores overflows to inf; keep the running maximum m and "
        "exponentiate x - m",
    "nan where a whole block is -inf":
        "nan where a whole block is -inf: while the running maximum is still -inf, exp(-inf - (-inf)) is nan; "
        "rescale (and subtract) only once a finite maximum exists",
    NAN_GUARD:
        "the -inf guard is missing: where x holds -inf entries, a running maximum that is still -inf when it meets "
        "one (kept per row, per lane or per entry: however the loop is laid out) makes exp(-inf - (-inf)) = nan, "
        "and the nan spreads to every sum it enters; while a maximum is -inf, subtract (and rescale by) 0 instead "
        "of it: its terms are exp(-inf) = 0 whatever is subtracted",
    "the running maximum starts at 0":
        "the running maximum starts at 0 instead of -inf: for a row far below 0, like [-1000, -1001, -1002], the "
        "maximum then stays 0, every exp(x - 0) underflows to 0, and 0 / 0 is nan; start m at -inf (and guard the "
        "-inf - (-inf) case)",
    "softmax over the wrong axis": "softmax over the wrong axis: reduce over the last axis (dim=-1) of (..., n)",
}


def online_softmax_values(online_softmax) -> None:
    """Equal to the softmax on rows whose maximum rises from block to block, 0, 1 and 2 leading axes."""
    g = torch.Generator().manual_seed(9)
    rising = torch.arange(12, dtype=torch.float32) * 0.7 + torch.randn(12, generator=g) * 0.1      # max rises
    _online_case(online_softmax, rising, 3, "x = 0.7 * arange(12) + noise (1-D)")
    x2 = torch.randn(4, 8, generator=g) * 3
    x2[:, 4:] += 4.0                                            # the second block raises the maximum
    _online_case(online_softmax, x2, 4, "x (4, 8), larger values in the second block")
    _online_case(online_softmax, torch.randn(2, 3, 10, generator=g) * 2, 5, "x (2, 3, 10)")
    online_one_pass(online_softmax, torch.randn(3, 14, generator=g) * 2, 4)
    online_one_pass(online_softmax, torch.randn(3, 14, generator=g) * 2, 4, default=True)
    passed("online_softmax: equal to the softmax, with the running sum rescaled as the maximum rises, in one pass")


ONE_PASS = ("one pass: update the running maximum m and the running sum l in the same loop over the blocks "
            "(rescaling l by exp(old max - new max) when the maximum rises); nothing reduces a whole row, and after "
            "the loop only the final exp(x - m) / l reads x again. The maximum of the whole row first (x.max) or a "
            "second loop over the blocks is the two-pass softmax")


def online_one_pass(online_softmax, x, block, default=False) -> None:
    """The statistics come from one sweep over the blocks: no reduction wider than a block, and x read by
    one sweep plus the final exp(x - m) / l (a dispatch mode watches every tensor operation). ``default``:
    called without a block argument, whose default (``block``) must be the width it reads."""
    watch = Watch(block, x)
    with watch:
        _online(online_softmax, x, None if default else block)
    r = watch.report()
    what = f"online_softmax(x {tuple(x.shape)}{'' if default else f', block={block}'})"
    if not default and r["widest"] < block:       # one entry per step, or blocks of a fixed size
        widest = f"its widest max or sum spans {r['widest']}" if r["widest"] else "it takes no max or sum"
        raise CheckFailed(f"{what} never reduces over {block} entries at once: {widest}", reread=SEC_ONLINE,
                          hint="the block argument is ignored: walk the last axis block entries at a time, "
                               "x[..., s:s + block] for s = 0, block, 2 block, ..., and take each block's max and "
                               "sum in one step")
    if default and r["widest"] != block:          # (a two-pass softmax failed the call with a block before)
        raise CheckFailed(f"{what} without a block argument reads blocks of {r['widest']} entries", reread=SEC_ONLINE,
                          hint=f"block={block} is the default the signature gives: leave it as it is")
    if r["wide"]:
        op, shape = r["wide"][0]
        raise CheckFailed(f"{what} takes a {op} over more than one block at once (of a {tuple(shape)} tensor): "
                          "that is a second pass over the row", reread=SEC_ONLINE, hint=ONE_PASS)
    if r["extra_sweeps"] > 1:
        raise CheckFailed(f"{what} goes back to the start of x {r['extra_sweeps']} times after a sweep over the blocks "
                          "reached the end: after the one sweep for m and l, only the final exp(x - m) / l may read x "
                          "again", reread=SEC_ONLINE, hint=ONE_PASS)


def online_softmax_edge(online_softmax) -> None:
    """A last block shorter than the others, block > n, large values, and whole blocks of -inf."""
    g = torch.Generator().manual_seed(10)
    _online_case(online_softmax, torch.randn(3, 10, generator=g) + torch.arange(10.0), 4,
                 "x (3, 10): the last block has 2 entries")
    _online_case(online_softmax, torch.randn(2, 6, generator=g), 16, "x (2, 6) with block 16 > n")
    _online_case(online_softmax, torch.randn(2, 8, generator=g) * 50 + 1000, 4, "x (2, 8) around 1000")
    x = torch.randn(3, 9, generator=g)
    x[0, :4] = float("-inf")                                    # a whole first block masked
    x[1, 3:6] = float("-inf")
    x[2, ::2] = float("-inf")
    _online_case(online_softmax, x, 3, "x (3, 9) with -inf entries and a first block that is all -inf")
    low = torch.tensor([[-1000.0, -1001.0, -1002.0, -1000.5, -1003.0], [-2.0, -1.0, -3.0, -0.5, -4.0]])
    _online_case(online_softmax, low, 2, "x (2, 5): a row around -1000 (every entry far below 0)")
    passed("online_softmax: a shorter last block, block > n, values around 1000 and -1000, and blocks of -inf all work")


# ----------------------------------------------------------------------------------------
# tiled_attention
# ----------------------------------------------------------------------------------------
def _tiled_call(fn, q, k, v, mask, block):
    kw = {} if mask is None else {"mask": mask}
    with forbid(tiled_builtins(), NO_SDPA):
        return call(fn, q, k, v, block=block, name="tiled_attention", reread=SEC_ONLINE, **kw)


def _runs(fn, q, k, v, mask, block) -> bool:
    try:
        _tiled_call(fn, q, k, v, mask, block)
    except CheckFailed:
        return False
    return True


MASK_TILES = ("it fails only when given a mask: the mask is (Tq, Tk) or anything that broadcasts to (..., Tq, Tk) "
              "(a padding mask (B, 1, 1, Tk) too); broadcast it to (..., Tq, Tk) first, then take each tile's "
              "columns from the end, mask[..., s:s + block]")


def _tiled(fn, q, k, v, mask, block, what):
    try:
        out = _tiled_call(fn, q, k, v, mask, block)
    except CheckFailed as e:
        # name a crash by what makes it go away: no mask, or two leading axes (q, k, v lifted to 4-D,
        # the mask as it is); otherwise it stays the error it is
        hint, extra, reread = e.hint, [], e.reread
        if " raised " in e.title:
            lift = lambda t: t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))
            if mask is not None and _runs(fn, q, k, v, None, block):
                hint, reread = MASK_TILES, SEC_FLASH
                extra = [f"the same q, k, v without the mask {tuple(mask.shape)} run"]
            elif q.dim() < 4 and _runs(fn, lift(q), lift(k), lift(v), mask, block):
                hint = (f"q, k and v may have 0, 1 or 2 leading axes (this call: {q.dim() - 2}): index and "
                        "transpose from the end (..., -2, -1), never by a fixed position")
                extra, reread = ["the same inputs with two leading axes of size 1 run"], SEC_FLASH
        raise CheckFailed(f"tiled_attention on {what}: {e.title}", reread=reread, student_tb=e.student_tb,
                          details=e.details + extra, hint=hint) from None
    out = expect_tensor(out, "tiled_attention", SEC_ONLINE)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expect_shape(out, want.shape, f"tiled_attention on {what}", reread=SEC_ONLINE,
                 hint="the output is (..., Tq, dv): one row per query, as wide as the values")
    if not close(out, want, atol=1e-5):
        name = first_match(out.double(), _dedupe(want, tiled_variants(q, k, v, mask, block)), atol=1e-5)
        if name is None and mask is not None and bool(torch.isnan(out).any()):
            name = name_tiled_nan(out, q, k, mask, block)
        hint = name or ("per tile: scores, running max, rescale both l and acc by exp(old max - new max), add the "
                        "tile's exp(scores - max) and exp(scores - max) @ v; divide acc by l once at the end")
        raise CheckFailed(f"tiled_attention on {what}, block={block}, has the wrong values",
                          reread=SEC_MASKED if name == _TILE_NAN else SEC_FLASH,
                          hint=hint, details=value_details(out, want, "SDPA"))
    return out


def name_tiled_nan(out, q, k, mask, block) -> str | None:
    """nan only in query rows that have a tile of keys masked entirely: the -inf guard is missing."""
    Tq, Tk = q.size(-2), k.size(-2)
    full = mask.expand(*mask.shape[:-2], Tq, Tk)
    dead = torch.zeros(full.shape[:-1], dtype=torch.bool)                  # (..., Tq)
    for s in range(0, Tk, block):
        dead = dead | (~full[..., s:s + block]).all(-1)
    nan_rows = torch.isnan(out).any(-1)                                    # (..., Tq)
    dead = dead.expand(torch.broadcast_shapes(dead.shape, nan_rows.shape))
    return _TILE_NAN if bool(nan_rows.any()) and not bool((nan_rows & ~dead).any()) else None


def tiled_attention_values(tiled_attention) -> None:
    """Equal to SDPA without a mask: 0, 1 and 2 leading axes, Tq != Tk, d != dv, partial tiles, block > Tk."""
    g = torch.Generator().manual_seed(11)
    r = lambda *s: torch.randn(*s, generator=g)
    q, k, v = r(5, 8) * 2, r(9, 8) * 2, r(9, 6)
    _tiled(tiled_attention, q, k, v, None, 4, "q (5, 8), k (9, 8), v (9, 6)")
    q, k, v = r(2, 6, 8) * 2, r(2, 12, 8) * 2, r(2, 12, 4)
    k[:, 8:] *= 3                                               # a later tile raises the maximum
    _tiled(tiled_attention, q, k, v, None, 4, "q (2, 6, 8), k (2, 12, 8), v (2, 12, 4)")
    q, k, v = r(2, 3, 7, 16), r(2, 3, 10, 16), r(2, 3, 10, 8)
    _tiled(tiled_attention, q, k, v, None, 3, "q (2, 3, 7, 16), k (2, 3, 10, 16), v (2, 3, 10, 8)")
    _tiled(tiled_attention, q, k, v, None, 32, "q (2, 3, 7, 16), k and v with Tk = 10 < block")
    tiled_memory(tiled_attention, r(2, 24, 4), r(2, 96, 4), r(2, 96, 4), 8)
    tiled_memory(tiled_attention, r(24, 4), r(40, 4), r(40, 4), 16, default=True)
    passed("tiled_attention: equal to SDPA for 0-2 leading axes, Tq != Tk, d != dv, partial tiles and block > Tk; "
           "no (Tq, Tk) score matrix built")


NO_FULL = ("tile by tile: the scores of one tile are (..., Tq, block); never build the whole (..., Tq, Tk) score "
           "matrix (or any tensor that large), and never take a max or sum over more than block keys at once: "
           "the running m, l and acc carry everything from one tile to the next")


def tiled_memory(tiled_attention, q, k, v, block, default=False) -> None:
    """No tensor of half the (..., Tq, Tk) score matrix or more is created, and no reduction spans more than
    a block (a dispatch mode watches every tensor operation); d <= block here. ``default``: called without
    a block argument, whose default (``block``) must be the width of its tiles."""
    _tiled(tiled_attention, q, k, v, None, block, f"q {tuple(q.shape)}, k {tuple(k.shape)}")
    watch = Watch(block)
    with watch, forbid(tiled_builtins(), NO_SDPA):
        call(tiled_attention, q, k, v, name="tiled_attention", reread=SEC_ONLINE,
             **({} if default else {"block": block}))
    r = watch.report()
    full = (*q.shape[:-1], k.size(-2))
    what = (f"tiled_attention(q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
            f"{'' if default else f', block={block}'})")
    if default and r["widest"] != block:          # (a whole score matrix failed the call with a block before)
        raise CheckFailed(f"{what} without a block argument works on tiles of {r['widest']} keys", reread=SEC_ONLINE,
                          hint=f"block={block} is the default the signature gives: leave it as it is")
    if r["largest"][0] * 2 >= math.prod(full):
        raise CheckFailed(f"{what} creates a tensor of {r['largest'][0]} numbers ({tuple(r['largest'][1])}): as "
                          f"large as the whole score matrix {full} or half of it", reread=SEC_ONLINE, hint=NO_FULL)
    if r["wide"]:
        op, shape = r["wide"][0]
        raise CheckFailed(f"{what} takes a {op} over more than block keys at once (of a {tuple(shape)} tensor)",
                          reread=SEC_ONLINE, hint=NO_FULL)


def tiled_attention_mask(tiled_attention) -> None:
    """Masks: causal (Tq, Tk), a padding mask (B, 1, 1, Tk), and tiles fully masked for some queries."""
    g = torch.Generator().manual_seed(12)
    r = lambda *s: torch.randn(*s, generator=g)
    q, k, v = r(2, 7, 8), r(2, 7, 8), r(2, 7, 8)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    _tiled(tiled_attention, q, k, v, causal, 3, "q, k, v (2, 7, 8) with a causal mask (7, 7)")
    q, k, v = r(2, 2, 5, 8), r(2, 2, 9, 8), r(2, 2, 9, 4)
    pad = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    pad[0, ..., 6:] = False
    pad[1, ..., 3:] = False
    _tiled(tiled_attention, q, k, v, pad, 4, "q (2, 2, 5, 8), k (2, 2, 9, 8) with a padding mask (2, 1, 1, 9)")
    q, k, v = r(12, 8), r(12, 8), r(12, 8)
    i, j = torch.arange(12)[:, None], torch.arange(12)[None, :]
    local = (j <= i) & (i - j < 3)                              # late queries: their first tiles are all masked
    _tiled(tiled_attention, q, k, v, local, 4, "q, k, v (12, 8) with a window of 3 (whole tiles masked)")
    passed("tiled_attention: causal, padding and window masks, including tiles masked for a whole query row")


# ----------------------------------------------------------------------------------------
# GroupedQueryAttention
# ----------------------------------------------------------------------------------------
def _gqa(GQA, D, H, Hkv, seed=0):
    torch.manual_seed(seed)
    m = call(GQA, D, H, Hkv, name="GroupedQueryAttention", reread=SEC_GQA)
    if not isinstance(m, nn.Module):
        raise CheckFailed("GroupedQueryAttention(...) did not build an nn.Module", reread=SEC_GQA)
    Dh = D // H
    for name, shape in (("W_q", (D, D)), ("W_kv", (2 * Hkv * Dh, D)), ("W_o", (D, D))):
        lin = getattr(m, name, None)
        if not isinstance(lin, nn.Linear):
            raise CheckFailed(f"GroupedQueryAttention has no nn.Linear attribute {name}", reread=SEC_GQA,
                              hint="name the layers W_q, W_kv and W_o as the table in the exercise says")
        if tuple(lin.weight.shape) != shape:
            hint = None
            if name == "W_kv" and tuple(lin.weight.shape) == (2 * D, D) and Hkv != H:
                hint = ("W_kv has n_heads key and value heads: it must have only n_kv_heads of each, "
                        "2 * n_kv_heads * Dh output features")
            raise CheckFailed(f"GroupedQueryAttention({D}, {H}, {Hkv}).{name}.weight has shape "
                              f"{tuple(lin.weight.shape)}, expected {shape}", reread=SEC_GQA, hint=hint)
        if lin.bias is None:
            raise CheckFailed(f"{name} has no bias", reread=SEC_GQA, hint="use nn.Linear's default bias=True")
    return m.eval()


def _attn_loop(x, Wq, bq, Wkv, bkv, Wo, bo, H, Hkv, mask, order="inplace"):
    """Grouped-query attention head by head (float64): head h reads kv head h // g (or h % Hkv)."""
    x = x.double()
    B, T, D = x.shape
    Dh, g = D // H, H // Hkv
    q = (x @ Wq.double().T + bq.double()).view(B, T, H, Dh)
    kv = x @ Wkv.double().T + bkv.double()
    k, v = kv[..., :Hkv * Dh].view(B, T, Hkv, Dh), kv[..., Hkv * Dh:].view(B, T, Hkv, Dh)
    heads = []
    for h in range(H):
        j = h // g if order == "inplace" else h % Hkv
        s = q[:, :, h] @ k[:, :, j].transpose(-2, -1) / math.sqrt(Dh)                   # (B, T, T)
        if mask is not None:
            s = s.masked_fill(~mask.expand(B, 1, T, T)[:, 0], float("-inf"))
        heads.append(s.softmax(-1) @ v[:, :, j])
    return torch.cat(heads, dim=-1) @ Wo.double().T + bo.double()


def _weights(m):
    return (m.W_q.weight, m.W_q.bias, m.W_kv.weight, m.W_kv.bias, m.W_o.weight, m.W_o.bias)


def _gqa_call(m, x, mask, is_causal, what):
    kw = {}
    if mask is not None:
        kw["mask"] = mask
    if is_causal:
        kw["is_causal"] = True
    with torch.no_grad():
        out = call(m, x, name="GroupedQueryAttention.forward", reread=SEC_GQA, **kw)
    out = expect_tensor(out, "GroupedQueryAttention.forward", SEC_GQA)
    expect_shape(out, x.shape, f"GroupedQueryAttention output for {what}", reread=SEC_GQA,
                 hint="merge the heads back to (B, T, D) and apply W_o")
    return out


def _gqa_compare(m, x, mask, is_causal, want, what, H, Hkv):
    out = _gqa_call(m, x, mask, is_causal, what)
    if close(out, want, atol=1e-5):
        return
    T = x.size(1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    full = causal if is_causal and mask is None else (mask & causal if is_causal else mask)
    w = [t.detach() for t in _weights(m)]
    cands = {}
    if mask is not None and is_causal:
        cands["with both a mask and is_causal, only one is applied: a key must pass both"] = \
            _attn_loop(x, *w, H, Hkv, causal)
        cands["with both a mask and is_causal, only one is applied: a key must pass both (here the causal mask "
              "is missing)"] = _attn_loop(x, *w, H, Hkv, mask)
    cands.update({
        "key/value heads repeated in the wrong order: query head h must read kv head h // g (each kv head "
        "repeated g times in place), not h % n_kv_heads (the list tiled)":
            _attn_loop(x, *w, H, Hkv, full, order="tiled"),
        "the mask is ignored": _attn_loop(x, *w, H, Hkv, causal if is_causal else None),
        "is_causal is ignored when set": _attn_loop(x, *w, H, Hkv, mask),
    })
    Wkv, bkv = w[2], w[3]
    half = Wkv.size(0) // 2
    swapped = (w[0], w[1], torch.cat([Wkv[half:], Wkv[:half]]), torch.cat([bkv[half:], bkv[:half]]), w[4], w[5])
    cands["keys and values swapped: the first half of W_kv's output is the keys, the second the values"] = \
        _attn_loop(x, *swapped, H, Hkv, full)
    name = first_match(out.double(), _dedupe(want, cands), atol=1e-5)
    raise CheckFailed(f"GroupedQueryAttention output for {what} has the wrong values", reread=SEC_GQA,
                      hint=name or "queries from W_q, keys then values from W_kv, kv head h // g for query head h, "
                                   "scaled dot-product attention per head, merge, W_o",
                      details=[f"max |yours - expected| = {max_abs_diff(out, want):.3g} (tolerance 1e-5)"])


def gqa_as_mha(GroupedQueryAttention) -> None:
    """n_kv_heads == n_heads with exercise 05's weights loaded gives exercise 05's outputs (masks too)."""
    from ..mha import MultiHeadAttention

    for D, H in ((32, 4), (24, 3)):
        torch.manual_seed(1)
        mha = MultiHeadAttention(D, H).eval()
        m = _gqa(GroupedQueryAttention, D, H, H, seed=2)
        with torch.no_grad():
            m.W_q.weight.copy_(mha.W_qkv.weight[:D])
            m.W_q.bias.copy_(mha.W_qkv.bias[:D])
            m.W_kv.weight.copy_(mha.W_qkv.weight[D:])
            m.W_kv.bias.copy_(mha.W_qkv.bias[D:])
            m.W_o.weight.copy_(mha.W_o.weight)
            m.W_o.bias.copy_(mha.W_o.bias)
        g = torch.Generator().manual_seed(D)
        x = torch.randn(2, 6, D, generator=g)
        rand = torch.rand(6, 6, generator=g) > 0.4
        rand |= torch.eye(6, dtype=torch.bool)
        pad = torch.ones(2, 1, 6, 6, dtype=torch.bool)
        pad[1, ..., 4:] = False
        cases = [(None, False, "x (2, 6, D), no mask"), (None, True, "is_causal=True"),
                 (rand, False, "a mask (6, 6)"), (pad, False, "a padding mask (2, 1, 6, 6)"),
                 (pad, True, "a padding mask (2, 1, 6, 6) and is_causal=True")]
        for mask, is_causal, what in cases:
            with torch.no_grad():
                want = mha(x, mask=mask, is_causal=is_causal)
            _gqa_compare(m, x, mask, is_causal, want, f"GroupedQueryAttention({D}, {H}, {H}) with exercise 05's "
                                                      f"weights, {what}", H, H)
    passed("GroupedQueryAttention: with n_kv_heads == n_heads it gives exercise 05's outputs (masks and causal too)")


def gqa_groups(GroupedQueryAttention) -> None:
    """Fewer key/value heads: query head h reads kv head h // g; multi-query (one kv head) too."""
    for D, H, Hkv in ((32, 4, 2), (32, 4, 1), (48, 6, 3)):
        m = _gqa(GroupedQueryAttention, D, H, Hkv, seed=3)
        g = torch.Generator().manual_seed(D + Hkv)
        x = torch.randn(2, 5, D, generator=g)
        with torch.no_grad():
            for lin in (m.W_q, m.W_kv, m.W_o):          # weights large enough that heads differ clearly
                lin.weight.normal_(0, 0.5, generator=g)
                lin.bias.normal_(0, 0.1, generator=g)
        for is_causal in (False, True):
            causal = torch.ones(5, 5, dtype=torch.bool).tril() if is_causal else None
            want = _attn_loop(x, *[t.detach() for t in _weights(m)], H, Hkv, causal)
            _gqa_compare(m, x, None, is_causal, want, f"GroupedQueryAttention({D}, {H}, {Hkv})"
                         + (", is_causal=True" if is_causal else ""), H, Hkv)
    passed("GroupedQueryAttention: groups of query heads share kv head h // g (also with a single kv head)")


# ----------------------------------------------------------------------------------------
# apply_rope
# ----------------------------------------------------------------------------------------
def rope_oracle(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """Adjacent pairs as complex numbers times exp(i * pos * theta) (float64)."""
    T, d = x.shape[-2:]
    pos = torch.arange(T) if positions is None else positions
    theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    rot = torch.polar(torch.ones(T, d // 2, dtype=torch.float64), pos.double()[:, None] * theta)
    return torch.view_as_real(z * rot).reshape(x.shape)


ROPE_HALF = "pairs x[i] with x[i + d/2]: this exercise rotates ADJACENT pairs (x[2i], x[2i+1])"
ROPE_MIXED = "the frequencies do not match the pairs"
ROPE_SHIFTED = "the frequencies are off by one"
ROPE_CLOCKWISE = ("rotates clockwise: the second entry of a pair gets x_2i sin + x_2i+1 cos, the first "
                  "x_2i cos - x_2i+1 sin")


def rope_variants(x, positions=None, base=10000.0) -> dict[str, torch.Tensor]:
    T, d = x.shape[-2:]
    pos = (torch.arange(T) if positions is None else positions).double()
    xd = x.double()
    out = {}
    theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)     # (d/2,)
    # pairs (i, i + d/2): the half-split layout (Hugging Face's rotate_half, GPT-NeoX)
    ang = pos[:, None] * theta
    a, b = xd[..., :d // 2], xd[..., d // 2:]
    out[ROPE_HALF + " (the half-split layout of Hugging Face's rotate_half and GPT-NeoX is another convention)"] = \
        torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], -1)
    # the two layouts mixed: one layout's pairs, the other layout's angles
    adjacent_rot = torch.stack([-xd[..., 1::2], xd[..., 0::2]], -1).flatten(-2)             # (-x1, x0, -x3, x2, ...)
    half_rot = torch.cat([-b, a], -1)                                                        # (-x[d/2:], x[:d/2])
    tiled, inplace = ang.repeat(1, 2), ang.repeat_interleave(2, dim=-1)                      # (T, d) angles
    out[ROPE_MIXED + ": with adjacent pairs, both entries of pair i turn by the same angle p * theta_i, so the d "
        "angles read theta_0, theta_0, theta_1, theta_1, ... (each repeated in place); theta_0 .. theta_(d/2-1) "
        "written twice one after the other belongs to the half-split layout"] = \
        xd * tiled.cos() + adjacent_rot * tiled.sin()
    out[ROPE_MIXED + ": x[i] is paired with x[i + d/2] (the half-split layout) while the angles are laid out for "
        "adjacent pairs (theta_0, theta_0, theta_1, ...); this exercise rotates the adjacent pairs (x[2i], x[2i+1]), "
        "both entries of pair i by p * theta_i"] = xd * inplace.cos() + half_rot * inplace.sin()
    z = torch.view_as_complex(xd.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    for name, exps in (("wrong frequencies: theta_i = base ** (-2i / d), with 2i (the index of the pair's first "
                        "entry), not i", [-i / d for i in range(d // 2)]),
                       (ROPE_SHIFTED + ": the paper writes theta_k = base ** (-2(k - 1) / d) with k counted from 1; "
                        "with i = 0 .. d/2 - 1 that is base ** (-2i / d), so pair 0 turns by exactly p radians "
                        "(theta_0 = 1)", [-(2 * i + 1) / d for i in range(d // 2)]),
                       (ROPE_SHIFTED + ": the paper writes theta_k = base ** (-2(k - 1) / d) with k counted from 1; "
                        "with i = 0 .. d/2 - 1 that is base ** (-2i / d), not base ** (-2(i - 1) / d)",
                        [-2 * (i - 1) / d for i in range(d // 2)]),
                       (ROPE_SHIFTED + ": theta_i = base ** (-2i / d) for i = 0 .. d/2 - 1, so pair 0 turns by "
                        "exactly p radians (theta_0 = 1), not base ** (-2(i + 1) / d)",
                        [-2 * (i + 1) / d for i in range(d // 2)])):
        ang_i = pos[:, None] * torch.tensor([base ** e for e in exps], dtype=torch.float64)
        out[name] = torch.view_as_real(z * torch.polar(torch.ones_like(ang_i), ang_i)).reshape(x.shape)
        # the same frequencies turned the other way (x @ R for R @ x): two mistakes, both named
        out[f"two mistakes: it rotates clockwise, and {name}. On the rotation: {ROPE_CLOCKWISE.split(': ', 1)[1]}"] = \
            torch.view_as_real(z * torch.polar(torch.ones_like(ang_i), -ang_i)).reshape(x.shape)
    out[ROPE_CLOCKWISE] = rope_oracle(x, -pos.long() if positions is None else -positions, base)
    out["the base argument is ignored"] = rope_oracle(x, positions, 10000.0)
    out["the positions argument is ignored: rotate by the positions given, not 0 .. T-1"] = rope_oracle(x, None, base)
    return out


ROPE_D2 = ("d = 2 is a single pair (x[0], x[1]) turning by p * theta_0 = p radians (theta_0 = base ** 0 = 1): "
           "nothing may assume more than one pair (a squeeze() of the pair axis, a division by d/2 - 1, ...)")


def _rope(fn, x, what, **kw):
    d = x.size(-1)
    try:
        out = call(fn, x.clone(), name="apply_rope", reread=SEC_ROPE, **kw)
    except CheckFailed as e:
        if d != 2 or " raised " not in e.title:
            raise
        raise CheckFailed(f"apply_rope on {what}: {e.title}", reread=SEC_ROPE, student_tb=e.student_tb,
                          details=e.details, hint=ROPE_D2) from None
    out = expect_tensor(out, "apply_rope", SEC_ROPE)
    expect_shape(out, x.shape, f"apply_rope on {what}", reread=SEC_ROPE,
                 hint="return the shape of x: (..., T, d)" + ("; " + ROPE_D2 if d == 2 else ""))
    want = rope_oracle(x, kw.get("positions"), kw.get("base", 10000.0)).to(x.dtype)
    if not close(out, want, atol=1e-5):
        name = first_match(out.double(), _dedupe(want, rope_variants(x, kw.get("positions"), kw.get("base", 10000.0))),
                           atol=1e-5)
        layouts = name is not None and name.startswith((ROPE_HALF, ROPE_MIXED))
        raise CheckFailed(f"apply_rope on {what} has the wrong values",
                          reread=SEC_ROPE_LAYOUTS if layouts else SEC_ROPE,
                          hint=name or (ROPE_D2 if d == 2 else
                                        "rotate pair (x[2i], x[2i+1]) at position p by p * base ** (-2i / d)"),
                          details=value_details(out, want, "expected"))
    return out


def apply_rope_values(apply_rope) -> None:
    """The rotation of adjacent pairs, for 0, 1 and 2 leading axes and another base."""
    g = torch.Generator().manual_seed(13)
    _rope(apply_rope, torch.randn(6, 8, generator=g), "x (6, 8)")
    _rope(apply_rope, torch.randn(2, 5, 4, generator=g), "x (2, 5, 4)")
    _rope(apply_rope, torch.randn(2, 3, 7, 16, generator=g), "x (2, 3, 7, 16)")
    _rope(apply_rope, torch.randn(2, 9, 8, generator=g), "x (2, 9, 8) with base=100.0", base=100.0)
    _rope(apply_rope, torch.randn(5, 2, generator=g), "x (5, 2): d = 2, one pair")
    _rope(apply_rope, torch.randn(3, 1, 6, generator=g), "x (3, 1, 6): T = 1")
    passed("apply_rope: adjacent pairs rotated by position * base ** (-2i / d), any leading axes and base, d = 2 "
           "and T = 1 too")


def apply_rope_positions(apply_rope) -> None:
    """Positions given explicitly, and scores that depend only on the offset between two positions."""
    g = torch.Generator().manual_seed(14)
    x = torch.randn(2, 4, 8, generator=g)
    _rope(apply_rope, x, "x (2, 4, 8) with positions 5, 6, 7, 8", positions=torch.arange(5, 9))
    _rope(apply_rope, x[0], "x (4, 8) with positions 7, 2, 11, 0", positions=torch.tensor([7, 2, 11, 0]))
    q, k = torch.randn(1, 16, generator=g), torch.randn(1, 16, generator=g)

    def score(i, j):
        a = call(apply_rope, q, positions=torch.tensor([i]), name="apply_rope", reread=SEC_ROPE)
        b = call(apply_rope, k, positions=torch.tensor([j]), name="apply_rope", reread=SEC_ROPE)
        return float((a * b).sum())
    s = [score(3, 1), score(10, 8), score(42, 40)]
    if max(s) - min(s) > 1e-4:
        raise CheckFailed("the score of a rotated query and key changes with their absolute positions", reread=SEC_ROPE,
                          details=[f"q . k at positions (3, 1), (10, 8), (42, 40): {[round(v, 5) for v in s]}"],
                          hint="both are rotated by their own position: the score must depend only on the offset")
    _rope(apply_rope, torch.randn(3, 2, generator=g), "x (3, 2) with positions 4, 9, 1: d = 2, one pair",
          positions=torch.tensor([4, 9, 1]))
    passed("apply_rope: explicit positions work (d = 2 too), and q . k depends only on the offset between positions")


# ----------------------------------------------------------------------------------------
# sliding_window_mask
# ----------------------------------------------------------------------------------------
def window_oracle(T: int, w: int) -> torch.Tensor:
    out = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        for j in range(T):
            out[i, j] = 0 <= i - j < w
    return out


def window_variants(T: int, w: int) -> dict[str, torch.Tensor]:
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return {
        "the window is off by one: query i must see exactly window keys (itself and window - 1 before it), "
        "not window + 1": (j <= i) & (i - j <= w),
        "the window is off by one: query i must see window keys, itself included, not window - 1":
            (j <= i) & (i - j < w - 1),
        "the mask is not causal: a query must not see later keys": (i - j).abs() < w,
        "the mask is inverted: True means may attend": ~((j <= i) & (i - j < w)),
        "the first rows are wrong: for i < window - 1 the window would start before key 0, and a negative slice "
        "start counts from the end; clamp the start at 0": _negative_slices(T, w),
    }


def _negative_slices(T: int, w: int) -> torch.Tensor:
    out = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        out[i, i - w + 1:i + 1] = True
    return out


def sliding_window_mask_values(sliding_window_mask) -> None:
    """(T, T) bool, query i sees keys i - w + 1 .. i; window 1, window >= T (causal) too."""
    for T, w in ((6, 3), (7, 2), (5, 1), (4, 4), (4, 9)):
        out = call(sliding_window_mask, T, w, name="sliding_window_mask", reread=SEC_LOCAL)
        out = expect_tensor(out, "sliding_window_mask", SEC_LOCAL)
        expect_shape(out, (T, T), f"sliding_window_mask({T}, {w})", reread=SEC_LOCAL,
                     hint="one row per query, one column per key")
        if out.dtype != torch.bool:
            raise CheckFailed(f"sliding_window_mask returned {out.dtype}, not bool", reread=SEC_LOCAL,
                              hint="masks are bool tensors: True = may attend")
        want = window_oracle(T, w)
        if not torch.equal(out, want):
            name = next(
                (n for n, c in window_variants(T, w).items() if torch.equal(out, c) and not torch.equal(c, want)), None
            )
            raise CheckFailed(f"sliding_window_mask({T}, {w}) is wrong", reread=SEC_LOCAL,
                              hint=name or "query i may attend to keys i - window + 1 .. i",
                              details=["expected:"] + [str(r) for r in want.int().tolist()]
                                      + ["yours:"] + [str(r) for r in out.int().tolist()])
    passed("sliding_window_mask: query i sees itself and the window - 1 keys before it (window 1 and >= T too)")


# ----------------------------------------------------------------------------------------
# generate_cached
# ----------------------------------------------------------------------------------------
def tiny_gpt(seed: int, vocab_size=23, block_size=24, n_layer=2, n_head=4, d_model=32):
    """Lecture 08's GPT with weights far larger than its initialisation (every linear and
    embedding matrix normal with std 0.3, biases 0.1): attention is then sharp and every
    position matters, so a cache that is slightly wrong changes the sampled text."""
    from ..gpt import GPT

    torch.manual_seed(seed)
    model = GPT(vocab_size, block_size, n_layer, n_head, d_model).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, 0.3, generator=g)
                if getattr(m, "bias", None) is not None:
                    m.bias.normal_(0.0, 0.1, generator=g)
    return model


@torch.no_grad()
def cached_variant(model, idx, n, temperature=1.0, top_k=None, generator=None, *, restart=False, replace=False,
                   causal=True, counted=False, greedy_zero=True, no_pos=None):
    """A cached generate with one of the classic bugs switched on (for naming a wrong output).
    ``causal``: True (causal prefill only), False (never) or "always" (is_causal=True at every step too);
    ``counted``: positions from a counter of the tokens fed, not from the cache's length;
    ``no_pos``: "new" (the tokens fed after the prompt get no position embedding) or "all" (none does)."""
    cache = [[None, None] for _ in model.blocks]
    fed = [0]

    def run(tokens):
        past = fed[0] if counted else (0 if cache[0][0] is None else cache[0][0].size(2))
        t = tokens.size(1)
        fed[0] += t
        start = 0 if restart else past
        x = model.tok_emb(tokens)
        if no_pos is None or (no_pos == "new" and cache[0][0] is None):
            x = x + model.pos_emb(torch.arange(start, start + t))
        for layer, blk in zip(cache, model.blocks):
            a = blk.attn
            qkv = a.W_qkv(blk.ln1(x)).split(a.d_model, dim=-1)
            H = a.n_heads
            q, k, v = [z.view(z.size(0), t, H, -1).transpose(1, 2) for z in qkv]
            if layer[0] is not None and not replace:
                k, v = torch.cat([layer[0], k], 2), torch.cat([layer[1], v], 2)
            layer[0], layer[1] = k, v
            is_causal = causal == "always" or (causal and past == 0 and t > 1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
            x = x + a.W_o(y.transpose(1, 2).reshape(x.shape))
            x = x + blk.ff(blk.ln2(x))
        return model.lm_head(model.ln_f(x))[:, -1]

    logits = run(idx)
    for step in range(n):
        if temperature == 0 and greedy_zero:
            nxt = logits.argmax(-1, keepdim=True)
        else:
            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=generator)
        idx = torch.cat([idx, nxt], 1)
        if step + 1 < n:
            logits = run(nxt)
    return idx


CACHE_HINTS = {
    "restart": "the position embeddings restart at 0 for each new token: a new token sits at the position after "
               "the cached ones (the number of positions already in the cache)",
    "replace": "the cache is replaced instead of appended to: each new key and value must be concatenated to the "
               "layer's cached ones along the positions axis",
    "causal": "the prompt is read without the causal mask: during prefill a prompt position must not see later "
              "prompt positions",
    "ignored": "temperature and top_k are ignored: divide the last logits by temperature and keep only the top_k "
               "largest before sampling, as generate does",
    "decode_causal": "is_causal=True while decoding: with one new query and a longer cache, SDPA's causal mask is "
                     "aligned to the top left, so the new token sees only the first cached key; a decoding step "
                     "needs no mask (nothing in the cache is in its future), only the prefill is causal",
}

CACHE_HINTS["no_pos"] = ("the new token gets no position embedding: a token fed after the prompt needs the "
                         "position embedding of its own position (the number of positions already in the cache) "
                         "added to its token embedding, as the prompt's tokens get theirs")
CACHE_HINTS["no_pos_all"] = ("no token gets a position embedding, neither the prompt's nor the new ones: add the "
                             "position embeddings to the token embeddings, the prompt's at 0 .. T-1 and each new "
                             "token's at the position after the cached ones")
# the classic bugs lecture 09's section 2 shows and names
_CLASSIC = ("restart", "no_pos", "no_pos_all", "replace", "decode_causal")

GREEDY = ("temperature=0 means greedy decoding, as in generate: take the argmax of the last logits (dividing by 0 "
          "gives inf and nan, and torch.multinomial refuses them)")
CACHE_HINTS["greedy"] = GREEDY


def _gen_cached(fn, model, idx, n, **kw):
    out = call(fn, model, idx, n, name="generate_cached", reread=SEC_CACHE, **kw)
    return expect_tensor(out, "generate_cached", SEC_CACHE)


def _compare_generation(fn, model, idx, n, what, **kw):
    from ..gpt import generate

    if kw.get("temperature") == 0:
        try:
            out = _gen_cached(fn, model, idx.clone(), n, generator=torch.Generator().manual_seed(5), **kw)
        except CheckFailed as e:
            raise CheckFailed(f"generate_cached on {what}: {e.title}", reread=SEC_CACHE, student_tb=e.student_tb,
                              details=e.details, hint=GREEDY) from None
    else:
        out = _gen_cached(fn, model, idx.clone(), n, generator=torch.Generator().manual_seed(5), **kw)
    want = generate(model, idx.clone(), n, generator=torch.Generator().manual_seed(5), **kw)
    expect_shape(out, want.shape, f"generate_cached on {what}", reread=SEC_CACHE,
                 hint="return the prompt followed by max_new_tokens new tokens: (B, T + max_new_tokens)")
    if torch.equal(out, want):
        return
    name = None
    for key, flags in (("restart", {"restart": True}), ("replace", {"replace": True}),
                       ("replace", {"replace": True, "counted": True}), ("causal", {"causal": False}),
                       ("decode_causal", {"causal": "always"}), ("no_pos", {"no_pos": "new"}),
                       ("no_pos_all", {"no_pos": "all"})):
        cand = cached_variant(model, idx.clone(), n, generator=torch.Generator().manual_seed(5), **kw, **flags)
        if torch.equal(out, cand) and not torch.equal(cand, want):
            name = key
            break
    if name is None and kw and kw.get("temperature") != 0:
        plain = generate(model, idx.clone(), n, generator=torch.Generator().manual_seed(5))
        if torch.equal(out, plain):
            name = "ignored"
    if name is None and kw.get("temperature") == 0:
        name = "greedy"
    diff = (out != want).nonzero()
    row, first = (int(diff[0, 0]), int(diff[0, 1])) if len(diff) else (0, -1)
    raise CheckFailed(f"generate_cached on {what} differs from generate with the same seed",
                      reread=SEC_CACHE_BUG if name in _CLASSIC else SEC_CACHE,
                      hint=CACHE_HINTS.get(name, "the cached forward must give the uncached model's logits: embed at "
                                                 "the right positions, append to each layer's cache, causal prefill, "
                                                 "and sample exactly as generate does (temperature, top_k, generator)"),
                      details=[f"first different token: batch row {row}, position {first} (the prompt has "
                               f"{idx.size(1)})", f"generate,        row {row}: {want[row].tolist()}",
                               f"generate_cached, row {row}: {out[row].tolist()}"])


def generate_cached_equal(generate_cached) -> None:
    """Token for token the same as lecture 08's generate under one seed: batches, top_k and temperature."""
    model = tiny_gpt(0)
    g = torch.Generator().manual_seed(6)
    _compare_generation(
        generate_cached, model, torch.randint(23, (3, 5), generator=g), 12, "a prompt (3, 5), 12 tokens"
    )
    _compare_generation(generate_cached, model, torch.randint(23, (1, 1), generator=g), 8, "a one-token prompt (1, 1)")
    _compare_generation(generate_cached, model, torch.randint(23, (2, 4), generator=g), 10,
                        "a prompt (2, 4) with temperature=0.7, top_k=3", temperature=0.7, top_k=3)
    other = tiny_gpt(1, vocab_size=17, block_size=16, n_layer=3, n_head=2, d_model=16)
    _compare_generation(generate_cached, other, torch.randint(17, (2, 6), generator=g), 10,
                        "GPT(17, 16, n_layer=3, n_head=2, d_model=16), prompt (2, 6), up to block_size")
    _compare_generation(generate_cached, model, torch.randint(23, (2, 2), generator=g), 9, "a two-token prompt (2, 2)")
    single = tiny_gpt(3, n_layer=1)
    _compare_generation(generate_cached, single, torch.randint(23, (2, 4), generator=g), 8,
                        "GPT(23, 24, n_layer=1, n_head=4, d_model=32): one block, prompt (2, 4)")
    _compare_generation(generate_cached, model, torch.randint(23, (2, 3), generator=g), 8,
                        "a prompt (2, 3) with temperature=0 (greedy)", temperature=0)
    passed("generate_cached: the same tokens as generate with the same seed (batches, temperature, top_k, and "
           "temperature=0 greedy)")


class _Recorder:
    """Counts the tokens each call of the embedding and of every block's first LayerNorm sees."""

    def __init__(self, model):
        self.emb, self.ln, self.full, self.grad = [], [], 0, False
        self.handles = [model.tok_emb.register_forward_hook(lambda m, a, o: self.emb.append(a[0].shape[-1])),
                        model.register_forward_hook(lambda m, a, o: self._full())]
        for b in model.blocks:
            self.handles.append(b.ln1.register_forward_hook(lambda m, a, o: self._ln(a[0].shape[-2])))

    def _ln(self, width):
        self.ln.append(width)
        self.grad = self.grad or torch.is_grad_enabled()

    def _full(self):
        self.full += 1

    def remove(self):
        for h in self.handles:
            h.remove()


def generate_cached_steps(generate_cached) -> None:
    """The prompt goes through the blocks once, then each new token alone."""
    model = tiny_gpt(2)
    prompt = torch.randint(23, (2, 7), generator=torch.Generator().manual_seed(7))
    rec = _Recorder(model)
    try:
        _gen_cached(generate_cached, model, prompt, 6, generator=torch.Generator().manual_seed(0))
    finally:
        rec.remove()
    if rec.full:
        raise CheckFailed(f"generate_cached called the model's own forward {rec.full} times", reread=SEC_CACHE,
                          hint="not cached: model(idx) runs every block on the whole text; run the pieces yourself "
                               "(tok_emb, pos_emb, each block's ln1, attention with the cache, ln2, ff; ln_f, lm_head)")
    if not rec.ln:
        raise CheckFailed(
            "generate_cached never called a block's ln1 layer",
            reread=SEC_CACHE,
            hint="run each block as section 6 shows: its ln1 layer, attention with the cache, the residual; "
            "then ln2, ff and the residual",
        )
    if rec.grad:
        raise CheckFailed("generate_cached runs the blocks with gradients enabled", reread=SEC_CACHE,
                          hint="decorate generate_cached with @torch.no_grad() (the exercise asks for it): sampling "
                               "needs no gradients, and recording them for every step wastes memory")
    L = len(model.blocks)
    per_call = [rec.ln[i:i + L] for i in range(0, len(rec.ln), L)]
    widths = [c[0] for c in per_call]
    if widths[0] != 7 or any(w != 1 for w in widths[1:]) or len(widths) not in (6, 7):
        raise CheckFailed("the blocks do not see the prompt once and then one new token at a time", reread=SEC_CACHE,
                          details=[f"prompt (2, 7), 6 new tokens: positions fed to the blocks per pass {widths} "
                                   "(expected [7, 1, 1, 1, 1, 1])"],
                          hint="not cached: after the prompt, feed only the newest token (B, 1) and take the older "
                               "positions' keys and values from the cache")
    passed("generate_cached: the prompt is read once, then each new token alone")


guard(globals())  # every check records warnings instead of printing them (core.guard)
