"""Attention at inference and at scale: everything lecture 09 shows, in reference form.

* where the cost goes: :func:`block_flops` (a block's multiply-adds, split into the parts that
  grow with T and with T^2);
* the key/value cache for lecture 08's :class:`~attention_workbook.gpt.GPT`: :class:`KVCache`,
  :func:`forward_cached`, :func:`generate_cached` (token for token the same text as
  :func:`attention_workbook.gpt.generate` under the same seed);
* the one-pass softmax and FlashAttention's forward algorithm in plain PyTorch:
  :func:`online_softmax`, :func:`tiled_attention` (never holds more than a (Tq, block) tile of
  scores), beside :func:`naive_attention`;
* multi-query / grouped-query attention: :class:`GroupedQueryAttention`, :func:`repeat_kv`,
  :func:`gqa_from_mha` (mean-pools an MHA checkpoint's key/value heads);
* rotary position embeddings: :func:`rope_angles`, :func:`apply_rope` (adjacent pairs
  (x[2i], x[2i+1]) rotated by pos * base^(-2i/d));
* local attention: :func:`sliding_window_mask`; the low-rank K/V idea: :class:`LowRankSelfAttention`;
* measuring on a CPU: :func:`machine` (the line printed beside every timing) and
  :func:`peak_rss` (the peak memory one call adds, from the kernel's high-water mark).

The exercise of lecture 09 grades the learner's own versions of several of these; the checks
never import them as their oracle (they use PyTorch's SDPA, loops and the uncached model).

Shapes: B batch, H query heads, Hkv key/value heads, T positions, Dh = D / H per head.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .machine import describe_cpu
from .mha import merge_heads, split_heads


# ----------------------------------------------------------------------------- the machine
def cpu_model() -> str:
    return describe_cpu().name


def machine() -> str:
    """One line for beside a timing: the CPU, its cores, PyTorch's threads and the load now."""
    cpu = describe_cpu()
    return (f"{cpu.name}, {cpu.cores} logical CPUs, {torch.get_num_threads()} torch threads; "
            f"{cpu.load_text(all_three=True)}")


def cpu_caches() -> list[tuple[str, int]]:
    """This CPU's data caches as (name, bytes), smallest first, e.g. [("L1d", 32768), ("L2", 1048576),
    ("L3", 33554432)] (the first core's view; an L3 is shared by the cores listed beside it). Linux
    only: empty where /sys does not say."""
    out = []
    for folder in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            kind, level = (folder / "type").read_text().strip(), (folder / "level").read_text().strip()
            size = (folder / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction" or not size[:-1].isdigit():
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1], 1)
        out.append((f"L{level}" + ("d" if kind == "Data" else ""), int(size[:-1] if scale > 1 else size) * scale))
    return sorted(out, key=lambda c: c[1])


def _status(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


_MALLOC_SET = False


def peak_rss(fn) -> int | None:
    """Bytes the peak resident memory of this process rises above its level before ``fn()``.

    Linux only (None elsewhere): the kernel's high-water mark (VmHWM) is reset through
    /proc/self/clear_refs, ``fn`` runs, and the new mark is read. glibc is asked to hand large
    blocks straight back to the kernel (a fixed mmap threshold of 64 KiB), so a freed tensor
    does not stay counted as resident, and memory it still holds is returned (``malloc_trim``)
    before the baseline is read, so a call cannot hide its peak in memory freed earlier. It sees
    every allocation, including the scratch memory inside PyTorch's fused kernels."""
    global _MALLOC_SET
    libc = None
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        if not _MALLOC_SET:
            libc.mallopt(-3, 1 << 16)          # M_MMAP_THRESHOLD: fixed at 64 KiB, no dynamic growth
            _MALLOC_SET = True
        libc.malloc_trim(0)                    # free memory glibc still holds goes back first
    except (OSError, AttributeError):
        pass
    before = _status("VmRSS:")
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")                                    # reset the high-water mark to the current RSS
    except OSError:
        return None
    fn()
    peak = _status("VmHWM:")
    return None if before is None or peak is None else max(peak - before, 0)


# ----------------------------------------------------------------------------- where the cost goes
def block_flops(T: int, D: int, d_ff: int | None = None) -> dict[str, float]:
    """Multiply-adds x 2 (FLOPs) of one pre-LN block's forward pass on a sequence of T tokens.

    ``projections``: W_qkv and W_o, 4 T D^2 multiply-adds; ``feed_forward``: 2 T D d_ff;
    ``attention``: the scores Q K^T and the weighted sum of V, 2 T^2 D (the quadratic term).
    """
    d_ff = d_ff or 4 * D
    return {"projections": 2 * 4 * T * D * D, "feed_forward": 2 * 2 * T * D * d_ff,
            "attention": 2 * 2 * T * T * D}


def attention_share(T: int, D: int, d_ff: int | None = None) -> float:
    f = block_flops(T, D, d_ff)
    return f["attention"] / sum(f.values())


# ----------------------------------------------------------------------------- softmax in one pass
def online_softmax(x: torch.Tensor, block: int = 4) -> torch.Tensor:
    """Softmax over the last axis, reading it ``block`` columns at a time.

    A running maximum m and a running sum l = sum exp(x - m) are kept; when a block raises the
    maximum, the sum so far is rescaled by exp(m_old - m_new). A block that is all -inf leaves
    both unchanged (no exp(-inf - (-inf)) = nan)."""
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)   # (..., 1)
    l = torch.zeros_like(m)                                                              # (..., 1)
    for s in range(0, x.size(-1), block):
        xb = x[..., s:s + block]                                                         # (..., b)
        m_new = torch.maximum(m, xb.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)          # all -inf so far
        l = l * torch.exp(m - safe) + torch.exp(xb - safe).sum(dim=-1, keepdim=True)
        m = m_new
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return torch.exp(x - safe) / l


