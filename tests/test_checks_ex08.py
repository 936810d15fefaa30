"""Exercise 08 beyond the shared checks of tests/test_checks.py: the visible checks accept the
package's own get_batch, lr_at, GPT and generate when told to trust them, name that reference
when a submission hands it in (or wraps it), and the hidden checks refuse it."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook import gpt
from attention_workbook.checks import ex08 as checks
from attention_workbook.checks import graded, own
from attention_workbook.checks.core import CheckFailed
from awb_grader.hidden import ex08 as hidden

A = "08_train_a_gpt"
CELLS = {cell: (args[0], check) for cell, _points, check, args in graded.TESTS[A]}   # -> (answer, check)


def define(source: str, name: str):
    """Run a notebook cell's source as a student would (the notebook's imports in scope)."""
    ns = {"torch": torch, "nn": nn, "F": F, "math": math, "Block": gpt.Block}
    exec(compile(source, f"<cell {name}>", "exec"), ns)  # noqa: S102 - a test cell's own code
    obj = ns[name]
    obj.__module__ = "__main__"  # like a notebook cell (own_code rejects our package's objects)
    return obj


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_package_reference_passes_visible(cell):
    """The checks accept the package's reference implementation (when told to trust it)..."""
    answer, fn = CELLS[cell]
    obj = {"get_batch": gpt.get_batch, "lr_at": gpt.lr_at, "generate": gpt.generate,
           "GPT": lambda **kw: gpt.GPT(**kw)}[answer]
    with own.trusting():
        getattr(checks, fn)(obj)


@pytest.mark.parametrize("answer", ["get_batch", "lr_at", "generate"])
def test_visible_check_names_the_reference_a_submission_uses(answer):
    """... and tell a student who hands it in (or wraps it) that it is not their own work."""
    fn = next(f for a, f in CELLS.values() if a == answer)
    wrapper = define(f"import attention_workbook.gpt\n\ndef {answer}(*args, **kwargs):\n"
                     f"    return attention_workbook.gpt.{answer}(*args, **kwargs)\n", answer)
    for obj in (getattr(gpt, answer), wrapper):
        with pytest.raises(CheckFailed, match=f"workbook's reference `attention_workbook.gpt.{answer}`"):
            getattr(checks, fn)(obj)


def test_hidden_checks_reject_the_package_reference():
    with pytest.raises(CheckFailed, match="not written in the notebook"):
        hidden.lr_at_warmup(gpt.lr_at)
