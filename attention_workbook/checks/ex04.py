"""Visible checks for exercise 04_queries_keys_values (the foundation's four functions).

Each function checks one test cell's worth of behaviour on small, readable inputs. When the
result is wrong it recomputes what the common mistakes would have produced and names the one
the student's output matches.
"""

from __future__ import annotations

import math

import torch

from .core import (guard, CheckFailed, call, close, expect_close, expect_shape, expect_tensor, first_match,
                   forbid, passed, softmax_builtins)

LECTURE = "lectures/04_queries_keys_values.ipynb"
SEC_SOFTMAX = f"lecture 04, section 'A numerically stable softmax' ({LECTURE}#softmax)"
SEC_SCALING = f"lecture 04, section 'Why divide by sqrt(d)' ({LECTURE}#scaling)"
SEC_MATRIX = f"lecture 04, section 'The matrix form' ({LECTURE}#matrix-form)"
SEC_CAUSAL = f"lecture 04, section 'Causal masks' ({LECTURE}#causal-mask)"
SEC_PADDING = f"lecture 04, section 'Padding masks' ({LECTURE}#padding-mask)"

NO_BUILTIN = "write softmax from exp, max and sum yourself: torch.softmax / F.softmax are off limits here"


# ----------------------------------------------------------------------------------------
# softmax
# ----------------------------------------------------------------------------------------
def _student_softmax(softmax, x, dim=-1):
    """softmax(x, dim=dim); dim=None calls softmax(x) (the default, dim=-1, is part of the contract)."""
    with forbid(softmax_builtins(), NO_BUILTIN):
        out = call(softmax, x, **({} if dim is None else {"dim": dim}), name="softmax", reread=SEC_SOFTMAX)
    return expect_tensor(out, "softmax", reread=SEC_SOFTMAX)


def diagnose_softmax(out: torch.Tensor, x: torch.Tensor, dim: int) -> str | None:
    nd = x.dim()
    d = dim % nd
    cands = {}
    for other in range(nd):
        if other != d:
            cands[f"a softmax over dim={other - nd}"] = torch.softmax(x, dim=other)
    cands["exp(x) without dividing by the sum"] = torch.exp(x - x.amax(dim=d, keepdim=True))
    cands["x / x.sum(...) (no exponential)"] = x / x.sum(dim=d, keepdim=True)
    cands["a softmax over the whole tensor (no dim)"] = torch.softmax(x.reshape(-1), 0).reshape(x.shape)
    name = first_match(out, cands)
    if name is None:
        return None
    if "dim=" in name:
        return (f"your output equals {name}: reduce with `dim=dim` (and keepdim=True) in both the max and the sum, "
                f"so each slice along dim={dim} sums to 1")
    return f"your output equals {name}"


def softmax_values(softmax) -> None:
    """Rows sum to 1 along the last axis and match the definition exp(x_i) / sum_j exp(x_j)."""
    x = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [-1.0, 0.5, 4.0]])
    out = _student_softmax(softmax, x, dim=None)            # softmax(x): the default dim is -1
    expect_shape(out, x.shape, "softmax(x)", hint="softmax never changes the shape: keepdim=True on the reductions",
                 reread=SEC_SOFTMAX, inputs="x of shape (3, 3)")
    sums = out.sum(-1)
    if not close(sums, torch.ones(3)):
        hint = diagnose_softmax(out, x, -1) or "each row (the last axis) must sum to 1: is your softmax over dim=-1?"
        if hint and "dim=" in hint and close(_student_softmax(softmax, x, dim=-1), torch.softmax(x, -1)):
            hint = "softmax(x) without a dim must work over the last axis: give dim the default -1 (dim: int = -1)"
        raise CheckFailed("softmax(x) rows don't sum to 1 along the last axis", hint=hint, reread=SEC_SOFTMAX,
                          details=[f"row sums: {[round(v, 4) for v in sums.tolist()]}"])
    expect_close(out, torch.softmax(x, -1), "softmax(x)", hint=diagnose_softmax(out, x, -1),
                 reread=SEC_SOFTMAX, inputs="x = [[1, 2, 3], [0, 0, 0], [-1, 0.5, 4]]")
    for x in (torch.tensor([0.5, -1.0, 2.0, 0.0]), torch.arange(24.0).reshape(2, 3, 4) / 6):   # any shape: 1-D, 3-D
        out = _student_softmax(softmax, x)
        inputs = f"x of shape {tuple(x.shape)}"
        expect_shape(out, x.shape, "softmax(x)", reread=SEC_SOFTMAX, inputs=inputs,
                     hint="softmax works on a tensor of any shape and never changes it: keepdim=True on the reductions")
        expect_close(out, torch.softmax(x, -1), "softmax(x)", reread=SEC_SOFTMAX, inputs=inputs,
                     hint=diagnose_softmax(out, x, -1) or "x may have any number of axes: reduce along `dim` only")
    passed("softmax: rows sum to 1 and the values match exp(x) / sum(exp(x)), for 1-D, 2-D and 3-D x")


