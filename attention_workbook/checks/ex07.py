"""Visible checks for exercise 07_encoder_decoder.

The decoder block is checked against a forward pass built from the student's own sub-modules
(so an error is located in the wiring, not in exercise 05/06 code); when it differs, the
checks recompute the common wrong wirings (no causal mask, cross-attention keys from the
decoder, memory mask on the query axis, pre-LN order, ...) and name the one that matches.
The seq2seq model is checked by its behaviour; greedy decoding with scripted fake models.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .core import (
    guard,
    CheckFailed,
    call,
    close,
    expect_close,
    expect_shape,
    expect_tensor,
    first_match,
    forbid,
    passed,
)
from .ex06 import randomize_

LECTURE = "lectures/07_encoder_decoder.ipynb"
SEC_MASKS = f"lecture 07, section 1 'Three wirings, three masks' ({LECTURE}#wirings)"
SEC_DEC = f"lecture 07, section 3 'The decoder block and cross-attention' ({LECTURE}#decoder-block)"
SEC_S2S = f"lecture 07, section 5 'A tiny seq2seq task' ({LECTURE}#seq2seq)"
SEC_GREEDY = f"lecture 07, section 6 'Greedy decoding' ({LECTURE}#greedy)"


# ----------------------------------------------------------------------------------------
# DecoderBlock
# ----------------------------------------------------------------------------------------
def _decoder(cls, D=16, H=4, d_ff=32):
    block = call(cls, D, H, d_ff, name="DecoderBlock", reread=SEC_DEC)
    if not isinstance(block, nn.Module):
        raise CheckFailed("DecoderBlock(...) is not an nn.Module", hint="subclass nn.Module", reread=SEC_DEC)
    for attr in ("self_attn", "cross_attn", "ff", "ln1", "ln2", "ln3"):
        if not isinstance(getattr(block, attr, None), nn.Module):
            raise CheckFailed(f"your DecoderBlock has no sub-module `{attr}`",
                              hint="use the names of the exercise: self_attn, cross_attn, ff, ln1, ln2, ln3",
                              reread=SEC_DEC)
    for h in (1, 2, 8):      # n_heads is passed on, whatever its value (not a fixed number)
        other = call(cls, D, h, d_ff, name="DecoderBlock", reread=SEC_DEC)
        for attr in ("self_attn", "cross_attn"):
            got = getattr(getattr(other, attr, None), "n_heads", h)
            if isinstance(got, int) and got != h:
                raise CheckFailed(f"DecoderBlock({D}, n_heads={h}, ...) built its {attr} with {got} heads",
                                  reread=SEC_DEC, hint="pass the block's n_heads argument on to both attentions, "
                                                       "do not fix the number")
    return block


def decoder_by_parts(block, x, memory, self_mask=None, memory_mask=None, *, causal=True, kv_from_x=False,
                     pre_ln=False, mem_axis="key", self_axis="key", swap_masks=False, cross_residual=True,
                     use_self_mask=True, use_memory_mask=True):
    """The decoder block computed from its own sub-modules; the keyword flags give the wrong wirings."""
    T = x.size(1)
    sm = torch.ones(T, T, dtype=torch.bool).tril() if causal else None
    if self_mask is not None and use_self_mask:
        pad = self_mask[:, None, None, :] if self_axis == "key" else self_mask[:, None, :, None]
        sm = pad if sm is None else sm & pad
    mm = None
    if memory_mask is not None and use_memory_mask:
        mm = memory_mask[:, None, None, :] if mem_axis == "key" else memory_mask[:, None, :, None]
    if swap_masks:
        sm, mm = mm, sm
    kv = x if kv_from_x else memory
    if pre_ln:
        h = block.ln1(x)
        x = x + block.self_attn(h, mask=sm)
        x = x + block.cross_attn(block.ln2(x), kv=(block.ln2(x) if kv_from_x else memory), mask=mm)
        return x + block.ff(block.ln3(x))
    x = block.ln1(x + block.self_attn(x, mask=sm))
    c = block.cross_attn(x, kv=(x if kv_from_x else kv), mask=mm)
    x = block.ln2(x + c if cross_residual else c)
    return block.ln3(x + block.ff(x))


WIRINGS = {
    "no causal mask in the self-attention (the decoder sees the future)": dict(causal=False),
    "cross-attention keys and values taken from the decoder (kv=x) instead of the memory": dict(kv_from_x=True),
    "the pre-LN order (the exercise asks for the paper's post-LN)": dict(pre_ln=True),
    "no residual connection around the cross-attention": dict(cross_residual=False),
    "the memory mask on the query axis (memory_mask[:, None, :, None]) instead of the key axis": dict(mem_axis="query"),
    "the target padding mask on the query axis instead of the key axis": dict(self_axis="query"),
    "self_mask and memory_mask swapped": dict(swap_masks=True),
    "the memory mask ignored (padded source tokens are attended to)": dict(use_memory_mask=False),
    "the target padding mask ignored": dict(use_self_mask=False),
}


def _decoder_hint(name):
    if name is None:
        return ("x = ln1(x + self_attn(x, mask=causal & self_mask)); x = ln2(x + cross_attn(x, kv=memory, "
                "mask=memory_mask)); x = ln3(x + ff(x))")
    if "causal" in name:
        return f"your block computes {name}: build the (T, T) lower-triangular mask inside forward"
    return f"your block computes {name}"


OPTIONAL_MASKS = ("self_mask and memory_mask are optional: None means no padding (then only the causal mask "
                  "applies to the self-attention, and the cross-attention gets no mask); check for None before "
                  "using them")


def _run_decoder(block, x, memory, self_mask=None, memory_mask=None):
    try:
        out = call(block, x, memory, self_mask=self_mask, memory_mask=memory_mask, name="DecoderBlock.forward",
                   reread=SEC_DEC)
    except CheckFailed as e:
        if "NoneType" in e.title and (self_mask is None or memory_mask is None):
            raise CheckFailed(e.title, hint=OPTIONAL_MASKS, reread=SEC_DEC, student_tb=e.student_tb) from None
        raise
    return expect_tensor(out, "DecoderBlock.forward", reread=SEC_DEC)


def _compare_decoder(block, x, memory, self_mask=None, memory_mask=None, what="DecoderBlock(x, memory)"):
    with torch.no_grad():
        out = _run_decoder(block, x, memory, self_mask, memory_mask)
        expect_shape(out, x.shape, what, reread=SEC_DEC, inputs=f"x {tuple(x.shape)}, memory {tuple(memory.shape)}")
        want = decoder_by_parts(block, x, memory, self_mask, memory_mask)
        if not close(out, want):
            cands = {}
            for name, kw in WIRINGS.items():
                try:
                    cands[name] = decoder_by_parts(block, x, memory, self_mask, memory_mask, **kw)
                except RuntimeError:   # e.g. a swapped mask that cannot broadcast
                    pass
            name = first_match(out, cands)
            expect_close(out, want, what, hint=_decoder_hint(name), reread=SEC_DEC,
                         inputs=f"x {tuple(x.shape)}, memory {tuple(memory.shape)}, "
                                f"self_mask {'None' if self_mask is None else tuple(self_mask.shape)}, "
                                f"memory_mask {'None' if memory_mask is None else tuple(memory_mask.shape)}")
    return out


def decoder_shapes(DecoderBlock) -> None:
    """(B, T, D) in, (B, T, D) out, with memory (B, S, D), S != T, and T = 1."""
    block = _decoder(DecoderBlock).eval()
    for T, S in ((5, 7), (1, 3)):
        x, memory = torch.randn(2, T, 16), torch.randn(2, S, 16)
        with torch.no_grad():
            out = _run_decoder(block, x, memory)
        expect_shape(out, (2, T, 16), "DecoderBlock(x, memory)", reread=SEC_DEC,
                     hint="the output has the decoder's length T, whatever the memory's length S",
                     inputs=f"x (2, {T}, 16), memory (2, {S}, 16)")
    passed("DecoderBlock: (B, T, D) out for memory of another length S")


DECODER_DROPOUT = ("dropout goes on each sub-layer's output, before the residual add: ln(x + drop(sublayer(...))); "
                   "not after the LayerNorm, not on the residual stream, not on a sub-layer's input")


def decoder_dropout_variants(block, x, memory):
    """The block in train mode with dropout=1 (every dropped value 0) under common misplacements."""
    zero = torch.zeros_like(x)
    T = x.size(1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    ln1, ln2, ln3, ff = block.ln1, block.ln2, block.ln3, block.ff
    return {
        "dropout after the LayerNorms, drop(ln(x + sublayer(x)))": ln3(zero + ff(zero)),
        "no dropout on the self-attention's output": (lambda a: ln3(a + ff(a)))(
            ln2(ln1(x + block.self_attn(x, mask=causal)))
        ),
        "no dropout on the cross-attention's output": (lambda a: ln3(a + ff(a)))(
            ln2(ln1(x) + block.cross_attn(ln1(x), kv=memory))
        ),
        "no dropout on either attention's output": (lambda a: ln3(a + ff(a)))(
            (lambda b: ln2(b + block.cross_attn(b, kv=memory)))(ln1(x + block.self_attn(x, mask=causal)))
        ),
    }


def decoder_dropout_placement(cls, D=16, H=4, d_ff=32, B=2, T=4, S=6, seed=73) -> None:
    """Train mode with dropout=1.0: dropout zeroes what it is applied to, so the output shows where
    it sits. Both attentions' outputs vanish (the stream keeps ln2(ln1(x))); the feed-forward adds
    what your FeedForward gives in train mode (0 when the block drops its output too)."""
    torch.manual_seed(seed)
    block = call(cls, D, H, d_ff, 1.0, name="DecoderBlock", reread=SEC_DEC)
    randomize_(block, seed)
    block.train()
    g = torch.Generator().manual_seed(seed)
    x, memory = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
    with torch.no_grad():
        out = _run_decoder(block, x, memory)
        expect_shape(out, x.shape, "DecoderBlock(x, memory) in train mode", reread=SEC_DEC)
        h = block.ln2(block.ln1(x))
        accepted = [block.ln3(h + block.ff(h)), block.ln3(h)]
        if not any(close(out, a) for a in accepted):
            name = first_match(out, decoder_dropout_variants(block, x, memory))
            raise CheckFailed("DecoderBlock(dropout=1.0) in train mode: the dropout is in the wrong place",
                              reread=SEC_DEC, hint=(f"your block applies {name}: " if name else "") + DECODER_DROPOUT,
                              details=["with p = 1 dropout zeroes what it is applied to: both attentions' "
                                       "contributions vanish and the stream keeps ln2(ln1(x))",
                                       f"inputs: x {tuple(x.shape)}, memory {tuple(memory.shape)}, random weights"])


def decoder_values(DecoderBlock) -> None:
    """Post-LN: masked self-attention, cross-attention to the memory, feed-forward (no padding);
    in train mode the dropout sits on each attention's output, before the residual add."""
    torch.manual_seed(0)
    block = _decoder(DecoderBlock).eval()
    randomize_(block, 70)
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    _compare_decoder(block, x, memory)
    decoder_dropout_placement(DecoderBlock)
    block = _decoder(DecoderBlock).train()                          # dropout=0.0 by default: train == eval
    randomize_(block, 74)
    with torch.no_grad():
        if not close(_run_decoder(block, x, memory), _run_decoder(block.eval(), x, memory)):
            raise CheckFailed("DecoderBlock(d_model, n_heads, d_ff), built without a dropout argument, drops values "
                              "in train mode", hint="dropout=0.0 is the default: without a dropout argument nothing "
                                                    "is dropped", reread=SEC_DEC)
    passed("DecoderBlock: ln1(x + drop(self_attn), causal) -> ln2(x + drop(cross_attn(memory))) -> ln3(x + ff)")


