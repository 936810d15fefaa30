"""Visible checks for exercise 02_attention_as_lookup (hard_lookup, soft_lookup).

Small, readable inputs. When a result is wrong the check recomputes what the usual mistakes
would have produced and names the one the student's output matches, with the lecture section
to reread.
"""

from __future__ import annotations

import torch

from .core import guard, CheckFailed, call, close, expect_close, expect_shape, expect_tensor, first_match, passed

LECTURE = "lectures/02_attention_as_lookup.ipynb"
SEC_HARD = f"lecture 02, section 1 'A dictionary is a hard lookup' ({LECTURE}#hard-lookup)"
SEC_SOFT = f"lecture 02, section 3 'The soft lookup' ({LECTURE}#soft-lookup)"
SEC_TEMP = f"lecture 02, section 4 'Temperature: from soft to hard' ({LECTURE}#temperature)"
SEC_GRAD = f"lecture 02, section 5 'Gradients flow through the soft version' ({LECTURE}#gradients)"

# Keys of different lengths, so "largest dot product" and "nearest key" disagree; values of a
# different width (dv = 3) than the keys (d = 2), so returning a key is caught by its shape.
KEYS = torch.tensor([[1.0, 0.0], [3.0, 1.0], [0.0, 1.0], [-1.0, -1.0]])          # (m, d) = (4, 2)
VALUES = torch.tensor([[10.0, 0.0, 0.0], [0.0, 20.0, 0.0], [0.0, 0.0, 30.0],
                       [-5.0, -5.0, -5.0]])                                       # (m, dv) = (4, 3)
QUERIES = torch.tensor([[1.0, 0.2], [-0.5, 2.0], [-2.0, 0.5]])                    # (n, d) = (3, 2)


# ----------------------------------------------------------------------------------------
# hard_lookup
# ----------------------------------------------------------------------------------------
def _hard_reference(q, keys, values):
    return values[(q @ keys.T).argmax(dim=-1)]


def hard_wrong_variants(q, keys, values) -> dict[str, torch.Tensor]:
    scores = q @ keys.T                                           # (m,) or (n, m)
    dist = ((q.unsqueeze(-2) - keys) ** 2).sum(-1)                # (m,) or (n, m)
    best = scores.argmax(dim=-1)
    return {
        "the value of the key with the LOWEST score (argmin instead of argmax)": values[scores.argmin(dim=-1)],
        "the best-matching KEY instead of its value: return values[index], not keys[index]": keys[best],
        "the value of the key NEAREST to the query (smallest distance); this exercise matches by the "
        "LARGEST DOT PRODUCT, which also rewards long keys": values[dist.argmin(dim=-1)],
    }


def _student_hard(hard_lookup, q):
    out = call(hard_lookup, q, KEYS, VALUES, name="hard_lookup", reread=SEC_HARD)
    return expect_tensor(out, "hard_lookup", reread=SEC_HARD)


def _diagnose_hard(out, q) -> str | None:
    name = first_match(out, hard_wrong_variants(q, KEYS, VALUES))
    if name:
        return f"your output equals {name}"
    if out.dim() == q.dim() - 1 and out.dtype in (torch.int64, torch.int32):
        return "you return the index of the best key: return the value stored under it, values[index]"
    return None


def hard_lookup_single(hard_lookup) -> None:
    """One query of shape (d,): the value (dv,) whose key has the largest dot product."""
    for q in QUERIES:
        out = _student_hard(hard_lookup, q)
        inputs = f"query {[round(v, 3) for v in q.tolist()]}, keys (4, 2), values (4, 3)"
        expect_shape(out, (3,), "hard_lookup(query (d,), keys, values)", inputs=inputs, reread=SEC_HARD,
                     hint=_diagnose_hard(out, q) or "one query (d,) gives one value row (dv,)")
        want = _hard_reference(q, KEYS, VALUES)
        if not close(out, want):
            scores = [round(s, 2) for s in (KEYS @ q).tolist()]
            raise CheckFailed(
                "hard_lookup returned the wrong value",
                reread=SEC_HARD,
                hint=_diagnose_hard(out, q)
                or "score every key against the query, then return the value stored under the best one",
                details=[
                    f"inputs: {inputs}",
                    f"dot products with the keys: {scores}",
                    f"expected {want.tolist()}, got {out.tolist()}",
                ],
            )
    passed("hard_lookup: one query returns the value of the best-scoring key")


