"""Exercise 03 checks, run in-process (fast): the reference solution passes every test cell
(visible and hidden parts), each catalogued mistake fails the cells it names with a hint that
names it, and each correct alternative passes everything. tests/test_catalog.py repeats the
catalog part through nbgrader itself."""

import re

import nbformat
import pytest
import torch

from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex03 as checks
from awb_grader.catalog import ex03 as catalog
from awb_grader.course import SOLUTIONS

ASSIGNMENT = "03_simplified_self_attention"
from awb_grader.variants import notebook_cells  # noqa: E402



def _cells():
    return notebook_cells(ASSIGNMENT)[:2]


SOLUTION_CELLS, TEST_CELLS = _cells()


def _namespace(overrides=None):
    ns = {"torch": torch, "checks": checks}
    for gid, src in {**SOLUTION_CELLS, **(overrides or {})}.items():
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
    assert set(SOLUTION_CELLS) == {"simple_self_attention_loops", "simple_self_attention", "softmax_self_attention"}
    assert set(TEST_CELLS) == {"test_loops_values", "test_loops_batch", "test_simple_values", "test_simple_batch",
                               "test_softmax_values", "test_softmax_batch"}
    for src in TEST_CELLS.values():  # every test cell has a visible and a hidden part
        assert "checks." in src and "hidden." in src


@pytest.mark.parametrize("test_id", sorted(TEST_CELLS))
def test_reference_passes(test_id, capsys):
    assert _run(test_id, _namespace()) is None
    assert "\u2714" in capsys.readouterr().out  # the green line was printed


@pytest.mark.parametrize("mistake", catalog.MISTAKES, ids=lambda m: m.id)
def test_mistake_is_caught(mistake):
    assert len([m for m in catalog.MISTAKES if m.cell == mistake.cell]) >= 3
    ns = _namespace({mistake.cell: mistake.source, **mistake.extra_cells})
    messages = {t: _run(t, ns) for t in mistake.must_fail}
    kept = [t for t, msg in messages.items() if msg is None]
    assert not kept, f"{mistake.id} passes {kept}"
    if mistake.hint:
        assert any(mistake.hint.lower() in msg.lower() for msg in messages.values()), messages


@pytest.mark.parametrize("alt", catalog.ALTERNATIVES, ids=lambda a: a.id)
def test_alternative_passes(alt):
    ns = _namespace(alt.cells)
    failed = {t: msg for t in TEST_CELLS if (msg := _run(t, ns)) is not None}
    assert not failed, failed


def test_unanswered_cell_says_not_implemented():
    ns = _namespace({"softmax_self_attention": "def softmax_self_attention(x):\n    raise NotImplementedError()\n"})
    msg = _run("test_softmax_values", ns)
    assert msg and "not implemented yet" in msg


def test_loops_and_matrix_agree_and_the_lecture_sentence():
    ns = _namespace()
    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(ns["simple_self_attention_loops"](x), ns["simple_self_attention"](x), atol=1e-5)
    # softmax version: every output is a convex combination of the inputs (rows of weights sum to 1)
    y = ns["softmax_self_attention"](x)
    assert (y.amax(-2) <= x.amax(-2) + 1e-5).all() and (y.amin(-2) >= x.amin(-2) - 1e-5).all()


def test_batch_hint_names_dot_T():
    ns = _namespace({"simple_self_attention": "def simple_self_attention(x):\n    return x @ x.T @ x / x.shape[-2]\n"})
    msg = _run("test_simple_batch", ns)
    assert msg and "x.transpose(-2, -1)" in msg