def decoder_causal(DecoderBlock) -> None:
    """Changing target tokens t.. leaves the outputs before t unchanged; they do depend on the past."""
    torch.manual_seed(1)
    block = _decoder(DecoderBlock).eval()
    randomize_(block, 71)
    x, memory = torch.randn(2, 6, 16), torch.randn(2, 4, 16)
    x2 = x.clone()
    x2[:, 4:] = torch.randn(2, 2, 16)
    with torch.no_grad():
        y, y2 = _run_decoder(block, x, memory), _run_decoder(block, x2, memory)
    if not close(y2[:, :4], y[:, :4]):
        raise CheckFailed(
            "changing decoder positions 4..5 changed the outputs at positions 0..3",
            hint="the self-attention must be causal: combine a (T, T) lower-triangular mask into its mask",
            reread=SEC_MASKS,
        )
    x3 = x.clone()
    x3[:, 0] += 1.0
    with torch.no_grad():
        y3 = _run_decoder(block, x3, memory)
    if close(y3[:, 1:], y[:, 1:]):
        raise CheckFailed("later positions do not react to a change of position 0",
                          hint="the causal mask should hide the future only: True on and below the diagonal",
                          reread=SEC_MASKS)
    passed("DecoderBlock: causal, position t sees positions 0..t only")


