"""Visible checks for exercise 05_multi_head_attention.

The student's functions are compared with ``nn.MultiheadAttention`` (weights copied) on small
inputs. When a result is wrong, the check recomputes what the common mistakes would produce
with the same weights (a direct reshape into heads, a merge without transpose, sqrt(D) scaling,
a wrong q/k/v order, no W_o, ...) and names the one the student's output matches.

Shapes: B batch, T query positions, S key/value positions, D model width, H heads, Dh = D // H.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .core import (
    guard,
    CheckFailed,
    expect_int,
    call,
    close,
    expect_close,
    expect_shape,
    expect_tensor,
    forbid,
    max_abs_diff,
    passed,
)

LECTURE = "lectures/05_multi_head_attention.ipynb"
SEC_RESHAPE = f"lecture 05, section 4 'Reshaping into heads' ({LECTURE}#reshape)"
SEC_EFFICIENCY = f"lecture 05, section 3 'Three efficiency steps' ({LECTURE}#efficiency)"
SEC_SCALING = f"lecture 05, section 5 'Scaling by sqrt(D/H)' ({LECTURE}#scaling)"
SEC_WO = f"lecture 05, section 6 'The output projection W_o' ({LECTURE}#w-o)"
SEC_MASKS = f"lecture 05, section 7 'Masks, batches and cross-attention' ({LECTURE}#masks)"
SEC_COUNT = f"lecture 05, section 8 'Counting weights' ({LECTURE}#counting)"
SEC_TORCH = f"lecture 05, section 9 'PyTorch's nn.MultiheadAttention' ({LECTURE}#pytorch)"

NO_BUILTIN = ("write the attention yourself: F.scaled_dot_product_attention and nn.MultiheadAttention "
              "are off limits inside MultiHeadAttention.forward")


def builtin_attention() -> list[tuple[object, str]]:
    """What the student's forward may not call (patched to raise while it runs)."""
    return [(F, "scaled_dot_product_attention"), (F, "multi_head_attention_forward"),
            (nn.MultiheadAttention, "forward")]


# ----------------------------------------------------------------------------------------
# split_heads / merge_heads
# ----------------------------------------------------------------------------------------
DIRECT_VIEW = ("you reshaped (B, T, D) straight to (B, H, T, D/H) (a direct view without transpose): "
               "reshape reads whole tokens into a head, so head 0 gets the first tokens and the sequence is "
               "scrambled. Split only the last axis, into (H, D/H), then move the head axis in front of the tokens")
INTERLEAVED = ("you split D as (D/H, H) instead of (H, D/H): head h gets every H-th feature instead of the "
               "contiguous block h*Dh:(h+1)*Dh (the layout of W_qkv's rows). The head axis comes first in the split")
NO_TRANSPOSE = ("you returned (B, T, H, D/H): the view is right but the transpose(1, 2) that moves the heads "
                "in front of the tokens is missing")
MERGE_DIRECT = ("you merged with a direct reshape of (B, H, T, Dh) to (B, T, H*Dh), without transposing first: "
                "that glues rows of different tokens together. Undo the split in reverse order: heads back "
                "behind the tokens, (B, T, H, Dh), then join the last two axes")
MERGE_ORDER = ("heads merged in the wrong order: your features are interleaved (feature j of head h landed at "
               "j*H + h); transpose(1, 2) gives (B, T, H, Dh), reshape that without any other permute")


def labelled_tokens(B: int, T: int, D: int) -> torch.Tensor:
    """x[b, t, d] = 1000*b + 100*t + d: every number says where it came from."""
    b = torch.arange(B)[:, None, None]
    t = torch.arange(T)[None, :, None]
    d = torch.arange(D)[None, None, :]
    return (1000 * b + 100 * t + d).float()


