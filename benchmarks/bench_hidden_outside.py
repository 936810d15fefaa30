"""The cost per notebook of running the hidden checks only outside the student's process (issue 31).

    PYTHONPATH=autograder .venv/bin/python benchmarks/bench_hidden_outside.py [--exercises 04 05 09]
        [--rounds 2] [--before-rev REV] [--no-cohort]

Before, the kernel ran every test cell whole (visible and hidden checks), then the outside
verdict ran each earned cell's hidden check again through the replay; now the kernel runs the
visible checks only and the hidden checks run once, outside. Side by side, interleaved (the load
moves), for each exercise's reference solution:

1. the kernel's share: the solution notebook executed by nbclient in a new ``python3`` kernel
   (no sandbox: the same for both), test cells whole vs without their hidden blocks;
2. the outside run: ``devtools.variants.check_solution`` (the replay in the sandbox, every hidden check
   through the proxies), unchanged in what it runs;
3. end to end: ``python -m awb_grader cohort`` (sandbox on, 1 worker, no feedback) on one honest
   submission per exercise, each tree first in every other round, with the code before
   (``git archive REV``; default ``main``: once this change is merged, pass the commit before it)
   and this checkout.

Prints figures with the CPU and the load; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "autograder"), str(REPO), str(REPO / "benchmarks")]

from machine_info import describe, load  # noqa: E402

HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n.*?### END HIDDEN TESTS\n?", re.S)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def kernel_run(assignment: str, hidden: bool) -> float:
    """Seconds nbclient takes to run the solution notebook (markers removed; hidden blocks kept
    or taken out) in a new python3 kernel, start-up included."""
    import nbformat
    from nbclient import NotebookClient

    from awb_grader.core.course import SOLUTIONS, ensure_kernel_path

    ensure_kernel_path()
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            src = c.source if hidden else HIDDEN.sub("", c.source)
            c.source = re.sub(r"^[ \t]*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)[ \t]*\n?", "", src, flags=re.M)
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    t = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(SOLUTIONS / assignment)}}).execute()
    return time.perf_counter() - t


def outside_run(assignment: str) -> float:
    from awb_grader.devtools.variants import check_solution
    from awb_grader.isolation import sandbox

    os.environ["AWB_SANDBOX_MODE"] = "bwrap" if sandbox.bwrap_works() else "limits"
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        got = check_solution(assignment, Path(tmp) / assignment)
        secs = time.perf_counter() - t
    bad = {c: v for c, v in got.items() if v != "pass"}
    if bad:
        print(f"  ({assignment}: outside verdicts not all 'pass': {bad})")
    return secs


def cohort_run(tree: Path, inbox: Path, exercises: list[str], course: Path) -> tuple[float, float, list[str]]:
    """(wall seconds, CPU seconds of the command and its children, the rows of flags.csv) of one cohort run."""
    env = {**os.environ, "PYTHONPATH": f"{tree / 'autograder'}{os.pathsep}{tree}"}
    env.pop("AWB_SANDBOX_MODE", None)
    env.pop("AWB_PROVIDED", None)
    shutil.rmtree(course, ignore_errors=True)
    c0, t0 = children_cpu(), time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "awb_grader", "cohort", str(inbox), "--exercises", *exercises,
                          "--workers", "1", "--no-feedback", "--course", str(course)],
                         cwd=tree, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if res.returncode:
        raise SystemExit(f"cohort failed in {tree}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    flags = (course / "flags.csv").read_text().splitlines()[1:]
    return wall, cpu, flags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exercises", nargs="+", default=["04", "05", "09"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before-rev", default="main", help="the commit graded 'before' (hidden checks in the kernel)")
    ap.add_argument("--no-cohort", action="store_true", help="skip the end-to-end cohort runs")
    a = ap.parse_args()
    from awb_grader.core.course import resolve

    names = resolve(a.exercises)
    print(describe())
    print(f"exercises {', '.join(names)}; {a.rounds} round(s), interleaved\n")

    print("1-2. per notebook, the reference solution (seconds; median of the rounds)")
    rows = []
    for name in names:
        full, vis, out = [], [], []
        for _ in range(a.rounds):
            full.append(kernel_run(name, hidden=True))
            vis.append(kernel_run(name, hidden=False))
            out.append(outside_run(name))
        f, v, o = (statistics.median(x) for x in (full, vis, out))
        rows.append((name, f, v, o))
        print(f"  {name:<30} kernel, visible+hidden {f:6.1f}  kernel, visible only {v:6.1f}  "
              f"(the in-kernel hidden run: {f - v:5.1f})  outside run {o:6.1f}   before {f + o:6.1f}  "
              f"after {v + o:6.1f}   [{load()}]")
    if not a.no_cohort:
        print("\n3. end to end: the cohort command, sandbox on, 1 worker, one honest submission per exercise")
        import nbformat

        from awb_grader.core.course import EXERCISES
        from awb_grader.devtools.variants import student_notebook

        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            before = tmp / "before"
            before.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", a.before_rev], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
            rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", a.before_rev],
                                 capture_output=True, text=True).stdout.strip()
            head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()
            inbox = tmp / "inbox"
            inbox.mkdir()
            for name in names:
                nbformat.write(student_notebook(EXERCISES / name / f"{name}.ipynb", name),
                               inbox / f"honest_{name}.ipynb")
            got = {"before": [], "after": []}
            for r in range(a.rounds):
                order = (("before", before), ("after", REPO))
                for label, tree in order if r % 2 == 0 else order[::-1]:     # each goes first in turn
                    wall, cpu, flags = cohort_run(tree, inbox, a.exercises, tmp / f"course-{label}")
                    got[label].append((wall, cpu))
                    print(f"  round {r + 1} {label:<6} ({rev if label == 'before' else head}): {wall:6.1f} s wall, "
                          f"{cpu:6.1f} s CPU for {len(names)} notebooks; {json.dumps(flags)}  [{load()}]")
            for label in got:
                w = statistics.median(x[0] for x in got[label]) / len(names)
                c = statistics.median(x[1] for x in got[label]) / len(names)
                print(f"  {label:<6} per notebook: {w:6.1f} s wall, {c:6.1f} s CPU (median of {a.rounds})")
    print(f"\n{describe()}")


if __name__ == "__main__":
    main()
