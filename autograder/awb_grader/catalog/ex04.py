"""Misconception catalog for exercise 04 (softmax, masks, scaled dot-product attention)."""

from . import Alternative, Mistake, edit

A = "04_queries_keys_values"

_SDPA_ALL = ("test_sdpa_values", "test_sdpa_causal", "test_sdpa_padding")

MISTAKES = [
    # -- softmax ---------------------------------------------------------------------------
    Mistake(
        id="softmax_wrong_axis", cell="softmax", label="softmax over the wrong axis",
        description="softmax normalised over the first axis instead of `dim`",
        source=edit(A, "softmax", ("amax(dim=dim", "amax(dim=0"), ("sum(dim=dim", "sum(dim=0")),
        must_fail=("test_softmax_values", "test_softmax_dim"), hint="softmax over dim="),
    Mistake(
        id="softmax_no_max_subtraction", cell="softmax", label="softmax without the row max",
        description="softmax without subtracting the maximum: overflows to nan for large scores",
        source=edit(A, "softmax", (("shifted = x", "e = shifted.exp()"), "e = torch.exp(x)")),
        must_fail=("test_softmax_stability",), hint="subtract the maximum"),
    Mistake(
        id="softmax_ignores_dim", cell="softmax", label="softmax ignores dim",
        description="softmax always over the last axis, ignoring the `dim` argument",
        source=edit(A, "softmax", ("amax(dim=dim", "amax(dim=-1"), ("sum(dim=dim", "sum(dim=-1")),
        must_fail=("test_softmax_dim",), hint="dim=", visible=True),
    Mistake(
        id="softmax_default_dim_0", cell="softmax", label="softmax's default dim is 0",
        description="softmax(x, dim=0): right whenever dim is passed, wrong for softmax(x) (a surviving mutant "
                    "of the solution until the checks called softmax without dim)",
        source=edit(A, "softmax", ("dim: int = -1", "dim: int = 0")),
        must_fail=("test_softmax_values",), hint="default -1"),
    Mistake(
        id="softmax_global_max", cell="softmax", label="softmax with the global max",
        description="subtracts the global maximum instead of each row's: rows far below it underflow to 0/0",
        source=edit(A, "softmax", ("x.amax(dim=dim, keepdim=True)", "x.max()")),
        must_fail=("test_softmax_stability",), hint="maximum of the whole tensor"),
    Mistake(
        id="softmax_uses_builtin", cell="softmax", label="calls torch.softmax",
        description="calls torch.softmax instead of writing the softmax",
        source=edit(A, "softmax",
                    (("shifted = x", "e.sum(dim=dim, keepdim=True)"), "return torch.softmax(x, dim=dim)")),
        must_fail=("test_softmax_values", "test_softmax_dim", "test_softmax_stability"), hint="off limits"),
    # -- masks -----------------------------------------------------------------------------
    Mistake(
        id="causal_mask_upper", cell="causal_mask", label="causal mask shows the future",
        description="causal mask as the upper triangle: tokens see the future instead of the past",
        source=edit(A, "causal_mask", (".tril()", ".triu()")),
        must_fail=("test_causal_mask",), hint="future"),
    Mistake(
        id="causal_mask_diagonal", cell="causal_mask", label="causal mask hides the diagonal",
        description="causal mask that also hides the diagonal: a token may not attend to itself",
        source=edit(A, "causal_mask", (".tril()", ".tril(diagonal=-1)")),
        must_fail=("test_causal_mask",), hint="diagonal"),
    Mistake(
        id="causal_mask_float", cell="causal_mask", label="causal mask of floats",
        description="causal mask of floats (1.0/0.0) instead of booleans",
        source=edit(A, "causal_mask", (", dtype=torch.bool", "")),
        must_fail=("test_causal_mask",), hint="torch.bool", visible=True),
    Mistake(
        id="padding_mask_queries", cell="padding_mask", label="padding mask on the query axis",
        description="padding mask on the query axis (B, T, 1): keys and queries swapped",
        source=edit(A, "padding_mask", ("[:, None, :]", "[:, :, None]")),
        must_fail=("test_padding_mask",), hint="keys and queries are swapped"),
    Mistake(
        id="padding_mask_inverted", cell="padding_mask", label="padding mask inverted",
        description="padding mask True on the padding (the inverse of 'may attend')",
        source=edit(A, "padding_mask", ("] < lengths", "] >= lengths")),
        must_fail=("test_padding_mask",), hint="inverted"),
    Mistake(
        id="padding_mask_off_by_one", cell="padding_mask", label="padding mask off by one",
        description="padding mask keeps position == length (positions count from 0)",
        source=edit(A, "padding_mask", ("] < lengths", "] <= lengths")),
        must_fail=("test_padding_mask",), hint="off by one"),
    # -- scaled dot-product attention -------------------------------------------------------
    Mistake(
        id="sdpa_no_scaling", cell="scaled_dot_product_attention", label="no sqrt(d) scaling",
        description="attention scores not divided by sqrt(d): the softmax saturates as d grows",
        source=edit(A, "scaled_dot_product_attention", (" / math.sqrt(d)", "")),
        must_fail=_SDPA_ALL, hint="no scaling"),
    Mistake(
        id="sdpa_scale_by_d", cell="scaled_dot_product_attention", label="scaled by d, not sqrt(d)",
        description="attention scores divided by d instead of sqrt(d)",
        source=edit(A, "scaled_dot_product_attention", ("math.sqrt(d)", "d")),
        must_fail=_SDPA_ALL, hint="scaling by d instead of sqrt(d)"),
    Mistake(
        id="sdpa_mask_after_softmax", cell="scaled_dot_product_attention", label="mask applied after the softmax",
        description="mask applied to the weights after the softmax: rows no longer sum to 1",
        source=edit(A, "scaled_dot_product_attention",
                    (("if mask is not None:", "rows sum to 1"),
                     "weights = torch.softmax(scores, dim=-1)\n"
                     "    if mask is not None:\n"
                     "        weights = weights.masked_fill(~mask, 0.0)")),
        must_fail=("test_sdpa_causal", "test_sdpa_padding"), hint="after the softmax"),
    Mistake(
        id="sdpa_mask_after_softmax_renormalised", cell="scaled_dot_product_attention",
        label="mask after the softmax, renormalised",
        description="weights zeroed where the mask is False after the softmax, then renormalised: right in exact "
                    "arithmetic, nan when a masked key has a huge score (lecture 04's extreme case)",
        source=edit(A, "scaled_dot_product_attention",
                    ("""    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))     # blocked keys: exp(-inf) = 0
    weights = torch.softmax(scores, dim=-1)                   # (..., Tq, Tk), rows sum to 1
""", """    weights = torch.softmax(scores, dim=-1)                   # (..., Tq, Tk)
    if mask is not None:
        weights = weights * mask                              # zero the blocked keys
        weights = weights / weights.sum(dim=-1, keepdim=True)  # rows sum to 1 again
""")),
        must_fail=("test_sdpa_causal", "test_sdpa_padding"), hint="masked and renormalised"),
    Mistake(
        id="sdpa_scale_sqrt_dv", cell="scaled_dot_product_attention", label="scaled by sqrt(dv)",
        description="scores divided by the square root of the values' width dv instead of d",
        source=edit(A, "scaled_dot_product_attention", ("/ math.sqrt(d)", "/ math.sqrt(v.shape[-1])")),
        must_fail=_SDPA_ALL, hint="sqrt(dv)"),
    Mistake(
        id="sdpa_builtin", cell="scaled_dot_product_attention", label="F.scaled_dot_product_attention used",
        description="hands the attention to F.scaled_dot_product_attention (the text rules it out): real code "
                    "that did this scored full marks before the rule was enforced",
        source=edit(A, "scaled_dot_product_attention",
                    ("""    weights = torch.softmax(scores, dim=-1)                   # (..., Tq, Tk), rows sum to 1
    return weights @ v, weights                               # (..., Tq, dv)""",
                     """    weights = torch.softmax(scores, dim=-1)                   # (..., Tq, Tk), rows sum to 1
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, weights                                       # (..., Tq, dv)""")),
        must_fail=("test_sdpa_shapes",) + _SDPA_ALL, hint="off limits"),
    Mistake(
        id="sdpa_mask_zero_not_inf", cell="scaled_dot_product_attention", label="masked scores 0, not -inf",
        description="masked scores filled with 0 instead of -inf: masked keys still get weight",
        source=edit(A, "scaled_dot_product_attention", ('float("-inf")', "0.0")),
        must_fail=("test_sdpa_causal", "test_sdpa_padding"), hint="instead of -inf"),
    Mistake(
        id="sdpa_mask_inverted", cell="scaled_dot_product_attention", label="attention mask inverted",
        description="mask used the other way round (fills where mask is True)",
        source=edit(A, "scaled_dot_product_attention", ("~", "")),
        must_fail=("test_sdpa_causal", "test_sdpa_padding"), hint="inverted"),
    Mistake(
        id="sdpa_softmax_query_axis", cell="scaled_dot_product_attention", label="softmax over the queries",
        description="softmax over the query axis (dim=-2) instead of the keys",
        source=edit(A, "scaled_dot_product_attention", ("=-1)                   ", "=-2)                   ")),
        must_fail=_SDPA_ALL, hint="query axis"),
    Mistake(
        id="sdpa_weights_transposed", cell="scaled_dot_product_attention", label="weights transposed",
        description="returns the weights transposed, (..., Tk, Tq)",
        source=edit(A, "scaled_dot_product_attention", ("weights                               ",
                                                        "weights.transpose(-2, -1)                               ")),
        must_fail=("test_sdpa_shapes",) + _SDPA_ALL, hint="transposed"),
    Mistake(
        id="sdpa_transpose_1_2", cell="scaled_dot_product_attention", label="k.transpose(1, 2)",
        description="transposes axes 1 and 2 of k: right for (B, T, d) only, wrong with other batch dims",
        source=edit(A, "scaled_dot_product_attention", ("k.transpose(-2, -1)", "k.transpose(1, 2)")),
        must_fail=_SDPA_ALL + ("test_sdpa_shapes",), hint="only for 3-D inputs", visible=True),
    Mistake(
        id="sdpa_k_dot_T", cell="scaled_dot_product_attention", label="k.T on a batch",
        description="uses k.T, which reverses every axis of a batched tensor, instead of k.transpose(-2, -1)",
        source=edit(A, "scaled_dot_product_attention", ("k.transpose(-2, -1)", "k.T")),
        must_fail=("test_sdpa_shapes",) + _SDPA_ALL, hint="shape", visible=True),
    # -- contract only: right for some of the inputs the text promises, visibly wrong on the others
    Mistake(
        id="sdpa_bmm_3d_only", cell="scaled_dot_product_attention",
        description="torch.bmm with k.permute(0, 2, 1): right for (B, T, d) inputs only, fails with no or two batch axes",
        source=edit(A, "scaled_dot_product_attention",
                    ("q @ k.transpose(-2, -1)", "torch.bmm(q, k.permute(0, 2, 1))"),
                    ("return weights @ v, weights", "return torch.bmm(weights, v), weights")),
        must_fail=("test_sdpa_shapes",) + _SDPA_ALL, hint="only for 3-D inputs", visible=True),
    Mistake(
        id="sdpa_mask_gets_batch_axis", cell="scaled_dot_product_attention",
        description="adds a batch axis to the mask (mask[None]): right for a (T, T) mask on 3-D inputs only",
        source=edit(A, "scaled_dot_product_attention",
                    ("scores.masked_fill(~mask,", "scores.masked_fill(~mask[None],")),
        must_fail=("test_sdpa_causal", "test_sdpa_padding"), hint="as it is", visible=True),
    Mistake(
        id="padding_mask_2d", cell="padding_mask",
        description="padding mask of shape (B, T), without the axis that broadcasts over the queries",
        source=edit(A, "padding_mask", ("[:, None, :]  # (B, 1, T)", "  # (B, T)")),
        must_fail=("test_padding_mask",), hint="one row per sequence", visible=True),
]

