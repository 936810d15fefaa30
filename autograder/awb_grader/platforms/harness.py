"""What the Gradescope and PrairieLearn harnesses share: one upload graded as one upload, read
back per graded cell.

Nothing here grades: :func:`grade_upload` hands the uploaded notebook to the cohort command's
steps for one submission (:func:`grade_one`: check/repair, nbgrader autograde in the isolation tier
that runs here, its kernel and replay forked from this process's zygote, the outside-the-kernel
verdict), in this process, then reads what they wrote:
the Record (status, reasons, failed cells, errors), nbgrader's gradebook (each cell's score and
maximum) and the autograded notebook (each failing cell's message). :func:`bundle` copies the
grading core into a folder that a platform unpacks (``/autograder/source``,
``/grade/serverFilesCourse/awb``), optionally with new grading seeds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from ..core.course import REPO
from ..core.metadata import cell_meta, verdict_of
from ..core.outputs import strip_ansi
from ..verdict.outside import HIDDEN_FAILED, HIDDEN_MESSAGE

STUDENT = "student"          # the one student of a harness's cohort
# what a build copies: the grading core, the helper package, one exercise's source and release
CORE = ("autograder", "attention_workbook", "pyproject.toml",
        "requirements.txt", "tools/install_torch.py")
WITHHELD_MESSAGE = ("points withheld: this submission was flagged for review by your instructor "
                    "(the grader found code that is not your own work, or that hides what it runs).")
TIER_NOTE = ("isolation: the platform's containers (Docker's defaults) refuse the namespaces bubblewrap needs, so "
             "student code is confined by the Landlock tier there (Landlock + seccomp + rlimits, a uid of its own as "
             "root); the image's setup prints the tier it gets, and every grade's log names it (\"sandbox landlock\")")
UNPROTECTED_BUILD = ("WARNING: built --unprotected: where no isolation tier can run, student code is graded with the "
                     "grader's permissions and can forge its own result")
SEED = re.compile(r"\brng\((\d+)\)")


# -- building ----------------------------------------------------------------------------------
def add_build_arguments(p) -> None:
    """The options every platform's build takes (``gradescope``, ``prairielearn``)."""
    p.add_argument("--seeds", default=None, metavar="SECRET",
                   help="derive new grading seeds (every rng(N) of the hidden checks) from this secret")
    p.add_argument("--timeout", type=int, default=60, help="cell time limit in seconds (default 60)")
    p.add_argument("--memory-mb", type=int, default=None, help="memory limit of the student's kernel")
    p.add_argument("--unprotected", action="store_true",
                   help="grade even where no isolation tier (bubblewrap, Landlock + seccomp) can run in the "
                        "platform's container (resource limits only: student code could then forge its own "
                        "result); default: such a run reports a grader error instead")


def reseed_text(text: str, salt: str) -> tuple[str, int]:
    """Every ``rng(N)`` of a hidden-check module replaced by a seed derived from ``salt`` and N
    (the README's private-mirror advice, applied to a build): same checks, other cases."""
    def new(m):
        h = hashlib.sha256(f"{salt}:{m.group(1)}".encode()).digest()
        return f"rng({int.from_bytes(h[:4], 'big') % 2_000_000_000 + 1000})"
    return SEED.subn(new, text)


def bundle(assignment: str | list[str], dest: Path, settings: dict, seed_salt: str | None = None) -> dict:
    """Copy the grading core and the source and release of ``assignment`` (one, or a list)
    under ``dest``; write ``harness.json`` (the build's settings). Returns the settings."""
    names = [assignment] if isinstance(assignment, str) else list(assignment)
    dest = Path(dest)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "demo_cohort")
    for rel in CORE:
        src = REPO / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=ignore, dirs_exist_ok=True)
        elif src.exists():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    for top in ("solutions", "exercises"):
        for a in names:
            shutil.copytree(REPO / top / a, dest / top / a, ignore=ignore, dirs_exist_ok=True)
    reseeded = 0
    if seed_salt:
        for p in sorted((dest / "autograder" / "awb_grader" / "hidden").glob("ex*.py")):
            text, n = reseed_text(p.read_text(), seed_salt)
            p.write_text(text)
            reseeded += n
    settings = {"assignment": names[0] if len(names) == 1 else names, "reseeded": reseeded, **settings}
    (dest / "harness.json").write_text(json.dumps(settings, indent=1) + "\n")
    return settings


