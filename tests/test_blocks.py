"""Lecture 06/07 reference code (attention_workbook.blocks) agrees with PyTorch's own layers."""

import math

import pytest
import torch
import torch.nn as nn

from attention_workbook.blocks import (
    DecoderBlock, FeedForward, LayerNorm, ReverseDigits, Seq2SeqConfig, Seq2SeqTransformer, TransformerBlock,
    block_param_count, causal_mask, count_params, decoder_block_param_count, from_torch_decoder_layer,
    from_torch_encoder_layer, greedy_decode, sinusoidal_positions, transformer_param_count,
)


def test_sinusoidal_positions_formula_by_loops():
    T, D = 7, 10
    pe = sinusoidal_positions(T, D)
    assert pe.shape == (T, D)
    for t in range(T):
        for i in range(D // 2):
            w = 1.0 / 10000 ** (2 * i / D)
            assert math.isclose(pe[t, 2 * i].item(), math.sin(t * w), abs_tol=1e-5)
            assert math.isclose(pe[t, 2 * i + 1].item(), math.cos(t * w), abs_tol=1e-5)
    assert sinusoidal_positions(4, 5).shape == (4, 5)   # odd width: the last column is a sine


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 16), (2, 3, 4, 6)])
def test_layernorm_matches_nn_layernorm(shape):
    torch.manual_seed(0)
    D = shape[-1]
    ref = nn.LayerNorm(D, eps=1e-3)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours = LayerNorm(D, eps=1e-3)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(shape) * 3 + 1
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


def test_param_counts_match_numel():
    for D, F in ((16, 64), (24, 40)):
        assert block_param_count(D, F) == count_params(TransformerBlock(D, 4, F))
        assert decoder_block_param_count(D, F) == count_params(DecoderBlock(D, 4, F))
        no_bias = TransformerBlock(D, 4, F)
        no_bias.attn = type(no_bias.attn)(D, 4, bias=False)
        no_bias.ff.net[0] = nn.Linear(D, F, bias=False)
        no_bias.ff.net[2] = nn.Linear(F, D, bias=False)
        assert block_param_count(D, F, bias=False) == count_params(no_bias)
    # GPT-3 175B: 96 layers, D = 12288, ~175e9 with a 50257-token vocabulary and 2048 positions
    n = transformer_param_count(96, 12288, vocab=50257, context=2048)
    assert 174e9 < n < 176e9
    # BERT base (~110M): 12 layers, D = 768, 30522 tokens, 512 positions (+ 2 segment rows)
    assert 108e6 < transformer_param_count(12, 768, vocab=30522 + 2, context=512) < 112e6


