"""One command for a whole cohort: ``python -m awb_grader cohort SUBMISSIONS.zip``.

1. **collect**: nbgrader's ``zip_collect`` (``ZipCollectApp``) with a file-name collector plugin
   (:class:`ExerciseCollector`, a ``FileNameCollectorPlugin`` whose regular expression is
   configurable with ``--pattern``) sorts an LMS download (one zip, every exercise, every
   student) into ``inbox/submitted/<student>/<exercise>/``. Files whose name names no exercise
   are reported, never dropped silently.
2. **skip what is already graded**: a submission whose bytes (and timestamp) are unchanged since
   the last run keeps its grade (``cohort_state.json``); new or changed ones (late
   submissions) are graded. ``--regrade`` grades everything again.
3. **grade** in parallel shards (``parallel.py``), each submission in the sandbox
   (``sandbox.py``): check/repair nbgrader metadata, ``nbgrader autograde``, the outside-the-
   kernel verdict (``verdict.py``), ``nbgrader generate_feedback``.
4. **export** ``grades.csv`` (nbgrader's CSV export plugin) and ``flags.csv``, and write the
   **summary**: score distribution per exercise (``summary/scores.png``), flagged submissions
   with their reasons, and the checks the cohort failed most with the misconception each one
   most likely means (from the misconception catalog).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .course import Course, resolve
from .pipeline import Record, _fmt, write_flags
from .submissions import FLAGGED, OK, REPAIRED, UNGRADABLE

# <student>_<anything_>NN_topic[ (1)|-2].ipynb  or  <student>/<anything_>NN_topic.ipynb
DEFAULT_PATTERN = (r"^(?:.*/)?(?P<student_id>[A-Za-z0-9][A-Za-z0-9.@-]*)(?:_|/)(?:[^/]*?_)?"
                   r"(?P<file_id>\d\d_[A-Za-z0-9_]*?)(?:[ _-]*\(?\d+\)?)?\.ipynb$")
STATE = "cohort_state.json"


# -- collection (nbgrader zip_collect + a file-name collector) --------------------------------
def _collector_class():
    from nbgrader.plugins import FileNameCollectorPlugin
    from traitlets import Unicode

    class ExerciseCollector(FileNameCollectorPlugin):
        """FileNameCollectorPlugin that keeps only the files of the exercise being collected
        (the first two digits of ``file_id``) and gives them the release's notebook name."""

        assignment = Unicode("").tag(config=True)
        notes: dict = {}         # (student, assignment) -> original file name, when renamed
        matched: set = set()     # every file any exercise claimed

        losers: dict = {}        # path of a duplicate that was not kept -> the file kept instead

        def collect(self, submitted_file):
            info = super().collect(submitted_file)
            if not info:
                return None
            stem = os.path.splitext(info["file_id"])[0]
            if stem[:2] != self.assignment[:2]:
                return None
            ExerciseCollector.matched.add(os.path.realpath(submitted_file))
            kept = ExerciseCollector.losers.get(os.path.realpath(submitted_file))
            if kept:
                ExerciseCollector.notes[(info["student_id"], self.assignment, "dup")] = (
                    f"{len([v for v in ExerciseCollector.losers.values() if v == kept]) + 1} files for this exercise: "
                    f"graded {os.path.basename(kept)!r} (the latest), ignored the others")
                return None
            if not os.path.basename(submitted_file).endswith(self.assignment + ".ipynb"):
                ExerciseCollector.notes[(info["student_id"], self.assignment)] = os.path.basename(submitted_file)
            info["file_id"] = self.assignment + ".ipynb"
            return info

    return ExerciseCollector


_COLLECTOR = None


def collector():
    global _COLLECTOR
    if _COLLECTOR is None:
        _COLLECTOR = _collector_class()
    return _COLLECTOR


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _duplicates(extracted: Path, pattern: str, assignment: str) -> dict[str, str]:
    """{path of an older duplicate: path kept} for students with several files for one
    exercise: the newest by timestamp (when the pattern has one), then by the LMS's copy
    number (``-2`` after ``-1``), then by name."""
    per: dict = {}
    for p in sorted(extracted.rglob("*.ipynb")):
        m = re.match(pattern, str(p))
        if not m or m["file_id"][:2] != assignment[:2]:
            continue
        tail = os.path.basename(p)[len(os.path.basename(p).rsplit(m["file_id"], 1)[0]) + len(m["file_id"]):]
        copy = int("".join(ch for ch in tail if ch.isdigit()) or 0)
        ts = m.groupdict().get("timestamp") or ""
        per.setdefault(m["student_id"], []).append(((ts, copy, str(p)), os.path.realpath(p)))
    out = {}
    for files in per.values():
        if len(files) > 1:
            files.sort()
            kept = files[-1][1]
            out.update({path: kept for _, path in files[:-1]})
    return out