def softmax_dim(softmax) -> None:
    """The `dim` argument is honoured (dim=0 and dim=1 of a 3-D tensor)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    for dim in (0, 1, -1):
        out = _student_softmax(softmax, x, dim=dim)
        expect_shape(out, x.shape, f"softmax(x, dim={dim})", reread=SEC_SOFTMAX, inputs="x of shape (2, 3, 4)")
        if not close(out, torch.softmax(x, dim)):
            raise CheckFailed(f"softmax(x, dim={dim}) is wrong for x of shape (2, 3, 4)",
                              hint=diagnose_softmax(out, x, dim) or
                              f"the result must sum to 1 along dim={dim}: use the `dim` argument, not a fixed -1",
                              reread=SEC_SOFTMAX)
    passed("softmax: the dim argument is respected")


GLOBAL_MAX = ("you subtracted the maximum of the whole tensor (x.max()), not each slice's: a row far below it "
              "underflows, every exp is 0 and 0/0 = nan (lecture 04 shows this slip). "
              "Subtract x.amax(dim=dim, keepdim=True)")


def unstable_softmax_hint(out, x, dim) -> str:
    """Why a softmax gave inf/nan: the global-max slip, or no max subtracted at all."""
    e = torch.exp(x - x.max())
    if tuple(out.shape) == tuple(x.shape) and close(out, e / e.sum(dim, keepdim=True)):
        return GLOBAL_MAX
    return ("exp(10000) overflows: subtract the maximum of each row first "
            "(x - x.amax(dim, keepdim=True)); the result is mathematically the same")


def softmax_stability(softmax) -> None:
    """Large inputs (around 1e4) give no inf/nan; -inf entries get weight exactly 0."""
    x = torch.tensor([[1e4, 1e4 + 1.0, 1e4 - 2.0], [-1e4, -1e4 + 3.0, -1e4]])
    out = _student_softmax(softmax, x)
    if not bool(torch.isfinite(out).all()):
        raise CheckFailed("softmax of inputs around 1e4 gives inf or nan", hint=unstable_softmax_hint(out, x, -1),
                          reread=SEC_SOFTMAX, details=[f"your output: {out.tolist()}"])
    # float32 spacing near 1e4 is ~1e-3, so equivalent formulas (e.g. logsumexp) differ by that much
    expect_close(out, torch.softmax(x, -1), "softmax of large inputs", reread=SEC_SOFTMAX, atol=2e-3, rtol=2e-3,
                 hint="subtract the row maximum, not the global one or the mean")
    masked = torch.tensor([[0.5, float("-inf"), 1.5, float("-inf")]])
    out = _student_softmax(softmax, masked)
    if not bool(torch.isfinite(out).all()) or out[0, 1] != 0 or out[0, 3] != 0:
        raise CheckFailed("softmax of a row with -inf entries (masked scores) is wrong",
                          hint="exp(-inf) = 0, so masked positions must get weight exactly 0; "
                               "subtracting the row maximum keeps the rest finite",
                          reread=SEC_SOFTMAX, details=[f"your output: {out.tolist()}"])
    passed("softmax: stable for inputs around 1e4 and for -inf (masked) entries")


# ----------------------------------------------------------------------------------------
# masks
# ----------------------------------------------------------------------------------------
def causal_mask(causal_mask) -> None:
    for T in (4, 1):
        m = expect_tensor(call(causal_mask, T, name="causal_mask", reread=SEC_CAUSAL), "causal_mask", SEC_CAUSAL)
        expect_shape(m, (T, T), f"causal_mask({T})", reread=SEC_CAUSAL)
        if m.dtype != torch.bool:
            raise CheckFailed(
                f"causal_mask({T}) has dtype {m.dtype}, not torch.bool",
                hint="return a boolean mask (True = may attend): build it with dtype=torch.bool; a float or "
                "int tensor of 1s and 0s is not a mask",
                reread=SEC_CAUSAL,
            )
        want = torch.ones(T, T, dtype=torch.bool).tril()
        if not torch.equal(m, want):
            cands = {
                "the upper triangle: every token may see the FUTURE, not the past": torch.ones(
                    T, T, dtype=torch.bool
                ).triu(),
                "the inverse convention (True = blocked); here True means 'may attend', "
                "as in F.scaled_dot_product_attention": ~want,
                "a strictly lower triangle: the diagonal is masked, but a token may attend to itself": torch.ones(
                    T, T, dtype=torch.bool
                ).tril(-1),
                "the strictly upper triangle: this is where the mask should be False": torch.ones(
                    T, T, dtype=torch.bool
                ).triu(1),
            }
            name = next((k for k, v in cands.items() if torch.equal(m, v)), None)
            raise CheckFailed(f"causal_mask({T}) is wrong", reread=SEC_CAUSAL,
                              hint=f"your mask is {name}" if name else
                              "row i (a query) may attend to columns j <= i (keys at or before it)",
                              details=[f"expected:\n{want.int()}", f"yours:\n{m.int()}"])
    passed("causal_mask: bool, lower triangle including the diagonal")


def padding_mask(padding_mask) -> None:
    lengths = torch.tensor([3, 1, 4])
    T = 4
    m = expect_tensor(
        call(padding_mask, lengths, T, name="padding_mask", reread=SEC_PADDING), "padding_mask", SEC_PADDING
    )
    want = torch.arange(T)[None, None, :] < lengths[:, None, None]  # (B, 1, T)
    if tuple(m.shape) == (3, T, 1):
        raise CheckFailed("padding_mask has shape (B, T, 1): it hides queries instead of keys",
                          hint="keys and queries are swapped: the mask must block attending TO padded key positions, "
                               "so T goes on the last axis: (B, 1, T) broadcasts over the query axis",
                          reread=SEC_PADDING)
    expect_shape(m, (3, 1, T), "padding_mask(lengths=[3, 1, 4], T=4)", reread=SEC_PADDING,
                 hint="(B, 1, T): one row per sequence, broadcast over queries, True on real key positions")
    if m.dtype != torch.bool:
        raise CheckFailed(f"padding_mask has dtype {m.dtype}, not torch.bool", reread=SEC_PADDING,
                          hint="compare positions with lengths: torch.arange(T) < lengths[:, None] is already bool")
    if not torch.equal(m, want):
        cands = {
            "inverted: True marks the padding, but True means 'may attend'": ~want,
            "off by one: position == length is padding (positions count from 0)":
                torch.arange(T)[None, None, :] <= lengths[:, None, None],
        }
        name = next((k for k, v in cands.items() if torch.equal(m, v)), None)
        raise CheckFailed("padding_mask(lengths=[3, 1, 4], T=4) has the wrong values", reread=SEC_PADDING,
                          hint=f"your mask is {name}" if name else "True for positions < length, False after",
                          details=[f"expected:\n{want.int().squeeze(1)}", f"yours:\n{m.int().reshape(3, -1)}"])
    passed("padding_mask: (B, 1, T) bool, True on real tokens")


# ----------------------------------------------------------------------------------------
# scaled dot-product attention
# ----------------------------------------------------------------------------------------
def _reference(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, -1)
    return w @ v, w


def sdpa_wrong_variants(q, k, v, mask=None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """What the common mistakes produce: (out, weights) per named mistake."""
    d = q.shape[-1]
    raw = q @ k.transpose(-2, -1)
    neg = float("-inf")

    def finish(scores, dim=-1):
        w = torch.softmax(scores, dim)
        return w @ v, w

    out = {
        "no scaling: divide the scores by sqrt(d)": finish(raw if mask is None else raw.masked_fill(~mask, neg)),
        "scaling by d instead of sqrt(d)": finish((raw / d) if mask is None else (raw / d).masked_fill(~mask, neg)),
        "scaling by sqrt(dv), the values' width: divide by sqrt(d), the width of the queries and keys whose dot "
        "products the scores are": finish((raw / math.sqrt(v.shape[-1])) if mask is None else
                                          (raw / math.sqrt(v.shape[-1])).masked_fill(~mask, neg)),
        "softmax over the query axis (dim=-2) instead of the key axis (dim=-1)":
            finish((raw / math.sqrt(d)) if mask is None else (raw / math.sqrt(d)).masked_fill(~mask, neg), dim=-2),
    }
    if mask is not None:
        s = raw / math.sqrt(d)
        w = torch.softmax(s, -1).masked_fill(~mask, 0.0)
        out["the mask applied after the softmax: mask the scores with -inf BEFORE the softmax, "
            "so the remaining weights still sum to 1"] = (w @ v, w)
        w = w / w.sum(-1, keepdim=True)
        if not bool(torch.isfinite(w).all()):   # otherwise equal to the right answer: names nothing
            out[RENORMALISED] = (w @ v, w)
        w = torch.softmax(s.masked_fill(~mask, 0.0), -1)
        out["masked scores set to 0 instead of -inf: exp(0) = 1 still gives them weight"] = (w @ v, w)
        w = torch.softmax(s.masked_fill(mask, neg), -1)
        out["the mask inverted: True means 'may attend' (fill where ~mask)"] = (w @ v, w)
    return out


RENORMALISED = ("the weights masked and renormalised (zeroed where mask is False, then divided by their sum): a "
                "masked key with a huge score takes all the weight before it is removed, leaving 0/0 = nan "
                "(lecture 04 shows this case). Fill the scores with -inf BEFORE the softmax")


def extreme_masked_inputs(q, k, mask):
    """q, k changed so that some masked key has a huge score (about 150 after scaling) for rows
    in which every such key is masked: the lecture's extreme case. Correct masking (-inf before the
    softmax) never looks at masked scores; masking after the softmax and renormalising gives
    0/0 = nan there. No allowed key gets a huge score, so a plain softmax stays finite."""
    q, k = q.clone(), k.clone()
    full = torch.broadcast_to(mask, q.shape[:-1] + (k.shape[-2],))          # (..., Tq, Tk)
    huge_key = ~full.all(-2)                                                 # (..., Tk): masked somewhere
    hot = (~full | ~huge_key[..., None, :]).all(-1)                          # (..., Tq): all huge keys masked
    q[..., 0] = hot.to(q.dtype)
    k[..., 0] = huge_key.to(k.dtype) * 150 * math.sqrt(q.shape[-1])
    return q, k


def sdpa_extreme(sdpa, q, k, v, mask, what, reread):
    """The lecture's extreme case: a masked key with a huge score changes nothing."""
    q, k = extreme_masked_inputs(q, k, mask)
    out, w = _student_sdpa(sdpa, q, k, v, mask)
    ref_out, ref_w = _reference(q, k, v, mask)
    inputs = _shape_text(("q", q), ("k", k), ("v", v), ("mask", mask)) + ", a masked key with a score of 150"
    if not (bool(torch.isfinite(w).all()) and close(w, ref_w)):
        hint = _name_sdpa_mistake(out, w, q, k, v, mask) or ("a masked key's score must not matter: fill the "
                                                              "scores with -inf where mask is False, then softmax")
        raise CheckFailed(f"{what}: the weights change (or become nan) when a masked key has a huge score",
                          reread=reread, hint=hint, details=[f"inputs: {inputs}"])
    expect_close(out, ref_out, f"out ({what}, a masked key with a huge score)", reread=reread, inputs=inputs)


