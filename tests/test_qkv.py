"""Unit tests of attention_workbook.qkv (the reference code of lecture 04)."""

import math

import pytest
import torch
import torch.nn.functional as F

from attention_workbook import qkv


def test_causal_mask_is_lower_triangle_bool():
    m = qkv.causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            assert bool(m[i, j]) == (j <= i)


def test_padding_mask_shape_and_values():
    m = qkv.padding_mask([3, 1, 4], 4)
    assert m.dtype == torch.bool and m.shape == (3, 1, 4)
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(m[:, 0], expected)


def test_stable_softmax_matches_torch_and_survives_large_scores():
    s = torch.randn(3, 5, 7) * 10
    assert torch.allclose(qkv.stable_softmax(s), torch.softmax(s, dim=-1), atol=1e-6)
    big = torch.tensor([[1000.0, 1001.0, 1002.0]])
    out = qkv.stable_softmax(big)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, torch.softmax(torch.tensor([[0.0, 1.0, 2.0]]), dim=-1))
    assert torch.allclose(qkv.stable_softmax(s, dim=0), torch.softmax(s, dim=0), atol=1e-6)


@pytest.mark.parametrize("with_mask", [False, True])
def test_attention_matches_pytorch(with_mask):
    g = torch.Generator().manual_seed(0)
    B, H, Tq, Tk, d, dv = 2, 3, 4, 6, 5, 7
    q, k, v = (
        torch.randn(B, H, Tq, d, generator=g),
        torch.randn(B, H, Tk, d, generator=g),
        torch.randn(B, H, Tk, dv, generator=g),
    )
    mask = (torch.rand(B, 1, Tq, Tk, generator=g) > 0.4) if with_mask else None
    if mask is not None:
        mask[..., 0] = True  # every query keeps at least one key
    out, w = qkv.attention(q, k, v, mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.shape == (B, H, Tq, dv) and w.shape == (B, H, Tq, Tk)
    assert torch.allclose(out, ref, atol=1e-5)
    assert torch.allclose(w.sum(-1), torch.ones(B, H, Tq), atol=1e-6)
    if mask is not None:
        assert (w[~mask.expand_as(w)] == 0).all()


def test_attention_scale_and_temperature():
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(3, 8, generator=g), torch.randn(5, 8, generator=g), torch.randn(5, 2, generator=g)
    _, w_raw = qkv.attention(q, k, v, scale=False)
    assert torch.allclose(w_raw, torch.softmax(q @ k.T, dim=-1), atol=1e-6)
    _, w_t = qkv.attention(q, k, v, scale=True, temperature=2.0)
    assert torch.allclose(w_t, torch.softmax(q @ k.T / math.sqrt(8) / 2.0, dim=-1), atol=1e-6)


def test_padding_and_causal_masks_combine_by_broadcasting():
    m = qkv.causal_mask(5) & qkv.padding_mask([5, 2], 5)
    assert m.shape == (2, 5, 5)
    assert not m[1, 4, 3] and m[1, 4, 1] and not m[0, 1, 2] and m[0, 4, 4]


def test_dot_product_spread_follows_d():
    dims = [4, 64, 256]
    raw, scaled = qkv.dot_product_spread(dims, n_pairs=3000)
    for d, r, s in zip(dims, raw, scaled):
        assert 0.8 * d < r < 1.2 * d  # variance of q.k is about d
        assert 0.8 < s < 1.2  # after / sqrt(d) about 1


def test_softmax_peak_saturates_only_without_scaling():
    out = qkv.softmax_peak([4, 512], T=16, n_rows=200)
    assert out["peak_raw"][1] > 0.85 and out["peak_scaled"][1] < 0.4
    assert out["grad_raw"][1] < 0.5 * out["grad_scaled"][1]


def test_word_table_and_sentence_embeddings():
    t = qkv.word_table()
    assert t.words == list(dict.fromkeys(qkv.SENTENCE))  # distinct words, sentence order
    assert t.keys.shape == (len(t.words), len(qkv.FEATURES))
    assert torch.equal(t.values, torch.eye(len(t.words)))
    assert torch.equal(t.keys[t.words.index("pilot")], torch.tensor([1.0, 0, 0, 1, 0, 0]))
    x = qkv.sentence_embeddings()
    assert x.shape == (len(qkv.SENTENCE), len(qkv.FEATURES))
    assert torch.equal(x, qkv.sentence_embeddings())  # seeded, reproducible


def test_feature_query_soft_lookup_finds_the_animate_noun():
    q = qkv.feature_query(2.0, noun=1, animate=1)
    assert torch.equal(q, torch.tensor([2.0, 0, 0, 2, 0, 0]))
    t = qkv.word_table()
    answer = torch.softmax(t.keys @ q, dim=-1) @ t.values  # the lecture's recap of lecture 02
    assert t.words[int(answer.argmax())] == "pilot" and float(answer.max()) > 0.7
    with pytest.raises(ValueError, match="unknown features"):
        qkv.feature_query(colour=1)


def test_draw_shape_flow_draws_every_matrix_to_its_shape():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = qkv.draw_shape_flow(Tq=4, Tk=6, d_model=5, d=3, dv=2)
    left, right = fig.axes
    # cells per panel: X, W_q, Q; X_kv, W_k, K; X_kv, W_v, V  |  Q, K^T, S, A; A, V, Y
    assert len(left.patches) == 4 * 5 + 5 * 3 + 4 * 3 + 6 * 5 + 5 * 3 + 6 * 3 + 6 * 5 + 5 * 2 + 6 * 2
    assert len(right.patches) == 4 * 3 + 3 * 6 + 2 * 4 * 6 + 4 * 6 + 6 * 2 + 4 * 2
    plt.close(fig)