def decoder_masks(DecoderBlock) -> None:
    """memory_mask (B, S) hides padded source tokens from the cross-attention; self_mask (B, T) hides padded
    targets; here with 2 heads."""
    torch.manual_seed(2)
    block = _decoder(DecoderBlock, H=2).eval()
    randomize_(block, 72)
    for T, S in ((5, 5), (4, 6)):   # equal lengths first: a mask on the wrong axis still runs and can be named
        x, memory = torch.randn(2, T, 16), torch.randn(2, S, 16)
        keep_s = torch.ones(2, S, dtype=torch.bool)
        keep_s[1, S - 3:] = False
        out = _compare_decoder(
            block, x, memory, memory_mask=keep_s, what=f"DecoderBlock with a memory_mask (T={T}, S={S})"
        )
        mem2 = memory.clone()
        mem2[1, S - 3:] = 50.0
        with torch.no_grad():
            out2 = _run_decoder(block, x, mem2, memory_mask=keep_s)
        if not close(out2, out):
            raise CheckFailed("changing masked (padded) memory positions changed the output",
                              hint="memory_mask[:, None, None, :] on the cross-attention's key axis", reread=SEC_DEC)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    keep_t = torch.ones(2, 5, dtype=torch.bool)
    keep_t[0, 3:] = False
    _compare_decoder(block, x, memory, self_mask=keep_t, what="DecoderBlock with a self_mask (target padding)")
    passed("DecoderBlock: memory_mask and self_mask hide padded keys")


