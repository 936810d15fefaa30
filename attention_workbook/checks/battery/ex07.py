"""Battery for exercise 07 (DecoderBlock, Seq2SeqTransformer, greedy_decode).

Oracles: ``nn.TransformerDecoderLayer`` with random weights for the decoder block (the block's
own sub-modules compute the workbook's reference with the layer's weights, so its wiring is what
is tested; a failing case is named with the visible check's wirings); behaviour for the
seq2seq model (causality, use of the source and its order, invariance to extra padding) on
random vocabularies, pad ids and sizes; a per-sequence loop for greedy decoding with scripted
models.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .. import ex07 as visible
from ..ex06 import randomize_
from ._util import CheckFailed, call, close, expect, first_match, guard, randint


def _decoder(cls, D, H, d_ff):
    block = call(cls, D, H, d_ff, name="DecoderBlock", reread=visible.SEC_DEC)
    if not isinstance(block, nn.Module):
        raise CheckFailed("DecoderBlock(...) is not an nn.Module", reread=visible.SEC_DEC)
    for attr in ("self_attn", "cross_attn", "ff", "ln1", "ln2", "ln3"):
        if not isinstance(getattr(block, attr, None), nn.Module):
            raise CheckFailed(f"your DecoderBlock has no sub-module `{attr}`", reread=visible.SEC_DEC,
                              hint="use the names of the exercise: self_attn, cross_attn, ff, ln1, ln2, ln3")
    return block


def _swap_in_reference_parts(block, layer):
    """The block's own sub-modules compute the reference of their kind with the layer's weights:
    the objects stay the ones the block holds (their forward is redirected), so a block that
    reaches them through residual wrapper modules computes with the same weights."""
    from attention_workbook.blocks import from_torch_decoder_layer
    ref = from_torch_decoder_layer(layer).eval()
    for name in ("self_attn", "cross_attn", "ff"):
        getattr(block, name).forward = getattr(ref, name).forward
    for ours, theirs in (("ln1", layer.norm1), ("ln2", layer.norm2), ("ln3", layer.norm3)):
        ln = nn.LayerNorm(theirs.normalized_shape, eps=theirs.eps)
        ln.load_state_dict(theirs.state_dict())
        getattr(block, ours).forward = ln.forward
    return block


def _decoder_cases(cls, g, n_cases, masks):
    for case in range(n_cases):
        H = randint(g, 1, 4)
        D, d_ff, B, T, S = H * randint(g, 2, 6), randint(g, 4, 40), randint(g, 1, 3), randint(g, 1, 8), randint(g, 1, 9)
        if case == 0 and masks:
            S = T = max(T, 3)          # equal lengths: a mask on the wrong axis still broadcasts
        layer = nn.TransformerDecoderLayer(D, H, d_ff, dropout=0.0, batch_first=True)
        randomize_(layer, randint(g, 10_000, 10_000_000))
        layer.eval()
        block = _swap_in_reference_parts(_decoder(cls, D, H, d_ff), layer).eval()
        x, memory = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        keep_t = torch.arange(T)[None, :] < torch.randint(1, T + 1, (B,), generator=g)[:, None]
        keep_s = torch.arange(S)[None, :] < torch.randint(1, S + 1, (B,), generator=g)[:, None]
        kwargs, self_mask, memory_mask = {"tgt_mask": ~causal}, None, None
        if masks:
            self_mask, memory_mask = keep_t, keep_s
            kwargs.update(tgt_key_padding_mask=~keep_t, memory_key_padding_mask=~keep_s)
        case_txt = f"B={B}, T={T}, S={S}, D={D}, H={H}, d_ff={d_ff}, masks={'padding' if masks else 'causal only'}"
        with torch.no_grad():
            want = layer(x, memory, **kwargs)
            out = visible._run_decoder(block, x, memory, self_mask, memory_mask)
            try:
                expect(out, want, "DecoderBlock vs nn.TransformerDecoderLayer with the same weights", case_txt,
                       atol=1e-5, rtol=1e-5, reread=visible.SEC_DEC)
            except CheckFailed as e:
                if tuple(out.shape) == tuple(want.shape):
                    cands = {}
                    for name, kw in visible.WIRINGS.items():
                        try:
                            cands[name] = visible.decoder_by_parts(block, x, memory, self_mask, memory_mask, **kw)
                        except RuntimeError:
                            pass
                    e.hint = visible._decoder_hint(first_match(out, cands))
                    e.args = (e.plain(),)
                raise
        yield block, x, memory


def decoder_shapes(DecoderBlock, g) -> None:
    for _ in range(4):
        H = randint(g, 1, 4)
        D = H * randint(g, 1, 6)
        B, T, S = randint(g, 1, 4), randint(g, 1, 9), randint(g, 1, 9)
        block = _decoder(DecoderBlock, D, H, randint(g, 1, 30)).eval()
        with torch.no_grad():
            out = visible._run_decoder(block, torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g))
        if tuple(out.shape) != (B, T, D):
            raise CheckFailed(f"DecoderBlock output shape for x ({B}, {T}, {D}), memory ({B}, {S}, {D})",
                              details=[f"expected {(B, T, D)}, got {tuple(out.shape)}"], reread=visible.SEC_DEC)


def decoder_values(DecoderBlock, g) -> None:
    for _ in _decoder_cases(DecoderBlock, g, 4, masks=False):
        pass
    block = _decoder(DecoderBlock, 16, 4, 32).train()               # dropout=0.0 by default: train == eval
    x, memory = torch.randn(2, 3, 16, generator=g), torch.randn(2, 5, 16, generator=g)
    with torch.no_grad():
        if not close(visible._run_decoder(block, x, memory), visible._run_decoder(block.eval(), x, memory)):
            raise CheckFailed("DecoderBlock(d_model, n_heads, d_ff) without a dropout argument drops values in train "
                              "mode", hint="dropout=0.0 is the default", reread=visible.SEC_DEC)
    H = randint(g, 1, 4)
    visible.decoder_dropout_placement(DecoderBlock, D=H * randint(g, 2, 6), H=H, d_ff=randint(g, 4, 40),
                                      B=randint(g, 1, 3), T=randint(g, 1, 8), S=randint(g, 1, 9),
                                      seed=randint(g, 10_000, 10_000_000))


def decoder_causal(DecoderBlock, g) -> None:
    for block, x, memory in _decoder_cases(DecoderBlock, g, 3, masks=False):
        T = x.size(1)
        if T < 2:
            continue
        t = randint(g, 1, T - 1)
        x2 = x.clone()
        x2[:, t:] = torch.randn(x2[:, t:].shape, generator=g)
        with torch.no_grad():
            a = visible._run_decoder(block, x, memory)
            b = visible._run_decoder(block, x2, memory)
        if not close(a[:, :t], b[:, :t]):
            raise CheckFailed(f"DecoderBlock outputs before position {t} change when later targets change",
                              hint=visible._decoder_hint(list(visible.WIRINGS)[0]), reread=visible.SEC_DEC,
                              details=[f"case: x {tuple(x.shape)}, memory {tuple(memory.shape)}"])


def decoder_masks(DecoderBlock, g) -> None:
    for _ in _decoder_cases(DecoderBlock, g, 4, masks=True):
        pass


# ----------------------------------------------------------------------------------------
def _model_cases(cls, g, n_cases):
    for _ in range(n_cases):
        H = randint(g, 1, 4)
        D = H * randint(g, 4, 8)
        src_vocab, tgt_vocab, pad_id, max_len = (
            randint(g, 6, 30),
            randint(g, 6, 30),
            randint(g, 0, 3),
            randint(g, 8, 20),
        )
        torch.manual_seed(randint(g, 10_000, 10_000_000))
        model = call(cls, src_vocab, tgt_vocab, d_model=D, n_heads=H, d_ff=randint(g, 8, 64),
                     n_layers=randint(g, 1, 2), max_len=max_len, pad_id=pad_id, name="Seq2SeqTransformer",
                     reread=visible.SEC_S2S)
        if not isinstance(model, nn.Module):
            raise CheckFailed("Seq2SeqTransformer(...) is not an nn.Module", reread=visible.SEC_S2S)
        yield model.eval(), src_vocab, tgt_vocab, pad_id, max_len


def _tok(g, shape, vocab, pad_id):
    """Random tokens that are not the pad id."""
    t = torch.randint(0, vocab - 1, shape, generator=g)
    return t + (t >= pad_id).long()


def seq2seq_shapes(Seq2SeqTransformer, g) -> None:
    for model, sv, tv, pad, L in _model_cases(Seq2SeqTransformer, g, 3):
        B, S, T = randint(g, 1, 4), randint(g, 1, L), randint(g, 1, L)
        out = visible._logits(model, _tok(g, (B, S), sv, pad), _tok(g, (B, T), tv, pad))
        if tuple(out.shape) != (B, T, tv):
            raise CheckFailed(f"logits shape {tuple(out.shape)}, expected {(B, T, tv)}", reread=visible.SEC_S2S,
                              details=[f"case: src_vocab={sv}, tgt_vocab={tv}, S={S}, T={T}, max_len={L}"])


def seq2seq_causal(Seq2SeqTransformer, g) -> None:
    for model, sv, tv, pad, L in _model_cases(Seq2SeqTransformer, g, 3):
        B, S, T = randint(g, 1, 3), randint(g, 2, L), randint(g, 2, L)
        src, tgt = _tok(g, (B, S), sv, pad), _tok(g, (B, T), tv, pad)
        t = randint(g, 1, T - 1)
        tgt2 = tgt.clone()
        tgt2[:, t:] = _tok(g, (B, T - t), tv, pad)
        a, b = visible._logits(model, src, tgt), visible._logits(model, src, tgt2)
        if not close(a[:, :t], b[:, :t]):
            raise CheckFailed(f"logits before position {t} depend on later target tokens (no causal mask?)",
                              reread=visible.SEC_MASKS, details=[f"case: S={S}, T={T}, tgt_vocab={tv}"])


def seq2seq_source(Seq2SeqTransformer, g) -> None:
    for model, sv, tv, pad, L in _model_cases(Seq2SeqTransformer, g, 3):
        S, T = randint(g, 3, L), randint(g, 1, L)
        src = _tok(g, (1, S), sv, pad)
        while bool((src == src.flip(1)).all()):
            src = _tok(g, (1, S), sv, pad)
        tgt = _tok(g, (1, T), tv, pad)
        base = visible._logits(model, src, tgt)
        if close(visible._logits(model, src.flip(1), tgt), base):
            raise CheckFailed("reversing the source does not change the logits (no positions in the encoder?)",
                              reread=visible.SEC_S2S, details=[f"case: S={S}, T={T}"])
        other = src.clone()
        other[0, -1] = (src[0, -1] + 1) % sv
        if other[0, -1] == pad:
            other[0, -1] = (other[0, -1] + 1) % sv
        if close(visible._logits(model, other, tgt), base):
            raise CheckFailed("changing the last source token does not change the logits (is the memory used?)",
                              reread=visible.SEC_S2S, details=[f"case: S={S}, T={T}"])


def seq2seq_padding(Seq2SeqTransformer, g) -> None:
    for model, sv, tv, pad, L in _model_cases(Seq2SeqTransformer, g, 3):
        B, S, T = randint(g, 1, 3), randint(g, 2, L - 3), randint(g, 1, L)
        src, tgt = _tok(g, (B, S), sv, pad), _tok(g, (B, T), tv, pad)
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        src[torch.arange(S)[None, :] >= lengths[:, None]] = pad
        extra = randint(g, 1, L - S)
        longer = torch.cat([src, torch.full((B, extra), pad)], dim=1)
        if not close(visible._logits(model, src, tgt), visible._logits(model, longer, tgt)):
            raise CheckFailed(f"{extra} extra padding token(s) (pad_id={pad}) change the logits (source padding "
                              "mask missing, or built from another id than pad_id?)", reread=visible.SEC_MASKS,
                              details=[f"case: B={B}, S={S}, T={T}"])
    visible.seq2seq_defaults(Seq2SeqTransformer, randint(g, 6, 30), randint(g, 6, 30), seed=randint(g, 0, 10_000))


# ----------------------------------------------------------------------------------------
def _scripts(g, B, vocab, eos, max_len):
    scripts = []
    for _ in range(B):
        n = randint(g, 1, max_len + 2)
        toks = torch.randint(0, vocab, (n,), generator=g).tolist()
        if randint(g, 0, 3):              # most sequences finish
            toks[randint(g, 0, n - 1)] = eos
        scripts.append(toks)
    return scripts


def greedy_single(greedy_decode, g) -> None:
    for _ in range(4):
        vocab, bos, eos, max_len = randint(g, 5, 15), randint(g, 0, 1), randint(g, 2, 4), randint(g, 2, 9)
        visible._compare_greedy(greedy_decode, _scripts(g, 1, vocab, eos, max_len), max_len, bos, eos, vocab,
                                what="greedy_decode of one sequence")


def greedy_batch(greedy_decode, g) -> None:
    for _ in range(5):
        vocab, bos, eos, max_len = randint(g, 5, 15), randint(g, 0, 1), randint(g, 2, 4), randint(g, 2, 9)
        visible._compare_greedy(greedy_decode, _scripts(g, randint(g, 2, 5), vocab, eos, max_len), max_len, bos, eos,
                                vocab, what="greedy_decode of a batch")


def greedy_last_position(greedy_decode, g) -> None:
    for _ in range(3):
        vocab = randint(g, 6, 15)
        max_len = randint(g, 3, 8)
        scripts = [[randint(g, 2, vocab - 2) for _ in range(randint(g, 1, 3))] + [1] for _ in range(randint(g, 1, 4))]
        visible._compare_greedy(greedy_decode, scripts, max_len, 0, 1, vocab, decoy=vocab - 1,
                                what="greedy_decode with a model whose earlier positions predict another token")


guard(globals())