def online_softmax_trace(row: torch.Tensor, block: int) -> list[dict[str, float]]:
    """Per block of a 1-D ``row`` (finite values): the running maximum before and after it (``m_old``,
    ``m``), and the running sum before it (``l_old``), after its rescaling by exp(m_old - m)
    (``l_rescaled``) and after its own terms are added (``l``): the lecture's figure."""
    m, l, out = float("-inf"), 0.0, []
    for s in range(0, row.numel(), block):
        xb = row[s:s + block]
        m_new = max(m, float(xb.max()))
        rescaled = l * math.exp(m - m_new)
        out.append({"start": s, "end": s + xb.numel(), "m_old": m, "m": m_new, "l_old": l, "l_rescaled": rescaled,
                    "l": rescaled + float(torch.exp(xb - m_new).sum())})
        m, l = m_new, out[-1]["l"]
    return out


# ----------------------------------------------------------------------------- attention, naive and tiled
def slow_memory_traffic(T: int, d: int, block: int) -> dict[str, int]:
    """Numbers read from and written to slow memory (a GPU's HBM) by one head's attention over T
    positions of width d (FlashAttention's accounting, Dao et al., 2022, section 3.2), tiles of
    ``block`` rows.

    ``standard``: Q and K read, the (T, T) scores written and read back, the probabilities
    written and read back, V read, the output written: 4 T^2 + 4 T d. ``tiled`` (FlashAttention-2's
    loop order, Dao, 2023): Q read and the output written once, K and V read once per tile of
    ``block`` queries (the tile stays in fast on-chip memory while all of K and V stream past it):
    2 T d + 2 T d * ceil(T / block). ``flash1`` (Algorithm 1 of the first paper): K and V read once,
    a tile of ``block`` keys and values on chip while every query tile streams past it, each with
    its partial output and its running maximum and sum, read and written back once per key tile:
    2 T d + (3 T d + 4 T) * ceil(T / block)."""
    tiles = -(-T // block)
    return {"standard": 4 * T * T + 4 * T * d, "tiled": 2 * T * d + 2 * T * d * tiles,
            "flash1": 2 * T * d + (3 * T * d + 4 * T) * tiles}


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None):
    """softmax(q k^T / sqrt(d)) v with the whole (..., Tq, Tk) score matrix in memory."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))                            # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v                                                    # (..., Tq, dv)


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                    block: int = 64) -> torch.Tensor:
    """FlashAttention's forward pass: keys and values read ``block`` rows at a time.

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv), mask bool broadcastable to (..., Tq, Tk)
    (True = may attend). Per query: a running max m, running sum l and running output acc
    (..., Tq, dv); each tile of scores (..., Tq, block) is folded in and dropped. Rows whose
    keys are all masked give nan, as softmax over all -inf does."""
    scale = 1.0 / math.sqrt(q.size(-1))
    Tq, Tk = q.size(-2), k.size(-2)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = torch.full(batch + (Tq, 1), float("-inf"), dtype=q.dtype, device=q.device)      # (..., Tq, 1)
    l = torch.zeros(batch + (Tq, 1), dtype=q.dtype, device=q.device)                    # (..., Tq, 1)
    acc = torch.zeros(batch + (Tq, v.size(-1)), dtype=q.dtype, device=q.device)         # (..., Tq, dv)
    if mask is not None:
        mask = mask.expand(mask.shape[:-2] + (Tq, Tk))
    for s in range(0, Tk, block):
        scores = q @ k[..., s:s + block, :].transpose(-2, -1) * scale                   # (..., Tq, b)
        if mask is not None:
            scores = scores.masked_fill(~mask[..., s:s + block], float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(scores - safe)                                                     # (..., Tq, b)
        alpha = torch.exp(m - safe)                                                      # (..., Tq, 1)
        l = l * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v[..., s:s + block, :]
        m = m_new
    return acc / l


# ----------------------------------------------------------------------------- grouped-query attention
def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, Hkv, T, Dh) -> (B, Hkv * groups, T, Dh): key/value head j serves query heads
    j * groups .. j * groups + groups - 1 (each head repeated in place, not the list tiled)."""
    return x.repeat_interleave(groups, dim=1)


