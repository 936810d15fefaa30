"""Command line: ``python -m awb_grader COMMAND`` (the Makefile wraps these)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m awb_grader", description="Attention Workbook grading tools")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("release", help="regenerate exercises/ from solutions/ with nbgrader generate_assignment")
    r.add_argument("assignments", nargs="*")
    r.add_argument("--check", action="store_true", help="only report whether exercises/ is in sync")
    sub.add_parser("demo", help="grade the demo cohort end to end and print the table")
    g = sub.add_parser("grade", help="grade a zip or folder of submissions for one assignment")
    g.add_argument("assignment")
    g.add_argument("submissions", type=Path, help="a zip (LMS download) or a folder of .ipynb files")
    g.add_argument("--course", type=Path, default=None, help="course root (default build/course)")
    g.add_argument("--timeout", type=int, default=None, help="cell time limit in seconds (default 120)")
    g.add_argument("--no-feedback", action="store_true")
    a = ap.parse_args(argv)

    if a.cmd == "release":
        from . import release

        if a.check:
            problems = release.diff(a.assignments or None)
            print("\n".join(problems) if problems else "exercises/ is in sync with solutions/")
            return 1 if problems else 0
        for p in release.write_release(a.assignments or None):
            print(f"released {release.relpath(p)}")
        return 0
    if a.cmd == "demo":
        from . import demo

        demo.run()
        return 0
    if a.cmd == "grade":
        from .course import REPO, Course
        from .pipeline import collect, grade_submissions, table, write_flags_csv

        course = Course(a.course or REPO / "build" / "course", timeout=a.timeout)
        subs = collect(a.submissions, a.assignment, course.root / "downloaded" / a.assignment)
        if not subs:
            print(f"no submissions found in {a.submissions}", file=sys.stderr)
            return 2
        course.generate_assignment(a.assignment)
        rows = grade_submissions(course, a.assignment, subs, feedback=not a.no_feedback)
        course.export_csv(course.root / "grades.csv")
        write_flags_csv(rows, course.root / f"flags_{a.assignment}.csv")
        print(table(rows))
        print(f"\ngrades: {course.root / 'grades.csv'}\nflags:  {course.root / f'flags_{a.assignment}.csv'}")
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
