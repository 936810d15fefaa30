"""The training loop lecture 08 and ``python -m attention_workbook.train`` share, and its pieces.

``train`` runs the loop on one device or under DistributedDataParallel: learning rate
(``gpt.lr_at``, or ``gpt.lr_in_budget`` on a time budget), batch (``gpt.get_batch``), forward
under ``devices.autocast``, backward (through a GradScaler in float16), clipping, AdamW step; every
``eval_interval`` steps a loss estimate, a checkpoint and the caller's ``on_eval``. Its pieces:
``configure_optimizer`` (AdamW, decay on matrices only), ``estimate_loss`` / ``val_loss_windows``
(two yardsticks), checkpoints that resume, ``Clock`` (training seconds, evaluation excluded),
``Progress`` (the bar) and ``LivePlot`` (a loss plot that redraws in a notebook).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

from .devices import autocast
from .gpt import GPT, get_batch, lr_at, lr_in_budget
from .presets import TrainConfig


# ----------------------------------------------------------------------------- optimizer and yardsticks
def configure_optimizer(model: nn.Module, weight_decay: float, lr: float, betas=(0.9, 0.99),
                        device: str = "cpu") -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (dim >= 2); biases and LayerNorm gains are not decayed."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    extra = {"fused": True} if device.startswith("cuda") else {}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **extra)



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


# ----------------------------------------------------------------------------- checkpoints
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


# ----------------------------------------------------------------------------- where the loop runs
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


# ----------------------------------------------------------------------------- the loop's helpers
class Clock:
    """Training seconds: the wall clock since the start, minus the pauses (loss estimates,
    callbacks, checkpoints), plus ``spent_before``, the training seconds of the run(s) before a resume."""

    def __init__(self, run: RunInfo, spent_before: float = 0.0):
        self.run, self.spent_before = run, spent_before
        self.t0, self.paused = time.perf_counter(), 0.0

    def trained(self) -> float:
        if self.run.device.startswith("cuda"):
            torch.cuda.synchronize()    # the GPU runs behind the Python loop: count its work too
        return self.spent_before + time.perf_counter() - self.t0 - self.paused

    def shared(self) -> float:
        """Rank 0's training seconds, on every rank (one tiny broadcast under DDP)."""
        s = self.trained()
        if self.run.world_size > 1:
            import torch.distributed as dist
            t = torch.tensor([s], dtype=torch.float64, device=self.run.device)
            dist.broadcast(t, src=0)
            s = t.item()
        return s


