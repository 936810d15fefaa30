"""A character-level GPT and everything lecture 08 needs to train it, on a laptop CPU or a GPU.

The model is the decoder-only Transformer of lectures 05-07: token + position embeddings, a
stack of pre-LayerNorm blocks with *causal* self-attention, a final LayerNorm and a linear
head tied to the token embedding. The pieces the exercise asks for (``GPT``, ``generate``,
``lr_at``, ``get_batch``) are here in reference form, together with the training machinery
the lecture and ``python -m attention_workbook.train`` share: presets, device and precision
choice, AdamW groups, loss estimates, checkpoints, attention maps and head ablation.

Shapes: B batch, T positions (<= block_size), D = d_model, H heads, V vocabulary.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blocks import FeedForward, TransformerBlock
from .mha import MultiHeadAttention, attention, merge_heads, split_heads

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


# ----------------------------------------------------------------------------- the model
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


# ----------------------------------------------------------------------------- the graded pieces
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


# ----------------------------------------------------------------------------- configurations
@dataclass
class GPTConfig:
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


@dataclass
class TrainConfig:
    name: str = "custom"
    model: GPTConfig = field(default_factory=GPTConfig)
    batch_size: int = 12          # sequences per step (per process under DDP)
    max_iters: int = 2000
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    eval_interval: int = 250
    eval_iters: int = 20          # batches per loss estimate
    seed: int = 1337
    threads: int | None = None    # torch.set_num_threads on CPU (None: leave PyTorch's default)
    precision: str = "auto"       # "auto" (see amp_dtype), "fp32", "bf16" or "fp16"
    compile: bool | str = False   # torch.compile the model (True, or a mode such as "max-autotune"); off:
                                  # it needs a working compiler toolchain and can fail on older GPUs
    max_seconds: float | None = None  # a time budget: train this many seconds (then max_iters is only a cap)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        d["model"] = GPTConfig(**d["model"])
        return cls(**d)

    def with_overrides(self, **kw) -> "TrainConfig":
        """Copy with fields replaced; model fields (n_layer, d_model, ...) are accepted too."""
        model_keys = {k: kw.pop(k) for k in list(kw) if k in GPTConfig.__dataclass_fields__}
        return replace(self, model=replace(self.model, **model_keys), **kw)


PRESETS: dict[str, TrainConfig] = {
    # a few seconds: the test suite and a first look at a new setup
    "smoke": TrainConfig("smoke", GPTConfig(block_size=32, n_layer=1, n_head=2, d_model=32, bias=False),
                         batch_size=8, max_iters=30, lr=3e-3, min_lr=3e-4, warmup_iters=5, precision="fp32", threads=1,
                         eval_interval=15, eval_iters=4),
    # a four-minute time budget, tuned to beat nanoGPT's README CPU recipe at equal wall time
    # (benchmarks/bench_gpt_cpu.py gives this preset exactly that recipe's wall time; figures in
    # results/gpt_shakespeare.md): nanoGPT's width 128 with one layer fewer, batch 32, a higher
    # learning rate, no biases, no dropout, GELU, tied embeddings, bf16 autocast where the CPU has
    # native bf16, every core (PyTorch's default threads, as nanoGPT); the schedule is laid over
    # the seconds
    "cpu": TrainConfig("cpu", GPTConfig(block_size=64, n_layer=3, n_head=4, d_model=128, bias=False),
                       batch_size=32, max_iters=1_000_000, lr=5e-3, min_lr=3e-4, warmup_iters=50,
                       weight_decay=0.1, eval_interval=250, eval_iters=20, max_seconds=240, threads=None),
    # nanoGPT's shakespeare-char model (6 x 6 x 384, context 256, batch 64, dropout 0.2) for a free
    # Colab T4 (fp16 + GradScaler there). 2000 steps, not nanoGPT's 5000: on an H100 its validation
    # loss is lowest near step 1750 (1.46) and then rises as it overfits the 1 MB text (1.73 at 5000);
    # nanoGPT reports the best checkpoint (results/gpt_shakespeare.md)
    "t4": TrainConfig("t4", GPTConfig(block_size=256, n_layer=6, n_head=6, d_model=384, dropout=0.2),
                      batch_size=64, max_iters=2000, lr=1e-3, min_lr=1e-4, warmup_iters=100,
                      eval_interval=250, eval_iters=100),
    # the same model for an A100 / H100 class GPU (bf16): twice the batch, twice the rate, 1200
    # steps; on an H100 it reaches val <= 1.50 in about 15 s of training (results/gpt_shakespeare.md)
    "large-gpu": TrainConfig("large-gpu", GPTConfig(block_size=256, n_layer=6, n_head=6, d_model=384, dropout=0.2),
                             batch_size=128, max_iters=1200, lr=2e-3, min_lr=1e-4, warmup_iters=100,
                             eval_interval=200, eval_iters=50),
}

# nanoGPT's README recipe for a CPU (the figure lecture 08 compares against)
NANOGPT_CPU = TrainConfig("nanogpt-cpu", GPTConfig(block_size=64, n_layer=4, n_head=4, d_model=128, dropout=0.0,
                                                   activation="gelu"),
                          batch_size=12, max_iters=2000, lr=1e-3, min_lr=1e-4, warmup_iters=100,
                          eval_interval=2000, eval_iters=20, threads=None, precision="fp32")


def pick_device() -> str:
    """"cuda" if a GPU is there, else "mps" on Apple silicon, else "cpu"."""
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def cpu_has_fast_bf16(cpuinfo: str | None = None) -> bool:
    """True on CPUs with bf16 dot-product instructions (AVX512-BF16 or AMX): there bf16 autocast
    is faster than float32; on other CPUs it is emulated and much slower. ``cpuinfo``: the text
    of /proc/cpuinfo (read from the machine when not given)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return "avx512_bf16" in flags or "amx_bf16" in flags


