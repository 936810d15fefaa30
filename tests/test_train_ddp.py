"""python -m attention_workbook.train under torchrun: 2 CPU processes on the gloo backend.

DDP must keep the two replicas identical although each process trains on its own batches,
average the loss estimates over processes, and write the checkpoint from rank 0 only.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import small_corpus

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "data" / "tinyshakespeare.txt"

pytestmark = [
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                       reason="this PyTorch build has no gloo backend"),
    # each starts two training processes: one at a time, on one worker (two cores)
    pytest.mark.xdist_group("ddp"),
]


@pytest.fixture
def corpus_env(tmp_path_factory) -> dict:
    """The real corpus where ../shared has it, else a small one made here (read by the same loader)."""
    if SHARED.is_file():
        return {"AWB_TINYSHAKESPEARE": str(SHARED.resolve())}
    return {"AWB_CORPUS": str(small_corpus(tmp_path_factory.mktemp("corpus")))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_gloo_run_keeps_replicas_identical(tmp_path, corpus_env):
    env = dict(os.environ, **corpus_env, OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={free_port()}", "-m", "attention_workbook.train", "--preset", "smoke",
           "--backend", "gloo", "--device", "cpu", "--out", str(tmp_path), "--quiet", "--sample", "20",
           "--set", "max_iters=10", "--set", "eval_interval=5", "--set", "eval_iters=2", "--set", "threads=1"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"summary_rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world_size"] == r1["world_size"] == 2 and r0["steps"] == r1["steps"] == 10
    # each rank drew its own batches ...
    assert r0["last_batch_loss"] != r1["last_batch_loss"]
    # ... yet the averaged gradients kept the replicas equal, and the estimates are all-reduced
    assert r0["param_checksum"] == pytest.approx(r1["param_checksum"], rel=1e-12, abs=1e-9)
    assert r0["val_loss"] == r1["val_loss"] and r0["train_loss"] == r1["train_loss"]
    # one writer: rank 0 saved at steps 5 and 10, rank 1 never
    assert (r0["checkpoints_written"], r1["checkpoints_written"]) == (2, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt", "summary_rank0.json", "summary_rank1.json"]
    ck = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert ck["step"] == 10 and ck["history"]["step"] == [5, 10]
    assert proc.stdout.count("done: 10 steps") == 1  # only rank 0 prints


def test_two_process_run_on_a_time_budget_stops_together(tmp_path, corpus_env):
    """With a time budget rank 0's clock decides for both ranks: the same learning rates, the
    same last step, identical replicas (a rank that stopped alone would hang the other)."""
    env = dict(os.environ, **corpus_env, OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={free_port()}", "-m", "attention_workbook.train", "--preset", "smoke",
           "--backend", "gloo", "--device", "cpu", "--out", str(tmp_path), "--quiet", "--sample", "0",
           "--max-seconds", "2", "--set", "max_iters=100000", "--set", "eval_interval=100000",
           "--set", "eval_iters=2", "--set", "threads=1"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"summary_rank{r}.json").read_text()) for r in (0, 1))
    print(r0, r1, sep="\n")  # shown when an assertion below fails
    assert r0["max_seconds"] == r1["max_seconds"] == 2
    assert r0["steps"] == r1["steps"] < 100000 and r0["train_seconds"] >= 2
    assert r0["param_checksum"] == pytest.approx(r1["param_checksum"], rel=1e-12, abs=1e-9)
