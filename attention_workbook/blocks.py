"""Reference Transformer building blocks (lecture 06 and 07 build them; 08 trains them).

The minimal core lives here so the GPT of lecture 08 and the blocks of lecture 06 are the
same code; lecture 06/07's material (LayerNorm by hand, positions, decoder blocks) extends it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .mha import MultiHeadAttention, _copy_linear, attention, merge_heads, split_heads


class FeedForward(nn.Module):
    """Position-wise feed-forward: Linear D -> d_ff, ReLU, Linear d_ff -> D, dropout."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), activation(), nn.Linear(d_ff, d_model),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, T, D)
        return self.net(x)


class TransformerBlock(nn.Module):
    """Self-attention + feed-forward, each wrapped in a residual connection and a LayerNorm.

    pre_ln=True  (GPT style):   x = x + attn(ln1(x));  x = x + ff(ln2(x))
    pre_ln=False (the paper):   x = ln1(x + attn(x));  x = ln2(x + ff(x))
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, pre_ln: bool = True,
                 fast: bool = False, activation: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.pre_ln = pre_ln
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, fast=fast)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        if self.pre_ln:
            x = x + self.drop(self.attn(self.ln1(x), mask=mask, is_causal=is_causal))
            x = x + self.ff(self.ln2(x))
        else:
            x = self.ln1(x + self.drop(self.attn(x, mask=mask, is_causal=is_causal)))
            x = self.ln2(x + self.ff(x))
        return x


# ---------------------------------------------------------------------------------------------
# Lecture 06: positions, LayerNorm by hand, parameter counts, PyTorch interop
# ---------------------------------------------------------------------------------------------

def sinusoidal_positions(T: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(T, D) table with PE[t, 2i] = sin(t / base^(2i/D)) and PE[t, 2i+1] = cos(t / base^(2i/D))."""
    t = torch.arange(T, dtype=torch.float32)[:, None]                    # (T, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)             # (ceil(D/2),)
    angle = t / base ** (two_i / d_model)                                 # (T, ceil(D/2))
    pe = torch.zeros(T, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe


class LayerNorm(nn.Module):
    """LayerNorm written out: normalise each token over its D features (not over T or B).

    y = (x - mean) / sqrt(var + eps) * weight + bias, var the biased (1/D) variance, as
    ``nn.LayerNorm(d)`` computes it.
    """

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))   # gain
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., D) -> (..., D)
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def block_param_count(d_model: int, d_ff: int, bias: bool = True) -> int:
    """Parameters of one TransformerBlock: 4 D^2 (attention) + 2 D d_ff (feed-forward)
    + biases of the linear layers (4 D + d_ff + D) + two LayerNorms (gain and bias: 4 D).

    ``bias=False`` drops the biases of the linear layers only; LayerNorms keep gain and bias.
    """
    D = d_model
    weights = 4 * D * D + 2 * D * d_ff
    biases = (4 * D + d_ff + D) if bias else 0
    return weights + biases + 4 * D


def decoder_block_param_count(d_model: int, d_ff: int, bias: bool = True) -> int:
    """A DecoderBlock has one more attention (cross) and one more LayerNorm than an encoder block."""
    D = d_model
    return block_param_count(d_model, d_ff, bias) + 4 * D * D + (4 * D if bias else 0) + 2 * D


def transformer_param_count(n_layers: int, d_model: int, d_ff: int | None = None, vocab: int = 0,
                            context: int = 0, bias: bool = True, final_ln: bool = True) -> int:
    """A stack of n_layers blocks, plus token embeddings (vocab x D), learned position
    embeddings (context x D) and a final LayerNorm. Weight tying: the output layer reuses
    the token embedding, so it adds nothing."""
    d_ff = 4 * d_model if d_ff is None else d_ff
    total = n_layers * block_param_count(d_model, d_ff, bias)
    total += vocab * d_model + context * d_model
    return total + (2 * d_model if final_ln else 0)


def _copy_mha(dst: MultiHeadAttention, src: nn.MultiheadAttention) -> None:
    _copy_linear(dst.W_qkv, src.in_proj_weight, src.in_proj_bias)
    _copy_linear(dst.W_o, src.out_proj.weight, src.out_proj.bias)


