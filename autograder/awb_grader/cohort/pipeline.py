"""Grade a set of submissions for one assignment: inspect/repair, autograde, feedback.

One broken submission never stops the batch: each step's failure becomes that student's
flag, with the reason, and the next student is graded.
"""

from __future__ import annotations

import csv
import re
import shutil
import textwrap
from pathlib import Path

from tqdm.auto import tqdm

from ..core.course import Course
from ..core.gradebook import record_ungradable
from ..core.metadata import cell_meta, verdict_of
from ..core.records import FLAGGED, OK, REPAIRED, UNGRADABLE, Record, points_text
from .submissions import Inspection, inspect_notebook


def grade_submissions(course: Course, assignment: str, submissions: dict[str, Path],
                      feedback: bool = True, progress: bool = True,
                      timestamps: dict[str, str | None] | None = None) -> list[Record]:
    """``submissions``: {student_id: notebook path}; ``timestamps``: {student_id: submission
    time as nbgrader's timestamp.txt holds it} where known. Returns one Record per student."""
    release_nb = course.release_root / assignment / f"{assignment}.ipynb"
    if not release_nb.exists():
        course.generate_assignment(assignment)
    max_scores = None
    rows = []
    for student, src in tqdm(sorted(submissions.items()), desc=f"grading {assignment}", disable=not progress):
        row = Record(assignment, student)
        dest = course.submit(student, assignment, src, timestamp=(timestamps or {}).get(student))
        nb_path = dest / f"{assignment}.ipynb"
        ins: Inspection = inspect_notebook(nb_path, release_nb, course.root / "originals" / student / assignment)
        row.status, row.reasons = ins.status, list(ins.reasons)
        if max_scores is None:
            max_scores = (
                course.max_scores(assignment) if (course.root / "gradebook.db").exists() or course.db_url else None
            )
        if ins.status == UNGRADABLE:
            _forget_old_grade(course, assignment, student)
            try:        # formgrader shows it flagged, with the reason (core/gradebook.py)
                record_ungradable(course, assignment, student, row.reasons)
            except Exception as e:  # noqa: BLE001 - the student keeps the status and reason here
                row.reasons.append(f"not recorded in the gradebook ({type(e).__name__}: {str(e)[:150]})")
            rows.append(row)
            continue
        for attempt in range(2):  # one retry: a kernel that failed to start must not zero a student
            try:
                res = course.autograde(assignment, student)
            except Exception as e:  # noqa: BLE001 - recorded as the student's flag, batch goes on
                res = {"success": False, "error": f"{type(e).__name__}: {e}", "log": ""}
            if res["success"]:
                break
        if not res["success"]:
            row.status = FLAGGED
            row.reasons.append("nbgrader could not grade it: " + _failure_reason(res))
            rows.append(row)
            continue
        scores = course.scores(assignment, student)
        max_scores = course.max_scores(assignment)
        row.score = sum(scores.values())
        row.failed_cells = [c for c, s in scores.items() if s < max_scores.get(c, 0)]
        row.misconceptions, row.unanswered, row.errors = _diagnose(course, assignment, student, row.failed_cells)
        # what nbgrader's own autograde steps decided (core/preprocessors/outside_verdict.py): every door reads it here
        verdict = verdict_of(course.path("autograded", student, assignment) / f"{assignment}.ipynb")
        row.reasons.extend(verdict.get("reasons", []))
        if verdict.get("status") == FLAGGED and row.status in (OK, REPAIRED):
            row.status = FLAGGED
        if feedback:
            fb = course.generate_feedback(assignment, student)
            if not fb["success"]:
                row.reasons.append("feedback could not be generated: " + _first_line(fb.get("error")))
        rows.append(row)
    max_total = sum((max_scores or course.max_scores(assignment)).values())
    for row in rows:
        row.max_score = max_total
    return rows