@dataclass
class Collected:
    subs: dict            # assignment -> {student: (path, timestamp or None)}
    renamed: dict         # (student, assignment) -> original file name
    unmatched: list       # files no exercise claimed


def collect(source: Path, inbox: Path, course: Course, names: list[str], pattern: str = DEFAULT_PATTERN) -> Collected:
    """Run nbgrader's ZipCollectApp once per exercise on ``source`` (a zip or a folder)."""
    from nbgrader.apps import ZipCollectApp

    source = Path(source).resolve()
    if inbox.exists():
        shutil.rmtree(inbox)
    Coll = collector()
    Coll.notes, Coll.matched = {}, set()
    subs: dict = {}
    extracted_any = None
    for a in names:
        archive = inbox / "downloaded" / a / "archive"
        archive.mkdir(parents=True)
        if source.is_dir():
            shutil.copytree(source, archive / "folder", copy_function=_link_or_copy)
        else:
            _link_or_copy(source, archive / source.name)
        cfg = course.config()
        cfg.CourseDirectory.root = str(inbox)
        cfg.CourseDirectory.assignment_id = a
        cfg.CourseDirectory.release_directory = str(course.release_root)
        cfg.ZipCollectApp.collector_plugin = Coll
        cfg.ZipCollectApp.force = True
        cfg.ExtractorPlugin.force = True
        cfg.FileNameCollectorPlugin.named_regexp = pattern
        cfg.ExerciseCollector.assignment = a
        cfg.ZipCollectApp.log_level = "ERROR"
        app = ZipCollectApp(config=cfg)
        app.initialize([])
        app.log.setLevel("ERROR")
        # ZipCollectApp.start() = extract, then collect; in between we pick one file per
        # student when an LMS kept several (nbgrader stops on duplicates without timestamps)
        app.init_plugins()
        app.extract_archive_files()
        extracted_any = inbox / "downloaded" / a / "extracted"
        Coll.losers = _duplicates(extracted_any, pattern, a)
        app.process_extracted_files()
        found = {}
        for d in sorted((inbox / "submitted").glob(f"*/{a}")):
            nb = d / f"{a}.ipynb"
            if nb.exists():
                ts = d / "timestamp.txt"
                found[d.parent.name] = (nb, ts.read_text().strip() if ts.exists() else None)
        if found:
            subs[a] = found
    unmatched = []
    if extracted_any is not None and extracted_any.exists():
        for p in sorted(extracted_any.rglob("*")):
            if p.is_file() and ".ipynb_checkpoints" not in p.parts and "__MACOSX" not in p.parts:
                twin = [inbox / "downloaded" / a / "extracted" / p.relative_to(extracted_any) for a in names]
                if not any(os.path.realpath(t) in Coll.matched for t in twin):
                    unmatched.append(str(p.relative_to(extracted_any)))
    notes: dict = {}
    for key, text in Coll.notes.items():
        k = key[:2]
        notes[k] = (notes[k] + "; " if k in notes else "") + (text if len(key) == 3 else f"file named {text!r}")
    return Collected(subs, notes, unmatched)


# -- the cohort run ---------------------------------------------------------------------------
def _sha(path: Path, timestamp: str | None) -> str:
    h = hashlib.sha256(Path(path).read_bytes())
    h.update((timestamp or "").encode())
    return h.hexdigest()[:20]


def load_state(root: Path) -> dict:
    p = Path(root) / STATE
    if not p.exists():
        return {}
    data = json.loads(p.read_text())
    return {a: {s: Record(**r) for s, r in per.items()} for a, per in data.items()}


