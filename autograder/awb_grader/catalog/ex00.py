"""Misconception catalog for exercise 00 (tensor shape drills)."""

from . import Alternative, Mistake, edit

A = "00_tensor_shapes"

_PAIR = ("test_pairwise_dots_shape", "test_pairwise_dots_values")
_SPLIT = ("test_split_last_shape", "test_split_last_values")
_OUTER = ("test_batched_outer_shape", "test_batched_outer_values")
_EINSUM = ("test_einsum_matmul_2d", "test_einsum_matmul_batched")

MISTAKES = [
    # -- pairwise_dots ---------------------------------------------------------------------
    Mistake(
        id="pairwise_channels", cell="pairwise_dots",
        description="x.mT @ x: compares channels with channels, (B, C, C)",
        source=edit(A, "pairwise_dots", ("x @ x.transpose(-2, -1)", "x.mT @ x")),
        must_fail=_PAIR, hint="compared channels"),
    Mistake(
        id="pairwise_diagonal_only", cell="pairwise_dots",
        description="(x * x).sum(-1): only each token with itself, (B, T)",
        source=edit(A, "pairwise_dots", ("x @ x.transpose(-2, -1)", "(x * x).sum(dim=-1)")),
        must_fail=_PAIR, hint="diagonal"),
    Mistake(
        id="pairwise_dot_T", cell="pairwise_dots",
        description="x @ x.T: .T reverses all three axes of a batched tensor",
        source=edit(A, "pairwise_dots", ("x.transpose(-2, -1)", "x.T")),
        must_fail=_PAIR, hint="x.mT", visible=True),
    Mistake(
        id="pairwise_scaled", cell="pairwise_dots",
        description="divides the dot products by sqrt(C), anticipating attention's scaling",
        source=edit(A, "pairwise_dots", ("x @ x.transpose(-2, -1)", "x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5")),
        must_fail=("test_pairwise_dots_values",), hint="sqrt(C)"),
    Mistake(
        id="pairwise_softmax", cell="pairwise_dots",
        description="returns softmax(scores) instead of the raw dot products",
        source=edit(A, "pairwise_dots", ("x @ x.transpose(-2, -1)", "torch.softmax(x @ x.transpose(-2, -1), dim=-1)")),
        must_fail=("test_pairwise_dots_values",), hint="softmax"),
    # -- split_last -----------------------------------------------------------------------
    Mistake(
        id="split_swapped", cell="split_last",
        description="reshapes to (..., D // n, n): the two new axes swapped",
        source=edit(A, "split_last", ("], n, D // n)", "], D // n, n)")),
        must_fail=_SPLIT, hint="wrong way round"),
    Mistake(
        id="split_interleaved", cell="split_last",
        description="reshape to (..., D // n, n) then transpose: right shape, interleaved groups",
        source=edit(A, "split_last", (", n, D // n)      ", ", D // n, n).transpose(-1, -2)      ")),
        must_fail=("test_split_last_values",), hint="interleaved"),
    Mistake(
        id="split_assumes_3d", cell="split_last",
        description="unpacks B, T, D = x.shape: only works for 3-D inputs",
        source=edit(A, "split_last", ("D = x.shape[-1]", "B, T, D = x.shape"),
                    ("x.reshape(*x.shape[:-1], n, D // n)", "x.reshape(B, T, n, D // n)")),
        must_fail=_SPLIT + ("test_split_last_error",), hint="don't assume x is 3-D", visible=True),
    Mistake(
        id="split_groups_first", cell="split_last",
        description="reshape(n, ..., D // n): the group axis put in front of the leading axes",
        source=edit(A, "split_last", ("*x.shape[:-1], n", "n, *x.shape[:-1]")),
        must_fail=_SPLIT, hint="leading axis"),
    Mistake(
        id="split_no_error", cell="split_last",
        description="no divisibility check: reshape raises RuntimeError, not ValueError",
        source=edit(A, "split_last", (("    if D % n != 0:", 'equal groups")\n'), "")),
        must_fail=("test_split_last_error",), hint="not ValueError"),
    # -- batched_outer --------------------------------------------------------------------
    Mistake(
        id="outer_swapped", cell="batched_outer",
        description="a[:, None, :] * b[:, :, None]: gives (B, n, m)",
        source=edit(A, "batched_outer", ("a[:, :, None] * b[:, None, :]", "a[:, None, :] * b[:, :, None]")),
        must_fail=_OUTER, hint="a's axis must come first"),
    Mistake(
        id="outer_einsum_sums_batch", cell="batched_outer",
        description="einsum 'bi,bj->ij': the batch index is summed out",
        source=edit(A, "batched_outer", ("a[:, :, None] * b[:, None, :]", 'torch.einsum("bi,bj->ij", a, b)')),
        must_fail=_OUTER, hint="summed out"),
    Mistake(
        id="outer_matmul_over_batch", cell="batched_outer",
        description="a.T @ b: one (m, n) matrix summed over the batch",
        source=edit(A, "batched_outer", ("a[:, :, None] * b[:, None, :]", "a.T @ b")),
        must_fail=_OUTER, hint="batch axis is gone"),
    Mistake(
        id="outer_torch_outer", cell="batched_outer",
        description="torch.outer on 2-D inputs (it only takes vectors)",
        source=edit(A, "batched_outer", ("a[:, :, None] * b[:, None, :]", "torch.outer(a, b)")),
        must_fail=_OUTER, hint="only takes two vectors", visible=True),
    # -- einsum_matmul --------------------------------------------------------------------
    Mistake(
        id="einsum_uses_at", cell="einsum_matmul",
        description="uses @ instead of einsum",
        source=edit(A, "einsum_matmul", ('torch.einsum("...ik,...kj->...ij", A, B)', "A @ B")),
        must_fail=_EINSUM, hint="off limits"),
    Mistake(
        id="einsum_no_ellipsis", cell="einsum_matmul",
        description="'ik,kj->ij' without '...': fails for batched inputs",
        source=edit(A, "einsum_matmul", ('"...ik,...kj->...ij"', '"ik,kj->ij"')),
        must_fail=("test_einsum_matmul_batched",), hint="'...'", visible=True),
    Mistake(
        id="einsum_output_swapped", cell="einsum_matmul",
        description="'...ik,...kj->...ji': the output is transposed",
        source=edit(A, "einsum_matmul", ("->...ij", "->...ji")),
        must_fail=_EINSUM, hint="wrong way round"),
    Mistake(
        id="einsum_wrong_letters", cell="einsum_matmul",
        description="'...ik,...jk->...ij': B read as (m, k), i.e. A @ B.T",
        source=edit(A, "einsum_matmul", (",...kj->", ",...jk->")),
        must_fail=_EINSUM, hint="second-to-last"),
    # -- center_tokens --------------------------------------------------------------------
    Mistake(
        id="center_no_keepdim", cell="center_tokens",
        description="x - x.mean(-1): the (B, T) means broadcast against the channel axis",
        source=edit(A, "center_tokens", ("x.mean(dim=-1, keepdim=True)", "x.mean(-1)")),
        must_fail=("test_center_tokens_values",), hint="keepdim", visible=True),
    Mistake(
        id="center_over_time", cell="center_tokens",
        description="mean over the time axis (dim=1) instead of the channels",
        source=edit(A, "center_tokens", ("dim=-1", "dim=1")),
        must_fail=("test_center_tokens_values",), hint="mean over time"),
    Mistake(
        id="center_global_mean", cell="center_tokens",
        description="subtracts the mean of the whole tensor",
        source=edit(A, "center_tokens", ("x.mean(dim=-1, keepdim=True)", "x.mean()")),
        must_fail=("test_center_tokens_values",), hint="whole tensor"),
    Mistake(
        id="center_normalises", cell="center_tokens",
        description="also divides by the standard deviation (full LayerNorm, not asked)",
        source=edit(A, "center_tokens", ("return x - x.mean(dim=-1, keepdim=True)",
                                        "return (x - x.mean(dim=-1, keepdim=True)) / x.std(-1, keepdim=True)")),
        must_fail=("test_center_tokens_values",), hint="standard deviation"),
]

