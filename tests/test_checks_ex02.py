"""Exercise 02 checks, run in-process (fast): the reference solution passes every test cell
(visible and hidden parts), each catalogued mistake fails the cells it names with a hint that
names it, and each correct alternative passes everything. tests/test_catalog.py repeats the
catalog part through nbgrader itself."""

import re

import nbformat
import pytest
import torch

from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex02 as checks
from awb_grader.catalog import ex02 as catalog
from awb_grader.course import SOLUTIONS

ASSIGNMENT = "02_attention_as_lookup"
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
    assert set(SOLUTION_CELLS) == {"hard_lookup", "soft_lookup"}
    assert set(TEST_CELLS) == {"test_hard_lookup_single", "test_hard_lookup_batch", "test_soft_lookup_single",
                               "test_soft_lookup_batch", "test_soft_lookup_temperature"}
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
    ns = _namespace({"soft_lookup": "def soft_lookup(query, keys, values, temperature=1.0):\n"
                                    "    raise NotImplementedError()\n"})
    msg = _run("test_soft_lookup_single", ns)
    assert msg and "not implemented yet" in msg


def test_hard_and_soft_agree_at_low_temperature():
    ns = _namespace()
    g = torch.Generator().manual_seed(0)
    keys, values, q = torch.randn(6, 4, generator=g), torch.randn(6, 3, generator=g), torch.randn(5, 4, generator=g)
    assert torch.allclose(ns["soft_lookup"](q, keys, values, temperature=1e-4), ns["hard_lookup"](q, keys, values))