def save_state(root: Path, state: dict) -> None:
    data = {a: {s: r.state() for s, r in sorted(per.items())} for a, per in sorted(state.items())}
    tmp = Path(root) / (STATE + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(Path(root) / STATE)


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


def run_cohort(source: Path, root: Path, exercises: list[str] | None = None, *, workers: int | None = None,
               pattern: str = DEFAULT_PATTERN, timeout: int = 60, memory_mb: int | None = None,
               unprotected: bool = False, regrade: bool = False, feedback: bool = True, verdict: bool = True,
               shard: tuple[int, int] | None = None, progress: bool = True, say=print) -> CohortResult:
    """Grade ``source`` (an LMS zip or a folder) into the course root ``root``: every exercise, or
    ``exercises`` (``"04"`` or ``"04_queries_keys_values"``). ``workers``: parallel graders
    (default: the CPU cores, at most 8); ``timeout``: seconds per cell; ``memory_mb``: a kernel's
    memory limit (default ``sandbox.Limits.memory_mb``); ``regrade``: grade unchanged submissions again;
    ``verdict``: the outside-the-kernel re-check; ``shard=(i, n)``: grade only shard i of n of
    the collected submissions (:func:`shards.select`). Refuses (``protect.Refused``) where
    no isolation tier can run, unless ``unprotected``."""
    from . import parallel, sandbox as sb

    t0 = time.perf_counter()
    steps = {"start": time.time()}
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    memory_mb = memory_mb or sb.Limits.memory_mb
    mode = sb.configure(unprotected, sb.Limits(memory_mb=memory_mb, cell_timeout=timeout), say=say)
    course = Course(root, release_dir=root / "release", timeout=timeout)
    names = resolve(exercises)
    say(f"sandbox: {mode}" + ({"bwrap": " (bubblewrap", "landlock": " (Landlock + seccomp"}[mode]
                              + ", a new sandboxed kernel per notebook: no network, read-only system, "
                              f"only its own folder writable; memory {memory_mb} MB, {timeout} s per cell)"
                              if mode != "limits" else " (UNPROTECTED: resource limits only)"))

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
        + (f"; {len(got.unmatched)} file(s) name no exercise" if got.unmatched else ""))

    state = load_state(root)
    tasks, skipped = [], 0
    for a, per in sorted(got.subs.items()):
        for student, (path, ts) in sorted(per.items()):
            sha = _sha(path, ts)
            old = state.get(a, {}).get(student)
            done = old is not None and old.sha == sha and (
                old.status == UNGRADABLE or (root / "autograded" / student / a).exists())
            if done and not regrade:
                skipped += 1
                continue
            tasks.append(parallel.Task(a, student, str(path), ts, sha))
    workers = workers or max(1, min(os.cpu_count() or 1, 8))
    steps["collected"] = time.time()
    say(f"2/4 grade: {len(tasks)} to grade, {skipped} unchanged since the last run (kept); {workers} worker(s)")
    results = parallel.grade_parallel(course, tasks, workers=workers, feedback=feedback, verdict=verdict,
                                      progress=progress)
    steps["graded"] = time.time()
    for r in results:
        note = got.renamed.get((r.student, r.assignment))
        if note:
            r.reasons.insert(0, f"{note}: graded as {r.assignment}.ipynb")
            if r.status == OK:
                r.status = REPAIRED
        r.seconds, r.phases = round(r.seconds, 2), {k: round(v, 2) for k, v in r.phases.items()}
        state.setdefault(r.assignment, {})[r.student] = r
    # max scores (an ungradable submission has none recorded)
    for a, per in state.items():
        mx = sum(course.max_scores(a).values()) if _in_gradebook(course, a) else 0
        for rec in per.values():
            rec.max_score = mx
    save_state(root, state)

    say("3/4 export: nbgrader's CSV export plugin -> grades.csv; flags.csv")
    course.export_csv(root / "grades.csv")
    records = [rec for a in sorted(state) for rec in (state[a][s] for s in sorted(state[a]))]
    write_flags(records, root / "flags.csv", got.unmatched)
    say("4/4 summary")
    res = CohortResult(root, records, [(r.assignment, r.student) for r in results], skipped,
                       got.unmatched, mode, time.perf_counter() - t0, steps=steps,
                       timeline=[{"assignment": r.assignment, "student": r.student, "worker": r.worker,
                                  "began": r.began, "ended": r.ended} for r in results])
    res.summary = summarize(res)
    (root / "summary").mkdir(exist_ok=True)
    (root / "summary" / "summary.txt").write_text(res.summary)
    say(res.summary)
    steps["done"] = time.time()
    return res


def build_course(root: Path, exercises: list[str], empty: Path, timeout: int = 60, say=print) -> CohortResult:
    """The cohort command over the empty folder ``empty``: builds the course (nbgrader
    generate_assignment) where needed and exports grades.csv, flags.csv and the summary from the
    gradebook and state. It grades nothing, so it runs without a sandbox where no isolation tier
    can run (and only then does its summary say so)."""
    from .isolation.tiers import protected

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


