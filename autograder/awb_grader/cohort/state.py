"""What a cohort keeps between runs (``cohort_state.json`` in the course root): every submission's
:class:`~awb_grader.core.records.Record`, by exercise and student, with the hash of the file as
submitted (unchanged bytes and timestamp: not graded again)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..core.records import Record

STATE = "cohort_state.json"


def submission_sha(path: Path, timestamp: str | None) -> str:
    h = hashlib.sha256(Path(path).read_bytes())
    h.update((timestamp or "").encode())
    return h.hexdigest()[:20]


def load_state(root: Path) -> dict:
    p = Path(root) / STATE
    if not p.exists():
        return {}
    data = json.loads(p.read_text())
    return {a: {s: Record(**r) for s, r in per.items()} for a, per in data.items()}


def save_state(root: Path, state: dict) -> None:
    data = {a: {s: r.state() for s, r in sorted(per.items())} for a, per in sorted(state.items())}
    tmp = Path(root) / (STATE + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(Path(root) / STATE)
