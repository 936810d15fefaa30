"""Training recipes for lecture 08's GPT: ``TrainConfig`` and the named presets.

A preset is a model shape (``gpt.GPTConfig``) plus a training recipe sized for the hardware:
``smoke`` (seconds, the test suite), ``cpu`` (a four-minute time budget on a laptop), ``t4``
(nanoGPT's character model for a free Colab T4), ``large-gpu`` (the same for an A100 / H100) and
``h100-fast`` (``large-gpu`` trained for speed: CUDA graphs, less dropout, a shorter schedule; chosen by
name only).
``choose_preset`` picks one from the device, ``$AWB_PRESET`` or smoke mode; ``parse_overrides``
reads the ``KEY=VALUE`` overrides of the command line and the benchmarks.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace

import torch

from .devices import gpu_has_native_bf16, pick_device
from .gpt import GPTConfig


@dataclass
class TrainConfig:
    """A model shape plus everything about training it; ``with_overrides`` for variations."""
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
    # the same model trained for speed on an H100 (issue 36; opt-in, never chosen automatically):
    # CUDA graphs through torch.compile(mode="reduce-overhead") take the per-kernel launch cost
    # out of each step (a model this small keeps an H100 waiting on launches), bf16 autocast,
    # fused AdamW (training.configure_optimizer on any GPU), dropout 0.05 instead of 0.2 and the
    # cosine ended at 600 steps: the fastest of the candidates measured on an H100, val <= 1.50
    # after 6.59 s of training (at step ~503; one run: a neighbouring setting, 575 steps, took 7.2 s,
    # so differences under about half a second between single runs are noise). The previous
    # settings (dropout 0.1, 700 steps) took 7.55 s, dropout 0.2 and 800 steps 9.63 s; without
    # dropout it never got there. Figures and the other candidates: results/gpt_shakespeare.md
    "h100-fast": TrainConfig("h100-fast", GPTConfig(block_size=256, n_layer=6, n_head=6, d_model=384, dropout=0.05),
                             batch_size=128, max_iters=600, lr=2e-3, min_lr=1e-4, warmup_iters=100,
                             eval_interval=100, eval_iters=20, compile="reduce-overhead"),
}

# nanoGPT's README recipe for a CPU (the figure lecture 08 compares against)
NANOGPT_CPU = TrainConfig("nanogpt-cpu", GPTConfig(block_size=64, n_layer=4, n_head=4, d_model=128, dropout=0.0,
                                                   activation="gelu"),
                          batch_size=12, max_iters=2000, lr=1e-3, min_lr=1e-4, warmup_iters=100,
                          eval_interval=2000, eval_iters=20, threads=None, precision="fp32")


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


def parse_value(v: str):
    """A command-line value as Python: int, float, true/false/none, else the string itself."""
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(v.lower(), v)


def parse_overrides(pairs: list[str]) -> dict:
    """``["max_iters=500", "compile=true"]`` -> ``{"max_iters": 500, "compile": True}``."""
    return {k: parse_value(v) for k, v in (kv.split("=", 1) for kv in pairs)}
