"""Visible checks for exercise 00_tensor_shapes (five shape drills).

Each function checks one test cell's worth of behaviour on small, readable inputs. When the
result is wrong it recomputes what the common mistakes would have produced and names the one
the student's output matches, with the lecture section to reread.
"""

from __future__ import annotations

import torch

from .core import (
    guard,
    CheckFailed,
    call,
    close,
    expect_close,
    expect_shape,
    expect_tensor,
    first_match,
    forbid,
    passed,
)

LECTURE = "lectures/00_tensor_shapes.ipynb"
SEC_AXES = f"lecture 00, section 2 'Adding and removing axes' ({LECTURE}#axes)"
SEC_RESHAPE = f"lecture 00, section 3 'Transpose vs reshape' ({LECTURE}#reshape)"
SEC_BROADCAST = f"lecture 00, section 5 'Broadcasting' ({LECTURE}#broadcasting)"
SEC_MATMUL = f"lecture 00, section 6 'Batched matrix products' ({LECTURE}#matmul)"
SEC_EINSUM = f"lecture 00, section 7 'einsum' ({LECTURE}#einsum)"

NO_MATMUL = "write the product with torch.einsum: @, matmul, mm and bmm are off limits in einsum_matmul"


def matmul_builtins() -> list:
    """Everything that multiplies matrices without einsum (blocked inside einsum_matmul)."""
    return [(torch.Tensor, "__matmul__"), (torch.Tensor, "__rmatmul__"), (torch.Tensor, "matmul"),
            (torch.Tensor, "mm"), (torch.Tensor, "bmm"), (torch, "matmul"), (torch, "mm"), (torch, "bmm"),
            (torch, "tensordot"), (torch.linalg, "matmul")]


VIEW_HINT = ("`.view` only works when the numbers already sit in reading order in memory; after a transpose "
             "(or on a transposed input) they don't. Use `.reshape`, which copies when it has to "
             "(or `.contiguous().view(...)`)")


def _call(fn, *args, name, reread, hints=None):
    """core.call, plus precise hints for errors this exercise provokes: ``hints`` maps a piece
    of the error message to the hint to show (the `.view` one is always on)."""
    hints = {"view size is not compatible": VIEW_HINT, **(hints or {})}
    try:
        return call(fn, *args, name=name, reread=reread)
    except CheckFailed as e:
        for needle, hint in hints.items():
            if needle in e.title:
                raise CheckFailed(e.title, hint=hint, reread=reread, student_tb=e.student_tb) from None
        raise


def _named(out, cands, default=None):
    name = first_match(out, cands)
    return f"your result equals {name}" if name else default


# ----------------------------------------------------------------------------------------
# pairwise_dots
# ----------------------------------------------------------------------------------------
def _pairwise(pairwise_dots, x):
    out = _call(pairwise_dots, x, name="pairwise_dots", reread=SEC_MATMUL, hints={
        "must match the size": "on a 3-D tensor x.T reverses ALL axes, (C, T, B); to transpose each "
                               "matrix of the batch use x.mT (or x.transpose(-2, -1))"})
    return expect_tensor(out, "pairwise_dots", reread=SEC_EINSUM)


def pairwise_dots_shape(pairwise_dots) -> None:
    x = torch.randn(2, 3, 5)
    out = _pairwise(pairwise_dots, x)
    if tuple(out.shape) == (2, 5, 5):
        raise CheckFailed("pairwise_dots returned (B, C, C) = (2, 5, 5)", reread=SEC_MATMUL,
                          hint="you compared channels with channels (x.mT @ x): the dot products are between "
                               "TOKENS, so the channel axis C must be summed out: x @ x.mT is (B, T, T)")
    if tuple(out.shape) == (2, 3):
        raise CheckFailed("pairwise_dots returned (B, T) = (2, 3)", reread=SEC_EINSUM,
                          hint="(x * x).sum(-1) gives only each token's dot product with itself (the diagonal); "
                               "you need every token against every other token")
    expect_shape(out, (2, 3, 3), "pairwise_dots(x)", inputs="x of shape (B, T, C) = (2, 3, 5)",
                 hint="one number per pair of tokens: (B, T, T); transpose only the last two axes (x.mT), not x.T",
                 reread=SEC_MATMUL)
    out = _pairwise(pairwise_dots, torch.randn(1, 1, 4))       # a single sequence of a single token
    expect_shape(out, (1, 1, 1), "pairwise_dots(x)", inputs="x of shape (B, T, C) = (1, 1, 4)", reread=SEC_MATMUL,
                 hint="one number per pair of tokens: (B, T, T), also when B or T is 1")
    passed("pairwise_dots: (B, T, C) -> (B, T, T)")