BATCH_AXES = ("it works only for 3-D inputs (exactly one batch axis), but `...` in (..., Tq, d) means any number "
              "of leading batch axes: none, one, or two (batch and heads). Work on the last two axes only "
              "(the text says how to transpose k); bmm, permute(0, 2, 1) and fixed axis numbers assume 3-D")
MASK_AS_IS = ("the mask must broadcast against the scores (..., Tq, Tk) as it is: a (T, T) causal mask, a (B, 1, T) "
              "or (B, 1, 1, T) padding mask; use it as given, without adding or moving axes")


def batch_forms(check, forms, reread=SEC_MATRIX) -> None:
    """Run ``check(batch)`` for each tuple of leading batch axes in ``forms`` (the 3-D form
    first). A form that fails after the 3-D one passed is named: the code assumes 3-D inputs."""
    ok_3d = False
    for batch in forms:
        try:
            check(batch)
        except CheckFailed as e:
            if len(batch) == 1 or not ok_3d or e.hint == MASK_AS_IS:
                raise
            raise CheckFailed(f"with {len(batch)} batch axes {batch}: {e.title}", hint=BATCH_AXES,
                              reread=reread, details=e.details, student_tb=e.student_tb) from None
        ok_3d = ok_3d or len(batch) == 1


NO_BUILTIN_ATTENTION = ("write the attention yourself: F.scaled_dot_product_attention and nn.MultiheadAttention are "
                        "off limits inside scaled_dot_product_attention and SelfAttentionHead (the head may call "
                        "your own scaled_dot_product_attention)")


def builtin_attention() -> list[tuple[object, str]]:
    """PyTorch's attention: what scaled_dot_product_attention and SelfAttentionHead may not call
    (patched to raise while they run; exercise 05's MultiHeadAttention has the same rule)."""
    import torch.nn as nn
    import torch.nn.functional as F

    return [(F, "scaled_dot_product_attention"), (F, "multi_head_attention_forward"),
            (nn.MultiheadAttention, "forward")]


def call_with_mask(fn, *args, mask=None, name: str, reread: str):
    """core.call(fn, *args, mask) with PyTorch's attention blocked; when it raises with the mask
    but runs without it, the error is the mask's: the hint says to use the mask as it is."""
    try:
        with forbid(builtin_attention(), NO_BUILTIN_ATTENTION):
            return call(fn, *args, mask, name=name, reread=reread)
    except CheckFailed as e:
        if mask is not None and "raised" in e.title:
            try:
                with forbid(builtin_attention(), NO_BUILTIN_ATTENTION):
                    call(fn, *args, None, name=name, reread=reread)
            except CheckFailed:
                raise e from None
            raise CheckFailed(e.title, hint=MASK_AS_IS, reread=SEC_PADDING, details=e.details,
                              student_tb=e.student_tb) from None
        raise


def _extra_axes_from_mask(out, inp, mask):
    """A result with more axes than the input: the mask got axes it should not have."""
    if mask is not None and out.dim() > inp.dim():
        raise CheckFailed(f"the result has shape {tuple(out.shape)}, more axes than the input {tuple(inp.shape)}",
                          hint=MASK_AS_IS, reread=SEC_PADDING, details=[f"mask {tuple(mask.shape)}"])


