"""The course kernel spec's command: ``python -m awb_grader.isolation.launcher -f CONNECTION_FILE``.

A grading run has decided the isolation tier before it starts a kernel (``SandboxGuard``, ``cohort``,
the platforms: ``tiers.configure``, into the environment the kernel's launcher inherits). A kernel
started outside a grading run (nbgrader's validator, say) finds none: it gets the tier a grading run
here would get, never bubblewrap assumed where there is none, or no kernel and the reasons. Then
``sandbox.launch`` starts it."""

from __future__ import annotations

import os
import sys

from . import sandbox, tiers


def main(argv: list[str]) -> None:
    decided = None
    if not os.environ.get("AWB_SANDBOX_MODE"):
        try:
            decided = tiers.configure(say=lambda *a: None)
        except sandbox.Refused as e:
            sys.exit(f"awb sandbox: no kernel can start: {e}")
    sandbox.launch(argv, decided)


if __name__ == "__main__":
    main(sys.argv[1:])
