"""Misconception catalog for exercise 03 (simplified self-attention, loops / matrix / softmax)."""

from . import Alternative, Mistake, edit

A = "03_simplified_self_attention"

_LOOPS_ALL = ("test_loops_values", "test_loops_batch")
_SIMPLE_ALL = ("test_simple_values", "test_simple_batch")
_SOFTMAX_ALL = ("test_softmax_values", "test_softmax_batch")

MISTAKES = [
    # -- simple_self_attention_loops ---------------------------------------------------------
    Mistake(
        id="loops_no_division", cell="simple_self_attention_loops",
        description="sums (x_i . x_j) x_j over j but forgets the 1/S",
        source=edit(A, "simple_self_attention_loops", ("        y[i] /= S\n", "")),
        must_fail=_LOOPS_ALL, hint="without the 1/S"),
    Mistake(
        id="loops_query_as_value", cell="simple_self_attention_loops",
        description="weights x_i instead of x_j: (x_i . x_j) x_i",
        source=edit(A, "simple_self_attention_loops", ("x[j]       ", "x[i]       ")),
        must_fail=_LOOPS_ALL, hint="x_i as the value"),
    Mistake(
        id="loops_assign_not_accumulate", cell="simple_self_attention_loops",
        description="y[i] = ... inside the j loop: only the last term survives",
        source=edit(A, "simple_self_attention_loops",
                    ("y[i] += torch.dot(x[i], x[j]) * x[j]", "y[i] = torch.dot(x[i], x[j]) * x[j] / S"),
                    ("        y[i] /= S\n", "")),
        must_fail=_LOOPS_ALL, hint="use += to accumulate"),
    Mistake(
        id="loops_divide_by_D", cell="simple_self_attention_loops",
        description="divides by D, the vector width, instead of S, the number of positions",
        source=edit(A, "simple_self_attention_loops", ("    y[i] /= S\n    return y", "return y / D")),
        must_fail=_LOOPS_ALL, hint="division by D"),
    Mistake(
        id="loops_in_place", cell="simple_self_attention_loops",
        description="writes the outputs into x itself, so later rows use already-updated vectors",
        source='''def simple_self_attention_loops(x):
    if x.dim() == 3:
        return torch.stack([simple_self_attention_loops(s) for s in x])
    S, D = x.shape
    for i in range(S):
        acc = torch.zeros(D)
        for j in range(S):
            acc += torch.dot(x[i], x[j]) * x[j]
        x[i] = acc / S
    return x
''',
        must_fail=_LOOPS_ALL, hint="in place"),
    Mistake(
        id="loops_2d_only", cell="simple_self_attention_loops",
        description="handles only (S, D) inputs: unpacking S, D = x.shape fails on a batch",
        source=edit(A, "simple_self_attention_loops", (("    if x.dim() == 3:", "for seq in x])\n"), "")),
        must_fail=("test_loops_batch",), hint="fails on a batch", visible=True),
    # -- simple_self_attention ---------------------------------------------------------------
    Mistake(
        id="simple_no_division", cell="simple_self_attention",
        description="(x x^T) x without the 1/S",
        source=edit(A, "simple_self_attention", ("weights @ x / S", "weights @ x")),
        must_fail=_SIMPLE_ALL, hint="without the 1/S"),
    Mistake(
        id="simple_shape0_as_S", cell="simple_self_attention",
        description="takes S = x.shape[0], which is the batch size for a (B, S, D) input",
        source=edit(A, "simple_self_attention", ("x.shape[-2]", "x.shape[0]")),
        must_fail=("test_simple_batch",), hint="x.shape[0]"),
    Mistake(
        id="simple_dot_T", cell="simple_self_attention",
        description="uses x.T, which reverses every axis of a batch (B, S, D)",
        source=edit(A, "simple_self_attention", ("x.transpose(-2, -1)", "x.T")),
        must_fail=("test_simple_batch",), hint="x.T", visible=True),
    Mistake(
        id="simple_divide_by_D", cell="simple_self_attention",
        description="divides by D = x.shape[-1] instead of S = x.shape[-2]",
        source=edit(A, "simple_self_attention", ("x.shape[-2]", "x.shape[-1]")),
        must_fail=_SIMPLE_ALL, hint="division by D"),
    Mistake(
        id="simple_with_softmax", cell="simple_self_attention",
        description="applies a softmax to the raw weights (that is exercise 3, not this formula)",
        source=edit(A, "simple_self_attention", ("weights @ x / S", "torch.softmax(weights, dim=-1) @ x")),
        must_fail=_SIMPLE_ALL, hint="RAW dot products"),
    # -- softmax_self_attention --------------------------------------------------------------
    Mistake(
        id="softmax_query_axis", cell="softmax_self_attention",
        description="softmax over dim=-2 (the query axis) instead of dim=-1",
        source=edit(A, "softmax_self_attention", ("dim=-1", "dim=-2")),
        must_fail=_SOFTMAX_ALL, hint="QUERY axis"),
    Mistake(
        id="softmax_dim1", cell="softmax_self_attention",
        description="softmax over dim=1: the key axis for (S, S) scores, the query axis for (B, S, S)",
        source=edit(A, "softmax_self_attention", ("dim=-1", "dim=1")),
        must_fail=("test_softmax_batch",), hint="QUERY axis", visible=True),
    Mistake(
        id="softmax_keeps_1_over_S", cell="softmax_self_attention",
        description="keeps the 1/S of the raw version after the softmax",
        source=edit(A, "softmax_self_attention", ("return weights @ x", "return weights @ x / x.shape[-2]")),
        must_fail=_SOFTMAX_ALL, hint="drop the 1/S"),
    Mistake(
        id="softmax_sqrt_D", cell="softmax_self_attention",
        description="scales the scores by 1/sqrt(D) as in lecture 04's attention",
        source=edit(A, "softmax_self_attention",
                    ("x @ x.transpose(-2, -1)", "x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5")),
        must_fail=_SOFTMAX_ALL, hint="sqrt(D)"),
    Mistake(
        id="softmax_returns_weights", cell="softmax_self_attention",
        description="returns the (S, S) weights instead of the outputs",
        source=edit(A, "softmax_self_attention", ("return weights @ x", "return weights")),
        must_fail=_SOFTMAX_ALL, hint="not the outputs"),
]