def _student_sdpa(sdpa, q, k, v, mask=None):
    res = call_with_mask(sdpa, q, k, v, mask=mask, name="scaled_dot_product_attention", reread=SEC_MATRIX)
    if not (isinstance(res, tuple) and len(res) == 2):
        raise CheckFailed("scaled_dot_product_attention must return a pair (out, weights)",
                          hint="end with `return out, weights`", reread=SEC_MATRIX)
    out, w = res
    expect_tensor(out, "out", SEC_MATRIX)
    expect_tensor(w, "weights", SEC_MATRIX)
    _extra_axes_from_mask(w, q, mask)
    return out, w


def _name_sdpa_mistake(out, w, q, k, v, mask=None) -> str | None:
    for name, (o2, w2) in sdpa_wrong_variants(q, k, v, mask).items():
        if close(w, w2, atol=1e-5) or (tuple(out.shape) == tuple(o2.shape) and close(out, o2, atol=1e-5)):
            return f"your result matches {name}"
    if w.dim() >= 2 and w.shape[-1] != w.shape[-2]:
        return None
    ref_w = _reference(q, k, v, mask)[1]
    if tuple(w.shape) == tuple(ref_w.shape) and close(w, ref_w.transpose(-2, -1)):
        return "your weights are transposed: weights[..., i, j] is how much query i attends to key j"
    return None


def _shape_text(*named) -> str:
    return ", ".join(f"{n} {tuple(t.shape)}" for n, t in named if t is not None)


def sdpa_shapes(sdpa) -> None:
    """Tq != Tk and d != dv, with one batch axis, none, and two (batch, heads)."""
    def check(batch):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(*batch, 3, 4, generator=g), torch.randn(*batch, 5, 4, generator=g),
                   torch.randn(*batch, 5, 6, generator=g))
        out, w = _student_sdpa(sdpa, q, k, v)
        inputs = _shape_text(("q", q), ("k", k), ("v", v)) + ": Tq=3, Tk=5, d=4, dv=6"
        if tuple(w.shape) == (*batch, 5, 3):
            raise CheckFailed("weights have shape (..., Tk, Tq)", reread=SEC_MATRIX, details=[f"inputs: {inputs}"],
                              hint="the weights are transposed: one row per query, one column per key")
        expect_shape(w, (*batch, 3, 5), "weights", inputs=inputs, reread=SEC_MATRIX,
                     hint="weights are (..., Tq, Tk): one row per query, one column per key; "
                          "transpose only the last two axes of k, not all of them")
        expect_shape(out, (*batch, 3, 6), "out", inputs=inputs, reread=SEC_MATRIX,
                     hint="out = weights @ v is (..., Tq, dv)")

    batch_forms(check, [(2,), (), (2, 3)])
    passed("scaled_dot_product_attention: shapes (..., Tq, dv) and (..., Tq, Tk) with Tq != Tk and d != dv, "
           "for no, one and two batch axes")


def sdpa_values(sdpa) -> None:
    """softmax(q k^T / sqrt(d)) v, with one batch axis, none, and two."""
    def check(batch):
        g = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(*batch, 3, 8, generator=g) * 2, torch.randn(*batch, 4, 8, generator=g) * 2,
                   torch.randn(*batch, 4, 2, generator=g))
        out, w = _student_sdpa(sdpa, q, k, v)
        ref_out, ref_w = _reference(q, k, v)
        inputs = _shape_text(("q", q), ("k", k), ("v", v))
        expect_shape(w, ref_w.shape, "weights", reread=SEC_MATRIX, inputs=inputs)
        sums = w.sum(-1)
        if not close(sums, torch.ones_like(sums)):
            raise CheckFailed("attention weights don't sum to 1 along the last axis", reread=SEC_SOFTMAX,
                              hint=_name_sdpa_mistake(out, w, q, k, v) or
                              "each query's weights over the keys must sum to 1: is your softmax over dim=-1?",
                              details=[f"inputs: {inputs}"])
        if not close(w, ref_w):
            raise CheckFailed(
                "attention weights have the wrong values",
                reread=SEC_SCALING,
                hint=_name_sdpa_mistake(out, w, q, k, v) or "weights = softmax(q k^T / sqrt(d)) over the keys",
                details=[f"inputs: {inputs}"],
            )
        expect_shape(
            out, ref_out.shape, "out", reread=SEC_MATRIX, inputs=inputs, hint="out = weights @ v is (..., Tq, dv)"
        )
        expect_close(out, ref_out, "out", reread=SEC_MATRIX, hint="out = weights @ v", inputs=inputs)

    batch_forms(check, [(1,), (), (2, 3)])
    passed("scaled_dot_product_attention: values match softmax(q k^T / sqrt(d)) v (no, one and two batch axes)")


def sdpa_causal(sdpa) -> None:
    """A (T, T) causal mask broadcast over no, one and two batch axes."""
    T = 4
    mask = torch.ones(T, T, dtype=torch.bool).tril()

    def check(batch):
        g = torch.Generator().manual_seed(2)
        q, k, v = (torch.randn(*batch, T, 4, generator=g), torch.randn(*batch, T, 4, generator=g),
                   torch.randn(*batch, T, 3, generator=g))
        out, w = _student_sdpa(sdpa, q, k, v, mask)
        ref_out, ref_w = _reference(q, k, v, mask)
        inputs = _shape_text(("q", q), ("k", k), ("v", v), ("mask", mask))
        expect_shape(w, ref_w.shape, "weights", reread=SEC_CAUSAL, inputs=inputs)
        if not bool(torch.isfinite(w).all()):
            raise CheckFailed("weights contain nan/inf with a causal mask", reread=SEC_CAUSAL,
                              hint=_name_sdpa_mistake(out, w, q, k, v, mask) or
                              "did a whole row get masked? the diagonal must stay allowed (True)")
        leaked = w.detach().masked_select(~mask.expand_as(w))
        if leaked.numel() and float(leaked.abs().max()) > 0:
            raise CheckFailed(
                "queries give weight to keys the mask forbids (the future)",
                reread=SEC_CAUSAL,
                hint=_name_sdpa_mistake(out, w, q, k, v, mask)
                or "fill the scores with -inf where mask is False, then take the softmax",
                details=[f"largest forbidden weight: {float(leaked.abs().max()):.3g} (should be exactly 0)"],
            )
        if not close(w, ref_w):
            raise CheckFailed(
                "weights under a causal mask have the wrong values",
                reread=SEC_CAUSAL,
                hint=_name_sdpa_mistake(out, w, q, k, v, mask) or "mask the scores, then softmax over dim=-1",
            )
        expect_shape(out, ref_out.shape, "out with a causal mask", reread=SEC_CAUSAL, inputs=inputs)
        expect_close(out, ref_out, "out with a causal mask", reread=SEC_CAUSAL)

    batch_forms(check, [(2,), (), (2, 2)], reread=SEC_CAUSAL)
    g = torch.Generator().manual_seed(12)
    sdpa_extreme(sdpa, torch.randn(2, T, 4, generator=g), torch.randn(2, T, 4, generator=g),
                 torch.randn(2, T, 3, generator=g), mask, "causal mask", SEC_CAUSAL)
    passed("scaled_dot_product_attention: a causal mask gives the future weight exactly 0 (no, one and two batch "
           "axes), whatever the future keys' scores")


