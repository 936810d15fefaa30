"""The vanilla RNN of lecture 01 against a step-by-step recurrence written independently."""

import torch

from attention_workbook.rnn import (
    PASSAGE,
    RNNConfig,
    VanillaRNN,
    orthogonal,
    seconds_per_call,
    sequential_steps_attention,
    sequential_steps_rnn,
    tokens,
)


def _reference(x, h0, W_xh, W_hh, b):
    # scalar loops over units: no matrix product, so a transposed weight would show
    B, T, D = x.shape
    H = W_hh.shape[0]
    out = torch.zeros(B, T, H, dtype=torch.float64)
    for bi in range(B):
        h = h0[bi].double().clone()
        for t in range(T):
            new = torch.zeros(H, dtype=torch.float64)
            for j in range(H):
                s = float(b[j])
                s += sum(float(x[bi, t, i]) * float(W_xh[i, j]) for i in range(D))
                s += sum(float(h[k]) * float(W_hh[k, j]) for k in range(H))
                new[j] = torch.tanh(torch.tensor(s, dtype=torch.float64))
            h = new
            out[bi, t] = h
    return out


def test_forward_matches_scalar_recurrence():
    torch.manual_seed(0)
    rnn = VanillaRNN(RNNConfig(d_in=3, d_hidden=4, weight_scale=0.9, seed=1))
    with torch.no_grad():
        rnn.b.copy_(torch.randn(4))
    x = torch.randn(2, 5, 3)
    h0 = torch.randn(2, 4)
    out = rnn(x, h0)
    assert out.shape == (2, 5, 4)
    ref = _reference(x, h0, rnn.W_xh.detach(), rnn.W_hh.detach(), rnn.b.detach())
    assert torch.allclose(out.double(), ref, atol=1e-5)


def test_default_h0_is_zero():
    rnn = VanillaRNN(RNNConfig(d_in=3, d_hidden=4))
    x = torch.randn(1, 3, 3)
    assert torch.allclose(rnn(x), rnn(x, torch.zeros(1, 4)))


def test_weight_scale_is_spectral_radius():
    for scale in (0.5, 1.0, 1.7):
        rnn = VanillaRNN(RNNConfig(d_hidden=12, weight_scale=scale, seed=3))
        sv = torch.linalg.svdvals(rnn.W_hh.detach())
        assert torch.allclose(sv, torch.full_like(sv, scale), atol=1e-5)
    q = orthogonal(6, torch.Generator().manual_seed(0))
    assert torch.allclose(q @ q.T, torch.eye(6), atol=1e-5)


def test_step_counts_and_timer():
    assert sequential_steps_rnn(4) == [1, 2, 3, 4]
    assert sequential_steps_attention(4) == [1, 1, 1, 1]
    calls = []
    s = seconds_per_call(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5 and s >= 0.0


def test_passage_has_far_reference():
    toks = tokens(PASSAGE)
    assert toks == tokens()  # the default text is the passage
    assert toks[:2] == ["Oskar", "Lindqvist"]
    assert toks[-3:] == ["his", "chart", "."]
    # "his" is the only pronoun: nothing nearer the end can stand in for the name
    assert [t for t in toks if t.lower() in {"he", "him", "his", "she", "her", "hers"}] == ["his"]
    assert toks.index("his") - 1 > 60  # "his" is more than 60 steps after "Lindqvist"


def test_repr_names_the_configuration():
    text = repr(VanillaRNN(RNNConfig(d_in=3, d_hidden=4, weight_scale=0.9)))
    assert text == "VanillaRNN(d_in=3, d_hidden=4, weight_scale=0.9)"
