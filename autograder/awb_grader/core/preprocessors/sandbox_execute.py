"""``SandboxExecute``: nbgrader's ``Execute``, where a kernel that stops answering ends its notebook's run."""

from __future__ import annotations

import time

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import Execute

from ..metadata import META, cell_meta
from ..outputs import error_output

STOPPED = "KernelStopped"


class SandboxExecute(Execute):
    """nbgrader's ``Execute``, except that a kernel that stops answering (it froze itself,
    or a limit killed it) ends the run of that notebook instead of failing its grading:
    every code cell not run yet gets an error output that says why (so it scores 0), the
    submission is flagged, and the grading goes on."""

    def preprocess_cell(self, cell, resources, index):
        self._awb_at = index
        return super().preprocess_cell(cell, resources, index)

    def preprocess(self, nb, resources, km=None):
        t0 = time.perf_counter()
        try:
            return self._run(nb, resources, km)
        finally:          # the kernel's part of the grading time (the platforms' report prints it)
            nb.metadata.setdefault(META, {"status": "ok", "reasons": [], "withheld": {}})["execute_s"] = \
                round(time.perf_counter() - t0, 3)

    def _run(self, nb, resources, km=None):
        self._awb_at = 0
        try:
            return super().preprocess(nb, resources, km=km)
        except (CellTimeoutError, DeadKernelError) as e:
            first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
            why = (f"the kernel stopped answering ({type(e).__name__}: {first}): "
                   f"this cell and every cell after it were not run")
            for cell in nb.cells[self._awb_at:]:
                if cell.cell_type == "code":
                    cell.outputs = [error_output(STOPPED, why)]
            meta = nb.metadata.setdefault(META, {"status": "ok", "reasons": [], "withheld": {}})
            meta["status"] = "flagged"
            where = cell_meta(nb.cells[self._awb_at]).get("grade_id", f"cell {self._awb_at}")
            meta["reasons"] = [*meta.get("reasons", []), f"the kernel stopped answering in {where} "
                               f"(froze or was killed): the cells from there on were not run"]
            return nb, resources