def sdpa_padding(sdpa) -> None:
    """Padding masks on the keys: (B, 1, Tk) with (B, Tq, d) inputs, (B, 1, 1, Tk) with (B, H, Tq, d)."""
    B, Tq, Tk = 2, 3, 5
    keep = torch.arange(Tk)[None, :] < torch.tensor([5, 2])[:, None]     # (B, Tk)

    def check(batch):
        g = torch.Generator().manual_seed(3)
        mask = keep[:, None, :] if len(batch) == 1 else keep[:, None, None, :]   # (B, 1, Tk) or (B, 1, 1, Tk)
        q, k, v = (torch.randn(*batch, Tq, 4, generator=g), torch.randn(*batch, Tk, 4, generator=g),
                   torch.randn(*batch, Tk, 2, generator=g))
        out, w = _student_sdpa(sdpa, q, k, v, mask)
        ref_out, ref_w = _reference(q, k, v, mask)
        inputs = _shape_text(("q", q), ("k", k), ("v", v), ("mask", mask))
        expect_shape(w, ref_w.shape, f"weights with a {tuple(mask.shape)} padding mask", reread=SEC_PADDING,
                     inputs=inputs, hint=MASK_AS_IS)
        if not close(w, ref_w):
            raise CheckFailed(f"weights with a {tuple(mask.shape)} padding mask are wrong", reread=SEC_PADDING,
                              hint=_name_sdpa_mistake(out, w, q, k, v, mask) or
                              "padded keys (mask False) must get weight exactly 0 in every query row",
                              details=[f"inputs: {inputs}"])
        expect_close(out, ref_out, "out with a padding mask", reread=SEC_PADDING, inputs=inputs)

    batch_forms(check, [(B,), (B, 3)], reread=SEC_PADDING)
    g = torch.Generator().manual_seed(13)
    sdpa_extreme(sdpa, torch.randn(B, Tq, 4, generator=g), torch.randn(B, Tk, 4, generator=g),
                 torch.randn(B, Tk, 2, generator=g), keep[:, None, :], "padding mask", SEC_PADDING)
    passed("scaled_dot_product_attention: padded keys get weight 0 with (B, 1, Tk) and (B, 1, 1, Tk) masks, "
           "whatever their scores")


# ========================================================================================
# Part 2 (functions 5-8): scoring functions, einsum attention, a self-attention head
# ========================================================================================
SEC_SCORING = f"lecture 04, section 'Other scoring functions' ({LECTURE}#scoring)"
SEC_EINSUM = f"lecture 04, section 'einsum and batched matmul' ({LECTURE}#einsum)"
SEC_ROLES = f"lecture 04, section 'Three roles, three matrices' ({LECTURE}#roles)"

NO_MATMUL = ("einsum_attention must do both products with torch.einsum: `@`, torch.matmul, "
             "bmm, mm and F.scaled_dot_product_attention are off limits here")


def matmul_builtins() -> list:
    """Everything that multiplies matrices without einsum (blocked inside einsum_attention)."""
    import torch.nn.functional as F

    return [(torch.Tensor, "__matmul__"), (torch.Tensor, "__rmatmul__"), (torch.Tensor, "matmul"),
            (torch, "matmul"), (torch, "bmm"), (torch.Tensor, "bmm"), (torch, "mm"), (torch.Tensor, "mm"),
            (F, "scaled_dot_product_attention")]


def _better_hint(err: CheckFailed, hint: str) -> CheckFailed:
    """The same failure with a hint specific to this function (keeps title, details, traceback)."""
    return CheckFailed(err.title, hint=hint, reread=err.reread, details=err.details, student_tb=err.student_tb)


def _call_tensor(fn, *args, name: str, reread: str, error_hint: str | None = None):
    try:
        out = call(fn, *args, name=name, reread=reread)
    except CheckFailed as e:
        if error_hint and "raised" in e.title:
            raise _better_hint(e, error_hint) from None
        raise
    return expect_tensor(out, name, reread=reread)


def _named(out, cands: dict, atol: float = 1e-5) -> str | None:
    name = first_match(out, cands, atol=atol)
    return f"your result equals {name}" if name else None


# ----------------------------------------------------------------------------------------
# 5. bilinear scores
# ----------------------------------------------------------------------------------------
BILINEAR_SHAPES = ("W has shape (dq, dk): multiplying the queries by W gives (..., Tq, dk), which then meets the "
                   "keys (their last two axes swapped) to give (..., Tq, Tk). Don't use k.T on batched tensors: "
                   "it reverses every axis")


def bilinear_wrong_variants(q, k, W) -> dict:
    kt = k.transpose(-2, -1)
    ref = (q @ W) @ kt
    out = {
        "q k^T without W (that is the plain dot product; W sits between q and k)": q @ kt,
        "q W^T k (W transposed): W is (dq, dk) and multiplies q first, q @ W": (q @ W.transpose(0, 1)) @ kt,
        "the scores divided by sqrt(d): bilinear_scores returns raw scores, no scaling": ref / math.sqrt(k.shape[-1]),
        "a softmax of the scores: return the scores, not the weights": torch.softmax(ref, -1),
        "the scores transposed: scores[..., i, j] must pair query i with key j": ref.transpose(-2, -1),
    }
    return out


