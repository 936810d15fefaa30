"""Lecture 08's `cpu` preset against nanoGPT's own CPU recipe, at equal wall time (a script, not a test).

    python benchmarks/bench_gpt_cpu.py --nanogpt ../shared/anchors/nanogpt
    python benchmarks/bench_gpt_cpu.py --nanogpt DIR --repeats 2        # twice, alternating the order
    python benchmarks/bench_gpt_cpu.py --nanogpt DIR --set lr=3e-3      # a variation of the preset

1. **nanoGPT**, its own unmodified code (``train.py`` and ``model.py`` from ``--nanogpt DIR``, run
   from a scratch copy, never copied into this project), with its README's CPU recipe
   (4 layers x 4 heads x 128, context 64, batch 12, 2000 iterations, float32). Its data are
   prepared by its own ``data/shakespeare_char/prepare.py`` from the local tiny-shakespeare.
   The wall time of the whole command is the **budget**.
2. **The `cpu` preset**, ``python -m attention_workbook.train --preset cpu``, given that budget:
   its time budget (``--max-seconds``) is the measured nanoGPT wall time minus this process's
   start-up and final checkpoint (measured the same way), so both commands take the same wall
   time from start to finished checkpoint; the learning-rate schedule is laid over the budget.
3. **One yardstick** for both checkpoints: the mean loss over every 64-character window of the
   validation split (``training.val_loss_windows``: all 1,742 windows, every character predicted
   once), computed here, outside both training commands.

The figure is the ratio of the two losses at (about) equal wall time (goal: <= 0.96). Both
commands use PyTorch's default number of threads unless ``--threads`` says otherwise. The CPU
model, its bf16 support and the load average before and after every run are printed, because
on a shared machine wall time moves with what else is running: compare only figures from one
invocation, and prefer an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import torch  # noqa: E402

from attention_workbook import presets, training  # noqa: E402
from attention_workbook.data import char_dataset, load_text  # noqa: E402
from machine_info import cpu_flags, cpu_model  # noqa: E402

NANOGPT_RECIPE = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
                  "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
                  "--n_embd=128", "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0"]


def load() -> str:
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "n/a"


def prepare_nanogpt(src: Path, text_path: Path, work: Path) -> Path:
    """A scratch copy of nanoGPT with its shakespeare_char data prepared by its own script."""
    dst = work / "nanogpt"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("out*", "*.bin", "*.pkl", "__pycache__"))
    data_dir = dst / "data" / "shakespeare_char"
    shutil.copyfile(text_path, data_dir / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=data_dir, check=True, capture_output=True, text=True)
    return dst


def run_nanogpt(nano: Path, out_dir: Path, threads: int | None, extra: list[str]) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, "train.py", *NANOGPT_RECIPE, f"--out_dir={out_dir}", *extra]
    before = load()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=nano, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"nanoGPT failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    evals = [ln for ln in proc.stdout.splitlines() if ln.startswith("step ")]
    iters = [ln for ln in proc.stdout.splitlines() if ln.startswith("iter ")]
    return {"wall_seconds": round(wall, 1), "load_before": before, "load_after": load(),
            "last_eval": evals[-1] if evals else None, "iterations": len(iters)}


def nanogpt_model(nano: Path, ckpt_path: Path):
    """nanoGPT's own GPT class with its checkpoint loaded."""
    sys.path.insert(0, str(nano))
    try:
        import model as nano_model  # nanoGPT's model.py
    finally:
        sys.path.remove(str(nano))
    ck = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    m = nano_model.GPT(nano_model.GPTConfig(**ck["model_args"]))
    m.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ck["model"].items()})
    return m, ck["iter_num"]


def run_preset(preset: str, budget: float, out_dir: Path, threads: int | None, overrides: list[str],
               text_path: Path) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", AWB_TINYSHAKESPEARE=str(text_path),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("AWB_SMOKE", None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
        overrides = [*overrides, f"threads={threads}"]
    cmd = [sys.executable, "-m", "attention_workbook.train", "--preset", preset, "--max-seconds", f"{budget:.2f}",
           "--out", str(out_dir), "--no-resume", "--quiet", "--sample", "0",
           *[a for kv in overrides for a in ("--set", kv)]]
    before = load()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"the preset run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    summary = json.loads((out_dir / "summary_rank0.json").read_text())
    return {"wall_seconds": round(wall, 1), "load_before": before, "load_after": load(),
            "train_seconds": round(summary["train_seconds"], 1), "steps": summary["steps"],
            "overhead_seconds": round(wall - summary["train_seconds"], 1)}


