"""Lecture 08's GPT: the model and the pieces exercise 08 asks for, in reference form.

The model is the decoder-only Transformer of lectures 05-07: token + position embeddings, a
stack of pre-LayerNorm blocks with *causal* self-attention, a final LayerNorm and a linear
head tied to the token embedding. Beside it, the other graded pieces of exercise 08:
``generate`` (sampling), ``get_batch`` (random training windows) and ``lr_at`` (warmup +
cosine schedule, with :func:`lr_in_budget`, the same schedule over a time budget).

Where the rest lives (as nanoGPT keeps ``model.py`` apart from ``train.py``):
``presets`` (TrainConfig and the named presets), ``devices`` (device, precision, GPU peaks),
``training`` (the loop, loss estimates, checkpoints), ``ablation`` (zeroing heads) and
``train`` (the command line, one device or DDP).

Shapes: B batch, T positions (<= block_size), D = d_model, H heads, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blocks import TransformerBlock
from .mha import MultiHeadAttention, attention, merge_heads, split_heads

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


# ----------------------------------------------------------------------------- the model
@dataclass
class GPTConfig:
    """The model's shape (what ``GPT.from_config`` builds); a training recipe adds ``presets.TrainConfig``."""
    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    d_ff: int | None = None       # None = 4 * d_model
    dropout: float = 0.0
    bias: bool = True
    tie_weights: bool = True
    activation: str = "gelu"


class CausalSelfAttention(MultiHeadAttention):
    """Lecture 05's attention with three additions for a trained GPT.

    * ``is_causal=True`` goes straight to ``F.scaled_dot_product_attention(is_causal=True)``,
      which lets PyTorch pick its fused (flash / memory-efficient) kernels;
    * ``keep_weights=True`` takes the slow path that stores ``last_weights`` (B, H, T, T) for
      heatmaps;
    * ``head_mask`` (H,) multiplies each head's output before the heads are merged: 0 ablates a head.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__(d_model, n_heads, bias=bias, dropout=dropout, fast=True)
        self.keep_weights = False
        self.head_mask: torch.Tensor | None = None

    def forward(self, x, kv=None, mask=None, is_causal=False):
        if kv is not None:  # cross-attention (not used by a GPT): lecture 05's code path
            return super().forward(x, kv=kv, mask=mask, is_causal=is_causal)
        D, H = self.d_model, self.n_heads
        q, k, v = self.W_qkv(x).split(D, dim=-1)                           # 3 x (B, T, D)
        q, k, v = split_heads(q, H), split_heads(k, H), split_heads(v, H)  # (B, H, T, Dh)
        if is_causal and (mask is not None or self.keep_weights):
            T = q.size(-2)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            mask, is_causal = (causal if mask is None else mask & causal), False
        if self.keep_weights:
            y, w = attention(q, k, v, mask)                                 # (B, H, T, Dh), (B, H, T, T)
            self.last_weights = w.detach()
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                               dropout_p=self.dropout if self.training else 0.0)
            self.last_weights = None
        if self.head_mask is not None:
            y = y * self.head_mask.to(y.dtype).view(1, H, 1, 1)
        return self.W_o(merge_heads(y))                                     # (B, T, D)


class Block(TransformerBlock):
    """Lecture 06's pre-LN block with the GPT attention above, GELU and an optional bias-free mode."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, dropout: float = 0.0,
                 bias: bool = True, activation: str = "gelu"):
        d_ff = d_ff or 4 * d_model
        super().__init__(d_model, n_heads, d_ff, dropout, pre_ln=True, fast=True,
                         activation=ACTIVATIONS[activation])
        self.attn = CausalSelfAttention(d_model, n_heads, bias=bias, dropout=dropout)
        if not bias:
            self.ln1, self.ln2 = nn.LayerNorm(d_model, bias=False), nn.LayerNorm(d_model, bias=False)
            self.ff.net[0] = nn.Linear(d_model, d_ff, bias=False)
            self.ff.net[2] = nn.Linear(d_ff, d_model, bias=False)