def hard_lookup_batch(hard_lookup) -> None:
    """Queries of shape (n, d): one value row per query, (n, dv)."""
    q = QUERIES
    out = _student_hard(hard_lookup, q)
    inputs = "queries (3, 2), keys (4, 2), values (4, 3)"
    if tuple(out.shape) == (3,):
        raise CheckFailed("hard_lookup with queries (3, 2) returned shape (3,) instead of (3, 3)", reread=SEC_HARD,
                          hint="argmax without dim= flattens the (n, m) scores into one index: use argmax(dim=-1), "
                               "one best key per query")
    if tuple(out.shape) == (4, 3):
        raise CheckFailed("hard_lookup with queries (3, 2) returned shape (4, 3): one row per KEY", reread=SEC_HARD,
                          hint="the scores are (n, m) = queries @ keys.T; take argmax over the keys, dim=-1, not dim=0")
    expect_shape(out, (3, 3), "hard_lookup(queries (n, d), keys, values)", inputs=inputs, reread=SEC_HARD,
                 hint=_diagnose_hard(out, q) or "n queries give n value rows: (n, dv)")
    expect_close(out, _hard_reference(q, KEYS, VALUES), "hard_lookup with several queries", inputs=inputs,
                 reread=SEC_HARD, hint=_diagnose_hard(out, q) or
                 "scores = query @ keys.T works for (d,) and (n, d) alike; then argmax(dim=-1)")
    q1 = QUERIES[1:2]                                   # n = 1: still a batch, (1, d) -> (1, dv)
    out = _student_hard(hard_lookup, q1)
    expect_shape(out, (1, 3), "hard_lookup(queries (1, d), keys, values)", reread=SEC_HARD,
                 inputs="queries (1, 2), keys (4, 2), values (4, 3)",
                 hint="a batch of one query (1, d) gives (1, dv): keep the query axis (no squeeze)")
    expect_close(out, _hard_reference(q1, KEYS, VALUES), "hard_lookup with one query in a batch", reread=SEC_HARD)
    passed("hard_lookup: several queries (n, d) give (n, dv), one value per query")


# ----------------------------------------------------------------------------------------
# soft_lookup
# ----------------------------------------------------------------------------------------
S_KEYS = torch.tensor([[1.0, 0.0, 0.5], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0], [-1.0, 0.5, 0.0]])  # (m, d) = (4, 3)
S_VALUES = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [-1.0, 3.0]])                   # (m, dv) = (4, 2)
S_QUERIES = torch.tensor([[0.5, 1.0, -0.5], [1.0, -0.5, 1.5]])                              # (n, d) = (2, 3)


def _soft_reference(q, keys, values, temperature=1.0):
    w = torch.softmax(q @ keys.T / temperature, dim=-1)
    return w @ values


def soft_wrong_variants(q, keys, values, temperature=1.0) -> dict[str, torch.Tensor]:
    s = q @ keys.T                                                    # (m,) or (n, m)
    out = {
        "the temperature MULTIPLYING the scores: divide them, softmax(scores / temperature)":
            torch.softmax(s * temperature, dim=-1) @ values,
        "a softmax that ignores the temperature argument": torch.softmax(s, dim=-1) @ values,
        "scores divided by sqrt(d): that scaling belongs to lecture 04's transformer attention, "
        "this lookup uses softmax(scores / temperature) only":
            torch.softmax(s / temperature / keys.shape[-1] ** 0.5, dim=-1) @ values,
        "scores divided by their sum instead of a softmax (no exponential)": (s / s.sum(-1, keepdim=True)) @ values,
        "the raw scores used as weights (no softmax)": (s / temperature) @ values,
        "a weighted average of the KEYS: the weights multiply the values": torch.softmax(s / temperature, -1) @ keys,
    }
    if s.dim() == 2:
        out["a softmax over the queries (dim=0) instead of over the keys (dim=-1)"] = \
            torch.softmax(s / temperature, dim=0) @ values
        out["a softmax over the whole (n, m) table instead of each row"] = \
            torch.softmax((s / temperature).reshape(-1), 0).reshape(s.shape) @ values
    return out


def _diagnose_soft(out, q, keys, values, temperature=1.0) -> str | None:
    name = first_match(out, soft_wrong_variants(q, keys, values, temperature), atol=1e-4)
    if name:
        return f"your output equals {name}"
    m = keys.shape[0]
    if tuple(out.shape) == tuple(q.shape[:-1]) + (m,):
        return "you return the weights (one per key): return the weighted average of the values, weights @ values"
    return None


def _student_soft(soft_lookup, q, keys, values, temperature=None):
    kwargs = {} if temperature is None else {"temperature": temperature}
    out = call(soft_lookup, q, keys, values, name="soft_lookup", reread=SEC_SOFT, **kwargs)
    return expect_tensor(out, "soft_lookup", reread=SEC_SOFT)


def soft_lookup_single(soft_lookup) -> None:
    """One query (d,), default temperature: softmax(keys @ query) @ values, shape (dv,);
    and gradients flow back to the query."""
    keys, values = S_KEYS, S_VALUES
    for q in S_QUERIES:
        out = _student_soft(soft_lookup, q, keys, values)
        inputs = f"query {[round(v, 3) for v in q.tolist()]}, keys (4, 3), values (4, 2), temperature 1"
        expect_shape(out, (2,), "soft_lookup(query (d,), keys, values)", inputs=inputs, reread=SEC_SOFT,
                     hint=_diagnose_soft(out, q, keys, values) or "one query (d,) gives one blended value (dv,)")
        expect_close(out, _soft_reference(q, keys, values), "soft_lookup", inputs=inputs, reread=SEC_SOFT,
                     hint=_diagnose_soft(out, q, keys, values) or
                     "weights = softmax(keys @ query / temperature) over the keys; output = weights @ values")
    q = S_QUERIES[0].clone().requires_grad_(True)
    out = _student_soft(soft_lookup, q, keys, values)
    if not out.requires_grad:
        raise CheckFailed("no gradient flows from soft_lookup's output back to the query", reread=SEC_GRAD,
                          hint="something cuts the autograd graph: argmax, .detach(), .item(), .numpy() or "
                               "torch.tensor(...) around an intermediate result. Stay with torch operations.")
    out.sum().backward()
    if q.grad is None or not bool(torch.isfinite(q.grad).all()) or float(q.grad.abs().sum()) == 0.0:
        raise CheckFailed("the gradient of soft_lookup with respect to the query is missing or zero",
                          reread=SEC_GRAD, hint="the output must depend smoothly on the query through the softmax")
    passed("soft_lookup: one query gives the softmax-weighted average of the values, and gradients flow")


