"""Hidden checks for exercise 01 (rnn_forward, gradient_vs_distance): randomized shapes, fixed seeds.

Oracles, independent of the solution:
* rnn_forward: the recurrence in float64 with einsum, one step at a time.
* gradient_vs_distance: backpropagation through time written out by hand in float64 (no
  autograd): delta_T = 1; g_t = delta_t * (1 - h_t^2); dL/dx_t = g_t W_xh^T; delta_{t-1} = g_t W_hh^T.
Tolerance: rnn_forward atol 1e-5 + rtol 1e-4 (float32); gradients atol 1e-6 + rtol 1e-4 relative
to the largest norm (float64 inputs), so decayed entries of 1e-12 compare as well as large ones.
"""

from __future__ import annotations

import torch

from . import _adapter as A
from ._base import guard, CheckFailed, call, close, fail_values, own_code, randint, rng

TOL = "atol 1e-5 + rtol 1e-4"


def _oracle_states(x, h0, W_xh, W_hh, b):
    x, h, W_xh, W_hh, b = (t.double() for t in (x, h0, W_xh, W_hh, b))
    out = []
    for t in range(x.shape[1]):
        pre = torch.einsum("bd,dh->bh", x[:, t], W_xh) + torch.einsum("bk,kh->bh", h, W_hh) + b
        h = torch.tanh(pre)
        out.append(h)
    return torch.stack(out, dim=1)          # (B, T, H) float64


def _oracle_gradient_norms(x, h0, W_xh, W_hh, b):
    hs = _oracle_states(x, h0, W_xh, W_hh, b)           # (B, T, H)
    W_xh, W_hh = W_xh.double(), W_hh.double()
    B, T, H = hs.shape
    delta = torch.ones(B, H, dtype=torch.float64)       # dL/dh_T for L = sum of the last state
    norms = torch.zeros(T, dtype=torch.float64)
    for t in range(T - 1, -1, -1):
        g = delta * (1 - hs[:, t] ** 2)                  # through tanh
        dx = torch.einsum("bh,dh->bd", g, W_xh)          # dL/dx_t
        norms[T - 1 - t] = dx.pow(2).sum().sqrt()
        delta = torch.einsum("bh,kh->bk", g, W_hh)       # dL/dh_{t-1}
    return norms


def _case(g, dtype=torch.float32, scale=None):
    B, T, D, H = randint(g, 1, 4), randint(g, 1, 8), randint(g, 1, 6), randint(g, 1, 6)
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    h0 = torch.randn(B, H, generator=g, dtype=torch.float64) * 0.8
    W_xh = torch.randn(D, H, generator=g, dtype=torch.float64) / D ** 0.5
    s = scale if scale is not None else 0.5 + float(torch.rand(1, generator=g)) * 1.2
    W_hh = torch.randn(H, H, generator=g, dtype=torch.float64) * s / H ** 0.5
    b = torch.randn(H, generator=g, dtype=torch.float64) * 0.3
    return tuple(t.to(dtype) for t in (x, h0, W_xh, W_hh, b))


def _desc(args):
    x, h0, W_xh, W_hh, b = args
    return f"x {tuple(x.shape)}, h0 {tuple(h0.shape)}, W_xh {tuple(W_xh.shape)}, W_hh {tuple(W_hh.shape)}"


def _states(rnn_forward, args):
    out = call(rnn_forward, *args, name="rnn_forward")
    if not isinstance(out, torch.Tensor):
        raise CheckFailed("hidden test: rnn_forward did not return a tensor")
    return out


def rnn_forward_shape(rnn_forward) -> None:
    own_code(rnn_forward, "rnn_forward")
    g = rng(101)
    for _ in range(5):
        args = _case(g)
        B, T, _ = args[0].shape
        H = args[1].shape[1]
        out = _states(rnn_forward, args)
        if tuple(out.shape) != (B, T, H):
            raise CheckFailed("hidden test: rnn_forward has the wrong shape",
                              details=[f"case: {_desc(args)}; expected {(B, T, H)}, got {tuple(out.shape)}"])


