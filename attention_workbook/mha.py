"""Reference multi-head attention, as lecture 05 builds it (and as exercise 05 asks for it).

The hand-built heads and sentences lecture 05 draws are lecture data, in ``attention_workbook.toydata``.

Shapes: B batch, T query positions, S key/value positions, D model width, H heads,
Dh = D // H per-head width. Masks are boolean, True = may attend (the convention of
``F.scaled_dot_product_attention``), broadcastable to (B, H, T, S).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, D // H): view the last axis as (H, Dh), then move heads forward."""
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)  # (B, H, T, Dh)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, Dh) -> (B, T, H * Dh): the inverse of split_heads."""
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)


def attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v with the weights; q (..., T, d), k (..., S, d), v (..., S, dv)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


class MultiHeadAttention(nn.Module):
    """Fused-qkv multi-head attention; ``W_qkv`` rows are ordered [queries; keys; values]
    like ``nn.MultiheadAttention.in_proj_weight``.

    ``fast=True`` uses ``F.scaled_dot_product_attention`` (no weights kept): the path for
    training; ``fast=False`` computes and keeps the weights in ``last_weights`` for plots.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0,
                 fast: bool = False):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.fast, self.dropout = d_model, n_heads, fast, dropout
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.last_weights: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        D, H = self.d_model, self.n_heads
        if kv is None:
            q, k, v = self.W_qkv(x).split(D, dim=-1)  # 3 x (B, T, D)
        else:  # cross-attention: queries from x, keys and values from kv
            Wq, Wkv = self.W_qkv.weight.split([D, 2 * D])
            bq, bkv = self.W_qkv.bias.split([D, 2 * D]) if self.W_qkv.bias is not None else (None, None)
            q = F.linear(x, Wq, bq)                              # (B, T, D)
            k, v = F.linear(kv, Wkv, bkv).split(D, dim=-1)       # 2 x (B, S, D)
        q, k, v = split_heads(q, H), split_heads(k, H), split_heads(v, H)  # (B, H, T|S, Dh)
        sdpa_causal = self.fast and is_causal and mask is None and q.size(-2) == k.size(-2)
        if is_causal and not sdpa_causal:
            T, S = q.size(-2), k.size(-2)
            causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril()
            mask = causal if mask is None else mask & causal
        if self.fast:  # is_causal without an explicit mask lets SDPA pick its flash kernel on GPUs
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=sdpa_causal,
                                               dropout_p=self.dropout if self.training else 0.0)
            self.last_weights = None
        else:
            y, w = attention(q, k, v, mask)
            self.last_weights = w.detach()
            if self.dropout and self.training:
                w = F.dropout(w, self.dropout)
                y = w @ v
        return self.W_o(merge_heads(y))  # (B, T, D)


def mha_param_count(d_model: int, bias: bool = True) -> int:
    """4 D^2 weights (+ 4 D biases): W_qkv is 3D x D, W_o is D x D."""
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def from_torch(mha: nn.MultiheadAttention) -> MultiHeadAttention:
    """Copy an ``nn.MultiheadAttention(batch_first=True)`` into our module (same outputs)."""
    if not mha._qkv_same_embed_dim:
        raise ValueError("only nn.MultiheadAttention with kdim == vdim == embed_dim is supported")
    bias = mha.in_proj_bias is not None
    ours = MultiHeadAttention(mha.embed_dim, mha.num_heads, bias=bias)
    with torch.no_grad():
        ours.W_qkv.weight.copy_(mha.in_proj_weight)
        ours.W_o.weight.copy_(mha.out_proj.weight)
        if bias:
            ours.W_qkv.bias.copy_(mha.in_proj_bias)
            ours.W_o.bias.copy_(mha.out_proj.bias)
    return ours


# =====================================================================================
# Lecture 05's road to the fused module: the conceptual version and the three efficiency
# steps, each a separate class that gives the same numbers as the next once its weights
# are copied over (``sliced_from_head_loop``, ``fused_from_sliced``).
# =====================================================================================
def _head_mask(mask, h: int, shape) -> torch.Tensor | None:
    """The (B, T, S) slice of head ``h`` of a mask broadcastable to ``shape`` = (B, H, T, S)."""
    if mask is None:
        return None
    return torch.broadcast_to(mask, shape)[:, h]


class Head(nn.Module):
    """One attention head with its own query, key and value matrices (each head_dim x D)."""

    def __init__(self, d_model: int, head_dim: int, bias: bool = True):
        super().__init__()
        self.W_q = nn.Linear(d_model, head_dim, bias=bias)
        self.W_k = nn.Linear(d_model, head_dim, bias=bias)
        self.W_v = nn.Linear(d_model, head_dim, bias=bias)

    def forward(self, x, kv, mask=None):  # x (B, T, D), kv (B, S, D) -> (B, T, hd), (B, T, S)
        return attention(self.W_q(x), self.W_k(kv), self.W_v(kv), mask)


class HeadLoopMHA(nn.Module):
    """H separate heads run one after the other in a Python loop, concatenated, then ``W_o``.

    ``head_dim=d_model`` is the *conceptual* version (H full-size heads: 3 H D^2 projection
    weights and an (H D) -> D output matrix); the default ``head_dim=d_model // n_heads`` is
    efficiency step 1 (each head works in D/H dimensions: 3 D^2 + D^2 weights in all).
    Same call signature and ``last_weights`` (B, H, T, S) as :class:`MultiHeadAttention`.
    """

    def __init__(self, d_model: int, n_heads: int, head_dim: int | None = None, bias: bool = True):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.head_dim = head_dim or d_model // n_heads
        self.heads = nn.ModuleList(Head(d_model, self.head_dim, bias) for _ in range(n_heads))
        self.W_o = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)
        self.last_weights: torch.Tensor | None = None

    def forward(self, x, kv=None, mask=None):
        kv = x if kv is None else kv
        B, T, S, H = x.size(0), x.size(1), kv.size(1), self.n_heads
        outs, weights = [], []
        for h, head in enumerate(self.heads):
            y, w = head(x, kv, _head_mask(mask, h, (B, H, T, S)))  # (B, T, hd), (B, T, S)
            outs.append(y)
            weights.append(w)
        self.last_weights = torch.stack(weights, dim=1).detach()  # (B, H, T, S)
        return self.W_o(torch.cat(outs, dim=-1))  # (B, T, H*hd) -> (B, T, D)


class SlicedMHA(nn.Module):
    """Efficiency step 2: one D x D matrix per role; head h uses columns h*Dh:(h+1)*Dh of the
    queries, keys and values (still a Python loop over the heads)."""

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads = d_model, n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.last_weights: torch.Tensor | None = None

    def forward(self, x, kv=None, mask=None):
        kv = x if kv is None else kv
        B, T, S, H = x.size(0), x.size(1), kv.size(1), self.n_heads
        Dh = self.d_model // H
        q, k, v = self.W_q(x), self.W_k(kv), self.W_v(kv)  # (B, T, D), (B, S, D), (B, S, D)
        outs, weights = [], []
        for h in range(H):
            cols = slice(h * Dh, (h + 1) * Dh)
            y, w = attention(q[..., cols], k[..., cols], v[..., cols], _head_mask(mask, h, (B, H, T, S)))
            outs.append(y)
            weights.append(w)
        self.last_weights = torch.stack(weights, dim=1).detach()  # (B, H, T, S)
        return self.W_o(torch.cat(outs, dim=-1))  # (B, T, D)


def _copy_linear(dst: nn.Linear, weight, bias) -> None:
    with torch.no_grad():
        dst.weight.copy_(weight)
        if dst.bias is not None:
            dst.bias.copy_(bias)


def sliced_from_head_loop(m: HeadLoopMHA) -> SlicedMHA:
    """Step 1 -> step 2: stack the heads' (Dh x D) matrices into one (D x D) matrix per role."""
    if m.head_dim * m.n_heads != m.d_model:
        raise ValueError("only heads of size D/H stack into D x D matrices (not the conceptual version)")
    bias = m.W_o.bias is not None
    out = SlicedMHA(m.d_model, m.n_heads, bias=bias)
    for role in ("W_q", "W_k", "W_v"):
        lins = [getattr(head, role) for head in m.heads]
        _copy_linear(getattr(out, role), torch.cat([l.weight for l in lins]),
                     torch.cat([l.bias for l in lins]) if bias else None)
    _copy_linear(out.W_o, m.W_o.weight, m.W_o.bias)
    return out


