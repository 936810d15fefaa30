"""Battery for exercise 01 (rnn_forward, gradient_vs_distance).

Oracle: PyTorch's ``nn.RNN`` (tanh) loaded with the same weights (its matrices act from the
left, so it holds W_xh^T and W_hh^T), in float64; gradients through it by autograd.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .. import ex01 as visible
from ._util import CheckFailed, call, expect, guard, randint, tensor


def _rnn(W_xh, W_hh, b) -> nn.RNN:
    D, H = W_xh.shape
    rnn = nn.RNN(D, H, nonlinearity="tanh", batch_first=True).double()
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T)
        rnn.weight_hh_l0.copy_(W_hh.T)
        rnn.bias_ih_l0.copy_(b)
        rnn.bias_hh_l0.zero_()
    return rnn


def _oracle(x, h0, W_xh, W_hh, b):
    with torch.no_grad():
        out, _ = _rnn(W_xh.double(), W_hh.double(), b.double())(x.double(), h0.double()[None])
    return out.to(x.dtype)


def _case(g, dtype=torch.float32, scale=None, B=None, T=None):
    B = B or randint(g, 1, 5)
    T = T or randint(g, 1, 9)
    D, H = randint(g, 1, 7), randint(g, 1, 7)
    s = scale if scale is not None else 0.4 + float(torch.rand(1, generator=g)) * 1.3
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    h0 = torch.randn(B, H, generator=g, dtype=torch.float64) * 0.7
    W_xh = torch.randn(D, H, generator=g, dtype=torch.float64) / D ** 0.5
    W_hh = torch.randn(H, H, generator=g, dtype=torch.float64) * s / H ** 0.5
    b = torch.randn(H, generator=g, dtype=torch.float64) * 0.3
    return tuple(t.to(dtype) for t in (x, h0, W_xh, W_hh, b))


def _desc(args):
    x, h0, W_xh, W_hh, _ = args
    return f"x {tuple(x.shape)}, h0 {tuple(h0.shape)}, W_xh {tuple(W_xh.shape)}, W_hh {tuple(W_hh.shape)}"


def rnn_forward_shape(rnn_forward, g) -> None:
    for _ in range(5):
        args = _case(g)
        (B, T, _), H = args[0].shape, args[1].shape[1]
        out = tensor(call(rnn_forward, *args, name="rnn_forward"), "rnn_forward", _desc(args))
        if tuple(out.shape) != (B, T, H):
            raise CheckFailed("rnn_forward has the wrong shape",
                              details=[f"case: {_desc(args)}; expected {(B, T, H)}, got {tuple(out.shape)}"])


def rnn_forward_values(rnn_forward, g) -> None:
    for _ in range(5):
        x, h0, W_xh, W_hh, b = _case(g)
        args = (x, torch.zeros_like(h0), W_xh, W_hh, b)
        out = call(rnn_forward, *args, name="rnn_forward")
        expect(out, _oracle(*args), "rnn_forward(...)", _desc(args) + ", h0 = 0",
               variants=lambda: visible.rnn_wrong_variants(*args), reread=visible.SEC_UNROLLED)


def rnn_forward_h0(rnn_forward, g) -> None:
    for i in range(5):
        args = _case(g, T=1 if i == 0 else None, B=1 if i == 1 else None)
        out = call(rnn_forward, *args, name="rnn_forward")
        expect(out, _oracle(*args), "rnn_forward(...) with a non-zero h0", _desc(args),
               variants=lambda: visible.rnn_wrong_variants(*args), reread=visible.SEC_UNROLLED)


def _reference_forward(x, h0, W_xh, W_hh, b):
    """What the exercise passes as `forward`: differentiable, any dtype."""
    out, _ = _rnn(W_xh.detach(), W_hh.detach(), b.detach()).to(x.dtype)(x, h0[None])
    return out


def _oracle_norms(x, h0, W_xh, W_hh, b):
    xx = x.detach().double().clone().requires_grad_(True)
    out, _ = _rnn(W_xh.double(), W_hh.double(), b.double())(xx, h0.double()[None])
    (grad,) = torch.autograd.grad(out[:, -1].sum(), xx)          # (B, T, D)
    return grad.pow(2).sum(dim=(0, 2)).sqrt().flip(0)


def _norms(gradient_vs_distance, args):
    out = call(gradient_vs_distance, *args, forward=_reference_forward, name="gradient_vs_distance")
    return tensor(out, "gradient_vs_distance", _desc(args)).detach()


def _compare(out, args):
    expect(out.double(), _oracle_norms(*args), "gradient_vs_distance(...)", _desc(args), atol=1e-6, rtol=1e-4,
           variants=lambda: {k: v for k, v in visible._grad_variants(*args).items() if k != "correct"},
           reread=visible.SEC_DISTANCE)


def gradient_vs_distance_shape(gradient_vs_distance, g) -> None:
    for _ in range(4):
        args = _case(g, torch.float64)
        T = args[0].shape[1]
        out = _norms(gradient_vs_distance, args)
        if tuple(out.shape) != (T,):
            raise CheckFailed("gradient_vs_distance has the wrong shape",
                              details=[f"case: {_desc(args)}; expected ({T},), got {tuple(out.shape)}"])
        if args[0].requires_grad or args[0].grad is not None:
            raise CheckFailed("gradient_vs_distance modified the caller's x (requires_grad / .grad)",
                              hint="work on a copy: x.detach().clone().requires_grad_(True)")


def gradient_vs_distance_single(gradient_vs_distance, g) -> None:
    for scale in (0.6, 1.1, 1.7):
        args = _case(g, torch.float64, scale, B=1, T=randint(g, 5, 10))
        _compare(_norms(gradient_vs_distance, args), args)


def gradient_vs_distance_batch(gradient_vs_distance, g) -> None:
    for _ in range(4):
        args = _case(g, torch.float64, B=randint(g, 2, 5), T=randint(g, 3, 9))
        _compare(_norms(gradient_vs_distance, args), args)


guard(globals())