def _copy_norm(dst: nn.Module, src: nn.LayerNorm) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def _activation_of(layer: nn.Module) -> type[nn.Module]:
    act = getattr(layer, "activation", torch.nn.functional.relu)
    if act is torch.nn.functional.relu or isinstance(act, nn.ReLU):
        return nn.ReLU
    if act is torch.nn.functional.gelu or isinstance(act, nn.GELU):
        return nn.GELU
    raise ValueError(f"unsupported activation {act!r}")


@torch.no_grad()
def from_torch_encoder_layer(layer: nn.TransformerEncoderLayer) -> TransformerBlock:
    """Our TransformerBlock with the weights of ``nn.TransformerEncoderLayer(batch_first=True)``."""
    D = layer.self_attn.embed_dim
    block = TransformerBlock(D, layer.self_attn.num_heads, layer.linear1.out_features,
                             dropout=layer.dropout.p, pre_ln=layer.norm_first,
                             activation=_activation_of(layer))
    _copy_mha(block.attn, layer.self_attn)
    _copy_linear(block.ff.net[0], layer.linear1.weight, layer.linear1.bias)
    _copy_linear(block.ff.net[2], layer.linear2.weight, layer.linear2.bias)
    _copy_norm(block.ln1, layer.norm1)
    _copy_norm(block.ln2, layer.norm2)
    block.ln1.eps = block.ln2.eps = layer.norm1.eps
    return block


# ---------------------------------------------------------------------------------------------
# Lecture 07: the decoder block with cross-attention, an encoder-decoder, greedy decoding
# ---------------------------------------------------------------------------------------------

