"""Exercise 04, part 2 (bilinear_scores, additive_scores, einsum_attention, SelfAttentionHead),
run in-process (fast): the reference solution passes every part-2 test cell (visible and hidden),
each catalogued part-2 mistake fails the cells it names with the hint it names, each part-2
alternative passes everything, and the hidden oracles agree with PyTorch. tests/test_catalog.py
repeats the catalog part through nbgrader itself."""

import math
import re

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex04 as checks
from awb_grader.catalog import ex04 as catalog
from awb_grader.course import SOLUTIONS
from awb_grader.hidden import ex04 as hidden

ASSIGNMENT = "04_queries_keys_values"
PART2 = {"bilinear_scores", "additive_scores", "einsum_attention", "SelfAttentionHead"}
from awb_grader.variants import notebook_cells  # noqa: E402



def _cells():
    return notebook_cells(ASSIGNMENT)[:2]


SOLUTION_CELLS, TEST_CELLS = _cells()
PART2_TESTS = sorted(t for t in TEST_CELLS if t.split("_")[1] in {"bilinear", "additive", "einsum", "head"})
PART2_MISTAKES = [m for m in catalog.MISTAKES if m.cell in PART2]
PART2_ALTERNATIVES = [a for a in catalog.ALTERNATIVES if set(a.cells) <= PART2 | {"softmax"} and set(a.cells) & PART2]


def _namespace(overrides=None):
    ns = {"math": math, "torch": torch, "nn": nn, "F": F, "checks": checks, "__name__": "__main__"}
    for src in {**SOLUTION_CELLS, **(overrides or {})}.values():
        exec(src, ns)
    return ns


def _run(test_id, ns):
    """None if the test cell passes, else the failure message."""
    try:
        exec(TEST_CELLS[test_id], ns)
    except CheckFailed as e:
        return e.plain()
    return None


def test_part2_cells_exist():
    assert PART2 <= set(SOLUTION_CELLS)
    assert PART2_TESTS == sorted([
        "test_bilinear_shapes", "test_bilinear_values", "test_additive_shapes", "test_additive_values",
        "test_einsum_values", "test_einsum_batch_dims", "test_einsum_mask",
        "test_head_structure", "test_head_forward", "test_head_mask"])


@pytest.mark.parametrize("test_id", PART2_TESTS)
def test_reference_passes(test_id):
    assert _run(test_id, _namespace()) is None


def test_every_part2_test_cell_is_in_some_must_fail():
    covered = {c for m in PART2_MISTAKES for c in m.must_fail}
    assert set(PART2_TESTS) <= covered


def test_at_least_three_mistakes_per_function():
    for fn in PART2:
        assert sum(m.cell == fn for m in PART2_MISTAKES) >= 3, fn


@pytest.mark.parametrize("mistake", PART2_MISTAKES, ids=lambda m: m.id)
def test_mistake_loses_points_with_hint(mistake):
    ns = _namespace({mistake.cell: mistake.source, **mistake.extra_cells})
    messages = {t: _run(t, ns) for t in mistake.must_fail}
    kept = [t for t, msg in messages.items() if msg is None]
    assert not kept, f"{mistake.id} passes {kept}"
    if mistake.hint:
        assert any(mistake.hint.lower() in msg.lower() for msg in messages.values()), messages


@pytest.mark.parametrize("mistake", PART2_MISTAKES, ids=lambda m: m.id)
def test_hidden_checks_alone_catch_mistake(mistake):
    """Even with the visible check removed, the hidden part of each must_fail cell fails."""
    ns = _namespace({mistake.cell: mistake.source, **mistake.extra_cells})
    fn_names = {"test_bilinear_shapes": ("bilinear_shapes", "bilinear_scores"),
                "test_bilinear_values": ("bilinear_values", "bilinear_scores"),
                "test_additive_shapes": ("additive_shapes", "additive_scores"),
                "test_additive_values": ("additive_values", "additive_scores"),
                "test_einsum_values": ("einsum_values", "einsum_attention"),
                "test_einsum_batch_dims": ("einsum_batch_dims", "einsum_attention"),
                "test_einsum_mask": ("einsum_mask", "einsum_attention"),
                "test_head_structure": ("head_structure", "SelfAttentionHead"),
                "test_head_forward": ("head_forward", "SelfAttentionHead"),
                "test_head_mask": ("head_mask", "SelfAttentionHead")}
    for t in mistake.must_fail:
        check, obj = fn_names[t]
        with pytest.raises(CheckFailed):
            getattr(hidden, check)(ns[obj])


@pytest.mark.parametrize("alt", PART2_ALTERNATIVES, ids=lambda a: a.id)
def test_alternative_passes(alt):
    ns = _namespace(dict(alt.cells))
    for t in PART2_TESTS:
        assert _run(t, ns) is None, t


def test_matmul_is_blocked_only_inside_the_check():
    a = torch.randn(2, 3)
    with checks.forbid(checks.matmul_builtins(), checks.NO_MATMUL):
        with pytest.raises(Exception):
            a @ a.T
        assert torch.einsum("ij,kj->ik", a, a).shape == (2, 2)
    assert (a @ a.T).shape == (2, 2)  # restored


def test_hidden_oracles_agree_with_pytorch():
    g = torch.Generator().manual_seed(0)
    q, k, W = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 6, generator=g), torch.randn(4, 6, generator=g)
    assert torch.allclose(hidden._bilinear_oracle(q, k, W, (2,)), q @ W @ k.mT, atol=1e-5)
    W1, W2, w = torch.randn(7, 6, generator=g), torch.randn(7, 4, generator=g), torch.randn(7, generator=g)
    # the additive score as a one-layer MLP on each concatenated (query, key) pair
    pairs = torch.cat([q[:, :, None, :].expand(2, 3, 5, 4), k[:, None, :, :].expand(2, 3, 5, 6)], -1)
    W_cat = torch.cat([W2, W1], 1)  # (7, dq + dk)
    want = torch.tanh(F.linear(pairs, W_cat)) @ w
    assert torch.allclose(hidden._additive_oracle(q, k, W1, W2, w, (2,)), want, atol=1e-5)
