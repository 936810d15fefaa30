"""Cohort grading cost: bare nbclient vs nbgrader, sequential vs parallel shards, and the
price of the sandbox and the outside-the-kernel verdict.

    PYTHONPATH=autograder .venv/bin/python benchmarks/bench_cohort.py [--students 8] [--workers 2]

On a synthetic cohort (``awb_grader.synth``: correct work, catalogued mistakes, broken files)
of one exercise it measures, side by side on the same machine:

1. a bare ``nbclient`` execution of one correct notebook (the floor: a kernel + the cells);
2. ``nbgrader autograde ASSIGNMENT`` (the real CLI, sequential, nbgrader's default kernel);
   then the same grading through nbgrader's Python API, once with warm kernels
   (``awb_grader.warm``: each kernel forked from a process that has PyTorch imported, as the
   catalog tests grade) and once with a new kernel per notebook;
3. the same grading in parallel shards (``awb_grader.parallel``, no sandbox, no verdict,
   no feedback): the speedup that parallelism alone buys, against 2.;
4. the full cohort command (``python -m awb_grader cohort``: zip_collect, repair, sandbox,
   outside verdict, feedback, export, summary) with 1 worker and with ``--workers``, with warm
   sandboxed kernels (the default) and, once, with a new sandboxed kernel per notebook ([4n]);

then prints per-notebook costs, ratios to the bare execution, the speedups, and the time
projected for 300 students x 9 exercises. Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "autograder"), str(REPO)]


def cpu() -> float:
    """CPU seconds used so far by this process and its finished children (kernels included)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def bare_nbclient(nb_path: Path, repeats: int) -> float:
    import nbformat
    from nbclient import NotebookClient

    times = []
    for _ in range(repeats):
        nb = nbformat.read(nb_path, as_version=4)
        t = time.perf_counter()
        NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(nb_path.parent)}}).execute()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--exercise", default="04_queries_keys_values")
    ap.add_argument("--sandbox", default="auto")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()

    from awb_grader import synth
    from awb_grader.course import Course, ensure_kernel_path
    from awb_grader.parallel import Task, grade_parallel
    from awb_grader.variants import student_notebook

    ensure_kernel_path()
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    A, N = a.exercise, a.students
    work = Path(tempfile.mkdtemp(prefix="awb-bench-"))
    print(f"bench_cohort: {N} students x {A}, {a.workers} workers; {load()}")

    base = Course(work / "base", release_dir=work / "base" / "release")
    base.generate_assignment(A)
    release_nb = base.release_root / A / f"{A}.ipynb"
    plan = synth.make_cohort(work / "cohort.zip", base.release_root, [A], N, seed=7)
    kinds = sorted(set(plan.values()))
    print(f"cohort: {', '.join(f'{k} x{list(plan.values()).count(k)}' for k in kinds)}")

    # 1. bare nbclient on one correct notebook
    import nbformat

    nbdir = work / "bare"
    nbdir.mkdir()
    nbformat.write(student_notebook(release_nb, A), nbdir / f"{A}.ipynb")
    t_bare = bare_nbclient(nbdir / f"{A}.ipynb", 3)
    print(f"[1] bare nbclient execution of one correct notebook: {t_bare:.2f} s (median of 3)  [{load()}]")

    # the collected submissions (zip_collect), shared by 2 and 3
    from awb_grader.cohort import DEFAULT_PATTERN, collect

    got = collect(work / "cohort.zip", work / "inbox", base, [A], DEFAULT_PATTERN)
    subs = got.subs.get(A, {})
    gradable = {s: p for s, (p, ts) in subs.items()}

    # 2. sequential nbgrader autograde (the CLI over the whole assignment)
    seq = Course(work / "seq", release_dir=work / "seq" / "release")
    seq.generate_assignment(A)
    for s, p in gradable.items():
        seq.submit(s, A, p)
    t, c = time.perf_counter(), cpu()
    proc = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "autograde", A, "--force"],
                          cwd=seq.root, capture_output=True, text=True)
    t_seq, c_seq = time.perf_counter() - t, cpu() - c
    print(f"[2] sequential `nbgrader autograde` of {len(gradable)} submissions: {t_seq:.1f} s "
          f"({t_seq / len(gradable):.2f} s/notebook, {t_seq / len(gradable) / t_bare:.2f}x bare; CPU {c_seq:.1f} s)  "
          f"rc={proc.returncode}  [{load()}]")

    # 2w. the same grading with warm kernels (awb_grader.warm: forked from a process that has
    # PyTorch imported), through nbgrader's API as the catalog tests grade; and once more with
    # new kernels through the same API, so the two differ only in how the kernel starts
    from awb_grader.warm import warm_kernels

    def api_sequential(name: str, warm: bool) -> tuple[float, float]:
        with warm_kernels() if warm else contextlib.nullcontext({}) as extra:
            course = Course(work / name, release_dir=work / name / "release", extra=dict(extra))
            course.generate_assignment(A)
            for s, p in gradable.items():
                course.submit(s, A, p)
            t0, c0 = time.perf_counter(), cpu()
            for s in gradable:
                course.autograde(A, s)
            return time.perf_counter() - t0, cpu() - c0

    for name, warm in (("api_warm", True), ("api_new", False)):
        t_api, c_api = api_sequential(name, warm)
        print(f"[2{'w' if warm else 'n'}] sequential autograde through nbgrader's API, "
              f"{'warm kernels (forked, PyTorch preloaded)' if warm else 'a new kernel per notebook'}: "
              f"{t_api:.1f} s ({t_api / len(gradable):.2f} s/notebook, {t_api / len(gradable) / t_bare:.2f}x bare; "
              f"CPU {c_api:.1f} s{', not counting the kernels: the zygote reaps them' if warm else ''})  [{load()}]")

    # 3. the same in parallel shards (no sandbox, no verdict, no feedback)
    par = Course(work / "par", release_dir=work / "par" / "release")
    par.generate_assignment(A)
    tasks = [Task(A, s, str(p)) for s, p in sorted(gradable.items())]
    t, c = time.perf_counter(), cpu()
    grade_parallel(par, tasks, workers=a.workers, feedback=False, verdict=False, progress=False)
    t_par, c_par = time.perf_counter() - t, cpu() - c
    print(f"[3] parallel shards, {a.workers} workers, same work as [2] (+ metadata check/repair): {t_par:.1f} s "
          f"-> speedup {t_seq / t_par:.2f}x over [2]; CPU {c_par:.1f} s  [{load()}]")
    print(f"    load-independent view: CPU seconds [3]/[2] = {c_par / c_seq:.2f}; on {a.workers} idle cores the "
          f"ideal wall time of [3] is CPU/{a.workers} = {c_par / a.workers:.1f} s -> expected speedup "
          f"{t_seq * (c_seq / max(t_seq, c_seq)) / (c_par / a.workers):.2f}x (if [2] ran at one full core)")

    # 4. the full cohort command, 1 worker and N workers
    from awb_grader.cohort import run_cohort

    full: dict = {}
    # interleaved (the load moves): warm sandboxed kernels (the default: forked from a zygote per
    # worker, each jailed), and once with a new sandboxed kernel and replay per notebook ([4n],
    # AWB_SANDBOX_WARM=0: what the grader did before, and does where warm ones are not possible)
    order = [(a.workers, True), (1, True), (a.workers, False), (a.workers, True)] if a.workers > 1 \
        else [(1, True), (1, False)]
    cpus: dict = {}
    for i, (w, warm) in enumerate(order):
        os.environ["AWB_SANDBOX_WARM"] = "1" if warm else "0"
        t, c = time.perf_counter(), cpu()
        res = run_cohort(work / "cohort.zip", work / f"cohort_{i}_w{w}", [A], workers=w, sandbox=a.sandbox,
                         progress=False, say=lambda *x: None)
        key = (w, warm)
        full.setdefault(key, []).append(time.perf_counter() - t)
        cpus.setdefault(key, []).append(cpu() - c)
        per = [r.seconds for r in res.records if r.status != "ungradable"]
        tag = "[4]" if warm else "[4n]"
        kernels = "warm kernels" if warm else "a new kernel per notebook"
        print(f"{tag} cohort command (collect, repair, sandbox={res.sandbox}, {kernels}, autograde, outside verdict, "
              f"feedback, export, summary), {w} worker(s): {full[key][-1]:.1f} s = {full[key][-1] / len(per):.2f} s "
              f"per notebook of wall time; per notebook in its worker, median {statistics.median(per):.2f} s "
              f"= {statistics.median(per) / t_bare:.2f}x bare; CPU {cpus[key][-1]:.1f} s outside the sandboxed "
              f"kernels, which nbgrader kills rather than reaps (not counted)  [{load()}]")
        steps = {k: statistics.median([r.phases[k] for r in res.records if k in r.phases])
                 for k in ("grade", "verdict", "feedback") if any(k in r.phases for r in res.records)}
        print("    per notebook, median: " + ", ".join(f"{k} {v:.2f} s" for k, v in steps.items())
              + " (grade = check/repair + nbgrader autograde in the sandbox)")
    os.environ.pop("AWB_SANDBOX_WARM", None)
    full = {k: statistics.mean(ts) for k, ts in full.items()}
    if (1, True) in full and (a.workers, True) in full and a.workers > 1:
        print(f"    cohort command speedup {a.workers} workers vs 1, warm kernels (mean of the runs): "
              f"{full[(1, True)] / full[(a.workers, True)]:.2f}x")
    if (a.workers, False) in full:
        print(f"    warm kernels vs a new kernel per notebook, {a.workers} worker(s): "
              f"{full[(a.workers, False)] / full[(a.workers, True)]:.2f}x faster")

    t_bare2 = bare_nbclient(nbdir / f"{A}.ipynb", 3)
    print(f"[1'] bare nbclient again at the end (the load moves; compare each figure with the bare run nearest "
          f"in time): {t_bare2:.2f} s  [{load()}]")

    # projection: 300 students x 9 exercises
    per_nb = full[(a.workers, True)] / max(1, len(gradable))
    total = 300 * 9 * per_nb
    print(f"projection for 300 students x 9 exercises with the full cohort command on this machine "
          f"({a.workers} workers, {per_nb:.2f} s per notebook of wall time): {total / 3600:.1f} h; "
          f"with 8 workers on 8 idle cores, scaling as measured here: ~{total * a.workers / 8 / 3600:.1f} h "
          f"(exercise 04 as the typical notebook)")
    print(f"done; {load()}")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")


if __name__ == "__main__":
    main()