# -- grading one upload ------------------------------------------------------------------------
@dataclass
class Test:
    name: str                 # grade id of the test cell
    score: float
    max_score: float
    message: str              # what the student may read: a visible hint, never hidden-check code
    hidden: bool = False      # the message is about a hidden check (or a pass/withheld verdict)


@dataclass
class Outcome:
    assignment: str
    status: str               # ok | repaired | flagged | ungradable | no-file | error
    score: float
    max_score: float
    tests: list[Test] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    misconceptions: list[str] = field(default_factory=list)
    seconds: float = 0.0
    peak_rss_mb: float = 0.0  # largest resident set of this process or one of its waited-for children
    sandbox: str = ""
    log: list[str] = field(default_factory=list)
    hidden_failed: dict = field(default_factory=dict)   # grade id -> its hidden check's own message (instructor)
    phases: dict = field(default_factory=dict)          # seconds of the grading command, phase by phase (instructor)

    def summary(self) -> str:
        """What the student reads about the whole submission."""
        head = f"{self.assignment}: {_num(self.score)} / {_num(self.max_score)} points."
        if self.status == "no-file":
            return head + " No notebook was found in your submission: upload your " \
                          f"{self.assignment}.ipynb (File > Download > Download .ipynb on Colab)."
        if self.status == "ungradable":
            why = self.reasons[0] if self.reasons else "it is not a readable notebook"
            return head + f" Your file could not be graded: {why}. Upload the .ipynb file itself " \
                          "(File > Download > Download .ipynb), unchanged by other tools."
        if self.status == "error":
            return head + " The grader failed on its side (not your fault): your instructor has the log."
        if self.status == "flagged":
            return head + " This submission is flagged for review by your instructor; " \
                          "points for the flagged checks are withheld until then."
        lost = [t.name for t in self.tests if t.score < t.max_score]
        return head + (f" Checks that lost points: {', '.join(lost)}." if lost else " Every check passed.")

    def instructor_report(self) -> str:
        """The instructor-only log (Gradescope's stdout, PrairieLearn's job output)."""
        lines = [f"awb grader: {self.assignment}  status {self.status}  score {_num(self.score)}/{_num(self.max_score)}"
                 f"  {self.seconds:.1f} s  peak RSS {self.peak_rss_mb:.0f} MB  sandbox {self.sandbox or '?'}"]
        if self.phases:
            lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.phases.items()))
        lines += [f"  reason: {r}" for r in self.reasons]
        lines += [f"  likely misconception: {m}" for m in self.misconceptions]
        for t in self.tests:
            lines.append(f"  {t.name:<30} {_num(t.score):>4}/{_num(t.max_score):<4} {t.message[:160]}")
        lines += [f"  hidden check {gid}: {why[:300]}" for gid, why in self.hidden_failed.items()]
        lines += ["", "grader log:", *("  " + x for x in self.log[-60:])]
        return "\n".join(lines)


def _num(x: float):
    return int(x) if float(x).is_integer() else round(x, 2)


def find_upload(folder: Path, assignment: str) -> Path | None:
    """The uploaded notebook: the file named like the release, else the only .ipynb, else the
    newest .ipynb, else any file (which the cohort command then calls ungradable: an archive is
    never unpacked, ``uploads.py``). Links are never followed (a link to the solutions would
    otherwise be graded as the student's notebook), nor anything but a regular file."""
    files = []
    for top, dirs, names in os.walk(folder):                   # does not follow links to folders
        dirs[:] = [d for d in dirs if d not in ("__MACOSX", ".ipynb_checkpoints")]
        files += [p for n in names if (p := Path(top) / n).is_file() and not p.is_symlink()]
    if not files:
        return None
    nbs = [p for p in files if p.suffix == ".ipynb"]
    named = [p for p in nbs if p.name.endswith(f"{assignment}.ipynb")]
    for group in (named, nbs, files):
        if group:
            return max(group, key=lambda p: (p.stat().st_mtime, str(p)))
    return None


