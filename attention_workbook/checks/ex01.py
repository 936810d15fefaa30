"""Visible checks for exercise 01_rnn_limitations: ``rnn_forward`` and ``gradient_vs_distance``.

Small, readable inputs; when a result is wrong the check recomputes what the common mistakes
would have produced and names the one the student's output matches.
"""

from __future__ import annotations

import torch

from .core import guard, CheckFailed, call, close, expect_close, expect_shape, expect_tensor, first_match, passed

LECTURE = "lectures/01_rnn_limitations.ipynb"
SEC_UNROLLED = f"lecture 01, section 1 'The RNN, unrolled' ({LECTURE}#unrolled)"
SEC_DISTANCE = f"lecture 01, section 3 'Linear interaction distance' ({LECTURE}#distance)"


# ----------------------------------------------------------------------------------------
# what the recurrence and its common mistakes compute
# ----------------------------------------------------------------------------------------
def _unroll(x, h0, step, keep_h0=False):
    h, states = h0, []
    for t in range(x.shape[1]):
        if keep_h0:
            states.append(h)
        h = step(x[:, t], h)
        if not keep_h0:
            states.append(h)
    return torch.stack(states, dim=1)


def reference_forward(x, h0, W_xh, W_hh, b):
    """h_t = tanh(x_t W_xh + h_{t-1} W_hh + b) for t = 1..T; returns (B, T, H)."""
    return _unroll(x, h0, lambda xt, h: torch.tanh(xt @ W_xh + h @ W_hh + b))


def rnn_wrong_variants(x, h0, W_xh, W_hh, b) -> dict[str, torch.Tensor]:
    return {
        "h @ W_hh.T: the recurrent matrix is used transposed. In this workbook weights act from the right, "
        "h_{t-1} @ W_hh with W_hh of shape (H, H) (rows: old state, columns: new state)":
            _unroll(x, h0, lambda xt, h: torch.tanh(xt @ W_xh + h @ W_hh.T + b)),
        "no tanh: apply torch.tanh to the whole sum x_t W_xh + h W_hh + b":
            _unroll(x, h0, lambda xt, h: xt @ W_xh + h @ W_hh + b),
        "relu instead of tanh: this RNN squashes with torch.tanh":
            _unroll(x, h0, lambda xt, h: torch.relu(xt @ W_xh + h @ W_hh + b)),
        "tanh applied to x_t W_xh only: the recurrent term and the bias must be inside the tanh":
            _unroll(x, h0, lambda xt, h: torch.tanh(xt @ W_xh) + h @ W_hh + b),
        "the states shifted by one: you returned h_0 ... h_{T-1}. Return the states AFTER each step, "
        "h_1 ... h_T (do not include h0)":
            _unroll(x, h0, lambda xt, h: torch.tanh(xt @ W_xh + h @ W_hh + b), keep_h0=True),
        "a forward pass that ignores h0 (starts from zeros): the first step must use the h0 you are given":
            reference_forward(x, torch.zeros_like(h0), W_xh, W_hh, b),
    }


def _inputs(seed, B, T, D, H, h0_zero=False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g, dtype=dtype)
    h0 = torch.zeros(B, H, dtype=dtype) if h0_zero else torch.randn(B, H, generator=g, dtype=dtype)
    W_xh = torch.randn(D, H, generator=g, dtype=dtype) / D ** 0.5
    W_hh = torch.randn(H, H, generator=g, dtype=dtype) / H ** 0.5          # not symmetric: a transpose shows
    b = torch.randn(H, generator=g, dtype=dtype) * 0.5
    return x, h0, W_xh, W_hh, b


def _student_rnn(rnn_forward, args):
    try:
        out = call(rnn_forward, *args, name="rnn_forward", reread=SEC_UNROLLED)
    except CheckFailed as e:
        if "must match the size" in e.title or "cannot be multiplied" in e.title:
            raise CheckFailed(e.title, reread=SEC_UNROLLED, student_tb=e.student_tb,
                              hint="x is batch-first, (B, T, D_in): the t-th input of every sequence is x[:, t] "
                                   "(B, D_in), not x[t]; loop over range(x.shape[1])") from None
        raise
    return expect_tensor(out, "rnn_forward", reread=SEC_UNROLLED)


