"""Exercise 08's visible and hidden checks, run directly (no kernel, no nbgrader).

The reference pieces in attention_workbook.gpt and every catalogued alternative pass; every
catalogued mistake fails the checks it names, and the visible message contains its hint.
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook import gpt
from attention_workbook.checks import ex08 as checks
from attention_workbook.checks.core import CheckFailed
from awb_grader.catalog import ex08 as catalog
from awb_grader.hidden import ex08 as hidden

# test cell -> (the answer cell it grades, the check function name)
CELLS = {
    "test_get_batch_shift": ("get_batch", "get_batch_shift"),
    "test_get_batch_random": ("get_batch", "get_batch_random"),
    "test_lr_at_warmup": ("lr_at", "lr_at_warmup"),
    "test_lr_at_cosine": ("lr_at", "lr_at_cosine"),
    "test_gpt_forward": ("GPT", "gpt_forward"),
    "test_gpt_causal": ("GPT", "gpt_causal"),
    "test_gpt_positions_tying": ("GPT", "gpt_positions_and_tying"),
    "test_gpt_overfits": ("GPT", "gpt_overfits"),
    "test_generate_basics": ("generate", "generate_basics"),
    "test_generate_sampling": ("generate", "generate_sampling"),
}
SOLUTION_SRC = {}  # filled lazily from the catalog's correct pieces


def define(source: str, name: str):
    """Run a notebook cell's source as a student would (the notebook's imports in scope)."""
    ns = {"torch": torch, "nn": nn, "F": F, "math": math, "Block": gpt.Block}
    exec(compile(source, f"<cell {name}>", "exec"), ns)
    obj = ns[name]
    obj.__module__ = "__main__"  # like a notebook cell (own_code rejects our package's objects)
    return obj


def reference(name):
    sources = {
        "get_batch": catalog.MISTAKES[0].source.replace("return x, x.clone()",
                                                        "y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix.tolist()])\n    return x, y"),
        "lr_at": catalog.MISTAKES[3].source.replace("max_lr * step / warmup_steps", "max_lr * (step + 1) / warmup_steps"),
        "GPT": catalog._gpt(),
        "generate": catalog._generate(),
    }
    return define(sources[name], name)


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_reference_passes_visible_and_hidden(cell, capsys):
    answer, fn = CELLS[cell]
    obj = reference(answer)
    getattr(checks, fn)(obj)
    getattr(hidden, fn)(obj)
    assert "\u2714" in capsys.readouterr().out


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_package_reference_passes_visible(cell):
    """The checks accept the package's reference implementation (when told to trust it)..."""
    from attention_workbook.checks import own

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


@pytest.mark.parametrize("alt", catalog.ALTERNATIVES, ids=lambda a: a.id)
def test_alternatives_pass(alt):
    for cell, (answer, fn) in CELLS.items():
        obj = define(alt.cells[answer], answer) if answer in alt.cells else reference(answer)
        getattr(checks, fn)(obj)
        getattr(hidden, fn)(obj)


@pytest.mark.parametrize("mistake", catalog.MISTAKES, ids=lambda m: m.id)
def test_mistakes_fail_with_their_hint(mistake):
    obj = define(mistake.source, mistake.cell)
    messages = []
    for cell in mistake.must_fail:
        answer, fn = CELLS[cell]
        assert answer == mistake.cell
        with pytest.raises(CheckFailed) as visible:
            getattr(checks, fn)(obj)
        messages.append(visible.value.plain())
        with pytest.raises(CheckFailed) as secret:
            getattr(hidden, fn)(obj)
        assert secret.value.plain().startswith("Check failed: hidden test:") or "raised" in secret.value.plain()
    if mistake.hint:
        assert any(mistake.hint.lower() in m.lower() for m in messages), messages


def test_hidden_checks_reject_the_package_reference():
    with pytest.raises(CheckFailed, match="not written in the notebook"):
        hidden.lr_at_warmup(gpt.lr_at)


def test_catalog_size_and_coverage():
    assert len(catalog.MISTAKES) >= 8
    assert {c for m in catalog.MISTAKES for c in m.must_fail} == set(CELLS)
