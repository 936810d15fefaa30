"""The merge of one graded submission into the main course: its per-student folders, then what
nbgrader recorded for it, written into the main gradebook (``core.gradebook.store_submission``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..core.course import Course
from ..core.gradebook import store_submission
from ..core.records import FLAGGED, Record

STEPS = ("submitted", "autograded", "feedback", "originals")    # a submission's folders in a course root


def take_folders(src_root: Path | None, dst_root: Path, assignment: str, student: str, move: bool = True) -> None:
    """Replace one submission's folders (:data:`STEPS`) in course root ``dst_root`` with those in
    ``src_root`` (moved, or copied where ``move`` is False); where ``src_root`` is None or has
    none, the submission's folders in ``dst_root`` are only removed."""
    for step in STEPS:
        dest = Path(dst_root) / step / student / assignment
        if dest.exists():
            shutil.rmtree(dest)
        src = Path(src_root) / step / student / assignment if src_root is not None else None
        if src is not None and src.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            if move:
                shutil.move(str(src), str(dest))
            else:
                shutil.copytree(src, dest)


def merge_one(course: Course, r: Record, gb) -> None:
    """Move one graded submission's folders from its worker's shard into the main course and
    write what nbgrader recorded for it into the main gradebook ``gb`` (an open ``Gradebook``).
    A crashed worker's task (shard -1) only loses the folders of an earlier grade. If the grade
    cannot be recorded, the student is flagged and left to grade again (the next run does: no
    autograded copy is kept), and the batch goes on."""
    a, s = r.assignment, r.student
    shard = course.root / "shards" / f"w{r.worker}" if r.worker >= 0 else None
    try:
        take_folders(shard, course.root, a, s)
        if r.worker >= 0 and r.gradebook is not None:
            store_submission(gb, a, s, r.gradebook)
    except Exception as e:  # noqa: BLE001 - that student's flag; the batch goes on
        gb.db.rollback()
        shutil.rmtree(course.path("autograded", s, a), ignore_errors=True)
        r.status = FLAGGED
        r.reasons.append(f"graded, but the grade could not be recorded in the gradebook "
                             f"({type(e).__name__}: {str(e)[:150]}): grade it again")
