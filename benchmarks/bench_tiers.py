"""What each isolation tier costs per notebook: starting the sandboxed interpreter of a grading
kernel (``python`` importing ``ipykernel`` and ``torch``, as every kernel and every outside-verdict
replay does), through ``sandbox.sandbox_command``, in each tier this machine can run, interleaved
with the same start under resource limits only (no isolation), so the load moves all alike.

    PYTHONPATH=autograder .venv/bin/python benchmarks/bench_tiers.py [--runs 7]

A notebook costs two such starts (its kernel and the replay of the outside verdict). Run it on a
workstation (bubblewrap), in Docker with its defaults (the Landlock tier as root) and as a
restricted pod (``--user 1000 --cap-drop ALL --security-opt no-new-privileges``: the Landlock
tier as non-root): each prints the tiers it can measure, with the CPU and the load.
Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from awb_grader.isolation import sandbox
from awb_grader.isolation import landlock, tiers

PROGRAM = [sys.executable, "-c", "import ipykernel.kernelapp, torch; torch.ones(2).sum()"]
UID = sandbox.draw_uids(1)          # a uid of its own, as a grading run draws it


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return f"{cpu}, {os.cpu_count()} cores, load {open('/proc/loadavg').read().split()[:3]}, uid {os.geteuid()}"


def start(mode: str, work: Path, private: Path) -> float:
    env = dict(os.environ, AWB_SANDBOX_MODE=mode, AWB_PRIVATE_RUNTIME=str(private), AWB_SANDBOX_UID=str(UID))
    sandbox.prepare_run(str(work), env=env)
    t0 = time.perf_counter()
    r = subprocess.run(sandbox.sandbox_command(PROGRAM, str(work), env=env), cwd=work, env=env,
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{mode}: {r.stderr.strip()[-400:]}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    modes = []
    if sandbox.bwrap_works():
        modes.append("bwrap")
    os.environ[tiers.FORCE_ENV] = "landlock"
    if tiers.detect().name == "landlock":
        modes.append("landlock")
    print(f"machine: {machine()}; Landlock ABI {landlock.abi()}")
    print(f"tiers measured here: {', '.join(modes) or 'none'} (against 'limits': resource limits only)")
    with tempfile.TemporaryDirectory(prefix="awb-bench-") as tmp:
        base = Path(tmp)
        work, private = base / "work", base / "private"
        work.mkdir()
        (private / "sock").mkdir(parents=True)
        base.chmod(0o711)
        times: dict[str, list[float]] = {m: [] for m in ["limits", *modes]}
        start("limits", work, private)                   # warm the page cache once
        for _ in range(a.runs):
            for m in times:
                times[m].append(start(m, work, private))
    base_s = statistics.median(times["limits"])
    print(f"{'tier':<10} {'median start (s)':>17} {'extra per start':>16} {'extra per notebook (2 starts)':>30}")
    for m, ts in times.items():
        med = statistics.median(ts)
        print(f"{m:<10} {med:17.3f} {med - base_s:16.3f} {2 * (med - base_s):30.3f}")
    print(f"({a.runs} runs each, interleaved; load now {open('/proc/loadavg').read().split()[:3]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
