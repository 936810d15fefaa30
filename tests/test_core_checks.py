"""The machinery every check shares (attention_workbook.checks.core): warnings are recorded,
never printed, and explain a failure; one rule for integer answers; every check is guarded."""

import importlib
import re
import warnings

import numpy as np
import pytest
import torch

from attention_workbook.checks import core
from attention_workbook.checks.core import CheckFailed
from awb_grader.course import assignments
from awb_grader.variants import notebook_cells


# ----------------------------------------------------------------------------------------
# integer answers
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [12, np.int64(12), torch.tensor(12), torch.tensor([12]), torch.tensor([[12]])])
def test_integer_answers_that_count(value):
    assert core.as_int(value) == 12
    assert core.expect_int(value, "f()") == 12


@pytest.mark.parametrize("value,says", [(12.0, "float"), (torch.tensor(12.0), "float"), (True, "bool"),
                                        (torch.tensor([1, 2]), "Tensor"), (None, "None"), ("12", "str")])
def test_integer_answers_that_do_not(value, says):
    assert core.as_int(value) is None
    with pytest.raises(CheckFailed, match=says):
        core.expect_int(value, "f()")


def test_a_float_count_is_refused_by_visible_and_hidden_checks_alike():
    from attention_workbook.checks import ex05, ex06
    from awb_grader.hidden import ex05 as h05
    from awb_grader.hidden import ex06 as h06

    def mha_param_count(d_model, bias=True):
        return 4.0 * d_model * d_model + (4 * d_model if bias else 0)

    def block_param_count(d_model, d_ff, bias=True):
        return float(4 * d_model * d_model + 2 * d_model * d_ff + ((5 * d_model + d_ff) if bias else 0) + 4 * d_model)

    for check, fn in ((ex05.mha_param_count, mha_param_count), (h05.mha_param_count, mha_param_count),
                      (ex06.block_param_count, block_param_count), (h06.block_param_count, block_param_count)):
        mha_param_count.__module__ = block_param_count.__module__ = "__main__"
        with pytest.raises(CheckFailed):
            check(fn)

    def as_tensor(d_model, bias=True):    # a one-element integer tensor is an integer answer
        return torch.tensor([4 * d_model * d_model + (4 * d_model if bias else 0)])

    as_tensor.__module__ = "__main__"
    ex05.mha_param_count(as_tensor)
    h05.mha_param_count(as_tensor)


# ----------------------------------------------------------------------------------------
# warnings
# ----------------------------------------------------------------------------------------
def _noisy(x):
    warnings.warn("deprecated in the student's own code", DeprecationWarning)
    return x


def test_call_records_student_warnings_instead_of_printing_them(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert core.call(_noisy, 3) == 3
    assert capsys.readouterr().err == ""


def test_a_guarded_check_prints_no_warning_and_explains_a_failure_with_it(capsys):
    def check(fn):
        float(torch.ones(1, requires_grad=True) * 2)      # a tensor that requires grad -> a number: torch warns
        out = core.call(fn, torch.ones(2, 3), name="f")
        if out.shape != (2, 3):
            raise CheckFailed("f has the wrong shape")

    guarded = core.guarded(check)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        guarded(lambda x: x)                                # passes: nothing printed
        with pytest.raises(CheckFailed) as info:
            guarded(lambda x: torch.softmax(x, 0).T.T[None] if _noisy(True) else x)
    assert capsys.readouterr().err == ""
    assert "Python warned: deprecated in the student's own code" in info.value.plain()


def test_a_known_warning_becomes_the_hint_of_an_error_it_explains():
    def grad_of_a_non_leaf(x):
        y = x.detach().clone().requires_grad_(True).double()
        (y ** 2).sum().backward()
        return y.grad.norm()                                # y is not a leaf: .grad is None (torch warns)

    with pytest.raises(CheckFailed) as info:
        core.call(grad_of_a_non_leaf, torch.ones(3), name="gradient")
    assert "not a leaf" in info.value.plain() and "torch.autograd.grad" in info.value.hint


CHECK_CALL = re.compile(r"^(checks|hidden)\.(\w+)\(", re.M)


@pytest.mark.parametrize("assignment", assignments())
def test_every_check_a_test_cell_calls_is_guarded(assignment):
    n = assignment[:2]
    modules = {"checks": importlib.import_module(f"attention_workbook.checks.ex{n}"),
               "hidden": importlib.import_module(f"awb_grader.hidden.ex{n}")}
    _, tests, _ = notebook_cells(assignment)
    calls = {(m, f) for src in tests.values() for m, f in CHECK_CALL.findall(src)}
    assert calls
    unguarded = [f"{m}.{f}" for m, f in sorted(calls) if not getattr(getattr(modules[m], f), "__awb_guarded__", False)]
    assert not unguarded, unguarded
