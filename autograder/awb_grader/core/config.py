"""The course's nbgrader settings that make every autograde a protected one.

Every way to a grade (``nbgrader autograde``, formgrader's "autograde" button, ``python -m
awb_grader cohort``/``grade``) loads the course's ``nbgrader_config.py``, which calls
:func:`configure`. That selects, through nbgrader's and jupyter_client's configuration only:

* the **kernel**: the ``awb-sandbox`` kernel spec (``autograder/kernels/``), whose command
  (``python -m awb_grader.isolation.launcher``) starts ``ipykernel`` in the isolation tier's sandbox
  with resource limits (``isolation/sandbox.py``), talking to nbgrader over Unix sockets in a short private folder;
  ``core.kernel_manager.SandboxKernelManager`` is jupyter_client's ``AsyncKernelManager`` that
  finds that kernel spec;
* the **autograde preprocessors**: nbgrader's own list, with ours (``core/preprocessors/``, one
  class per module):

  - ``SandboxGuard`` first: it refuses to grade when bubblewrap cannot run here, unless
    the instructor said the grades need not be protected (``--SandboxGuard.unprotected=True``,
    ``cohort --unprotected`` or ``AWB_UNPROTECTED=1``); it starts this process's zygote
    (``isolation/zygote.py``), from which every kernel and replay is forked;
  - ``HoldOutHiddenTests`` before the execution: every test cell's hidden block is taken out,
    so the student's kernel runs only the visible checks (and never sees the hidden checks'
    code, seeds or oracles);
  - ``LimitOutputBytes`` instead of ``LimitOutput``;
  - ``OutsideVerdict`` after the execution and before ``SaveAutoGrades``: it puts the hidden
    blocks back and decides, in nbgrader's process (never the student's), which test cells keep
    the points their visible checks earned in the kernel (``verdict.outside.decide``: the hidden
    checks run there, and only there). A cell whose hidden check fails gets an error output
    with a fixed sentence (``verdict.outside.HIDDEN_MESSAGE``: no case, seed or expected value),
    a withheld cell one that says why, so nbgrader's own ``SaveAutoGrades`` scores it 0 and the
    feedback shows the sentence. The status, the reasons and each hidden check's own message
    (``hidden_failed``, for the instructor) go into the autograded notebook's metadata
    (``awb_grader``), where every door reads them;
  - ``FlagSubmission`` after ``SaveAutoGrades``: a flagged submission is flagged in
    nbgrader's gradebook (formgrader shows the flag).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..isolation.sandbox import KERNEL_NAME, UNPROTECTED_ENV
from .course import ensure_kernel_path

PREPROCESSORS = [
    "awb_grader.core.preprocessors.sandbox_guard.SandboxGuard",
    "awb_grader.core.preprocessors.hold_out_hidden.HoldOutHiddenTests",
    "awb_grader.core.preprocessors.sandbox_execute.SandboxExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "awb_grader.core.preprocessors.limit_output.LimitOutputBytes",
    "awb_grader.core.preprocessors.active_html.FlagActiveHTML",
    "awb_grader.core.preprocessors.outside_verdict.OutsideVerdict",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
    "awb_grader.core.preprocessors.flag_submission.FlagSubmission",
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
    """Put the settings above in nbgrader config ``c`` (called by ``autograder/nbgrader_config.py``)."""
    ensure_kernel_path()                     # (the replay's modules; trusted notebooks' hidden blocks)
    c.Execute.kernel_name = KERNEL_NAME
    c.Execute.kernel_manager_class = "awb_grader.core.kernel_manager.SandboxKernelManager"
    # every output is in once the last cell ran: stop the kernel at once rather than asking it
    c.Execute.shutdown_kernel = "immediate"
    c.KernelManager.transport = "ipc"        # the sandbox has no network, not even loopback
    c.KernelManager.ip = str(private_runtime() / "sock" / "kernel-ipc")
    c.LimitOutput.max_lines = 200
    c.LimitOutputBytes.max_bytes = 100_000
    c.Autograde.autograde_preprocessors = list(PREPROCESSORS)
    if os.environ.get(UNPROTECTED_ENV) == "1":
        c.SandboxGuard.unprotected = True
