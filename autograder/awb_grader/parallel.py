"""Grade many submissions in parallel without corrupting nbgrader's gradebook.

nbgrader grades one submission at a time and its sqlite gradebook does not take concurrent
writers. Here each worker process owns a **shard**: a course root of its own
(``<course>/shards/wK``) that starts from a copy of the main gradebook (the assignments and
their cells, as ``generate_assignment`` wrote them) and grades the submissions it is handed
with the usual pipeline (inspect/repair -> nbgrader autograde -> feedback). Afterwards the
shards are **merged** into the main course: the per-student folders (``submitted/``,
``autograded/``, ``feedback/``, ``originals/``) are moved over and every grade and comment is
copied into the main gradebook through nbgrader's ``Gradebook`` API. The result is the same
gradebook and the same ``grades.csv`` as a sequential run (``tests/test_parallel.py`` checks
it cell by cell).

Work is handed out one submission at a time (slow notebooks do not pile up on one worker),
so a progress bar can follow the whole cohort.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from .course import Course, nbgrader_quirks_silenced
from .pipeline import Row, grade_submissions


@dataclass
class Task:
    assignment: str
    student: str
    path: str
    timestamp: str | None = None


@dataclass
class Result:
    task: Task
    row: Row
    shard: int
    errors: dict = field(default_factory=dict)     # failing grade_id -> error text (for the insight)
    seconds: float = 0.0
    phases: dict = field(default_factory=dict)     # seconds per step: grade (inspect+autograde), verdict, feedback


@dataclass
class CourseSpec:
    """What a worker needs to rebuild the main course's settings in its own shard."""
    root: str
    release_dir: str | None
    timeout: int | None
    extra: dict
    feedback: bool = True
    verdict: bool = True
    workers: int = 1
    sockets: str | None = None      # short folder for the kernels' Unix sockets (sandbox.SUN_PATH_MAX)


# -- worker side -----------------------------------------------------------------------------
_W: dict = {}


