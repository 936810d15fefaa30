"""A cohort on a cluster: ``cohort --shard I/N`` on every node, then ``merge``.

The engine is the cluster's own (a Slurm job array, a Kubernetes Indexed Job: ``cluster/``);
nothing here schedules. Each array task runs the ordinary cohort command on the whole LMS zip
with ``--shard I/N``: it collects everything (nbgrader's zip_collect, the same on every node)
and grades only its **deterministic slice** (:func:`select`: the collected (exercise, student)
pairs in sorted order, every N-th from the I-th) into a course root of its own,
``<course>/cluster/shard-I-of-N/`` (its own gradebook; the course folder is on a shared file
system). I defaults to ``SLURM_ARRAY_TASK_ID`` or Kubernetes' ``JOB_COMPLETION_INDEX``.

``python -m awb_grader merge`` then folds every shard's gradebook into the course's through
nbgrader's ``Gradebook`` API (``core.gradebook.submission_data`` / ``store_submission``, the same
writes the parallel workers' merge does), copies each graded submission's folders, joins the
shards' ``cohort_state.json`` and lets the cohort command export ``grades.csv``, ``flags.csv``
and the summary over the whole cohort. Merging overwrites each submission with its shard's
copy, so merging twice changes nothing, and a shard that died is re-run alone and merged again.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

STEPS = ("submitted", "autograded", "feedback", "originals")
ENV_INDEX = ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX")
NOTHING = "nothing graded in the shards"


def parse(spec: str, env: dict | None = None) -> tuple[int, int]:
    """``"I/N"``, or ``"N"`` / ``"/N"`` with I from the cluster's environment."""
    env = os.environ if env is None else env
    spec = str(spec).strip()
    i_text, _, n_text = spec.rpartition("/") if "/" in spec else ("", "", spec)
    if not i_text:
        found = [env[k] for k in ENV_INDEX if env.get(k, "").strip()]
        if not found:
            raise SystemExit(f"--shard {spec}: no shard index given and neither {' nor '.join(ENV_INDEX)} is set")
        i_text = found[0]
    try:
        i, n = int(i_text), int(n_text)
    except ValueError:
        raise SystemExit(f"--shard {spec!r}: expected I/N (e.g. 3/10) or N") from None
    if not (n >= 1 and 0 <= i < n):
        raise SystemExit(f"--shard {spec!r}: need 0 <= I < N (Slurm: --array=0-{max(n - 1, 0)})")
    return i, n


def select(subs: dict, i: int, n: int) -> dict:
    """The slice of collected submissions ({exercise: {student: ...}}) that shard ``i`` of ``n``
    grades: the (exercise, student) pairs in sorted order, every n-th from the i-th. The same zip
    gives the same slices on every node, and together they are the whole cohort, once."""
    pairs = sorted((a, s) for a, per in subs.items() for s in per)
    mine = {p for k, p in enumerate(pairs) if k % n == i}
    out: dict = {}
    for a, per in subs.items():
        kept = {s: v for s, v in per.items() if (a, s) in mine}
        if kept:
            out[a] = kept
    return out


def shard_root(course: Path, i: int, n: int) -> Path:
    return Path(course) / "cluster" / f"shard-{i:04d}-of-{n:04d}"


def shard_roots(course: Path) -> list[Path]:
    return sorted(p for p in (Path(course) / "cluster").glob("shard-*") if (p / "gradebook.db").exists())


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

    from .run import build_course, load_state, save_state
    from ..core.gradebook import store_submission, submission_data

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
                        for step in STEPS:
                            d, f = course / step / s / a, Path(r) / step / s / a
                            if d.exists():
                                shutil.rmtree(d)
                            if f.exists():
                                shutil.copytree(f, d)
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