def _failure_reason(res: dict) -> str:
    """The error that made nbgrader give up (its own summary line only says 'see above')."""
    text = f"{res.get('log') or ''}\n{res.get('error') or ''}"
    lines = [ln.strip() for ln in text.splitlines()
             if re.search(r"\w(Error|Exception)\b", ln) and "NbGraderException" not in ln and "Please see" not in ln]
    return lines[-1][:200] if lines else _first_line(res.get("error") or res.get("log"))


def _first_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip() and "Traceback" not in ln]
    return lines[-1][:200] if lines else "unknown error"


def _diagnose(course: Course, assignment: str, student: str,
              failed: list[str]) -> tuple[list[str], list[str], dict[str, str]]:
    """(labels of the catalogued mistakes the failing checks' messages name, answer cells
    still holding the release's stub, {failing cell: its error text}) for one autograded submission."""
    import nbformat

    from .. import catalog
    from ..core.outputs import error_text
    from .submissions import norm

    p = course.path("autograded", student, assignment) / f"{assignment}.ipynb"
    release_nb = course.release_root / assignment / f"{assignment}.ipynb"
    if not p.exists() or not release_nb.exists():
        return [], [], {}
    stubs = {c.metadata["nbgrader"]["grade_id"]: norm(c.source) for c in nbformat.read(release_nb, as_version=4).cells
             if cell_meta(c).get("solution") and c.cell_type == "code"}
    nb = nbformat.read(p, as_version=4)
    unanswered = [gid for c in nb.cells if (gid := cell_meta(c).get("grade_id")) in stubs
                  and norm(c.source) == stubs[gid]]
    errors = {c: error_text(nb, c) for c in failed}
    named = [" or ".join(m.short for m in group) for group in catalog.named_by_errors(assignment, failed, errors)
             if group[0].cell not in unanswered]
    return list(dict.fromkeys(named)), unanswered, {c: text[:600] for c, text in errors.items()}


def _forget_old_grade(course: Course, assignment: str, student: str) -> None:
    """An ungradable resubmission must not keep a previous run's autograded copy around."""
    for step in ("autograded", "feedback"):
        d = course.path(step, student, assignment)
        if d.exists():
            shutil.rmtree(d)


def write_flags(records: list[Record], dest: Path, unmatched: list[str] = (), unread: list = ()) -> Path:
    """``flags.csv``: every submission's status, reasons and failed cells, then one row per file
    that names no exercise (the cohort command's collector lists them) and one per file or
    member of the download that was not read, with why (``uploads.SafeExtractor``)."""
    with open(dest, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["student", "assignment", "score", "max_score", "status", "reasons", "failed_cells"])
        for r in records:
            w.writerow([r.student, r.assignment, points_text(r.score), points_text(r.max_score), r.status,
                        " | ".join(r.reasons), " ".join(r.failed_cells)])
        for f in unmatched:
            w.writerow(["?", "?", "", "", "unmatched",
                        f"file {f!r} names no exercise (expected <student>_NN_topic.ipynb)", ""])
        for f, why in unread:
            w.writerow(["?", "?", "", "", "not read", f"{f!r}: {why}", ""])
    return dest


def table(rows: list[Record], notes_width: int = 80) -> str:
    """One line per student (long notes wrap under their column): score, status, then the
    mistakes their errors name, unanswered cells, and every flag or repair with its reason."""
    head = ["student", "score", "status", "notes"]
    body = [[r.student, f"{points_text(r.score)}/{points_text(r.max_score)}", r.status, "; ".join(r.notes) or "-"]
            for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    widths[-1] = min(widths[-1], notes_width)
    indent = " " * (sum(widths[:-1]) + 2 * (len(widths) - 1))

    def line(cells):
        first = "  ".join(str(c).ljust(w) for c, w in zip(cells[:-1], widths))
        notes = textwrap.wrap(cells[-1], widths[-1], break_on_hyphens=False) or [""]
        return "\n".join([f"{first}  {notes[0]}".rstrip()] + [indent + n for n in notes[1:]])

    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])