def fused_from_sliced(m: SlicedMHA) -> MultiHeadAttention:
    """Step 2 -> step 3: stack W_q, W_k, W_v into one (3D x D) W_qkv, rows [queries; keys; values]."""
    bias = m.W_o.bias is not None
    out = MultiHeadAttention(m.d_model, m.n_heads, bias=bias)
    _copy_linear(out.W_qkv, torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight]),
                 torch.cat([m.W_q.bias, m.W_k.bias, m.W_v.bias]) if bias else None)
    _copy_linear(out.W_o, m.W_o.weight, m.W_o.bias)
    return out


def to_torch(m: MultiHeadAttention) -> nn.MultiheadAttention:
    """The inverse of :func:`from_torch`: our weights in an ``nn.MultiheadAttention(batch_first=True)``."""
    bias = m.W_o.bias is not None
    ref = nn.MultiheadAttention(m.d_model, m.n_heads, bias=bias, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(m.W_qkv.weight)
        ref.out_proj.weight.copy_(m.W_o.weight)
        if bias:
            ref.in_proj_bias.copy_(m.W_qkv.bias)
            ref.out_proj.bias.copy_(m.W_o.bias)
    return ref


def activation_bytes(module: nn.Module, *args, **kwargs) -> int:
    """Bytes of the tensors autograd keeps for the backward pass of one forward call
    (parameters not counted): the memory a training step needs on top of the weights."""
    param_ptrs = {p.data_ptr() for p in module.parameters()}
    seen: set = set()
    total = 0

    def pack(t):
        nonlocal total
        key = (t.data_ptr(), t.numel(), t.dtype)
        if t.data_ptr() not in param_ptrs and key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(*args, **kwargs)
    return total
