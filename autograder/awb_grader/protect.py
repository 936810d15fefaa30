"""The protected grading core, plugged into nbgrader's own extension points.

Every way to a grade (``nbgrader autograde``, formgrader's "autograde" button, ``python -m
awb_grader cohort``/``grade``) loads the course's ``nbgrader_config.py``, which calls
:func:`configure`. That selects, through nbgrader's and jupyter_client's configuration only:

* the **kernel**: the ``awb-sandbox`` kernel spec (``autograder/kernels/``), whose command
  (``python -m awb_grader.sandbox``) starts ``ipykernel`` inside bubblewrap with resource
  limits (``sandbox.py``), talking to nbgrader over Unix sockets in a short private folder;
  :class:`SandboxKernelManager` is jupyter_client's ``AsyncKernelManager`` that finds that
  kernel spec;
* the **autograde preprocessors**: nbgrader's own list, with

  - :class:`SandboxGuard` first: it refuses to grade when bubblewrap cannot run here, unless
    the instructor said the grades need not be protected (``--SandboxGuard.unprotected=True``,
    ``cohort --unprotected`` or ``AWB_UNPROTECTED=1``); the test suite's own notebooks
    (trusted code, no sandbox) say ``SandboxGuard.trusted_code=True``;
  - :class:`~awb_grader.holdout.HoldOutHiddenTests` before the execution: every test cell's
    hidden block is taken out, so the student's kernel runs only the visible checks (and never
    sees the hidden checks' code, seeds or oracles);
  - :class:`~awb_grader.outputlimit.LimitOutputBytes` instead of ``LimitOutput``;
  - :class:`OutsideVerdict` after the execution and before ``SaveAutoGrades``: it puts the
    hidden blocks back and decides, in nbgrader's process (never the student's), which test
    cells keep the points their visible checks earned in the kernel (``verdict.decide``: the
    hidden checks run there, and only there). A cell whose hidden check fails gets an error
    output with a fixed sentence (:data:`verdict.HIDDEN_MESSAGE`: no case, seed or expected
    value), a withheld cell one that says why, so nbgrader's own ``SaveAutoGrades`` scores it 0
    and the feedback shows the sentence. The status, the reasons and each hidden check's own
    message (``hidden_failed``, for the instructor) go into the autograded notebook's metadata
    (``awb_grader``), where every door reads them;
  - :class:`FlagSubmission` after ``SaveAutoGrades``: a flagged submission is flagged in
    nbgrader's gradebook (formgrader shows the flag).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Integer, default

from .course import AUTOGRADER, ensure_kernel_path

KERNEL_NAME = "awb-sandbox"
KERNELS = AUTOGRADER / "kernels"
META = "awb_grader"          # the autograded notebook's metadata key: status, reasons, withheld cells
UNPROTECTED_ENV = "AWB_UNPROTECTED"

REFUSAL = ("refusing to grade: bubblewrap (bwrap) cannot run here, so student code would run with the "
           "grader's permissions (it could read solutions/ and the gradebook, and change its own grade). "
           "Install it (apt-get install bubblewrap), or grade anyway with grades that are NOT protected: "
           "`cohort --unprotected`, `nbgrader autograde ... --SandboxGuard.unprotected=True`, or AWB_UNPROTECTED=1.")
UNPROTECTED_NOTE = "UNPROTECTED: graded without the sandbox (bubblewrap unavailable): this grade is not protected"

PREPROCESSORS = [
    "awb_grader.protect.SandboxGuard",
    "awb_grader.holdout.HoldOutHiddenTests",
    "awb_grader.protect.SandboxExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "awb_grader.outputlimit.LimitOutputBytes",
    "awb_grader.protect.OutsideVerdict",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
    "awb_grader.protect.FlagSubmission",
]


def private_runtime() -> Path:
    """This process's folder for the kernels' Unix sockets (short: a socket path may not exceed
    107 bytes), made on first use; a grading worker sets its own (``AWB_PRIVATE_RUNTIME``)."""
    folder = os.environ.get("AWB_PRIVATE_RUNTIME")
    if not folder:
        import atexit
        import shutil

        folder = tempfile.mkdtemp(prefix="awb-", dir="/tmp" if os.path.isdir("/tmp") else None)
        atexit.register(shutil.rmtree, folder, True)
        os.environ["AWB_PRIVATE_RUNTIME"] = folder
    (Path(folder) / "sock").mkdir(parents=True, exist_ok=True)
    return Path(folder)


def configure(c) -> None:
    """The course's nbgrader settings that make every autograde a protected one (called by
    ``autograder/nbgrader_config.py``)."""
    ensure_kernel_path()                     # (the trusted notebooks' hidden blocks import awb_grader.hidden)
    c.Execute.kernel_name = KERNEL_NAME
    c.Execute.kernel_manager_class = "awb_grader.protect.SandboxKernelManager"
    # every output is in once the last cell ran: stop the kernel at once rather than asking it
    c.Execute.shutdown_kernel = "immediate"
    c.KernelManager.transport = "ipc"        # the sandbox has no network, not even loopback
    c.KernelManager.ip = str(private_runtime() / "sock" / "kernel-ipc")
    c.LimitOutput.max_lines = 200
    c.LimitOutputBytes.max_bytes = 100_000
    c.Autograde.autograde_preprocessors = list(PREPROCESSORS)
    if os.environ.get(UNPROTECTED_ENV) == "1":
        c.SandboxGuard.unprotected = True


class SandboxKernelManager(AsyncKernelManager):
    """jupyter_client's ``AsyncKernelManager`` whose kernel specs include the course's own
    (``autograder/kernels/awb-sandbox``) before the usual Jupyter paths."""

    @default("kernel_spec_manager")
    def _sandbox_kernel_specs(self):
        ksm = KernelSpecManager(data_dir=self.data_dir)
        ksm.kernel_dirs = [str(KERNELS), *ksm.kernel_dirs]
        return ksm


def sandbox_mode(unprotected: bool = False) -> str:
    """'bwrap' where bubblewrap works; else 'limits' (resource limits only) if the grader said
    the grades need not be protected; else :class:`Refused`."""
    from .sandbox import bwrap_works

    if bwrap_works():
        return "bwrap"
    if unprotected or os.environ.get(UNPROTECTED_ENV) == "1":
        return "limits"
    raise Refused(REFUSAL)


class Refused(RuntimeError):
    """Grading refused: the sandbox cannot run and nobody said the grades may be unprotected."""


class SandboxGuard(NbGraderPreprocessor):
    """First autograde step: the submission runs in the sandbox, or not at all (see REFUSAL)."""

    unprotected = Bool(False, help="grade even where bubblewrap cannot run: resource limits only, and the "
                                   "grades are NOT protected (said on every graded notebook)").tag(config=True)
    trusted_code = Bool(False, help="the notebooks are the course's own (the test suite's catalog), not "
                                    "student code: run them in the configured kernel, unsandboxed").tag(config=True)

    def preprocess(self, nb, resources):
        meta = {"status": "ok", "reasons": [], "withheld": {}}
        if self.trusted_code:
            meta["sandbox"] = "trusted"
        else:
            kernel = self.config.Execute.get("kernel_name", KERNEL_NAME)
            if kernel != KERNEL_NAME:
                raise Refused(f"refusing to grade: the kernel {kernel!r} is not the grading sandbox ({KERNEL_NAME})")
            mode = sandbox_mode(self.unprotected)
            os.environ["AWB_SANDBOX_MODE"] = mode        # read by the kernel's launcher and the replay
            from .provided import announce

            announce(resources.get("nbgrader", {}).get("assignment", ""))   # what its sandbox binds
            meta["sandbox"] = mode
            if mode != "bwrap":
                self.log.warning(UNPROTECTED_NOTE)
                meta["reasons"].append(UNPROTECTED_NOTE)
        nb.metadata[META] = meta
        return nb, resources


STOPPED = "KernelStopped"


def _error(ename: str, why: str):
    """An error output, as the kernel would have written it (nbgrader scores its cell 0)."""
    from nbformat.v4 import new_output

    return new_output("error", ename=ename, evalue=why, traceback=[f"{ename}: {why}"])


class SandboxExecute(Execute):
    """nbgrader's ``Execute``, except that a kernel that stops answering (it froze itself,
    or a limit killed it) ends the run of that notebook instead of failing its grading:
    every code cell not run yet gets an error output that says why (so it scores 0), the
    submission is flagged, and the grading goes on."""

    def preprocess_cell(self, cell, resources, index):
        self._awb_at = index
        return super().preprocess_cell(cell, resources, index)

    def preprocess(self, nb, resources, km=None):
        self._awb_at = 0
        try:
            return super().preprocess(nb, resources, km=km)
        except (CellTimeoutError, DeadKernelError) as e:
            first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
            why = (f"the kernel stopped answering ({type(e).__name__}: {first}): "
                   f"this cell and every cell after it were not run")
            for cell in nb.cells[self._awb_at:]:
                if cell.cell_type == "code":
                    cell.outputs = [_error(STOPPED, why)]
            meta = nb.metadata.setdefault(META, {"status": "ok", "reasons": [], "withheld": {}})
            meta["status"] = "flagged"
            where = nb.cells[self._awb_at].metadata.get("nbgrader", {}).get("grade_id", f"cell {self._awb_at}")
            meta["reasons"] = [*meta.get("reasons", []), f"the kernel stopped answering in {where} "
                               f"(froze or was killed): the cells from there on were not run"]
            return nb, resources


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


WITHHELD = "PointsWithheld"


class OutsideVerdict(NbGraderPreprocessor):
    """Decide, in nbgrader's process, which earned test cells keep their points (``verdict.decide``):
    the hidden checks that :class:`~awb_grader.holdout.HoldOutHiddenTests` kept out of the kernel
    run here, outside the student's process."""

    timeout = Integer(0, help="seconds per re-checked cell (0: Execute.timeout)").tag(config=True)
    recheck = Bool(True, help="run each earned cell's hidden check outside the student's process (off: no hidden "
                              "check runs, scores come from the visible checks and the static reading of the "
                              "answer cells)").tag(config=True)

    def preprocess(self, nb, resources):
        from . import verdict
        from .holdout import held_tests

        meta = nb.metadata.setdefault(META, {"status": "ok", "reasons": [], "withheld": {}})
        assignment = resources["nbgrader"]["assignment"]
        cwd = Path(resources.get("metadata", {}).get("path") or ".").resolve()
        timeout = self.timeout or int(self.config.Execute.get("timeout", 60) or 60)
        held = held_tests(resources)
        for cell in nb.cells:               # the autograded notebook shows the test cells whole again
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if held and gid in held and cell.cell_type == "code":
                cell.source = held[gid]
        if held is None and meta.get("sandbox") == "trusted":
            scope = "events"                 # (the course's own notebooks: hidden checks ran in the kernel)
        else:
            scope = "full" if self.recheck else "static"
        if scope == "static" and held:
            meta["reasons"] = [*meta.get("reasons", []), "note: the hidden checks were not run (--no-verdict): "
                               "scores from the visible checks only"]
        d = verdict.decide(nb, assignment, cwd, earned(nb), timeout=timeout, scope=scope)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type != "code" or not gid:
                continue
            if gid in d.withheld:
                cell.outputs.append(_error(WITHHELD, d.withheld[gid]))
            elif gid in d.hidden_failed:
                cell.outputs.append(_error(verdict.HIDDEN_FAILED, verdict.HIDDEN_MESSAGE))
        meta["reasons"] = [*meta.get("reasons", []), *d.reasons]
        meta["withheld"] = d.withheld
        meta["hidden_failed"] = d.hidden_failed       # each hidden check's own message: the instructor's only
        if d.flagged:
            meta["status"] = "flagged"
        return nb, resources


class FlagSubmission(NbGraderPreprocessor):
    """After ``SaveAutoGrades``: a flagged submission is flagged in nbgrader's gradebook too, and
    a student nbgrader created with no name gets the id as name (formgrader shows "last, first":
    "None, None" otherwise; ``formgrader_view.name_students``)."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook

        from .formgrader_view import name_students

        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            name_students(gb, [info["student"]])
            if nb.metadata.get(META, {}).get("status") == "flagged":
                gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"]).flagged = True
            gb.db.commit()
        return nb, resources


def verdict_of(notebook_path: Path) -> dict:
    """What :class:`OutsideVerdict` wrote into an autograded notebook ({} if nothing)."""
    import nbformat

    p = Path(notebook_path)
    if not p.exists():
        return {}
    return dict(nbformat.read(p, as_version=4).metadata.get(META, {}))
