"""Command line: ``python -m awb_grader COMMAND`` (the Makefile wraps these).

One subcommand, one handler: ``release``, ``demo``, ``grade`` (one exercise), ``cohort`` (every
exercise; ``--shard I/N`` on a cluster node), ``merge`` (the shards), ``adversarial``,
``gradescope`` and ``prairielearn`` (a platform's build). Exit codes: 0 done, 1 ``release
--check`` found exercises/ out of sync, 2 nothing to grade or merge, 3 refused (no isolation tier).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cohort import cluster, shards
from .core.course import COHORT_ROOT, REPO
from .platforms import gradescope, prairielearn


def cmd_release(a) -> int:
    from .devtools import release

    if a.check:
        problems = release.diff(a.assignments or None)
        print("\n".join(problems) if problems else "exercises/ is in sync with solutions/")
        return 1 if problems else 0
    for p in release.write_release(a.assignments or None):
        print(f"released {release.relpath(p)}")
    return 0


def cmd_demo(a) -> int:
    from .devtools import demo

    demo.run()
    return 0


def cmd_grade(a) -> int:
    a.exercises = [a.assignment]
    return cmd_cohort(a)


def cmd_cohort(a) -> int:
    """Grade; 2 when the source held nothing to grade, 3 when refused (no isolation tier)."""
    from .cohort.collect import DEFAULT_PATTERN
    from .cohort.run import run_cohort
    from .isolation.sandbox import Refused

    root, shard = a.course, None
    if a.shard is not None:
        shard = shards.parse(a.shard)
        root = shards.shard_root(a.course, *shard)
        print(f"shard {shard[0]}/{shard[1]}: grading its slice into {root}")
    try:
        res = run_cohort(a.submissions, root, a.exercises, workers=a.workers, pattern=a.pattern or DEFAULT_PATTERN,
                         timeout=a.timeout, memory_mb=a.memory_mb, unprotected=a.unprotected, regrade=a.regrade,
                         feedback=not a.no_feedback, verdict=not a.no_verdict, shard=shard)
    except Refused as e:
        print(e, file=sys.stderr)
        return 3
    if res.records or res.unmatched:
        return 0
    if shard:        # more shards than submissions: an empty slice is not a failed array task,
        print(f"shard {shard[0]}/{shard[1]}: no submission in this slice")    # or the merge never runs
        return 0
    return 2


def cmd_adversarial(a) -> int:
    import shutil

    from .cohort.run import run_cohort
    from .core.course import EXERCISES
    from .devtools import synth
    from .isolation.tiers import protected

    where = a.course.resolve()
    if where.exists():
        shutil.rmtree(where)
    files = synth.adversarial_cohort(where / "submissions", EXERCISES / synth.ADV_ASSIGNMENT /
                                     f"{synth.ADV_ASSIGNMENT}.ipynb", REPO, sandboxed=protected())
    for name, f in sorted(files.items(), key=lambda kv: kv[1]["student"]):
        print(f"  {f['student']:<9} {f['kind']:<45} {name}")
    run_cohort(where / "submissions", where / "course", [synth.ADV_ASSIGNMENT], workers=a.workers, timeout=20)
    return 0


def _grading_options(p: argparse.ArgumentParser) -> None:
    """What ``grade`` and ``cohort`` both take."""
    p.add_argument("--course", type=Path, default=COHORT_ROOT, help="course root (default build/cohort)")
    p.add_argument("--timeout", type=int, default=60, help="cell time limit in seconds (default 60)")
    p.add_argument("--workers", type=int, default=None, help="parallel graders (default: CPU cores, at most 8)")
    p.add_argument("--unprotected", action="store_true", help="grade even where no isolation tier can run "
                                                              "(resource limits only): the grades are NOT protected")
    p.add_argument("--no-feedback", action="store_true")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m awb_grader", description="Attention Workbook grading tools")
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("release", help="regenerate exercises/ from solutions/ with nbgrader generate_assignment")
    p.add_argument("assignments", nargs="*")
    p.add_argument("--check", action="store_true", help="only report whether exercises/ is in sync")
    p.set_defaults(run=cmd_release)

    sub.add_parser("demo", help="grade the demo cohort end to end and print the table").set_defaults(run=cmd_demo)

    p = sub.add_parser("grade", help="the cohort command for one exercise: grade a zip or folder of its submissions")
    p.add_argument("assignment", help="e.g. 04 or 04_queries_keys_values")
    p.add_argument("submissions", type=Path, help="a zip (LMS download) or a folder of .ipynb files")
    _grading_options(p)
    p.set_defaults(run=cmd_grade, pattern=None, memory_mb=None, regrade=False, no_verdict=False, shard=None)

    p = sub.add_parser("cohort", help="grade a whole cohort (every exercise) from one LMS zip or folder: "
                                      "collect, repair, sandboxed parallel autograde, feedback, CSV, summary")
    p.add_argument("submissions", type=Path, help="a zip (LMS download) or a folder of submissions")
    p.add_argument("--exercises", nargs="*", default=None, help="e.g. 04 05 (default: every exercise)")
    p.add_argument("--pattern", default=None, help="file-name regular expression with "
                   "(?P<student_id>...) and (?P<file_id>NN_topic) groups, optionally (?P<timestamp>...)")
    p.add_argument("--memory-mb", type=int, default=None, help="memory limit of a student's kernel (default 4096)")
    p.add_argument("--regrade", action="store_true", help="grade every submission again, changed or not")
    p.add_argument("--no-verdict", action="store_true",
                   help="run no hidden check (they run only outside the kernel): scores from the visible checks alone")
    p.add_argument("--shard", default=None, metavar="I/N",
                   help="on a cluster node: grade slice I of N (I from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX "
                        "when only N is given) into COURSE/cluster/shard-I-of-N; then run merge")
    _grading_options(p)
    p.set_defaults(run=cmd_cohort)

    p = sub.add_parser("merge", help="fold cluster shards' gradebooks into the course's (idempotent)")
    cluster.add_merge_arguments(p)
    p.set_defaults(run=cluster.merge_command)

    p = sub.add_parser("adversarial", help="write the adversarial cohort (hostile and broken submissions "
                                           "with honest ones) and grade it with the cohort command")
    p.add_argument("--course", type=Path, default=REPO / "build" / "adversarial",
                   help="where to write it (default build/adversarial)")
    p.add_argument("--workers", type=int, default=None)
    p.set_defaults(run=cmd_adversarial)

    p = sub.add_parser("gradescope", help="write an exercise's Gradescope autograder zip")
    gradescope.add_arguments(p)
    p.set_defaults(run=gradescope.command)

    p = sub.add_parser("prairielearn", help="write an exercise's PrairieLearn question and course files")
    prairielearn.add_arguments(p)
    p.set_defaults(run=prairielearn.command)
    return ap


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    return a.run(a)


if __name__ == "__main__":
    raise SystemExit(main())
