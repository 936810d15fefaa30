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
import threading
import time
from pathlib import Path

from machine_info import load

LOG: list[tuple] = []        # (label, time.time(), core-seconds so far or None) of the notebook being graded


class CpuMeter(threading.Thread):
    """The core-seconds used so far by this process (less this thread) and by every process under
    it (the sandboxed kernel and replay, nbgrader's helpers), sampled from ``/proc`` every 20 ms:
    a process's own user + system time, counted while it lives (its last 20 ms may be missed)."""

    HZ = os.sysconf("SC_CLK_TCK")

    def __init__(self):
        super().__init__(name="cpu-meter", daemon=True)
        self.seen: dict[tuple[int, int], float] = {}      # (pid, start tick) -> its CPU seconds
        self.own = 0.0                                     # this thread's CPU seconds
        self.lock = threading.Lock()

    def _sample(self) -> None:
        me = os.getpid()
        parent, cpu = {}, {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as fh:
                        f = fh.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                parent[int(d)] = int(f[1])
                cpu[(int(d), int(f[19]))] = (int(f[11]) + int(f[12])) / self.HZ
        mine = {pid for pid in parent if self._under(pid, me, parent)}
        with self.lock:
            for (pid, start), c in cpu.items():
                if pid in mine:
                    self.seen[(pid, start)] = max(c, self.seen.get((pid, start), 0.0))

    @staticmethod
    def _under(pid: int, me: int, parent: dict) -> bool:
        for _ in range(64):
            pid = parent.get(pid, 0)
            if pid == me:
                return True
            if pid <= 1:
                return False
        return False

    def run(self) -> None:
        while True:
            self._sample()
            self.own = time.thread_time()
            time.sleep(0.02)

    def total(self) -> float:
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        with self.lock:
            return ru.ru_utime + ru.ru_stime - self.own + sum(self.seen.values())


METER: CpuMeter | None = None


def note(label: str) -> None:
    LOG.append((label, time.time(), METER.total() if METER else None))


class Stamp:
    """A step of nbgrader's preprocessor list that only notes the time it is passed."""

    def __init__(self, label: str):
        self.label = label

    def __call__(self, nb, resources):
        note(self.label)
        if self.label == "SandboxExecute":
            cells = [c for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get("execution")]
            first_torch = next((i for i, c in enumerate(cells) if "import torch" in c.source), 0)
            for i, c in enumerate(cells):
                ex = c.metadata.execution
                if "iopub.status.busy" in ex and "shell.execute_reply" in ex:
                    LOG.append((f"cell{i}.busy", _ts(ex["iopub.status.busy"]), None))
                    LOG.append((f"cell{i}.done", _ts(ex["shell.execute_reply"]), None))
                    if i == first_torch:
                        LOG.append(("torch.busy", _ts(ex["iopub.status.busy"]), None))
                        LOG.append(("torch.done", _ts(ex["shell.execute_reply"]), None))
        return nb, resources


def configure_isolation() -> str:
    """The isolation this machine gives (bubblewrap here; ``AWB_ISOLATION=landlock`` picks the
    Landlock tier where ``isolation/tiers.py`` exists), put in this process's environment."""
    try:
        from awb_grader.isolation.tiers import configure
    except ImportError:                      # before the tiers (issue 30): bubblewrap or refusal
        from awb_grader.isolation.sandbox import configure
    return configure(say=lambda *x: None)


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
        note(before)
        try:
            return orig(*args, **kwargs)
        finally:
            note(after)

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
    ("scores, diagnosis read back (ours)", "autograde end", "feedback"),
    ("feedback (nbgrader generate_feedback)", "feedback", "feedback end"),
    ("worker's gradebook read", "feedback end", "grade_one end"),
    ("merge into the main gradebook", "grade_one end", "merged"),
]


