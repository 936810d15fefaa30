"""Lecture 08's GPT on a GPU: time to a validation loss, tokens/s, memory, kernels, MFU (a script, not a test).

    python benchmarks/bench_gpt_gpu.py                         # every run below, one after the other
    python benchmarks/bench_gpt_gpu.py --runs t4-fp16 large-gpu     # some of them
    python benchmarks/bench_gpt_gpu.py --runs t4-fp16 --set max_iters=500   # a shorter try

Runs (each a preset of attention_workbook.presets, trained by attention_workbook.training.train):

* ``t4-fp16``      the ``t4`` preset forced to fp16 autocast + GradScaler: what a Colab T4 runs;
* ``large-gpu`` / ``large-gpu-compile``  the ``large-gpu`` preset as an A100/H100 runs it (bf16),
  without and with ``torch.compile``;
* ``t4-bf16-1000`` / ``t4-compile-1000``  the ``t4`` preset in bf16 for 1000 steps, without and with
  ``torch.compile``: what compiling gains (tokens/s side by side).

The yardstick is the same for every run: the mean loss over every 256-character window of the
validation split (``training.val_loss_windows``), measured every ``eval_interval`` steps; the clock
stops while it is measured, so "time to val <= 1.50" counts training seconds only (compilation
is done before the clock starts and reported on its own). MFU = model FLOPs per second / the
GPU's dense bf16/fp16 peak, with nanoGPT's count of 6 N + 12 L d T FLOPs per token.
Every figure is printed and, with ``--out DIR``, written as one JSON file per run.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from attention_workbook import devices, gpt, presets, training  # noqa: E402
from attention_workbook.data import char_dataset  # noqa: E402

TARGET = 1.50

RUNS = {
    "t4-fp16": ("t4", {"precision": "fp16"}),
    "large-gpu": ("large-gpu", {}),
    "large-gpu-compile": ("large-gpu", {"compile": True}),
    "t4-bf16-1000": ("t4", {"precision": "bf16", "max_iters": 1000}),
    "t4-compile-1000": ("t4", {"precision": "bf16", "max_iters": 1000, "compile": True}),
}


def environment() -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2**30, 1),
                   multiprocessors=p.multi_processor_count)
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            env["driver"] = None
    return env


def sdpa_kernels(model: gpt.GPT, cfg: presets.TrainConfig, data: torch.Tensor, device: str, dtype) -> list[str]:
    """Names of the attention kernels one training step launches (PyTorch's profiler)."""
    from torch.profiler import ProfilerActivity, profile

    x, y = gpt.get_batch(data, model.block_size, min(cfg.batch_size, 8), torch.Generator().manual_seed(0))
    x, y = x.to(device), y.to(device)
    model.train()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        with devices.autocast(device, dtype):
            _, loss = model(x, y)
        loss.backward()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    keys = ("flash", "fmha", "efficient", "cudnn_attention", "sdpa", "scaled_dot_product", "attention")
    names = sorted({e.key for e in prof.key_averages() if any(k in e.key.lower() for k in keys)})
    return names


def run_one(label: str, preset: str, overrides: dict, ds, device: str, out: Path | None) -> dict:
    # the yardstick below replaces the loop's own sampled estimates: keep those short
    cfg = presets.PRESETS[preset].with_overrides(**{"eval_iters": 5, **overrides})
    mcfg = replace(cfg.model, vocab_size=ds.vocab_size)
    dtype = devices.amp_dtype(device, cfg.precision)
    torch.manual_seed(cfg.seed)
    model = gpt.GPT.from_config(mcfg).to(device)
    kernels = sdpa_kernels(model, cfg, ds.train, device, dtype)
    torch.manual_seed(cfg.seed)
    model = gpt.GPT.from_config(mcfg).to(device)          # fresh weights after the profiled step
    val_gpu = ds.val.to(device)
    curve = []                                             # (step, training seconds, yardstick val)

    def on_eval(step, hist):
        v = training.val_loss_windows(model, val_gpu, mcfg.block_size, 64, device, dtype)
        curve.append((step, round(hist["seconds"][-1], 2), round(v, 4)))
        print(f"   step {step:5d}  {hist['seconds'][-1]:7.1f} s  val {v:.4f}", flush=True)

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    print(f"\n== {label}: preset {preset} {overrides or ''}: {model.num_params():,} parameters, "
          f"{mcfg.n_layer} x {mcfg.n_head} x {mcfg.d_model}, context {mcfg.block_size}, batch {cfg.batch_size}, "
          f"lr {cfg.lr:g}, dropout {mcfg.dropout}, precision {dtype or torch.float32}"
          f"{' + GradScaler' if dtype == torch.float16 else ''}, compile {cfg.compile}, "
          + (f"budget {cfg.max_seconds:g} s" if cfg.max_seconds else f"{cfg.max_iters} steps"), flush=True)
    print(f"   attention kernels: {', '.join(kernels) or 'none found'}", flush=True)
    t0 = time.perf_counter()
    hist = training.train(model, cfg, ds.train, ds.val, run=training.RunInfo(device=device, dtype=dtype),
                     progress=False, on_eval=on_eval)
    wall = time.perf_counter() - t0
    tokens = hist["last_step"] * cfg.batch_size * mcfg.block_size
    tok_s = tokens / hist["train_seconds"]
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else platform.processor()
    peak = devices.gpu_peak_tflops(name) if device.startswith("cuda") else None
    achieved = devices.flops_per_token(model) * tok_s / 1e12
    first = next(((s, t, v) for s, t, v in curve if v <= TARGET), None)
    res = {
        "label": label,
        "preset": preset,
        "overrides": overrides,
        "params": model.num_params(),
        "steps": hist["last_step"],
        "train_seconds": round(hist["train_seconds"], 2),
        "compile_seconds": round(hist.get("compile_seconds", 0.0), 1),
        "eval_seconds": round(hist["eval_seconds"], 1),
        "wall_seconds": round(wall, 1),
        "tokens_per_s": round(tok_s),
        "model_tflops": round(achieved, 1),
        "mfu": round(achieved / peak, 4) if peak else None,
        "peak_tflops_assumed": peak,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.startswith("cuda") else None,
        "precision": str(dtype or torch.float32).replace("torch.", "")
        + (" + GradScaler" if dtype == torch.float16 else ""),
        "attention_kernels": kernels,
        "final_val": curve[-1][2] if curve else None,
        "first_at_or_below_target": {"target": TARGET, "step": first[0], "seconds": first[1], "val": first[2]}
        if first
        else None,
        "curve": curve,
        "config": cfg.to_dict(),
    }
    print(f"   -> {res['steps']} steps, {res['train_seconds']} s training (+{res['compile_seconds']} s compile, "
          f"+{res['eval_seconds']} s evaluation), {res['tokens_per_s']:,} tokens/s, {res['model_tflops']} TFLOP/s"
          + (f" = {100 * res['mfu']:.1f}% MFU of {peak:g}" if peak else "")
          + f", peak memory {res['peak_memory_gib']} GiB, final val {res['final_val']}; "
          + (f"val <= {TARGET} first at step {first[0]} after {first[1]} s" if first else f"never <= {TARGET}"),
          flush=True)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"gpu_{label}.json").write_text(json.dumps(res, indent=1))
    model = None                                           # free the GPU memory before the next run
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="*", default=list(RUNS), help=f"some of {list(RUNS)}")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", type=Path, default=None, help="write gpu_<run>.json files and environment.json here")
    args = ap.parse_args(argv)
    device = args.device or devices.pick_device()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    env = environment()
    print("environment:", json.dumps(env), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "environment.json").write_text(json.dumps(env, indent=1))
    ds = char_dataset()
    extra = presets.parse_overrides(args.set)
    results = []
    for label in args.runs:
        preset, overrides = RUNS[label] if label in RUNS else (label, {})
        try:
            results.append(run_one(label, preset, {**overrides, **extra}, ds, device, args.out))
        except Exception as e:  # noqa: BLE001 - one failing run (e.g. compile on an old GPU) is a result too
            print(f"   !! {label} failed: {type(e).__name__}: {str(e)[:500]}", flush=True)
            results.append({"label": label, "error": f"{type(e).__name__}: {str(e)[:500]}"})
    print("\n| run | precision | compile | steps | train s | to val <= 1.50 | tokens/s | MFU | peak GiB | final val |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        if "error" in r:
            print(f"| {r['label']} | failed: {r['error'][:80]} |")
            continue
        f = r["first_at_or_below_target"]
        reached = f"{f['seconds']} s (step {f['step']})" if f else "not reached"
        mfu = "" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        print(f"| {r['label']} | {r['precision']} | {r['config']['compile']} | {r['steps']} | {r['train_seconds']} | "
              f"{reached} | {r['tokens_per_s']:,} | {mfu} | {r['peak_memory_gib']} | {r['final_val']} |")


if __name__ == "__main__":
    main()
