"""A cohort on a cluster: ``cohort --shard I/N`` on every node, then ``merge``.

The engine is the cluster's own (a Slurm job array, a Kubernetes Indexed Job: ``cluster/``);
nothing here schedules. Each array task runs the ordinary cohort command on the whole LMS zip
with ``--shard I/N``: it collects everything (nbgrader's zip_collect, the same on every node)
and grades only its **deterministic slice** (:func:`select`: the collected (exercise, student)
pairs in sorted order, every N-th from the I-th) into a course root of its own,
``<course>/cluster/shard-I-of-N/`` (its own gradebook; the course folder is on a shared file
system). I defaults to ``SLURM_ARRAY_TASK_ID`` or Kubernetes' ``JOB_COMPLETION_INDEX``.

``python -m awb_grader merge`` (:mod:`cluster`) then folds every shard's gradebook into the course's through
nbgrader's ``Gradebook`` API (``core.gradebook.submission_data`` / ``store_submission``, the same
writes the parallel workers' merge does), copies each graded submission's folders, joins the
shards' ``cohort_state.json`` and lets the cohort command export ``grades.csv``, ``flags.csv``
and the summary over the whole cohort. Merging overwrites each submission with its shard's
copy, so merging twice changes nothing, and a shard that died is re-run alone and merged again.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_INDEX = ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX")


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