def _init_worker(spec: CourseSpec, ids) -> None:
    k = ids.get()
    shard = Path(spec.root) / "shards" / f"w{k}"
    if shard.exists():
        shutil.rmtree(shard)
    shard.mkdir(parents=True)
    # never depend on the caller's working directory: it may have been removed (nbgrader calls
    # os.getcwd() and kernels inherit the cwd), so each worker lives in its own shard
    os.chdir(shard)
    shutil.copyfile(Path(spec.root) / "gradebook.db", shard / "gradebook.db")
    from . import sandbox

    extra = dict(spec.extra)
    # one BLAS/OpenMP pool per core, not per worker x core: the kernels share the machine
    threads = str(max(1, (os.cpu_count() or 1) // spec.workers))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, threads)
    ipc = sandbox.worker_environment(k, shard / "runtime", Path(spec.sockets) / f"w{k}" if spec.sockets else None)
    if extra.get("KernelManager.transport") == "ipc":
        extra.update(ipc)
    _W.update(k=k, spec=spec, course=Course(shard, release_dir=spec.release_dir, timeout=spec.timeout, extra=extra))
    if spec.sockets and sandbox.warm_possible():
        # warm sandboxed kernels: forked from a zygote in this worker's sandbox (warm.py); if it
        # cannot start, every kernel is started new, as before
        try:
            _W["zygote"] = sandbox.start_zygote(shard / "autograded", Path(spec.sockets) / f"w{k}",
                                                meanwhile=_preload)
        except Exception as e:  # noqa: BLE001
            import sys

            print(f"awb: worker {k}: no warm kernels ({type(e).__name__}: {e}); starting a new kernel per notebook",
                  file=sys.stderr)


def _preload() -> None:
    """What this worker imports for its first notebook anyway (the outside verdict compares
    with PyTorch; the feedback is nbconvert's HTML): while its zygote starts, not after."""
    import nbgrader.apps  # noqa: F401
    import torch  # noqa: F401

    from . import verdict  # noqa: F401
    from .hidden import _adapter  # noqa: F401


def _grade_one(task: Task) -> Result:
    import time

    t0 = time.perf_counter()
    course: Course = _W["course"]
    os.chdir(course.root)  # a previous task's folder may be gone; see _init_worker
    spec: CourseSpec = _W["spec"]
    row = grade_submissions(course, task.assignment, {task.student: Path(task.path)}, feedback=False,
                            progress=False, timestamps={task.student: task.timestamp})[0]
    phases = {"grade": time.perf_counter() - t0}
    errors = {}
    if row.status != "ungradable":
        if spec.verdict:
            from . import verdict

            t1 = time.perf_counter()
            verdict.apply(course, task.assignment, task.student, row)
            phases["verdict"] = time.perf_counter() - t1
        if spec.feedback:
            t1 = time.perf_counter()
            fb = course.generate_feedback(task.assignment, task.student)
            phases["feedback"] = time.perf_counter() - t1
            if not fb["success"]:
                row.reasons.append("feedback could not be generated")
        errors = failing_errors(course, task.assignment, task.student, row.failed_cells)
        for reason in sandbox_events(course, task.assignment, task.student):
            row.reasons.append(reason)
            if row.status in ("ok", "repaired"):
                row.status = "flagged"
    return Result(task, row, _W["k"], errors, time.perf_counter() - t0, phases)


_EVENTS = [
    ("network", ("Network is unreachable", "Temporary failure in name resolution", "Name or service not known",
                 "No address associated", "gaierror"),
     "tried to reach the network (blocked by the sandbox)"),
    ("files", ("Permission denied", "Read-only file system", "unable to open database file",
               "No such file or directory: '/", "No such file or directory: '.."),
     "tried to read or write files outside its folder (blocked by the sandbox)"),
    ("memory", ("MemoryError", "Cannot allocate memory", "DefaultCPUAllocator: can't allocate"),
     "ran out of memory (the kernel's memory limit)"),
    ("processes", ("Resource temporarily unavailable", "BlockingIOError", "can't start new thread"),
     "started too many processes (the sandbox's process limit)"),
    ("kernel", ("DeadKernelError", "Kernel died", "kernel died"),
     "the kernel died (killed by a limit)"),
    ("output", ("output truncated by the grader", "output removed by the grader"),
     "huge output truncated"),
]


def sandbox_events(course: Course, assignment: str, student: str) -> list[str]:
    """Reasons for the flags table read from the autograded notebook's outputs: what the
    sandbox and the limits stopped (network, files outside the folder, memory, processes)."""
    import nbformat

    p = course.path("autograded", student, assignment) / f"{assignment}.ipynb"
    if not p.exists():
        return []
    found, seen = [], set()
    for cell in nbformat.read(p, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        text = []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                text += [o.get("ename", ""), o.get("evalue", "")]
            elif o.get("output_type") == "stream":
                text.append(o.get("text", "")[-400:])
        blob = " ".join(text)
        for key, needles, reason in _EVENTS:
            if any(n in blob for n in needles) and key not in seen:
                seen.add(key)
                where = cell.metadata.get("nbgrader", {}).get("grade_id")
                found.append(reason + (f" in {where}" if where else ""))
    return found


def failing_errors(course: Course, assignment: str, student: str, cells: list[str]) -> dict[str, str]:
    import nbformat

    from .variants import error_text

    p = course.path("autograded", student, assignment) / f"{assignment}.ipynb"
    if not p.exists() or not cells:
        return {}
    nb = nbformat.read(p, as_version=4)
    return {c: error_text(nb, c)[:600] for c in cells}


# -- main side -------------------------------------------------------------------------------
def grade_parallel(course: Course, tasks: list[Task], workers: int = 2, feedback: bool = True,
                   verdict: bool = True, progress: bool = True) -> list[Result]:
    """Grade ``tasks`` with ``workers`` processes, merge into ``course``; results in task order.
    The assignments must already be generated in ``course`` (its gradebook is copied)."""
    if not tasks:
        return []
    workers = max(1, min(workers, len(tasks)))
    from . import sandbox

    sockets = sandbox.short_socket_root()
    spec = CourseSpec(str(course.root), str(course.release_dir) if course.release_dir else None,
                      course.timeout, dict(course.extra), feedback, verdict, workers, str(sockets))
    ctx = mp.get_context("spawn")          # fresh interpreters: no inherited kernels, sockets or locks
    ids = ctx.Manager().Queue()
    for k in range(workers):
        ids.put(k)
    results: list[Result] = []
    # the longest notebooks first: fewer stragglers at the end
    order = sorted(tasks, key=lambda t: -_size(t.path))
    try:
        results = _run_pool(ctx, spec, ids, order, tasks, workers, progress)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    merge(course, results)
    index = {(t.assignment, t.student): i for i, t in enumerate(tasks)}
    return sorted(results, key=lambda r: index[(r.task.assignment, r.task.student)])


def _run_pool(ctx, spec, ids, order, tasks, workers, progress) -> list[Result]:
    results: list[Result] = []
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(spec, ids)) as pool:
        futures = {pool.submit(_grade_one, t): t for t in order}
        bar = tqdm(total=len(tasks), desc="grading", unit="nb", disable=not progress)
        for fut in as_completed(futures):
            t = futures[fut]
            try:
                results.append(fut.result())
            except Exception as e:  # noqa: BLE001 - a crashed worker becomes that student's flag
                row = Row(t.student, t.assignment, status="flagged",
                          reasons=[f"grading worker crashed: {type(e).__name__}: {str(e)[:150]}"])
                results.append(Result(t, row, -1))
            bar.update(1)
        bar.close()
    return results


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


STEPS = ("submitted", "autograded", "feedback", "originals")


def merge(course: Course, results: list[Result]) -> None:
    """Move each shard's per-student folders into the main course and copy its grades into the
    main gradebook (nbgrader's Gradebook API)."""
    from nbgrader.api import Gradebook

    by_shard: dict[int, list[Result]] = {}
    for r in results:
        by_shard.setdefault(r.shard, []).append(r)
    for k, rs in sorted(by_shard.items()):
        shard = course.root / "shards" / f"w{k}"
        for r in rs:
            a, s = r.task.assignment, r.task.student
            for step in STEPS:
                dest = course.root / step / s / a
                src = shard / step / s / a
                if dest.exists():
                    shutil.rmtree(dest)
                if k >= 0 and src.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(src), str(dest))
        # what nbgrader recorded for each graded submission (ungradable ones never reached it)
        graded = [(r.task.assignment, r.task.student) for r in rs if k >= 0 and r.row.status != "ungradable"]
        if graded:
            with Gradebook(f"sqlite:///{shard / 'gradebook.db'}") as src, Gradebook(course.db) as dst:
                copy_submissions(src, dst, graded)


def copy_submissions(src, dst, pairs) -> None:
    """Copy submissions (with every grade and comment) from one gradebook into another."""
    from nbgrader.api import MissingEntry

    for assignment, student in pairs:
        try:
            s_sub = src.find_submission(assignment, student)
        except MissingEntry:
            continue
        st = s_sub.student
        dst.update_or_create_student(student, first_name=st.first_name, last_name=st.last_name,
                                     email=st.email, lms_user_id=st.lms_user_id)
        try:
            d_sub = dst.find_submission(assignment, student)
            d_sub.timestamp = s_sub.timestamp
        except MissingEntry:
            with nbgrader_quirks_silenced():
                d_sub = dst.add_submission(assignment, student, timestamp=s_sub.timestamp)
        d_sub.extension = s_sub.extension
        for s_nb in s_sub.notebooks:
            d_nb = dst.find_submission_notebook(s_nb.name, assignment, student)
            d_nb.flagged = s_nb.flagged
            d_nb.late_submission_penalty = s_nb.late_submission_penalty
            for g in s_nb.grades:
                dg = dst.find_grade(g.name, s_nb.name, assignment, student)
                dg.auto_score, dg.manual_score = g.auto_score, g.manual_score
                dg.extra_credit, dg.needs_manual_grade = g.extra_credit, g.needs_manual_grade
            for c in s_nb.comments:
                dc = dst.find_comment(c.name, s_nb.name, assignment, student)
                dc.auto_comment, dc.manual_comment = c.auto_comment, c.manual_comment
        dst.db.commit()


def gradebook_dump(db_url: str) -> list[tuple]:
    """Every grade and comment of every submission, sorted: to compare two gradebooks."""
    from nbgrader.api import Gradebook

    out = []
    with Gradebook(db_url) as gb:
        for a in gb.assignments:
            for sub in gb.assignment_submissions(a.name):
                out.append((a.name, sub.student.id, "timestamp", str(sub.timestamp)))
                for nb in sub.notebooks:
                    out.append((a.name, sub.student.id, nb.name, "flagged", nb.flagged))
                    for g in nb.grades:
                        out.append((a.name, sub.student.id, g.name, g.auto_score, g.manual_score,
                                    g.extra_credit, g.needs_manual_grade))
                    for c in nb.comments:
                        out.append((a.name, sub.student.id, c.name, c.auto_comment, c.manual_comment))
    return sorted(out, key=repr)