# the same notebook in core-seconds: between the boundaries this process passes itself (the
# kernel's per-cell times are its own clock's, read afterwards: its start, the import of PyTorch
# and the cells are one phase here)
CPU_PHASES = [
    ("submit + check/repair (ours)", "grade_one", "autograde"),
    ("nbgrader: app, gradebook, copies, sanitize", "autograde", "autograde pass"),
    ("SandboxGuard", "autograde pass", "SandboxGuard"),
    ("the kernel: start, import torch, cells, stop", "SandboxGuard", "SandboxExecute"),
    ("IgnorePattern..LimitOutputBytes", "SandboxExecute", "LimitOutputBytes"),
    ("verdict: static reading", "LimitOutputBytes", "replay start"),
    ("verdict: replay start (sandbox, torch, cells)", "replay start", "replay ready"),
    ("verdict: hidden checks through the replay", "replay ready", "OutsideVerdict"),
    ("nbgrader: SaveAutoGrades .. FlagSubmission", "OutsideVerdict", "FlagSubmission"),
    ("nbgrader: write the notebook, finish", "FlagSubmission", "autograde end"),
    ("scores, diagnosis read back (ours)", "autograde end", "feedback"),
    ("feedback (nbgrader generate_feedback)", "feedback", "feedback end"),
    ("worker's gradebook read", "feedback end", "grade_one end"),
    ("merge into the main gradebook", "grade_one end", "merged"),
]


def core_seconds(log: list[tuple]) -> dict[str, float]:
    """{phase: core-seconds} of one notebook's log (CPU_PHASES)."""
    at: dict[str, float] = {}
    for label, _, c in log:
        if c is not None:
            at.setdefault(label, c)
    if "replay start" not in at and "LimitOutputBytes" in at:
        at["replay start"] = at["replay ready"] = at["LimitOutputBytes"]
    out = {name: at[b] - at[a] for name, a, b in CPU_PHASES if a in at and b in at}
    out["total"] = at.get("merged", 0) - at.get("grade_one", 0)
    return out


def spans(log: list[tuple]) -> dict[str, float]:
    """{phase: seconds} of one notebook's log (a phase whose ends are missing is left out:
    e.g. no replay when nothing earned points)."""
    at: dict[str, float] = {}
    for label, t, _ in log:
        at.setdefault(label, t)       # the first time each boundary is passed
    done = [t for label, t, _ in log if label.endswith(".done")]
    if done:
        at["last.done"] = max(done)
    if "replay start" not in at and "LimitOutputBytes" in at:
        at["replay start"] = at["replay ready"] = at["LimitOutputBytes"]
    out: dict[str, float] = {}
    for name, a, b in PHASES:
        if a in at and b in at:
            out[name] = at[b] - at[a]
    out["total"] = at.get("merged", 0) - at.get("grade_one", 0)
    return out


def profile(work: Path, names: list[str], per_exercise: int = 1, say=print) -> tuple[dict, dict]:
    """Grade ``per_exercise`` correct notebooks of each exercise as a worker does:
    ({exercise: [wall spans]}, {exercise: [core-seconds]})."""
    import multiprocessing as mp

    import nbformat
    from nbgrader.api import Gradebook

    from awb_grader.cohort import parallel
    from awb_grader.cohort.merge import merge_one
    from awb_grader.core.course import Course
    from awb_grader.devtools.variants import student_notebook
    from awb_grader.isolation import sandbox
    from awb_grader.verdict import outside

    configure_isolation()
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
    _wrap(Course, "generate_feedback", "feedback", "feedback end")
    parallel._init_worker(spec, ids)
    # the process's first-use costs (imports, templates, the bubblewrap probe) are not a notebook's:
    # one notebook of the first exercise is graded first, unrecorded
    first = tasks[0]
    p = inbox / f"warmup_{first.assignment}.ipynb"
    nbformat.write(nbformat.read(first.path, as_version=4), p)
    warm = parallel._grade_one(parallel.Task(first.assignment, "warmup", str(p)))
    with Gradebook(main.db) as gb:
        merge_one(main, warm, gb)
    global METER
    METER = CpuMeter()
    METER.start()
    out: dict[str, list[dict]] = {}
    cores: dict[str, list[dict]] = {}
    try:
        with Gradebook(main.db) as gb:
            for t in tasks:
                LOG.clear()
                time.sleep(0.05)              # the meter has seen every process of the notebook before
                note("grade_one")
                r = parallel._grade_one(t)
                note("grade_one end")
                merge_one(main, r, gb)
                time.sleep(0.05)
                note("merged")
                s = spans(LOG)
                cores.setdefault(t.assignment, []).append(core_seconds(LOG))
                s["_score"] = r.score
                s["_status"] = r.status
                out.setdefault(t.assignment, []).append(s)
                say(f"    {t.assignment} {t.student}: {s['total']:.2f} s, {cores[t.assignment][-1]['total']:.2f} "
                    f"core-seconds, score {r.score}/{r.max_score}, {r.status}")
    finally:
        os.chdir(here)
    return out, cores


