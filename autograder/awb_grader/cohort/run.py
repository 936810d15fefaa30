"""One command for a whole cohort: ``python -m awb_grader cohort SUBMISSIONS.zip``.

1. **collect** (``cohort/collect.py``): nbgrader's ``zip_collect`` (``ZipCollectApp``) with a file-name collector plugin
   (:class:`ExerciseCollector`, a ``FileNameCollectorPlugin`` whose regular expression is
   configurable with ``--pattern``) sorts an LMS download (one zip, every exercise, every
   student) into ``inbox/submitted/<student>/<exercise>/``. Files whose name names no exercise
   are reported, never dropped silently.
2. **skip what is already graded**: a submission whose bytes (and timestamp) are unchanged since
   the last run keeps its grade (``cohort_state.json``); new or changed ones (late
   submissions) are graded (``cohort/state.py``). ``--regrade`` grades everything again.
3. **grade** in parallel shards (``cohort/parallel.py``), each submission in the sandbox
   (``isolation/sandbox.py``): check/repair nbgrader metadata (``cohort/submissions.py``),
   ``nbgrader autograde``, the outside-the-kernel verdict (``verdict/outside.py``),
   ``nbgrader generate_feedback``.
4. **export** ``grades.csv`` (nbgrader's CSV export plugin) and ``flags.csv``, and write the
   **summary** (``cohort/summary.py``): score distribution per exercise (``summary/scores.png``),
   flagged submissions with their reasons, and the checks the cohort failed most with the
   misconception each one most likely means (from the misconception catalog).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.course import Course, resolve
from ..core.records import OK, REPAIRED, UNGRADABLE
from .collect import DEFAULT_PATTERN, collect
from .pipeline import write_flags
from .state import load_state, save_state, submission_sha
from .summary import summarize


# -- the cohort run ---------------------------------------------------------------------------
@dataclass
class CohortResult:
    root: Path
    records: list            # every Record (this run's and earlier ones)
    graded_now: list         # (assignment, student) graded in this run
    skipped: int
    unmatched: list
    sandbox: str
    seconds: float
    summary: str = ""
    # how the time went (for the benchmark): when the run started and each step ended
    # (time.time()), and per notebook graded now: its worker, when the worker took it and gave it back
    steps: dict = field(default_factory=dict)
    timeline: list = field(default_factory=list)
    unread: list = field(default_factory=list)      # (file or member, reason): not read from the download


def run_cohort(source: Path, root: Path, exercises: list[str] | None = None, *, workers: int | None = None,
               pattern: str = DEFAULT_PATTERN, timeout: int = 60, memory_mb: int | None = None,
               unprotected: bool = False, regrade: bool = False, feedback: bool = True, verdict: bool = True,
               shard: tuple[int, int] | None = None, progress: bool = True, say=print) -> CohortResult:
    """Grade ``source`` (an LMS zip or a folder) into the course root ``root``: every exercise, or
    ``exercises`` (``"04"`` or ``"04_queries_keys_values"``). ``workers``: parallel graders
    (default: the CPU cores, at most 8); ``timeout``: seconds per cell; ``memory_mb``: a kernel's
    memory limit (default ``sandbox.Limits.memory_mb``); ``regrade``: grade unchanged submissions again;
    ``verdict``: the outside-the-kernel re-check; ``shard=(i, n)``: grade only shard i of n of
    the collected submissions (:func:`shards.select`). Refuses (``isolation.sandbox.Refused``) where
    no isolation tier can run, unless ``unprotected``."""
    from ..isolation import sandbox as sb, tiers
    from . import parallel

    t0 = time.perf_counter()
    steps = {"start": time.time()}
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    memory_mb = memory_mb or sb.Limits.memory_mb
    mode = tiers.configure(unprotected, sb.Limits(memory_mb=memory_mb, cell_timeout=timeout), say=say)
    course = Course(root, release_dir=root / "release", timeout=timeout)
    names = resolve(exercises)
    from ..isolation.zygote import cold_reason

    cold = cold_reason(mode)
    start = (f"each kernel and replay a new process ({cold})" if cold else
             "each kernel and replay a confined child of its worker's zygote")
    say(f"sandbox: {mode}" + ({"bwrap": " (bubblewrap", "landlock": " (Landlock + seccomp"}[mode]
                              + f", {start}: no network, read-only system, "
                              f"only its own folder writable; memory {memory_mb} MB, {timeout} s per cell)"
                              if mode != "limits" else f" (UNPROTECTED: resource limits only; {start})"))

    say(f"1/4 collect: nbgrader zip_collect on {source} for {len(names)} exercise(s)")
    for a in names:
        if not (course.release_root / a / f"{a}.ipynb").exists() or not _in_gradebook(course, a):
            course.generate_assignment(a)
    got = collect(Path(source), root / "inbox", course, names, pattern)
    if shard:
        from .shards import select

        got.subs = select(got.subs, *shard)
    n_files = sum(len(v) for v in got.subs.values())
    say(f"    {n_files} submission(s) from {len({s for v in got.subs.values() for s in v})} student(s)"
        + (f"; {len(got.unmatched)} file(s) name no exercise" if got.unmatched else "")
        + (f"; {len(got.unread)} file(s) not read (flags.csv says why)" if got.unread else ""))

    state = load_state(root)
    tasks, skipped = _to_grade(got.subs, state, root, regrade)
    workers = workers or max(1, min(os.cpu_count() or 1, 8))
    steps["collected"] = time.time()
    say(f"2/4 grade: {len(tasks)} to grade, {skipped} unchanged since the last run (kept); {workers} worker(s)")
    results = parallel.grade_parallel(course, tasks, workers=workers, feedback=feedback, verdict=verdict,
                                      progress=progress)
    steps["graded"] = time.time()
    _keep(results, got.renamed, state, course)
    save_state(root, state)

    say("3/4 export: nbgrader's CSV export plugin -> grades.csv; flags.csv")
    course.export_csv(root / "grades.csv")
    records = [rec for a in sorted(state) for rec in (state[a][s] for s in sorted(state[a]))]
    write_flags(records, root / "flags.csv", got.unmatched, got.unread)
    say("4/4 summary")
    res = CohortResult(root, records, [(r.assignment, r.student) for r in results], skipped,
                       got.unmatched, mode, time.perf_counter() - t0, steps=steps,
                       timeline=[{"assignment": r.assignment, "student": r.student, "worker": r.worker,
                                  "began": r.began, "ended": r.ended} for r in results], unread=got.unread)
    res.summary = summarize(res)
    (root / "summary").mkdir(exist_ok=True)
    from . import report      # the page, the alike answers and the LMS imports (cohort/report.py)

    res.summary += "\n" + "\n".join(report.write_all(root, course, records, got.sources))
    (root / "summary" / "summary.txt").write_text(res.summary)
    say(res.summary)
    steps["done"] = time.time()
    return res


def _to_grade(subs: dict, state: dict, root: Path, regrade: bool) -> tuple[list, int]:
    """(the grading tasks, how many kept): a submission whose bytes and timestamp are unchanged
    since the last run keeps its grade (unless ``regrade``), if that grade is still there."""
    from .parallel import Task

    tasks, skipped = [], 0
    for a, per in sorted(subs.items()):
        for student, (path, ts) in sorted(per.items()):
            sha = submission_sha(path, ts)
            old = state.get(a, {}).get(student)
            done = old is not None and old.sha == sha and (
                old.status == UNGRADABLE or (root / "autograded" / student / a).exists())
            if done and not regrade:
                skipped += 1
                continue
            tasks.append(Task(a, student, str(path), ts, sha))
    return tasks, skipped


def _keep(results: list, renamed: dict, state: dict, course: Course) -> None:
    """This run's records into ``state``: a file graded under the release's name says so (and is
    a repair), and every record gets its exercise's maximum (an ungradable one has none recorded)."""
    for r in results:
        note = renamed.get((r.student, r.assignment))
        if note:      # an upload that is not a notebook is not "graded as" one (uploads.py)
            r.reasons.insert(0, note if "uploaded " in note else f"{note}: graded as {r.assignment}.ipynb")
            if r.status == OK:
                r.status = REPAIRED
        r.seconds, r.phases = round(r.seconds, 2), {k: round(v, 2) for k, v in r.phases.items()}
        state.setdefault(r.assignment, {})[r.student] = r
    for a, per in state.items():
        mx = sum(course.max_scores(a).values()) if _in_gradebook(course, a) else 0
        for rec in per.values():
            rec.max_score = mx


def build_course(root: Path, exercises: list[str], empty: Path, timeout: int = 60, say=print) -> CohortResult:
    """The cohort command over the empty folder ``empty``: builds the course (nbgrader
    generate_assignment) where needed and exports grades.csv, flags.csv and the summary from the
    gradebook and state. It grades nothing, so it runs without a sandbox where no isolation tier
    can run (and only then does its summary say so)."""
    from ..isolation.tiers import protected

    Path(empty).mkdir(parents=True, exist_ok=True)
    return run_cohort(empty, root, exercises, workers=1, timeout=timeout, feedback=False, progress=False,
                      say=say, unprotected=not protected())


def _in_gradebook(course: Course, assignment: str) -> bool:
    if not (course.root / "gradebook.db").exists() and not course.db_url:
        return False
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course.db) as gb:
        try:
            return bool(gb.find_assignment(assignment).notebooks)
        except MissingEntry:
            return False
