"""Triton on a GPU where there is one, Triton's interpreter on the CPU where there is none.

Exercise 10 and lecture 10 import ``triton`` from here, never directly: where no CUDA GPU is
visible this sets ``TRITON_INTERPRET=1`` before ``triton`` is imported, so every ``@triton.jit``
kernel runs in Triton's own interpreter (numpy on the CPU, the same results, slowly), in a
learner's notebook, in the grading kernel and in the grader's replay alike. Where Triton is not
installed (macOS: Triton has no wheels for it) importing this module fails with two lines that
say what to do.

    from attention_workbook.tritonenv import DEVICE, INTERPRETED, tl, triton
"""

from __future__ import annotations

import importlib.util
import os
import sys

import torch


class TritonMissing(ImportError):
    """Triton is not installed here (Jupyter shows these lines, no traceback)."""

    def _render_traceback_(self):
        return ["\x1b[31m" + line + "\x1b[0m" for line in str(self).splitlines()]


MISSING = ("Triton is not installed: exercise 10 and lecture 10 need it (Linux only; it comes with PyTorch on "
           "Colab).\nTo fix: on Linux `pip install -e '.[triton]'` in your checkout (or `pip install triton`); on "
           "macOS or Windows open the notebook on Colab (its badge), then restart and run all.")


def _decide() -> bool:
    """True when kernels run in Triton's interpreter: no CUDA GPU here (or TRITON_INTERPRET=1 already)."""
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
        return True
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
        return True
    return False


TOO_EARLY = ("triton was imported before attention_workbook.tritonenv switched on its interpreter (no GPU "
             "here): its own helpers then cannot run in the interpreter.\nTo fix: restart the kernel and run the "
             "notebook from the top (the import cell before any `import triton`), or set TRITON_INTERPRET=1 first.")

if importlib.util.find_spec("triton") is None:
    raise TritonMissing(MISSING)
_ALREADY = os.environ.get("TRITON_INTERPRET", "") not in ("", "0")
_IMPORTED = "triton" in sys.modules
INTERPRETED = _decide()
if INTERPRETED and _IMPORTED and not _ALREADY:
    raise TritonMissing(TOO_EARLY)
import triton  # noqa: E402 - after TRITON_INTERPRET is decided
import triton.language as tl  # noqa: E402

if INTERPRETED and hasattr(getattr(triton, "knobs", None), "runtime"):
    # Triton >= 3.4 reads TRITON_INTERPRET through its knobs at every @triton.jit: set the knob too,
    # so kernels defined later still get the interpreter when something resets os.environ
    triton.knobs.runtime.interpret = True

# where the tensors a kernel reads must live: the GPU, or the CPU for the interpreter
DEVICE = "cpu" if INTERPRETED else "cuda"

__all__ = ["DEVICE", "INTERPRETED", "MISSING", "TritonMissing", "tl", "triton"]
