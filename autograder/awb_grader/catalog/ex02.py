"""Misconception catalog for exercise 02 (hard_lookup, soft_lookup)."""

from . import Alternative, Mistake, edit

A = "02_attention_as_lookup"

_HARD_ALL = ("test_hard_lookup_single", "test_hard_lookup_batch")
_SOFT_ALL = ("test_soft_lookup_single", "test_soft_lookup_batch", "test_soft_lookup_temperature")

MISTAKES = [
    # -- hard_lookup -------------------------------------------------------------------------
    Mistake(
        id="hard_argmin", cell="hard_lookup",
        description="picks the key with the lowest score (argmin) instead of the highest",
        source=edit(A, "hard_lookup", ("argmax", "argmin")),
        must_fail=_HARD_ALL, hint="argmin instead of argmax"),
    Mistake(
        id="hard_returns_key", cell="hard_lookup",
        description="returns the best-matching key instead of the value stored under it",
        source=edit(A, "hard_lookup", ("values[best]", "keys[best]")),
        must_fail=_HARD_ALL, hint="KEY instead of its value"),
    Mistake(
        id="hard_nearest_key", cell="hard_lookup",
        description="matches by Euclidean distance (nearest key) instead of the largest dot product",
        source=edit(A, "hard_lookup", (("scores = query @ keys.T", "scores.argmax(dim=-1)"),
                                      "dist = ((query.unsqueeze(-2) - keys) ** 2).sum(dim=-1)\n"
                                      "    best = dist.argmin(dim=-1)")),
        must_fail=_HARD_ALL, hint="NEAREST"),
    Mistake(
        id="hard_argmax_no_dim", cell="hard_lookup",
        description="argmax without dim: the (n, m) score table is flattened into one index",
        source=edit(A, "hard_lookup", ("argmax(dim=-1)", "argmax()")),
        must_fail=("test_hard_lookup_batch",), hint="argmax without dim=", visible=True),
    Mistake(
        id="hard_argmax_over_queries", cell="hard_lookup",
        description="argmax over the queries (dim=0) instead of the keys",
        source=edit(A, "hard_lookup", ("argmax(dim=-1)", "argmax(dim=0)")),
        must_fail=("test_hard_lookup_batch",), hint="dim=-1, not dim=0"),
    Mistake(
        id="hard_returns_index", cell="hard_lookup",
        description="returns the index of the best key instead of its value",
        source=edit(A, "hard_lookup", ("return values[best]", "return best")),
        must_fail=_HARD_ALL, hint="index"),
    # -- soft_lookup -------------------------------------------------------------------------
    Mistake(
        id="soft_temperature_multiplies", cell="soft_lookup",
        description="multiplies the scores by the temperature instead of dividing",
        source=edit(A, "soft_lookup", ("/ temperature", "* temperature")),
        must_fail=("test_soft_lookup_temperature",), hint="MULTIPLYING"),
    Mistake(
        id="soft_ignores_temperature", cell="soft_lookup",
        description="ignores the temperature argument",
        source=edit(A, "soft_lookup", (" / temperature", "")),
        must_fail=("test_soft_lookup_temperature",), hint="ignores the temperature"),
    Mistake(
        id="soft_softmax_over_queries", cell="soft_lookup",
        description="softmax over dim=0: right for one query, over the queries for several",
        source=edit(A, "soft_lookup", ("softmax(scores, dim=-1)", "softmax(scores, dim=0)")),
        must_fail=("test_soft_lookup_batch", "test_soft_lookup_temperature"), hint="over the queries (dim=0)", visible=True),
    Mistake(
        id="soft_sum_normalised", cell="soft_lookup",
        description="normalises the scores by their sum instead of a softmax",
        source=edit(A, "soft_lookup", ("torch.softmax(scores, dim=-1", "scores / scores.sum(dim=-1, keepdim=True")),
        must_fail=_SOFT_ALL, hint="divided by their sum"),
    Mistake(
        id="soft_sqrt_d", cell="soft_lookup",
        description="divides the scores by sqrt(d) as in transformer attention",
        source=edit(A, "soft_lookup", ("/ temperature", "/ (keys.shape[-1] ** 0.5 * temperature)")),
        must_fail=_SOFT_ALL, hint="sqrt(d)"),
    Mistake(
        id="soft_returns_weights", cell="soft_lookup",
        description="returns the weights over the keys instead of the weighted average of the values",
        source=edit(A, "soft_lookup", ("return weights @ values", "return weights")),
        must_fail=_SOFT_ALL, hint="you return the weights"),
    Mistake(
        id="soft_averages_keys", cell="soft_lookup",
        description="weighted average of the keys instead of the values",
        source=edit(A, "soft_lookup", ("weights @ values", "weights @ keys")),
        must_fail=_SOFT_ALL, hint="KEYS"),
    Mistake(
        id="soft_exp_overflow", cell="soft_lookup",
        description="hand-written softmax without subtracting the maximum: overflows at low temperature",
        source=edit(A, "soft_lookup", ("weights = torch.softmax(scores, dim=-1)",
                                      "e = torch.exp(scores)\n    weights = e / e.sum(dim=-1, keepdim=True)")),
        must_fail=("test_soft_lookup_temperature",), hint="overflows"),
    Mistake(
        id="soft_numpy_detached", cell="soft_lookup",
        description="computes the lookup in NumPy and converts back: no gradient reaches the query",
        source='''def soft_lookup(query, keys, values, temperature=1.0):
    import numpy as np
    s = query.detach().numpy() @ keys.detach().numpy().T / temperature
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    w = e / e.sum(axis=-1, keepdims=True)
    return torch.from_numpy(w @ values.detach().numpy()).float()
''',
        must_fail=("test_soft_lookup_single",), hint="cuts the autograd graph"),
]

