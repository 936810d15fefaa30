"""The reference modules the lectures teach agree with PyTorch's own layers."""

import torch
import torch.nn as nn

from attention_workbook.blocks import TransformerBlock
from attention_workbook.mha import MultiHeadAttention, from_torch, merge_heads, mha_param_count, split_heads


def test_split_merge_roundtrip_and_head_contents():
    x = torch.randn(2, 5, 12)
    h = split_heads(x, 3)
    assert h.shape == (2, 3, 5, 4)
    # head 1 of token 2 is features 4..7 of token 2: the transpose keeps positions apart
    assert torch.equal(h[0, 1, 2], x[0, 2, 4:8])
    assert torch.equal(merge_heads(h), x)


def test_matches_nn_multiheadattention_self_and_cross():
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = from_torch(ref).eval()
    x, kv = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    mask = torch.rand(3, 1, 5, 7) > 0.3
    mask[..., 0] = True
    expected, w = ref(x, kv, kv, attn_mask=~mask.expand(3, 4, 5, 7).reshape(12, 5, 7), average_attn_weights=False)
    got = ours(x, kv=kv, mask=mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.last_weights, w, atol=1e-5, rtol=1e-5)
    assert mha_param_count(16) == sum(p.numel() for p in ours.parameters())


def test_fast_path_matches_explicit_path():
    torch.manual_seed(1)
    slow = MultiHeadAttention(32, 4).eval()
    fast = MultiHeadAttention(32, 4, fast=True).eval()
    fast.load_state_dict(slow.state_dict())
    x = torch.randn(2, 9, 32)
    torch.testing.assert_close(fast(x, is_causal=True), slow(x, is_causal=True), atol=1e-5, rtol=1e-5)
    # causal: the first output never sees later tokens
    x2 = x.clone()
    x2[:, 5:] = torch.randn(2, 4, 32)
    torch.testing.assert_close(slow(x2, is_causal=True)[:, :5], slow(x, is_causal=True)[:, :5])


def test_block_matches_nn_transformer_encoder_layer():
    torch.manual_seed(2)
    for pre_ln in (True, False):
        ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=pre_ln).eval()
        ours = TransformerBlock(16, 4, 32, pre_ln=pre_ln).eval()
        sd = {
            "attn.W_qkv.weight": ref.self_attn.in_proj_weight, "attn.W_qkv.bias": ref.self_attn.in_proj_bias,
            "attn.W_o.weight": ref.self_attn.out_proj.weight, "attn.W_o.bias": ref.self_attn.out_proj.bias,
            "ln1.weight": ref.norm1.weight, "ln1.bias": ref.norm1.bias,
            "ln2.weight": ref.norm2.weight, "ln2.bias": ref.norm2.bias,
            "ff.net.0.weight": ref.linear1.weight, "ff.net.0.bias": ref.linear1.bias,
            "ff.net.2.weight": ref.linear2.weight, "ff.net.2.bias": ref.linear2.bias,
        }
        ours.load_state_dict(sd)
        x = torch.randn(2, 6, 16)
        torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------- lecture 05's additions
from attention_workbook.mha import (  # noqa: E402
    HeadLoopMHA, activation_bytes, fused_from_sliced, sliced_from_head_loop, to_torch,
)
from attention_workbook.toydata import TOY_HEAD_NAMES, TOY_SENTENCES, toy_embed, toy_mha  # noqa: E402


def _per_head_loop_reference(m, x, kv, mask):
    """Attention written with explicit loops over batch and head (no reshapes)."""
    D, H = m.d_model, m.n_heads
    Dh = D // H
    Wq, Wk, Wv = m.W_qkv.weight.split(D)
    bq, bk, bv = m.W_qkv.bias.split(D)
    B, T, S = x.size(0), x.size(1), kv.size(1)
    mask = torch.broadcast_to(mask, (B, H, T, S))
    out = torch.zeros(B, T, D)
    for b in range(B):
        for h in range(H):
            r = slice(h * Dh, (h + 1) * Dh)
            q = x[b] @ Wq[r].T + bq[r]
            k = kv[b] @ Wk[r].T + bk[r]
            v = kv[b] @ Wv[r].T + bv[r]
            s = (q @ k.T) / Dh ** 0.5
            s = s.masked_fill(~mask[b, h], float("-inf"))
            out[b, :, r] = s.softmax(-1) @ v
    return out @ m.W_o.weight.T + m.W_o.bias


