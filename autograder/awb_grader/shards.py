"""A cohort on a cluster: ``cohort --shard I/N`` on every node, then ``merge``.

The engine is the cluster's own (a Slurm job array, a Kubernetes Indexed Job: ``cluster/``);
nothing here schedules. Each array task runs the ordinary cohort command on the whole LMS zip
with ``--shard I/N``: it collects everything (nbgrader's zip_collect, the same on every node)
and grades only its **deterministic slice** (:func:`select`: the collected (exercise, student)
pairs in sorted order, every N-th from the I-th) into a course root of its own,
``<course>/cluster/shard-I-of-N/`` (its own gradebook; the course folder is on a shared file
system). I defaults to ``SLURM_ARRAY_TASK_ID`` or Kubernetes' ``JOB_COMPLETION_INDEX``.

``python -m awb_grader merge`` then folds every shard's gradebook into the course's through
nbgrader's ``Gradebook`` API (``parallel.submission_data`` / ``store_submission``, the same
writes the parallel workers' merge does), copies each graded submission's folders, joins the
shards' ``cohort_state.json`` and lets the cohort command export ``grades.csv``, ``flags.csv``
and the summary over the whole cohort. Merging overwrites each submission with its shard's
copy, so merging twice changes nothing, and a shard that died is re-run alone and merged again.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

STEPS = ("submitted", "autograded", "feedback", "originals")
STATE = "cohort_state.json"
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


# -- the command line (hooked into ``python -m awb_grader``) -----------------------------------
ACTIVE: tuple[int, int] | None = None   # the shard of the ``cohort --shard`` command running now


def intercept(argv, main) -> int | None:
    """Handle ``gradescope``, ``prairielearn``, ``merge`` and ``cohort ... --shard I/N``; None
    for every other command (``__main__`` goes on as before)."""
    global ACTIVE
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        return None
    if argv[0] == "gradescope":
        from . import gradescope

        return gradescope.main(argv[1:])
    if argv[0] == "prairielearn":
        from . import prairielearn

        return prairielearn.main(argv[1:])
    if argv[0] == "merge":
        return merge_main(argv[1:])
    if argv[0] != "cohort" or not any(x == "--shard" or x.startswith("--shard=") for x in argv):
        return None
    rest, spec, course = [], None, None
    it = iter(argv)
    for x in it:
        if x == "--shard":
            spec = next(it, "")
        elif x.startswith("--shard="):
            spec = x.split("=", 1)[1]
        elif x == "--course":
            course = next(it, "")
        elif x.startswith("--course="):
            course = x.split("=", 1)[1]
        else:
            rest.append(x)
    i, n = parse(spec or "")
    from .course import REPO

    root = shard_root(Path(course) if course else REPO / "build" / "cohort", i, n)
    print(f"shard {i}/{n}: grading its slice into {root}")
    ACTIVE = (i, n)
    try:
        code = main(rest + ["--course", str(root)])
    finally:
        ACTIVE = None
    if code == 2:        # nothing in this slice (more shards than submissions): not a failed task,
        print(f"shard {i}/{n}: no submission in this slice")   # or the dependent merge never runs
        return 0
    return code


def merge_main(argv) -> int:
    import argparse

    from .course import REPO

    ap = argparse.ArgumentParser(prog="python -m awb_grader merge",
                                 description="fold cluster shards' gradebooks into the course's (idempotent)")
    ap.add_argument("shards", nargs="*", type=Path, help="shard course roots (default: COURSE/cluster/shard-*)")
    ap.add_argument("--course", type=Path, default=None, help="course root (default build/cohort)")
    a = ap.parse_args(argv)
    course = (a.course or REPO / "build" / "cohort").resolve()
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


def _cohort_over_nothing(course: Path, names: list[str], say=_quiet):
    """The cohort command over an empty folder: builds the course (generate_assignment) where
    needed, and exports grades.csv, flags.csv and the summary from the gradebook and state."""
    from .cohort import run_cohort
    from .harness import _cohort_kwargs, nothing_to_protect

    empty = course / "cluster" / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    return run_cohort(empty, course, **_cohort_kwargs(exercises=names, workers=1, feedback=False, progress=False,
                                                      say=say, unprotected=nothing_to_protect()))


def merge(course: Path, roots: list[Path], say=print) -> str:
    """Fold the shards ``roots`` into ``course``; returns the cohort summary."""
    from nbgrader.api import Gradebook

    from .parallel import store_submission, submission_data

    course = Path(course).resolve()
    states = {}
    for r in roots:
        p = Path(r) / STATE
        states[Path(r)] = json.loads(p.read_text()) if p.exists() else {}
    names = sorted({a for st in states.values() for a in st})
    if not names:
        return NOTHING
    import time

    t0 = time.perf_counter()
    _cohort_over_nothing(course, names)
    t_build = time.perf_counter() - t0
    main_state_path = course / STATE
    merged = json.loads(main_state_path.read_text()) if main_state_path.exists() else {}
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
    tmp = course / (STATE + ".tmp")
    tmp.write_text(json.dumps({a: dict(sorted(p.items())) for a, p in sorted(merged.items())}, indent=1))
    tmp.replace(main_state_path)
    t_fold = time.perf_counter() - t0 - t_build
    res = _cohort_over_nothing(course, names)
    t_export = time.perf_counter() - t0 - t_build - t_fold
    say(f"merged {n} submission(s) from {len(roots)} shard(s) into {course}: "
        f"fold {t_fold:.2f} s, course build {t_build:.1f} s, export {t_export:.1f} s")
    return res.summary
