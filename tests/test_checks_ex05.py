"""Exercise 05 checks, run in-process (fast): the reference solution passes every test cell
(visible and hidden parts), each catalogued mistake fails the cells it names with a hint that
names it, each correct alternative passes everything, and the hidden oracles agree with each
other. tests/test_catalog.py repeats the catalog part through nbgrader itself."""

import math
import re

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook import mha as reference
from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex05 as checks
from awb_grader.catalog import ex05 as catalog
from awb_grader.course import SOLUTIONS
from awb_grader.hidden import ex05 as hidden

ASSIGNMENT = "05_multi_head_attention"
from awb_grader.variants import notebook_cells  # noqa: E402



def _cells():
    return notebook_cells(ASSIGNMENT)


SOLUTION_CELLS, TEST_CELLS, POINTS = _cells()


def _namespace(overrides=None):
    ns = {"math": math, "torch": torch, "nn": nn, "F": F, "checks": checks}
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
    assert set(SOLUTION_CELLS) == {"split_heads", "merge_heads", "MultiHeadAttention", "mha_param_count", "from_torch"}
    assert set(TEST_CELLS) == {"test_split_heads_shape", "test_split_heads_values", "test_merge_heads",
                               "test_mha_init", "test_mha_self", "test_mha_weights", "test_mha_mask",
                               "test_mha_cross", "test_mha_param_count", "test_from_torch"}
    assert sum(POINTS.values()) == 17
    for src in TEST_CELLS.values():  # every test cell has a visible and a hidden part
        assert "checks." in src and "hidden." in src


@pytest.mark.parametrize("test_id", sorted(TEST_CELLS))
def test_reference_solution_passes(test_id, capsys):
    ns = _namespace()
    assert _run(test_id, ns) is None
    assert "\u2714" in capsys.readouterr().out  # the green line


def test_catalog_is_large_enough():
    assert len(catalog.MISTAKES) >= 10
    ids = [m.id for m in catalog.MISTAKES]
    assert len(ids) == len(set(ids))
    for m in catalog.MISTAKES:
        assert set(m.must_fail) <= set(TEST_CELLS), m.id
        assert m.cell in SOLUTION_CELLS, m.id
    # the reshape mistakes of the brief are all there, and their hints are explicit
    for needed in ("split_direct_view", "merge_without_transpose", "scale_sqrt_d", "qkv_chunk_order",
                   "missing_w_o", "mask_not_broadcast_over_heads", "mask_wrong_axis", "softmax_query_axis",
                   "softmax_head_axis", "merge_heads_wrong_order", "cross_keys_from_x", "bias_dropped"):
        assert needed in ids


@pytest.mark.parametrize("mistake", catalog.MISTAKES, ids=lambda m: m.id)
def test_mistake_loses_points_with_a_hint(mistake):
    ns = _namespace({mistake.cell: mistake.source, **mistake.extra_cells})
    messages = {t: _run(t, ns) for t in mistake.must_fail}
    kept = [t for t, msg in messages.items() if msg is None]
    assert not kept, f"{mistake.id} keeps the points of {kept}"
    if mistake.hint:
        assert any(mistake.hint.lower() in msg.lower() for msg in messages.values()), (
            f"{mistake.id}: no message contains {mistake.hint!r}:\n" + "\n---\n".join(messages.values()))


@pytest.mark.parametrize("alt", catalog.ALTERNATIVES, ids=lambda a: a.id)
def test_alternative_gets_full_marks(alt, capsys):
    ns = _namespace(dict(alt.cells))
    failures = {t: msg for t in TEST_CELLS if (msg := _run(t, ns)) is not None}
    assert not failures, failures


def test_oracles_agree_with_each_other_and_the_reference_module():
    g = torch.Generator().manual_seed(0)
    for B, T, S, D, H in ((2, 3, 5, 12, 3), (1, 4, 4, 8, 1), (3, 2, 6, 20, 5)):
        ref = checks.random_torch_mha(D, H, seed=D)
        ours = reference.from_torch(ref).eval()
        x, kv = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
        mask = torch.rand(B, H, T, S, generator=g) > 0.4
        mask[..., 0] = True
        for args in ((x, None, None), (x, kv, mask), (x, None, mask[..., :T])):
            want, want_w = checks.torch_reference(ref, *args)
            loop, loop_w = hidden.loop_oracle(ref, *args)
            variant, variant_w = checks.variant_forward(*args, checks._params(ref), H)
            torch.testing.assert_close(loop, want, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(loop_w, want_w, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(variant, want, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(variant_w, want_w, atol=1e-5, rtol=1e-4)
            kw = {"kv": args[1], "mask": args[2]}
            torch.testing.assert_close(ours(x, **kw), want, atol=1e-5, rtol=1e-4)
        y = torch.randn(B, H, T, D // H, generator=g)
        assert torch.equal(hidden.split_oracle(hidden.merge_oracle(y), H), y)


def test_every_named_variant_differs_from_the_correct_output():
    """A variant equal to the right answer would make its hint fire on correct code."""
    g = torch.Generator().manual_seed(1)
    ref = checks.random_torch_mha(12, 3, seed=1)
    x, kv = torch.randn(2, 3, 12, generator=g), torch.randn(2, 5, 12, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool).tril()
    for key, (kw, _hint) in checks.MHA_MISTAKES.items():
        for args in ((x, kv, mask), (x, None, mask[:, :3]), (x, kv, None)):
            if (key == "mask_queries" and args[2] is None) or (key == "keys_from_x" and args[1] is None):
                continue  # that deviation only exists with a mask / with kv
            try:
                out, _ = checks.variant_forward(*args, checks._params(ref), 3, **kw)
            except RuntimeError:  # e.g. a query-axis mask with T != S: cannot match anything
                continue
            assert not checks.close(out, checks.torch_reference(ref, *args)[0]), (key, [a is None for a in args])


def test_hidden_checks_reject_the_packaged_reference():
    with pytest.raises(CheckFailed, match="imported"):
        hidden.mha_self(reference.MultiHeadAttention)


def test_forward_may_not_call_the_builtins():
    ns = _namespace()
    Base = ns["MultiHeadAttention"]

    class Cheat(Base):
        def forward(self, x, kv=None, mask=None):
            ref = nn.MultiheadAttention(self.d_model, self.n_heads, batch_first=True)
            return ref(x, x, x)[0]

    with pytest.raises(CheckFailed, match="off limits"):
        checks.mha_self(Cheat)
