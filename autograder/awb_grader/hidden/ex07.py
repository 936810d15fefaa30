"""Hidden checks for exercise 07: randomized shapes, independent oracles.

Oracles: ``nn.TransformerDecoderLayer`` with copied weights for the decoder block (the layer's
weights are copied into the block's own sub-modules, in place, each made to compute the
reference function of its kind: ``ex06.load_reference_parts``; so the block's wiring is graded,
not the earlier answers, whatever wrapper modules hold them); behavioural checks (causality, use of the
source and its order, invariance to extra padding) on random sizes, vocabularies and pad ids
for the seq2seq model; a per-sequence Python loop for greedy decoding, with scripted models.
Seeds are fixed. Tolerance: atol 1e-5 + rtol 1e-5 against PyTorch, 1e-5 + 1e-4 otherwise.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from attention_workbook.checks.ex06 import randomize_
from attention_workbook.checks.ex07 import NO_TORCH_LAYERS, greedy_oracle, torch_transformer_layers

from . import _adapter as A
from ._base import guard, CheckFailed, call, close, fail_values, own_code, randint, rng
from .ex06 import load_reference_parts

TORCH_TOL = "atol 1e-5 + rtol 1e-5"


# ----------------------------------------------------------------------------------------
def _load_decoder_layer(block, layer):
    load_reference_parts(block, {"self_attn": ("mha", layer.self_attn), "cross_attn": ("mha", layer.multihead_attn),
                                 "ff": ("feed_forward", (layer.linear1, layer.linear2)),
                                 "ln1": ("layer_norm", layer.norm1), "ln2": ("layer_norm", layer.norm2),
                                 "ln3": ("layer_norm", layer.norm3)}, "DecoderBlock")


def _decoder_cases(cls, seed, n_cases, masks):
    own_code(cls, "DecoderBlock")
    g = rng(seed)
    for case in range(n_cases):
        H = randint(g, 1, 4)
        D, d_ff = H * randint(g, 2, 6), randint(g, 4, 40)
        B, T, S = randint(g, 1, 3), randint(g, 1, 8), randint(g, 1, 9)
        if case == 0 and masks:
            S = T = max(T, 3)                     # equal lengths: a mask on the wrong axis still broadcasts
        layer = nn.TransformerDecoderLayer(D, H, d_ff, dropout=0.0, batch_first=True)
        randomize_(layer, seed + case)
        layer.eval()
        block = A.new(cls, D, H, d_ff, name="DecoderBlock")
        if not A.is_module(block):
            raise CheckFailed("hidden test: DecoderBlock(...) is not an nn.Module")
        for attr in ("self_attn", "cross_attn", "ff", "ln1", "ln2", "ln3"):
            if not A.has(block, attr):
                raise CheckFailed(f"hidden test: DecoderBlock has no attribute `{attr}`")
        _load_decoder_layer(block, layer)
        A.train(block, False)
        x, memory = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        keep_t = torch.arange(T)[None, :] < torch.randint(1, T + 1, (B,), generator=g)[:, None]
        keep_s = torch.arange(S)[None, :] < torch.randint(1, S + 1, (B,), generator=g)[:, None]
        kwargs, self_mask, memory_mask = {"tgt_mask": ~causal}, None, None
        if masks:
            self_mask, memory_mask = keep_t, keep_s
            kwargs.update(tgt_key_padding_mask=~keep_t, memory_key_padding_mask=~keep_s)
        with torch.no_grad():
            want = layer(x, memory, **kwargs)
            out = call(block, x, memory, self_mask=self_mask, memory_mask=memory_mask, name="DecoderBlock.forward")
        case_txt = f"B={B}, T={T}, S={S}, D={D}, H={H}, d_ff={d_ff}, masks={'padding' if masks else 'causal only'}"
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want.shape):
            fail_values("DecoderBlock(x, memory)", out if isinstance(out, torch.Tensor) else torch.zeros(0), want,
                        case_txt, TORCH_TOL)
        if not close(out, want, atol=1e-5, rtol=1e-5):
            fail_values(
                "DecoderBlock vs nn.TransformerDecoderLayer with the same weights", out, want, case_txt, TORCH_TOL
            )
        yield block, x, memory


def decoder_shapes(DecoderBlock) -> None:
    own_code(DecoderBlock, "DecoderBlock")
    g = rng(700)
    for _ in range(4):
        H = randint(g, 1, 4)
        D = H * randint(g, 1, 6)
        B, T, S = randint(g, 1, 4), randint(g, 1, 9), randint(g, 1, 9)
        block = A.train(A.new(DecoderBlock, D, H, randint(g, 1, 30), name="DecoderBlock"), False)
        with torch.no_grad():
            out = call(
                block, torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g), name="DecoderBlock.forward"
            )
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, T, D):
            raise CheckFailed(f"hidden test: DecoderBlock output shape for x ({B}, {T}, {D}), memory ({B}, {S}, {D})",
                              details=[f"expected {(B, T, D)}, got {tuple(getattr(out, 'shape', ()))}"])


def _decoder_dropout(cls, seed):
    """Train mode with dropout=1.0 (dropout zeroes what it is applied to): both attentions' outputs are
    dropped before their residual adds, so the stream keeps norm2(norm1(x)); the feed-forward (made to
    compute Linear-ReLU-Linear) adds its output, or nothing when the block drops that output too."""
    g = rng(seed)
    for case in range(2):
        H = randint(g, 1, 4)
        D, d_ff = H * randint(g, 2, 6), randint(g, 4, 40)
        B, T, S = randint(g, 1, 3), randint(g, 1, 8), randint(g, 1, 9)
        layer = nn.TransformerDecoderLayer(D, H, d_ff, dropout=0.0, batch_first=True)
        randomize_(layer, seed + case)
        block = A.new(cls, D, H, d_ff, 1.0, name="DecoderBlock")
        _load_decoder_layer(block, layer)
        A.train(block, True)
        x, memory = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
        with torch.no_grad():
            out = call(block, x, memory, name="DecoderBlock.forward")
            h = layer.norm2(layer.norm1(x))
            accepted = [layer.norm3(h + layer.linear2(torch.relu(layer.linear1(h)))), layer.norm3(h)]
        if not isinstance(out, torch.Tensor) or not any(close(out, a) for a in accepted):
            fail_values("DecoderBlock(dropout=1.0) in train mode (dropout on each sub-layer's output, before the "
                        "residual add)", out if isinstance(out, torch.Tensor) else torch.zeros(0), accepted[0],
                        f"B={B}, T={T}, S={S}, D={D}, H={H}, d_ff={d_ff}", "atol 1e-5 + rtol 1e-4")


def decoder_values(DecoderBlock) -> None:
    for _ in _decoder_cases(DecoderBlock, 710, 4, masks=False):
        pass
    _decoder_dropout(DecoderBlock, 715)
    g = rng(716)                                       # dropout=0.0 by default: train == eval
    H = randint(g, 1, 4)
    D = H * randint(g, 2, 6)
    block = A.new(DecoderBlock, D, H, randint(g, 4, 40), name="DecoderBlock", seed=716)
    x, memory = torch.randn(2, randint(g, 1, 8), D, generator=g), torch.randn(2, randint(g, 1, 9), D, generator=g)
    with torch.no_grad():
        a = call(A.train(block, True), x, memory, name="DecoderBlock.forward")
        b = call(A.train(block, False), x, memory, name="DecoderBlock.forward")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or not close(a, b):
        raise CheckFailed("hidden test: DecoderBlock(d_model, n_heads, d_ff) without a dropout argument drops values "
                          "in train mode (the default is dropout=0.0)")


def decoder_causal(DecoderBlock) -> None:
    for block, x, memory in _decoder_cases(DecoderBlock, 720, 3, masks=False):
        T = x.size(1)
        if T < 2:
            continue
        t = T // 2
        x2 = x.clone()
        x2[:, t:] = torch.randn_like(x2[:, t:])
        with torch.no_grad():
            a = call(block, x, memory, name="DecoderBlock.forward")
            b = call(block, x2, memory, name="DecoderBlock.forward")
        if not close(a[:, :t], b[:, :t]):
            raise CheckFailed(f"hidden test: DecoderBlock outputs before position {t} change when later targets change",
                              details=[f"case: x {tuple(x.shape)}, memory {tuple(memory.shape)}"])


def decoder_masks(DecoderBlock) -> None:
    for _ in _decoder_cases(DecoderBlock, 730, 4, masks=True):
        pass


# ----------------------------------------------------------------------------------------
def _model_cases(cls, seed, n_cases):
    own_code(cls, "Seq2SeqTransformer")
    g = rng(seed)
    for case in range(n_cases):
        H = randint(g, 1, 4)
        D = H * 2 * randint(g, 2, 4)
        src_vocab, tgt_vocab = randint(g, 6, 30), randint(g, 6, 30)
        pad_id = randint(g, 0, 3)
        max_len = randint(g, 8, 20)
        model = A.new(cls, src_vocab, tgt_vocab, d_model=D, n_heads=H, d_ff=randint(g, 8, 64),
                      n_layers=randint(g, 1, 2), max_len=max_len, pad_id=pad_id, name="Seq2SeqTransformer",
                      seed=seed + case)
        if not A.is_module(model):
            raise CheckFailed("hidden test: Seq2SeqTransformer(...) is not an nn.Module")
        yield A.train(model, False), g, src_vocab, tgt_vocab, pad_id, max_len


def _tok(g, shape, vocab, pad_id):
    """Random non-pad tokens."""
    t = torch.randint(0, vocab - 1, shape, generator=g)
    return t + (t >= pad_id).long()


def _logits(model, src, tgt):
    with torch.no_grad(), A.forbid(torch_transformer_layers(), NO_TORCH_LAYERS):
        out = call(model, src, tgt, name="Seq2SeqTransformer.forward")
    if not isinstance(out, torch.Tensor):
        raise CheckFailed("hidden test: Seq2SeqTransformer.forward did not return a tensor")
    return out


def seq2seq_shapes(Seq2SeqTransformer) -> None:
    for model, g, sv, tv, pad, L in _model_cases(Seq2SeqTransformer, 740, 3):
        B, S, T = randint(g, 1, 4), randint(g, 1, L), randint(g, 1, L)
        out = _logits(model, _tok(g, (B, S), sv, pad), _tok(g, (B, T), tv, pad))
        if tuple(out.shape) != (B, T, tv):
            raise CheckFailed(f"hidden test: logits shape {tuple(out.shape)}, expected {(B, T, tv)}",
                              details=[f"case: src_vocab={sv}, tgt_vocab={tv}, S={S}, T={T}, max_len={L}"])


def seq2seq_causal(Seq2SeqTransformer) -> None:
    for model, g, sv, tv, pad, L in _model_cases(Seq2SeqTransformer, 750, 3):
        B, S, T = randint(g, 1, 3), randint(g, 2, L), randint(g, 2, L)
        src, tgt = _tok(g, (B, S), sv, pad), _tok(g, (B, T), tv, pad)
        t = randint(g, 1, T - 1)
        tgt2 = tgt.clone()
        tgt2[:, t:] = _tok(g, (B, T - t), tv, pad)
        a, b = _logits(model, src, tgt), _logits(model, src, tgt2)
        if not close(a[:, :t], b[:, :t]):
            raise CheckFailed(f"hidden test: logits before position {t} depend on later target tokens",
                              details=[f"case: S={S}, T={T}"])


def seq2seq_source(Seq2SeqTransformer) -> None:
    for model, g, sv, tv, pad, L in _model_cases(Seq2SeqTransformer, 760, 3):
        S, T = randint(g, 3, L), randint(g, 1, L)
        src = _tok(g, (1, S), sv, pad)
        while bool((src == src.flip(1)).all()):
            src = _tok(g, (1, S), sv, pad)
        tgt = _tok(g, (1, T), tv, pad)
        base = _logits(model, src, tgt)
        if close(_logits(model, src.flip(1), tgt), base):
            raise CheckFailed("hidden test: reversing the source does not change the logits (no positions?)",
                              details=[f"case: S={S}, T={T}, d_model varies"])
        other = src.clone()
        other[0, -1] = (src[0, -1] + 1) % sv
        if other[0, -1] == pad:
            other[0, -1] = (other[0, -1] + 1) % sv
        if close(_logits(model, other, tgt), base):
            raise CheckFailed("hidden test: changing the last source token does not change the logits",
                              details=[f"case: S={S}, T={T}"])


def seq2seq_padding(Seq2SeqTransformer) -> None:
    for model, g, sv, tv, pad, L in _model_cases(Seq2SeqTransformer, 770, 3):
        B, S, T = randint(g, 1, 3), randint(g, 2, L - 3), randint(g, 1, L)
        src, tgt = _tok(g, (B, S), sv, pad), _tok(g, (B, T), tv, pad)
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        src[torch.arange(S)[None, :] >= lengths[:, None]] = pad
        extra = randint(g, 1, L - S)
        longer = torch.cat([src, torch.full((B, extra), pad)], dim=1)
        a, b = _logits(model, src, tgt), _logits(model, longer, tgt)
        if not close(a, b):
            raise CheckFailed(f"hidden test: {extra} extra padding token(s) (pad_id={pad}) change the logits",
                              details=[f"case: B={B}, S={S}, T={T}"])
    g = rng(775)                                       # every argument after the vocabularies at its default
    sv, tv = randint(g, 6, 30), randint(g, 6, 30)
    model = A.train(A.new(Seq2SeqTransformer, sv, tv, name="Seq2SeqTransformer", seed=775), False)
    B, S, T = 2, randint(g, 2, 20), randint(g, 1, 32)
    src, tgt = _tok(g, (B, S), sv, 0), _tok(g, (B, T), tv, 0)
    a, b = _logits(model, src, tgt), _logits(model, torch.cat([src, torch.zeros(B, 32 - S, dtype=torch.long)], 1), tgt)
    if tuple(a.shape) != (B, T, tv) or not bool(torch.isfinite(a).all()) or not close(a, b):
        raise CheckFailed(
            "hidden test: Seq2SeqTransformer(src_vocab, tgt_vocab) with the default arguments (max_len=32, "
            "pad_id=0): logits (B, T, tgt_vocab), and padding the source with 0 changes nothing",
            details=[f"case: src_vocab={sv}, tgt_vocab={tv}, S={S}, T={T}"],
        )
    spelled = A.train(A.new(Seq2SeqTransformer, sv, tv, d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=32,
                            pad_id=0, name="Seq2SeqTransformer", seed=775), False)
    ours, theirs = A.params(model), A.params(spelled)
    if ({n: tuple(t.shape) for n, t in ours.items()} != {n: tuple(t.shape) for n, t in theirs.items()}
            or not close(_logits(spelled, src, tgt), a)):
        raise CheckFailed("hidden test: Seq2SeqTransformer(src_vocab, tgt_vocab) differs from the same model with its "
                          "defaults spelled out (d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=32, pad_id=0)",
                          details=[f"case: src_vocab={sv}, tgt_vocab={tv}, same seed"])


# ----------------------------------------------------------------------------------------
def _greedy_case(fn, scripts, max_len, bos, eos, vocab, decoy=None):
    model = A.make("ex07.scripted", scripts, vocab, bos, decoy)
    out = call(fn, model, torch.zeros(len(scripts), 2, dtype=torch.long), max_len, bos, eos, name="greedy_decode")
    want = greedy_oracle(scripts, max_len, bos, eos)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want.shape) or not torch.equal(out.long(), want):
        raise CheckFailed("hidden test: greedy_decode returned the wrong tokens",
                          details=[f"case: B={len(scripts)}, max_len={max_len}, bos={bos}, eos={eos}"
                                   f"{', decoy logits at earlier positions' if decoy is not None else ''}"])


def _random_scripts(g, B, vocab, eos, max_len, bos):
    scripts = []
    for _ in range(B):
        n = randint(g, 1, max_len + 2)
        toks = torch.randint(0, vocab, (n,), generator=g).tolist()
        if randint(g, 0, 3):              # most sequences finish
            toks[randint(g, 0, n - 1)] = eos
        scripts.append(toks)
    return scripts


def greedy_single(greedy_decode) -> None:
    own_code(greedy_decode, "greedy_decode")
    g = rng(780)
    for _ in range(4):
        vocab = randint(g, 5, 15)
        bos, eos = randint(g, 0, 1), randint(g, 2, 4)
        max_len = randint(g, 2, 9)
        _greedy_case(greedy_decode, _random_scripts(g, 1, vocab, eos, max_len, bos), max_len, bos, eos, vocab)


def greedy_batch(greedy_decode) -> None:
    g = rng(790)
    for _ in range(5):
        vocab = randint(g, 5, 15)
        bos, eos = randint(g, 0, 1), randint(g, 2, 4)
        max_len = randint(g, 2, 9)
        _greedy_case(greedy_decode, _random_scripts(g, randint(g, 2, 5), vocab, eos, max_len, bos), max_len, bos, eos,
                     vocab)


def greedy_last_position(greedy_decode) -> None:
    g = rng(800)
    for _ in range(3):
        vocab = randint(g, 6, 15)
        bos, eos = 0, 1
        decoy = vocab - 1
        max_len = randint(g, 3, 8)
        scripts = [[randint(g, 2, vocab - 2) for _ in range(randint(g, 1, 3))] + [eos] for _ in range(randint(g, 1, 4))]
        _greedy_case(greedy_decode, scripts, max_len, bos, eos, vocab, decoy=decoy)


guard(globals())  # every check records warnings instead of printing them (core.guard)