# ----------------------------------------------------------------------------------------
# Seq2SeqTransformer
# ----------------------------------------------------------------------------------------
def _model(cls, src_vocab=11, tgt_vocab=13, pad_id=0, seed=0, d_model=18, n_heads=3):
    torch.manual_seed(seed)
    model = call(cls, src_vocab, tgt_vocab, d_model=d_model, n_heads=n_heads, d_ff=64, n_layers=2, max_len=16,
                 pad_id=pad_id, name="Seq2SeqTransformer", reread=SEC_S2S)
    if not isinstance(model, nn.Module):
        raise CheckFailed("Seq2SeqTransformer(...) is not an nn.Module", reread=SEC_S2S)
    return model.eval()


NO_TORCH_LAYERS = ("build the model from your own blocks: nn.Transformer, nn.TransformerEncoder(Layer), "
                   "nn.TransformerDecoder(Layer) and nn.MultiheadAttention are off limits inside Seq2SeqTransformer "
                   "(the encoder is made of TransformerBlocks, the decoder of your DecoderBlocks)")


def torch_transformer_layers() -> list[tuple[object, str]]:
    """PyTorch's ready-made Transformer layers: what Seq2SeqTransformer may not run (patched to raise)."""
    return [(nn.Transformer, "forward"), (nn.TransformerEncoder, "forward"), (nn.TransformerDecoder, "forward"),
            (nn.TransformerEncoderLayer, "forward"), (nn.TransformerDecoderLayer, "forward"),
            (nn.MultiheadAttention, "forward")]


