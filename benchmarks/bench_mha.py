#!/usr/bin/env python3
"""Benchmark: exercise 05's MultiHeadAttention (explicit attention, as students write it)
against PyTorch's ``nn.MultiheadAttention``, forward + backward on CPU; and the per-head
Python loop (lecture 05, efficiency step 1) against the fused module.

    python benchmarks/bench_mha.py [--threads N] [--reps 30] [--B 8 --S 256 --D 256 --H 8]

The modules are timed side by side in one run: every repetition times each of them once, in
turn (interleaved), so a busy moment on a shared machine hits all of them; the figure is the
median over repetitions. The "solution-style" module is the one in
``solutions/05_multi_head_attention/05_multi_head_attention.ipynb`` (its solution cells are
executed) when that notebook exists, else the reference ``attention_workbook.mha``.
This is a script that prints figures, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from attention_workbook import mha as ref_mha  # noqa: E402

SOLUTION = ROOT / "solutions" / "05_multi_head_attention" / "05_multi_head_attention.ipynb"


def solution_module():
    """(MultiHeadAttention class, where it came from): the solution notebook's cells if present."""
    if SOLUTION.exists():
        import nbformat

        nb = nbformat.read(SOLUTION, as_version=4)
        ns: dict = {}
        exec("import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F", ns)  # noqa: S102
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("solution"):
                exec(cell.source, ns)  # noqa: S102 - the solution notebook's own cells
        if "MultiHeadAttention" in ns:
            return ns["MultiHeadAttention"], str(SOLUTION.relative_to(ROOT))
    return ref_mha.MultiHeadAttention, "attention_workbook/mha.py (reference, fast=False)"


def step(fn, x):
    """One forward + backward; returns seconds."""
    x.grad = None
    t0 = time.perf_counter()
    fn(x).sum().backward()
    return time.perf_counter() - t0


def bench(cases: dict, x: torch.Tensor, reps: int, warmup: int = 3) -> dict:
    for _ in range(warmup):
        for fn in cases.values():
            step(fn, x)
    times = {name: [] for name in cases}
    for _ in range(reps):
        for name, fn in cases.items():  # interleaved
            times[name].append(step(fn, x))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--S", type=int, default=256)
    ap.add_argument("--D", type=int, default=256)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    Student, source = solution_module()

    ref = nn.MultiheadAttention(a.D, a.H, batch_first=True).train()
    ours = Student(a.D, a.H).train()
    with torch.no_grad():  # same weights everywhere (and a correctness check before timing)
        ours.W_qkv.weight.copy_(ref.in_proj_weight)
        ours.W_qkv.bias.copy_(ref.in_proj_bias)
        ours.W_o.weight.copy_(ref.out_proj.weight)
        ours.W_o.bias.copy_(ref.out_proj.bias)
    x = torch.randn(a.B, a.S, a.D, requires_grad=True)
    diff = (ours(x) - ref(x, x, x)[0]).abs().max().item()

    loop = ref_mha.HeadLoopMHA(a.D, a.H).train()
    fused = ref_mha.fused_from_sliced(ref_mha.sliced_from_head_loop(loop)).train()

    cases = {
        "solution MultiHeadAttention": lambda t: ours(t),
        "nn.MultiheadAttention (need_weights=True, default)": lambda t: ref(t, t, t)[0],
        "nn.MultiheadAttention (need_weights=False, SDPA)": lambda t: ref(t, t, t, need_weights=False)[0],
        "per-head loop (HeadLoopMHA)": lambda t: loop(t),
        "fused reference (mha.MultiHeadAttention)": lambda t: fused(t),
    }
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    med = bench(cases, x, a.reps)

    print(f"bench_mha: B={a.B} S={a.S} D={a.D} H={a.H}, forward+backward, CPU, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), {os.cpu_count()} cores, {platform.machine()}")
    print(f"solution module: {source}; max |solution - nn.MultiheadAttention| = {diff:.1e}")
    print(f"median of {a.reps} interleaved repetitions (load average before: "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}):")
    for name, t in med.items():
        print(f"  {name:<52s} {1e3 * t:8.2f} ms")
    sol = med["solution MultiHeadAttention"]
    r1 = sol / med["nn.MultiheadAttention (need_weights=True, default)"]
    r2 = sol / med["nn.MultiheadAttention (need_weights=False, SDPA)"]
    r3 = med["per-head loop (HeadLoopMHA)"] / med["fused reference (mha.MultiHeadAttention)"]
    print(f"ratio solution / nn.MultiheadAttention (default call): {r1:.2f}x  (goal: <= 1.10x)"
          f" -> {'within' if r1 <= 1.10 else 'NOT within'} goal")
    print(f"ratio solution / nn.MultiheadAttention (SDPA path):    {r2:.2f}x  (for information)")
    print(f"ratio per-head loop / fused:                           {r3:.2f}x")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if a.json:
        a.json.write_text(json.dumps({"median_s": med, "ratio_vs_torch_default": r1,
                                      "ratio_vs_torch_sdpa": r2, "ratio_loop_vs_fused": r3,
                                      "max_abs_diff": diff, "source": source}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
