"""``OutsideVerdict``: which earned test cells keep their points, decided in nbgrader's process."""

from __future__ import annotations

import time
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
    """Decide, in nbgrader's process, which earned test cells keep their points (``verdict.outside.decide``):
    the hidden checks that ``HoldOutHiddenTests`` kept out of the kernel run here, outside the
    student's process."""

    timeout = Integer(0, help="seconds per re-checked cell (0: Execute.timeout)").tag(config=True)
    recheck = Bool(True, help="run each earned cell's hidden check outside the student's process (off: no hidden "
                              "check runs, scores come from the visible checks and the static reading of the "
                              "answer cells)").tag(config=True)

    def preprocess(self, nb, resources):
        from ...verdict import outside as verdict
        from .hold_out_hidden import held_tests

        meta = nb.metadata.setdefault(META, {"status": "ok", "reasons": [], "withheld": {}})
        assignment = resources["nbgrader"]["assignment"]
        cwd = Path(resources.get("metadata", {}).get("path") or ".").resolve()
        timeout = self.timeout or int(self.config.Execute.get("timeout", 60) or 60)
        held = held_tests(resources)
        for cell in nb.cells:               # the autograded notebook shows the test cells whole again
            gid = cell_meta(cell).get("grade_id")
            if held and gid in held and cell.cell_type == "code":
                cell.source = held[gid]
        scope = "full" if self.recheck else "static"
        if scope == "static" and held:
            meta["reasons"] = [*meta.get("reasons", []), "note: the hidden checks were not run (--no-verdict): "
                               "scores from the visible checks only"]
        t0 = time.perf_counter()
        d = verdict.decide(nb, assignment, cwd, earned(nb), timeout=timeout, scope=scope)
        meta["verdict_s"] = round(time.perf_counter() - t0, 3)     # (the platforms' report prints it)
        for cell in nb.cells:
            gid = cell_meta(cell).get("grade_id")
            if cell.cell_type != "code" or not gid:
                continue
            if gid in d.withheld:
                cell.outputs.append(error_output(WITHHELD, d.withheld[gid]))
            elif gid in d.hidden_failed:
                cell.outputs.append(error_output(verdict.HIDDEN_FAILED, verdict.HIDDEN_MESSAGE))
        meta["reasons"] = [*meta.get("reasons", []), *d.reasons]
        meta["withheld"] = d.withheld
        meta["hidden_failed"] = d.hidden_failed       # each hidden check's own message: the instructor's only
        if d.flagged:
            meta["status"] = "flagged"
        return nb, resources