def causal_mask(T: int, device=None) -> torch.Tensor:
    """(T, T) boolean, True = may attend: position t sees positions 0..t."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def padding_mask(keep: torch.Tensor | None) -> torch.Tensor | None:
    """(B, S) True = real token  ->  (B, 1, 1, S): every query of every head may attend to it."""
    return None if keep is None else keep[:, None, None, :]


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, feed-forward.

    Post-LN as in the original paper (``pre_ln=False``, matches ``nn.TransformerDecoderLayer``):
        x = ln1(x + self_attn(x, causal))
        x = ln2(x + cross_attn(queries x, keys/values memory))
        x = ln3(x + ff(x))
    ``self_mask`` (B, T) and ``memory_mask`` (B, S) are key-padding masks, True = real token.
    The causal mask is always applied to the self-attention.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, pre_ln: bool = False,
                 activation: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.pre_ln = pre_ln
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.ln1, self.ln2, self.ln3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        # x (B, T, D) decoder stream, memory (B, S, D) encoder output
        sm, mm = padding_mask(self_mask), padding_mask(memory_mask)   # (B, 1, 1, T), (B, 1, 1, S)
        if self.pre_ln:
            h = self.ln1(x)
            x = x + self.drop1(self.self_attn(h, mask=sm, is_causal=True))
            x = x + self.drop2(self.cross_attn(self.ln2(x), kv=memory, mask=mm))
            x = x + self.ff(self.ln3(x))
        else:
            x = self.ln1(x + self.drop1(self.self_attn(x, mask=sm, is_causal=True)))
            x = self.ln2(x + self.drop2(self.cross_attn(x, kv=memory, mask=mm)))
            x = self.ln3(x + self.ff(x))
        return x


@torch.no_grad()
def from_torch_decoder_layer(layer: nn.TransformerDecoderLayer) -> DecoderBlock:
    """Our DecoderBlock with the weights of ``nn.TransformerDecoderLayer(batch_first=True)``."""
    D = layer.self_attn.embed_dim
    block = DecoderBlock(D, layer.self_attn.num_heads, layer.linear1.out_features, dropout=layer.dropout.p,
                         pre_ln=layer.norm_first, activation=_activation_of(layer))
    _copy_mha(block.self_attn, layer.self_attn)
    _copy_mha(block.cross_attn, layer.multihead_attn)
    _copy_linear(block.ff.net[0], layer.linear1.weight, layer.linear1.bias)
    _copy_linear(block.ff.net[2], layer.linear2.weight, layer.linear2.bias)
    for ours, theirs in ((block.ln1, layer.norm1), (block.ln2, layer.norm2), (block.ln3, layer.norm3)):
        _copy_norm(ours, theirs)
        ours.eps = theirs.eps
    return block


@dataclass
class Seq2SeqConfig:
    src_vocab: int
    tgt_vocab: int
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 256
    n_enc: int = 2
    n_dec: int = 2
    max_len: int = 64
    dropout: float = 0.0
    pad_id: int = 0
    pre_ln: bool = False      # False: the paper's post-LN


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer: embeddings * sqrt(D) + sinusoidal positions, an encoder of
    (bidirectional) TransformerBlocks, a decoder of DecoderBlocks, a linear output layer.

    forward(src (B, S), tgt (B, T)) -> logits (B, T, tgt_vocab); token ``pad_id`` is padding
    in both sequences and is masked as a key. ``attention_maps()`` returns the cross-attention
    weights of the last forward pass, one (B, H, T, S) tensor per decoder block.
    """

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.cfg = cfg
        D = cfg.d_model
        self.src_emb = nn.Embedding(cfg.src_vocab, D)
        self.tgt_emb = nn.Embedding(cfg.tgt_vocab, D)
        self.register_buffer("pos", sinusoidal_positions(cfg.max_len, D), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(TransformerBlock(D, cfg.n_heads, cfg.d_ff, cfg.dropout, pre_ln=cfg.pre_ln)
                                     for _ in range(cfg.n_enc))
        self.decoder = nn.ModuleList(DecoderBlock(D, cfg.n_heads, cfg.d_ff, cfg.dropout, pre_ln=cfg.pre_ln)
                                     for _ in range(cfg.n_dec))
        # pre-LN leaves the stream un-normalised: one final LayerNorm on each side (as GPT-2 does)
        self.enc_ln = nn.LayerNorm(D) if cfg.pre_ln else nn.Identity()
        self.dec_ln = nn.LayerNorm(D) if cfg.pre_ln else nn.Identity()
        self.head = nn.Linear(D, cfg.tgt_vocab)

    def _embed(self, emb: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        T = ids.size(1)
        if T > self.cfg.max_len:
            raise ValueError(f"sequence of length {T} is longer than max_len={self.cfg.max_len}")
        return self.drop(emb(ids) * math.sqrt(self.cfg.d_model) + self.pos[:T])  # (B, T, D)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        keep = src != self.cfg.pad_id                              # (B, S)
        x = self._embed(self.src_emb, src)
        for block in self.encoder:
            x = block(x, mask=padding_mask(keep))
        return self.enc_ln(x)                                      # (B, S, D)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        keep_src, keep_tgt = src != self.cfg.pad_id, tgt != self.cfg.pad_id
        y = self._embed(self.tgt_emb, tgt)
        for block in self.decoder:
            y = block(y, memory, self_mask=keep_tgt, memory_mask=keep_src)
        return self.head(self.dec_ln(y))                          # (B, T, V)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src), src)

    def attention_maps(self) -> list[torch.Tensor]:
        return [block.cross_attn.last_weights for block in self.decoder]


@torch.no_grad()
def greedy_decode(model: nn.Module, src: torch.Tensor, max_len: int, bos_id: int, eos_id: int) -> torch.Tensor:
    """Generate with argmax: start from bos, append the most likely next token, stop when
    every sequence has produced eos (finished sequences keep emitting eos) or after max_len
    new tokens. Only needs ``model(src, tgt) -> (B, T, V)`` logits.
    Returns (B, 1 + n) token ids that start with bos, n <= max_len.
    """
    B = src.size(0)
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)   # (B, 1)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model(src, ys)                                   # (B, t, V)
        nxt = logits[:, -1].argmax(dim=-1)                        # (B,)
        nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


def _cached_attention(attn: MultiHeadAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      keep: torch.Tensor | None) -> torch.Tensor:
    """One new query per sequence against stored keys/values: q (B, 1, D), k, v (B, S, D),
    keep (B, S) True = real key  ->  W_o(attention) (B, 1, D)."""
    H = attn.n_heads
    mask = None if keep is None else keep[:, None, None, :]                 # (B, 1, 1, S)
    y, _ = attention(split_heads(q, H), split_heads(k, H), split_heads(v, H), mask)
    return attn.W_o(merge_heads(y))


@torch.no_grad()
def greedy_decode_cached(model: "Seq2SeqTransformer", src: torch.Tensor, max_len: int, bos_id: int,
                         eos_id: int) -> torch.Tensor:
    """``greedy_decode`` with a key/value cache: the same tokens, far fewer operations.

    The source is encoded once, and each decoder block's cross-attention keys and values are
    projected from it once. Each step runs only the newest target token through the decoder:
    its self-attention query meets the keys and values of all earlier positions, which are
    stored (the cache) instead of recomputed, because causal masking means earlier positions
    never change. Needs a :class:`Seq2SeqTransformer` in eval mode.
    """
    cfg, D = model.cfg, model.cfg.d_model
    memory = model.encode(src)                                               # (B, S, D), once
    keep_src = src != cfg.pad_id                                             # (B, S)
    cross_kv = []                                                            # per block: (B, S, D) x 2
    for block in model.decoder:
        W, b = block.cross_attn.W_qkv.weight[D:], block.cross_attn.W_qkv.bias
        cross_kv.append(F.linear(memory, W, None if b is None else b[D:]).split(D, dim=-1))
    cache = [None] * len(model.decoder)                                      # per block: keys, values so far
    B = src.size(0)
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)    # (B, 1)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for t in range(max_len):
        x = model.tgt_emb(ys[:, -1:]) * math.sqrt(D) + model.pos[t:t + 1]   # (B, 1, D) newest token
        keep_tgt = ys != cfg.pad_id                                          # (B, t + 1)
        for i, block in enumerate(model.decoder):
            h = block.ln1(x) if block.pre_ln else x                          # self-attention input
            q, k, v = block.self_attn.W_qkv(h).split(D, dim=-1)              # 3 x (B, 1, D)
            if cache[i] is not None:
                k, v = torch.cat([cache[i][0], k], dim=1), torch.cat([cache[i][1], v], dim=1)
            cache[i] = (k, v)                                                # (B, t + 1, D) each
            a = _cached_attention(block.self_attn, q, k, v, keep_tgt)
            if block.pre_ln:
                x = x + a
                qc = F.linear(block.ln2(x), *_query_rows(block.cross_attn))
                x = x + _cached_attention(block.cross_attn, qc, *cross_kv[i], keep_src)
                x = x + block.ff(block.ln3(x))
            else:
                x = block.ln1(x + a)
                qc = F.linear(x, *_query_rows(block.cross_attn))
                x = block.ln2(x + _cached_attention(block.cross_attn, qc, *cross_kv[i], keep_src))
                x = block.ln3(x + block.ff(x))
        nxt = model.head(model.dec_ln(x))[:, -1].argmax(dim=-1)             # (B,)
        nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


