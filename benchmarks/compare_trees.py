"""The cohort command of two checkouts, side by side: the same synthetic cohort graded by each,
alternately (the load moves), with the CPU and the load printed beside every figure.

    git worktree add /tmp/before <commit>
    PYTHONPATH=autograder .venv/bin/python benchmarks/compare_trees.py /tmp/before . \\
        [--cohort synthetic|adversarial|shortcuts] [--students 16] [--exercises 04] [--workers 2] [--rounds 2]

Each run is the real command (``python -m awb_grader cohort LMS.zip --exercises ... --workers
...``) in a new course root, with the checkout's own ``autograder/`` and package first on
``PYTHONPATH``; the cohort is written once, from this checkout's release (``awb_grader.devtools.synth``):
``synthetic`` (correct work, alternatives, catalogued mistakes, unanswered functions, broken files),
``adversarial`` (``make adversarial``'s hostile and broken kinds with honest students, and its LMS
download's unsafe members) or ``shortcuts`` (``tests/test_shortcuts.py``'s: every delegation to the
workbook's reference, encoded tampering, every contract break, every correct alternative of 04-09).
Every run's scores, statuses and failed cells (``flags.csv``) are compared with the first run's.
Besides the wall time, each run's **core-seconds**: the CPU time of the command and of every
process it started (kernels, replays, sandboxes), read from ``RUSAGE_CHILDREN``: this process
is their child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so the sandboxed processes that
nbgrader kills rather than reaps are reaped here and counted. Less sensitive to the load of
other work on the machine than the wall time (not immune: shared cores run slower).
Beside it, the machine's CPU time over the run (``/proc/stat``): on a quiet machine it counts
what rusage cannot (processes reaped by bubblewrap's own init inside their PID namespace), so the
cold path's figure is that one.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import describe, load


def become_subreaper() -> bool:
    """Adopt (and so count) every orphaned descendant: Linux's PR_SET_CHILD_SUBREAPER."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def machine_cpu() -> float | None:
    """CPU seconds the whole machine has spent so far (user, nice, system, irq, softirq of
    /proc/stat): on a quiet machine, a run's difference counts every process it caused, however
    it ended and whoever reaped it (a sandbox's own init, a zygote), which RUSAGE_CHILDREN cannot."""
    try:
        with open("/proc/stat") as fh:
            f = fh.readline().split()
    except OSError:
        return None
    return sum(int(x) for x in (f[1], f[2], f[3], f[6], f[7])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """CPU seconds of every descendant reaped so far, after reaping the adopted ones that ended."""
    import resource

    deadline = time.monotonic() + 10
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:                       # an adopted process still ending: wait a little
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _outcomes(flags: Path) -> list[tuple]:
    """(student, assignment, score, status, failed cells) of every row of a run's flags.csv."""
    import csv

    if not flags.exists():
        return []
    with open(flags) as fh:
        return sorted((r["student"], r["assignment"], r["score"], r["status"], r["failed_cells"])
                      for r in csv.DictReader(fh))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--students", type=int, default=16)
    ap.add_argument("--exercises", nargs="*", default=["04"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cohort", choices=("synthetic", "adversarial", "shortcuts"), default="synthetic")
    a = ap.parse_args()

    from awb_grader.devtools import synth
    from awb_grader.core.course import EXERCISES, REPO, assignments

    work = Path(tempfile.mkdtemp(prefix="awb-trees-"))
    if a.cohort == "adversarial":
        release = EXERCISES / synth.ADV_ASSIGNMENT / f"{synth.ADV_ASSIGNMENT}.ipynb"
        plan = synth.adversarial_cohort(work / "in", release, REPO)
        plan.update(synth.adversarial_download(work / "in", work / "lms.zip", release))
        a.exercises = [synth.ADV_ASSIGNMENT[:2]]
    elif a.cohort == "shortcuts":
        import zipfile

        plan = synth.shortcut_cohort(work / "in")
        with zipfile.ZipFile(work / "lms.zip", "w") as z:
            for f in sorted((work / "in").iterdir()):
                z.write(f, f.name)
        a.exercises = synth.SHORTCUT_EXERCISES
    names = [n for n in assignments() if n[:2] in {e[:2] for e in a.exercises}]
    if a.cohort == "synthetic":
        plan = synth.make_cohort(work / "lms.zip", EXERCISES, names, a.students, seed=7)
    print(f"compare_trees: the {a.cohort} cohort x {', '.join(names)}, {a.workers} workers, {a.rounds} rounds")
    print(describe())
    print(f"cohort: {len(plan)} files")
    times: dict[str, list[float]] = {"before": [], "after": []}
    cores: dict[str, list[float]] = {"before": [], "after": []}
    machine: dict[str, list[float]] = {"before": [], "after": []}
    first = None
    counted = become_subreaper()
    print(f"core-seconds: {'every process the command started' if counted else 'NOT all counted (no subreaper)'}")
    for r in range(a.rounds):
        for tag in (("before", "after") if r % 2 == 0 else ("after", "before")):
            tree = (a.before if tag == "before" else a.after).resolve()
            env = {**os.environ, "PYTHONPATH": f"{tree / 'autograder'}{os.pathsep}{tree}"}
            root = work / f"{tag}-{r}"
            c0, m0, t0 = children_cpu(), machine_cpu(), time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "awb_grader", "cohort", str(work / "lms.zip"), "--exercises",
                                  *a.exercises, "--workers", str(a.workers), "--course", str(root)],
                                 env=env, cwd=tree, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            core = children_cpu() - c0
            m1 = machine_cpu()
            graded = len(list((root / "autograded").glob("*/*")))
            mach = None if m0 is None or m1 is None else (m1 - m0) / max(graded, 1)
            times[tag].append(wall)
            cores[tag].append(core / max(graded, 1))
            if mach is not None:
                machine[tag].append(mach)
            got = _outcomes(root / "flags.csv")
            first = first if first is not None else got
            print(f"[{tag}] scores, statuses and failed cells {'the same as' if got == first else 'DIFFER from'} "
                  f"the first run's ({len(got)} rows of flags.csv)")
            for row in sorted(set(got) ^ set(first)):
                print(f"    {'only here' if row in got else 'only in the first run'}: {row}")
            print(f"[{tag}] {tree}: {wall:.1f} s for {graded} graded notebooks = {wall / max(graded, 1):.2f} s per "
                  f"notebook of wall time, {core / max(graded, 1):.2f} core-seconds per notebook "
                  f"(its processes' rusage), {mach if mach is not None else float('nan'):.2f} "
                  f"(the machine's CPU time), rc={res.returncode}  [{load()}]")
    b, n = statistics.mean(times["before"]), statistics.mean(times["after"])
    print(f"mean before {b:.1f} s, after {n:.1f} s: after / before = {n / b:.2f}")
    cb, cn = statistics.mean(cores["before"]), statistics.mean(cores["after"])
    print(f"core-seconds per notebook: before {cb:.2f}, after {cn:.2f}: after / before = {cn / cb:.2f}; "
          f"300 x 9 on 8 cores (all busy): before {2700 * cb / 8 / 60:.1f} min, after {2700 * cn / 8 / 60:.1f} min")
    if machine["before"] and machine["after"]:
        mb, mn = statistics.mean(machine["before"]), statistics.mean(machine["after"])
        print(f"the machine's CPU seconds per notebook (everything running here, so on a quiet machine only): "
              f"before {mb:.2f}, after {mn:.2f}: after / before = {mn / mb:.2f}; 300 x 9 on 8 cores (all busy): "
              f"before {2700 * mb / 8 / 60:.1f} min, after {2700 * mn / 8 / 60:.1f} min")
    print(f"done; {load()}")


if __name__ == "__main__":
    main()