@pytest.mark.parametrize("norm_first", [True, False])
def test_from_torch_encoder_layer(norm_first):
    torch.manual_seed(1)
    ref = nn.TransformerEncoderLayer(16, 4, 40, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    ours = from_torch_encoder_layer(ref).eval()
    assert ours.pre_ln == norm_first
    x = torch.randn(3, 7, 16)
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[0, 5:] = False
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours(x, mask=keep[:, None, None, :]), ref(x, src_key_padding_mask=~keep),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_nn_transformer_decoder_layer(norm_first):
    torch.manual_seed(2)
    ref = nn.TransformerDecoderLayer(16, 4, 40, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    ours = from_torch_decoder_layer(ref).eval()
    B, T, S = 3, 6, 9
    x, mem = torch.randn(B, T, 16), torch.randn(B, S, 16)
    keep_t = torch.ones(B, T, dtype=torch.bool)
    keep_t[1, 4:] = False
    keep_s = torch.ones(B, S, dtype=torch.bool)
    keep_s[0, 6:] = False
    expected = ref(x, mem, tgt_mask=~causal_mask(T), tgt_key_padding_mask=~keep_t, memory_key_padding_mask=~keep_s)
    got = ours(x, mem, self_mask=keep_t, memory_mask=keep_s)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_decoder_block_is_causal_and_reads_memory():
    torch.manual_seed(3)
    block = DecoderBlock(16, 2, 32).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    y = block(x, mem)
    x2 = x.clone()
    x2[:, 3:] += 1.0
    torch.testing.assert_close(block(x2, mem)[:, :3], y[:, :3])
    assert not torch.allclose(block(x, mem + 1.0), y)
    keep = torch.tensor([[True, True, False, False], [True] * 4])
    mem2 = mem.clone()
    mem2[0, 2:] = 100.0  # masked memory positions cannot change the output
    torch.testing.assert_close(block(x, mem2, memory_mask=keep)[0], block(x, mem, memory_mask=keep)[0])


def test_reverse_digits_batch_and_seq2seq_shapes():
    task = ReverseDigits(2, 5)
    g = torch.Generator().manual_seed(0)
    src, tgt_in, tgt_out = task.batch(16, g)
    for s, ti, to in zip(src, tgt_in, tgt_out):
        text = task.to_text(s)
        assert task.to_text(to) == text[::-1]
        assert ti[0] == task.BOS and task.to_text(ti[1:]) == text[::-1]
    model = Seq2SeqTransformer(Seq2SeqConfig(task.vocab_size, task.vocab_size, d_model=32, n_heads=4, d_ff=64))
    logits = model(src, tgt_in)
    assert logits.shape == (16, tgt_in.size(1), task.vocab_size)
    maps = model.attention_maps()
    assert len(maps) == 2 and maps[0].shape == (16, 4, tgt_in.size(1), src.size(1))
    # padding in the source gets no cross-attention
    assert torch.all(maps[0].permute(0, 3, 1, 2)[src == 0] == 0)   # (B, S, H, T)[pad] -> zeros


class _Scripted(nn.Module):
    """A fake model: at step t it predicts token script[b][t] for sequence b."""

    def __init__(self, script, vocab=8):
        super().__init__()
        self.script, self.vocab = script, vocab

    def forward(self, src, tgt):
        B, T = tgt.shape
        logits = torch.zeros(B, T, self.vocab)
        for b in range(B):
            logits[b, -1, self.script[b][min(T - 1, len(self.script[b]) - 1)]] = 1.0
        return logits


def test_greedy_decode_stops_at_eos():
    bos, eos = 1, 2
    model = _Scripted([[5, 6, eos, 7, 7], [4, eos, 7, 7, 7]])
    out = greedy_decode(model, torch.zeros(2, 3, dtype=torch.long), max_len=10, bos_id=bos, eos_id=eos)
    assert out.tolist() == [[bos, 5, 6, eos], [bos, 4, eos, eos]]
    out = greedy_decode(model, torch.zeros(2, 3, dtype=torch.long), max_len=2, bos_id=bos, eos_id=eos)
    assert out.tolist() == [[bos, 5, 6], [bos, 4, eos]]


def test_seq2seq_learns_to_overfit_a_batch():
    torch.manual_seed(0)
    task = ReverseDigits(3, 4)
    src, tgt_in, tgt_out = task.batch(8, torch.Generator().manual_seed(1))
    model = Seq2SeqTransformer(Seq2SeqConfig(task.vocab_size, task.vocab_size, d_model=32, n_heads=2, d_ff=64,
                                             n_enc=1, n_dec=1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        loss = nn.functional.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out, ignore_index=task.PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    out = greedy_decode(model, src, 6, task.BOS, task.EOS)
    assert [task.to_text(o[1:]) for o in out] == [task.to_text(s)[::-1] for s in src]


def test_feedforward_and_block_signatures_unchanged():
    ff = FeedForward(8, 32, 0.1)
    assert isinstance(ff.net[1], nn.ReLU)
    block = TransformerBlock(8, 2, 32, 0.0, True)
    assert block(torch.randn(1, 3, 8), is_causal=True).shape == (1, 3, 8)


@pytest.mark.parametrize("pre_ln", [False, True])
def test_greedy_decode_cached_gives_the_same_tokens_with_fewer_flops(pre_ln):
    from torch.utils.flop_counter import FlopCounterMode

    from attention_workbook.blocks import greedy_decode_cached

    torch.manual_seed(3)
    task = ReverseDigits(min_len=2, max_len=6)
    cfg = Seq2SeqConfig(src_vocab=task.vocab_size, tgt_vocab=task.vocab_size, d_model=32, n_heads=4, d_ff=64,
                        n_enc=2, n_dec=2, max_len=16, pre_ln=pre_ln)
    model = Seq2SeqTransformer(cfg).eval()
    with torch.no_grad():          # make pad (id 0) a frequent prediction: the cache must mask it too
        model.head.bias[task.PAD] += 2.0
    src, _, _ = task.batch(64, torch.Generator().manual_seed(0))   # padded sources of several lengths
    args = dict(max_len=task.max_len + 1, bos_id=task.BOS, eos_id=task.EOS)
    with FlopCounterMode(display=False) as plain:
        ref = greedy_decode(model, src, **args)
    with FlopCounterMode(display=False) as cached:
        got = greedy_decode_cached(model, src, **args)
    assert (ref == task.PAD).any(), "the test should exercise predicted pad tokens"
    assert torch.equal(got, ref)
    assert cached.get_total_flops() < plain.get_total_flops() / 2