class GPT(nn.Module):
    """Decoder-only Transformer language model.

    ``forward(idx (B, T) int64, targets (B, T) or None) -> (logits (B, T, V), loss or None)``;
    the loss is the mean cross-entropy of predicting ``targets[b, t]`` from ``idx[b, :t+1]``.
    """

    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, d_model: int,
                 dropout: float = 0.0, *, d_ff: int | None = None, bias: bool = True,
                 tie_weights: bool = True, activation: str = "gelu"):
        super().__init__()
        self.vocab_size, self.block_size = vocab_size, block_size
        self.n_layer, self.n_head, self.d_model = n_layer, n_head, d_model
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, n_head, d_ff, dropout, bias, activation) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model, bias=bias)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_weights:  # one (V, D) matrix reads tokens in and scores them out (GPT-2 does this)
            self.lm_head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # residual projections: keep the stream's variance in check
            if name.endswith("attn.W_o.weight") or name.endswith("ff.net.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @classmethod
    def from_config(cls, cfg: "GPTConfig") -> "GPT":
        return cls(cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.d_model, cfg.dropout,
                   d_ff=cfg.d_ff, bias=cfg.bias, tie_weights=cfg.tie_weights, activation=cfg.activation)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        if T > self.block_size:
            raise ValueError(f"sequence of length {T} is longer than block_size={self.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))   # (B, T, D) + (T, D)
        for block in self.blocks:
            x = block(x, is_causal=True)                         # (B, T, D)
        logits = self.lm_head(self.ln_f(x))                      # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1).float(), targets.reshape(B * T))
        return logits, loss

    def num_params(self, non_embedding: bool = False) -> int:
        """Distinct parameters (a tied matrix counts once); optionally without the position table."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.pos_emb.weight.numel() if non_embedding else n

    def attentions(self) -> list[CausalSelfAttention]:
        return [b.attn for b in self.blocks]

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Attention weights (n_layer, B, H, T, T) of every layer and head for ``idx`` (B, T)."""
        was_training = self.training
        self.eval()
        for a in self.attentions():
            a.keep_weights = True
        try:
            self(idx)
            return torch.stack([a.last_weights for a in self.attentions()])
        finally:
            for a in self.attentions():
                a.keep_weights, a.last_weights = False, None
            self.train(was_training)


# ----------------------------------------------------------------------------- the other graded pieces
@torch.no_grad()
def generate(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Extend ``idx`` (B, T) by ``max_new_tokens`` sampled tokens; returns (B, T + max_new_tokens).

    Each step feeds at most the last ``model.block_size`` tokens, divides the last position's
    logits by ``temperature``, keeps the ``top_k`` largest (if given) and samples from the
    softmax with ``torch.multinomial(..., generator=generator)``: the same seeded generator
    gives the same text. ``temperature=0`` means greedy (argmax). The model is put in eval mode
    for the call (no dropout) and restored afterwards.
    """
    was_training = model.training
    model.eval()
    try:
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -model.block_size:]                # (B, <= block_size)
            logits, _ = model(idx_cond)
            logits = logits[:, -1, :].float()                    # (B, V) the next-token scores
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (B, 1)
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = F.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)
            idx = torch.cat([idx, nxt.to(idx.dtype)], dim=1)
    finally:
        model.train(was_training)
    return idx


def lr_at(step: int, warmup_steps: int, max_steps: int, max_lr: float, min_lr: float) -> float:
    """Learning rate at optimizer step ``step`` (0-based).

    Steps 0 .. warmup_steps-1 rise linearly: max_lr * (step + 1) / warmup_steps, so step 0 already
    learns and step warmup_steps-1 reaches max_lr. From warmup_steps to max_steps a half cosine
    goes from max_lr down to min_lr; from max_steps on the rate stays at min_lr.
    """
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    return cosine_decay((step - warmup_steps) / (max_steps - warmup_steps), max_lr, min_lr)


def cosine_decay(ratio: float, max_lr: float, min_lr: float) -> float:
    """Half a cosine from ``max_lr`` (ratio 0) down to ``min_lr`` (ratio 1 and beyond)."""
    ratio = min(max(ratio, 0.0), 1.0)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


def lr_in_budget(step: int, seconds: float, warmup_steps: int, warmup_seconds: float, max_seconds: float,
                 max_lr: float, min_lr: float) -> float:
    """The schedule of :func:`lr_at` laid over a time budget instead of a step count.

    The warmup still counts steps (it is about the optimizer's first updates); after it, the
    cosine runs over the *training seconds* left: ``seconds`` spent so far, ``warmup_seconds``
    spent when the warmup ended, ``max_seconds`` the budget. So the rate reaches ``min_lr``
    exactly when the budget is spent, however many steps this CPU or GPU manages in it.
    """
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    return cosine_decay((seconds - warmup_seconds) / max(max_seconds - warmup_seconds, 1e-9), max_lr, min_lr)


def get_batch(data: torch.Tensor, block_size: int, batch_size: int,
              generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``data`` (1-D token ids): x (B, T) and y = x shifted by one."""
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)  # (B,) window starts
    idx = (ix[:, None] + torch.arange(block_size)).to(data.device)          # (B, T) positions in data
    return data[idx], data[idx + 1]                                         # x, y = x shifted by one