def release_cells(release_nb: Path) -> list[tuple[str, float]]:
    """(grade id, points) of every test cell of the release, in notebook order."""
    import nbformat

    nb = nbformat.read(release_nb, as_version=4)
    out = []
    for c in nb.cells:
        md = cell_meta(c)
        if md.get("grade") and not md.get("solution") and md.get("grade_id"):
            out.append((md["grade_id"], float(md.get("points", 0))))
    return out


def _messages(nb_path: Path) -> dict[str, tuple[str, str]]:
    """{grade id: (exception name, message)} of every graded cell that raised, read from the
    autograded notebook."""
    import nbformat

    out = {}
    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception:  # noqa: BLE001 - no notebook: no messages
        return out
    for c in nb.cells:
        gid = cell_meta(c).get("grade_id")
        if c.cell_type != "code" or not gid:
            continue
        for o in c.get("outputs", []):
            if o.get("output_type") == "error":
                out[gid] = (o.get("ename", ""), strip_ansi(o.get("evalue", "")))
                break
    return out


def student_message(ename: str, evalue: str, fallback: str = "") -> tuple[str, bool]:
    """(text for the student, whether it concerns a hidden check). A hidden check's message
    states its case and tolerance: the student gets a fixed sentence instead; a visible check's
    hint (or the student's own exception) is shown as it is."""
    text = evalue.strip() or (fallback.strip().splitlines() or [""])[0]
    low = text.lower()
    if ename == HIDDEN_FAILED or "hidden test" in low or "awb_grader" in low or "begin hidden" in low:
        return HIDDEN_MESSAGE, True
    if not text:
        return "this check failed (no message).", False
    prefix = "" if ename in ("", "CheckFailed", "AssertionError") else f"{ename}: "
    return (prefix + text)[:2000], False


def prepare(assignment: str, root: Path, timeout: int = 60, say=print) -> None:
    """Build the course (nbgrader generate_assignment) once, at setup: a cohort run over no
    submissions (no student code runs, so no sandbox is needed yet)."""
    from ..cohort.run import build_course

    build_course(root, [assignment], Path(root).parent / "awb-empty", timeout=timeout, say=say)


def warm_start(settings: dict, root: Path) -> None:
    """The first thing a platform's grading command does: decide the isolation tier, import what
    the zygote preloads (this process needs PyTorch for the hidden checks anyway) and fork the zygote
    from this process, before it opens anything of the course (the upload, the gradebook, the hidden
    checks), in the clean environment ``run_autograder`` starts it with: one import of PyTorch and
    its company per upload instead of two (about a second and a half of core time, three seconds of
    a student's wait at Gradescope's half a CPU). Where that cannot be done (no tier, bubblewrap),
    grading starts its zygote as usual."""
    from ..isolation import sandbox as sb, tiers, zygote

    a = settings["assignment"]
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    try:
        mode = tiers.configure(bool(settings.get("unprotected")),
                               sb.Limits(memory_mb=settings.get("memory_mb") or sb.Limits.memory_mb,
                                         cell_timeout=int(settings.get("timeout") or 60)), say=lambda *x: None)
        if mode == "bwrap" or zygote.cold_reason(mode):
            return
        zygote.PRELOAD_PLOTTING = plots_when_graded(Path(root) / "release" / a / f"{a}.ipynb")
        zygote.preload()
        sb.zygote_for(Path(root).resolve() / "autograded" / STUDENT / a, fork=True)
    except Exception:  # noqa: BLE001 - grading says what is wrong, if anything is
        return