def bilinear_shapes(bilinear_scores) -> None:
    """(..., Tq, dq), (..., Tk, dk), (dq, dk) -> (..., Tq, Tk), with no, one and two batch axes."""
    def check(batch):
        g = torch.Generator().manual_seed(10)
        q, k, W = (
            torch.randn(*batch, 3, 4, generator=g),
            torch.randn(*batch, 5, 6, generator=g),
            torch.randn(4, 6, generator=g),
        )
        inputs = f"q {tuple(q.shape)}, k {tuple(k.shape)}, W (4, 6): Tq=3, Tk=5, dq=4, dk=6"
        out = _call_tensor(bilinear_scores, q, k, W, name="bilinear_scores", reread=SEC_SCORING,
                           error_hint=BILINEAR_SHAPES)
        if tuple(out.shape) == (*batch, 5, 3):
            raise CheckFailed("bilinear_scores has shape (..., Tk, Tq): the scores are transposed",
                              hint="scores[..., i, j] = q_i^T W k_j: queries on the rows, keys on the columns",
                              reread=SEC_SCORING, details=[f"inputs: {inputs}"])
        expect_shape(out, (*batch, 3, 5), "bilinear_scores", inputs=inputs, reread=SEC_SCORING,
                     hint="one score per (query, key) pair: (..., Tq, Tk)")

    batch_forms(check, [(2,), (), (2, 3)], reread=SEC_SCORING)
    passed("bilinear_scores: shapes (..., Tq, Tk) with dq != dk, for no, one and two batch axes")


def bilinear_values(bilinear_scores) -> None:
    """Values of q_i^T W k_j (square W, so a transposed W still runs), with no, one and two batch axes."""
    def check(batch):
        g = torch.Generator().manual_seed(11)
        q, k, W = (
            torch.randn(*batch, 3, 4, generator=g),
            torch.randn(*batch, 3, 4, generator=g),
            torch.randn(4, 4, generator=g),
        )
        inputs = f"q {tuple(q.shape)}, k {tuple(k.shape)}, W (4, 4)"
        out = _call_tensor(bilinear_scores, q, k, W, name="bilinear_scores", reread=SEC_SCORING,
                           error_hint=BILINEAR_SHAPES)
        ref = torch.einsum("...id,de,...je->...ij", q, W, k)
        expect_shape(out, ref.shape, "bilinear_scores", reread=SEC_SCORING, inputs=inputs)
        expect_close(out, ref, "bilinear_scores", reread=SEC_SCORING, inputs=inputs,
                     hint=_named(out, bilinear_wrong_variants(q, k, W)) or "scores[..., i, j] = q_i^T W k_j")

    batch_forms(check, [(2,), (), (2, 3)], reread=SEC_SCORING)
    passed("bilinear_scores: values match q_i^T W k_j")


# ----------------------------------------------------------------------------------------
# 6. additive scores
# ----------------------------------------------------------------------------------------
ADDITIVE_SHAPES = (
    "W1 (h, dk) acts on the keys and W2 (h, dq) on the queries, like nn.Linear weights: the "
    "projected keys are (..., Tk, h), the projected queries (..., Tq, h); insert one axis in each "
    "(counted from the end) so every query meets every key in (..., Tq, Tk, h), then tanh, then contract "
    "h with w"
)


def additive_wrong_variants(q, k, W1, W2, w) -> dict:
    kk = (k @ W1.T).unsqueeze(-3)  # (..., 1, Tk, h)
    qq = (q @ W2.T).unsqueeze(-2)  # (..., Tq, 1, h)
    ref = torch.tanh(qq + kk) @ w
    out = {
        "W1 and W2 swapped: W1 acts on the keys, W2 on the queries": torch.tanh(
            (q @ W1.T).unsqueeze(-2) + (k @ W2.T).unsqueeze(-3)
        )
        @ w,
        "the score without tanh: w^T (W1 k + W2 q) is linear, the tanh makes it a small MLP": (qq + kk) @ w,
        "tanh applied after w: the non-linearity goes inside, w^T tanh(...)": torch.tanh((qq + kk) @ w),
        "a sum over the hidden units instead of the dot product with w": torch.tanh(qq + kk).sum(-1),
        "a softmax of the scores: return the scores, not the weights": torch.softmax(ref, -1),
        "the scores transposed: scores[..., i, j] must pair query i with key j": ref.transpose(-2, -1),
    }
    return out


def _additive_inputs(seed, batch, Tq, Tk, dq, dk, h):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(*batch, Tq, dq, generator=g), torch.randn(*batch, Tk, dk, generator=g)
    W1, W2 = torch.randn(h, dk, generator=g) / math.sqrt(dk), torch.randn(h, dq, generator=g) / math.sqrt(dq)
    return q, k, W1, W2, torch.randn(h, generator=g)


def additive_shapes(additive_scores) -> None:
    """(..., Tq, dq), (..., Tk, dk), W1 (h, dk), W2 (h, dq), w (h,) -> (..., Tq, Tk), no, one and two batch axes."""
    def check(batch):
        q, k, W1, W2, w = _additive_inputs(12, batch, 3, 5, 4, 6, 7)
        inputs = f"q {tuple(q.shape)}, k {tuple(k.shape)}, W1 (7, 6), W2 (7, 4), w (7,): Tq=3, Tk=5, dq=4, dk=6, h=7"
        out = _call_tensor(additive_scores, q, k, W1, W2, w, name="additive_scores", reread=SEC_SCORING,
                           error_hint=ADDITIVE_SHAPES)
        got = tuple(out.shape)
        if got == (*batch, 5, 3):
            raise CheckFailed("additive_scores has shape (..., Tk, Tq): the scores are transposed", reread=SEC_SCORING,
                              hint="queries on the rows, keys on the columns", details=[f"inputs: {inputs}"])
        if got == (*batch, 3, 5, 7):
            raise CheckFailed("additive_scores still has the hidden axis h", reread=SEC_SCORING,
                              hint="finish with the dot product with w over the last axis (the h axis)",
                              details=[f"inputs: {inputs}"])
        expect_shape(
            out,
            (*batch, 3, 5),
            "additive_scores",
            inputs=inputs,
            reread=SEC_SCORING,
            hint="every query meets every key: insert axes so the two projections broadcast to (..., Tq, Tk, h)",
        )

    batch_forms(check, [(2,), (), (2, 3)], reread=SEC_SCORING)
    passed("additive_scores: shapes (..., Tq, Tk) with Tq != Tk and dq != dk, for no, one and two batch axes")