ALTERNATIVES = [
    Alternative(
        id="einsum_and_unflatten",
        description="einsum everywhere, unflatten for the split",
        cells={
            "pairwise_dots": '''def pairwise_dots(x):
    return torch.einsum("btc,bsc->bts", x, x)
''',
            "split_last": '''def split_last(x, n):
    if x.shape[-1] % n != 0:
        raise ValueError(f"{x.shape[-1]} is not divisible by {n}")
    return x.unflatten(-1, (n, x.shape[-1] // n))
''',
            "batched_outer": '''def batched_outer(a, b):
    return torch.einsum("bi,bj->bij", a, b)
''',
            "einsum_matmul": '''def einsum_matmul(A, B):
    return torch.einsum("...ab,...bc->...ac", A, B)
''',
            "center_tokens": '''def center_tokens(x):
    return x - x.sum(dim=2, keepdim=True) / x.shape[2]
''',
        }),
    Alternative(
        id="unsqueeze_chunk_and_cat",
        description="unsqueeze + matmul for the outer product, chunk + stack for the split",
        cells={
            "pairwise_dots": '''def pairwise_dots(x):
    return torch.matmul(x, x.permute(0, 2, 1))
''',
            "split_last": '''def split_last(x, n):
    D = x.size(-1)
    if D % n:
        raise ValueError("n must divide the last dimension")
    return torch.stack(x.chunk(n, dim=-1), dim=-2)
''',
            "batched_outer": '''def batched_outer(a, b):
    return a.unsqueeze(2) @ b.unsqueeze(1)
''',
            "einsum_matmul": '''def einsum_matmul(A, B):
    return torch.einsum("...ik,...kj", A, B)
''',
            "center_tokens": '''def center_tokens(x):
    return x - x.mean(dim=-1).unsqueeze(-1)
''',
        }),
    Alternative(
        id="warnings_dot_T_on_3d",
        description="pairwise_dots through x.T on a 3-D tensor, put back in order with permute (torch warns, once, "
                    "that x.T on tensors that are not 2-D is deprecated), batched_outer on a torch.tensor(a) copy "
                    "(torch warns to use clone): correct, so full marks, warnings or not",
        cells={"pairwise_dots": edit(A, "pairwise_dots", ("return x @ x.transpose(-2, -1)",
                                                          "return x @ x.T.permute(2, 0, 1)")),
               "batched_outer": edit(A, "batched_outer",
                                     ("return a[:, :, None]", "return torch.tensor(a)[:, :, None]"))}),
]