# ----------------------------------------------------------------------------------------
# rnn_forward
# ----------------------------------------------------------------------------------------
def rnn_forward_shape(rnn_forward) -> None:
    B, T, D, H = 2, 5, 3, 4
    out = _student_rnn(rnn_forward, _inputs(0, B, T, D, H))
    if tuple(out.shape) == (B, H):
        raise CheckFailed("rnn_forward returned only the last state, shape (B, H) = (2, 4)", reread=SEC_UNROLLED,
                          hint="collect h after every step in a list and return torch.stack(states, dim=1): (B, T, H)")
    if tuple(out.shape) == (T, B, H):
        raise CheckFailed("rnn_forward returned (T, B, H) = (5, 2, 4)", reread=SEC_UNROLLED,
                          hint="stack the states along dim=1 so time is the second axis: (B, T, H)")
    if tuple(out.shape) == (B, T + 1, H):
        raise CheckFailed("rnn_forward returned T + 1 states", reread=SEC_UNROLLED,
                          hint="return h_1 ... h_T, one state per input; h0 is not part of the output")
    expect_shape(out, (B, T, H), "rnn_forward(x, h0, W_xh, W_hh, b)", reread=SEC_UNROLLED,
                 inputs="x (B, T, D_in) = (2, 5, 3), h0 (2, 4), W_xh (3, 4), W_hh (4, 4), b (4,)",
                 hint="x[:, t] is the t-th input of every sequence, (B, D_in); loop over t = 0 .. T-1")
    passed("rnn_forward: (B, T, D_in) -> (B, T, H)")


def _rnn_values(rnn_forward, args, what):
    out = _student_rnn(rnn_forward, args)
    want = reference_forward(*args)
    expect_shape(out, want.shape, what, reread=SEC_UNROLLED)
    if not close(out, want):
        name = first_match(out, rnn_wrong_variants(*args))
        raise CheckFailed(f"{what} has the wrong values", reread=SEC_UNROLLED,
                          hint=f"your result equals {name}" if name else
                          "h_t = tanh(x_t @ W_xh + h_{t-1} @ W_hh + b), starting from h0",
                          details=_first_difference(out, want))


def _first_difference(out, want) -> list[str]:
    bad = ((out.detach().double() - want.double()).abs() > 1e-4).any(-1)     # (B, T)
    b, t = [int(i) for i in bad.nonzero()[0]] if bool(bad.any()) else (0, 0)
    return [f"first wrong state: sequence {b}, step t={t}",
            f"  expected {[round(v, 4) for v in want[b, t].tolist()]}",
            f"  yours    {[round(v, 4) for v in out[b, t].tolist()]}"]


def rnn_forward_values(rnn_forward) -> None:
    args = _inputs(1, 2, 4, 3, 3, h0_zero=True)
    _rnn_values(rnn_forward, args, "rnn_forward (h0 = 0)")
    passed("rnn_forward: values match h_t = tanh(x_t W_xh + h_{t-1} W_hh + b)")


def rnn_forward_h0(rnn_forward) -> None:
    args = _inputs(2, 3, 4, 2, 5)
    _rnn_values(rnn_forward, args, "rnn_forward with a non-zero h0")
    args = _inputs(3, 2, 1, 3, 4)
    _rnn_values(rnn_forward, args, "rnn_forward with T = 1")
    args = _inputs(7, 1, 3, 2, 3)
    _rnn_values(rnn_forward, args, "rnn_forward with a batch of one sequence (B = 1)")
    passed("rnn_forward: starts from the given h0 (and works for T = 1 and B = 1)")


# ----------------------------------------------------------------------------------------
# gradient_vs_distance
# ----------------------------------------------------------------------------------------
def _grad_variants(x, h0, W_xh, W_hh, b) -> dict[str, torch.Tensor]:
    def grads(loss_fn):
        xx = x.detach().clone().requires_grad_(True)
        hs = reference_forward(xx, h0, W_xh, W_hh, b)
        (g,) = torch.autograd.grad(loss_fn(hs), xx)
        return g                                            # (B, T, D_in)

    last = grads(lambda hs: hs[:, -1].sum())
    return {
        "correct": last.norm(dim=(0, 2)).flip(0),
        "the norms in time order (index t), not by distance: entry k must belong to the input k steps "
        "BEFORE the last one. Reverse the order (.flip(0))": last.norm(dim=(0, 2)),
        "the gradient of the sum of ALL hidden states: use only the last hidden state, hs[:, -1]":
            grads(lambda hs: hs.sum()).norm(dim=(0, 2)).flip(0),
        "squared norms: take the square root (torch.linalg.vector_norm or .norm)":
            (last ** 2).sum(dim=(0, 2)).flip(0),
        "the gradient of the NORM of the last state: the scalar to differentiate is the sum of the last hidden state":
            grads(lambda hs: hs[:, -1].norm()).norm(dim=(0, 2)).flip(0),
        "a per-sequence norm averaged over the batch: take one norm over the batch and input axes together "
        "(dims 0 and 2)": last.norm(dim=2).mean(0).flip(0),
        "a per-sequence norm summed over the batch: take one norm over the batch and input axes together "
        "(dims 0 and 2)": last.norm(dim=2).sum(0).flip(0),
    }