ALTERNATIVES = [
    Alternative(
        id="loops_and_gather",
        description="hard lookup by max(...).indices and index_select; soft lookup with einsum and a "
                    "hand-written stable softmax",
        cells={
            "hard_lookup": '''def hard_lookup(query, keys, values):
    q2 = query.reshape(-1, query.shape[-1])              # (n, d)
    idx = torch.matmul(q2, keys.t()).max(dim=1).indices  # (n,)
    out = values.index_select(0, idx)                    # (n, dv)
    return out[0] if query.dim() == 1 else out
''',
            "soft_lookup": '''def soft_lookup(query, keys, values, temperature=1.0):
    s = torch.einsum("...d,md->...m", query, keys) / temperature
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    w = e / e.sum(dim=-1, keepdim=True)
    return torch.einsum("...m,mv->...v", w, values)
''',
        }),
    Alternative(
        id="per_query_loop",
        description="both lookups as a Python loop over the queries, with F.softmax",
        cells={
            "hard_lookup": '''def hard_lookup(query, keys, values):
    if query.dim() == 1:
        scores = (keys * query).sum(dim=1)
        return values[int(torch.argmax(scores))]
    return torch.stack([hard_lookup(q, keys, values) for q in query])
''',
            "soft_lookup": '''def soft_lookup(query, keys, values, temperature=1.0):
    import torch.nn.functional as F
    if query.dim() == 1:
        w = F.softmax(keys @ query / temperature, dim=0)
        return (w[:, None] * values).sum(dim=0)
    return torch.stack([soft_lookup(q, keys, values, temperature) for q in query])
''',
        }),
    Alternative(
        id="warnings_implicit_softmax_dim",
        description="F.softmax without dim= (torch warns; for (m,) and (n, m) scores the implicit dim is the "
                    "last one): correct, so full marks, warnings or not",
        cells={"soft_lookup": edit(A, "soft_lookup", ("torch.softmax(scores, dim=-1)",
                                                      "torch.nn.functional.softmax(scores)"))}),
]