def pairwise_dots_values(pairwise_dots) -> None:
    x = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]],
                      [[3.0, -1.0], [0.5, 0.5], [-2.0, 0.0]]])          # (2, 3, 2)
    out = _pairwise(pairwise_dots, x)
    want = torch.einsum("bic,bjc->bij", x, x)
    expect_shape(out, want.shape, "pairwise_dots(x)", reread=SEC_MATMUL)
    cands = {
        "the dot products divided by sqrt(C): that scaling belongs to attention (lecture 04), not here":
            want / 2 ** 0.5,
        "a softmax of the dot products: return the raw dot products": torch.softmax(want, -1),
    }
    expect_close(out, want, "pairwise_dots(x)", reread=SEC_EINSUM,
                 hint=_named(out, cands, "out[b, i, j] must be the dot product of token i and token j of sequence b"),
                 inputs="x = [[[1, 0], [0, 2], [1, 1]], [[3, -1], [.5, .5], [-2, 0]]]")
    passed("pairwise_dots: out[b, i, j] = x[b, i] . x[b, j]")


# ----------------------------------------------------------------------------------------
# split_last
# ----------------------------------------------------------------------------------------
def _split(split_last, x, n):
    out = _call(split_last, x, n, name="split_last", reread=SEC_RESHAPE, hints={
        "values to unpack": "don't assume x is 3-D: x.shape[:-1] is the tuple of leading axes, "
                            "whatever their number; keep it as it is and split only the last axis"})
    return expect_tensor(out, "split_last", reread=SEC_RESHAPE)


