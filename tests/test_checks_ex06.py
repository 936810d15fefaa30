"""Exercise 06 beyond the shared checks of tests/test_checks.py: the oracles agree with PyTorch and
the package's module, every named variant differs from the right answer, the hidden checks refuse
the package's reference, and LayerNorm may not call the built-in."""

import pytest
import torch
import torch.nn as nn

from attention_workbook import blocks as reference
from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex06 as checks
from awb_grader.hidden import ex06 as hidden


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