def _logits(model, src, tgt):
    with torch.no_grad(), forbid(torch_transformer_layers(), NO_TORCH_LAYERS):
        out = call(model, src, tgt, name="Seq2SeqTransformer.forward", reread=SEC_S2S)
    return expect_tensor(out, "Seq2SeqTransformer.forward", reread=SEC_S2S)


def _tokens(g, shape, lo, hi):
    return torch.randint(lo, hi, shape, generator=g)


def seq2seq_shapes(Seq2SeqTransformer) -> None:
    """logits (B, T, tgt_vocab) for S != T, and for S = T = 1."""
    model = _model(Seq2SeqTransformer)
    g = torch.Generator().manual_seed(0)
    for B, S, T in ((3, 7, 5), (1, 1, 1), (2, 16, 16)):
        out = _logits(model, _tokens(g, (B, S), 1, 11), _tokens(g, (B, T), 1, 13))
        hint = ("the last axis should be tgt_vocab (13), not src_vocab" if out.shape[-1] == 11 else
                "one row of tgt_vocab logits per target position")
        expect_shape(out, (B, T, 13), "Seq2SeqTransformer(src, tgt)", hint=hint, reread=SEC_S2S,
                     inputs=f"src_vocab=11, tgt_vocab=13, src {(B, S)}, tgt {(B, T)}")
    passed("Seq2SeqTransformer: logits (B, T, tgt_vocab), up to max_len positions")


def seq2seq_causal(Seq2SeqTransformer) -> None:
    """The logits at position t do not depend on target tokens after t."""
    model = _model(Seq2SeqTransformer, seed=1)
    g = torch.Generator().manual_seed(1)
    src, tgt = _tokens(g, (2, 6), 1, 11), _tokens(g, (2, 7), 1, 13)
    tgt2 = tgt.clone()
    tgt2[:, 4:] = (tgt[:, 4:] + 3) % 12 + 1
    a, b = _logits(model, src, tgt), _logits(model, src, tgt2)
    if not close(b[:, :4], a[:, :4]):
        raise CheckFailed("the logits at positions 0..3 change when target tokens 4..6 change",
                          hint="the model may not look ahead: the decoder's self-attention must be causal "
                               "(your DecoderBlock) and nothing else may mix target positions", reread=SEC_MASKS)
    passed("Seq2SeqTransformer: causal in the target")


def seq2seq_source(Seq2SeqTransformer) -> None:
    """The logits depend on the source, and on its order (positions)."""
    model = _model(Seq2SeqTransformer, seed=2)
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.tensor([[3, 5, 7, 9, 2, 4]]), _tokens(g, (1, 4), 1, 13)
    base = _logits(model, src, tgt)
    other = src.clone()
    other[0, 2] = 8
    if close(_logits(model, other, tgt), base):
        raise CheckFailed("changing a source token does not change the logits",
                          hint="the decoder must read the encoder's output: pass it as memory to every DecoderBlock",
                          reread=SEC_DEC)
    if close(_logits(model, src.flip(1), tgt), base, atol=1e-5, rtol=1e-4):
        raise CheckFailed("reversing the source gives the same logits: the model cannot see word order",
                          hint="add position encodings (sinusoidal_positions or a learned nn.Embedding(max_len, D)) "
                               "to the source embeddings", reread=SEC_S2S)
    passed("Seq2SeqTransformer: reads the source, in order")


