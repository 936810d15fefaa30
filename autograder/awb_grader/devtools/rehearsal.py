"""Rehearsing a grading platform on this machine (the tests and the benchmarks): a command run as
root in a bubblewrap container built like the platform's (Gradescope's ``/autograder``,
PrairieLearn's ``/grade``), with the platform's memory and CPUs where cgroups allow."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _cgroup(controller: str, name: str) -> Path | None:
    base = Path("/sys/fs/cgroup") / controller
    if not base.is_dir():
        return None
    try:
        d = base / name
        d.mkdir()
        return d
    except OSError:
        return None


def contained(argv: list[str], binds: dict[str, Path], env: dict | None = None, memory_mb: int | None = None,
              cpus: float | None = None, timeout: float = 900, keep=()) -> dict:
    """Run ``argv`` as root in a bubblewrap container built like a grading platform's: the
    host's system read-only, each ``binds`` target (``/autograder``, ``/grade``) a writable host
    folder, a private ``/tmp`` (``keep``: host folders under /tmp bound read-only). Where this
    machine lets us make cgroups (v1), the run gets ``memory_mb`` of memory and ``cpus`` CPUs, as
    the platform's container would.

    Returns {rc, seconds, stdout, peak_pss_mb (sampled every 0.2 s over the whole process tree,
    shared pages counted once), cgroup_peak_mb (the cgroup's peak, page cache included; None
    without cgroups), oom (the limit was hit), limited (memory limit enforced)}."""
    import subprocess
    import threading
    import uuid

    import psutil

    args = ["bwrap", "--die-with-parent", "--cap-add", "ALL", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--ro-bind", "/sys", "/sys"]
    for entry in sorted(Path("/").iterdir()):
        if entry.name in ("proc", "dev", "sys", "tmp") or f"/{entry.name}" in binds:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry), str(entry)]
        elif entry.is_dir():
            args += ["--ro-bind", str(entry), str(entry)]
    for path in keep:
        args += ["--ro-bind", str(path), str(path)]
    for target, host in binds.items():
        args += ["--bind", str(host), target]
    name = f"awb-rehearsal-{uuid.uuid4().hex[:8]}"
    mem = _cgroup("memory", name) if memory_mb else None
    cpu = _cgroup("cpu", name) if cpus else None
    if mem:
        (mem / "memory.limit_in_bytes").write_text(str(memory_mb * 1024 * 1024))
        try:
            (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_mb * 1024 * 1024))
        except OSError:
            pass
    if cpu:
        (cpu / "cpu.cfs_period_us").write_text("100000")
        (cpu / "cpu.cfs_quota_us").write_text(str(int(100000 * cpus)))

    def enter():
        for d in (mem, cpu):
            if d:
                (d / "cgroup.procs").write_text(str(os.getpid()))

    full_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp",
                "LANG": "C.UTF-8", **(env or {})}
    peak = [0.0]
    done = threading.Event()
    t0 = time.perf_counter()
    proc = subprocess.Popen(args + list(argv), env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=enter)

    def sample():
        try:
            top = psutil.Process(proc.pid)
        except psutil.Error:
            return
        while not done.wait(0.2):
            total = 0
            try:
                procs = [top, *top.children(recursive=True)]
            except psutil.Error:
                continue
            for p in procs:
                try:
                    total += p.memory_full_info().pss
                except psutil.Error:
                    pass
            peak[0] = max(peak[0], total / 2**20)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
    seconds = time.perf_counter() - t0
    done.set()
    th.join()
    out = {"rc": proc.returncode, "seconds": seconds, "stdout": stdout.decode(errors="replace"),
           "peak_pss_mb": round(peak[0], 1), "cgroup_peak_mb": None, "oom": False, "limited": bool(mem),
           "cpus": cpus if cpu else None}
    if mem:
        out["cgroup_peak_mb"] = round(int((mem / "memory.max_usage_in_bytes").read_text()) / 2**20, 1)
        ctl = dict(line.split()[:2] for line in (mem / "memory.oom_control").read_text().splitlines() if line.strip())
        out["oom"] = int(ctl.get("oom_kill", 0)) > 0
    for d in (mem, cpu):
        if d:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    return out