def _query_rows(attn: MultiHeadAttention):
    """(weight, bias) of the query projection: the first D rows of W_qkv."""
    D, b = attn.d_model, attn.W_qkv.bias
    return attn.W_qkv.weight[:D], None if b is None else b[:D]


def count_params(model: nn.Module) -> int:
    """sum(p.numel()) over the trainable parameters (what the formulas above predict)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ---------------------------------------------------------------------------------------------
# The toy task of lecture 07 (and exercise 07): reverse a string of digits
# ---------------------------------------------------------------------------------------------

class ReverseDigits:
    """Source: a digit string such as "40721"; target: the same digits reversed, "12704".

    Token ids: 0 = <pad>, 1 = <bos>, 2 = <eos>, 3..12 = the digits 0..9 (one vocabulary for
    source and target). ``batch`` returns (src, tgt_in, tgt_out), each right-padded with 0:
    src = digits, tgt_in = <bos> + reversed, tgt_out = reversed + <eos> (teacher forcing).
    """

    PAD, BOS, EOS, OFFSET = 0, 1, 2, 3
    vocab_size = 13

    def __init__(self, min_len: int = 3, max_len: int = 8):
        self.min_len, self.max_len = min_len, max_len

    def batch(self, n: int, generator: torch.Generator | None = None):
        lengths = torch.randint(self.min_len, self.max_len + 1, (n,), generator=generator)
        digits = torch.randint(0, 10, (n, self.max_len), generator=generator) + self.OFFSET
        L = self.max_len
        src = torch.full((n, L), self.PAD)
        tgt_in = torch.full((n, L + 1), self.PAD)
        tgt_out = torch.full((n, L + 1), self.PAD)
        for i, k in enumerate(lengths.tolist()):
            seq = digits[i, :k]
            src[i, :k] = seq
            tgt_in[i, 0], tgt_in[i, 1:k + 1] = self.BOS, seq.flip(0)
            tgt_out[i, :k], tgt_out[i, k] = seq.flip(0), self.EOS
        return src, tgt_in, tgt_out

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor([[int(c) + self.OFFSET for c in text]])   # (1, S)

    def to_text(self, ids) -> str:
        out = []
        for t in (ids.tolist() if hasattr(ids, "tolist") else ids):
            if t == self.EOS:
                break
            if t >= self.OFFSET:
                out.append(str(t - self.OFFSET))
        return "".join(out)
