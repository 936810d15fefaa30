"""``python -m awb_grader merge``: fold the shards of a cluster run (``cohort --shard I/N`` on every
node, :mod:`shards`) into the course, then export over the whole cohort."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .merge import take_folders
from .shards import shard_roots

NOTHING = "nothing graded in the shards"


# -- the command line: ``python -m awb_grader merge`` (``__main__``) ----------------------------
def add_merge_arguments(p) -> None:
    from ..core.course import COHORT_ROOT

    p.add_argument("shards", nargs="*", type=Path, help="shard course roots (default: COURSE/cluster/shard-*)")
    p.add_argument("--course", type=Path, default=COHORT_ROOT, help="course root (default build/cohort)")


def merge_command(a) -> int:
    """Merge, print the cohort's summary; 2 when there was nothing to merge."""
    course = a.course.resolve()
    roots = [p.resolve() for p in a.shards] or shard_roots(course)
    if not roots:
        print(f"no shard gradebooks under {course / 'cluster'}", file=sys.stderr)
        return 2
    summary = merge(course, roots)
    print(summary)
    return 0 if summary != NOTHING else 2


# -- the merge ---------------------------------------------------------------------------------
def _quiet(*_a, **_k):
    pass


def merge(course: Path, roots: list[Path], say=print) -> str:
    """Fold the shards ``roots`` into ``course``; returns the cohort summary."""
    from nbgrader.api import Gradebook

    from ..core.gradebook import store_submission, submission_data
    from .run import build_course
    from .state import load_state, save_state

    course = Path(course).resolve()
    states = {Path(r): load_state(r) for r in roots}
    names = sorted({a for st in states.values() for a in st})
    if not names:
        return NOTHING
    empty = course / "cluster" / "empty"
    t0 = time.perf_counter()
    build_course(course, names, empty, say=_quiet)
    t_build = time.perf_counter() - t0
    merged = load_state(course)
    n = 0
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as dst:
        for r, st in states.items():
            with Gradebook(f"sqlite:///{Path(r) / 'gradebook.db'}") as src:
                for a, per in sorted(st.items()):
                    for s, rec in sorted(per.items()):
                        take_folders(r, course, a, s, move=False)
                        data = submission_data(src, a, s)
                        if data is not None:
                            store_submission(dst, a, s, data)
                        merged.setdefault(a, {})[s] = rec
                        n += 1
    save_state(course, merged)
    t_fold = time.perf_counter() - t0 - t_build
    res = build_course(course, names, empty, say=_quiet)
    t_export = time.perf_counter() - t0 - t_build - t_fold
    say(f"merged {n} submission(s) from {len(roots)} shard(s) into {course}: "
        f"fold {t_fold:.2f} s, course build {t_build:.1f} s, export {t_export:.1f} s")
    return res.summary
