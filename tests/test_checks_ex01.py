"""Exercise 01's checks beyond the shared ones of tests/test_checks.py: the gradient checks are
independent of rnn_forward, and measure what the lecture plots."""

import torch

import nbrun
from attention_workbook.checks import graded

A = "01_rnn_limitations"


def test_gradient_checks_do_not_depend_on_rnn_forward():
    # a wrong rnn_forward must not cost the gradient_vs_distance points: the checks pass `forward`
    wrong = "def rnn_forward(x, h0, W_xh, W_hh, b):\n    return torch.zeros(x.shape[0], x.shape[1], h0.shape[1])\n"
    ns = nbrun.namespace(A, {"rnn_forward": wrong})
    for t, *_ in graded.TESTS[A]:
        if t.startswith("test_gradient_vs_distance"):
            assert nbrun.message(A, ns, t) is None, t
        elif t != "test_rnn_forward_shape":  # zeros have the right shape, wrong values
            assert nbrun.message(A, ns, t) is not None, t


def test_lecture_measurement_matches_the_exercise_definition():
    # the lecture plots the same quantity: VanillaRNN + the solution's gradient_vs_distance
    from attention_workbook.rnn import RNNConfig, VanillaRNN
    ns = nbrun.namespace(A)
    rnn = VanillaRNN(RNNConfig(d_in=3, d_hidden=5, weight_scale=0.8, seed=2)).double()
    x = torch.randn(2, 9, 3, dtype=torch.float64)
    xg = x.clone().requires_grad_(True)
    rnn(xg)[:, -1].sum().backward()
    lecture = xg.grad.norm(dim=(0, 2)).flip(0)
    h0 = torch.zeros(2, 5, dtype=torch.float64)
    ours = ns["gradient_vs_distance"](x, h0, rnn.W_xh.detach(), rnn.W_hh.detach(), rnn.b.detach())
    assert torch.allclose(lecture, ours)
    assert ours[0] > ours[-1]  # decays with distance at weight_scale 0.8