def table(prof: dict[str, list[dict]], phases=PHASES) -> str:
    """Phases x exercises (median seconds per notebook) and the mean over the exercises."""
    names = list(prof)
    rows = [name for name, _, _ in phases] + ["total"]
    med = {a: {r: statistics.median([s.get(r, 0.0) for s in prof[a]]) for r in rows} for a in names}
    head = f"{'phase':46s} " + " ".join(f"{a[:2]:>5s}" for a in names) + "   mean  share"
    lines = [head, "-" * len(head)]
    tot = statistics.mean(med[a]["total"] for a in names)
    for r in rows:
        mean = statistics.mean(med[a][r] for a in names)
        lines.append(f"{r:46s} " + " ".join(f"{med[a][r]:5.2f}" for a in names)
                     + f"  {mean:5.2f}  {100 * mean / tot:4.0f}%")
    return "\n".join(lines)


def run(names: list[str], per_exercise: int = 1, say=print, launches: tuple[str, ...] = ("zygote",),
        rounds: int = 1) -> dict:
    """The profile of each launch path in ``launches`` ("zygote": each kernel and replay forked from
    the worker's zygote; "cold": a new process each, ``AWB_COLD=1``, as before issue 42), the paths
    alternating ``rounds`` times in this one run (the load moves); the tables per path and, with
    both, the core-seconds per notebook side by side."""
    from awb_grader.isolation import zygote

    work = Path(tempfile.mkdtemp(prefix="awb-phases-"))
    d = work / "sb"
    d.mkdir()
    say(f"    isolation tier: {configure_isolation()}")
    inside, outside_ = sandbox_start(d)
    say(f"    sandbox start alone: `python -c pass` in the sandbox {inside:.3f} s, outside {outside_:.3f} s "
        f"-> bubblewrap, prlimit, setpriv add {inside - outside_:.3f} s per new process (median of 5; "
        f"the cold path starts two per notebook: the kernel and the replay)")
    profs: dict[str, dict] = {x: {} for x in launches}
    cores: dict[str, dict] = {x: {} for x in launches}
    for r in range(rounds):
        for launch in (launches if r % 2 == 0 else tuple(reversed(launches))):
            os.environ[zygote.COLD_ENV] = "1" if launch == "cold" else "0"
            say(f"    [{launch}, round {r + 1}]  [{load()}]")
            try:
                prof, core = profile(work / f"{launch}-{r}", names, per_exercise, say)
            finally:
                zygote.stop()
            for a in prof:
                profs[launch].setdefault(a, []).extend(prof[a])
                cores[launch].setdefault(a, []).extend(core[a])
    os.environ.pop(zygote.COLD_ENV, None)
    for launch in launches:
        say(f"    [{launch}] wall seconds per phase (one notebook at a time, median per exercise):")
        say(table(profs[launch]))
        say(f"    [{launch}] core-seconds per phase (this process, less the meter, and every process under it):")
        say(table(cores[launch], CPU_PHASES))
    if len(launches) > 1:
        per = {x: {a: statistics.median(c["total"] for c in cores[x][a]) for a in cores[x]} for x in launches}
        say("    core-seconds per notebook, median per exercise: " + "; ".join(
            f"{a[:2]} " + " / ".join(f"{per[x][a]:.2f}" for x in launches) for a in per[launches[0]]))
        say("    mean over the exercises: " + ", ".join(
            f"{x} {statistics.mean(per[x].values()):.2f}" for x in launches))
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return profs