DTYPE_HINT = ("keep x's dtype: the checks (like the Try-it cell) pass float64 tensors, and a copy converted to "
              "another dtype no longer matches the weights; detach and clone, nothing else")


def _student_grad(gradient_vs_distance, args, forward=reference_forward):
    try:
        out = call(gradient_vs_distance, *args, forward=forward, name="gradient_vs_distance", reread=SEC_DISTANCE)
    except CheckFailed as e:
        if "dtype" in e.title or "scalar type" in e.title:
            raise CheckFailed(e.title, hint=DTYPE_HINT, reread=SEC_DISTANCE, student_tb=e.student_tb) from None
        raise
    out = expect_tensor(out, "gradient_vs_distance", reread=SEC_DISTANCE)
    return out.detach()


def gradient_vs_distance_shape(gradient_vs_distance) -> None:
    B, T, D, H = 2, 6, 3, 4
    x, h0, W_xh, W_hh, b = _inputs(4, B, T, D, H, dtype=torch.float64)
    calls = []

    def counting_forward(*a, **k):
        calls.append(1)
        return reference_forward(*a, **k)

    out = _student_grad(gradient_vs_distance, (x, h0, W_xh, W_hh, b), forward=counting_forward)
    if not calls:
        raise CheckFailed("gradient_vs_distance never called the `forward` function it was given",
                          reread=SEC_DISTANCE,
                          hint="compute the hidden states with hs = forward(x, h0, W_xh, W_hh, b) (not rnn_forward "
                               "directly): the checks pass a reference RNN, so this exercise is graded on its own")
    if x.requires_grad or x.grad is not None:
        raise CheckFailed("gradient_vs_distance changed the caller's x (requires_grad or .grad)", reread=SEC_DISTANCE,
                          hint="work on a copy: x = x.detach().clone().requires_grad_(True)")
    if out.numel() == 1:
        raise CheckFailed("gradient_vs_distance returned a single number", reread=SEC_DISTANCE,
                          hint="one norm per input position: reduce the (B, T, D_in) gradient over dims 0 and 2 only")
    expect_shape(out, (T,), "gradient_vs_distance(...)", reread=SEC_DISTANCE,
                 inputs="x (B, T, D_in) = (2, 6, 3)",
                 hint="a 1-D tensor with one norm per distance k = 0 .. T-1: x.grad.norm(dim=(0, 2)) is (T,)")
    passed("gradient_vs_distance: one norm per distance, shape (T,); x left untouched; uses `forward`")


def _grad_values(gradient_vs_distance, args, what):
    out = _student_grad(gradient_vs_distance, args)
    cands = _grad_variants(*args)
    want = cands.pop("correct")
    expect_shape(out, want.shape, what, reread=SEC_DISTANCE)
    expect_close(out.double(), want.double(), what, reread=SEC_DISTANCE, atol=1e-6, rtol=1e-4,
                 hint=(lambda n: f"your result equals {n}" if n else
                       "entry k = || d(sum of h_{T-1}) / d x_{T-1-k} ||, one norm over batch and input axes")(
                     first_match(out.double(), {k: v.double() for k, v in cands.items()}, atol=1e-6)))


def gradient_vs_distance_single(gradient_vs_distance) -> None:
    args = _inputs(5, 1, 7, 3, 4, dtype=torch.float64)
    _grad_values(gradient_vs_distance, args, "gradient_vs_distance for one sequence")
    passed("gradient_vs_distance: the norms match d sum(h_T) / d x_{T-k}, ordered by distance k")


def gradient_vs_distance_batch(gradient_vs_distance) -> None:
    args = _inputs(6, 3, 5, 2, 4, dtype=torch.float64)
    _grad_values(gradient_vs_distance, args, "gradient_vs_distance for a batch of 3 sequences")
    passed("gradient_vs_distance: one norm over the batch and input axes together")


guard(globals())  # every check records warnings instead of printing them (core.guard)