class GroupedQueryAttention(nn.Module):
    """Self-attention with ``n_heads`` query heads sharing ``n_kv_heads`` key/value heads.

    ``W_q`` (D -> D), ``W_kv`` (D -> 2 Hkv Dh, rows [keys; values]), ``W_o`` (D -> D). With
    n_kv_heads == n_heads it is lecture 05's MHA (W_q = W_qkv's first D rows, W_kv the rest);
    with n_kv_heads == 1 it is multi-query attention. ``forward(x, mask=None, is_causal=False)``;
    mask bool, True = may attend, broadcastable to (B, H, T, T)."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError("d_model must be divisible by n_heads, and n_heads by n_kv_heads")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_kv = nn.Linear(d_model, 2 * n_kv_heads * self.d_head)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        q = split_heads(self.W_q(x), self.n_heads)                                       # (B, H, T, Dh)
        k, v = self.W_kv(x).chunk(2, dim=-1)                                             # 2 x (B, T, Hkv Dh)
        g = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(split_heads(k, self.n_kv_heads), g), repeat_kv(split_heads(v, self.n_kv_heads), g)
        if is_causal:
            T = x.size(1)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            mask = causal if mask is None else mask & causal
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)                      # (B, H, T, Dh)
        return self.W_o(merge_heads(y))                                                  # (B, T, D)


def gqa_from_mha(mha: nn.Module, n_kv_heads: int) -> GroupedQueryAttention:
    """A GQA module from an MHA checkpoint (``W_qkv``, ``W_o``): queries and output copied,
    each group's key and value heads replaced by their mean (Ainslie et al., 2023)."""
    D, H = mha.W_o.weight.shape[0], mha.n_heads
    out = GroupedQueryAttention(D, H, n_kv_heads)
    Dh, g = D // H, H // n_kv_heads
    W, b = mha.W_qkv.weight.detach(), mha.W_qkv.bias.detach()

    def pool(t):                                                  # (H * Dh, ...) -> (Hkv * Dh, ...)
        return t.reshape(n_kv_heads, g, Dh, *t.shape[1:]).mean(dim=1).reshape(n_kv_heads * Dh, *t.shape[1:])
    with torch.no_grad():
        out.W_q.weight.copy_(W[:D])
        out.W_q.bias.copy_(b[:D])
        out.W_kv.weight.copy_(torch.cat([pool(W[D:2 * D]), pool(W[2 * D:])]))
        out.W_kv.bias.copy_(torch.cat([pool(b[D:2 * D]), pool(b[2 * D:])]))
        out.W_o.load_state_dict(mha.W_o.state_dict())
    return out


# ----------------------------------------------------------------------------- rotary position embeddings
def rope_angles(positions: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """(T,) positions -> (T, d/2) angles pos * base^(-2i/d), i = 0 .. d/2 - 1."""
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)                 # (d/2,)
    return positions.to(torch.float64)[:, None] * inv_freq[None, :]


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """Rotate each adjacent pair (x[..., 2i], x[..., 2i+1]) of x (..., T, d) by the angle
    positions[t] * base^(-2i/d) (counter-clockwise). ``positions`` (T,) defaults to 0 .. T-1."""
    T, d = x.size(-2), x.size(-1)
    if positions is None:
        positions = torch.arange(T, device=x.device)
    ang = rope_angles(positions, d, base).to(x.device)                                  # (T, d/2)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]                                                  # (..., T, d/2)
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)                # (..., T, d/2, 2)
    return out.flatten(-2)


