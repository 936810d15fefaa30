"""Cohort grading cost: bare nbclient vs nbgrader, sequential vs parallel shards, and the
price of the sandbox and the outside-the-kernel verdict.

    PYTHONPATH=autograder .venv/bin/python benchmarks/bench_cohort.py [--students 32] [--workers 2]

On a synthetic cohort (``awb_grader.devtools.synth``: correct work, catalogued mistakes, broken files)
of one exercise it measures, side by side on the same machine:

1. a bare ``nbclient`` execution of one correct notebook (the floor: a kernel + the cells);
2. ``nbgrader autograde ASSIGNMENT`` (the real CLI, sequential: the course's config makes it
   the protected door: each kernel and replay a confined child of the grading process's zygote);
   then the same through nbgrader's Python API (as the catalog tests grade), once with the zygote
   and once with a new sandboxed process per kernel and replay (``AWB_COLD=1``);
3. the same grading as 2. in parallel shards (``awb_grader.cohort.parallel``, no feedback): the
   speedup that parallelism alone buys, against 2.;
4. the full cohort command (``python -m awb_grader cohort``: zip_collect, repair, sandbox,
   outside verdict, feedback, export, summary), interleaved because the load moves: with
   ``--workers`` and with 1 worker, twice each; each run says where its time went (collect,
   start-up of the workers, grading, export and summary);
5. the cohort command on every exercise of the course (``--mix`` students each), for the
   projection: 300 students x 9 exercises, on this machine and on 8 cores;

then prints per-notebook costs, ratios to the bare execution, the speedups, and the time
projected for 300 students x 9 exercises. Every figure comes with the CPU and the load.
Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
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


def cpu() -> float:
    """CPU seconds used so far by this process and its finished children (kernels included)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def bare_nbclient(nb_path: Path, repeats: int) -> float:
    import nbformat
    from nbclient import NotebookClient

    times = []
    for _ in range(repeats):
        nb = nbformat.read(nb_path, as_version=4)
        t = time.perf_counter()
        NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(nb_path.parent)}}
        ).execute()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def notebooks_phase(res) -> tuple[float, float] | None:
    """When the first notebook began and the last one ended (None if the grader did not say:
    nothing graded, or a version of it without these times)."""
    tl = getattr(res, "timeline", None)
    if not getattr(res, "steps", None) or not tl:
        return None
    return min(t["began"] for t in tl), max(t["ended"] for t in tl)


