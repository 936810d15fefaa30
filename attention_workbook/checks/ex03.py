"""Visible checks for exercise 03_simplified_self_attention.

simple_self_attention_loops, simple_self_attention: y_i = (1/S) sum_j (x_i . x_j) x_j;
softmax_self_attention: y_i = sum_j softmax_j(x_i . x_j) x_j. Inputs are the lecture's toy
vectors for "The baker sells bread" (S = 4, D = 6) and a small batch (B, S, D) = (2, 3, 5),
with B, S and D all different so that mixing up the axes shows.
"""

from __future__ import annotations

import torch

from .core import guard, CheckFailed, call, close, expect_close, expect_shape, expect_tensor, first_match, passed

LECTURE = "lectures/03_simplified_self_attention.ipynb"
SEC_IDEA = f"lecture 03, section 1 'The idea' ({LECTURE}#idea)"
SEC_LOOPS = f"lecture 03, section 3 'The formula, written as loops' ({LECTURE}#loops)"
SEC_MATRIX = f"lecture 03, section 4 'The same thing as one matrix product' ({LECTURE}#matrix-form)"
SEC_SOFTMAX = f"lecture 03, section 6 'Softmax fixes it' ({LECTURE}#softmax)"


def sentence() -> torch.Tensor:
    """The lecture's (S, D) = (4, 6) vectors of "The baker sells bread"."""
    from attention_workbook import lookup

    return lookup.toy_embeddings()


def small_batch() -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    return torch.randn(2, 3, 5, generator=g)                     # (B, S, D)


def _t(x):
    return x.transpose(-2, -1)


def simple_reference(x: torch.Tensor) -> torch.Tensor:
    return (x @ _t(x)) @ x / x.shape[-2]


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x @ _t(x), dim=-1) @ x