def split_last_shape(split_last) -> None:
    for shape, n in [((2, 3, 12), 4), ((6,), 2), ((2, 3, 5, 8), 2)]:
        x = torch.randn(shape)
        out = _split(split_last, x, n)
        want = (*shape[:-1], n, shape[-1] // n)
        if tuple(out.shape) == (*shape[:-1], shape[-1] // n, n) and n != shape[-1] // n:
            raise CheckFailed(f"split_last(x of shape {shape}, n={n}) has shape {tuple(out.shape)}",
                              reread=SEC_RESHAPE, hint="the two new axes are the wrong way round: "
                                                       "(..., n, D // n): n groups, each D // n long")
        if tuple(out.shape) == (n, *shape[:-1], shape[-1] // n) and len(shape) > 1:
            raise CheckFailed(f"split_last(x of shape {shape}, n={n}) has shape {tuple(out.shape)}",
                              reread=SEC_RESHAPE, hint="the n axis went in front of the leading axis: "
                                                       "only the last axis is split, (..., n, D // n)")
        expect_shape(out, want, f"split_last(x, n={n})", inputs=f"x of shape {shape}", reread=SEC_RESHAPE,
                     hint="keep every leading axis as it is, whatever their number: x.shape[:-1] "
                          "(don't assume x is 3-D)")
    passed("split_last: (..., D) -> (..., n, D // n) for 1-D, 3-D and 4-D inputs")


def split_last_values(split_last) -> None:
    x = torch.arange(2 * 12).reshape(2, 12).float()     # rows 0..11 and 12..23
    out = _split(split_last, x, 3)
    want = x.reshape(2, 3, 4)
    expect_shape(out, want.shape, "split_last(x, 3)", reread=SEC_RESHAPE)
    cands = {
        "an interleaved split (reshape to (..., D // n, n), then transpose): group i must hold the CONSECUTIVE "
        "channels i*(D//n) ... (i+1)*(D//n) - 1": x.reshape(2, 4, 3).transpose(-1, -2),
    }
    expect_close(out, want, "split_last(x, 3)", reread=SEC_RESHAPE,
                 hint=_named(out, cands, "group i holds channels i*(D//n) to (i+1)*(D//n) - 1, in order"),
                 inputs="x = arange(24).reshape(2, 12)")
    xt = torch.arange(24).reshape(4, 6).float().mT      # (6, 4), not contiguous
    out = _split(split_last, xt, 2)
    expect_close(out, xt.reshape(6, 2, 2), "split_last of a transposed (non-contiguous) input", reread=SEC_RESHAPE)
    passed("split_last: consecutive channels stay together; works on non-contiguous input")


def split_last_error(split_last) -> None:
    """ValueError when n does not divide D, and only then (a divisible D still splits, here on a 2-D x)."""
    x = torch.randn(2, 10)
    try:
        out = split_last(x, 3)
    except ValueError:
        out = None
    except NotImplementedError:
        call(split_last, x, 3, name="split_last", reread=SEC_RESHAPE)   # says "not implemented yet"
    except Exception as e:  # noqa: BLE001
        raise CheckFailed(f"split_last(x of shape (2, 10), n=3) raised {type(e).__name__}, not ValueError",
                          hint="check `D % n` first and `raise ValueError(...)` with a message that names D and n",
                          reread=SEC_RESHAPE) from None
    else:
        raise CheckFailed("split_last(x of shape (2, 10), n=3) did not raise", reread=SEC_RESHAPE,
                          hint="10 channels cannot be split into 3 equal groups: raise ValueError",
                          details=[f"it returned {type(out).__name__}"])
    x = torch.randn(2, 12)
    out = _split(split_last, x, 4)
    expect_shape(out, (2, 4, 3), "split_last(x of shape (2, 12), n=4)", reread=SEC_RESHAPE,
                 hint="12 channels split into 4 groups of 3: only a D that n does not divide is an error")
    expect_close(out, x.reshape(2, 4, 3), "split_last(x of shape (2, 12), n=4)", reread=SEC_RESHAPE)
    passed("split_last: raises ValueError when D is not divisible by n, and only then")


# ----------------------------------------------------------------------------------------
# batched_outer
# ----------------------------------------------------------------------------------------
def _outer(batched_outer, a, b):
    out = _call(batched_outer, a, b, name="batched_outer", reread=SEC_AXES, hints={
        "Expected 1-D": "torch.outer only takes two vectors; for a batch, insert axes with None and let "
                        "broadcasting multiply: (B, m, 1) * (B, 1, n)"})
    return expect_tensor(out, "batched_outer", reread=SEC_AXES)


def batched_outer_shape(batched_outer) -> None:
    a, b = torch.randn(2, 3), torch.randn(2, 4)
    out = _outer(batched_outer, a, b)
    if tuple(out.shape) == (2, 4, 3):
        raise CheckFailed("batched_outer returned (B, n, m) = (2, 4, 3)", reread=SEC_AXES,
                          hint="a's axis must come first: a as (B, m, 1) times b as (B, 1, n)")
    if tuple(out.shape) == (3, 4):
        raise CheckFailed("batched_outer returned (m, n) = (3, 4): the batch axis is gone", reread=SEC_EINSUM,
                          hint="an index missing after '->' is summed out: keep b in the output ('bi,bj->bij')")
    expect_shape(out, (2, 3, 4), "batched_outer(a, b)", inputs="a (2, 3), b (2, 4)", reread=SEC_AXES,
                 hint="one (m, n) matrix per batch element: (B, m, n)")
    passed("batched_outer: (B, m), (B, n) -> (B, m, n)")


def batched_outer_values(batched_outer) -> None:
    a = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    b = torch.tensor([[1.0, 10.0, 100.0], [3.0, 4.0, 5.0]])
    out = _outer(batched_outer, a, b)
    want = torch.stack([torch.outer(a[i], b[i]) for i in range(2)])
    expect_shape(out, want.shape, "batched_outer(a, b)", reread=SEC_AXES)
    cands = {"each matrix paired with the wrong batch element (a[0] with b[1]...)":
             torch.stack([torch.outer(a[1 - i], b[i]) for i in range(2)])}
    expect_close(
        out,
        want,
        "batched_outer(a, b)",
        reread=SEC_AXES,
        inputs="a = [[1, 2], [0, -1]], b = [[1, 10, 100], [3, 4, 5]]",
        hint=_named(out, cands, "out[k, i, j] must be a[k, i] * b[k, j]"),
    )
    passed("batched_outer: out[k, i, j] = a[k, i] * b[k, j]")


# ----------------------------------------------------------------------------------------
# einsum_matmul
# ----------------------------------------------------------------------------------------
def _einsum_mm(einsum_matmul, A, B):
    with forbid(matmul_builtins(), NO_MATMUL):
        out = _call(einsum_matmul, A, B, name="einsum_matmul", reread=SEC_EINSUM, hints={
            "no ellipsis": "batched inputs have extra leading axes: write '...' in front of each group of "
                           "letters (both inputs and the output) so einsum treats them as batch axes",
            "does not broadcast": "the summed letter must name A's LAST axis and B's SECOND-TO-LAST axis: "
                                  "A is (i, k), B is (k, j)"})
    return expect_tensor(out, "einsum_matmul", reread=SEC_EINSUM)


def einsum_matmul_2d(einsum_matmul) -> None:
    A = torch.tensor([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0]])          # (2, 3)
    Bm = torch.tensor([[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 0.0, 1.0], [3.0, 0.0, 1.0, 0.0]])  # (3, 4)
    out = _einsum_mm(einsum_matmul, A, Bm)
    want = A @ Bm
    if tuple(out.shape) == (4, 2):
        raise CheckFailed("einsum_matmul(A (2, 3), B (3, 4)) has shape (4, 2)", reread=SEC_EINSUM,
                          hint="the output letters are the wrong way round: '...->ij', not '->ji'")
    expect_shape(out, want.shape, "einsum_matmul(A, B)", inputs="A (2, 3), B (3, 4)", reread=SEC_EINSUM,
                 hint="(n, k) times (k, m) is (n, m): the shared letter k is the one summed out")
    expect_close(out, want, "einsum_matmul(A, B)", reread=SEC_EINSUM, inputs="A (2, 3), B (3, 4)",
                 hint="C[i, j] = sum over k of A[i, k] * B[k, j]: the SAME letter for A's columns and B's rows")
    passed("einsum_matmul: (n, k) @ (k, m) without @")


def einsum_matmul_batched(einsum_matmul) -> None:
    torch.manual_seed(0)
    for lead in [(2,), (2, 3), (2, 1, 3)]:
        A, Bm = torch.randn(*lead, 3, 4), torch.randn(*lead, 4, 5)
        out = _einsum_mm(einsum_matmul, A, Bm)
        expect_shape(out, (*lead, 3, 5), "einsum_matmul with leading (batch) axes",
                     inputs=f"A {tuple(A.shape)}, B {tuple(Bm.shape)}", reread=SEC_MATMUL,
                     hint="like @, leading axes are batch axes: '...' in einsum stands for all of them "
                          "(in front of each input's letters and of the output's)")
        expect_close(out, A @ Bm, "einsum_matmul with leading axes", reread=SEC_MATMUL,
                     inputs=f"A {tuple(A.shape)}, B {tuple(Bm.shape)}")
    passed("einsum_matmul: works with any number of leading batch axes, like @")


# ----------------------------------------------------------------------------------------
# center_tokens
# ----------------------------------------------------------------------------------------
def center_tokens_values(center_tokens) -> None:
    # T == C on purpose: the broadcasting bug runs without an error on this shape
    x = torch.tensor([[[1.0, 2.0, 3.0], [10.0, 10.0, 40.0], [0.0, -3.0, 3.0]]])   # (B, T, C) = (1, 3, 3)
    out = call(center_tokens, x, name="center_tokens", reread=SEC_BROADCAST)
    expect_tensor(out, "center_tokens", reread=SEC_BROADCAST)
    want = x - x.mean(-1, keepdim=True)
    expect_shape(out, want.shape, "center_tokens(x)", reread=SEC_BROADCAST, inputs="x (1, 3, 3)",
                 hint="subtracting never changes the shape: the mean must keep its axis (keepdim=True)")
    cands = {
        "x - x.mean(-1): without keepdim the (B, T) means line up with the CHANNEL axis (broadcasting from "
        "the right), so token t's mean is subtracted from channel t. Use keepdim=True":
            x - x.mean(-1),
        "the mean over time (dim=1): each token must be centred over its own channels (dim=-1)":
            x - x.mean(1, keepdim=True),
        "the mean of the whole tensor: centre each token separately": x - x.mean(),
        "a full normalisation (divided by the standard deviation too): only subtract the mean":
            (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True),
    }
    expect_close(out, want, "center_tokens(x)", reread=SEC_BROADCAST, inputs="x (B, T, C) = (1, 3, 3)",
                 hint=_named(out, cands, "each token vector minus its own mean over the channels"))
    row_means = out.mean(-1)
    if not close(row_means, torch.zeros_like(row_means), atol=1e-5):
        raise CheckFailed("center_tokens: token vectors don't have mean 0", reread=SEC_BROADCAST)
    x2 = torch.randn(2, 4, 6)
    out2 = call(center_tokens, x2, name="center_tokens", reread=SEC_BROADCAST)
    expect_close(expect_tensor(out2, "center_tokens"), x2 - x2.mean(-1, keepdim=True),
                 "center_tokens(x) with T != C", reread=SEC_BROADCAST, inputs="x (2, 4, 6)")
    passed("center_tokens: every token vector has mean 0 over its channels")


guard(globals())  # every check records warnings instead of printing them (core.guard)