def apply_rope_half(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """RoPE in the half-split layout of Hugging Face's ``rotate_half`` and GPT-NeoX: pair i is
    (x[..., i], x[..., i + d/2]), turned by the same angle positions[t] * base^(-2i/d). It is
    :func:`apply_rope` on permuted coordinates (even entries first, then odd ones)."""
    T, d = x.size(-2), x.size(-1)
    if positions is None:
        positions = torch.arange(T, device=x.device)
    ang = rope_angles(positions, d, base).to(x.device)                                  # (T, d/2)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]                                           # (..., T, d/2)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


# ----------------------------------------------------------------------------- local and low-rank attention
def sliding_window_mask(T: int, window: int, device=None) -> torch.Tensor:
    """(T, T) bool, True = may attend: query i sees keys i - window + 1 .. i (itself included)."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    return (j <= i) & (i - j < window)


class LowRankSelfAttention(nn.Module):
    """Single-head self-attention whose keys and values are projected along the *sequence* axis
    from T rows to ``rank`` rows (E, F: (rank, T)), so the scores are (T, rank), not (T, T)
    (Linformer, Wang et al., 2020). Bidirectional: a projection that mixes positions cannot be causal."""

    def __init__(self, d_model: int, seq_len: int, rank: int):
        super().__init__()
        self.W_qkv = nn.Linear(d_model, 3 * d_model)
        self.E = nn.Parameter(torch.randn(rank, seq_len) / math.sqrt(seq_len))
        self.F = nn.Parameter(torch.randn(rank, seq_len) / math.sqrt(seq_len))

    def forward(self, x):
        q, k, v = self.W_qkv(x).chunk(3, dim=-1)                                         # (B, T, D)
        k, v = self.E @ k, self.F @ v                                                    # (B, rank, D)
        return F.scaled_dot_product_attention(q, k, v)                                   # (B, T, D)


# ----------------------------------------------------------------------------- the key/value cache
class KVCache:
    """Per layer, the keys and values of every position seen so far: (B, H, T_seen, Dh) each."""

    def __init__(self, n_layer: int):
        self.k: list[torch.Tensor | None] = [None] * n_layer
        self.v: list[torch.Tensor | None] = [None] * n_layer

    @property
    def length(self) -> int:
        return 0 if self.k[0] is None else self.k[0].size(-2)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k[layer] is not None:
            k, v = torch.cat([self.k[layer], k], dim=-2), torch.cat([self.v[layer], v], dim=-2)
        self.k[layer], self.v[layer] = k, v
        return k, v

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v if t is not None)


def cache_bytes_per_token(n_layer: int, n_kv_heads: int, d_head: int, bytes_per_value: int = 2) -> int:
    """Keys and values of one token in every layer: 2 * n_layer * n_kv_heads * d_head values."""
    return 2 * n_layer * n_kv_heads * d_head * bytes_per_value


def _attn_cached(attn, x, cache: KVCache, layer: int):
    D, H = attn.d_model, attn.n_heads
    q, k, v = attn.W_qkv(x).split(D, dim=-1)                                              # 3 x (B, t, D)
    q, k, v = split_heads(q, H), split_heads(k, H), split_heads(v, H)                     # (B, H, t, Dh)
    past = 0 if cache.k[layer] is None else cache.k[layer].size(-2)
    k, v = cache.append(layer, k, v)                                                      # (B, H, past + t, Dh)
    t, S = q.size(-2), k.size(-2)
    # new query i sits at position past + i: it sees keys 0 .. past + i
    mask = torch.arange(S, device=x.device)[None, :] <= (past + torch.arange(t, device=x.device))[:, None]
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)                          # (B, H, t, Dh)
    return attn.W_o(merge_heads(y))


@torch.no_grad()
def forward_cached(model, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Logits (B, t, V) for the new tokens ``idx`` (B, t) of lecture 08's GPT, which follow the
    ``cache.length`` positions already in ``cache`` (their keys and values are appended)."""
    past = cache.length
    t = idx.size(1)
    if past + t > model.block_size:
        raise ValueError(f"{past + t} positions do not fit block_size={model.block_size}")
    pos = torch.arange(past, past + t, device=idx.device)                                 # positions go on
    x = model.tok_emb(idx) + model.pos_emb(pos)                                           # (B, t, D)
    for layer, block in enumerate(model.blocks):
        x = x + _attn_cached(block.attn, block.ln1(x), cache, layer)
        x = x + block.ff(block.ln2(x))
    return model.lm_head(model.ln_f(x))                                                   # (B, t, V)


def _sample(logits, temperature, top_k, generator):
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]     # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1, generator=generator)


