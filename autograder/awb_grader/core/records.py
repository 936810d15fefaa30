"""What every door reports of a graded submission: its status and its record.

The same words and fields in ``flags.csv``, the table, the cohort's state, the Gradescope and
PrairieLearn harnesses, and what the grading workers hand back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum


class Status(StrEnum):
    """A graded submission's status (the same words in flags.csv, the table and every harness)."""
    OK = "ok"                    # graded normally
    REPAIRED = "repaired"        # fixed before grading (read the reason), then graded normally
    FLAGGED = "flagged"          # graded, but look: a time limit, a sandbox event, tampering, edited tests
    UNGRADABLE = "ungradable"    # not a notebook: 0 points, the reason says why


OK, REPAIRED, FLAGGED, UNGRADABLE = Status.OK, Status.REPAIRED, Status.FLAGGED, Status.UNGRADABLE


@dataclass
class Record:
    """One graded submission: what every door reports (flags.csv, the table, the cohort's state,
    the Gradescope and PrairieLearn harnesses) and what the grading workers hand back."""
    assignment: str
    student: str
    sha: str = ""                     # of the file as submitted (and its timestamp): unchanged = not regraded
    score: float = 0.0
    max_score: float = 0.0
    status: str = OK                  # a Status
    reasons: list = field(default_factory=list)
    failed_cells: list = field(default_factory=list)
    errors: dict = field(default_factory=dict)            # failing grade_id -> error text (the insight)
    seconds: float = 0.0
    phases: dict = field(default_factory=dict)            # seconds: grade (check+autograde), feedback
    misconceptions: list = field(default_factory=list)    # catalog labels its errors name
    unanswered: list = field(default_factory=list)        # answer cells left as the stub
    worker: int = -1                  # which grading worker, when it took it and gave it back (time.time())
    began: float = 0.0
    ended: float = 0.0
    gradebook: dict | None = field(default=None, repr=False)   # in transit only: what nbgrader recorded

    @property
    def notes(self) -> list[str]:
        """What the table says about the student: mistakes first, then flags and repairs."""
        unanswered = [f"unanswered: {', '.join(self.unanswered)}"] if self.unanswered else []
        return [*self.misconceptions, *unanswered, *self.reasons]

    def state(self) -> dict:
        """What the cohort keeps of it between runs (``cohort_state.json``)."""
        out = asdict(self)
        out.pop("gradebook")
        return out


def points_text(x: float) -> str:
    """A score as the reports write it: ``17``, ``16.50``."""
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"