def seq2seq_padding(Seq2SeqTransformer) -> None:
    """Extra padding at the end of the source changes nothing (pad_id 0, and pad_id 3 with 3 heads)."""
    for pad, d_model, n_heads in ((0, 32, 4), (3, 18, 3)):   # other pad_id and number of heads
        model = _model(Seq2SeqTransformer, seed=3, pad_id=pad, d_model=d_model, n_heads=n_heads)
        src = torch.tensor([[4, 9, 2, 7, 5, 0, 0], [1, 1, 8, 0, 0, 0, 0]])
        src = torch.where(src == 0, pad, src)
        tgt = torch.tensor([[1, 6, 2, 9], [1, 4, 4, 0]])
        tgt = torch.where(tgt == 0, pad, tgt)
        what = f"Seq2SeqTransformer(..., d_model={d_model}, n_heads={n_heads}, pad_id={pad})"
        a = _logits(model, src, tgt)
        b = _logits(model, torch.cat([src, torch.full((2, 5), pad)], dim=1), tgt)
        if not close(b, a, atol=1e-5, rtol=1e-4):
            raise CheckFailed(f"{what}: appending more padding (pad_id={pad}) to the source changes the logits",
                              hint="mask source padding (src == pad_id, the pad_id the model was built with) as "
                                   "keys: in the encoder and as the decoder's memory_mask", reread=SEC_MASKS)
    seq2seq_defaults(Seq2SeqTransformer)
    passed("Seq2SeqTransformer: source padding is masked, whatever pad_id is (pad_id=0 by default)")


DEFAULTS = ("Seq2SeqTransformer(src_vocab, tgt_vocab) must work with the signature's defaults: d_model=64, "
            "n_heads=4, d_ff=128, n_layers=2, max_len=32, pad_id=0")


def seq2seq_defaults(cls, src_vocab=11, tgt_vocab=13, seed=4) -> None:
    """Seq2SeqTransformer(src_vocab, tgt_vocab), every other argument at its default: it builds, gives
    (B, T, tgt_vocab) logits up to max_len = 32 positions, and masks token 0 (pad_id=0) as padding."""
    torch.manual_seed(seed)
    model = call(cls, src_vocab, tgt_vocab, name="Seq2SeqTransformer(src_vocab, tgt_vocab)", reread=SEC_S2S)
    if not isinstance(model, nn.Module):
        raise CheckFailed("Seq2SeqTransformer(src_vocab, tgt_vocab) is not an nn.Module", reread=SEC_S2S)
    model.eval()
    src = torch.tensor([[4, 9, 2, 7, 5, 0, 0], [3, 3, 8, 0, 0, 0, 0]]) % (src_vocab - 2) + 2   # no token 0 or 1 ...
    src[:, 5:], src[1, 3:] = 0, 0                                                          # ... but the padding
    tgt = torch.tensor([[2, 6, 2, 9], [3, 4, 4, 3]]) % (tgt_vocab - 2) + 2
    a = _logits(model, src, tgt)
    expect_shape(a, (2, 4, tgt_vocab), "logits of Seq2SeqTransformer(src_vocab, tgt_vocab)", hint=DEFAULTS,
                 reread=SEC_S2S)
    if not bool(torch.isfinite(a).all()):
        raise CheckFailed("Seq2SeqTransformer(src_vocab, tgt_vocab) gives nan logits for a source padded with 0",
                          hint=DEFAULTS, reread=SEC_S2S)
    b = _logits(model, torch.cat([src, torch.zeros(2, 32 - 7, dtype=torch.long)], dim=1), tgt)
    if not close(b, a, atol=1e-5, rtol=1e-4):
        raise CheckFailed("Seq2SeqTransformer(src_vocab, tgt_vocab): padding the source with token 0 up to 32 "
                          "positions changes the logits", hint=DEFAULTS, reread=SEC_MASKS)
    torch.manual_seed(seed)                 # the defaults written out: the same model, weight for weight
    spelled = call(cls, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=32, pad_id=0,
                   name="Seq2SeqTransformer", reread=SEC_S2S)
    if not isinstance(spelled, nn.Module):
        raise CheckFailed("Seq2SeqTransformer(...) is not an nn.Module", reread=SEC_S2S)
    ours = {n: tuple(t.shape) for n, t in [*model.named_parameters(), *model.named_buffers()]}
    theirs = {n: tuple(t.shape) for n, t in [*spelled.named_parameters(), *spelled.named_buffers()]}
    if ours != theirs or not close(_logits(spelled.eval(), src, tgt), a, atol=1e-5, rtol=1e-4):
        differ = sorted(n for n in ours.keys() | theirs.keys() if ours.get(n) != theirs.get(n))
        raise CheckFailed(
            "Seq2SeqTransformer(src_vocab, tgt_vocab) is not the model its defaults spelled out build "
            "(d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=32, pad_id=0)",
            hint=DEFAULTS,
            reread=SEC_S2S,
            details=[
                f"different: {', '.join(f'{n} {ours.get(n)} vs {theirs.get(n)}' for n in differ[:4])}"
                if differ
                else "the same weights give other logits"
            ],
        )


