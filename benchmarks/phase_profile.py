"""Where one notebook's grading time goes, phase by phase, from real timestamps.

    PYTHONPATH=autograder .venv/bin/python benchmarks/bench_cohort.py --profile-only [--profile 1]

Grades correct notebooks (the reference solution in the released notebook) through the grading
worker's own code (``cohort.parallel``: ``_init_worker``, ``_grade_one``, then ``merge_one``
into the main course) in this process, one at a time, and reads the clock at every boundary
the code already has:

* nbgrader's preprocessor lists (both of ``Autograde``'s passes) with a :class:`Stamp` between
  every two steps: a callable nbconvert's ``Exporter.register_preprocessor`` takes as it is,
  so the grading steps themselves are the configured ones, unchanged;
* the kernel's own message times, which nbclient records per cell (``cell.metadata.execution``:
  ``iopub.status.busy`` when the kernel starts a cell, ``shell.execute_reply`` when it is done),
  read by the stamp after ``SandboxExecute`` (``ClearMetadataPreprocessor`` drops them next);
* the outside verdict's replay: when its process is started and when it says it is ready (the
  student's cells run), by wrapping ``verdict.outside.Replay.__init__`` in this process;
* ``Course.autograde`` (nbgrader's ``NbGraderAPI.autograde``: the app, the gradebook, the copies),
  ``_grade_one``'s own phase times (grade, feedback), the worker's gradebook read and the merge.

The sandbox's own start (bubblewrap, prlimit, setpriv, ``env -i``) is measured apart: the same
command around ``python -c pass`` against ``python -c pass`` alone, median of 5.

Prints figures only; asserts nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOG: list[tuple[str, float]] = []        # (label, time.time()) of the notebook being graded


class Stamp:
    """A step of nbgrader's preprocessor list that only notes the time it is passed."""

    def __init__(self, label: str):
        self.label = label

    def __call__(self, nb, resources):
        LOG.append((self.label, time.time()))
        if self.label == "SandboxExecute":
            cells = [c for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get("execution")]
            first_torch = next((i for i, c in enumerate(cells) if "import torch" in c.source), 0)
            for i, c in enumerate(cells):
                ex = c.metadata.execution
                if "iopub.status.busy" in ex and "shell.execute_reply" in ex:
                    LOG.append((f"cell{i}.busy", _ts(ex["iopub.status.busy"])))
                    LOG.append((f"cell{i}.done", _ts(ex["shell.execute_reply"])))
                    if i == first_torch:
                        LOG.append(("torch.busy", _ts(ex["iopub.status.busy"])))
                        LOG.append(("torch.done", _ts(ex["shell.execute_reply"])))
        return nb, resources


