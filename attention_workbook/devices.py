"""Where lecture 08's GPT runs and how fast: the device, the precision, the GPU's peak.

``pick_device`` finds a GPU (CUDA or Apple's MPS) or falls back to the CPU; ``amp_dtype``
chooses the autocast precision from what the hardware computes natively (bf16 from compute
capability 8.0, fp16 + GradScaler on a T4, float32 on most CPUs) and ``autocast`` applies it;
``mfu`` compares a measured throughput with the data-sheet peak of the GPU.
"""

from __future__ import annotations

import contextlib

import torch

from attention_workbook.machine import cpu_flags, describe_cpu


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
    of /proc/cpuinfo (the machine's flags, from ``machine.describe_cpu``, when not given)."""
    flags = describe_cpu().flags if cpuinfo is None else cpu_flags(cpuinfo)
    return bool(flags) and (flags["avx512_bf16"] or flags["amx_bf16"])  # None: no /proc/cpuinfo


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


def autocast(device: str, dtype: torch.dtype | None):
    """``torch.autocast`` to ``dtype`` on ``device`` ("cuda:1" counts as "cuda"); nothing for float32 (None)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.split(":")[0], dtype=dtype)


# dense (not sparse) tensor-core peak of each GPU in TFLOP/s for bf16/fp16, from the data sheets
GPU_PEAK_TFLOPS = [("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("A100", 312.0), ("L4", 121.0),
                   ("A10G", 125.0), ("T4", 65.0), ("V100", 125.0)]


def gpu_peak_tflops(name: str) -> float | None:
    """The data-sheet bf16/fp16 peak of a GPU by (part of) its name, None if unknown."""
    return next((peak for key, peak in GPU_PEAK_TFLOPS if key in name), None)


def flops_per_token(model: torch.nn.Module) -> float:
    """Training FLOPs per token of a ``gpt.GPT`` (forward + backward), nanoGPT's count: 6 N for the weight matrices
    (N without the position table) + 12 L D T for the attention scores and weighted sums."""
    return 6 * model.num_params(non_embedding=True) + 12 * model.n_layer * model.d_model * model.block_size


def mfu(model: torch.nn.Module, tokens_per_s: float, device: str) -> float | None:
    """Model FLOPs utilisation: the FLOPs the model needs per second / the GPU's peak (None on a CPU
    or an unknown GPU)."""
    if not device.startswith("cuda"):
        return None
    peak = gpu_peak_tflops(torch.cuda.get_device_name(device))
    return flops_per_token(model) * tokens_per_s / (peak * 1e12) if peak else None