# ----------------------------------------------------------------------------------------
# greedy_decode
# ----------------------------------------------------------------------------------------
class ScriptedModel(nn.Module):
    """A stand-in for a trained model: when the decoder input has length t, sequence b's most
    likely next token is ``scripts[b][t - 1]`` (the last entry repeats). With ``decoy`` set, the
    logits of every earlier position point at the decoy token (only the last position counts)."""

    def __init__(self, scripts, vocab, bos, decoy=None):
        super().__init__()
        self.scripts, self.vocab, self.bos, self.decoy = scripts, vocab, bos, decoy
        self.calls = 0

    def forward(self, src, tgt):
        self.calls += 1
        if tgt.dim() != 2 or tgt.size(0) != len(self.scripts):
            raise ValueError(f"the decoder input should be (B, t) with B={len(self.scripts)}, got {tuple(tgt.shape)}")
        if not bool((tgt[:, 0] == self.bos).all()):
            raise ValueError("the decoder input should start with bos_id")
        B, t = tgt.shape
        logits = torch.zeros(B, t, self.vocab)
        for b, script in enumerate(self.scripts):
            tok = script[min(t - 1, len(script) - 1)]
            if self.decoy is None:
                logits[b, :, tok] = 3.0
            else:
                logits[b, :, self.decoy] = 3.0
                logits[b, -1] = 0.0
                logits[b, -1, tok] = 3.0
        return logits


def greedy_oracle(scripts, max_len, bos, eos):
    """One sequence at a time, the definition in words."""
    rows, n_steps = [], 0
    for script in scripts:
        row = [bos]
        for step in range(max_len):
            tok = script[min(step, len(script) - 1)]
            row.append(tok)
            if tok == eos:
                break
        rows.append(row)
    n_steps = max(len(r) for r in rows) - 1
    return torch.tensor([r + [eos] * (n_steps + 1 - len(r)) for r in rows])


def greedy_wrong_variants(scripts, max_len, bos, eos):
    def run(first_eos=False, no_stop=False, keep_going=False, steps=max_len, with_bos=True):
        B = len(scripts)
        rows = [[bos] for _ in range(B)]
        done = [False] * B
        for step in range(steps):
            for b, s in enumerate(scripts):
                tok = s[min(step, len(s) - 1)]
                rows[b].append(eos if done[b] and not keep_going else tok)
                done[b] = done[b] or tok == eos
            if not no_stop and (any(done) if first_eos else all(done)):
                break
        out = torch.tensor(rows)
        return out if with_bos else out[:, 1:]

    return {
        "a decoder that never stops at eos (always max_len steps)": run(no_stop=True),
        "a decoder that stops as soon as the first sequence finishes (not every sequence)": run(first_eos=True),
        "finished sequences keep receiving the model's tokens after their first eos": run(keep_going=True),
        "the output without the bos token in front": run(with_bos=False),
        "one step fewer than max_len": run(steps=max_len - 1),
        "one step more than max_len": run(steps=max_len + 1),
    }


