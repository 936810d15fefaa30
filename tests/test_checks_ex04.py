"""Exercise 04 beyond the shared checks of tests/test_checks.py: matmul is blocked only while
einsum_attention is checked, and the hidden oracles agree with PyTorch."""

import pytest
import torch
import torch.nn.functional as F

from attention_workbook.checks import ex04 as checks
from awb_grader.hidden import ex04 as hidden


def test_matmul_is_blocked_only_inside_the_check():
    a = torch.randn(2, 3)
    with checks.forbid(checks.matmul_builtins(), checks.NO_MATMUL):
        with pytest.raises(Exception):
            a @ a.T
        assert torch.einsum("ij,kj->ik", a, a).shape == (2, 2)
    assert (a @ a.T).shape == (2, 2)  # restored


def test_hidden_oracles_agree_with_pytorch():
    g = torch.Generator().manual_seed(0)
    q, k, W = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 6, generator=g), torch.randn(4, 6, generator=g)
    assert torch.allclose(hidden._bilinear_oracle(q, k, W, (2,)), q @ W @ k.mT, atol=1e-5)
    W1, W2, w = torch.randn(7, 6, generator=g), torch.randn(7, 4, generator=g), torch.randn(7, generator=g)
    # the additive score as a one-layer MLP on each concatenated (query, key) pair
    pairs = torch.cat([q[:, :, None, :].expand(2, 3, 5, 4), k[:, None, :, :].expand(2, 3, 5, 6)], -1)
    W_cat = torch.cat([W2, W1], 1)  # (7, dq + dk)
    want = torch.tanh(F.linear(pairs, W_cat)) @ w
    assert torch.allclose(hidden._additive_oracle(q, k, W1, W2, w, (2,)), want, atol=1e-5)