@torch.no_grad()
def generate_cached(model, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                    top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """:func:`attention_workbook.gpt.generate` with a key/value cache: the prompt is read once,
    then each step feeds only the newest token. The same seed gives the same tokens, as long as
    prompt + new tokens fit ``model.block_size`` (beyond it the uncached model slides its window
    and every position moves; this version refuses)."""
    if idx.size(1) + max_new_tokens > model.block_size:
        raise ValueError("prompt + max_new_tokens is longer than block_size")
    was_training = model.training
    model.eval()
    try:
        cache = KVCache(len(model.blocks))
        logits = forward_cached(model, idx, cache)[:, -1, :].float()                      # (B, V)
        for step in range(max_new_tokens):
            nxt = _sample(logits, temperature, top_k, generator)                          # (B, 1)
            idx = torch.cat([idx, nxt.to(idx.dtype)], dim=1)
            if step + 1 < max_new_tokens:
                logits = forward_cached(model, nxt, cache)[:, -1, :].float()
    finally:
        model.train(was_training)
    return idx


# ----------------------------------------------------------------------------- the lecture's toy task
def lag_batch(batch_size: int, T: int, vocab_size: int, lag: int, generator: torch.Generator | None = None,
              wrap: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens x (B, T) and targets y[t] = x[t - lag]: the token ``lag`` places back.

    Without ``wrap`` the first ``lag`` targets are -100 (ignored by the loss): nothing lies that
    far back. With ``wrap`` (for bidirectional models) y[t] = x[(t + lag) % T], a token ahead."""
    x = torch.randint(vocab_size, (batch_size, T), generator=generator)
    if wrap:
        return x, x.roll(-lag, dims=1)
    y = torch.full_like(x, -100)
    y[:, lag:] = x[:, :-lag]
    return x, y


class ToyAttentionModel(nn.Module):
    """One attention layer between embeddings and a linear read-out: enough to fetch a token.

    ``kind``: "gqa" (causal :class:`GroupedQueryAttention`, ``n_kv_heads`` of ``n_heads``; equal
    heads = MHA), "window" (the same, with :func:`sliding_window_mask` of ``window``), "lowrank"
    (bidirectional :class:`LowRankSelfAttention` with ``rank`` rows) or "full" (bidirectional
    single-head attention, :class:`GroupedQueryAttention` with one head and no mask: what "lowrank"
    approximates)."""

    def __init__(self, vocab_size: int, T: int, d_model: int = 64, n_heads: int = 4, n_kv_heads: int | None = None,
                 kind: str = "gqa", window: int | None = None, rank: int | None = None):
        super().__init__()
        self.kind, self.window = kind, window
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(T, d_model)
        if kind == "lowrank":
            self.attn = LowRankSelfAttention(d_model, T, rank)
        elif kind == "full":
            self.attn = GroupedQueryAttention(d_model, 1, 1)
        else:
            self.attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads or n_heads)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx):
        T = idx.size(1)
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))           # (B, T, D)
        if self.kind in ("lowrank", "full"):
            y = self.attn(x)
        elif self.kind == "window":
            y = self.attn(x, mask=sliding_window_mask(T, self.window, idx.device))
        else:
            y = self.attn(x, is_causal=True)
        return self.head(y)                                                                # (B, T, V)


def train_toy(model: nn.Module, T: int, vocab_size: int, lag: int, steps: int, wrap: bool = False,
              lr: float = 1e-2, batch_size: int = 64, seed: int = 0) -> list[float]:
    """Adam on fresh random batches of the lag task; returns the loss of every step."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    model.train()
    for _ in range(steps):
        x, y = lag_batch(batch_size, T, vocab_size, lag, g, wrap)
        loss = F.cross_entropy(model(x).reshape(-1, vocab_size), y.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def toy_accuracy(model: nn.Module, T: int, vocab_size: int, lag: int, wrap: bool = False, n: int = 512,
                 seed: int = 12345) -> float:
    """Share of targets predicted right (argmax) on ``n`` fresh sequences."""
    model.eval()
    x, y = lag_batch(n, T, vocab_size, lag, torch.Generator().manual_seed(seed), wrap)
    pred = model(x).argmax(-1)
    keep = y != -100
    return float((pred[keep] == y[keep]).float().mean())