def _greedy(fn, model, B, max_len, bos, eos):
    src = torch.zeros(B, 3, dtype=torch.long)
    try:
        out = call(fn, model, src, max_len, bos, eos, name="greedy_decode", reread=SEC_GREEDY)
    except CheckFailed as e:
        if B > 1 and ("converted to Scalar" in e.title or "more than one value" in e.title):
            raise CheckFailed(e.title, reread=SEC_GREEDY, student_tb=e.student_tb,
                              hint="greedy_decode works on a batch of B sequences at once: keep one token per "
                                   "sequence in a (B,) tensor and one finished flag per sequence; .item() and "
                                   "`if tensor:` only work for B = 1") from None
        raise
    return expect_tensor(out, "greedy_decode", reread=SEC_GREEDY)


def _compare_greedy(fn, scripts, max_len, bos=1, eos=2, vocab=10, decoy=None, what="greedy_decode"):
    model = ScriptedModel(scripts, vocab, bos, decoy)
    out = _greedy(fn, model, len(scripts), max_len, bos, eos)
    want = greedy_oracle(scripts, max_len, bos, eos)
    if tuple(out.shape) != tuple(want.shape) or not torch.equal(out.long(), want):
        cands = {k: v.float() for k, v in greedy_wrong_variants(scripts, max_len, bos, eos).items()}
        if decoy is not None:
            first = [[sc[0]] + [decoy] * max_len for sc in scripts]   # position 0 is the last one only at step 1
            cands["tokens read from the first position's logits instead of the last"] = \
                greedy_oracle(first, max_len, bos, eos).float()
        name = first_match(out.float(), cands)
        hint = f"your output looks like {name}" if name else None
        if name and "first position" in name:
            hint = "take the logits of the last position, logits[:, -1]: it predicts the next token"
        elif name and "max_len" in name:
            hint = f"your output looks like {name}: run at most max_len steps (range(max_len))"
        raise CheckFailed(f"{what}: wrong tokens", hint=hint, reread=SEC_GREEDY,
                          details=[f"scripted model, bos={bos}, eos={eos}, max_len={max_len}",
                                   f"expected {want.tolist()}", f"got      {out.tolist()}"])
    if out.dtype != torch.long:
        raise CheckFailed(
            f"greedy_decode returns dtype {out.dtype}", hint="token ids are torch.long", reread=SEC_GREEDY
        )


def greedy_single(greedy_decode) -> None:
    """One sequence: starts with bos, stops right after eos."""
    _compare_greedy(greedy_decode, [[5, 6, 2, 7, 7]], max_len=10, what="greedy_decode of one sequence")
    passed("greedy_decode: [bos, tokens..., eos] and stops at eos")


def greedy_batch(greedy_decode) -> None:
    """A batch: sequences finish at different steps (padded with eos), or are cut at max_len."""
    _compare_greedy(greedy_decode, [[4, 2], [5, 6, 7, 2], [8, 9, 3, 9, 3, 9, 3, 9]], max_len=6,
                    what="greedy_decode of a batch (one sequence never emits eos)")
    _compare_greedy(greedy_decode, [[3, 5], [6, 6, 3, 4]], max_len=8, bos=0, eos=3,
                    what="greedy_decode of a batch that all finishes (bos_id=0, eos_id=3)")
    passed("greedy_decode: waits for every sequence, pads finished ones with eos, at most max_len steps")


def greedy_last_position(greedy_decode) -> None:
    """Only the last position's logits predict the next token."""
    _compare_greedy(greedy_decode, [[5, 6, 2], [7, 2]], max_len=5, decoy=9,
                    what="greedy_decode with a model whose earlier positions predict another token")
    passed("greedy_decode: reads the next token from the last position")


guard(globals())  # every check records warnings instead of printing them (core.guard)