def test_three_efficiency_steps_give_the_same_numbers():
    torch.manual_seed(3)
    step1 = HeadLoopMHA(24, 3).eval()
    step2 = sliced_from_head_loop(step1).eval()
    step3 = fused_from_sliced(step2).eval()
    x, kv = torch.randn(2, 5, 24), torch.randn(2, 7, 24)
    mask = torch.rand(2, 3, 5, 7) > 0.4  # a different mask per head
    mask[..., 0] = True
    for kwargs in ({}, {"kv": kv, "mask": mask}):
        y1, y2, y3 = step1(x, **kwargs), step2(x, **kwargs), step3(x, **kwargs)
        torch.testing.assert_close(y2, y1, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(y3, y1, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(step3.last_weights, step1.last_weights, atol=1e-6, rtol=1e-5)
    # and the per-head loop written with no reshape at all agrees
    torch.testing.assert_close(step3(x, kv=kv, mask=mask), _per_head_loop_reference(step3, x, kv, mask),
                               atol=1e-5, rtol=1e-5)
    # per-head masks really go to their head: head 1 never looks where its mask is False
    assert float(step1.last_weights[~mask].abs().max()) == 0.0


def test_conceptual_version_costs_H_times_more():
    D, H = 32, 4
    conceptual = HeadLoopMHA(D, H, head_dim=D, bias=False)
    step1 = HeadLoopMHA(D, H, bias=False)
    assert sum(p.numel() for p in conceptual.parameters()) == 3 * H * D * D + H * D * D
    assert sum(p.numel() for p in step1.parameters()) == mha_param_count(D, bias=False)
    x = torch.randn(1, 10, D, requires_grad=True)
    assert activation_bytes(conceptual, x) > 2 * activation_bytes(step1, x)
    try:
        sliced_from_head_loop(conceptual)
    except ValueError:
        pass
    else:
        raise AssertionError("full-size heads cannot be stacked into D x D matrices")


def test_activation_bytes_counts_saved_tensors_not_weights():
    lin = nn.Linear(8, 4, bias=False)
    x = torch.randn(5, 8, requires_grad=True)
    assert activation_bytes(lin, x) == 5 * 8 * 4  # only the input is kept (float32)


def test_to_torch_roundtrip():
    torch.manual_seed(4)
    ours = MultiHeadAttention(16, 2).eval()
    ref = to_torch(ours).eval()
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(ours(x), ref(x, x, x, need_weights=False)[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(from_torch(ref).state_dict()["W_qkv.weight"], ours.W_qkv.weight)


def test_toy_heads_do_their_named_jobs():
    m = toy_mha()
    for sentence, subject, obj in zip(TOY_SENTENCES, ("fox", "hen", "nurse"), ("hen", "fox", "cat")):
        words = sentence.split()  # e.g. <s> a young fox chased the hen .
        m(toy_embed(words)[None])
        w = m.last_weights[0]  # (H, T, T)
        assert w.shape == (len(TOY_HEAD_NAMES), len(words), len(words))
        top = w.argmax(-1)
        verb = next(i for i, word in enumerate(words) if word in ("chased", "fed"))
        assert words[top[0, verb]] == words[verb - 1]  # previous word
        assert words[top[2, verb]] == subject and w[2, verb].max() > 0.95  # verb -> its subject
        assert words[top[3, verb]] == obj and w[3, verb].max() > 0.95  # verb -> its object
        for i in range(1, len(words)):
            if words[i] != words[verb]:  # only the verb asks heads 2 and 3 anything: the rest sink on <s>
                assert top[2, i] == 0 and top[3, i] == 0
    words = TOY_SENTENCES[0].split()
    m(toy_embed(words)[None])
    top = m.last_weights[0].argmax(-1)
    assert words[top[1, words.index("fox")]] == "young"  # noun -> its adjective
    assert words[top[1, words.index("hen")]] == "young"  # classes only: the lecture's caveat
