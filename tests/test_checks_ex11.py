"""Exercise 11 beyond the shared checks of tests/test_checks.py: the checks' own oracle and tile simulations
agree with PyTorch (a naming simulation that is wrong with no mistake switched on would name mistakes that are
not there); a kernel that stores past its last row is named; a class that subclasses the provided
CausalSelfAttention is the learner's own work, one that subclasses lecture 05's MultiHeadAttention is not; and
the Function's gradients come back from the replay (``_adapter.vjp``) as autograd computes them in-process."""

import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("attention_workbook.tritonenv")   # (it skips where Triton is missing)

import nbrun
from attention_workbook.checks import ex11 as checks
from attention_workbook.checks import own
from attention_workbook.checks.core import CheckFailed

A = "11_flash_attention_backward"


def _inputs(seed, B=2, H=2, T_Q=21, T_K=37, D=16):
    g = torch.Generator().manual_seed(seed)
    return checks.make_inputs(g, B, H, T_Q, T_K, D)


@pytest.mark.parametrize("causal", [False, True])
def test_the_checks_oracle_is_pytorchs_attention_and_autograd(causal):
    x = _inputs(0, T_K=21 if causal else 37)
    leaves = [x[n].double().requires_grad_(True) for n in ("q", "k", "v")]
    o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    o.backward(x["do"].double())
    ref = checks.reference(x["q"], x["k"], x["v"], x["do"], causal=causal)
    assert (ref["o"] - o.detach()).abs().max() < 1e-12
    for name, leaf in zip(("dq", "dk", "dv"), leaves):
        assert (ref[name] - leaf.grad).abs().max() < 1e-12, name
    s = leaves[0].detach() @ leaves[1].detach().transpose(-1, -2) / 4.0
    if causal:
        s = s.masked_fill(torch.ones(21, 21, dtype=torch.bool).triu(1), float("-inf"))
    assert (ref["L"] - torch.logsumexp(s, -1)).abs().max() < 1e-12


@pytest.mark.parametrize("causal,bm,bn", [(False, 16, 32), (True, 32, 16), (True, 16, 16)])
def test_the_tile_simulations_are_right_with_no_mistake_switched_on(causal, bm, bn):
    x = _inputs(1, T_Q=40 if causal else 21, T_K=40 if causal else 37)
    ref = checks.reference(x["q"], x["k"], x["v"], x["do"], causal=causal)
    o, m, l = checks.fwd_sim(x["q"], x["k"], x["v"], causal, bm, bn)
    assert (o - ref["o"]).abs().max() < 1e-12 and (m + torch.log(l) - ref["L"]).abs().max() < 1e-12
    sim = checks.bwd_sim(x["q"], x["k"], x["v"], x["do"], ref["L"], ref["delta"], causal, bm, bn)
    for name in ("dq", "dk", "dv"):
        assert (sim[name] - ref[name]).abs().max() < 1e-10, name
    # and every named variant differs from the right answer (else it would name a mistake that is not there)
    for name, (dk, dv) in checks.dkdv_variants(x["q"], x["k"], x["v"], x["do"], ref["L"], ref["delta"],
                                               causal, bm, bn).items():
        assert not (checks.close(dk, ref["dk"], atol=1e-6) and checks.close(dv, ref["dv"], atol=1e-6)), name
    for name, dq in checks.dq_variants(x["q"], x["k"], x["v"], x["do"], ref["L"], ref["delta"], causal, bm,
                                       bn).items():
        assert not checks.close(dq, ref["dq"], atol=1e-6), name


def test_a_store_past_the_last_key_is_named():
    """Not in the catalog as its own entry: dK stored without its mask writes into the NaN after the view."""
    src = nbrun.answers(A)["dkdv_kernel"].replace(
        "(dk * scale).to(DK.dtype.element_ty), mask=cols[:, None] < T_K)", "(dk * scale).to(DK.dtype.element_ty))")
    ns = nbrun.namespace(A, {"dkdv_kernel": src})
    with nbrun.grading(A), own.trusting(), pytest.raises(CheckFailed, match="wrote past the rows of dK"):
        checks.dkdv_values(ns["dkdv_kernel"])


def test_a_subclass_of_the_provided_attention_is_own_work_and_of_its_parent_not():
    ns = nbrun.namespace(A)
    assert own.reference_uses(ns["FlashCausalSelfAttention"], "11", ns) == []
    from attention_workbook.mha import MultiHeadAttention

    class Sneaky(MultiHeadAttention):            # as if written in a notebook cell
        __module__ = "__main__"

    assert own.reference_uses(Sneaky, "11", ns) == [
        "subclasses attention_workbook.mha.MultiHeadAttention"]


def test_the_functions_gradients_come_back_from_the_replay(tmp_path):
    """``_adapter.vjp`` in-process and through the replay process (the outside verdict's path) give what autograd
    gives for the solution's FlashAttention: strided inputs and a strided dO included."""
    import nbformat

    from awb_grader.core.course import SOLUTIONS, ensure_kernel_path
    from awb_grader.hidden import _adapter
    from awb_grader.verdict import outside as verdict

    ensure_kernel_path()
    x = _inputs(2, B=1, H=2, T_Q=20, T_K=20)
    views = {n: checks.place(x[n], x[n].shape, lay)[1]
             for n, lay in (("q", "transpose"), ("k", "kT"), ("v", "slice"), ("do", "transpose"))}
    ns = nbrun.namespace(A)
    with nbrun.grading(A):
        local_o, local = _adapter.vjp(ns["flash_attention"], views["q"], views["k"], views["v"],
                                      grad_output=views["do"], name="flash_attention", causal=True)
    nb = nbformat.read(SOLUTIONS / A / f"{A}.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("grade")]
    replay = verdict.Replay(code, tmp_path, timeout=120)
    try:
        _adapter._CLIENT = replay
        remote_o, remote = _adapter.vjp(replay.proxies()["flash_attention"], views["q"], views["k"], views["v"],
                                        grad_output=views["do"], name="flash_attention", causal=True)
    finally:
        _adapter._CLIENT = None
        replay.close()
    ref = checks.reference(views["q"], views["k"], views["v"], views["do"], causal=True)
    assert (remote_o.double() - ref["o"]).abs().max() < 1e-5 and (local_o.double() - ref["o"]).abs().max() < 1e-5
    for name, a, b in zip(("dq", "dk", "dv"), local, remote):
        assert (a.double() - ref[name]).abs().max() < 1e-4, name
        assert torch.equal(a, b), name
    assert math.isfinite(float(remote[0].sum()))