ALTERNATIVES = [
    Alternative(
        id="einsum_and_reassociation",
        description="loops over x[..., i, :] with (a * b).sum; (x (x^T x)) / S; einsum + manual softmax",
        cells={
            "simple_self_attention_loops": '''def simple_self_attention_loops(x):
    S = x.shape[-2]
    y = torch.zeros_like(x)
    for i in range(S):
        for j in range(S):
            w = (x[..., i, :] * x[..., j, :]).sum(dim=-1, keepdim=True)
            y[..., i, :] = y[..., i, :] + w * x[..., j, :]
    return y / S
''',
            "simple_self_attention": '''def simple_self_attention(x):
    gram = x.transpose(-2, -1) @ x          # (..., D, D): same result, other association
    return x @ gram / x.size(-2)
''',
            "softmax_self_attention": '''def softmax_self_attention(x):
    s = torch.einsum("...id,...jd->...ij", x, x)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return torch.einsum("...ij,...jd->...id", e / e.sum(dim=-1, keepdim=True), x)
''',
        }),
    Alternative(
        id="flatten_batch_and_bmm",
        description="reshape to (N, S, D) and use torch.bmm / F.softmax; loops with a list of rows",
        cells={
            "simple_self_attention_loops": '''def simple_self_attention_loops(x):
    flat = x.reshape(-1, x.shape[-2], x.shape[-1])
    out = []
    for seq in flat:
        rows = []
        for xi in seq:
            acc = sum(torch.dot(xi, xj) * xj for xj in seq)
            rows.append(acc / len(seq))
        out.append(torch.stack(rows))
    return torch.stack(out).reshape(x.shape)
''',
            "simple_self_attention": '''def simple_self_attention(x):
    flat = x.reshape(-1, x.shape[-2], x.shape[-1])
    y = torch.bmm(torch.bmm(flat, flat.transpose(1, 2)), flat) / flat.shape[1]
    return y.reshape(x.shape)
''',
            "softmax_self_attention": '''def softmax_self_attention(x):
    import torch.nn.functional as F
    flat = x.reshape(-1, x.shape[-2], x.shape[-1])
    w = F.softmax(torch.bmm(flat, flat.transpose(1, 2)), dim=2)
    return torch.bmm(w, flat).reshape(x.shape)
''',
        }),
    Alternative(
        id="warnings_torch_range",
        description="loops over torch.range positions (deprecated: torch warns on every call): correct, so full "
                    "marks, warnings or not",
        cells={"simple_self_attention_loops": edit(A, "simple_self_attention_loops", (
            "for i in range(S):", "for i in torch.range(0, S - 1).long().tolist():"))}),
]
