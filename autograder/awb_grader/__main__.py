"""Command line: ``python -m awb_grader COMMAND`` (the Makefile wraps these)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    from .shards import intercept  # issue 21 hook: gradescope, prairielearn, merge, cohort --shard I/N
    if (code := intercept(argv, main)) is not None:
        return code
    ap = argparse.ArgumentParser(prog="python -m awb_grader", description="Attention Workbook grading tools")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("release", help="regenerate exercises/ from solutions/ with nbgrader generate_assignment")
    r.add_argument("assignments", nargs="*")
    r.add_argument("--check", action="store_true", help="only report whether exercises/ is in sync")
    sub.add_parser("demo", help="grade the demo cohort end to end and print the table")
    g = sub.add_parser("grade", help="the cohort command for one exercise: grade a zip or folder of its submissions")
    g.add_argument("assignment", help="e.g. 04 or 04_queries_keys_values")
    g.add_argument("submissions", type=Path, help="a zip (LMS download) or a folder of .ipynb files")
    g.add_argument("--course", type=Path, default=None, help="course root (default build/cohort)")
    g.add_argument("--timeout", type=int, default=60, help="cell time limit in seconds (default 60)")
    g.add_argument("--workers", type=int, default=None)
    g.add_argument("--unprotected", action="store_true", help="grade even where bubblewrap cannot run "
                                                              "(resource limits only): the grades are NOT protected")
    g.add_argument("--no-feedback", action="store_true")
    c = sub.add_parser("cohort", help="grade a whole cohort (every exercise) from one LMS zip or folder: "
                                      "collect, repair, sandboxed parallel autograde, feedback, CSV, summary")
    c.add_argument("submissions", type=Path, help="a zip (LMS download) or a folder of submissions")
    c.add_argument("--course", type=Path, default=None, help="course root (default build/cohort)")
    c.add_argument("--exercises", nargs="*", default=None, help="e.g. 04 05 (default: every exercise)")
    c.add_argument("--workers", type=int, default=None, help="parallel graders (default: CPU cores, at most 8)")
    c.add_argument("--pattern", default=None, help="file-name regular expression with (?P<student_id>...) "
                                                  "and (?P<file_id>NN_topic) groups, optionally (?P<timestamp>...)")
    c.add_argument("--timeout", type=int, default=60, help="cell time limit in seconds (default 60)")
    c.add_argument("--memory-mb", type=int, default=4096, help="memory limit of a student's kernel (default 4096)")
    c.add_argument("--unprotected", action="store_true", help="grade even where bubblewrap cannot run "
                                                              "(resource limits only): the grades are NOT protected")
    c.add_argument("--regrade", action="store_true", help="grade every submission again, changed or not")
    c.add_argument("--no-feedback", action="store_true")
    c.add_argument("--no-verdict", action="store_true", help="skip the outside-the-kernel re-check")
    adv = sub.add_parser("adversarial", help="write the adversarial cohort (hostile and broken submissions "
                                             "with honest ones) and grade it with the cohort command")
    adv.add_argument("--course", type=Path, default=None, help="where to write it (default build/adversarial)")
    adv.add_argument("--workers", type=int, default=None)
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
    if a.cmd in ("grade", "cohort"):
        from .cohort import DEFAULT_PATTERN, run_cohort
        from .course import REPO
        from .protect import Refused

        one = a.cmd == "grade"
        try:
            res = run_cohort(a.submissions, a.course or REPO / "build" / "cohort",
                             exercises=[a.assignment] if one else a.exercises, workers=a.workers,
                             pattern=DEFAULT_PATTERN if one else (a.pattern or DEFAULT_PATTERN), timeout=a.timeout,
                             unprotected=a.unprotected, regrade=not one and a.regrade, feedback=not a.no_feedback,
                             verdict=one or not a.no_verdict, memory_mb=4096 if one else a.memory_mb)
        except Refused as e:
            print(e, file=sys.stderr)
            return 3
        return 0 if res.records or res.unmatched else 2
    if a.cmd == "adversarial":
        import shutil

        from . import synth
        from .cohort import run_cohort
        from .course import EXERCISES, REPO

        where = (a.course or REPO / "build" / "adversarial").resolve()
        if where.exists():
            shutil.rmtree(where)
        from .sandbox import bwrap_works

        files = synth.adversarial_cohort(where / "submissions", EXERCISES / synth.ADV_ASSIGNMENT /
                                         f"{synth.ADV_ASSIGNMENT}.ipynb", REPO, sandboxed=bwrap_works())
        for name, f in sorted(files.items(), key=lambda kv: kv[1]["student"]):
            print(f"  {f['student']:<9} {f['kind']:<45} {name}")
        run_cohort(where / "submissions", where / "course", ["04"], a.workers, timeout=20)
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
