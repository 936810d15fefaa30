"""Exercise 00's checks beyond the shared ones of tests/test_checks.py: what they block, and why
the center_tokens case is the one it is."""

import torch

import nbrun

A = "00_tensor_shapes"


def test_einsum_matmul_blocks_matmul_only_while_checking():
    ns = nbrun.namespace(A, {"einsum_matmul": "def einsum_matmul(A, B):\n    return torch.matmul(A, B)\n"})
    msg = nbrun.message(A, ns, "test_einsum_matmul_2d")
    assert msg and "off limits" in msg
    a = torch.randn(2, 3)
    assert (a @ a.T).shape == (2, 2)  # restored afterwards


def test_center_tokens_visible_case_hides_the_broadcast_bug():
    # the point of that check: the keepdim bug runs without error on its input and is named
    x = torch.randn(1, 3, 3)
    assert (x - x.mean(-1)).shape == x.shape