# -- the summary ------------------------------------------------------------------------------
def misconceptions(records: list[Record], assignment: str, top: int = 5) -> list[dict]:
    """The checks the cohort failed most, each with the catalogued mistakes that explain it.

    A mistake *explains* a student's failure when the student lost every cell in its
    ``must_fail`` and, where the mistake has a visible ``hint``, that hint appears in the
    student's error output. Returns [{cell, n, share, mistakes: [(description, n_students)]}]."""
    from . import catalog

    graded = [r for r in records if r.assignment == assignment and r.status != UNGRADABLE]
    if not graded:
        return []
    fails = Counter(c for r in graded for c in r.failed_cells)
    cat = catalog.mistakes(assignment)
    out = []
    for cell, n in fails.most_common(top):
        expl = Counter()
        for m in cat:
            if cell not in m.must_fail:
                continue
            for r in graded:
                if catalog.explains(m, r.failed_cells, r.errors):
                    expl[m.description] += 1
        # a check that only hidden tests catch: fall back to every mistake that names it
        ranked = expl.most_common(2) or [(m.description, 0) for m in cat if cell in m.must_fail][:2]
        out.append({"cell": cell, "n": n, "share": n / len(graded), "mistakes": ranked})
    return out


def histogram(records: list[Record], dest: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r.assignment for r in records})
    cols = min(3, len(names)) or 1
    rows = (len(names) + cols - 1) // cols or 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax, a in zip(axes.flat, names):
        rs = [r for r in records if r.assignment == a]
        pct = [100 * r.score / r.max_score if r.max_score else 0 for r in rs]
        ax.hist(pct, bins=[0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100.001], color="#4c72b0", edgecolor="white")
        ax.set_title(f"{a[:22]} (n={len(rs)})", fontsize=8)
        ax.set_xlabel("score (%)", fontsize=7)
        ax.set_ylabel("students", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(dest, dpi=90)
    plt.close(fig)
    return dest


def summarize(res: CohortResult) -> str:
    recs = res.records
    from .sandbox import WARNING

    lines = [WARNING, ""] if res.sandbox == "limits" else []
    lines += [f"cohort: {len({r.student for r in recs})} student(s), {len(recs)} submission(s); "
             f"graded now {len(res.graded_now)}, kept {res.skipped}; {res.seconds:.0f} s; sandbox {res.sandbox}", ""]
    lines.append("score distribution per exercise (points):")
    lines.append(f"  {'exercise':<30} {'n':>4} {'mean':>6} {'median':>6} {'max':>5}  full  zero  flagged")
    for a in sorted({r.assignment for r in recs}):
        rs = [r for r in recs if r.assignment == a]
        sc = [r.score for r in rs]
        mx = rs[0].max_score
        lines.append(f"  {a:<30} {len(rs):>4} {statistics.mean(sc):>6.1f} {statistics.median(sc):>6.1f} {_fmt(mx):>5}"
                     f"  {sum(s == mx for s in sc):>4}  {sum(s == 0 for s in sc):>4}  "
                     f"{sum(r.status in (FLAGGED, UNGRADABLE) for r in rs):>7}")
    if recs:
        (res.root / "summary").mkdir(exist_ok=True)
        lines.append(f"  histogram: {histogram(recs, res.root / 'summary' / 'scores.png')}")
    flagged = [r for r in recs if r.status in (FLAGGED, UNGRADABLE)]
    lines += ["", f"flagged submissions ({len(flagged)}; all reasons in flags.csv):"]
    for r in flagged[:40]:
        lines.append(f"  {r.student:<14} {r.assignment[:2]}  {r.status:<10} {'; '.join(r.reasons)[:150]}")
    if len(flagged) > 40:
        lines.append(f"  ... and {len(flagged) - 40} more")
    for f in res.unmatched[:20]:
        lines.append(f"  {'?':<14} ??  unmatched  file {f!r} names no exercise")
    lines += ["", "what the cohort got wrong (most failed checks -> the misconception they most often mean):"]
    for a in sorted({r.assignment for r in recs}):
        ms = misconceptions(recs, a)
        if not ms:
            continue
        lines.append(f"  {a}")
        for m in ms:
            lines.append(f"    {m['cell']:<28} failed by {m['n']:>3} ({100 * m['share']:.0f}%)")
            for desc, n in m["mistakes"]:
                lines.append(f"        {'~' if not n else str(n):>3} x {desc}")
    lines += ["", f"grades:   {res.root / 'grades.csv'}", f"flags:    {res.root / 'flags.csv'}",
              f"feedback: {res.root / 'feedback'}/<student>/<exercise>/", f"summary:  {res.root / 'summary'}"]
    return "\n".join(lines)
