"""Exercise 01 checks, run in-process (fast): the reference solution passes every test cell
(visible and hidden parts), each catalogued mistake fails the cells it names with a hint that
names it, each correct alternative passes everything, and the checks block what they must.
tests/test_catalog.py repeats the catalog part through nbgrader itself."""

import re

import nbformat
import pytest
import torch

from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex01 as checks
from awb_grader.catalog import ex01 as catalog
from awb_grader.course import SOLUTIONS

ASSIGNMENT = "01_rnn_limitations"
from awb_grader.variants import notebook_cells  # noqa: E402

FUNCTIONS = {"rnn_forward", "gradient_vs_distance"}


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
    ns = _namespace({"rnn_forward": "def rnn_forward(x, h0, W_xh, W_hh, b):\n    raise NotImplementedError()\n"})
    msg = _run("test_rnn_forward_shape", ns)
    assert msg and "not implemented yet" in msg


def test_gradient_checks_do_not_depend_on_rnn_forward():
    # a wrong rnn_forward must not cost the gradient_vs_distance points: the checks pass `forward`
    wrong = "def rnn_forward(x, h0, W_xh, W_hh, b):\n    return torch.zeros(x.shape[0], x.shape[1], h0.shape[1])\n"
    ns = _namespace({"rnn_forward": wrong})
    for t in TEST_CELLS:
        if t.startswith("test_gradient_vs_distance"):
            assert _run(t, ns) is None, t
        elif t != "test_rnn_forward_shape":  # zeros have the right shape, wrong values
            assert _run(t, ns) is not None, t


def test_lecture_measurement_matches_the_exercise_definition():
    # the lecture plots the same quantity: VanillaRNN + the solution's gradient_vs_distance
    from attention_workbook.rnn import RNNConfig, VanillaRNN
    ns = _namespace()
    rnn = VanillaRNN(RNNConfig(d_in=3, d_hidden=5, weight_scale=0.8, seed=2)).double()
    x = torch.randn(2, 9, 3, dtype=torch.float64)
    xg = x.clone().requires_grad_(True)
    rnn(xg)[:, -1].sum().backward()
    lecture = xg.grad.norm(dim=(0, 2)).flip(0)
    h0 = torch.zeros(2, 5, dtype=torch.float64)
    ours = ns["gradient_vs_distance"](x, h0, rnn.W_xh.detach(), rnn.W_hh.detach(), rnn.b.detach())
    assert torch.allclose(lecture, ours)
    assert ours[0] > ours[-1]  # decays with distance at weight_scale 0.8