def _ts(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def stamped_lists() -> dict:
    """nbgrader settings: Autograde's two preprocessor lists (the configured ones) with stamps."""
    from nbgrader.converters.autograde import Autograde

    from awb_grader.core.config import PREPROCESSORS

    sanitize = Autograde.class_traits()["sanitize_preprocessors"].default()
    auto = [Stamp("autograde pass")]
    for p in PREPROCESSORS:
        auto += [p, Stamp(p.rsplit(".", 1)[-1])]
    return {"Autograde.sanitize_preprocessors": [Stamp("sanitize pass"), *sanitize, Stamp("sanitized")],
            "Autograde.autograde_preprocessors": auto}


def _wrap(owner, name: str, before: str, after: str) -> None:
    """Note the time around ``owner.name`` (our own code, in this process only)."""
    orig = getattr(owner, name)

    def timed(*args, **kwargs):
        LOG.append((before, time.time()))
        try:
            return orig(*args, **kwargs)
        finally:
            LOG.append((after, time.time()))

    setattr(owner, name, timed)


def sandbox_start(cwd: Path, repeats: int = 5) -> tuple[float, float]:
    """(median seconds of `python -c pass` inside the sandbox, the same outside it)."""
    from awb_grader.isolation import sandbox

    def run(cmd):
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    prog = [sys.executable, "-c", "pass"]
    return run(sandbox.sandbox_command(prog, str(cwd))), run(prog)


PHASES = [
    # (name, from label, to label): each a span between two timestamps of one notebook
    ("submit + check/repair (ours)", "grade_one", "autograde"),
    ("nbgrader: app, gradebook, copies", "autograde", "sanitize pass"),
    ("nbgrader: sanitize pass", "sanitize pass", "sanitized"),
    ("nbgrader: between the passes", "sanitized", "autograde pass"),
    ("SandboxGuard", "autograde pass", "SandboxGuard"),
    ("kernel start (sandbox, Python, ipykernel)", "SandboxGuard", "cell0.busy"),
    ("cells before `import torch`", "cell0.busy", "torch.busy"),
    ("the cell that imports torch, the checks", "torch.busy", "torch.done"),
    ("the other cells (the student's work, checks)", "torch.done", "last.done"),
    ("kernel stop", "last.done", "SandboxExecute"),
    ("IgnorePattern..LimitOutputBytes", "SandboxExecute", "LimitOutputBytes"),
    ("verdict: static reading", "LimitOutputBytes", "replay start"),
    ("verdict: replay start (sandbox, torch, cells)", "replay start", "replay ready"),
    ("verdict: hidden checks through the replay", "replay ready", "OutsideVerdict"),
    ("SaveAutoGrades (gradebook write)", "OutsideVerdict", "SaveAutoGrades"),
    ("AssignLatePenalties, CheckCellMetadata", "SaveAutoGrades", "CheckCellMetadata"),
    ("FlagSubmission (gradebook write)", "CheckCellMetadata", "FlagSubmission"),
    ("nbgrader: write the notebook, finish", "FlagSubmission", "autograde end"),
    ("scores, diagnosis read back (ours)", "autograde end", "grade end"),
    ("feedback (nbgrader generate_feedback)", "grade end", "feedback end"),
    ("worker's gradebook read", "feedback end", "grade_one end"),
    ("merge into the main gradebook", "grade_one end", "merged"),
]


def spans(log: list[tuple[str, float]]) -> dict[str, float]:
    """{phase: seconds} of one notebook's log (a phase whose ends are missing is left out:
    e.g. no replay when nothing earned points)."""
    at: dict[str, float] = {}
    for label, t in log:
        at.setdefault(label, t)       # the first time each boundary is passed
    done = [t for label, t in log if label.endswith(".done")]
    if done:
        at["last.done"] = max(done)
    if "replay start" not in at and "LimitOutputBytes" in at:
        at["replay start"] = at["replay ready"] = at["LimitOutputBytes"]
    out = {}
    for name, a, b in PHASES:
        if a in at and b in at:
            out[name] = at[b] - at[a]
    out["total"] = at.get("merged", 0) - at.get("grade_one", 0)
    return out


def profile(work: Path, names: list[str], per_exercise: int = 1, say=print) -> dict[str, list[dict]]:
    """Grade ``per_exercise`` correct notebooks of each exercise as a worker does; {exercise: [spans]}."""
    import multiprocessing as mp

    import nbformat
    from nbgrader.api import Gradebook

    from awb_grader.cohort import parallel
    from awb_grader.cohort.merge import merge_one
    from awb_grader.core.course import Course
    from awb_grader.devtools.variants import student_notebook
    from awb_grader.isolation import sandbox
    from awb_grader.verdict import outside

    sandbox.configure(say=lambda *x: None)
    main = Course(work / "main", release_dir=work / "main" / "release")
    for a in names:
        main.generate_assignment(a)
    inbox = work / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    tasks = []
    for a in names:
        nb = student_notebook(main.release_root / a / f"{a}.ipynb", a)
        for k in range(per_exercise):
            p = inbox / f"s{k}_{a}.ipynb"
            nbformat.write(nb, p)
            tasks.append(parallel.Task(a, f"s{k}", str(p)))
    sockets = sandbox.short_socket_root()
    spec = parallel.CourseSpec(str(main.root), str(main.release_dir), None, stamped_lists(), True, True, 1,
                               str(sockets))
    ids = mp.get_context("spawn").Queue()
    ids.put(0)
    here = os.getcwd()
    _wrap(outside.Replay, "__init__", "replay start", "replay ready")
    _wrap(Course, "autograde", "autograde", "autograde end")
    parallel._init_worker(spec, ids)
    parallel._preload()                       # as a worker has by its second notebook
    out: dict[str, list[dict]] = {}
    try:
        with Gradebook(main.db) as gb:
            for t in tasks:
                LOG.clear()
                LOG.append(("grade_one", time.time()))
                r = parallel._grade_one(t)
                LOG.append(("grade_one end", time.time()))
                LOG.append(("grade end", r.began + r.phases["grade"]))
                LOG.append(("feedback end", r.began + r.phases["grade"] + r.phases.get("feedback", 0)))
                merge_one(main, r, gb)
                LOG.append(("merged", time.time()))
                s = spans(LOG)
                s["_score"] = r.score
                s["_status"] = r.status
                out.setdefault(t.assignment, []).append(s)
                say(f"    {t.assignment} {t.student}: {s['total']:.2f} s, score {r.score}/{r.max_score}, {r.status}")
    finally:
        os.chdir(here)
    return out


def table(prof: dict[str, list[dict]]) -> str:
    """Phases x exercises (median seconds per notebook) and the mean over the exercises."""
    names = list(prof)
    rows = [name for name, _, _ in PHASES] + ["total"]
    med = {a: {r: statistics.median([s.get(r, 0.0) for s in prof[a]]) for r in rows} for a in names}
    head = f"{'phase':46s} " + " ".join(f"{a[:2]:>5s}" for a in names) + "   mean  share"
    lines = [head, "-" * len(head)]
    tot = statistics.mean(med[a]["total"] for a in names)
    for r in rows:
        mean = statistics.mean(med[a][r] for a in names)
        lines.append(f"{r:46s} " + " ".join(f"{med[a][r]:5.2f}" for a in names)
                     + f"  {mean:5.2f}  {100 * mean / tot:4.0f}%")
    return "\n".join(lines)


def run(names: list[str], per_exercise: int = 1, say=print) -> dict:
    work = Path(tempfile.mkdtemp(prefix="awb-phases-"))
    d = work / "sb"
    d.mkdir()
    from awb_grader.isolation import sandbox

    sandbox.configure(say=lambda *x: None)
    inside, outside_ = sandbox_start(d)
    say(f"    sandbox start alone: `python -c pass` in the sandbox {inside:.3f} s, outside {outside_:.3f} s "
        f"-> bubblewrap, prlimit, setpriv add {inside - outside_:.3f} s per process (median of 5; "
        f"a notebook starts two: the kernel and the replay)")
    prof = profile(work, names, per_exercise, say)
    say(table(prof))
    return prof
