"""Exercise 00 checks, run in-process (fast): the reference solution passes every test cell
(visible and hidden parts), each catalogued mistake fails the cells it names with a hint that
names it, each correct alternative passes everything, and the checks block what they must.
tests/test_catalog.py repeats the catalog part through nbgrader itself."""

import re

import nbformat
import pytest
import torch

from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex00 as checks
from awb_grader.catalog import ex00 as catalog
from awb_grader.course import SOLUTIONS

ASSIGNMENT = "00_tensor_shapes"
from awb_grader.variants import notebook_cells  # noqa: E402

FUNCTIONS = {"pairwise_dots", "split_last", "batched_outer", "einsum_matmul", "center_tokens"}


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
    assert set(SOLUTION_CELLS) == FUNCTIONS
    for f in FUNCTIONS:  # every function has at least one test cell of its own
        assert any(t.startswith(f"test_{f}") for t in TEST_CELLS), f
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


def test_every_function_has_three_mistakes():
    for f in FUNCTIONS:
        assert len([m for m in catalog.MISTAKES if m.cell == f]) >= 3, f


def test_unanswered_cell_says_not_implemented():
    ns = _namespace({"split_last": "def split_last(x, n):\n    raise NotImplementedError()\n"})
    msg = _run("test_split_last_shape", ns)
    assert msg and "not implemented yet" in msg


def test_einsum_matmul_blocks_matmul_only_while_checking():
    ns = _namespace({"einsum_matmul": "def einsum_matmul(A, B):\n    return torch.matmul(A, B)\n"})
    msg = _run("test_einsum_matmul_2d", ns)
    assert msg and "off limits" in msg
    a = torch.randn(2, 3)
    assert (a @ a.T).shape == (2, 2)  # restored afterwards


def test_center_tokens_visible_case_hides_the_broadcast_bug():
    # the point of that check: the keepdim bug runs without error on its input and is named
    x = torch.randn(1, 3, 3)
    assert (x - x.mean(-1)).shape == x.shape


def test_unanswered_split_last_error_says_not_implemented():
    ns = _namespace({"split_last": "def split_last(x, n):\n    raise NotImplementedError()\n"})
    msg = _run("test_split_last_error", ns)
    assert msg and "not implemented yet" in msg