def where_time_went(res) -> str:
    """Collect, start-up, grading, export: from the cohort command's own step times."""
    if notebooks_phase(res) is None:
        return "not recorded by this version of the grader"
    (first, last), st, tl = notebooks_phase(res), res.steps, res.timeline
    workers = {t["worker"] for t in tl if t["worker"] >= 0}
    busy = sum(t["ended"] - t["began"] for t in tl)
    return (f"collect {st['collected'] - st['start']:.1f} s; workers started, first notebook "
            f"{first - st['collected']:.1f} s later; notebooks {last - first:.1f} s "
            f"(workers busy {100 * busy / max(1e-9, (last - first) * len(workers)):.0f}%); "
            f"merge and worker exit {st['graded'] - last:.1f} s; export and summary {st['done'] - st['graded']:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--exercise", default="04_queries_keys_values")
    ap.add_argument("--mix", type=int, default=4, help="students per exercise in [5], every exercise (0: skip)")
    ap.add_argument("--unprotected", action="store_true", help="grade without bubblewrap (not protected)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--profile", type=int, default=1,
                    help="correct notebooks per exercise in the per-phase profile [0] (0: skip)")
    ap.add_argument("--profile-exercises", nargs="*", default=["00", "01", "02", "03", "04", "05", "06", "07", "08"])
    ap.add_argument("--profile-only", action="store_true", help="only the per-phase profile [0]")
    ap.add_argument("--launches", nargs="*", default=["zygote"], choices=("zygote", "cold"),
                    help="launch paths profiled in [0], alternating: zygote (now), cold (a new process per "
                         "kernel and replay, as before issue 42)")
    ap.add_argument("--profile-rounds", type=int, default=1, help="rounds of the alternation in [0]")
    a = ap.parse_args()

    from awb_grader.devtools import synth
    from awb_grader.core.course import EXERCISES, Course, assignments, ensure_kernel_path
    from awb_grader.cohort.parallel import Task, grade_parallel
    from awb_grader.devtools.variants import student_notebook

    ensure_kernel_path()
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    if a.unprotected:
        os.environ["AWB_UNPROTECTED"] = "1"      # every door refuses without bubblewrap otherwise
    A, N, W = a.exercise, a.students, a.workers
    work = Path(tempfile.mkdtemp(prefix="awb-bench-"))
    print(f"bench_cohort: {N} students x {A}, {W} workers")
    print(describe())

    # 0. where one notebook's time goes, phase by phase (benchmarks/phase_profile.py), in this
    # process as a worker grades, one notebook at a time: the seconds of each phase are the core
    # seconds it costs (one BLAS thread per grading process, nothing else of this run running)
    if a.profile > 0:
        import phase_profile

        names = [n for n in assignments() if n[:2] in set(a.profile_exercises)]
        print(f"[0] per-phase profile: {a.profile} correct notebook(s) of each of {len(names)} exercises, "
              f"graded one at a time by the worker's code, "
              f"median per notebook  [{load()}]")
        phase_profile.run(names, a.profile, launches=tuple(a.launches), rounds=a.profile_rounds)
        print(f"    [{load()}]")
        if a.profile_only:
            return

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
    from awb_grader.cohort.collect import DEFAULT_PATTERN, collect

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
          f"rc={proc.returncode}{' (the corrupt files)' if proc.returncode and 'corrupt' in kinds else ''}  [{load()}]")

    # 2w/2n. the same grading through nbgrader's API (as the catalog tests grade), once with each
    # kernel and replay forked from this process's zygote (isolation/zygote.py) and once with a new
    # process for each (AWB_COLD=1), so that the two differ only in how the kernel and replay start
    from awb_grader.isolation import zygote

    def api_sequential(name: str, warm: bool) -> tuple[float, float]:
        os.environ[zygote.COLD_ENV] = "0" if warm else "1"
        try:
            course = Course(work / name, release_dir=work / name / "release")
            course.generate_assignment(A)
            for s, p in gradable.items():
                course.submit(s, A, p)
            t0, c0 = time.perf_counter(), cpu()
            for s in gradable:
                course.autograde(A, s)
            return time.perf_counter() - t0, cpu() - c0
        finally:
            zygote.stop()
            os.environ.pop(zygote.COLD_ENV, None)

    for name, warm in (("api_warm", True), ("api_new", False)):
        t_api, c_api = api_sequential(name, warm)
        print(f"[2{'w' if warm else 'n'}] sequential autograde through nbgrader's API, "
              f"{'kernels and replays forked from a zygote' if warm else 'a new process per kernel and replay'}: "
              f"{t_api:.1f} s ({t_api / len(gradable):.2f} s/notebook, {t_api / len(gradable) / t_bare:.2f}x bare; "
              f"CPU {c_api:.1f} s)  [{load()}]")

    # 3. the same in parallel shards (sandbox and outside verdict as in [2], no feedback)
    par = Course(work / "par", release_dir=work / "par" / "release")
    par.generate_assignment(A)
    tasks = [Task(A, s, str(p)) for s, p in sorted(gradable.items())]
    t, c = time.perf_counter(), cpu()
    grade_parallel(par, tasks, workers=W, feedback=False, verdict=True, progress=False)
    t_par, c_par = time.perf_counter() - t, cpu() - c
    print(f"[3] parallel shards, {W} workers, same work as [2] (+ metadata check/repair): {t_par:.1f} s "
          f"-> speedup {t_seq / t_par:.2f}x over [2]; CPU {c_par:.1f} s  [{load()}]")
    print(f"    load-independent view: CPU seconds [3]/[2] = {c_par / c_seq:.2f}; on {W} idle cores the "
          f"ideal wall time of [3] is CPU/{W} = {c_par / W:.1f} s -> expected speedup "
          f"{t_seq * (c_seq / max(t_seq, c_seq)) / (c_par / W):.2f}x (if [2] ran at one full core)")

    # 4. the full cohort command, W workers and 1 worker, interleaved (the load moves): a new
    # sandboxed kernel and replay per notebook (forked from each worker's zygote), the outside verdict as nbgrader's own
    # autograde step (awb_grader.core.config)
    from awb_grader.cohort.run import run_cohort

    def cohort(zip_path: Path, dest: Path, names: list[str], w: int):
        t, c = time.perf_counter(), cpu()
        res = run_cohort(zip_path, dest, names, workers=w, unprotected=a.unprotected, progress=False,
                         say=lambda *x: None)
        return res, time.perf_counter() - t, cpu() - c

    full: dict = {}
    phase: dict = {}            # workers -> [(seconds of the notebooks phase, its workers' busy seconds)]
    graded_n = 0
    order = [W, 1, W, 1] if W > 1 else [1, 1]
    for i, w in enumerate(order):
        res, wall, cpu_s = cohort(work / "cohort.zip", work / f"cohort_{i}_w{w}", [A], w)
        full.setdefault(w, []).append(wall)
        span = notebooks_phase(res)
        if span is not None:
            busy = sum(t["ended"] - t["began"] for t in res.timeline)
            phase.setdefault(w, []).append((span[1] - span[0], busy))
        per = [r.seconds for r in res.records if r.status != "ungradable"]
        graded_n = len(per)
        print(f"[4] cohort command (collect, repair, sandbox={res.sandbox}, a new sandboxed kernel per notebook, "
              f"autograde, outside verdict, feedback, export, summary), {w} worker(s): {wall:.1f} s for "
              f"{len(per)} graded notebooks = "
              f"{wall / len(per):.2f} s per notebook of wall time = {wall / len(per) / t_bare:.2f}x bare; "
              f"in its worker a notebook took {statistics.median(per):.2f} s (median) = "
              f"{statistics.median(per) / t_bare:.2f}x bare; CPU {cpu_s:.1f} s outside the sandboxed kernels, "
              f"which nbgrader kills rather than reaps (not counted)  [{load()}]")
        steps = {k: statistics.median([r.phases[k] for r in res.records if k in r.phases])
                 for k in ("grade", "verdict", "feedback") if any(k in r.phases for r in res.records)}
        print("    per notebook, median: " + ", ".join(f"{k} {v:.2f} s" for k, v in steps.items())
              + " (grade = check/repair + nbgrader autograde in the sandbox)")
        print(f"    where the time went: {where_time_went(res)}")
    mean = {k: statistics.mean(ts) for k, ts in full.items()}
    if W > 1:
        print(f"    cohort command speedup, {W} workers vs 1 (mean of two runs each, "
              f"{', '.join(f'{x:.1f}' for x in full[1])} s vs {', '.join(f'{x:.1f}' for x in full[W])} s): "
              f"{mean[1] / mean[W]:.2f}x end to end for {graded_n} notebooks")
        if 1 in phase and W in phase:
            # the fixed part of a run (collect, workers' start-up, export, summary) and the part that
            # grows with the cohort, each measured above: what a cohort of 300 students would see.
            # The part that grows is each worker's busy time per notebook, shared by the workers: a
            # small cohort's notebooks phase also holds its last worker's wait for the others (9
            # notebooks on 2 workers: 5 and 4), which 300 students spread thin
            p1, pw = (statistics.mean(x[0] for x in phase[w]) for w in (1, W))
            c1, cw = (statistics.mean(x[1] for x in phase[w]) / graded_n / w for w in (1, W))
            f1, fw = mean[1] - p1, mean[W] - pw
            n300 = 300 * graded_n / N
            print(f"    the notebooks alone: {p1:.1f} s vs {pw:.1f} s -> {p1 / pw:.2f}x; the rest of a run (collect, "
                  f"workers' start-up, export, summary) {f1:.1f} s with 1 worker, {fw:.1f} s with {W}; with every "
                  f"worker busy a notebook costs {c1:.2f} s vs {cw:.2f} s of wall time, so for 300 students of this "
                  f"exercise that makes {(f1 + c1 * n300) / (fw + cw * n300):.2f}x")

    # 5. every exercise of the course: the mix the projection needs (08 trains a model, 00 is light)
    mix = None
    if a.mix > 0:
        names = assignments()
        synth.make_cohort(work / "mix.zip", EXERCISES, names, a.mix, seed=9)
        res, wall, _ = cohort(work / "mix.zip", work / "mix", names, W)
        graded = [r for r in res.records if r.status != "ungradable"]
        by = {n: [r.seconds for r in graded if r.assignment == n] for n in names}
        mix = wall / len(graded)
        print(f"[5] cohort command on all {len(names)} exercises, {a.mix} students each, {W} workers: {wall:.1f} s for "
              f"{len(graded)} graded notebooks = {mix:.2f} s per notebook of wall time  [{load()}]")
        print("    in its worker, median per exercise: " + ", ".join(
            f"{n[:2]} {statistics.median(v):.2f} s" for n, v in by.items() if v))
        print(f"    where the time went: {where_time_went(res)}")

    t_bare2 = bare_nbclient(nbdir / f"{A}.ipynb", 3)
    print(f"[1'] bare nbclient again at the end (the load moves; compare each figure with the bare run nearest "
          f"in time): {t_bare2:.2f} s  [{load()}]")

    # projection: 300 students x 9 exercises, from the measured wall time per notebook with W
    # workers on W cores (each worker's throughput as measured here, start-up included)
    per_nb = mix if mix else mean[W] / max(1, len(gradable))
    what = "the mix of all exercises, [5]" if mix else f"exercise {A[:2]} as the typical notebook, [4]"
    total = 300 * 9 * per_nb
    print(f"projection for 300 students x 9 exercises ({what}: {per_nb:.2f} s per notebook of wall time with {W} "
          f"workers): {total / 3600:.2f} h on this machine; with 8 workers on 8 idle cores, each as fast as here: "
          f"~{total * W / 8 / 3600:.2f} h")
    print(f"done; {load()}")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")


if __name__ == "__main__":
    main()
