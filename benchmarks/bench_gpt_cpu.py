"""Train lecture 08's GPT on tiny-shakespeare and print the figures (a script, not a test).

    python benchmarks/bench_gpt_cpu.py                       # the `cpu` preset and nanoGPT's CPU recipe, side by side
    python benchmarks/bench_gpt_cpu.py --only preset         # just the preset
    python benchmarks/bench_gpt_cpu.py --preset t4           # on a GPU (device picked automatically)
    python benchmarks/bench_gpt_cpu.py --set lr=2e-3 --set n_layer=3   # try a variation

Both runs use the same code (attention_workbook.gpt.train) and the same final measurement: the
mean loss over ``--eval-batches`` fixed random windows of the validation split (block size of the
model, batch 32). Training time excludes that final measurement and is wall clock; the CPU
seconds the process used are printed too, because on a shared machine wall time depends on what
else runs (the load average is printed before and after).

The data come from attention_workbook.data.load_text: set AWB_TINYSHAKESPEARE to a local copy on
a machine without internet.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from attention_workbook import gpt  # noqa: E402
from attention_workbook.data import char_dataset  # noqa: E402


def load() -> str:
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "n/a"


def parse_value(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(v.lower(), v)


def run_one(cfg: gpt.TrainConfig, ds, device: str, eval_batches: int, max_seconds: float | None) -> dict:
    torch.manual_seed(cfg.seed)
    mcfg = replace(cfg.model, vocab_size=ds.vocab_size)
    model = gpt.GPT.from_config(mcfg).to(device)
    dtype = gpt.amp_dtype(device, cfg.precision)
    run = gpt.RunInfo(device=device, dtype=dtype)
    cfg = replace(cfg, eval_interval=10**9)  # no estimates during the timed part
    if cfg.threads and device == "cpu":
        torch.set_num_threads(cfg.threads)
    threads = torch.get_num_threads()
    print(f"\n== {cfg.name}: {model.num_params():,} parameters, {mcfg.n_layer} layers x {mcfg.n_head} heads, "
          f"width {mcfg.d_model}, context {mcfg.block_size}, batch {cfg.batch_size}, {cfg.max_iters} iters, "
          f"lr {cfg.lr:g}, precision {dtype or torch.float32}, {threads} threads; load before: {load()}", flush=True)
    cpu0, t0 = time.process_time(), time.perf_counter()
    hist = gpt.train(model, cfg, ds.train, ds.val, run=run, progress=sys.stderr.isatty(),
                     max_seconds=max_seconds, eval_at_end=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    steps = hist["last_step"]
    val = gpt.estimate_loss(model, {"val": ds.val}, mcfg.block_size, 32, eval_batches, device, dtype, seed=1234)["val"]
    out = {"name": cfg.name, "params": model.num_params(), "steps": steps, "train_seconds": round(wall, 1),
           "cpu_seconds": round(cpu, 1), "tokens_per_s": round(steps * cfg.batch_size * mcfg.block_size / wall),
           "val_loss": round(val, 4), "precision": str(dtype or torch.float32).replace("torch.", ""),
           "threads": threads, "load_after": load(), "config": cfg.to_dict()}
    print(f"   {steps} steps in {wall:.1f} s wall ({cpu:.1f} s CPU), {out['tokens_per_s']:,} tokens/s, "
          f"val loss {val:.4f} ({eval_batches} x 32 x {mcfg.block_size} val tokens); load after: {load()}", flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu", choices=sorted(gpt.PRESETS))
    ap.add_argument("--only", choices=["preset", "baseline"], help="run just one of the two")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a preset field (TrainConfig or GPTConfig), e.g. lr=2e-3, n_layer=3")
    ap.add_argument("--device", default=None, help="cpu / cuda / mps (default: picked automatically)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads for both runs (default: the preset's setting, else PyTorch's)")
    ap.add_argument("--eval-batches", type=int, default=100)
    ap.add_argument("--max-seconds", type=float, default=None, help="stop training after this wall time")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)

    device = args.device or gpt.pick_device()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"device {device}" + (f" ({torch.cuda.get_device_name(0)})" if device == "cuda" else ""))
    t = time.perf_counter()
    ds = char_dataset()
    print(f"data: {len(ds.train):,} train / {len(ds.val):,} val characters, vocabulary {ds.vocab_size} "
          f"(loaded in {time.perf_counter() - t:.1f} s)")
    overrides = dict(kv.split("=", 1) for kv in args.set)
    cfg = gpt.PRESETS[args.preset].with_overrides(**{k: parse_value(v) for k, v in overrides.items()})
    base = gpt.NANOGPT_CPU
    if args.threads:
        cfg, base = replace(cfg, threads=args.threads), replace(base, threads=args.threads)
    results = []
    if args.only != "baseline":
        results.append(run_one(cfg, ds, device, args.eval_batches, args.max_seconds))
    if args.only != "preset":
        results.append(run_one(base, ds, device, args.eval_batches, args.max_seconds))
    print("\n| run | params | steps | train s (wall) | CPU s | tokens/s | val loss |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['name']} | {r['params']:,} | {r['steps']} | {r['train_seconds']} | {r['cpu_seconds']} | "
              f"{r['tokens_per_s']:,} | {r['val_loss']:.4f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(),
                                         "torch": torch.__version__, "device": device, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
