#!/usr/bin/env python3
"""Autograde cost per notebook against a bare nbclient execution of the same notebook.

For each demo-cohort submission that runs normally (correct, partial, misconceptions), time
`nbgrader autograde` (one submission) and a plain nbclient execution of the notebook that
autograding produced (hidden tests included: the same code, minus nbgrader's bookkeeping),
interleaved, and print the ratio. A figure printer, not a test.

    python benchmarks/bench_autograde.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "autograder"), str(REPO)]

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

from awb_grader.devtools import demo  # noqa: E402
from awb_grader.core.course import Course  # noqa: E402

STUDENTS = ["ada", "ben", "chloe", "dev", "emma"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="awb-bench-"))
    course = Course(root, release_dir=root / "release", timeout=60)
    course.generate_assignment(demo.ASSIGNMENT)
    subs = demo.build_cohort(course.release_root / demo.ASSIGNMENT / f"{demo.ASSIGNMENT}.ipynb", root / "downloaded")
    grade_t, bare_t = [], []
    for rep in range(a.repeat):
        for s in STUDENTS:
            course.submit(s, demo.ASSIGNMENT, subs[s])
            t0 = time.perf_counter()
            res = course.autograde(demo.ASSIGNMENT, s)
            grade_t.append(time.perf_counter() - t0)
            assert res["success"], res
            graded = course.path("autograded", s, demo.ASSIGNMENT) / f"{demo.ASSIGNMENT}.ipynb"
            nb = nbformat.read(graded, as_version=4)
            t0 = time.perf_counter()
            NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True,
                           resources={"metadata": {"path": str(graded.parent)}}).execute()
            bare_t.append(time.perf_counter() - t0)
    g, b = statistics.median(grade_t), statistics.median(bare_t)
    load = os.getloadavg()[0]
    print(f"notebook: {demo.ASSIGNMENT}, {len(STUDENTS)} submissions x {a.repeat} repeats, interleaved")
    print(f"nbgrader autograde per notebook : median {g:.2f} s  (min {min(grade_t):.2f}, max {max(grade_t):.2f})")
    print(f"bare nbclient execution         : median {b:.2f} s  (min {min(bare_t):.2f}, max {max(bare_t):.2f})")
    print(f"ratio autograde / bare          : {g / b:.2f}x")
    print(f"load average during the run     : {load:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
