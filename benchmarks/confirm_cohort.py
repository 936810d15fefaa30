"""Grade a synthetic cohort of one exercise end to end with the cohort command, and check it.

    PYTHONPATH=autograder .venv/bin/python benchmarks/confirm_cohort.py [--students 300] [--workers 2]

Writes an LMS-style zip of ``--students`` submissions of one exercise (``awb_grader.devtools.synth``:
correct work, correct alternatives, catalogued mistakes, unanswered cells, syntax errors,
stripped metadata, corrupt files), runs the real command (``python -m awb_grader cohort``, in
a subprocess, sandbox and outside verdict on) and then checks what it produced against what
each synthetic student was made to be: every student has a grade or a flag, correct work
and alternatives get full marks, mistakes lose points, corrupt files are ungradable, and
``grades.csv`` (nbgrader's export) agrees with the cohort's own records. Prints the wall time,
the time per notebook, and the projection to 300 students x 9 exercises on 8 cores; exits 1
if a check fails.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "autograder"), str(REPO), str(REPO / "benchmarks")]

from machine_info import describe, load  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=300)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--exercise", default="04_queries_keys_values")
    ap.add_argument("--work", type=Path, default=None, help="folder to work in (default: a new temporary one)")
    a = ap.parse_args()

    from awb_grader.devtools import synth
    from awb_grader.core.course import EXERCISES

    work = a.work or Path(tempfile.mkdtemp(prefix="awb-confirm-"))
    work.mkdir(parents=True, exist_ok=True)
    plan = synth.make_cohort(work / "cohort.zip", EXERCISES, [a.exercise], a.students, seed=300)
    kinds = {s: k for (s, _), k in plan.items()}
    print(f"confirm_cohort: {a.students} students x {a.exercise}, {a.workers} workers")
    print(describe())
    print("cohort: " + ", ".join(f"{k} x{n}" for k, n in sorted(Counter(kinds.values()).items())))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "autograder"), str(REPO),
                                                        os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "awb_grader", "cohort", str(work / "cohort.zip"),
                           "--course", str(work / "course"), "--exercises", a.exercise[:2],
                           "--workers", str(a.workers)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    print(f"cohort command: exit {proc.returncode}, {wall:.0f} s wall  [{load()}]")
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return 1
    print("\n".join(line for line in proc.stdout.splitlines() if line.startswith(("sandbox:", "cohort:"))))

    state = json.loads((work / "course" / "cohort_state.json").read_text())
    records = state[a.exercise]
    with open(work / "course" / "grades.csv") as fh:
        exported = {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh)}
    problems = []
    missing = sorted(set(kinds) - set(records))
    if missing:
        problems.append(f"{len(missing)} students have no record: {missing[:5]}")
    full = max(r["max_score"] for r in records.values())
    for student, kind in sorted(kinds.items()):
        r = records.get(student)
        if r is None:
            continue
        if kind == "corrupt":
            ok = r["status"] == "ungradable"
        elif kind in ("correct", "alternative", "stripped_metadata"):
            ok = r["score"] == full
        else:                                   # mistakes, unanswered cells, a syntax error
            ok = r["score"] < full
        if not ok:
            problems.append(f"{student} ({kind}): {r['score']}/{full}, {r['status']}, {r['reasons'][:2]}")
        if r["status"] != "ungradable" and exported.get(student) != r["score"]:
            problems.append(f"{student}: grades.csv says {exported.get(student)}, the record {r['score']}")
    graded = [r for r in records.values() if r["status"] != "ungradable"]
    per_nb = wall / max(1, len(graded))
    in_worker = sorted(r["seconds"] for r in graded)
    print(
        f"graded {len(graded)} notebooks ({len(records) - len(graded)} ungradable): {per_nb:.2f} s per notebook "
        f"of wall time with {a.workers} workers; in its worker a notebook took {in_worker[len(in_worker) // 2]:.2f} s "
        f"(median), {in_worker[-1]:.2f} s at most"
    )
    print(f"statuses: {dict(Counter(r['status'] for r in records.values()))}")
    total = 300 * 9 * per_nb
    print(f"projection, 300 students x 9 exercises: {total / 3600:.2f} h on this machine ({a.workers} workers); "
          f"{total * a.workers / 8 / 3600:.2f} h with 8 workers on 8 idle cores if it scales as the "
          f"{a.workers} workers did here (exercise {a.exercise[:2]} as the typical notebook)")
    print(f"checks: {'all passed' if not problems else f'{len(problems)} FAILED'}")
    for p in problems[:20]:
        print("  " + p)
    print(f"kept {work}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