def simple_wrong_variants(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What the usual mistakes of y_i = (1/S) sum_j (x_i . x_j) x_j produce."""
    S, D = x.shape[-2], x.shape[-1]
    w = x @ _t(x)                                                # (..., S, S)
    out = {
        "the sum without the 1/S: divide by S, the sequence length x.shape[-2]": w @ x,
        "a division by D (the vector width) instead of S (the number of positions)": w @ x / D,
        "x_i as the value: in (x_i . x_j) x_j the vector that gets weighted is x_j, not x_i":
            w.sum(-1, keepdim=True) * x / S,
        "only the last term j = S-1 kept: use += to accumulate over j, not =":
            w[..., :, -1:] * x[..., -1:, :] / S,
        "softmax weights: this function uses the RAW dot products (the softmax version is exercise 3)":
            torch.softmax(w, dim=-1) @ x,
        "a sum over j <= i only: the sum runs over ALL positions j": torch.tril(w) @ x / S,
    }
    if x.dim() == 3:
        out["a division by x.shape[0], which is the batch size B for a (B, S, D) input: "
            "use x.shape[-2]"] = w @ x / x.shape[0]
    return out


def softmax_wrong_variants(x: torch.Tensor) -> dict[str, torch.Tensor]:
    S, D = x.shape[-2], x.shape[-1]
    s = x @ _t(x)
    return {
        "a softmax over the QUERY axis (dim=-2): each row i must sum to 1 over the words j, softmax(dim=-1)":
            torch.softmax(s, dim=-2) @ x,
        "the 1/S kept after the softmax: the softmax already normalises, drop the 1/S":
            torch.softmax(s, dim=-1) @ x / S,
        "scores divided by S before the softmax: softmax(x x^T) needs no 1/S": torch.softmax(s / S, dim=-1) @ x,
        "scores divided by sqrt(D): that scaling is lecture 04's; here the weights are softmax(x_i . x_j)":
            torch.softmax(s / D ** 0.5, dim=-1) @ x,
        "raw dot products without the softmax": s @ x / S,
    }


def _call(fn, x, name, reread):
    x_before = x.clone()
    try:
        out = call(fn, x, name=name, reread=reread)
    except CheckFailed as e:
        if x.dim() == 3 and "raised" in e.title:
            if name.endswith("_loops"):
                e.hint = ("it fails on a batch (B, S, D): loop over the sequences too (`for seq in x`), or index "
                          "the last two axes with x[..., i, :]; S is x.shape[-2], not x.shape[0]")
                e.reread = SEC_LOOPS
            else:
                e.hint = ("it fails on a batch (B, S, D): `x.T` reverses ALL axes of a 3-D tensor, so use "
                          "x.transpose(-2, -1); take S = x.shape[-2] and D = x.shape[-1] (not x.shape[0])")
                e.reread = SEC_MATRIX
            e.args = (e.plain(),)
        raise
    out = expect_tensor(out, name, reread=reread)
    if not torch.equal(x, x_before):
        raise CheckFailed(f"{name} changed its input x in place", reread=reread,
                          hint="write the outputs into a new tensor (e.g. y = torch.zeros_like(x)); "
                               "every y_i must be computed from the ORIGINAL vectors")
    return out


def _check(fn, name, x, reference, variants, reread, what):
    out = _call(fn, x, name, reread)
    inputs = f"x of shape {tuple(x.shape)}"
    want = reference(x)
    if tuple(out.shape) == tuple(x.shape[:-1]) + (x.shape[-2],):
        raise CheckFailed(f"{name} returned shape {tuple(out.shape)}: the (S, S) weights, not the outputs",
                          reread=reread, hint="multiply the weights by x: y = weights @ x has shape (..., S, D)")
    expect_shape(out, want.shape, name, inputs=inputs, reread=reread,
                 hint="the output has one D-vector per position: the same shape as x")
    if not close(out, want, atol=1e-5):
        found = first_match(out, variants(x), atol=1e-5)
        expect_close(out, want, name, inputs=inputs, reread=reread,
                     hint=f"your output equals {found}" if found else what)
    return out


# ----------------------------------------------------------------------------------------
# 1. loops
# ----------------------------------------------------------------------------------------
def loops_values(simple_self_attention_loops) -> None:
    """(S, D) input: the lecture's sentence, and a one-word sentence; the input is not modified."""
    for x in (sentence(), sentence()[:1]):
        _check(simple_self_attention_loops, "simple_self_attention_loops", x, simple_reference,
               simple_wrong_variants, SEC_LOOPS, "for each i: y_i = (1/S) * sum over ALL j of (x_i . x_j) * x_j")
    passed("simple_self_attention_loops: 'The baker sells bread' gives (1/S) sum_j (x_i . x_j) x_j")


def loops_batch(simple_self_attention_loops) -> None:
    """(B, S, D) input with B, S, D all different: each sequence on its own."""
    _check(simple_self_attention_loops, "simple_self_attention_loops", small_batch(), simple_reference,
           simple_wrong_variants, SEC_MATRIX, "each sequence x[b] of the batch is processed on its own")
    passed("simple_self_attention_loops: a batch (B, S, D) is processed sequence by sequence")


# ----------------------------------------------------------------------------------------
# 2. matrix form
# ----------------------------------------------------------------------------------------
def simple_values(simple_self_attention) -> None:
    for x in (sentence(), sentence()[:1]):
        _check(simple_self_attention, "simple_self_attention", x, simple_reference, simple_wrong_variants,
               SEC_MATRIX, "y = (x @ x^T) @ x / S, with the (S, S) matrix of all dot products in the middle")
    passed("simple_self_attention: (x x^T) x / S matches the formula on 'The baker sells bread'")


def simple_batch(simple_self_attention) -> None:
    _check(simple_self_attention, "simple_self_attention", small_batch(), simple_reference, simple_wrong_variants,
           SEC_MATRIX, "for (B, S, D): x @ x.transpose(-2, -1) is (B, S, S); divide by S = x.shape[-2]")
    passed("simple_self_attention: works on a batch (B, S, D)")


# ----------------------------------------------------------------------------------------
# 3. softmax weights
# ----------------------------------------------------------------------------------------
def softmax_values(softmax_self_attention) -> None:
    for x in (sentence(), sentence()[:1]):
        _check(softmax_self_attention, "softmax_self_attention", x, softmax_reference, softmax_wrong_variants,
               SEC_SOFTMAX, "weights = softmax(x @ x^T) over the last axis (each row sums to 1); y = weights @ x")
    passed("softmax_self_attention: softmax(x x^T) x on 'The baker sells bread'")


def softmax_batch(softmax_self_attention) -> None:
    _check(softmax_self_attention, "softmax_self_attention", small_batch(), softmax_reference,
           softmax_wrong_variants, SEC_SOFTMAX,
           "for (B, S, D): the scores are (B, S, S); the softmax runs over the LAST axis, dim=-1 (dim=1 is the "
           "query axis of a 3-D tensor)")
    passed("softmax_self_attention: works on a batch (B, S, D), softmax over the last axis")


guard(globals())  # every check records warnings instead of printing them (core.guard)
