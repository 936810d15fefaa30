"""Lecture 09's two CPU figures, on longer sequences than the lecture can afford (a script, not a test).

    python benchmarks/bench_inference_cpu.py                       # both parts, one thread
    python benchmarks/bench_inference_cpu.py --threads 2 --max-new 512
    python benchmarks/bench_inference_cpu.py --part memory --max-t 8192

1. **Key/value cache.** Lecture 08's GPT shape (4 layers, 4 heads, width 128, untrained: the
   weights do not change the cost), ``block_size`` = the longest run. From a one-token prompt it
   generates n tokens with ``gpt.generate`` (no cache) and with ``inference.generate_cached``
   (same seed; the script checks the tokens are equal) and prints both wall times and their
   ratio. One run each per length (the uncached runs are long enough that timer noise does not
   matter; a busy machine does: the load average is printed before and after).
2. **Tiled attention's memory.** One batch, 4 heads of width 64, self-attention over T
   positions: the peak resident memory each call adds to the process (Linux's VmHWM, reset
   through /proc/self/clear_refs before each call: ``inference.peak_rss``), for the naive
   version (the (T, T) scores and their softmax), ``inference.tiled_attention`` with 128-key
   tiles, and PyTorch's ``F.scaled_dot_product_attention``; with the best of three wall times.

Figures recorded from this script: results/inference_cpu.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine_info import describe

from attention_workbook import gpt, inference


def cache_part(lengths: list[int]) -> None:
    torch.manual_seed(0)
    model = gpt.GPT(vocab_size=65, block_size=max(lengths) + 1, n_layer=4, n_head=4, d_model=128).eval()
    one = torch.zeros(1, 1, dtype=torch.long)
    print("\n## key/value cache: GPT(65, block_size, n_layer=4, n_head=4, d_model=128), prompt of 1 token")
    print("| new tokens | generate (s) | generate_cached (s) | speedup | same tokens |")
    print("|---:|---:|---:|---:|:---:|")
    for n in lengths:
        t0 = time.perf_counter()
        a = gpt.generate(model, one, n, generator=torch.Generator().manual_seed(0))
        t1 = time.perf_counter()
        b = inference.generate_cached(model, one, n, generator=torch.Generator().manual_seed(0))
        t2 = time.perf_counter()
        print(f"| {n} | {t1 - t0:.2f} | {t2 - t1:.2f} | {(t1 - t0) / (t2 - t1):.1f}x | {torch.equal(a, b)} |",
              flush=True)


def best(fn, repeats=3) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def memory_part(max_t: int, block: int) -> None:
    print(f"\n## peak memory added by one call: q = k = v (1, 4, T, 64), tiles of {block} keys")
    print("| T | naive (MiB) | tiled (MiB) | SDPA (MiB) | naive (ms) | tiled (ms) | SDPA (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    calls = {"naive": lambda q: inference.naive_attention(q, q, q),
             "tiled": lambda q: inference.tiled_attention(q, q, q, block=block),
             "sdpa": lambda q: F.scaled_dot_product_attention(q, q, q)}
    warm = torch.randn(1, 4, 256, 64)
    for fn in calls.values():             # first calls allocate once-only buffers: not part of the figure
        fn(warm)
    T = 512
    while T <= max_t:
        q = torch.randn(1, 4, T, 64)
        mib = {k: inference.peak_rss(lambda: fn(q)) for k, fn in calls.items()}
        ms = {k: 1000 * best(lambda: fn(q)) for k, fn in calls.items()}
        if any(v is None for v in mib.values()):
            raise SystemExit("peak memory needs Linux's /proc/self/status and /proc/self/clear_refs")
        print(f"| {T} | " + " | ".join(f"{mib[k] / 2**20:.1f}" for k in calls) + " | "
              + " | ".join(f"{ms[k]:.0f}" for k in calls) + " |", flush=True)
        T *= 2


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=["cache", "memory", "both"], default="both")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-new", type=int, default=1024, help="longest generation (doubling from 128)")
    p.add_argument("--max-t", type=int, default=4096, help="longest sequence for the memory part (doubling from 512)")
    p.add_argument("--block", type=int, default=128)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"command: python benchmarks/bench_inference_cpu.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(describe())
    if a.part in ("cache", "both"):
        lengths, n = [], 128
        while n <= a.max_new:
            lengths.append(n)
            n *= 2
        cache_part(lengths)
    if a.part in ("memory", "both"):
        memory_part(a.max_t, a.block)
    print("\n" + describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