def soft_lookup_batch(soft_lookup) -> None:
    """Queries (n, d) with n != m and d != dv: one blended value per query, (n, dv)."""
    keys, values, q = S_KEYS, S_VALUES, S_QUERIES
    out = _student_soft(soft_lookup, q, keys, values)
    inputs = "queries (2, 3), keys (4, 3), values (4, 2), temperature 1"
    expect_shape(out, (2, 2), "soft_lookup(queries (n, d), keys, values)", inputs=inputs, reread=SEC_SOFT,
                 hint=_diagnose_soft(out, q, keys, values) or
                 "scores = query @ keys.T is (n, m); softmax over dim=-1; weights @ values is (n, dv)")
    expect_close(out, _soft_reference(q, keys, values), "soft_lookup with several queries", inputs=inputs,
                 reread=SEC_SOFT, hint=_diagnose_soft(out, q, keys, values) or
                 "each query's weights over the keys must sum to 1: softmax over dim=-1 (the keys)")
    passed("soft_lookup: several queries (n, d) give (n, dv), each row a weighted average of the values")


def soft_lookup_temperature(soft_lookup) -> None:
    """temperature divides the scores: exact values at 0.5 and 3; close to hard_lookup at 0.01
    (and finite: no overflow); close to the plain average of the values at 1000."""
    keys, values, q = S_KEYS, S_VALUES, S_QUERIES
    out = _student_soft(soft_lookup, q[0], keys, values, temperature=0.5)     # one query (d,) with a temperature
    expect_shape(out, (2,), "soft_lookup(query (d,), ..., temperature=0.5)", reread=SEC_TEMP,
                 inputs="query (3,), keys (4, 3), values (4, 2), temperature 0.5")
    expect_close(out, _soft_reference(q[0], keys, values, 0.5), "soft_lookup(query (d,), ..., temperature=0.5)",
                 reread=SEC_TEMP, hint=_diagnose_soft(out, q[0], keys, values, 0.5) or
                 "weights = softmax(scores / temperature) over the keys")
    for tau in (0.5, 3.0):
        out = _student_soft(soft_lookup, q, keys, values, temperature=tau)
        inputs = f"queries (2, 3), keys (4, 3), values (4, 2), temperature {tau}"
        expect_shape(out, (2, 2), f"soft_lookup(..., temperature={tau})", inputs=inputs, reread=SEC_TEMP)
        expect_close(out, _soft_reference(q, keys, values, tau), f"soft_lookup(..., temperature={tau})",
                     inputs=inputs, reread=SEC_TEMP,
                     hint=_diagnose_soft(out, q, keys, values, tau) or "weights = softmax(scores / temperature)")
    out = _student_soft(soft_lookup, q, keys, values, temperature=0.01)
    if not bool(torch.isfinite(out).all()):
        raise CheckFailed("soft_lookup(..., temperature=0.01) returns inf or nan", reread=SEC_TEMP,
                          hint="scores / 0.01 are in the hundreds and exp() of them overflows: use torch.softmax, "
                               "or subtract each row's maximum score before exp",
                          details=[f"your output: {out.tolist()}"])
    hard = _hard_reference(q, keys, values)
    if not close(out, hard, atol=1e-3, rtol=0):
        raise CheckFailed("at temperature 0.01 the soft lookup should (almost) equal the hard lookup",
                          reread=SEC_TEMP, hint=_diagnose_soft(out, q, keys, values, 0.01) or
                          "a tiny temperature blows up the score differences: all weight goes to the best key",
                          details=[f"expected about {hard.tolist()}, got {out.tolist()}"])
    out = _student_soft(soft_lookup, q, keys, values, temperature=1000.0)
    mean = values.mean(0).expand(2, -1)
    if not close(out, mean, atol=1e-2, rtol=0):
        raise CheckFailed("at temperature 1000 the soft lookup should (almost) equal the plain average of the values",
                          reread=SEC_TEMP, hint=_diagnose_soft(out, q, keys, values, 1000.0) or
                          "a huge temperature makes all scores look alike: every weight tends to 1/m",
                          details=[f"expected about {mean.tolist()}, got {out.tolist()}"])
    passed("soft_lookup: temperature divides the scores (0.01 -> hard lookup, 1000 -> plain average)")


guard(globals())  # every check records warnings instead of printing them (core.guard)
