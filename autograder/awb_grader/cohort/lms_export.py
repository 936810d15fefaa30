"""Grades the LMS imports: Canvas's and Moodle's grade-import CSV, one column per exercise.

Both are written from nbgrader's gradebook (what ``grades.csv`` exports): a student with a
submission gets its score (an ungradable one its flagged 0); a student who submitted nothing
for an exercise gets an empty cell, never 0, and both LMSs read an empty cell as "no grade".

* **Canvas** (the Gradebook's *Import*, the format of its own *Export*): a header
  ``Student, ID, SIS User ID, SIS Login ID, Section`` then one column per assignment, and a
  ``Points Possible`` row under it. Canvas matches a row by ``ID``, its numeric user id, which
  it also writes into the name of every downloaded submission,
  ``lastfirst[_late]_USERID_SUBMISSIONID_file``: the collector keeps the file names
  (``lms_ids.json`` in the course root remembers them over runs) and the user id is read from
  them here; the name part is the nbgrader student id. A student whose files did not carry
  one gets an empty ``ID``, and Canvas falls back to the name in ``Student``. A column whose
  title is not an existing assignment's becomes a new assignment worth its Points Possible.
* **Moodle** (*Grades > Import > CSV file*): a header row, one column that identifies the user
  (``Username``: map it to "username" in the import form) and one column per grade item
  (mapped to an existing grade item or to "new grade item" in the form).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path

IDS = "lms_ids.json"
CANVAS_FILE = re.compile(r"^(?P<name>[^_/]+)_(?:late_)?(?P<user_id>\d+)_(?P<submission_id>\d+)_", re.I)


@dataclass
class Grades:
    """The gradebook as the LMS files need it."""
    assignments: list          # names, in order
    max_score: dict            # assignment -> points possible
    students: list             # ids, sorted
    score: dict                # (student, assignment) -> score; absent = nothing submitted


def read_gradebook(db_url: str) -> Grades:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        names = sorted(a.name for a in gb.assignments)
        students = sorted(s.id for s in gb.students)
        mx, score = {}, {}
        for a in names:
            mx[a] = float(gb.find_assignment(a).max_score or 0)
            for s in students:
                try:
                    sub = gb.find_submission(a, s)
                except MissingEntry:
                    continue
                score[(s, a)] = max(0.0, float(sub.score or 0) - float(sub.late_submission_penalty or 0))
    return Grades(names, mx, students, score)


def canvas_id(file_name: str, student: str) -> str | None:
    """The Canvas user id in a downloaded submission's name, when its name part is ``student``."""
    m = CANVAS_FILE.match(Path(file_name).name)
    return m["user_id"] if m and m["name"] == student else None


def remember(root: Path, sources: dict) -> dict:
    """Fold this run's ``{(student, assignment): original file name}`` into ``lms_ids.json``
    ({student: {"canvas_user_id", "file"}}); returns the whole table."""
    p = Path(root) / IDS
    table = json.loads(p.read_text()) if p.exists() else {}
    for (student, _a), name in sorted(sources.items()):
        uid = canvas_id(name, student)
        if uid:
            table[student] = {"canvas_user_id": uid, "file": name}
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
    tmp.replace(p)
    return table


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def _cell(g: Grades, s: str, a: str) -> str:
    return _fmt(g.score[(s, a)]) if (s, a) in g.score else ""


def write_canvas(g: Grades, ids: dict, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *g.assignments])
        w.writerow(["Points Possible", "", "", "", "", *(_fmt(g.max_score[a]) for a in g.assignments)])
        for s in g.students:
            uid = ids.get(s, {}).get("canvas_user_id", "")
            w.writerow([s, uid, "", "", "", *(_cell(g, s, a) for a in g.assignments)])
    return dest


def write_moodle(g: Grades, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Username", *g.assignments])
        for s in g.students:
            w.writerow([s, *(_cell(g, s, a) for a in g.assignments)])
    return dest


def export(root: Path, db_url: str, sources: dict | None = None) -> list[str]:
    """Write ``lms/canvas_grades.csv`` and ``lms/moodle_grades.csv`` under the course root;
    returns the lines that say where they are."""
    root = Path(root)
    ids = remember(root, sources or {})
    g = read_gradebook(db_url)
    canvas = write_canvas(g, ids, root / "lms" / "canvas_grades.csv")
    moodle = write_moodle(g, root / "lms" / "moodle_grades.csv")
    missing = [s for s in g.students if s not in ids]
    lines = [f"Canvas:   {canvas} (Grades > Import; students matched by Canvas user id"
             + (f", {len(missing)} without one matched by name" if missing else "") + ")",
             f"Moodle:   {moodle} (Grades > Import > CSV file; map Username to username)"]
    return lines
