"""Exercise 06 checks, run in-process (fast): the reference solution passes every test cell
(visible and hidden parts), each catalogued mistake fails the cells it names with a hint that
names it, each correct alternative passes everything, and the oracles agree with PyTorch.
tests/test_catalog.py repeats the catalog part through nbgrader itself."""

import math
import os
import re

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook import blocks as reference
from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex07 as checks
from attention_workbook.mha import MultiHeadAttention
from awb_grader.catalog import ex07 as catalog
from awb_grader.course import SOLUTIONS
from awb_grader.hidden import ex07 as hidden

ASSIGNMENT = "07_encoder_decoder"
from awb_grader.variants import notebook_cells  # noqa: E402



def _cells():
    return notebook_cells(ASSIGNMENT)


SOLUTION_CELLS, TEST_CELLS, POINTS = _cells()


def _namespace(overrides=None):
    ns = {"math": math, "os": os, "torch": torch, "nn": nn, "F": F, "checks": checks,
          "MultiHeadAttention": MultiHeadAttention, "FeedForward": reference.FeedForward,
          "TransformerBlock": reference.TransformerBlock, "sinusoidal_positions": reference.sinusoidal_positions}
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
    assert set(SOLUTION_CELLS) == {"DecoderBlock", "Seq2SeqTransformer", "greedy_decode"}
    assert len(TEST_CELLS) == 11 and sum(POINTS.values()) == 15
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
    # the by-parts decoder equals nn.TransformerDecoderLayer once the weights are the same
    layer = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    checks.randomize_(layer, 0)
    block = reference.from_torch_decoder_layer(layer).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    keep_t = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    keep_s = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    with torch.no_grad():
        want = layer(x, mem, tgt_mask=~torch.ones(5, 5, dtype=torch.bool).tril(),
                     tgt_key_padding_mask=~keep_t, memory_key_padding_mask=~keep_s)
        got = checks.decoder_by_parts(block, x, mem, keep_t, keep_s)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the greedy oracle agrees with the workbook's greedy_decode on scripted models
    scripts = [[4, 2], [5, 6, 7, 2], [8, 9, 3]]
    model = checks.ScriptedModel(scripts, 10, 1)
    assert torch.equal(checks.greedy_oracle(scripts, 6, 1, 2),
                       reference.greedy_decode(model, torch.zeros(3, 2, dtype=torch.long), 6, 1, 2))


def test_every_named_variant_differs_from_the_correct_output():
    layer = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    checks.randomize_(layer, 1)
    block = reference.from_torch_decoder_layer(layer).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [True] * 2 + [False] * 3])
    with torch.no_grad():
        want = checks.decoder_by_parts(block, x, mem, keep, keep)
        for name, kw in checks.WIRINGS.items():
            assert not checks.close(checks.decoder_by_parts(block, x, mem, keep, keep, **kw), want), name
    # each greedy variant differs from the right answer in at least one of the visible cases
    cases = [([[5, 6, 2, 7, 7]], 10), ([[4, 2], [5, 6, 7, 2], [8, 9, 3, 9, 3, 9, 3, 9]], 6), ([[2, 5], [6, 6, 2, 4]], 8)]
    names = checks.greedy_wrong_variants(*cases[0][:1], cases[0][1], 1, 2).keys()
    for name in names:
        differs = []
        for scripts, max_len in cases:
            want = checks.greedy_oracle(scripts, max_len, 1, 2)
            v = checks.greedy_wrong_variants(scripts, max_len, 1, 2)[name]
            differs.append(v.shape != want.shape or not torch.equal(v, want))
        assert any(differs), name


def test_hidden_checks_reject_the_packaged_reference():
    with pytest.raises(CheckFailed, match="imported"):
        hidden.decoder_values(reference.DecoderBlock)
    with pytest.raises(CheckFailed, match="imported"):
        hidden.greedy_single(reference.greedy_decode)