def plots_when_graded(release_nb: Path) -> bool:
    """Does a code cell of the release that runs while nbgrader grades (not one skipped under
    ``NBGRADER_EXECUTION``) use matplotlib? (True where the notebook cannot be read.) A zygote serving
    one upload of an exercise that draws nothing then imports no matplotlib: about a third of a
    core-second, two thirds of a second of the student's wait at half a CPU."""
    try:
        cells = json.loads(Path(release_nb).read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return True
    for cell in cells:
        src = "".join(cell.get("source") or []) if isinstance(cell.get("source"), list) else str(cell.get("source"))
        if cell.get("cell_type") == "code" and "NBGRADER_EXECUTION" not in src and re.search(
                r"\b(import|from)\s+matplotlib|\bplotting\b.*\bimport\b|\bimport\b.*\bplotting\b|\bplt\.", src):
            return True
    return False


def grade_one(notebook: Path, assignment: str, root: Path, timeout: int = 60, memory_mb: int | None = None,
              unprotected: bool = False, say=print):
    """One upload graded as one upload, in this process: the cohort command's steps for one
    submission (check and repair, ``nbgrader autograde`` in the isolation tier that runs here, the
    outside verdict, the Record) without what a cohort adds (collecting a download, a pool of
    workers, the merge, the exports, the summary and the report page). The course root was built at
    setup (:func:`prepare`). Refuses (``isolation.sandbox.Refused``) where no tier can run, unless
    ``unprotected``. Returns (the Record, the tier's name)."""
    from ..cohort.pipeline import grade_submissions
    from ..core.course import Course
    from ..isolation import sandbox as sb, tiers

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):      # as a cohort's worker: small tensors, one thread
        os.environ.setdefault(var, "1")
    mode = tiers.configure(unprotected, sb.Limits(memory_mb=memory_mb or sb.Limits.memory_mb, cell_timeout=timeout),
                           say=say)
    say(f"sandbox: {mode} ({tiers.detect().describe()})")
    course = Course(Path(root).resolve(), release_dir=Path(root).resolve() / "release", timeout=timeout)
    return grade_submissions(course, assignment, {STUDENT: Path(notebook)}, feedback=False, progress=False)[0], mode


def grade_upload(upload: Path | None, assignment: str, root: Path, release_nb: Path, timeout: int = 60,
                 memory_mb: int | None = None, unprotected: bool = False) -> Outcome:
    """Grade one uploaded file with the cohort command and read back every graded cell.
    Never raises: a failure of the grader itself (no isolation tier can run here and the build did
    not say ``--unprotected``, say) is an Outcome with status ``error``."""
    t0 = time.perf_counter()
    cells = release_cells(release_nb)
    max_total = sum(p for _, p in cells)
    out = Outcome(assignment, "error", 0.0, max_total)

    def say(*a):
        out.log.append(" ".join(str(x) for x in a))

    try:
        if upload is None:
            out.status = "no-file"
            out.tests = [Test(g, 0.0, p, "no notebook submitted") for g, p in cells]
            return out
        from ..cohort.uploads import SafeExtractor

        limit = SafeExtractor.max_member_mb.default_value
        if Path(upload).stat().st_size > limit << 20:        # not copied, not read
            out.status = "ungradable"
            out.reasons.append(f"the upload is larger than {limit} MB: not read")
            out.tests = [Test(g, 0.0, p, "not graded: the file is too large to be a notebook") for g, p in cells]
            return out
        inbox = Path(root).parent / "awb-inbox"
        shutil.rmtree(inbox, ignore_errors=True)
        inbox.mkdir(parents=True)
        copy = inbox / f"{STUDENT}_{assignment}.ipynb"
        shutil.copyfile(upload, copy, follow_symlinks=False)
        t1 = time.perf_counter()
        rec, out.sandbox = grade_one(copy, assignment, Path(root), timeout=timeout, memory_mb=memory_mb,
                                     unprotected=unprotected, say=say)
        t2 = time.perf_counter()
        out.status, out.reasons = str(getattr(rec.status, "value", rec.status)), list(rec.reasons)
        scores = _gradebook_scores(Path(root), assignment) if rec.status != "ungradable" else {}
        autograded = Path(root) / "autograded" / STUDENT / assignment / f"{assignment}.ipynb"
        msgs = _messages(autograded)
        out.hidden_failed = dict(verdict_of(autograded).get("hidden_failed") or {})
        kernel, outside = (float(verdict_of(autograded).get(k) or 0) for k in ("execute_s", "verdict_s"))
        out.phases.update({"check and copy": t1 - t0, "kernel (the cells)": kernel, "outside verdict": outside,
                           "nbgrader and the rest": max(0.0, t2 - t1 - kernel - outside)})
        # points withheld by the outside verdict: what it wrote into the autograded notebook's metadata
        withheld = rec.status == "flagged" and bool(verdict_of(autograded).get("withheld"))
        for gid, pts in cells:
            got = scores.get(gid, 0.0)
            if rec.status == "ungradable":
                text, hid = "not graded: the file is not a readable notebook", False
            elif got >= pts:
                text, hid = "passed", True
            elif msgs.get(gid, ("", ""))[1].strip() or rec.errors.get(gid, "").strip():
                ename, evalue = msgs.get(gid, ("", ""))
                text, hid = student_message(ename, evalue, rec.errors.get(gid, ""))
            elif withheld:
                text, hid = WITHHELD_MESSAGE, False
            else:
                text, hid = "this check did not earn its points", False
            out.tests.append(Test(gid, got, pts, text, hid))
        out.score = sum(t.score for t in out.tests) if rec.status != "ungradable" else 0.0
        if abs(out.score - rec.score) > 1e-6 and rec.status != "ungradable":
            out.reasons.append(f"note: per-cell scores add to {out.score}, the record says {rec.score}")
            out.score = rec.score
        try:
            from .. import catalog

            out.misconceptions = [m.description for g in catalog.named_by_errors(assignment, rec.failed_cells,
                                                                                 rec.errors) for m in g]
        except Exception:  # noqa: BLE001 - the insight is optional
            pass
    except BaseException as e:  # the harness always writes a result
        if isinstance(e, KeyboardInterrupt):
            raise
        out.status = "error"
        out.reasons.append(f"grader error: {type(e).__name__}: {e}")
        out.log.extend(traceback.format_exc().splitlines())
        out.tests = out.tests or [Test(g, 0.0, p, "not graded (grader error)") for g, p in cells]
        out.score = 0.0
    finally:
        out.seconds = time.perf_counter() - t0
        if out.phases:
            out.phases["read back"] = max(0.0, out.seconds - sum(out.phases.values()))
        out.peak_rss_mb = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return out


