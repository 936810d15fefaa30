"""Exercise 03 beyond the shared checks of tests/test_checks.py: the three versions agree as the
lecture says, and the batch hint names the `.T` mistake."""

import torch

import nbrun

A = "03_simplified_self_attention"


def test_loops_and_matrix_agree_and_the_lecture_sentence():
    ns = nbrun.namespace(A)
    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(ns["simple_self_attention_loops"](x), ns["simple_self_attention"](x), atol=1e-5)
    # softmax version: every output is a convex combination of the inputs (rows of weights sum to 1)
    y = ns["softmax_self_attention"](x)
    assert (y.amax(-2) <= x.amax(-2) + 1e-5).all() and (y.amin(-2) >= x.amin(-2) - 1e-5).all()


def test_batch_hint_names_dot_T():
    wrong = "def simple_self_attention(x):\n    return x @ x.T @ x / x.shape[-2]\n"
    ns = nbrun.namespace(A, {"simple_self_attention": wrong})
    msg = nbrun.message(A, ns, "test_simple_batch")
    assert msg and "x.transpose(-2, -1)" in msg
