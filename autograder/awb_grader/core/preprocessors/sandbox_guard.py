"""``SandboxGuard``: the first autograde step: the submission runs in the sandbox, or not at all."""

from __future__ import annotations

import os

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool

from ...isolation.sandbox import KERNEL_NAME, UNPROTECTED_NOTE, Refused, own_uid
from ...isolation.tiers import sandbox_mode
from ..metadata import META


class SandboxGuard(NbGraderPreprocessor):
    """First autograde step: the submission runs in the sandbox of the isolation tier that runs
    here (named in the notebook's metadata), or not at all (see REFUSAL)."""

    unprotected = Bool(False, help="grade even where no isolation tier can run: resource limits only, and the "
                                   "grades are NOT protected (said on every graded notebook)").tag(config=True)

    def preprocess(self, nb, resources):
        meta = {"status": "ok", "reasons": [], "withheld": {}}
        kernel = self.config.Execute.get("kernel_name", KERNEL_NAME)
        if kernel != KERNEL_NAME:
            raise Refused(f"refusing to grade: the kernel {kernel!r} is not the grading sandbox ({KERNEL_NAME})")
        mode = sandbox_mode(self.unprotected)
        os.environ["AWB_SANDBOX_MODE"] = mode        # read by the kernel's launcher and the replay
        if os.geteuid() == 0:
            own_uid()               # the kernels' uid, drawn once for the run (kept in its environment)
        from ...isolation.provided import announce

        announce(resources.get("nbgrader", {}).get("assignment", ""))   # what its sandbox binds
        meta["sandbox"] = mode
        # this process's zygote (isolation/zygote.py), before nbgrader starts the kernel: the
        # kernel's launcher hands it the kernel to fork (None: kernels start cold here)
        from ...isolation.sandbox import zygote_for

        path = resources.get("metadata", {}).get("path")
        if path:
            zygote_for(path)
        if mode == "limits":            # bwrap or landlock: protected (the tier is named above)
            self.log.warning(UNPROTECTED_NOTE)
            meta["reasons"].append(UNPROTECTED_NOTE)
        nb.metadata[META] = meta
        return nb, resources