def additive_values(additive_scores) -> None:
    """Values of w^T tanh(W1 k_j + W2 q_i), with dq == dk so a swap of W1 and W2 still runs."""
    def check(batch):
        q, k, W1, W2, w = _additive_inputs(13, batch, 3, 4, 5, 5, 6)
        inputs = f"q {tuple(q.shape)}, k {tuple(k.shape)}, W1 (6, 5), W2 (6, 5), w (6,)"
        out = _call_tensor(additive_scores, q, k, W1, W2, w, name="additive_scores", reread=SEC_SCORING,
                           error_hint=ADDITIVE_SHAPES)
        ref = torch.einsum("h,...ijh->...ij", w, torch.tanh(torch.einsum("hd,...jd->...jh", W1, k).unsqueeze(-3)
                                                           + torch.einsum("hd,...id->...ih", W2, q).unsqueeze(-2)))
        expect_shape(out, ref.shape, "additive_scores", reread=SEC_SCORING, inputs=inputs)
        expect_close(out, ref, "additive_scores", reread=SEC_SCORING, inputs=inputs,
                     hint=_named(out, additive_wrong_variants(q, k, W1, W2, w)) or
                     "scores[..., i, j] = w . tanh(W1 k_j + W2 q_i)")

    batch_forms(check, [(2,), (), (2, 3)], reread=SEC_SCORING)
    passed("additive_scores: values match w^T tanh(W1 k_j + W2 q_i)")


# ----------------------------------------------------------------------------------------
# 7. attention with einsum only
# ----------------------------------------------------------------------------------------
def _student_einsum(fn, q, k, v, mask=None):
    with forbid(matmul_builtins(), NO_MATMUL):
        try:
            res = call(fn, q, k, v, mask, name="einsum_attention", reread=SEC_EINSUM)
        except CheckFailed as e:
            if "raised" in e.title:
                raise _better_hint(e, "check the letters of every operand: q '...qd', k '...kd', weights '...qk', "
                                      "v '...kv'; the letter weights and v share is the key axis") from None
            raise
    if not (isinstance(res, tuple) and len(res) == 2):
        raise CheckFailed("einsum_attention must return a pair (out, weights)",
                          hint="end with `return out, weights`", reread=SEC_EINSUM)
    out, w = res
    expect_tensor(out, "out", SEC_EINSUM)
    expect_tensor(w, "weights", SEC_EINSUM)
    return out, w


def _einsum_verdict(fn, q, k, v, mask=None, what="einsum_attention", reread=SEC_EINSUM) -> None:
    out, w = _student_einsum(fn, q, k, v, mask)
    ref_out, ref_w = _reference(q, k, v, mask)
    inputs = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}" + (
        f", mask {tuple(mask.shape)}" if mask is not None else "")
    expect_shape(w, ref_w.shape, f"{what}: weights", inputs=inputs, reread=SEC_EINSUM,
                 hint="weights are (..., Tq, Tk): an output spec like '...qd,...kd->...qk'")
    expect_shape(out, ref_out.shape, f"{what}: out", inputs=inputs, reread=SEC_EINSUM,
                 hint="out is (..., Tq, dv): the key letter, shared by the weights and v, is summed out")
    if not close(w, ref_w):
        hint = _name_sdpa_mistake(out, w, q, k, v, mask)
        if hint is None and close(
            w, torch.softmax(torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(v.shape[-1]), -1)
        ):
            hint = "you divided by sqrt(dv), the width of the values; the scale is sqrt(d) of the queries and keys"
        raise CheckFailed(f"{what}: the weights have the wrong values", reread=reread, details=[f"inputs: {inputs}"],
                          hint=hint or "weights = softmax(einsum('...qd,...kd->...qk', q, k) / sqrt(d)) over the keys")
    expect_close(out, ref_out, f"{what}: out", inputs=inputs, reread=SEC_EINSUM,
                 hint="out[..., i, :] = sum_j weights[..., i, j] v[..., j, :]: sum over the key letter")


def einsum_values(einsum_attention) -> None:
    """(B, Tq, d), (B, Tk, d), (B, Tk, dv) without a mask: values match softmax(q k^T / sqrt(d)) v."""
    torch.manual_seed(14)
    q, k, v = torch.randn(2, 3, 4) * 2, torch.randn(2, 5, 4) * 2, torch.randn(2, 5, 6)
    _einsum_verdict(einsum_attention, q, k, v)
    passed("einsum_attention: (out, weights) match softmax(q k^T / sqrt(d)) v, without `@`")


def einsum_batch_dims(einsum_attention) -> None:
    """Any number of leading axes: none, two (B, H), and three."""
    torch.manual_seed(15)
    for batch in ((), (2, 3), (2, 1, 3)):
        q, k, v = torch.randn(*batch, 4, 8), torch.randn(*batch, 6, 8), torch.randn(*batch, 6, 5)
        try:
            _einsum_verdict(einsum_attention, q, k, v, what=f"einsum_attention with batch axes {batch}")
        except CheckFailed as e:
            if "ellipsis" in e.title or "number of subscripts" in e.title or "number of dimensions" in e.title:
                raise _better_hint(e, "use '...' for the leading axes ('...qd,...kd->...qk'), so the same einsum "
                                      "works for (T, d), (B, T, d) and (B, H, T, d)") from None
            raise
    passed("einsum_attention: works with no batch axis, with (B, H) and with three batch axes")


def einsum_mask(einsum_attention) -> None:
    """Causal (T, T) and padding (B, 1, T) masks: forbidden keys get weight exactly 0."""
    torch.manual_seed(16)
    T = 4
    q, k, v = torch.randn(2, T, 4), torch.randn(2, T, 4), torch.randn(2, T, 3)
    padding = (torch.arange(T)[None, :] < torch.tensor([3, 2])[:, None])[:, None, :]  # (B, 1, T)
    for mask in (padding, torch.ones(T, T, dtype=torch.bool).tril()):
        _einsum_verdict(einsum_attention, q, k, v, mask, what=f"einsum_attention with a {tuple(mask.shape)} mask",
                        reread=SEC_PADDING if mask.dim() == 3 else SEC_CAUSAL)
    passed("einsum_attention: causal and padding masks give forbidden keys weight 0")


# ----------------------------------------------------------------------------------------
# 8. a self-attention head as an nn.Module
# ----------------------------------------------------------------------------------------
def _make_head(cls, d_model, d_head, reread=SEC_ROLES):
    head = call(cls, d_model, d_head, name="SelfAttentionHead(d_model, d_head)", reread=reread)
    if not isinstance(head, torch.nn.Module):
        raise CheckFailed("SelfAttentionHead is not an nn.Module", reread=reread,
                          hint="class SelfAttentionHead(nn.Module): ... and call super().__init__() first")
    return head