def yardstick(model, val: torch.Tensor) -> float:
    torch.manual_seed(0)
    return training.val_loss_windows(model, val, 64, batch_size=64)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nanogpt", type=Path, required=True,
                    help="an unmodified nanoGPT checkout (offline copy: ../shared/anchors/nanogpt)")
    ap.add_argument("--preset", default="cpu", choices=sorted(presets.PRESETS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset field")
    ap.add_argument("--threads", type=int, default=None, help="OMP threads for both runs (default: PyTorch's)")
    ap.add_argument("--repeats", type=int, default=1, help="pairs to run; the order alternates")
    ap.add_argument("--overhead", type=float, default=None,
                    help="seconds the preset's command spends outside training (default: measured by a short run)")
    ap.add_argument("--nanogpt-set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra nanoGPT flags (a quick check: max_iters=20 lr_decay_iters=20 eval_interval=20)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)

    text_path = Path(os.environ.get("AWB_TINYSHAKESPEARE") or ROOT.parent / "shared" / "data" / "tinyshakespeare.txt")
    text = load_text(str(text_path) if text_path.is_file() else None)
    if not text_path.is_file():
        text_path = Path(tempfile.mkdtemp()) / "input.txt"
        text_path.write_text(text)
    val = char_dataset(text).val
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs ({cpu_flags()}); torch {torch.__version__}, "
          f"threads {args.threads or torch.get_num_threads()}; load average now {load()}")
    nano_extra = [f"--{kv}" for kv in args.nanogpt_set]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-gpt-cpu-") as tmp:
        work = Path(tmp)
        nano = prepare_nanogpt(args.nanogpt.resolve(), text_path, work)
        nano_val = torch.from_numpy(__import__("numpy").fromfile(nano / "data/shakespeare_char/val.bin",
                                                                 dtype="uint16").astype("int64"))
        meta = pickle.loads((nano / "data/shakespeare_char/meta.pkl").read_bytes())
        assert meta["vocab_size"] == 65 and torch.equal(nano_val, val), "nanoGPT's validation ids differ from ours"
        overhead = args.overhead
        if overhead is None:   # start-up + data + final estimate + checkpoint of the preset's command
            probe = run_preset(args.preset, 3.0, work / "probe", args.threads, args.set, text_path)
            overhead = probe["overhead_seconds"]
            print(f"preset command overhead (start-up, data, final estimate, checkpoint): {overhead:.1f} s "
                  f"(a 3 s probe run)")
        for r in range(args.repeats):
            order = ["nanogpt", "preset"] if r % 2 == 0 else ["preset", "nanogpt"]
            budget = results[-1]["nanogpt"]["wall_seconds"] if results else None
            row: dict = {}
            for who in order:
                if who == "nanogpt":
                    out = work / f"nano{r}"
                    row["nanogpt"] = run_nanogpt(nano, out, args.threads, nano_extra)
                    model, it = nanogpt_model(nano, out / "ckpt.pt")
                    row["nanogpt"].update(checkpoint_iter=it, params=sum(p.numel() for p in model.parameters()),
                                          val=round(yardstick(model, val), 4))
                    print(f"[{r}] nanoGPT: {row['nanogpt']['wall_seconds']} s wall, checkpoint of iteration {it}, "
                          f"val {row['nanogpt']['val']} (its own estimate: {row['nanogpt']['last_eval']}); "
                          f"load {row['nanogpt']['load_before']} -> {row['nanogpt']['load_after']}", flush=True)
                else:
                    wall = row.get("nanogpt", {}).get("wall_seconds") or budget
                    if wall is None:       # the preset runs first: a provisional budget, nanoGPT's idle time here
                        wall = 238.0
                    out = work / f"preset{r}"
                    row["preset"] = run_preset(args.preset, max(wall - overhead, 1.0), out, args.threads,
                                               args.set, text_path)
                    model, ck = training.model_from_checkpoint(out / "ckpt.pt")
                    row["preset"].update(budget_seconds=round(wall - overhead, 1), params=model.num_params(),
                                         val=round(yardstick(model, val), 4))
                    print(f"[{r}] preset {args.preset}: {row['preset']['wall_seconds']} s wall "
                          f"({row['preset']['train_seconds']} s training, {row['preset']['steps']} steps), "
                          f"val {row['preset']['val']}; load {row['preset']['load_before']} -> "
                          f"{row['preset']['load_after']}", flush=True)
            row["ratio_val"] = round(row["preset"]["val"] / row["nanogpt"]["val"], 4)
            row["ratio_wall"] = round(row["preset"]["wall_seconds"] / row["nanogpt"]["wall_seconds"], 3)
            results.append(row)
    print(
        "\n| pair | nanoGPT wall s | nanoGPT val | preset wall s | preset steps | preset val | val ratio | wall ratio |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(results):
        print(f"| {i} | {r['nanogpt']['wall_seconds']} | {r['nanogpt']['val']:.4f} | {r['preset']['wall_seconds']} | "
              f"{r['preset']['steps']} | {r['preset']['val']:.4f} | {r['ratio_val']:.3f} | {r['ratio_wall']:.3f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cpu": cpu_model(), "flags": cpu_flags(), "cpus": os.cpu_count(),
                                         "torch": torch.__version__, "preset": args.preset, "overrides": args.set,
                                         "threads": args.threads, "pairs": results}, indent=1))
    return results


if __name__ == "__main__":
    main()
