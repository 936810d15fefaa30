"""Hidden checks for exercise 04: randomized shapes and values, independent oracles.

Oracles: ``torch.softmax`` for softmax; explicit loops for the masks;
``F.scaled_dot_product_attention`` for attention outputs and a float64 einsum for the weights.
Seeds are fixed (grading is deterministic). Tolerance: atol 1e-5 + rtol 1e-4 (float32).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attention_workbook.checks.core import softmax_builtins
from attention_workbook.checks.ex04 import NO_BUILTIN_ATTENTION, builtin_attention

from . import _adapter as A
from ._adapter import forbid
from ._base import guard, CheckFailed, call, close, fail_values, own_code, randint, rng

TOL = "atol 1e-5 + rtol 1e-4"


def _shape(g, lo_dims=1, hi_dims=4):
    return tuple(randint(g, 1, 6) for _ in range(randint(g, lo_dims, hi_dims)))


def _softmax_call(softmax, x, dim):
    """softmax(x, dim=dim); dim=None calls softmax(x), whose default is dim=-1."""
    with forbid(softmax_builtins(), "torch.softmax / F.softmax are off limits in softmax"):
        out = call(softmax, x, **({} if dim is None else {"dim": dim}), name="softmax")
    if not isinstance(out, torch.Tensor):
        raise CheckFailed("hidden test: softmax did not return a tensor")
    return out


def softmax_values(softmax) -> None:
    own_code(softmax, "softmax")
    g = rng(401)
    for case in range(6):
        shape = _shape(g)
        x = torch.randn(shape, generator=g) * (1 + 4 * case)
        out = _softmax_call(softmax, x, None if case % 2 else -1)       # softmax(x) uses the default dim=-1
        want = torch.softmax(x.double(), -1).float()
        if not close(out, want):
            fail_values("softmax(x)", out, want, f"x of shape {shape}, dim=-1" + (" (the default)" if case % 2 else ""),
                        TOL)


def softmax_dim(softmax) -> None:
    g = rng(402)
    for _ in range(6):
        shape = _shape(g, 2, 4)
        dim = randint(g, -len(shape), len(shape) - 1)
        x = torch.randn(shape, generator=g) * 3
        out = _softmax_call(softmax, x, dim)
        want = torch.softmax(x.double(), dim).float()
        if not close(out, want):
            fail_values(f"softmax(x, dim={dim})", out, want, f"x of shape {shape}", TOL)


def softmax_stability(softmax) -> None:
    g = rng(403)
    for _ in range(4):
        shape = _shape(g, 2, 3)
        x = torch.randn(shape, generator=g) * 50 + 1e4 * (torch.rand(shape[:-1] + (1,), generator=g) * 2 - 1)
        out = _softmax_call(softmax, x, -1)
        if not bool(torch.isfinite(out).all()):
            raise CheckFailed("hidden test: softmax returns inf/nan for inputs around +-1e4",
                              details=[f"case: x of shape {shape}"])
        want = torch.softmax(x.double(), -1).float()
        # float32 spacing near 1e4 is ~1e-3: equivalent formulas (logsumexp) differ by that much
        if not close(out, want, atol=2e-3, rtol=2e-3):
            fail_values("softmax of large inputs", out, want, f"x of shape {shape}", "atol 2e-3 + rtol 2e-3")
    x = torch.randn(3, 7, generator=g)
    x[torch.rand(3, 7, generator=g) < 0.4] = float("-inf")
    x[:, 0] = 0.0
    out = _softmax_call(softmax, x, -1)
    want = torch.softmax(x.double(), -1).float()
    if not close(out, want):
        fail_values("softmax with -inf entries", out, want, "x (3, 7) with random -inf", TOL)


def causal_mask(causal_mask) -> None:
    own_code(causal_mask, "causal_mask")
    for T in (1, 2, 5, 13):
        m = call(causal_mask, T, name="causal_mask")
        want = torch.zeros(T, T, dtype=torch.bool)
        for i in range(T):
            for j in range(T):
                want[i, j] = j <= i
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or not torch.equal(m, want):
            raise CheckFailed(f"hidden test: causal_mask({T}) is not the bool lower triangle (key <= query)")


def padding_mask(padding_mask) -> None:
    own_code(padding_mask, "padding_mask")
    g = rng(404)
    for _ in range(5):
        B, T = randint(g, 1, 5), randint(g, 1, 9)
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        m = call(padding_mask, lengths, T, name="padding_mask")
        want = torch.zeros(B, 1, T, dtype=torch.bool)
        for b in range(B):
            for t in range(T):
                want[b, 0, t] = t < int(lengths[b])
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or not torch.equal(m, want):
            raise CheckFailed("hidden test: padding_mask is wrong",
                              details=[f"case: lengths={lengths.tolist()}, T={T}; expected bool (B, 1, T), "
                                       f"True for positions < length"])


def _weights_oracle(q, k, mask):
    """Weights in float64 with einsum: an independent route to softmax(q k^T / sqrt(d))."""
    s = torch.einsum("...id,...jd->...ij", q.double(), k.double()) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    s = s - s.amax(-1, keepdim=True)
    e = s.exp()
    return (e / e.sum(-1, keepdim=True)).float()


def _sdpa_case(sdpa, g, batch, Tq, Tk, d, dv, mask=None, case="", extreme=False):
    q = torch.randn(*batch, Tq, d, generator=g) * 1.5
    k = torch.randn(*batch, Tk, d, generator=g) * 1.5
    v = torch.randn(*batch, Tk, dv, generator=g)
    if extreme:   # a masked key with a huge score (lecture 04's case): it must change nothing
        from attention_workbook.checks.ex04 import extreme_masked_inputs
        q, k = extreme_masked_inputs(q, k, mask)
        case = f"{case} masked keys scored ~150,"
    with forbid(builtin_attention(), NO_BUILTIN_ATTENTION):
        res = call(sdpa, q, k, v, mask, name="scaled_dot_product_attention")
    if not (isinstance(res, tuple) and len(res) == 2 and all(isinstance(t, torch.Tensor) for t in res)):
        raise CheckFailed("hidden test: scaled_dot_product_attention must return (out, weights)")
    out, w = res
    want_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    want_w = _weights_oracle(q, k, mask)
    desc = f"{case} q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}" + (
        f", mask {tuple(mask.shape)}" if mask is not None else "")
    if not close(w, want_w):
        fail_values("attention weights", w, want_w, desc, TOL)
    if not close(out, want_out):
        fail_values("attention output", out, want_out, desc, TOL)


def sdpa_shapes(sdpa) -> None:
    own_code(sdpa, "scaled_dot_product_attention")
    g = rng(405)
    for _ in range(4):
        batch = _shape(g, 0, 2)
        Tq, Tk, d, dv = randint(g, 1, 7), randint(g, 1, 9), randint(g, 2, 16), randint(g, 1, 12)
        q, k, v = torch.randn(*batch, Tq, d), torch.randn(*batch, Tk, d), torch.randn(*batch, Tk, dv)
        with forbid(builtin_attention(), NO_BUILTIN_ATTENTION):
            res = call(sdpa, q, k, v, None, name="scaled_dot_product_attention")
        if not (isinstance(res, tuple) and len(res) == 2):
            raise CheckFailed("hidden test: scaled_dot_product_attention must return (out, weights)")
        out, w = res
        if tuple(out.shape) != (*batch, Tq, dv) or tuple(w.shape) != (*batch, Tq, Tk):
            raise CheckFailed("hidden test: wrong output shapes",
                              details=[f"case: batch dims {batch}, Tq={Tq}, Tk={Tk}, d={d}, dv={dv}",
                                       f"expected out {(*batch, Tq, dv)} and weights {(*batch, Tq, Tk)}, "
                                       f"got {tuple(out.shape)} and {tuple(w.shape)}"])


def sdpa_values(sdpa) -> None:
    g = rng(406)
    for _ in range(5):
        batch = _shape(g, 0, 2)
        _sdpa_case(sdpa, g, batch, randint(g, 1, 7), randint(g, 1, 9), randint(g, 2, 32), randint(g, 1, 12))


def sdpa_causal(sdpa) -> None:
    g = rng(407)
    for _ in range(4):
        batch = _shape(g, 1, 2)
        T = randint(g, 2, 9)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        _sdpa_case(sdpa, g, batch, T, T, randint(g, 2, 16), randint(g, 1, 8), mask, "causal,")
        _sdpa_case(sdpa, g, batch, T, T, randint(g, 2, 16), randint(g, 1, 8), mask, "causal,", extreme=True)


def sdpa_padding(sdpa) -> None:
    g = rng(408)
    for _ in range(4):
        B, H = randint(g, 1, 4), randint(g, 1, 3)
        Tq, Tk = randint(g, 1, 6), randint(g, 2, 8)
        lengths = torch.randint(1, Tk + 1, (B,), generator=g)
        mask = (torch.arange(Tk)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, Tk)
        _sdpa_case(sdpa, g, (B, H), Tq, Tk, randint(g, 2, 16), randint(g, 1, 8), mask, "padding (B, 1, 1, Tk),")
        _sdpa_case(sdpa, g, (B, H), Tq, Tk, randint(g, 2, 16), randint(g, 1, 8), mask, "padding (B, 1, 1, Tk),",
                   extreme=True)


# ========================================================================================
# Part 2 (functions 5-8). Oracles: float64 loops over (query, key) pairs for the two scoring
# functions; F.scaled_dot_product_attention (outputs) and the float64 einsum above (weights)
# for einsum_attention; F.scaled_dot_product_attention on F.linear projections for the head.
# ========================================================================================
def _flat(t, batch):
    """(*batch, T, d) -> (prod(batch), T, d) so the loop oracles need one batch index."""
    return t.reshape(-1, *t.shape[len(batch):])


def _bilinear_oracle(q, k, W, batch):
    qf, kf, W64 = _flat(q, batch).double(), _flat(k, batch).double(), W.double()
    n, Tq, Tk = qf.shape[0], qf.shape[1], kf.shape[1]
    out = torch.zeros(n, Tq, Tk, dtype=torch.float64)
    for b in range(n):
        for i in range(Tq):
            for j in range(Tk):
                out[b, i, j] = torch.dot(qf[b, i], torch.mv(W64, kf[b, j]))
    return out.reshape(*batch, Tq, Tk).float()


def _additive_oracle(q, k, W1, W2, w, batch):
    qf, kf = _flat(q, batch).double(), _flat(k, batch).double()
    W1, W2, w = W1.double(), W2.double(), w.double()
    n, Tq, Tk = qf.shape[0], qf.shape[1], kf.shape[1]
    out = torch.zeros(n, Tq, Tk, dtype=torch.float64)
    for b in range(n):
        for i in range(Tq):
            wq = torch.mv(W2, qf[b, i])
            for j in range(Tk):
                out[b, i, j] = torch.dot(w, torch.tanh(torch.mv(W1, kf[b, j]) + wq))
    return out.reshape(*batch, Tq, Tk).float()


def _scores_result(res, what, desc):
    if not isinstance(res, torch.Tensor):
        raise CheckFailed(f"hidden test: {what} did not return a tensor", details=[f"case: {desc}"])
    return res


def bilinear_shapes(bilinear_scores) -> None:
    own_code(bilinear_scores, "bilinear_scores")
    g = rng(409)
    for _ in range(5):
        batch = _shape(g, 0, 2)
        Tq, Tk, dq, dk = randint(g, 1, 7), randint(g, 1, 7), randint(g, 1, 9), randint(g, 1, 9)
        q, k, W = torch.randn(*batch, Tq, dq), torch.randn(*batch, Tk, dk), torch.randn(dq, dk)
        desc = f"q {tuple(q.shape)}, k {tuple(k.shape)}, W {tuple(W.shape)}"
        out = _scores_result(call(bilinear_scores, q, k, W, name="bilinear_scores"), "bilinear_scores", desc)
        if tuple(out.shape) != (*batch, Tq, Tk):
            raise CheckFailed("hidden test: bilinear_scores has the wrong shape",
                              details=[f"case: {desc}", f"expected {(*batch, Tq, Tk)}, got {tuple(out.shape)}"])


def bilinear_values(bilinear_scores) -> None:
    g = rng(410)
    for case in range(5):
        batch = _shape(g, 0, 2)
        Tq, Tk, dq, dk = randint(g, 1, 6), randint(g, 1, 6), randint(g, 2, 9), randint(g, 2, 9)
        if case == 0:
            dk = dq  # a square, non-symmetric W: catches W^T
        q = torch.randn(*batch, Tq, dq, generator=g)
        k = torch.randn(*batch, Tk, dk, generator=g)
        W = torch.randn(dq, dk, generator=g)
        desc = f"q {tuple(q.shape)}, k {tuple(k.shape)}, W {tuple(W.shape)}"
        out = _scores_result(call(bilinear_scores, q, k, W, name="bilinear_scores"), "bilinear_scores", desc)
        want = _bilinear_oracle(q, k, W, batch)
        if not close(out, want):
            fail_values("bilinear_scores", out, want, desc, TOL)


def _additive_case(g, square=False):
    batch = _shape(g, 0, 2)
    Tq, Tk, dq, dk, h = randint(g, 1, 6), randint(g, 1, 6), randint(g, 2, 8), randint(g, 2, 8), randint(g, 2, 10)
    if square:
        dk = dq  # W1 and W2 of the same shape: catches a swap
    q = torch.randn(*batch, Tq, dq, generator=g)
    k = torch.randn(*batch, Tk, dk, generator=g)
    W1 = torch.randn(h, dk, generator=g) / math.sqrt(dk)
    W2 = torch.randn(h, dq, generator=g) / math.sqrt(dq)
    w = torch.randn(h, generator=g)
    desc = (f"q {tuple(q.shape)}, k {tuple(k.shape)}, W1 {tuple(W1.shape)}, W2 {tuple(W2.shape)}, "
            f"w {tuple(w.shape)}")
    return batch, (q, k, W1, W2, w), desc


def additive_shapes(additive_scores) -> None:
    own_code(additive_scores, "additive_scores")
    g = rng(411)
    for _ in range(5):
        batch, args, desc = _additive_case(g)
        out = _scores_result(call(additive_scores, *args, name="additive_scores"), "additive_scores", desc)
        want = (*batch, args[0].shape[-2], args[1].shape[-2])
        if tuple(out.shape) != want:
            raise CheckFailed("hidden test: additive_scores has the wrong shape",
                              details=[f"case: {desc}", f"expected {want}, got {tuple(out.shape)}"])


def additive_values(additive_scores) -> None:
    g = rng(412)
    for case in range(5):
        batch, args, desc = _additive_case(g, square=case < 2)
        out = _scores_result(call(additive_scores, *args, name="additive_scores"), "additive_scores", desc)
        want = _additive_oracle(*args, batch)
        if not close(out, want):
            fail_values("additive_scores", out, want, desc, TOL)


def _matmul_blocked():
    from attention_workbook.checks.ex04 import NO_MATMUL, matmul_builtins

    return forbid(matmul_builtins(), NO_MATMUL)


def _einsum_case(fn, g, batch, Tq, Tk, d, dv, mask=None, case=""):
    own_code(fn, "einsum_attention")
    q = torch.randn(*batch, Tq, d, generator=g) * 1.5
    k = torch.randn(*batch, Tk, d, generator=g) * 1.5
    v = torch.randn(*batch, Tk, dv, generator=g)
    with _matmul_blocked():
        res = call(fn, q, k, v, mask, name="einsum_attention")
    if not (isinstance(res, tuple) and len(res) == 2 and all(isinstance(t, torch.Tensor) for t in res)):
        raise CheckFailed("hidden test: einsum_attention must return (out, weights)")
    out, w = res
    want_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    want_w = _weights_oracle(q, k, mask)
    desc = f"{case} q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}" + (
        f", mask {tuple(mask.shape)}" if mask is not None else "")
    if not close(w, want_w):
        fail_values("einsum_attention weights", w, want_w, desc, TOL)
    if not close(out, want_out):
        fail_values("einsum_attention output", out, want_out, desc, TOL)


def einsum_values(einsum_attention) -> None:
    g = rng(413)
    for _ in range(4):
        B = randint(g, 1, 4)
        _einsum_case(
            einsum_attention, g, (B,), randint(g, 1, 7), randint(g, 1, 9), randint(g, 2, 24), randint(g, 1, 10)
        )


def einsum_batch_dims(einsum_attention) -> None:
    g = rng(414)
    for n_batch in (0, 2, 3):
        batch = tuple(randint(g, 1, 3) for _ in range(n_batch))
        _einsum_case(
            einsum_attention,
            g,
            batch,
            randint(g, 1, 6),
            randint(g, 1, 7),
            randint(g, 2, 16),
            randint(g, 1, 8),
            case=f"{n_batch} batch axes,",
        )


def einsum_mask(einsum_attention) -> None:
    g = rng(415)
    for _ in range(2):
        T = randint(g, 2, 8)
        _einsum_case(einsum_attention, g, (randint(g, 1, 3),), T, T, randint(g, 2, 16), randint(g, 1, 8),
                     torch.ones(T, T, dtype=torch.bool).tril(), "causal,")
    for _ in range(2):
        B, Tq, Tk = randint(g, 1, 4), randint(g, 1, 6), randint(g, 2, 8)
        lengths = torch.randint(1, Tk + 1, (B,), generator=g)
        mask = (torch.arange(Tk)[None, :] < lengths[:, None])[:, None, :]  # (B, 1, Tk)
        _einsum_case(einsum_attention, g, (B,), Tq, Tk, randint(g, 2, 16), randint(g, 1, 8), mask, "padding,")


def _head(cls, d_model, d_head):
    head = A.new(cls, d_model, d_head, name="SelfAttentionHead")
    if not A.is_module(head):
        raise CheckFailed("hidden test: SelfAttentionHead is not an nn.Module")
    for name in ("W_q", "W_k", "W_v"):
        lin = A.submodule(head, name) or {}
        if lin.get("kind") != "Linear" or lin["bias"] or (lin["out_features"], lin["in_features"]) != (d_head, d_model):
            raise CheckFailed(
                f"hidden test: SelfAttentionHead.{name} is not nn.Linear({d_model}, {d_head}, bias=False)"
            )
    return head, ("W_q", "W_k", "W_v")


def head_structure(SelfAttentionHead) -> None:
    own_code(SelfAttentionHead, "SelfAttentionHead")
    g = rng(416)
    for _ in range(3):
        d_model, d_head = randint(g, 2, 24), randint(g, 1, 12)
        head, _ = _head(SelfAttentionHead, d_model, d_head)
        n = sum(p.numel() for p in A.params(head).values())
        if n != 3 * d_model * d_head:
            raise CheckFailed("hidden test: SelfAttentionHead has extra parameters",
                              details=[f"case: d_model={d_model}, d_head={d_head}: {n} parameters, "
                                       f"expected {3 * d_model * d_head}"])


def _head_case(cls, g, mask_kind=None):
    B, T, d_model, d_head = randint(g, 1, 4), randint(g, 1, 8), randint(g, 2, 24), randint(g, 1, 12)
    head, names = _head(cls, d_model, d_head)
    wq, wk, wv = (torch.randn(d_head, d_model, generator=g) * 2 / math.sqrt(d_model) for _ in names)
    A.load(head, {f"{n}.weight": w for n, w in zip(names, (wq, wk, wv))})
    x = torch.randn(B, T, d_model, generator=g)
    mask = None
    if mask_kind == "causal":
        mask = torch.ones(T, T, dtype=torch.bool).tril()
    elif mask_kind == "padding":
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        mask = (torch.arange(T)[None, :] < lengths[:, None])[:, None, :]
    with torch.no_grad():
        with forbid(builtin_attention(), NO_BUILTIN_ATTENTION):
            out = call(head, x, mask, name="SelfAttentionHead.forward")
        want = F.scaled_dot_product_attention(F.linear(x, wq), F.linear(x, wk), F.linear(x, wv), attn_mask=mask)
    desc = f"x {tuple(x.shape)}, d_head={d_head}" + (
        f", {mask_kind} mask {tuple(mask.shape)}" if mask is not None else ""
    )
    if not isinstance(out, torch.Tensor):
        raise CheckFailed("hidden test: SelfAttentionHead.forward must return one tensor (B, T, d_head)",
                          details=[f"case: {desc}"])
    if not close(out, want):
        fail_values("SelfAttentionHead output", out, want, desc, TOL)


def head_forward(SelfAttentionHead) -> None:
    g = rng(417)
    for _ in range(4):
        _head_case(SelfAttentionHead, g)


def head_mask(SelfAttentionHead) -> None:
    g = rng(418)
    for kind in ("causal", "padding", "causal", "padding"):
        _head_case(SelfAttentionHead, g, kind)


guard(globals())  # every check records warnings instead of printing them (core.guard)