def gpu_has_native_bf16(index: int = 0) -> bool:
    """True on GPUs that compute bf16 in hardware: compute capability 8.0 and newer (A100, H100,
    RTX 30xx/40xx, L4). Not ``torch.cuda.is_bf16_supported()``: by default that also answers True
    where bf16 is only *emulated* (a T4, capability 7.5), which is slower than fp16 there."""
    major, _ = torch.cuda.get_device_capability(index)
    return major >= 8


def amp_dtype(device: str, precision: str = "auto") -> torch.dtype | None:
    """Autocast dtype. "auto": bf16 on GPUs with native bf16 (compute capability >= 8.0), fp16
    on older ones (a T4, with a GradScaler), bf16 on CPUs with native bf16, else None (float32)."""
    if precision != "auto":
        return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    if device.startswith("cuda"):
        index = int(device.split(":")[1]) if ":" in device else 0
        return torch.bfloat16 if gpu_has_native_bf16(index) else torch.float16
    if device == "cpu" and cpu_has_fast_bf16():
        return torch.bfloat16
    return None


# dense (not sparse) tensor-core peak of each GPU in TFLOP/s for bf16/fp16, from the data sheets
GPU_PEAK_TFLOPS = [("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("A100", 312.0), ("L4", 121.0),
                   ("A10G", 125.0), ("T4", 65.0), ("V100", 125.0)]


def gpu_peak_tflops(name: str) -> float | None:
    """The data-sheet bf16/fp16 peak of a GPU by (part of) its name, None if unknown."""
    return next((peak for key, peak in GPU_PEAK_TFLOPS if key in name), None)


def flops_per_token(model: "GPT") -> float:
    """Training FLOPs per token (forward + backward), nanoGPT's count: 6 N for the weight matrices
    (N without the position table) + 12 L D T for the attention scores and weighted sums."""
    return 6 * model.num_params(non_embedding=True) + 12 * model.n_layer * model.d_model * model.block_size


def mfu(model: "GPT", tokens_per_s: float, device: str) -> float | None:
    """Model FLOPs utilisation: the FLOPs the model needs per second / the GPU's peak (None on a CPU
    or an unknown GPU)."""
    if not device.startswith("cuda"):
        return None
    peak = gpu_peak_tflops(torch.cuda.get_device_name(device))
    return flops_per_token(model) * tokens_per_s / (peak * 1e12) if peak else None


def smoke_mode() -> bool:
    """True when a notebook should only check that it runs: $AWB_SMOKE=1, or executed by pytest
    (the test suite's kernels inherit PYTEST_CURRENT_TEST) or by the autograder ($AWB_GRADING=1)."""
    return (os.environ.get("AWB_SMOKE") == "1" or "PYTEST_CURRENT_TEST" in os.environ
            or os.environ.get("AWB_GRADING") == "1")


def choose_preset(device: str | None = None, override: str | None = None) -> str:
    """The preset to use: ``override``, else $AWB_PRESET, else "smoke" in smoke mode, else by device."""
    name = override or os.environ.get("AWB_PRESET")
    if not name and smoke_mode():
        name = "smoke"
    if not name:
        device = device or pick_device()
        if device.startswith("cuda"):
            # an A100 / H100 class GPU (native bf16 and room for the larger model), else the T4 recipe
            name = "large-gpu" if gpu_has_native_bf16() and \
                torch.cuda.get_device_properties(0).total_memory > 30e9 else "t4"
        else:
            name = "cpu"
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return name


# ----------------------------------------------------------------------------- training pieces
def configure_optimizer(model: nn.Module, weight_decay: float, lr: float, betas=(0.9, 0.99),
                        device: str = "cpu") -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (dim >= 2); biases and LayerNorm gains are not decayed."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    extra = {"fused": True} if device.startswith("cuda") else {}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **extra)


def autocast(device: str, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.split(":")[0], dtype=dtype)


@torch.no_grad()
def estimate_loss(model: nn.Module, splits: dict[str, torch.Tensor], block_size: int, batch_size: int,
                  eval_iters: int, device: str = "cpu", dtype: torch.dtype | None = None,
                  seed: int = 0) -> dict[str, float]:
    """Mean loss over ``eval_iters`` random batches per split, with a fixed seed so that two
    estimates (two checkpoints, an ablated head, ...) are measured on the same windows."""
    was_training = model.training
    model.eval()
    out = {}
    for name, data in splits.items():
        g = torch.Generator().manual_seed(seed)
        total = 0.0
        for _ in range(eval_iters):
            x, y = get_batch(data, block_size, batch_size, g)
            with autocast(device, dtype):
                _, loss = model(x.to(device), y.to(device))
            total += loss.item()
        out[name] = total / eval_iters
    model.train(was_training)
    return out


@torch.no_grad()
def val_loss_windows(model: nn.Module, data: torch.Tensor, block_size: int, batch_size: int = 64,
                     device: str = "cpu", dtype: torch.dtype | None = None) -> float:
    """Mean loss over *every* consecutive ``block_size`` window of ``data`` (stride block_size):
    the whole split, each character predicted once, no sampling noise. The yardstick the
    benchmarks use to compare models (any ``model(x, y) -> (logits, loss)``, nanoGPT's too)."""
    was_training = model.training
    model.eval()
    n = (len(data) - 1) // block_size
    starts = torch.arange(n) * block_size
    total = 0.0
    for i in range(0, n, batch_size):
        idx = starts[i:i + batch_size, None] + torch.arange(block_size)     # (b, T)
        x, y = data[idx].to(device), data[idx + 1].to(device)
        with autocast(device, dtype):
            _, loss = model(x, y)
        total += loss.float().item() * len(idx)
    model.train(was_training)
    return total / n


def save_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer, cfg: TrainConfig, step: int,
                    history: dict, chars: list[str] | None = None, scaler=None,
                    rng: torch.Tensor | None = None) -> Path:
    """Write everything needed to resume (atomically: a disconnect mid-write keeps the old file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = getattr(model, "module", model)  # unwrap DDP
    state = {"model": raw.state_dict(), "optimizer": optimizer.state_dict() if optimizer else None,
             "scaler": scaler.state_dict() if scaler is not None else None,
             "config": cfg.to_dict(), "step": step, "history": history, "chars": chars, "rng": rng}
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
    return path


def load_checkpoint(path: str | os.PathLike, device: str = "cpu") -> dict:
    return torch.load(path, map_location=device, weights_only=False)


def model_from_checkpoint(path: str | os.PathLike, device: str = "cpu") -> tuple[GPT, dict]:
    ck = load_checkpoint(path, device)
    cfg = TrainConfig.from_dict(ck["config"])
    model = GPT.from_config(cfg.model).to(device)
    model.load_state_dict(ck["model"])
    return model, ck


@dataclass
class RunInfo:
    """Where the loop runs: device, precision and (under torchrun) the process group."""
    device: str = "cpu"
    dtype: torch.dtype | None = None
    rank: int = 0
    world_size: int = 1

    @property
    def master(self) -> bool:
        return self.rank == 0


def train(model: nn.Module, cfg: TrainConfig, train_data: torch.Tensor, val_data: torch.Tensor, *,
          run: RunInfo | None = None, ckpt_path: str | os.PathLike | None = None, resume: bool = True,
          chars: list[str] | None = None, progress: bool = True, max_seconds: float | None = None,
          on_eval: Callable[[int, dict], None] | None = None, eval_at_end: bool = True) -> dict:
    """The training loop the lecture and ``attention_workbook.train`` share.

    ``model`` may be wrapped in DistributedDataParallel (then each rank draws its own batches and
    DDP averages the gradients). Every ``eval_interval`` steps the train/val losses are estimated
    (averaged over ranks), ``on_eval(step, history)`` is called and, on rank 0, a checkpoint is
    written to ``ckpt_path``. With ``resume`` and an existing checkpoint the run continues
    where it stopped.

    **Time budget.** With ``cfg.max_seconds`` (or the ``max_seconds`` argument, which wins) the
    run trains for that many seconds and the learning rate follows :func:`lr_in_budget`: the
    cosine ends exactly when the budget is spent, whatever the hardware's speed; ``max_iters``
    is then only a cap. The budget counts training steps only: the loss estimates, the
    ``on_eval`` callback and checkpoint writes pause the clock (their time is reported
    separately as ``history["eval_seconds"]``). Under DDP rank 0's clock decides for every rank,
    so the replicas use the same learning rate and stop at the same step.

    Returns the history dict: per estimate ``step``, ``seconds`` (training seconds so far),
    ``train``, ``val``; per 10 steps ``loss``, ``lr``, ``elapsed``, ``tokens_per_s``; and
    ``train_seconds``, ``eval_seconds``, ``last_step``.
    """
    from .progress import tqdm

    run = run or RunInfo()
    raw = getattr(model, "module", model)
    budget = max_seconds if max_seconds is not None else cfg.max_seconds
    if cfg.threads and run.device == "cpu":
        torch.set_num_threads(cfg.threads)
    optimizer = configure_optimizer(raw, cfg.weight_decay, cfg.lr, (cfg.beta1, cfg.beta2), run.device)
    scaler = torch.amp.GradScaler("cuda") if run.dtype == torch.float16 else None
    history = {"step": [], "seconds": [], "train": [], "val": [], "lr": [], "tokens_per_s": [], "elapsed": [],
               "loss": [], "train_seconds": 0.0, "eval_seconds": 0.0, "warmup_seconds": None}
    start = 0
    if resume and ckpt_path is not None and Path(ckpt_path).is_file():
        ck = load_checkpoint(ckpt_path, run.device)
        raw.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        if scaler is not None and ck.get("scaler"):
            scaler.load_state_dict(ck["scaler"])
        history, start = {**history, **ck["history"]}, ck["step"]
        if run.master and progress:
            print(f"resumed from {ckpt_path} at step {start}")
    g = torch.Generator().manual_seed(cfg.seed + 1000 * run.rank + start)  # each rank its own batches
    if start and run.world_size == 1 and ck.get("rng") is not None:
        g.set_state(ck["rng"])  # the same batches an uninterrupted run would have drawn
    block = raw.block_size
    tokens_per_step = cfg.batch_size * block * run.world_size
    if run.device.startswith("cuda"):
        # the whole text fits easily on a GPU: batches are cut there, no copy per step
        train_data, val_data = train_data.to(run.device), val_data.to(run.device)
    step_model = model
    model.train()
    if cfg.compile:
        t_compile = time.perf_counter()
        step_model = torch.compile(model, **({"mode": cfg.compile} if isinstance(cfg.compile, str) else {}))
        # compile before the clock starts: one forward + backward on a batch of the *same* shape
        # (from its own generator: the training batches stay the same); no optimizer step
        xw, yw = get_batch(train_data, block, cfg.batch_size, torch.Generator().manual_seed(12345))
        with autocast(run.device, run.dtype):
            _, loss = step_model(xw, yw)
        loss.backward()
        for p in raw.parameters():
            p.grad = None
        if run.device.startswith("cuda"):
            torch.cuda.synchronize()
        history["compile_seconds"] = time.perf_counter() - t_compile
    spent_before = history["train_seconds"]          # training seconds of the run(s) before a resume
    clock = {"t0": time.perf_counter(), "paused": 0.0}

    def trained() -> float:
        """Training seconds so far (this run and any before a resume), evaluation excluded."""
        if run.device.startswith("cuda"):
            torch.cuda.synchronize()    # the GPU runs behind the Python loop: count its work too
        return spent_before + time.perf_counter() - clock["t0"] - clock["paused"]

    def evaluate(step: int) -> None:
        t_eval = time.perf_counter()
        history["train_seconds"] = trained()
        losses = estimate_loss(raw, {"train": train_data, "val": val_data}, block, cfg.batch_size,
                               cfg.eval_iters, run.device, run.dtype, seed=cfg.seed + run.rank)
        if run.world_size > 1:
            import torch.distributed as dist
            t = torch.tensor([losses["train"], losses["val"]], device=run.device)
            dist.all_reduce(t)
            losses = {"train": t[0].item() / run.world_size, "val": t[1].item() / run.world_size}
        history["step"].append(step)
        history["seconds"].append(history["train_seconds"])
        history["train"].append(losses["train"])
        history["val"].append(losses["val"])
        if ckpt_path is not None and run.master:
            save_checkpoint(ckpt_path, model, optimizer, cfg, step, history, chars, scaler, g.get_state())
            history["checkpoints_written"] = history.get("checkpoints_written", 0) + 1
        if on_eval is not None:
            on_eval(step, history)
        pause = time.perf_counter() - t_eval
        clock["paused"] += pause
        history["eval_seconds"] += pause

    def shared_clock() -> float:
        """Rank 0's training seconds, on every rank (one tiny broadcast under DDP)."""
        s = trained()
        if run.world_size > 1:
            import torch.distributed as dist
            t = torch.tensor([s], dtype=torch.float64, device=run.device)
            dist.broadcast(t, src=0)
            s = t.item()
        return s

    if budget is not None:
        bar = tqdm(total=round(budget), initial=min(round(spent_before), round(budget)), unit="s",
                   disable=not (progress and run.master), desc=f"training ({cfg.name}, {budget:.0f} s budget)",
                   bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s {postfix}")
    else:
        bar = tqdm(total=cfg.max_iters, initial=start, disable=not (progress and run.master),
                   desc=f"training ({cfg.name})", unit="step")
    shown = min(round(spent_before), round(budget)) if budget is not None else start
    # how often the budget clock is read: every step on a CPU; every 10 steps on a GPU (reading
    # it waits for the GPU) or under DDP (rank 0's clock is broadcast), with the rate kept in between
    every = 10 if run.device.startswith("cuda") or run.world_size > 1 else 1
    seconds = 0.0
    step = start
    while step < cfg.max_iters:
        if budget is not None and (step - start) % every == 0:
            seconds = shared_clock()
            if seconds >= budget:
                break
        if budget is not None:
            if step == cfg.warmup_iters and history["warmup_seconds"] is None:
                history["warmup_seconds"] = seconds
            lr = lr_in_budget(step, seconds, cfg.warmup_iters, history["warmup_seconds"] or 0.0, budget,
                              cfg.lr, cfg.min_lr)
        else:
            lr = lr_at(step, cfg.warmup_iters, cfg.max_iters, cfg.lr, cfg.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, block, cfg.batch_size, g)
        x, y = x.to(run.device, non_blocking=True), y.to(run.device, non_blocking=True)
        with autocast(run.device, run.dtype):
            _, loss = step_model(x, y)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
        step += 1
        if step % 10 == 0 or step == cfg.max_iters:
            loss_value = loss.item()                      # waits for the GPU: the clock below is honest
            elapsed = trained()
            history["loss"].append((step, loss_value))
            history["lr"].append((step, lr))
            history["elapsed"].append(elapsed)
            history["tokens_per_s"].append((step - start) * tokens_per_step / max(elapsed - spent_before, 1e-9))
            if budget is not None:
                now = min(round(elapsed), round(budget))
                bar.update(now - shown)
                shown = now
            else:
                bar.update(step - shown)
                shown = step
            bar.set_postfix_str(f"step {step}, loss {loss_value:.3f}, lr {lr:.1e}, "
                                f"{history['tokens_per_s'][-1]:,.0f} tok/s")
        if step % cfg.eval_interval == 0 and step < cfg.max_iters:
            evaluate(step)
    if budget is not None and shown < round(budget) and step < cfg.max_iters:
        bar.update(round(budget) - shown)              # the budget is spent: show the bar full
    elif budget is None:
        bar.update(step - shown)
    bar.close()
    history["train_seconds"] = trained()
    history["last_step"] = step
    if eval_at_end and (not history["step"] or history["step"][-1] != history["last_step"]):
        evaluate(history["last_step"])
    return history


# ----------------------------------------------------------------------------- looking inside
@contextlib.contextmanager
def ablate_heads(model: GPT, heads: list[tuple[int, int]]):
    """Zero the output of the given (layer, head) pairs inside the ``with`` block."""
    attns = model.attentions()
    try:
        for layer, head in heads:
            a = attns[layer]
            if a.head_mask is None:
                a.head_mask = torch.ones(a.n_heads, device=a.W_o.weight.device)
            a.head_mask[head] = 0.0
        yield model
    finally:
        for a in attns:
            a.head_mask = None


@torch.no_grad()
def head_ablation(model: GPT, val_data: torch.Tensor, batch_size: int = 16, eval_iters: int = 8,
                  device: str = "cpu", seed: int = 0, progress: bool = False) -> tuple[float, torch.Tensor]:
    """Val loss of the full model and the change (n_layer, n_head) when each single head is zeroed.

    Every measurement uses the same windows (fixed seed), so the differences are not sampling noise.
    """
    from .progress import tqdm

    est = lambda: estimate_loss(model, {"val": val_data}, model.block_size, batch_size, eval_iters,
                                device, seed=seed)["val"]
    base = est()
    delta = torch.zeros(model.n_layer, model.n_head)
    pairs = [(l, h) for l in range(model.n_layer) for h in range(model.n_head)]
    for l, h in tqdm(pairs, desc="ablating heads", disable=not progress):
        with ablate_heads(model, [(l, h)]):
            delta[l, h] = est() - base
    return base, delta


class LivePlot:
    """A loss plot that redraws in place in a notebook (or does nothing outside one)."""

    def __init__(self, title: str = "loss", figsize=(6, 3)):
        import matplotlib.pyplot as plt

        self.fig, self.ax = plt.subplots(figsize=figsize)
        self.title = title
        self.handle = None
        plt.close(self.fig)  # drawn through the display handle only, not again at the cell's end

    def update(self, step: int, history: dict) -> None:
        ax = self.ax
        ax.clear()
        if history["loss"]:
            s, l = zip(*history["loss"])
            ax.plot(s, l, color="0.75", lw=1, label="train (batch)")
        ax.plot(history["step"], history["train"], "o-", label="train (estimate)")
        ax.plot(history["step"], history["val"], "o-", label="val (estimate)")
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats)")
        ax.set_title(self.title)
        ax.legend(loc="upper right", fontsize=8)
        self.fig.tight_layout()
        try:
            from IPython.display import display
        except ImportError:  # pragma: no cover
            return
        if self.handle is None:
            self.handle = display(self.fig, display_id=True)
        else:
            self.handle.update(self.fig)