def rnn_forward_values(rnn_forward) -> None:
    g = rng(102)
    for _ in range(5):
        args = list(_case(g))
        args[1] = torch.zeros_like(args[1])             # h0 = 0 here; test_rnn_forward_h0 covers h0
        out = _states(rnn_forward, tuple(args))
        want = _oracle_states(*args).float()
        if not close(out, want):
            fail_values("rnn_forward(...)", out, want, _desc(args) + ", h0 = 0", TOL)


def rnn_forward_h0(rnn_forward) -> None:
    g = rng(103)
    for i in range(5):
        args = _case(g)
        if i == 0:      # a single step: the output is tanh(x_0 W_xh + h0 W_hh + b) itself
            args = (args[0][:, :1],) + args[1:]
        out = _states(rnn_forward, args)
        want = _oracle_states(*args).float()
        if not close(out, want):
            fail_values("rnn_forward(...) with a non-zero h0", out, want, _desc(args), TOL)


def _norms(gradient_vs_distance, args):
    out = call(gradient_vs_distance, *args, forward=A.make("ex01.reference_forward"), name="gradient_vs_distance")
    if not isinstance(out, torch.Tensor):
        raise CheckFailed("hidden test: gradient_vs_distance did not return a tensor")
    return out.detach()


def _compare(out, want, args):
    if tuple(out.shape) != tuple(want.shape):
        fail_values("gradient_vs_distance(...)", out, want, _desc(args), "shape")
    if not close(out.double(), want, atol=1e-6, rtol=1e-4):
        fail_values("gradient_vs_distance(...)", out, want, _desc(args), "atol 1e-6 + rtol 1e-4 * max norm")


def gradient_vs_distance_shape(gradient_vs_distance) -> None:
    own_code(gradient_vs_distance, "gradient_vs_distance")
    g = rng(104)
    for _ in range(4):
        args = _case(g, torch.float64)
        T = args[0].shape[1]
        out = _norms(gradient_vs_distance, args)
        if tuple(out.shape) != (T,):
            raise CheckFailed("hidden test: gradient_vs_distance has the wrong shape",
                              details=[f"case: {_desc(args)}; expected ({T},), got {tuple(out.shape)}"])
        if args[0].requires_grad or args[0].grad is not None:
            raise CheckFailed("hidden test: gradient_vs_distance modified the caller's x")
    # the gradients must flow through the `forward` it is handed: here an RNN run on 2 x, whose
    # gradient with respect to x is twice the plain one's at 2 x
    args = _case(g, torch.float64)
    out = call(gradient_vs_distance, *args, forward=A.make("ex01.doubled_forward"), name="gradient_vs_distance")
    want = 2 * _oracle_gradient_norms(2 * args[0], *args[1:])
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want.shape) or not close(
            out.detach().double(), want, atol=1e-6, rtol=1e-4):
        raise CheckFailed("hidden test: gradient_vs_distance does not differentiate the `forward` it is given",
                          details=[f"case: {_desc(args)}, forward = the RNN applied to 2 x"])


def gradient_vs_distance_single(gradient_vs_distance) -> None:
    g = rng(105)
    for scale in (0.5, 1.0, 1.6):
        args = list(_case(g, torch.float64, scale))
        args[0], args[1] = args[0][:1], args[1][:1]      # one sequence
        args[0] = torch.cat([args[0], torch.randn(1, 6, args[0].shape[2], generator=g, dtype=torch.float64)], 1)
        _compare(_norms(gradient_vs_distance, tuple(args)), _oracle_gradient_norms(*args), tuple(args))


def gradient_vs_distance_batch(gradient_vs_distance) -> None:
    g = rng(106)
    for _ in range(4):
        args = list(_case(g, torch.float64))
        B = max(2, args[0].shape[0])
        args[0] = torch.randn(B, args[0].shape[1] + 2, args[0].shape[2], generator=g, dtype=torch.float64)
        args[1] = torch.randn(B, args[1].shape[1], generator=g, dtype=torch.float64) * 0.8
        _compare(_norms(gradient_vs_distance, tuple(args)), _oracle_gradient_norms(*args), tuple(args))


guard(globals())  # every check records warnings instead of printing them (core.guard)
