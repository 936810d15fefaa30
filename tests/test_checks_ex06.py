"""Exercise 06 checks, run in-process (fast): the reference solution passes every test cell
(visible and hidden parts), each catalogued mistake fails the cells it names with a hint that
names it, each correct alternative passes everything, and the oracles agree with PyTorch.
tests/test_catalog.py repeats the catalog part through nbgrader itself."""

import math
import re

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook import blocks as reference
from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex06 as checks
from attention_workbook.mha import MultiHeadAttention
from awb_grader.catalog import ex06 as catalog
from awb_grader.course import SOLUTIONS
from awb_grader.hidden import ex06 as hidden

ASSIGNMENT = "06_transformer_block"
from awb_grader.variants import notebook_cells  # noqa: E402



def _cells():
    return notebook_cells(ASSIGNMENT)


SOLUTION_CELLS, TEST_CELLS, POINTS = _cells()


def _namespace(overrides=None):
    ns = {"math": math, "torch": torch, "nn": nn, "F": F, "checks": checks, "MultiHeadAttention": MultiHeadAttention}
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


def test_cells_and_points():
    assert set(SOLUTION_CELLS) == {"sinusoidal_positions", "LayerNorm", "FeedForward", "TransformerBlock",
                                   "block_param_count", "from_torch_encoder_layer"}
    assert len(TEST_CELLS) == 13 and sum(POINTS.values()) == 20
    for src in TEST_CELLS.values():
        assert "checks." in src and "hidden." in src


@pytest.mark.parametrize("test_id", sorted(TEST_CELLS))
def test_reference_solution_passes(test_id, capsys):
    assert _run(test_id, _namespace()) is None
    assert "\u2714" in capsys.readouterr().out


def test_catalog_is_large_enough():
    ids = [m.id for m in catalog.MISTAKES]
    assert len(ids) == len(set(ids))
    per_cell = {c: sum(m.cell == c for m in catalog.MISTAKES) for c in SOLUTION_CELLS}
    assert min(per_cell.values()) >= 4, per_cell
    for m in catalog.MISTAKES:
        assert set(m.must_fail) <= set(TEST_CELLS), m.id
        assert m.cell in SOLUTION_CELLS, m.id


@pytest.mark.parametrize("mistake", catalog.MISTAKES, ids=lambda m: m.id)
def test_mistake_loses_points_with_a_hint(mistake):
    ns = _namespace({mistake.cell: mistake.source, **mistake.extra_cells})
    messages = {t: _run(t, ns) for t in mistake.must_fail}
    kept = [t for t, msg in messages.items() if msg is None]
    assert not kept, f"{mistake.id} keeps the points of {kept}"
    if mistake.hint:
        assert any(mistake.hint.lower() in msg.lower() for msg in messages.values()), (
            f"{mistake.id}: no message contains {mistake.hint!r}:\n" + "\n---\n".join(messages.values()))


@pytest.mark.parametrize("mistake", catalog.MISTAKES, ids=lambda m: m.id)
def test_hidden_part_alone_catches_the_mistake(mistake):
    """The hidden tests are not just a copy of the visible ones: they fail the mistake too."""
    ns = _namespace({mistake.cell: mistake.source, **mistake.extra_cells})
    hidden_only = {t: TEST_CELLS[t].split("from awb_grader.hidden")[1] for t in mistake.must_fail}
    caught = []
    for t, src in hidden_only.items():
        try:
            exec("from awb_grader.hidden" + src, ns)
        except CheckFailed:
            caught.append(t)
    assert caught, f"{mistake.id}: no hidden test fails"


@pytest.mark.parametrize("alt", catalog.ALTERNATIVES, ids=lambda a: a.id)
def test_alternative_gets_full_marks(alt):
    ns = _namespace(dict(alt.cells))
    failures = {t: msg for t in TEST_CELLS if (msg := _run(t, ns)) is not None}
    assert not failures, failures


def test_oracles_agree_with_torch_and_the_reference_module():
    for T, d in ((7, 10), (30, 64)):
        torch.testing.assert_close(checks._pe_loops(T, d), reference.sinusoidal_positions(T, d), atol=1e-5, rtol=0)
        torch.testing.assert_close(hidden._pe_oracle(T, d), reference.sinusoidal_positions(T, d), atol=1e-5, rtol=0)
    x = torch.randn(2, 3, 8) * 4
    ln = nn.LayerNorm(8)
    torch.testing.assert_close(checks.ln_reference(x, ln.weight, ln.bias, 1e-5), ln(x), atol=1e-5, rtol=1e-5)
    for D, F_, bias in ((16, 40, True), (16, 40, False)):
        assert checks.param_count_reference(D, F_, bias) == reference.block_param_count(D, F_, bias)


def test_every_named_variant_differs_from_the_correct_output():
    want = checks._pe_loops(12, 16)
    for name, v in checks.pe_wrong_variants(12, 16).items():
        assert not checks.close(v, want), name
    x = torch.randn(3, 4, 8) * 3 + 1
    w, b = 1 + 0.5 * torch.randn(8), 0.5 * torch.randn(8)
    want = checks.ln_reference(x, w, b, 1e-5)
    for name, v in checks.ln_wrong_variants(x, w, b, 1e-5).items():
        if "eps" not in name:   # the eps variants only differ when the variance is tiny
            assert not checks.close(v, want), name


def test_hidden_checks_reject_the_packaged_reference():
    with pytest.raises(CheckFailed, match="imported"):
        hidden.block_pre_ln(reference.TransformerBlock)
    with pytest.raises(CheckFailed, match="imported"):
        hidden.layernorm_params(reference.LayerNorm)


def test_layernorm_may_not_call_the_builtin():
    class Cheat(nn.LayerNorm):
        pass

    with pytest.raises(CheckFailed, match="off limits"):
        checks.layernorm_values(Cheat)
