"""Train lecture 08's GPT outside the notebook, on one device or several (PyTorch DDP).

    python -m attention_workbook.train                          # preset picked from the device
    python -m attention_workbook.train --preset cpu --out runs/cpu
    python -m attention_workbook.train --preset t4 --set max_iters=3000
    python -m attention_workbook.train --preset cpu --max-seconds 120      # a time budget
    torchrun --nproc_per_node=4 -m attention_workbook.train --preset large-gpu --out runs/ddp
    torchrun --nproc_per_node=2 -m attention_workbook.train --preset smoke --backend gloo   # CPU processes

Same model (attention_workbook.gpt.GPT) and same loop (attention_workbook.training.train) as the
notebook. Under torchrun every process holds a replica wrapped in DistributedDataParallel, draws
its own batches (seeded by its rank) and DDP averages the gradients, so the replicas stay
identical; loss estimates are averaged over processes; only rank 0 writes the checkpoint
(``OUT/ckpt.pt``, resumed automatically when present) and prints. ``--batch-size`` is per process:
the global batch is batch_size x world size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from .data import char_dataset, load_text
from .devices import amp_dtype, pick_device
from .gpt import GPT, generate
from .presets import PRESETS, choose_preset, parse_overrides
from .training import RunInfo, train


def setup_distributed(backend: str | None, device: str) -> RunInfo:
    """Join the process group torchrun describes in the environment (or run alone)."""
    if "RANK" not in os.environ:           # not started by torchrun: one process, no process group
        return RunInfo(device=device)
    import torch.distributed as dist

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    backend = backend or ("nccl" if device == "cuda" else "gloo")
    if device == "cuda":
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group(backend=backend)
    return RunInfo(device=device, rank=rank, world_size=world)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m attention_workbook.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=None, help=f"one of {sorted(PRESETS)} (default: by device, or $AWB_PRESET)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a preset field, e.g. max_iters=500, n_layer=4, lr=1e-3")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="time budget: train this many seconds, the learning-rate schedule laid over it "
                         "(default: the preset's max_seconds, if any; 0 = no budget, count steps)")
    ap.add_argument("--out", type=Path, default=Path("runs/gpt"), help="folder for ckpt.pt and history.json")
    ap.add_argument("--device", default=None, help="cpu / cuda / mps (default: picked automatically)")
    ap.add_argument("--backend", default=None, help="process-group backend (default nccl on GPUs, gloo on CPUs)")
    ap.add_argument("--no-resume", action="store_true", help="start from scratch even if OUT/ckpt.pt exists")
    ap.add_argument(
        "--data", default=None, help="path to tiny-shakespeare (else $AWB_TINYSHAKESPEARE, cache, download)"
    )
    ap.add_argument("--sample", type=int, default=300, help="characters to generate at the end (0: none)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)

    device = args.device or pick_device()
    run = setup_distributed(args.backend, device)
    name = choose_preset(run.device.split(":")[0], args.preset)
    cfg = PRESETS[name].with_overrides(**parse_overrides(args.set))
    if args.max_seconds is not None:
        cfg = replace(cfg, max_seconds=args.max_seconds or None)
    run.dtype = amp_dtype(run.device, cfg.precision)

    ds = char_dataset(load_text(args.data))
    cfg = replace(cfg, model=replace(cfg.model, vocab_size=ds.vocab_size))
    torch.manual_seed(cfg.seed)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    model = GPT.from_config(cfg.model).to(run.device)
    if "RANK" in os.environ:               # under torchrun, even with one process: the DDP path
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[run.device] if run.device.startswith("cuda") else None)
    raw = getattr(model, "module", model)
    if run.master:
        print(f"preset {cfg.name}: {raw.num_params():,} parameters, device {run.device}, "
              f"precision {run.dtype or torch.float32}, {run.world_size} process(es)"
              + (f" (DDP, {torch.distributed.get_backend()})" if "RANK" in os.environ else "") + ", "
              f"global batch {cfg.batch_size * run.world_size} x {cfg.model.block_size} tokens, "
              + (f"time budget {cfg.max_seconds:g} s" if cfg.max_seconds else f"{cfg.max_iters} steps"), flush=True)

    def report(step, hist):
        if run.master:
            print(f"step {step}: train {hist['train'][-1]:.4f}, val {hist['val'][-1]:.4f}", flush=True)

    ckpt = args.out / "ckpt.pt"
    t0 = time.perf_counter()
    hist = train(model, cfg, ds.train, ds.val, run=run, ckpt_path=ckpt, resume=not args.no_resume,
                 chars=ds.chars, progress=not args.quiet, on_eval=report)
    seconds = time.perf_counter() - t0
    summary = {"preset": cfg.name, "rank": run.rank, "world_size": run.world_size, "steps": hist["last_step"],
               "val_loss": hist["val"][-1], "train_loss": hist["train"][-1], "seconds": seconds,
               "train_seconds": hist["train_seconds"], "max_seconds": cfg.max_seconds,
               "tokens_per_s": hist["tokens_per_s"][-1] if hist["tokens_per_s"] else None,
               "param_checksum": float(sum(p.detach().double().sum() for p in raw.parameters())),
               "last_batch_loss": hist["loss"][-1][1] if hist["loss"] else None,
               "checkpoints_written": hist.get("checkpoints_written", 0)}
    if run.master:
        print(f"done: {hist['last_step']} steps in {hist['train_seconds']:.1f} s of training ({seconds:.1f} s in all), "
              f"{summary['tokens_per_s'] or 0:,.0f} tokens/s, val loss {summary['val_loss']:.4f}; checkpoint {ckpt}")
        if args.sample:
            start = torch.tensor([ds.encode("\n")], device=run.device)
            out = generate(raw, start, args.sample, temperature=0.8, top_k=20,
                           generator=torch.Generator(device=run.device.split(":")[0]).manual_seed(0))
            print(ds.decode(out[0]))
    (args.out).mkdir(parents=True, exist_ok=True)
    (args.out / f"summary_rank{run.rank}.json").write_text(json.dumps(summary, indent=1))
    if "RANK" in os.environ:
        import torch.distributed as dist
        dist.destroy_process_group()
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
