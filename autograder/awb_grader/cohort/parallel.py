"""Grade many submissions in parallel without corrupting nbgrader's gradebook.

nbgrader grades one submission at a time and its sqlite gradebook does not take concurrent
writers. Here each worker process owns a **shard**: a course root of its own
(``<course>/shards/wK``) that starts from a copy of the main gradebook (the assignments and
their cells, as ``generate_assignment`` wrote them) and grades the submissions it is handed
with the usual pipeline (inspect/repair -> nbgrader autograde -> feedback). Each graded
submission is **merged** into the main course as soon as its worker hands it back, while the
workers grade the next ones: its per-student folders (``submitted/``, ``autograded/``,
``feedback/``, ``originals/``) are moved over, and every grade and comment the worker read from
its shard's gradebook is written into the main gradebook through nbgrader's ``Gradebook`` API
(only the main process writes there). The result is the same gradebook and the same
``grades.csv`` as a sequential run (``tests/test_parallel.py`` checks it cell by cell).

Work is handed out one submission at a time (slow notebooks do not pile up on one worker),
so a progress bar can follow the whole cohort. A worker with nothing left to grade ends at
once instead of tearing down the PyTorch it imported.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ..core.course import Course
from ..core.gradebook import submission_data
from ..core.records import FLAGGED, UNGRADABLE, Record
from .merge import merge_one
from .pipeline import grade_submissions


@dataclass
class Task:
    assignment: str
    student: str
    path: str
    timestamp: str | None = None
    sha: str = ""                   # of the file and timestamp (the cohort's "unchanged since" key)


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
    from ..isolation import sandbox

    extra = dict(spec.extra)
    # one BLAS/OpenMP thread per grading process (unless the caller set a number): the graded
    # cells compute on small tensors, where a second thread costs more than it gains, and
    # workers x threads would oversubscribe the cores
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    # this worker's own socket folder, runtime folder and sandbox uid
    extra.update(
        sandbox.worker_environment(k, shard / "runtime", Path(spec.sockets) / f"w{k}" if spec.sockets else None)
    )
    if not spec.verdict:
        extra["OutsideVerdict.recheck"] = False
    _W.update(k=k, spec=spec, course=Course(shard, release_dir=spec.release_dir, timeout=spec.timeout, extra=extra))
    if mp.parent_process() is not None:      # a pool's worker process (never the caller's)
        import atexit

        atexit.register(_end_now)            # registered last: runs first when the pool stops it
    # what the first autograde imports anyway (nbgrader, nbconvert, and PyTorch for the outside
    # verdict), here and not in a thread beside the first autograde: two threads importing at once
    # can get a module half made (importlib's deadlock avoidance), and encodings.search_function
    # then caches the miss for the process's life (seen once in the suite's full run: "LookupError:
    # unknown encoding: utf-16le" in a worker, whose run kept a student's old grade over the regrade)
    _preload()


def _end_now() -> None:
    """The worker's exit once the pool has no more work for it: the results are all sent, its
    shard is merged by the main process, and nothing of its state is worth tearing down one
    object at a time (a Python with PyTorch, nbgrader and nbconvert loaded takes about a second
    to finalize, which the main process would wait for)."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(0)


def _preload() -> None:
    """What this worker's first autograde imports anyway (nbgrader, nbconvert; PyTorch and the
    outside verdict's modules), once, before it grades."""
    import nbconvert.exporters.html  # noqa: F401
    import nbgrader.apps
    import nbgrader.preprocessors  # noqa: F401
    import torch  # noqa: F401

    from ..hidden import _adapter  # noqa: F401
    from ..verdict import outside as verdict  # noqa: F401


def _grade_one(task: Task) -> Record:
    import time

    t0, began = time.perf_counter(), time.time()
    course: Course = _W["course"]
    os.chdir(course.root)  # a previous task's folder may be gone; see _init_worker
    spec: CourseSpec = _W["spec"]
    row = grade_submissions(course, task.assignment, {task.student: Path(task.path)}, feedback=False,
                            progress=False, timestamps={task.student: task.timestamp})[0]
    phases = {"grade": time.perf_counter() - t0}
    if row.status != UNGRADABLE and spec.feedback:
        t1 = time.perf_counter()
        fb = course.generate_feedback(task.assignment, task.student)
        phases["feedback"] = time.perf_counter() - t1
        if not fb["success"]:
            row.reasons.append("feedback could not be generated")
    from nbgrader.api import Gradebook

    with Gradebook(course.db) as gb:    # an ungradable file is recorded too: a flagged 0 (core/gradebook.py)
        data = submission_data(gb, task.assignment, task.student)
    row.sha, row.seconds, row.phases = task.sha, time.perf_counter() - t0, phases   # row.errors: grade_submissions
    row.worker, row.gradebook, row.began, row.ended = _W["k"], data, began, time.time()
    return row


# -- main side -------------------------------------------------------------------------------
def grade_parallel(course: Course, tasks: list[Task], workers: int = 2, feedback: bool = True,
                   verdict: bool = True, progress: bool = True) -> list[Record]:
    """Grade ``tasks`` with ``workers`` processes, merge into ``course``; results in task order.
    The assignments must already be generated in ``course`` (its gradebook is copied)."""
    if not tasks:
        return []
    workers = max(1, min(workers, len(tasks)))
    from ..isolation import sandbox

    sockets = sandbox.short_socket_root()
    if os.geteuid() == 0:
        sandbox.run_uid_base(workers)      # the workers' sandbox uids: base + k, drawn for this run
    spec = CourseSpec(str(course.root), str(course.release_dir) if course.release_dir else None,
                      course.timeout, dict(course.extra), feedback, verdict, workers, str(sockets))
    ctx = mp.get_context("spawn")          # fresh interpreters: no inherited kernels, sockets or locks
    ids = ctx.Queue()                      # each worker takes its shard number from here
    for k in range(workers):
        ids.put(k)
    results: list[Record] = []
    # the longest notebooks first: fewer stragglers at the end
    order = sorted(tasks, key=lambda t: -_size(t.path))
    try:
        results = _run_pool(ctx, spec, ids, course, order, tasks, workers, progress)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    index = {(t.assignment, t.student): i for i, t in enumerate(tasks)}
    return sorted(results, key=lambda r: index[(r.assignment, r.student)])


def _run_pool(ctx, spec, ids, course, order, tasks, workers, progress) -> list[Record]:
    """Hand out the tasks; merge each result into ``course`` as it comes back."""
    from nbgrader.api import Gradebook

    results: list[Record] = []
    with Gradebook(course.db) as gb, \
            ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(spec, ids)) as pool:
        futures = {pool.submit(_grade_one, t): t for t in order}
        bar = tqdm(total=len(tasks), desc="grading", unit="nb", disable=not progress)
        for fut in as_completed(futures):
            t = futures[fut]
            try:
                r = fut.result()
            except Exception as e:  # noqa: BLE001 - a crashed worker becomes that student's flag
                r = Record(t.assignment, t.student, t.sha, status=FLAGGED,
                           reasons=[f"grading worker crashed: {type(e).__name__}: {str(e)[:150]}"])
            merge_one(course, r, gb)
            r.gradebook = None
            results.append(r)
            bar.update(1)
        bar.close()
    return results


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