def _head_linears(head, d_model, d_head):
    """The three projections, checked: nn.Linear(d_model, d_head, bias=False) each."""
    out = []
    for name in ("W_q", "W_k", "W_v"):
        lin = getattr(head, name, None)
        if lin is None:
            raise CheckFailed(f"SelfAttentionHead has no attribute {name}", reread=SEC_ROLES,
                              hint="name the projections exactly self.W_q, self.W_k, self.W_v")
        if not isinstance(lin, torch.nn.Linear):
            raise CheckFailed(f"self.{name} is a {type(lin).__name__}, not an nn.Linear", reread=SEC_ROLES,
                              hint=f"self.{name} = nn.Linear(d_model, d_head, bias=False)")
        if (lin.in_features, lin.out_features) != (d_model, d_head):
            raise CheckFailed(f"self.{name} maps {lin.in_features} -> {lin.out_features} features, "
                              f"expected d_model={d_model} -> d_head={d_head}", reread=SEC_ROLES,
                              hint="nn.Linear(in_features, out_features): nn.Linear(d_model, d_head, bias=False)")
        if lin.bias is not None:
            raise CheckFailed(f"self.{name} has a bias", reread=SEC_ROLES,
                              hint="the projections of an attention head have no bias: nn.Linear(..., bias=False)")
        out.append(lin.weight)
    return out


def head_structure(SelfAttentionHead) -> None:
    """W_q, W_k, W_v are nn.Linear(d_model, d_head, bias=False) and the only parameters."""
    d_model, d_head = 8, 4
    head = _make_head(SelfAttentionHead, d_model, d_head)
    _head_linears(head, d_model, d_head)
    n = sum(p.numel() for p in head.parameters())
    if n != 3 * d_model * d_head:
        raise CheckFailed(f"SelfAttentionHead(8, 4) has {n} parameters, expected 3 * 8 * 4 = 96", reread=SEC_ROLES,
                          hint="only the three projection matrices are learned here")
    passed("SelfAttentionHead: three bias-free nn.Linear(d_model, d_head) projections, 3 * d_model * d_head parameters")


def _head_reference(Wq, Wk, Wv, x, mask=None):
    return _reference(x @ Wq.T, x @ Wk.T, x @ Wv.T, mask)[0]


def head_wrong_variants(Wq, Wk, Wv, x, mask=None) -> dict:
    q, k, v = x @ Wq.T, x @ Wk.T, x @ Wv.T
    d_head, d_model = Wq.shape
    s = q @ k.transpose(-2, -1)

    def fin(scores, dim=-1, m=mask):
        if m is not None:
            scores = scores.masked_fill(~m, float("-inf"))
        return torch.softmax(scores, dim) @ v

    out = {
        "no scaling: divide the scores by sqrt(d_head)": fin(s),
        "scaling by sqrt(d_model): the dot products are between d_head-wide vectors, divide by sqrt(d_head)": fin(
            s / math.sqrt(d_model)
        ),
        "a softmax over the query axis (dim=-2) instead of the keys (dim=-1)": fin(s / math.sqrt(d_head), dim=-2),
        "the keys computed with W_q as well: keys come from self.W_k": fin(
            (q @ q.transpose(-2, -1)) / math.sqrt(d_head)
        ),
        "W_k used for the queries and W_q for the keys (the weights come out transposed)": fin(
            (k @ q.transpose(-2, -1)) / math.sqrt(d_head)
        ),
    }
    if mask is not None:
        out["the mask ignored: pass it on to the attention"] = fin(s / math.sqrt(d_head), m=None)
        out["the mask inverted: True means 'may attend'"] = fin(s / math.sqrt(d_head), m=~mask)
        w = torch.softmax(s / math.sqrt(d_head), -1).masked_fill(~mask, 0.0)
        out["the mask applied after the softmax: fill the scores with -inf before it"] = w @ v
    return out


def _head_case(SelfAttentionHead, seed, B, T, d_model, d_head, mask=None, reread=SEC_MATRIX):
    g = torch.Generator().manual_seed(seed)
    head = _make_head(SelfAttentionHead, d_model, d_head)
    Wq, Wk, Wv = _head_linears(head, d_model, d_head)
    with torch.no_grad():
        for p in (Wq, Wk, Wv):
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(d_model) * 2)
    x = torch.randn(B, T, d_model, generator=g)
    inputs = f"x ({B}, {T}, {d_model}), d_head={d_head}" + (f", mask {tuple(mask.shape)}" if mask is not None else "")
    res = call_with_mask(head, x, mask=mask, name="SelfAttentionHead.forward(x, mask)", reread=reread)
    if isinstance(res, tuple):
        raise CheckFailed("forward returns a tuple", reread=reread,
                          hint="forward(x, mask) returns only the output tensor (B, T, d_head)")
    out = expect_tensor(res, "forward(x, mask)", reread=reread).detach()
    _extra_axes_from_mask(out, x, mask)
    Wq, Wk, Wv = (p.detach() for p in (Wq, Wk, Wv))
    ref = _head_reference(Wq, Wk, Wv, x, mask)
    if tuple(out.shape) == (B, T, d_model) and d_model != d_head:
        raise CheckFailed(
            f"forward returns (B, T, d_model) = {tuple(out.shape)}",
            reread=SEC_ROLES,
            details=[f"inputs: {inputs}"],
            hint="the output is the weighted sum of the VALUES W_v(x), which are d_head wide, not of x",
        )
    expect_shape(out, ref.shape, "forward(x, mask)", inputs=inputs, reread=reread,
                 hint="queries, keys and values are (B, T, d_head); the output is (B, T, d_head)")
    expect_close(out, ref, "forward(x, mask)", inputs=inputs, reread=reread,
                 hint=_named(out, head_wrong_variants(Wq, Wk, Wv, x, mask)) or
                 "q, k, v = W_q(x), W_k(x), W_v(x); out = softmax(q k^T / sqrt(d_head), masked) v")


def head_forward(SelfAttentionHead) -> None:
    """Without a mask: out = softmax(W_q(x) W_k(x)^T / sqrt(d_head)) W_v(x), shape (B, T, d_head)."""
    _head_case(SelfAttentionHead, 17, 2, 5, 8, 4)
    passed("SelfAttentionHead: forward matches softmax(W_q(x) W_k(x)^T / sqrt(d_head)) W_v(x)")


def head_mask(SelfAttentionHead) -> None:
    """The mask argument is used: a causal (T, T) and a padding (B, 1, T) mask."""
    T = 5
    _head_case(SelfAttentionHead, 18, 2, T, 8, 4, torch.ones(T, T, dtype=torch.bool).tril(), reread=SEC_CAUSAL)
    _head_case(
        SelfAttentionHead,
        19,
        2,
        T,
        8,
        4,
        (torch.arange(T)[None, :] < torch.tensor([5, 3])[:, None])[:, None, :],
        reread=SEC_PADDING,
    )
    passed("SelfAttentionHead: causal and padding masks are applied")


guard(globals())  # every check records warnings instead of printing them (core.guard)