class Progress:
    """The loop's progress bar: seconds of a time budget (``budget``), else steps."""

    def __init__(self, cfg: TrainConfig, budget: float | None, start: int, spent_before: float, show: bool):
        from .progress import tqdm

        self.budget, self.max_iters = budget, cfg.max_iters
        if budget is not None:
            self.shown = min(round(spent_before), round(budget))
            self.bar = tqdm(total=round(budget), initial=self.shown, unit="s", disable=not show,
                            desc=f"training ({cfg.name}, {budget:.0f} s budget)",
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s {postfix}")
        else:
            self.shown = start
            self.bar = tqdm(total=cfg.max_iters, initial=start, disable=not show, desc=f"training ({cfg.name})",
                            unit="step")

    def update(self, step: int, elapsed: float, postfix: str) -> None:
        now = step if self.budget is None else min(round(elapsed), round(self.budget))
        self.bar.update(now - self.shown)
        self.shown = now
        self.bar.set_postfix_str(postfix)

    def close(self, step: int) -> None:
        if self.budget is not None and self.shown < round(self.budget) and step < self.max_iters:
            self.bar.update(round(self.budget) - self.shown)     # the budget is spent: show the bar full
        elif self.budget is None:
            self.bar.update(step - self.shown)
        self.bar.close()


def new_history() -> dict:
    return {"step": [], "seconds": [], "train": [], "val": [], "lr": [], "tokens_per_s": [], "elapsed": [],
            "loss": [], "train_seconds": 0.0, "eval_seconds": 0.0, "warmup_seconds": None}


def resume_from(ckpt_path, raw: nn.Module, optimizer, scaler, history: dict,
                device: str) -> tuple[dict, int, torch.Tensor | None]:
    """Load a checkpoint into the model, optimizer and scaler: (history, step, batch-generator state)."""
    ck = load_checkpoint(ckpt_path, device)
    raw.load_state_dict(ck["model"])
    optimizer.load_state_dict(ck["optimizer"])
    if scaler is not None and ck.get("scaler"):
        scaler.load_state_dict(ck["scaler"])
    return {**history, **ck["history"]}, ck["step"], ck.get("rng")


def compiled(model: nn.Module, cfg: TrainConfig, run: RunInfo, train_data: torch.Tensor,
             block: int) -> tuple[nn.Module, float]:
    """``torch.compile(model)``, compiled before the clock starts: one forward + backward on a batch
    of the training shape (from its own generator: the training batches stay the same), no
    optimizer step. In the modes that use CUDA graphs ("reduce-overhead", "max-autotune") on a
    GPU, three: the graphs are recorded on the second call and replayed from the third, so the
    recording is not counted as training either. Returns the compiled model and the seconds it took."""
    t0 = time.perf_counter()
    step_model = torch.compile(model, **({"mode": cfg.compile} if isinstance(cfg.compile, str) else {}))
    xw, yw = get_batch(train_data, block, cfg.batch_size, torch.Generator().manual_seed(12345))
    graphs = run.device.startswith("cuda") and cfg.compile in ("reduce-overhead", "max-autotune")
    for _ in range(3 if graphs else 1):
        with autocast(run.device, run.dtype):
            _, loss = step_model(xw, yw)
        loss.backward()
        for p in getattr(model, "module", model).parameters():
            p.grad = None
    if run.device.startswith("cuda"):
        torch.cuda.synchronize()
    return step_model, time.perf_counter() - t0


def learning_rate(step: int, seconds: float, cfg: TrainConfig, budget: float | None, history: dict) -> float:
    """``lr_at`` over steps, or on a time budget ``lr_in_budget`` over the seconds (the warmup's
    end is noted in ``history["warmup_seconds"]``: the cosine starts there)."""
    if budget is None:
        return lr_at(step, cfg.warmup_iters, cfg.max_iters, cfg.lr, cfg.min_lr)
    if step == cfg.warmup_iters and history["warmup_seconds"] is None:
        history["warmup_seconds"] = seconds
    return lr_in_budget(step, seconds, cfg.warmup_iters, history["warmup_seconds"] or 0.0, budget, cfg.lr, cfg.min_lr)


def optimizer_step(loss: torch.Tensor, model: nn.Module, optimizer, scaler, grad_clip: float) -> None:
    """Backward, clip the global gradient norm, step (through the GradScaler in float16)."""
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()


def mean_over_ranks(losses: dict[str, float], run: RunInfo) -> dict[str, float]:
    if run.world_size == 1:
        return losses
    import torch.distributed as dist
    t = torch.tensor([losses["train"], losses["val"]], device=run.device)
    dist.all_reduce(t)
    return {"train": t[0].item() / run.world_size, "val": t[1].item() / run.world_size}


# ----------------------------------------------------------------------------- the loop
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
    run trains for that many seconds and the learning rate follows :func:`gpt.lr_in_budget`: the
    cosine ends exactly when the budget is spent, whatever the hardware's speed; ``max_iters``
    is then only a cap. The budget counts training steps only: the loss estimates, the
    ``on_eval`` callback and checkpoint writes pause the clock (their time is reported
    separately as ``history["eval_seconds"]``). Under DDP rank 0's clock decides for every rank,
    so the replicas use the same learning rate and stop at the same step.

    Returns the history dict: per estimate ``step``, ``seconds`` (training seconds so far),
    ``train``, ``val``; per 10 steps ``loss``, ``lr``, ``elapsed``, ``tokens_per_s``; and
    ``train_seconds``, ``eval_seconds``, ``last_step``.
    """
    run = run or RunInfo()
    raw = getattr(model, "module", model)
    budget = max_seconds if max_seconds is not None else cfg.max_seconds
    if cfg.threads and run.device == "cpu":
        torch.set_num_threads(cfg.threads)
    optimizer = configure_optimizer(raw, cfg.weight_decay, cfg.lr, (cfg.beta1, cfg.beta2), run.device)
    scaler = torch.amp.GradScaler("cuda") if run.dtype == torch.float16 else None
    history, start, rng = new_history(), 0, None
    if resume and ckpt_path is not None and Path(ckpt_path).is_file():
        history, start, rng = resume_from(ckpt_path, raw, optimizer, scaler, history, run.device)
        if run.master and progress:
            print(f"resumed from {ckpt_path} at step {start}")
    g = torch.Generator().manual_seed(cfg.seed + 1000 * run.rank + start)  # each rank its own batches
    if start and run.world_size == 1 and rng is not None:
        g.set_state(rng)  # the same batches an uninterrupted run would have drawn
    block = raw.block_size
    tokens_per_step = cfg.batch_size * block * run.world_size
    if run.device.startswith("cuda"):
        # the whole text fits easily on a GPU: batches are cut there, no copy per step
        train_data, val_data = train_data.to(run.device), val_data.to(run.device)
    model.train()
    step_model = model
    if cfg.compile:
        step_model, history["compile_seconds"] = compiled(model, cfg, run, train_data, block)
    spent_before = history["train_seconds"]          # training seconds of the run(s) before a resume
    clock = Clock(run, spent_before)

    def evaluate(step: int) -> None:
        t_eval = time.perf_counter()
        history["train_seconds"] = clock.trained()
        losses = estimate_loss(raw, {"train": train_data, "val": val_data}, block, cfg.batch_size,
                               cfg.eval_iters, run.device, run.dtype, seed=cfg.seed + run.rank)
        losses = mean_over_ranks(losses, run)
        for key, value in (("step", step), ("seconds", history["train_seconds"]),
                           ("train", losses["train"]), ("val", losses["val"])):
            history[key].append(value)
        if ckpt_path is not None and run.master:
            save_checkpoint(ckpt_path, model, optimizer, cfg, step, history, chars, scaler, g.get_state())
            history["checkpoints_written"] = history.get("checkpoints_written", 0) + 1
        if on_eval is not None:
            on_eval(step, history)
        pause = time.perf_counter() - t_eval
        clock.paused += pause
        history["eval_seconds"] += pause

    bar = Progress(cfg, budget, start, spent_before, show=progress and run.master)
    # how often the budget clock is read: every step on a CPU; every 10 steps on a GPU (reading
    # it waits for the GPU) or under DDP (rank 0's clock is broadcast), with the rate kept in between
    every = 10 if run.device.startswith("cuda") or run.world_size > 1 else 1
    seconds, step = 0.0, start
    while step < cfg.max_iters:
        if budget is not None and (step - start) % every == 0:
            seconds = clock.shared()
            if seconds >= budget:
                break
        lr = learning_rate(step, seconds, cfg, budget, history)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, block, cfg.batch_size, g)
        x, y = x.to(run.device, non_blocking=True), y.to(run.device, non_blocking=True)
        with autocast(run.device, run.dtype):
            _, loss = step_model(x, y)                                 # logits (B, T, V), mean loss
        optimizer_step(loss, model, optimizer, scaler, cfg.grad_clip)
        step += 1
        if step % 10 == 0 or step == cfg.max_iters:
            loss_value = loss.item()                      # waits for the GPU: the clock below is honest
            elapsed = clock.trained()
            history["loss"].append((step, loss_value))
            history["lr"].append((step, lr))
            history["elapsed"].append(elapsed)
            history["tokens_per_s"].append((step - start) * tokens_per_step / max(elapsed - spent_before, 1e-9))
            bar.update(step, elapsed, f"step {step}, loss {loss_value:.3f}, lr {lr:.1e}, "
                                      f"{history['tokens_per_s'][-1]:,.0f} tok/s")
        if step % cfg.eval_interval == 0 and step < cfg.max_iters:
            evaluate(step)
    bar.close(step)
    history["train_seconds"] = clock.trained()
    history["last_step"] = step
    if eval_at_end and (not history["step"] or history["step"][-1] != history["last_step"]):
        evaluate(history["last_step"])
    return history


# ----------------------------------------------------------------------------- watching it
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