ALTERNATIVES = [
    Alternative(
        id="einsum_and_loops",
        description="einsum attention, a logsumexp softmax, loop-built masks",
        cells={
            "softmax": '''def softmax(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
''',
            "causal_mask": '''def causal_mask(T):
    m = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        for j in range(i + 1):
            m[i, j] = True
    return m
''',
            "padding_mask": '''def padding_mask(lengths, T):
    B = lengths.shape[0]
    m = torch.zeros(B, 1, T, dtype=torch.bool)
    for b in range(B):
        m[b, 0, : int(lengths[b])] = True
    return m
''',
            "scaled_dot_product_attention": '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.einsum("...id,...jd->...ij", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    weights = softmax(scores, dim=-1)
    return torch.einsum("...ij,...jd->...id", weights, v), weights
''',
        }),
    Alternative(
        id="explicit_max_and_bmm_style",
        description="softmax with max(...).values, masked scores via addition of a -inf bias",
        cells={
            "softmax": '''def softmax(x, dim=-1):
    m = x.max(dim=dim, keepdim=True).values
    e = torch.exp(x - m)
    return e / torch.sum(e, dim=dim, keepdim=True)
''',
            "scaled_dot_product_attention": '''def scaled_dot_product_attention(q, k, v, mask=None):
    d = q.size(-1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    if mask is not None:
        bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        scores = scores + bias
    weights = softmax(scores)
    return torch.matmul(weights, v), weights
''',
        }),
]


# ========================================================================================
# Part 2 (functions 5-8): bilinear and additive scores, einsum attention, SelfAttentionHead
# ========================================================================================
_BIL = ("test_bilinear_shapes", "test_bilinear_values")
_ADD = ("test_additive_shapes", "test_additive_values")
_EIN = ("test_einsum_values", "test_einsum_batch_dims", "test_einsum_mask")
_HEAD_VALUES = ("test_head_forward", "test_head_mask")

MISTAKES += [
    # -- bilinear_scores ---------------------------------------------------------------------
    Mistake(
        id="bilinear_no_W", cell="bilinear_scores", label="bilinear score ignores W",
        description="bilinear score computed as the plain dot product q k^T, ignoring W",
        source=edit(A, "bilinear_scores", ("(q @ W) @ k", "q @ k")),
        must_fail=_BIL, hint="W has shape (dq, dk)"),
    Mistake(
        id="bilinear_W_transposed", cell="bilinear_scores", label="bilinear W transposed",
        description="bilinear score with W transposed (q W^T k): only runs when dq == dk, then wrong",
        source=edit(A, "bilinear_scores", ("(q @ W)", "q @ W.T")),
        must_fail=_BIL, hint="W transposed"),
    Mistake(
        id="bilinear_k_first", cell="bilinear_scores", label="bilinear scores transposed",
        description="scores built from the keys' side, k W^T q^T: the (Tk, Tq) transpose of the answer",
        source=edit(A, "bilinear_scores", ("(q @ W) @ k.transpose(-2, -1)", "(k @ W.T) @ q.transpose(-2, -1)")),
        must_fail=_BIL, hint="transposed"),
    Mistake(
        id="bilinear_scaled", cell="bilinear_scores", label="bilinear scores scaled by sqrt(d)",
        description="bilinear scores divided by sqrt(d), which the formula does not have",
        source=edit(A, "bilinear_scores", ("k.transpose(-2, -1)", "k.transpose(-2, -1) / math.sqrt(k.shape[-1])")),
        must_fail=("test_bilinear_values",), hint="no scaling"),
    Mistake(
        id="bilinear_k_dot_T", cell="bilinear_scores",
        description="k.T on a batched key tensor reverses every axis",
        source=edit(A, "bilinear_scores", ("k.transpose(-2, -1)", "k.T")),
        must_fail=_BIL, hint="k.T"),
    # -- additive_scores ---------------------------------------------------------------------
    Mistake(
        id="additive_W_swapped", cell="additive_scores", label="additive W1 and W2 swapped",
        description="additive score with W1 applied to the queries and W2 to the keys",
        source=edit(A, "additive_scores", ("(k @ W1.T)", "(k @ W2.T)"), ("(q @ W2.T)", "(q @ W1.T)")),
        must_fail=_ADD, hint="W1 and W2 swapped"),
    Mistake(
        id="additive_no_tanh", cell="additive_scores", label="additive score without tanh",
        description="additive score without the tanh (a linear score)",
        source=edit(A, "additive_scores", ("torch.tanh(queries + keys)", "queries + keys")),
        must_fail=("test_additive_values",), hint="without tanh"),
    Mistake(
        id="additive_pairs_by_position", cell="additive_scores", label="additive: query i meets only key i",
        description="query i only meets key i (no broadcasting to all pairs)",
        source=edit(A, "additive_scores", (".unsqueeze(-3)", ""), (".unsqueeze(-2)", "")),
        must_fail=_ADD, hint="every query meets every key"),
    Mistake(
        id="additive_sum_not_w", cell="additive_scores", label="additive: sum instead of w",
        description="sums the hidden units instead of the dot product with w",
        source=edit(A, "additive_scores", ("hidden @ w", "hidden.sum(-1)")),
        must_fail=("test_additive_values",), hint="sum over the hidden units"),
    Mistake(
        id="additive_softmax", cell="additive_scores", label="additive returns weights",
        description="returns softmax weights instead of the scores",
        source=edit(A, "additive_scores", ("return hidden @ w", "return torch.softmax(hidden @ w, dim=-1)")),
        must_fail=("test_additive_values",), hint="not the weights"),
    # -- einsum_attention --------------------------------------------------------------------
    Mistake(
        id="einsum_uses_matmul", cell="einsum_attention", label="einsum_attention uses @",
        description="einsum_attention written with @ (the exercise asks for einsum only)",
        source=edit(A, "einsum_attention", ('torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.transpose(-2, -1)"),
                    ('torch.einsum("...qk,...kv->...qv", weights, v)', "weights @ v")),
        must_fail=_EIN, hint="off limits"),
    Mistake(
        id="einsum_calls_sdpa", cell="einsum_attention", label="einsum_attention calls sdpa",
        description="einsum_attention delegating to the scaled_dot_product_attention written above (which uses @)",
        source=edit(A, "einsum_attention", (("scores = torch.einsum", "return out, weights"),
                                           "return scaled_dot_product_attention(q, k, v, mask)")),
        must_fail=_EIN, hint="off limits"),
    Mistake(
        id="einsum_no_scaling", cell="einsum_attention", label="einsum: no sqrt(d) scaling",
        description="einsum attention without the 1/sqrt(d) scaling",
        source=edit(A, "einsum_attention", (" / math.sqrt(q.shape[-1])", "")),
        must_fail=_EIN, hint="no scaling"),
    Mistake(
        id="einsum_scale_dv", cell="einsum_attention", label="einsum: scaled by sqrt(dv)",
        description="scales by sqrt of the value width dv instead of the query/key width d",
        source=edit(A, "einsum_attention", ("math.sqrt(q.shape[-1])", "math.sqrt(v.shape[-1])")),
        must_fail=("test_einsum_values", "test_einsum_batch_dims"), hint="sqrt(dv)"),
    Mistake(
        id="einsum_no_ellipsis", cell="einsum_attention", label="einsum without '...'",
        description="einsum with a fixed batch letter ('bqd,bkd->bqk'): only works for 3-d inputs",
        source=edit(A, "einsum_attention", ('"...qd,...kd->...qk"', '"bqd,bkd->bqk"'),
                    ('"...qk,...kv->...qv"', '"bqk,bkv->bqv"')),
        must_fail=("test_einsum_batch_dims",), hint="'...'", visible=True),
    Mistake(
        id="einsum_mask_after_softmax", cell="einsum_attention", label="einsum: mask after the softmax",
        description="mask applied to the weights after the softmax",
        source=edit(A, "einsum_attention",
                    (("if mask is not None:", "weights = torch.softmax(scores, dim=-1)"),
                     "weights = torch.softmax(scores, dim=-1)\n"
                     "    if mask is not None:\n"
                     "        weights = weights * mask")),
        must_fail=("test_einsum_mask",), hint="after the softmax"),
    Mistake(
        id="einsum_mask_inverted", cell="einsum_attention", label="einsum: mask inverted",
        description="mask used the other way round (fills where mask is True)",
        source=edit(A, "einsum_attention", ("~", "")),
        must_fail=("test_einsum_mask",), hint="inverted"),
    Mistake(
        id="einsum_values_summed_wrong", cell="einsum_attention", label="einsum sums over the queries",
        description="second einsum sums over the queries ('...qk,...qv->...kv') instead of the keys",
        source=edit(A, "einsum_attention", ('"...qk,...kv->...qv"', '"...kq,...kv->...qv"')),
        must_fail=_EIN, hint="the key axis"),
    # -- SelfAttentionHead -------------------------------------------------------------------
    Mistake(
        id="head_with_bias", cell="SelfAttentionHead", label="head projections with a bias",
        description="projections with a bias (nn.Linear's default)",
        source=edit(A, "SelfAttentionHead", ("Linear(d_model, d_head, bias=False)\n"
                                             "        self.W_k",
                                             "Linear(d_model, d_head)\n"
                                             "        self.W_k"),
                                            ("Linear(d_model, d_head, bias=False)\n"
                                             "        self.W_v",
                                             "Linear(d_model, d_head)\n"
                                             "        self.W_v"),
                                            (", d_head, bias=False)\n"
                                             "\n",
                                             ", d_head)\n"
                                             "\n")),
        must_fail=("test_head_structure", "test_head_forward", "test_head_mask"), hint="has a bias"),
    Mistake(
        id="head_scale_d_model", cell="SelfAttentionHead", label="head scaled by sqrt(d_model)",
        description="scores divided by sqrt(d_model) instead of sqrt(d_head)",
        source=edit(A, "SelfAttentionHead", ("d_head = d_head", "d_head, self.d_model = d_head, d_model"),
                                            (".d_head)", ".d_model)")),
        must_fail=_HEAD_VALUES, hint="sqrt(d_model)"),
    Mistake(
        id="head_values_are_x", cell="SelfAttentionHead", label="head averages x, not values",
        description="averages the inputs x instead of the values W_v(x)",
        source=edit(A, "SelfAttentionHead", ("return weights @ v", "return weights @ x")),
        must_fail=_HEAD_VALUES, hint="VALUES"),
    Mistake(
        id="head_ignores_mask", cell="SelfAttentionHead", label="head ignores the mask",
        description="forward accepts a mask but never applies it",
        source=edit(A, "SelfAttentionHead", (("        if mask is not None:\n", '"-inf"))\n'), "")),
        must_fail=("test_head_mask",), hint="mask ignored"),
    Mistake(
        id="head_builtin", cell="SelfAttentionHead", label="head on F.scaled_dot_product_attention",
        description="a head that hands its attention to F.scaled_dot_product_attention (the text rules it out; "
                    "calling the learner's own scaled_dot_product_attention is allowed)",
        source=edit(A, "SelfAttentionHead",
                    (("q, k, v = self.W_q(x)", "return weights @ v"),
                     "import torch.nn.functional as F\n"
                     "        return F.scaled_dot_product_attention("
                     "self.W_q(x), self.W_k(x), self.W_v(x), attn_mask=mask)")),
        must_fail=_HEAD_VALUES, hint="off limits"),
    Mistake(
        id="head_keys_from_W_q", cell="SelfAttentionHead", label="keys computed with W_q",
        description="keys computed with W_q (one matrix for two roles): symmetric scores",
        source=edit(A, "SelfAttentionHead", (".W_k(", ".W_q(")),
        must_fail=_HEAD_VALUES, hint="keys computed with W_q"),
    Mistake(
        id="head_returns_weights_too", cell="SelfAttentionHead", label="head returns (out, weights)",
        description="forward returns (out, weights) instead of only out",
        source=edit(A, "SelfAttentionHead", ("return weights @ v", "return weights @ v, weights")),
        must_fail=_HEAD_VALUES, hint="returns only the output"),
    # -- contract only: right for some of the inputs the text promises, visibly wrong on the others
    Mistake(
        id="bilinear_bmm_3d_only", cell="bilinear_scores",
        description="torch.bmm and transpose(1, 2): right for (B, T, d) inputs only",
        source=edit(A, "bilinear_scores",
                    ("return (q @ W) @ k.transpose(-2, -1)", "return torch.bmm(q @ W, k.transpose(1, 2))")),
        must_fail=_BIL, hint="only for 3-D inputs", visible=True),
    Mistake(
        id="additive_axes_from_the_front", cell="additive_scores",
        description="unsqueeze(1) and unsqueeze(2) counted from the front: right for (B, T, d) inputs only",
        source=edit(A, "additive_scores", ("(k @ W1.T).unsqueeze(-3)", "(k @ W1.T).unsqueeze(1)"),
                    ("(q @ W2.T).unsqueeze(-2)", "(q @ W2.T).unsqueeze(2)")),
        must_fail=_ADD, hint="only for 3-D inputs", visible=True),
    Mistake(
        id="head_mask_gets_batch_axis", cell="SelfAttentionHead",
        description="adds a batch axis to the mask (mask[None]): right for a (T, T) causal mask only",
        source=edit(A, "SelfAttentionHead", ("scores.masked_fill(~mask,", "scores.masked_fill(~mask[None],")),
        must_fail=("test_head_mask",), hint="as it is", visible=True),
]

ALTERNATIVES += [
    Alternative(
        id="part2_einsum_loops_reuse",
        description="bilinear via einsum, additive via a loop over queries, einsum attention with other "
                    "letters and torch.where, a head that reuses scaled_dot_product_attention",
        cells={
            "bilinear_scores": '''def bilinear_scores(q, k, W):
    return torch.einsum("...id,de,...je->...ij", q, W, k)
''',
            "additive_scores": '''def additive_scores(q, k, W1, W2, w):
    keys = torch.nn.functional.linear(k, W1)               # (..., Tk, h)
    rows = []
    for i in range(q.shape[-2]):
        qi = torch.nn.functional.linear(q[..., i:i + 1, :], W2)   # (..., 1, h)
        rows.append(torch.tanh(keys + qi) @ w)                 # (..., Tk)
    return torch.stack(rows, dim=-2)
''',
            "einsum_attention": '''def einsum_attention(q, k, v, mask=None):
    s = torch.einsum("...id,...jd->...ij", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        s = torch.where(mask, s, torch.full_like(s, float("-inf")))
    a = softmax(s, dim=-1)
    return torch.einsum("...ij,...jc->...ic", a, v), a
''',
            "SelfAttentionHead": '''class SelfAttentionHead(nn.Module):
    def __init__(self, d_model, d_head):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_head, bias=False)
        self.W_k = nn.Linear(d_model, d_head, bias=False)
        self.W_v = nn.Linear(d_model, d_head, bias=False)

    def forward(self, x, mask=None):
        out, _ = scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)
        return out
''',
        }),
    Alternative(
        id="warnings_torch_range_mask",
        description="causal mask compared from torch.range positions (deprecated: torch warns on every call): "
                    "correct, so full marks, warnings or not",
        cells={"causal_mask": edit(A, "causal_mask", ("return torch.ones(T, T, dtype=torch.bool).tril()",
                                                      "return torch.range(0, T - 1)[None, :] <= torch.range(0, T - 1)[:, None]"))}),
]