def since_start() -> float | None:
    """Seconds since this process started (Linux: /proc), None where that cannot be read."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def grade_platform(settings: dict, uploads: Path, root: Path, exercises: Path) -> Outcome:
    """A platform's grading command after its imports: the warm start (:func:`warm_start`), then
    :func:`grade_as_built`; the Outcome's phases begin with the two (the Python start and imports
    up to here, and the warm start)."""
    started = since_start()
    t0 = time.perf_counter()
    warm_start(settings, root)
    warm = time.perf_counter() - t0
    out = grade_as_built(settings, uploads, root, exercises)
    out.phases = {**({"python start and imports": started} if started is not None else {}),
                  "warm start (tier, PyTorch, zygote)": warm, **out.phases}
    return out


def grade_as_built(settings: dict, uploads: Path, root: Path, exercises: Path) -> Outcome:
    """Grade the upload found in ``uploads`` into the course root ``root`` as a build's settings
    (its ``harness.json``) say; ``exercises``: the build's copy of the release."""
    a = settings["assignment"]
    return grade_upload(find_upload(uploads, a), a, root, Path(exercises) / a / f"{a}.ipynb",
                        timeout=int(settings.get("timeout") or 60), memory_mb=settings.get("memory_mb"),
                        unprotected=bool(settings.get("unprotected")))


def report(out: Outcome, results: dict, folder: Path) -> int:
    """Write a platform's ``results.json`` into ``folder`` (whole or not at all) and print the
    instructor's report; the exit status of the platform's grading command."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(folder / "results.json")
    print(out.instructor_report())
    return 0


def leave(rc: int) -> None:
    """End a platform's grading command once results.json is written: the zygote stopped (its
    children with it), the output flushed, and no teardown of PyTorch, nbgrader and nbconvert one
    object at a time (a second or more of the student's wait at half a CPU)."""
    import sys

    from ..isolation import zygote

    zygote.stop()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(rc)


def _gradebook_scores(root: Path, assignment: str) -> dict[str, float]:
    """{grade id: score} of the student's submission in nbgrader's gradebook (a manual score,
    which the outside verdict sets to 0 to withhold a cell, wins over the autograder's)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        try:
            nb = gb.find_submission_notebook(assignment, assignment, STUDENT)
        except MissingEntry:
            return {}
        return {g.name: float(g.score or 0.0) for g in nb.grades}
