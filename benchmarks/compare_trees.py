"""The cohort command of two checkouts, side by side: the same synthetic cohort graded by each,
alternately (the load moves), with the CPU and the load printed beside every figure.

    git worktree add /tmp/before <commit>
    PYTHONPATH=autograder .venv/bin/python benchmarks/compare_trees.py /tmp/before . \\
        [--students 16] [--exercises 04] [--workers 2] [--rounds 2]

Each run is the real command (``python -m awb_grader cohort LMS.zip --exercises ... --workers
...``) in a new course root, with the checkout's own ``autograder/`` and package first on
``PYTHONPATH``; the cohort (``awb_grader.devtools.synth``: correct work, alternatives, catalogued
mistakes, unanswered functions, broken files) is written once, from this checkout's release.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--students", type=int, default=16)
    ap.add_argument("--exercises", nargs="*", default=["04"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()

    from awb_grader.devtools import synth
    from awb_grader.core.course import EXERCISES, assignments

    names = [n for n in assignments() if n[:2] in {e[:2] for e in a.exercises}]
    work = Path(tempfile.mkdtemp(prefix="awb-trees-"))
    plan = synth.make_cohort(work / "lms.zip", EXERCISES, names, a.students, seed=7)
    print(f"compare_trees: {a.students} students x {', '.join(names)}, {a.workers} workers, {a.rounds} rounds")
    print(describe())
    print(f"cohort: {len(plan)} files")
    times: dict[str, list[float]] = {"before": [], "after": []}
    for r in range(a.rounds):
        for tag in (("before", "after") if r % 2 == 0 else ("after", "before")):
            tree = (a.before if tag == "before" else a.after).resolve()
            env = {**os.environ, "PYTHONPATH": f"{tree / 'autograder'}{os.pathsep}{tree}"}
            root = work / f"{tag}-{r}"
            t0 = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "awb_grader", "cohort", str(work / "lms.zip"), "--exercises",
                                  *a.exercises, "--workers", str(a.workers), "--course", str(root)],
                                 env=env, cwd=tree, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            graded = len(list((root / "autograded").glob("*/*")))
            times[tag].append(wall)
            print(f"[{tag}] {tree}: {wall:.1f} s for {graded} graded notebooks = {wall / max(graded, 1):.2f} s per "
                  f"notebook of wall time, rc={res.returncode}  [{load()}]")
    b, n = statistics.mean(times["before"]), statistics.mean(times["after"])
    print(f"mean before {b:.1f} s, after {n:.1f} s: after / before = {n / b:.2f}")
    print(f"done; {load()}")


if __name__ == "__main__":
    main()