def _describe(row: torch.Tensor) -> str:
    """A row of labelled numbers as 'token t, features a-b' (or a list when it mixes tokens)."""
    vals = [int(v) for v in row.tolist()]
    toks = sorted({(v % 1000) // 100 for v in vals})
    feats = [v % 100 for v in vals]
    if len(toks) == 1 and feats == list(range(feats[0], feats[0] + len(feats))):
        return f"token {toks[0]}, features {feats[0]}-{feats[-1]}"
    return "numbers " + ", ".join(str(v % 1000) for v in vals) + " (100*token + feature)"


def split_wrong_variants(x: torch.Tensor, H: int) -> dict[str, torch.Tensor]:
    B, T, D = x.shape
    return {
        DIRECT_VIEW: x.reshape(B, H, T, D // H),
        INTERLEAVED: x.reshape(B, T, D // H, H).permute(0, 3, 1, 2),
        NO_TRANSPOSE: x.reshape(B, T, H, D // H),
    }


def merge_wrong_variants(y: torch.Tensor) -> dict[str, torch.Tensor]:
    B, H, T, Dh = y.shape
    return {
        MERGE_DIRECT: y.reshape(B, T, H * Dh),
        MERGE_ORDER: y.permute(0, 2, 3, 1).reshape(B, T, H * Dh),
    }


VIEW_HINT = ("view() needs a tensor whose numbers sit in reading order in memory, and this one's do not (what "
             "transpose() returns, or a chunk that .split()/.chunk() cut from the last axis, is such a tensor): "
             "use .reshape(...) (or .contiguous().view(...))")


def call_view_aware(fn, *args, name: str, reread: str, **kwargs):
    """core.call, with a precise hint for the classic 'view after transpose' error."""
    try:
        return call(fn, *args, name=name, reread=reread, **kwargs)
    except CheckFailed as e:
        if "view size is not compatible" in e.title and not e.hint:
            raise CheckFailed(e.title, hint=VIEW_HINT, reread=reread, student_tb=e.student_tb) from None
        raise


def _name(out, candidates) -> str | None:
    for name, cand in candidates.items():
        if tuple(cand.shape) == tuple(out.shape) and close(out, cand, atol=1e-6, rtol=0):
            return name
    return None


def _split(split_heads, x, H):
    out = call_view_aware(split_heads, x, H, name="split_heads", reread=SEC_RESHAPE)
    return expect_tensor(out, "split_heads", reread=SEC_RESHAPE)


def split_heads_shape(split_heads) -> None:
    """(B, T, D) -> (B, H, T, D // H) for a few sizes."""
    for B, T, D, H in ((2, 5, 12, 3), (1, 7, 8, 2), (3, 1, 6, 6), (2, 3, 4, 1)):
        x = torch.randn(B, T, D)
        out = _split(split_heads, x, H)
        hint = NO_TRANSPOSE if tuple(out.shape) == (B, T, H, D // H) else (
            "the result is (B, H, T, D // H): batch, then heads, then tokens, then each head's features")
        expect_shape(out, (B, H, T, D // H), f"split_heads(x, {H})", hint=hint, reread=SEC_RESHAPE,
                     inputs=f"x of shape {(B, T, D)}, n_heads={H}")
    passed("split_heads: (B, T, D) -> (B, H, T, D // H)")


def split_heads_values(split_heads) -> None:
    """Head h, position t holds features h*Dh:(h+1)*Dh of token t (no scrambling)."""
    B, T, D, H = 2, 4, 12, 3
    x = labelled_tokens(B, T, D)
    out = _split(split_heads, x, H)
    expect_shape(out, (B, H, T, D // H), "split_heads(x, 3)", reread=SEC_RESHAPE,
                 hint=NO_TRANSPOSE if tuple(out.shape) == (B, T, H, D // H) else None)
    want = x.view(B, T, H, D // H).transpose(1, 2)
    if not torch.equal(out, want):
        bad = (out != want).any(-1).nonzero()[0].tolist()  # first wrong (b, h, t)
        b, h, t = bad
        raise CheckFailed(
            "split_heads puts the wrong numbers in the heads", reread=SEC_RESHAPE,
            hint=_name(out, split_wrong_variants(x, H)) or
            "each head must see every token: position t of head h = features h*Dh:(h+1)*Dh of token t",
            details=["input x[b, t, d] = 1000*b + 100*t + d, shape (2, 4, 12), n_heads=3",
                     f"your head {h}, position {t} (batch {b}) holds {_describe(out[b, h, t])}",
                     f"it should hold {_describe(want[b, h, t])}"])
    passed("split_heads: every head sees every token, each with its own block of features")


def merge_heads(merge_heads, split_heads=None) -> None:
    """(B, H, T, Dh) -> (B, T, H*Dh), the inverse of split_heads."""
    B, T, H, Dh = 2, 5, 3, 4
    x = labelled_tokens(B, T, H * Dh)
    heads = x.view(B, T, H, Dh).transpose(1, 2)  # the correct split, built here
    out = expect_tensor(call_view_aware(merge_heads, heads, name="merge_heads", reread=SEC_RESHAPE), "merge_heads",
                        reread=SEC_RESHAPE)
    expect_shape(out, (B, T, H * Dh), "merge_heads(y)", reread=SEC_RESHAPE, inputs="y of shape (2, 3, 5, 4)",
                 hint="(B, H, T, Dh) -> (B, T, H * Dh): transpose(1, 2), then reshape")
    if not torch.equal(out, x):
        t = int((out != x).any(-1).any(0).nonzero()[0])
        raise CheckFailed("merge_heads does not undo the split", reread=SEC_RESHAPE,
                          hint=_name(out, merge_wrong_variants(heads)) or
                          "token t of the result must be the concatenation of head 0..H-1 at position t",
                          details=["y = split of x[b, t, d] = 1000*b + 100*t + d, (B, H, T, Dh) = (2, 3, 5, 4)",
                                   f"your token {t} (batch 0) = {_describe(out[0, t])}",
                                   f"expected {_describe(x[0, t])}"])
    out2 = call_view_aware(merge_heads, heads.contiguous(), name="merge_heads", reread=SEC_RESHAPE)
    if not torch.equal(out2, x):
        raise CheckFailed("merge_heads gives a different result for a contiguous copy of the same tensor",
                          hint="work from the shape only: a contiguous copy holds the same numbers",
                          reread=SEC_RESHAPE)
    if split_heads is not None:
        z = torch.randn(3, 6, 8)
        back = call(lambda t: merge_heads(split_heads(t, 4)), z, name="merge_heads(split_heads(x))")
        expect_close(back, z, "merge_heads(split_heads(x, 4))", atol=0, rtol=0, reread=SEC_RESHAPE,
                     hint="merge_heads must be the exact inverse of split_heads")
    passed("merge_heads: (B, H, T, Dh) -> (B, T, D), the exact inverse of split_heads")


# ----------------------------------------------------------------------------------------
# MultiHeadAttention
# ----------------------------------------------------------------------------------------
def random_torch_mha(D: int, H: int, bias: bool = True, seed: int = 0) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention(batch_first=True) with random weights AND random biases
    (PyTorch initialises the biases to 0, which would hide a dropped or misplaced bias)."""
    g = torch.Generator().manual_seed(seed)
    ref = nn.MultiheadAttention(D, H, bias=bias, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.randn(3 * D, D, generator=g) / math.sqrt(D))
        ref.out_proj.weight.copy_(torch.randn(D, D, generator=g) / math.sqrt(D))
        if bias:
            ref.in_proj_bias.copy_(torch.randn(3 * D, generator=g) * 0.3)
            ref.out_proj.bias.copy_(torch.randn(D, generator=g) * 0.3)
    return ref.eval()


def torch_reference(ref: nn.MultiheadAttention, x, kv=None, mask=None):
    """(out (B, T, D), weights (B, H, T, S)) from PyTorch, with OUR mask convention (True = may attend)."""
    kv = x if kv is None else kv
    B, T, S, H = x.size(0), x.size(1), kv.size(1), ref.num_heads
    attn_mask = None
    if mask is not None:
        attn_mask = ~torch.broadcast_to(mask, (B, H, T, S)).reshape(B * H, T, S)  # PyTorch: True = blocked
    with torch.no_grad():
        out, w = ref(x, kv, kv, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)
    return out, w


def variant_forward(x, kv, mask, params, H, *, split="right", merge="right", scale="dh", order="qkv",
                    w_o=True, softmax_dim=-1, mask_axis="keys", keys_from="kv", bias=True):
    """Multi-head attention with one deliberate deviation (the default arguments are correct)."""
    Wqkv, bqkv, Wo, bo = params
    B, T, D = x.shape
    src = x if (kv is None or keys_from == "x") else kv
    chunks_w = Wqkv.split(D)
    chunks_b = bqkv.split(D) if (bqkv is not None and bias) else (None, None, None)
    Wq, Wk, Wv = (chunks_w[order.index(r)] for r in "qkv")
    bq, bk, bv = (chunks_b[order.index(r)] for r in "qkv")
    q, k, v = F.linear(x, Wq, bq), F.linear(src, Wk, bk), F.linear(src, Wv, bv)
    Dh = D // H

    def sp(t):
        n = t.size(1)
        if split == "direct":
            return t.reshape(B, H, n, Dh)
        if split == "interleaved":
            return t.reshape(B, n, Dh, H).permute(0, 3, 1, 2)
        return t.reshape(B, n, H, Dh).transpose(1, 2)

    q, k, v = sp(q), sp(k), sp(v)
    scores = q @ k.transpose(-2, -1)
    scores = scores / math.sqrt({"dh": Dh, "d": D, "none": 1}[scale])
    if mask is not None:
        m = mask if mask_axis == "keys" else mask.transpose(-2, -1)
        scores = scores.masked_fill(~m, float("-inf"))
    w = scores.softmax(softmax_dim)
    y = w @ v  # (B, H, T, Dh)
    if merge == "direct":
        y = y.reshape(B, T, D)
    elif merge == "interleaved":
        y = y.permute(0, 2, 3, 1).reshape(B, T, D)
    else:
        y = y.transpose(1, 2).reshape(B, T, D)
    out = F.linear(y, Wo, bo if bias else None) if w_o else y
    return out, w


MHA_MISTAKES = {
    "split_direct": (dict(split="direct"), DIRECT_VIEW),
    "split_interleaved": (dict(split="interleaved"), INTERLEAVED),
    "merge_direct": (dict(merge="direct"), MERGE_DIRECT),
    "merge_interleaved": (dict(merge="interleaved"), MERGE_ORDER),
    "scale_d": (dict(scale="d"), "you divided the scores by sqrt(D); each head's dot products have D/H terms, "
                                  "so divide by sqrt(D/H) (= sqrt of the last axis of q after the split)"),
    "scale_none": (dict(scale="none"), "the scores are not scaled: divide by sqrt(D/H)"),
    "order_kqv": (dict(order="kqv"), "q/k/v chunk order wrong: W_qkv's rows are [queries; keys; values] "
                                     "(like in_proj_weight): split its output into D-wide chunks in that order"),
    "order_qvk": (dict(order="qvk"), "q/k/v chunk order wrong: keys and values swapped; the rows are "
                                     "[queries; keys; values]"),
    "order_vkq": (dict(order="vkq"), "q/k/v chunk order wrong: the first D rows of W_qkv are the queries"),
    "no_w_o": (dict(w_o=False), "missing W_o: apply the output projection self.W_o to the merged heads"),
    "softmax_queries": (dict(softmax_dim=-2), "softmax over the query axis (dim=-2): each query's weights over "
                                              "the keys must sum to 1, softmax(dim=-1)"),
    "softmax_heads": (dict(softmax_dim=1), "softmax over the head axis (dim=1): normalise over the keys, "
                                           "softmax(dim=-1)"),
    "mask_queries": (dict(mask_axis="queries"), "mask applied to the wrong axis (the queries): the mask's last "
                                                "axis is the keys, use it as it is"),
    "keys_from_x": (dict(keys_from="x"), "cross-attention taking keys and values from x: when kv is given, "
                                         "queries come from x but keys and values come from kv"),
    "bias_dropped": (dict(bias=False), "bias dropped: with bias=True, W_qkv and W_o have biases; "
                                       "use self.W_qkv(x) (or F.linear with .bias), not only .weight"),
}


def diagnose_mha(out, weights, x, kv, mask, params, H) -> str | None:
    """Name the first catalogued mistake whose output (or weights) the student's result matches."""
    for key, (kw, hint) in MHA_MISTAKES.items():
        try:
            o2, w2 = variant_forward(x, kv, mask, params, H, **kw)
        except RuntimeError:
            continue
        if tuple(out.shape) == tuple(o2.shape) and close(out, o2, atol=1e-5):
            return hint
        if weights is not None and key not in ("merge_direct", "merge_interleaved", "no_w_o", "bias_dropped") \
                and tuple(weights.shape) == tuple(w2.shape) and close(weights, w2, atol=1e-5):
            return hint
    # two reshape mistakes at once: name the split one (it comes first)
    for kw, hint in ((dict(split="direct", merge="direct"), DIRECT_VIEW + "; " + MERGE_DIRECT),):
        o2, _ = variant_forward(x, kv, mask, params, H, **kw)
        if close(out, o2, atol=1e-5):
            return hint
    return None


def _params(ref: nn.MultiheadAttention):
    return (ref.in_proj_weight.detach(), None if ref.in_proj_bias is None else ref.in_proj_bias.detach(),
            ref.out_proj.weight.detach(), None if ref.out_proj.bias is None else ref.out_proj.bias.detach())


def _build(MultiHeadAttention, D, H, bias=True):
    m = call(MultiHeadAttention, D, H, bias=bias, name=f"MultiHeadAttention({D}, {H}, bias={bias})",
             reread=SEC_EFFICIENCY)
    if not isinstance(m, nn.Module):
        raise CheckFailed("MultiHeadAttention(...) is not an nn.Module", reread=SEC_EFFICIENCY,
                          hint="class MultiHeadAttention(nn.Module): ... and call super().__init__() first")
    for attr in ("W_qkv", "W_o"):
        if not isinstance(getattr(m, attr, None), nn.Linear):
            raise CheckFailed(f"MultiHeadAttention has no nn.Linear attribute {attr}", reread=SEC_EFFICIENCY,
                              hint="self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=bias); "
                                   "self.W_o = nn.Linear(d_model, d_model, bias=bias)")
    return m


def load_from_torch(m: nn.Module, ref: nn.MultiheadAttention) -> None:
    """Copy PyTorch's weights into the student's W_qkv / W_o (the check's own copy, not from_torch)."""
    with torch.no_grad():
        m.W_qkv.weight.copy_(ref.in_proj_weight)
        m.W_o.weight.copy_(ref.out_proj.weight)
        if ref.in_proj_bias is not None:
            if m.W_qkv.bias is None or m.W_o.bias is None:
                raise CheckFailed("MultiHeadAttention(..., bias=True) has no bias in W_qkv or W_o",
                                  hint=MHA_MISTAKES["bias_dropped"][1], reread=SEC_EFFICIENCY)
            m.W_qkv.bias.copy_(ref.in_proj_bias)
            m.W_o.bias.copy_(ref.out_proj.bias)


def run_forward(m, x, kv=None, mask=None, what="MultiHeadAttention"):
    """Call the student's module with the built-in attention blocked; returns the output tensor."""
    kwargs = {}
    if kv is not None:
        kwargs["kv"] = kv
    if mask is not None:
        kwargs["mask"] = mask
    try:
        with forbid(builtin_attention(), NO_BUILTIN):
            out = call_view_aware(m, x, name=what, reread=SEC_EFFICIENCY, **kwargs)
    except CheckFailed as e:
        if "NoneType" in e.title and getattr(getattr(m, "W_qkv", None), "bias", 0) is None:
            raise CheckFailed(e.title, reread=SEC_EFFICIENCY, student_tb=e.student_tb, hint=NO_BIAS) from None
        if mask is not None and ("must match the size" in e.title or "expanded size" in e.title
                                 or "too many values to unpack" in e.title):   # an extra axis reached merge_heads
            raise CheckFailed(e.title, reread=SEC_MASKS, student_tb=e.student_tb,
                              hint=f"the mask (shape {tuple(mask.shape)}) must broadcast to the scores (B, H, T, S) "
                                   "as it is: do not add or move axes (a (T, S) mask lines up with the last two "
                                   "axes, a (B, 1, 1, S) mask with all four)") from None
        raise
    return expect_tensor(out, what, reread=SEC_EFFICIENCY)


def _compare(m, ref, x, kv=None, mask=None, what="", reread=SEC_EFFICIENCY):
    out = run_forward(m, x, kv, mask, what=f"MultiHeadAttention forward ({what})")
    want, want_w = torch_reference(ref, x, kv, mask)
    expect_shape(out, want.shape, f"the output ({what})", reread=reread,
                 hint="the output has the shape of the queries' input: (B, T, D)",
                 inputs=f"x {tuple(x.shape)}" + (f", kv {tuple(kv.shape)}" if kv is not None else ""))
    if not close(out, want, atol=1e-5, rtol=1e-4):
        w = last_weights(m)
        hint = diagnose_mha(out.detach(), w, x, kv, mask, _params(ref), ref.num_heads)
        if hint and any(hint.startswith(r) for r in (DIRECT_VIEW, INTERLEAVED, MERGE_DIRECT, MERGE_ORDER)):
            reread = SEC_RESHAPE
        elif hint and "sqrt" in hint:
            reread = SEC_SCALING
        elif hint and "W_o" in hint:
            reread = SEC_WO
        raise CheckFailed(
            f"MultiHeadAttention ({what}) differs from nn.MultiheadAttention with the same weights",
            reread=reread,
            hint=hint
            or "compare the shape of every step with the lecture: "
            "W_qkv -> split(D) -> split_heads -> scores / sqrt(D/H) -> softmax(-1) -> "
            "@ v -> merge_heads -> W_o",
            details=[f"max |yours - torch| = {max_abs_diff(out, want):.3g} (tolerance 1e-5 + 1e-4*|torch|)"],
        )
    return out, want_w


def last_weights(m) -> torch.Tensor | None:
    """The module's last_weights, detached (it may keep its graph: that is allowed), or None."""
    w = getattr(m, "last_weights", None)
    return w.detach() if isinstance(w, torch.Tensor) else None


DEFAULT_BIAS = "bias=True is the default: without a bias argument, W_qkv and W_o have biases (bias: bool = True)"


def mha_init(MultiHeadAttention) -> None:
    """Attributes W_qkv (3D x D) and W_o (D x D), with or without biases (with them by default)."""
    for bias in (True, False):
        m = _build(MultiHeadAttention, 12, 3, bias=bias)
        if tuple(m.W_qkv.weight.shape) != (36, 12):
            raise CheckFailed(f"W_qkv.weight has shape {tuple(m.W_qkv.weight.shape)}, expected (3*D, D) = (36, 12)",
                              hint="nn.Linear(d_model, 3 * d_model): PyTorch stores Linear weights as (out, in)",
                              reread=SEC_EFFICIENCY)
        if tuple(m.W_o.weight.shape) != (12, 12):
            raise CheckFailed(f"W_o.weight has shape {tuple(m.W_o.weight.shape)}, expected (D, D) = (12, 12)",
                              reread=SEC_WO)
        has = (m.W_qkv.bias is not None, m.W_o.bias is not None)
        if has != (bias, bias):
            raise CheckFailed(f"MultiHeadAttention(12, 3, bias={bias}): W_qkv / W_o have biases {has}",
                              hint=MHA_MISTAKES["bias_dropped"][1] if bias else "pass bias=bias to both nn.Linear",
                              reread=SEC_EFFICIENCY)
        n = sum(p.numel() for p in m.parameters())
        want = 4 * 144 + (48 if bias else 0)
        if n != want:
            raise CheckFailed(f"MultiHeadAttention(12, 3, bias={bias}) has {n} parameters, expected {want}",
                              hint="only W_qkv and W_o: 4 D^2 weights (+ 4 D biases); no per-head copies",
                              reread=SEC_COUNT)
    m = call(MultiHeadAttention, 12, 3, name="MultiHeadAttention(12, 3)", reread=SEC_EFFICIENCY)
    if (
        getattr(getattr(m, "W_qkv", None), "bias", None) is None
        or getattr(getattr(m, "W_o", None), "bias", None) is None
    ):
        raise CheckFailed("MultiHeadAttention(12, 3), built without a bias argument, has no biases",
                          hint=DEFAULT_BIAS, reread=SEC_EFFICIENCY)
    passed("MultiHeadAttention: W_qkv (3D x D) and W_o (D x D), biases as asked (and by default)")


def mha_self(MultiHeadAttention) -> None:
    """Self-attention equals nn.MultiheadAttention with the same weights (with and without biases)."""
    torch.manual_seed(0)
    for B, T, D, H, bias in ((2, 5, 12, 3, True), (1, 6, 16, 4, True), (2, 4, 8, 1, False)):
        ref = random_torch_mha(D, H, bias=bias, seed=D)
        m = _build(MultiHeadAttention, D, H, bias=bias)
        load_from_torch(m, ref)
        x = torch.randn(B, T, D)
        _compare(m, ref, x, what=f"self-attention, B={B}, T={T}, D={D}, H={H}, bias={bias}")
    passed("MultiHeadAttention: self-attention matches nn.MultiheadAttention to 1e-5 (with and without biases)")


def mha_weights(MultiHeadAttention) -> None:
    """self.last_weights is (B, H, T, S), sums to 1 over the keys and matches PyTorch's per-head weights."""
    B, T, D, H = 2, 5, 12, 3
    ref = random_torch_mha(D, H, seed=1)
    m = _build(MultiHeadAttention, D, H)
    load_from_torch(m, ref)
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(5))
    _, want_w = _compare(m, ref, x, what="self-attention")
    w = last_weights(m)
    if w is None:
        raise CheckFailed("self.last_weights is not set after a forward call", reread=SEC_EFFICIENCY,
                          hint="after each forward, keep the per-head attention weights (B, H, T, S) in "
                               "self.last_weights (detached: they are for plots and checks)")
    expect_shape(w, (B, H, T, T), "self.last_weights", reread=SEC_EFFICIENCY,
                 hint="keep the per-head weights (B, H, T, S), before merging heads or averaging them")
    sums = w.sum(-1)
    if not close(sums, torch.ones_like(sums)):
        raise CheckFailed("last_weights don't sum to 1 over the keys (last axis)", reread=SEC_EFFICIENCY,
                          hint="softmax over dim=-1: each query's weights over the keys sum to 1")
    expect_close(w, want_w, "self.last_weights", reread=SEC_EFFICIENCY,
                 hint="the weights of head h should equal nn.MultiheadAttention's "
                      "(average_attn_weights=False)[:, h]")
    S = 7   # cross-attention with padded keys: (B, H, T, S), zero on the padding
    kv = torch.randn(B, S, D, generator=torch.Generator().manual_seed(9))
    pad = (torch.arange(S)[None, :] < torch.tensor([7, 4])[:, None])[:, None, None, :]
    _, want_w = _compare(m, ref, x, kv=kv, mask=pad, what="cross-attention with a (B, 1, 1, S) padding mask",
                         reread=SEC_MASKS)
    w = last_weights(m)
    expect_shape(w, (B, H, T, S), "self.last_weights after cross-attention", reread=SEC_MASKS,
                 hint="one row per query (T), one column per key (S)")
    expect_close(w, want_w, "self.last_weights after cross-attention with a padding mask", reread=SEC_MASKS)
    passed("MultiHeadAttention: last_weights (B, H, T, S) match PyTorch's per-head weights (self and cross)")


def mha_mask(MultiHeadAttention) -> None:
    """Masks broadcast to (B, H, T, S): a causal (T, T) mask, a (B, 1, 1, S) padding mask, one per head."""
    B, T, D, H = 2, 5, 16, 4
    ref = random_torch_mha(D, H, seed=2)
    m = _build(MultiHeadAttention, D, H)
    load_from_torch(m, ref)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(B, T, D, generator=g)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    _compare(m, ref, x, mask=causal, what="causal mask of shape (T, T)", reread=SEC_MASKS)
    w = last_weights(m)
    if w is not None and w.shape == (B, H, T, T) and float(w[..., ~causal].abs().max()) > 0:
        raise CheckFailed("with a causal mask, some head attends to the future", reread=SEC_MASKS,
                          hint="fill the scores with -inf where mask is False, before the softmax")
    lengths = torch.tensor([5, 3])
    pad = (torch.arange(T)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
    _compare(m, ref, x, mask=pad, what="padding mask of shape (B, 1, 1, S)", reread=SEC_MASKS)
    per_head = torch.rand(B, H, T, T, generator=g) > 0.5
    per_head[..., 0] = True
    _compare(m, ref, x, mask=per_head, what="a different mask per head, shape (B, H, T, S)", reread=SEC_MASKS)
    passed("MultiHeadAttention: (T, T), (B, 1, 1, S) and (B, H, T, S) masks broadcast over the heads")


def mha_cross(MultiHeadAttention) -> None:
    """Cross-attention: queries from x (T positions), keys and values from kv (S != T positions)."""
    B, T, S, D, H = 2, 3, 6, 12, 3
    ref = random_torch_mha(D, H, seed=3)
    m = _build(MultiHeadAttention, D, H)
    load_from_torch(m, ref)
    g = torch.Generator().manual_seed(7)
    x, kv = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
    _compare(m, ref, x, kv=kv, what="cross-attention, T=3 queries, S=6 keys", reread=SEC_MASKS)
    w = last_weights(m)
    if w is not None and tuple(w.shape) != (B, H, T, S):
        raise CheckFailed(f"cross-attention weights have shape {tuple(w.shape)}, expected (B, H, T, S) = "
                          f"{(B, H, T, S)}", reread=SEC_MASKS, hint="one row per query (T), one column per key (S)")
    pad = (torch.arange(S)[None, :] < torch.tensor([6, 2])[:, None])[:, None, None, :]
    _compare(m, ref, x, kv=kv, mask=pad, what="cross-attention with a (B, 1, 1, S) padding mask", reread=SEC_MASKS)
    per_head = torch.rand(B, H, T, S, generator=g) > 0.5
    per_head[..., 0] = True
    _compare(m, ref, x, kv=kv, mask=per_head, what="cross-attention with a (B, H, T, S) mask", reread=SEC_MASKS)
    same = torch.randn(B, T, D, generator=g)             # S = T: as long as x, but another tensor
    _compare(m, ref, x, kv=same, what="cross-attention with S = T (kv is another tensor of x's shape)",
             reread=SEC_MASKS)
    ref = random_torch_mha(D, H, bias=False, seed=4)    # bias=False: the cross path must work without biases
    m = _build(MultiHeadAttention, D, H, bias=False)
    load_from_torch(m, ref)
    _compare(m, ref, x, kv=kv, what="cross-attention with bias=False, T=3 queries, S=6 keys", reread=SEC_MASKS)
    _compare(m, ref, x, kv=kv, mask=pad, what="cross-attention with bias=False and a (B, 1, 1, S) padding mask",
             reread=SEC_MASKS)
    passed("MultiHeadAttention: cross-attention with T != S and S = T (with (B, 1, 1, S) and (B, H, T, S) masks), "
           "with and without biases")


def mha_param_count(mha_param_count) -> None:
    """4 D^2 weights + 4 D biases, checked against nn.MultiheadAttention's parameters."""
    for D in (8, 64, 768):
        for bias in (True, False):
            n = expect_int(call(mha_param_count, D, bias=bias, name="mha_param_count", reread=SEC_COUNT),
                           f"mha_param_count({D}, bias={bias})", reread=SEC_COUNT)
            want = sum(p.numel() for p in nn.MultiheadAttention(D, 1 if D < 64 else 8, bias=bias).parameters())
            if n != want:
                hint = None
                if n == 4 * D * D and bias:
                    hint = "bias dropped from the count: W_qkv has 3D biases and W_o has D"
                elif n == 4 * D * D + 4 * D and not bias:
                    hint = "with bias=False there are no biases: 4 D^2"
                elif n == 3 * D * D + (3 * D if bias else 0):
                    hint = "that is W_qkv alone: W_o is D x D and counts too"
                raise CheckFailed(f"mha_param_count({D}, bias={bias}) = {n!r}, expected {want}", reread=SEC_COUNT,
                                  hint=hint or "W_qkv is 3D x D, W_o is D x D: 4 D^2 weights, plus 3D + D biases")
    n = expect_int(call(mha_param_count, 64, name="mha_param_count", reread=SEC_COUNT), "mha_param_count(64)",
                   reread=SEC_COUNT)
    if n != 4 * 64 * 64 + 4 * 64:
        raise CheckFailed(f"mha_param_count(64) = {n!r}, expected {4 * 64 * 64 + 4 * 64} (biases included)",
                          reread=SEC_COUNT, hint=DEFAULT_BIAS)
    passed("mha_param_count: 4 D^2 (+ 4 D biases; bias=True by default)")


NO_BIAS = ("with bias=False, W_qkv.bias and W_o.bias are None: every step of forward must work without "
           "biases too (an nn.Linear built with bias=False applies none)")


def from_torch(from_torch, MultiHeadAttention=None) -> None:
    """from_torch(nn.MultiheadAttention) gives the same outputs (random biases, and bias=False; self and cross)."""
    D, H = 16, 4
    for bias in (True, False):
        ref = random_torch_mha(D, H, bias=bias, seed=4)
        what = f"from_torch(nn.MultiheadAttention({D}, {H}, bias={bias}))"
        m = call(from_torch, ref, name="from_torch", reread=SEC_TORCH)
        if not isinstance(m, nn.Module):
            raise CheckFailed("from_torch must return your MultiHeadAttention module", reread=SEC_TORCH)
        g = torch.Generator().manual_seed(8)
        x, kv = torch.randn(2, 5, D, generator=g), torch.randn(2, 7, D, generator=g)
        out = run_forward(m, x, what=f"{what}(x)")
        want, _ = torch_reference(ref, x)
        lin_q, lin_o = getattr(m, "W_qkv", None), getattr(m, "W_o", None)
        if not close(out, want, atol=1e-5, rtol=1e-4):
            hint = ("copy in_proj_weight -> W_qkv.weight, in_proj_bias -> W_qkv.bias, out_proj -> W_o "
                    "(with torch.no_grad())")
            if isinstance(lin_q, nn.Linear) and isinstance(lin_o, nn.Linear):
                same_w = (lin_q.weight.shape == ref.in_proj_weight.shape and close(lin_q.weight, ref.in_proj_weight)
                          and lin_o.weight.shape == ref.out_proj.weight.shape
                          and close(lin_o.weight, ref.out_proj.weight))
                if bias:
                    same_b = (lin_q.bias is not None and lin_o.bias is not None
                              and close(lin_q.bias, ref.in_proj_bias) and close(lin_o.bias, ref.out_proj.bias))
                else:
                    same_b = lin_q.bias is None and lin_o.bias is None
                if same_w and not same_b and not bias:
                    hint = ("this nn.MultiheadAttention has no biases (bias=False, in_proj_bias is None), but your "
                            "module has some: build it with the same bias setting")
                elif same_w and not same_b:
                    hint = "the biases were not copied: in_proj_bias -> W_qkv.bias and out_proj.bias -> W_o.bias"
                elif not same_w and lin_q.weight.shape == ref.in_proj_weight.shape:
                    hint = (
                        "W_qkv.weight / W_o.weight differ from in_proj_weight / out_proj.weight: copy them as they are"
                    )
                elif same_w and same_b:
                    hint = ("the weights were copied correctly, so the difference is in your forward: "
                            "make the MultiHeadAttention checks above pass first")
            raise CheckFailed(f"{what} differs from the PyTorch module", reread=SEC_TORCH, hint=hint,
                              details=[f"max |yours - torch| = {max_abs_diff(out, want):.3g}"])
        out = run_forward(m, x, kv=kv, what=f"{what}(x, kv=kv)")
        expect_close(out, torch_reference(ref, x, kv)[0], f"{what} in cross-attention", reread=SEC_TORCH)
        if MultiHeadAttention is not None and not isinstance(m, MultiHeadAttention):
            raise CheckFailed("from_torch returned something that is not your MultiHeadAttention", reread=SEC_TORCH)
    passed("from_torch: same outputs as nn.MultiheadAttention to 1e-5 (with and without biases, self- and "
           "cross-attention)")


guard(globals())  # every check records warnings instead of printing them (core.guard)
