"""``OutsideVerdict``: which earned test cells keep their points, decided in nbgrader's process."""

from __future__ import annotations

from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Integer

from ..metadata import META, cell_meta
from ..outputs import error_output

WITHHELD = "PointsWithheld"


def earned(nb) -> list[str]:
    """The test cells that earned points in the kernel (nbgrader's own rule)."""
    from nbgrader import utils

    out = []
    for cell in nb.cells:
        if utils.is_grade(cell) and not utils.is_solution(cell) and cell.cell_type == "code":
            score, _ = utils.determine_grade(cell)
            if score:
                out.append(cell.metadata["nbgrader"]["grade_id"])
    return out


class OutsideVerdict(NbGraderPreprocessor):
    """Decide, in nbgrader's process, which earned test cells keep their points (``verdict.decide``)."""

    timeout = Integer(0, help="seconds per re-checked cell (0: Execute.timeout)").tag(config=True)
    recheck = Bool(True, help="re-run each earned hidden check outside the student's process (off: "
                              "only the static reading of the answer cells)").tag(config=True)

    def preprocess(self, nb, resources):
        from ...verdict import outside as verdict

        meta = nb.metadata.setdefault(META, {"status": "ok", "reasons": [], "withheld": {}})
        assignment = resources["nbgrader"]["assignment"]
        cwd = Path(resources.get("metadata", {}).get("path") or ".").resolve()
        timeout = self.timeout or int(self.config.Execute.get("timeout", 60) or 60)
        scope = "events" if meta.get("sandbox") == "trusted" else "full" if self.recheck else "static"
        d = verdict.decide(nb, assignment, cwd, earned(nb), timeout=timeout, scope=scope)
        for cell in nb.cells:
            gid = cell_meta(cell).get("grade_id")
            if gid in d.withheld and cell.cell_type == "code":
                why = d.withheld[gid]
                cell.outputs.append(error_output(WITHHELD, why))
        meta["reasons"] = [*meta.get("reasons", []), *d.reasons]
        meta["withheld"] = d.withheld
        if d.flagged:
            meta["status"] = "flagged"
        return nb, resources
