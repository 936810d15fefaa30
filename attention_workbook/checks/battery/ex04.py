"""Battery for exercise 04 (softmax, masks, attention, scoring functions, einsum, one head).

Oracles: ``torch.softmax`` in float64; masks from comparisons of ``torch.arange``; attention
outputs from ``F.scaled_dot_product_attention`` and attention weights from the same built-in
applied to identity values (softmax(...) @ I is the weights); bilinear scores from
``F.bilinear`` on every (query, key) pair; additive scores from ``F.linear`` in float64; the
head from ``F.scaled_dot_product_attention`` on ``F.linear`` projections.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import ex04 as visible
from ..core import forbid, softmax_builtins
from ._util import CheckFailed, call, expect, guard, randint, tensor


def _shape(g, lo=1, hi=4):
    return tuple(randint(g, 1, 6) for _ in range(randint(g, lo, hi)))


def _softmax(softmax, x, dim):
    with forbid(softmax_builtins(), visible.NO_BUILTIN):       # dim=None: softmax(x), the default dim=-1
        return tensor(call(softmax, x, **({} if dim is None else {"dim": dim}), name="softmax"), "softmax")


def _softmax_expect(out, x, dim, case, **tol):
    want = torch.softmax(x.double(), dim).float()
    try:
        expect(out, want, f"softmax(x, dim={dim})", case, **tol, reread=visible.SEC_SOFTMAX)
    except CheckFailed as e:
        if e.hint is None and tuple(out.shape) == tuple(x.shape):
            e.hint = visible.diagnose_softmax(out, x, dim)
            e.args = (e.plain(),)
        raise


def softmax_values(softmax, g) -> None:
    for case in range(6):
        shape = _shape(g)
        x = torch.randn(shape, generator=g) * (0.5 + 3 * case)
        _softmax_expect(_softmax(softmax, x, None if case % 2 else -1), x, -1,
                        f"x {shape}, dim=-1" + (" (the default)" if case % 2 else ""))


def softmax_dim(softmax, g) -> None:
    for _ in range(6):
        shape = _shape(g, 2, 4)
        dim = randint(g, -len(shape), len(shape) - 1)
        x = torch.randn(shape, generator=g) * 2
        _softmax_expect(_softmax(softmax, x, dim), x, dim, f"x {shape}")


def softmax_stability(softmax, g) -> None:
    for _ in range(4):
        shape = _shape(g, 2, 3)
        x = torch.randn(shape, generator=g) * 40 + 9e3 * (torch.rand(shape[:-1] + (1,), generator=g) * 2 - 1)
        out = _softmax(softmax, x, -1)
        if not bool(torch.isfinite(out).all()):
            raise CheckFailed("softmax returns inf/nan for inputs around +-9000", details=[f"case: x {shape}"],
                              hint=visible.unstable_softmax_hint(out, x, -1), reread=visible.SEC_SOFTMAX)
        _softmax_expect(out, x, -1, f"x {shape}, entries around +-9000", atol=2e-3, rtol=2e-3)
    x = torch.randn(4, 6, generator=g)
    x[torch.rand(4, 6, generator=g) < 0.4] = float("-inf")
    x[:, randint(g, 0, 5)] = 1.0
    _softmax_expect(_softmax(softmax, x, -1), x, -1, "x (4, 6) with -inf entries (masked scores)")


def causal_mask(causal_mask, g) -> None:
    for T in (1, 3, randint(g, 4, 9), randint(g, 10, 20)):
        m = call(causal_mask, T, name="causal_mask")
        want = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or not torch.equal(m, want):
            raise CheckFailed(
                f"causal_mask({T}) is not the bool lower triangle (True where key <= query)",
                reread=visible.SEC_CAUSAL,
                details=[f"got {type(m).__name__} {getattr(m, 'dtype', '')} {tuple(getattr(m, 'shape', ()))}"],
            )


def padding_mask(padding_mask, g) -> None:
    for _ in range(5):
        B, T = randint(g, 1, 6), randint(g, 1, 10)
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        m = call(padding_mask, lengths, T, name="padding_mask")
        want = (torch.arange(T)[None, :] < lengths[:, None])[:, None, :]
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or not torch.equal(m, want):
            raise CheckFailed("padding_mask is wrong", reread=visible.SEC_PADDING,
                              details=[f"case: lengths={lengths.tolist()}, T={T}: expected bool (B, 1, T), True at "
                                       f"positions < length; got {getattr(m, 'dtype', type(m).__name__)} "
                                       f"{tuple(getattr(m, 'shape', ()))}"])


def _oracle(q, k, v, mask=None):
    """(out, weights) from PyTorch's attention: the weights are the attention applied to identity values."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    eye = torch.eye(k.shape[-2], dtype=torch.float64).expand(*k.shape[:-1], k.shape[-2])
    out = F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask)
    w = F.scaled_dot_product_attention(q64, k64, eye, attn_mask=mask)
    return out.float(), w.float()


def _attention_case(fn, student, g, batch, Tq, Tk, d, dv, mask=None, case="", reread=visible.SEC_MATRIX):
    q = torch.randn(*batch, Tq, d, generator=g) * 1.5
    k = torch.randn(*batch, Tk, d, generator=g) * 1.5
    v = torch.randn(*batch, Tk, dv, generator=g)
    out, w = student(fn, q, k, v, mask)
    want_out, want_w = _oracle(q, k, v, mask)
    desc = f"{case}q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}" + (
        f", mask {tuple(mask.shape)}" if mask is not None else "")
    for what, got, want in (("attention weights", w, want_w), ("attention output", out, want_out)):
        try:
            expect(got, want, what, desc, reread=reread)
        except CheckFailed as e:
            if e.hint is None and tuple(w.shape) == tuple(want_w.shape):
                e.hint = visible._name_sdpa_mistake(out.detach(), w.detach(), q, k, v, mask)
                e.args = (e.plain(),)
            raise


def _sdpa(fn, q, k, v, mask):
    return visible._student_sdpa(fn, q, k, v, mask)


def sdpa_shapes(sdpa, g) -> None:
    for _ in range(4):
        batch = _shape(g, 0, 2)
        Tq, Tk, d, dv = randint(g, 1, 8), randint(g, 1, 9), randint(g, 2, 17), randint(g, 1, 13)
        q = torch.randn(*batch, Tq, d, generator=g)
        k, v = torch.randn(*batch, Tk, d, generator=g), torch.randn(*batch, Tk, dv, generator=g)
        out, w = _sdpa(sdpa, q, k, v, None)
        if tuple(out.shape) != (*batch, Tq, dv) or tuple(w.shape) != (*batch, Tq, Tk):
            raise CheckFailed("scaled_dot_product_attention returns the wrong shapes", reread=visible.SEC_MATRIX,
                              details=[f"case: batch axes {batch}, Tq={Tq}, Tk={Tk}, d={d}, dv={dv}",
                                       f"expected out {(*batch, Tq, dv)} and weights {(*batch, Tq, Tk)}, "
                                       f"got {tuple(out.shape)} and {tuple(w.shape)}"])


def sdpa_values(sdpa, g) -> None:
    for _ in range(5):
        _attention_case(sdpa, _sdpa, g, _shape(g, 0, 2), randint(g, 1, 8), randint(g, 1, 9), randint(g, 2, 30),
                        randint(g, 1, 12))


def sdpa_causal(sdpa, g) -> None:
    for _ in range(4):
        T = randint(g, 2, 9)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        _attention_case(sdpa, _sdpa, g, _shape(g, 1, 2), T, T, randint(g, 2, 16), randint(g, 1, 9), mask,
                        "causal (T, T), ", visible.SEC_CAUSAL)
    T = randint(g, 2, 9)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    batch, d, dv = _shape(g, 1, 2), randint(g, 2, 16), randint(g, 1, 9)
    visible.sdpa_extreme(sdpa, torch.randn(*batch, T, d, generator=g), torch.randn(*batch, T, d, generator=g),
                         torch.randn(*batch, T, dv, generator=g), mask, f"causal (T, T), T={T}", visible.SEC_CAUSAL)


def _padding(g, B, Tk, extra_axes):
    lengths = torch.randint(1, Tk + 1, (B,), generator=g)
    keep = torch.arange(Tk)[None, :] < lengths[:, None]
    return keep.reshape(B, *([1] * extra_axes), Tk)


def sdpa_padding(sdpa, g) -> None:
    for i in range(4):
        B, H, Tq, Tk = randint(g, 1, 4), randint(g, 1, 3), randint(g, 1, 7), randint(g, 2, 8)
        if i % 2:   # (B, 1, 1, Tk) for (B, H, T, d) inputs
            _attention_case(sdpa, _sdpa, g, (B, H), Tq, Tk, randint(g, 2, 16), randint(g, 1, 8), _padding(g, B, Tk, 2),
                            "padding, ", visible.SEC_PADDING)
        else:       # (B, 1, Tk) for (B, T, d) inputs
            _attention_case(sdpa, _sdpa, g, (B,), Tq, Tk, randint(g, 2, 16), randint(g, 1, 8), _padding(g, B, Tk, 1),
                            "padding, ", visible.SEC_PADDING)
    B, Tq, Tk, d = randint(g, 1, 4), randint(g, 1, 7), randint(g, 2, 8), randint(g, 2, 16)
    mask = _padding(g, B, Tk, 1)
    mask[0, 0, -1] = False                                   # at least one padded key
    visible.sdpa_extreme(sdpa, torch.randn(B, Tq, d, generator=g), torch.randn(B, Tk, d, generator=g),
                         torch.randn(B, Tk, randint(g, 1, 8), generator=g), mask, f"padding {tuple(mask.shape)}",
                         visible.SEC_PADDING)


# ----------------------------------------------------------------------------------------
def _bilinear(q, k, W, batch):
    Tq, Tk = q.shape[-2], k.shape[-2]
    qe = q.double()[..., :, None, :].expand(*batch, Tq, Tk, q.shape[-1]).reshape(-1, q.shape[-1])
    ke = k.double()[..., None, :, :].expand(*batch, Tq, Tk, k.shape[-1]).reshape(-1, k.shape[-1])
    return F.bilinear(qe, ke, W.double()[None]).reshape(*batch, Tq, Tk).float()


def _bilinear_case(g, square=False):
    batch = _shape(g, 0, 2)
    Tq, Tk, dq, dk = randint(g, 1, 7), randint(g, 1, 7), randint(g, 2, 9), randint(g, 2, 9)
    if square:
        dk = dq
    q, k = torch.randn(*batch, Tq, dq, generator=g), torch.randn(*batch, Tk, dk, generator=g)
    W = torch.randn(dq, dk, generator=g)
    return batch, q, k, W, f"q {tuple(q.shape)}, k {tuple(k.shape)}, W {tuple(W.shape)}"


def bilinear_shapes(bilinear_scores, g) -> None:
    for _ in range(5):
        batch, q, k, W, desc = _bilinear_case(g)
        out = tensor(call(bilinear_scores, q, k, W, name="bilinear_scores"), "bilinear_scores", desc)
        if tuple(out.shape) != (*batch, q.shape[-2], k.shape[-2]):
            raise CheckFailed(
                "bilinear_scores has the wrong shape",
                hint=visible.BILINEAR_SHAPES,
                reread=visible.SEC_SCORING,
                details=[f"case: {desc}", f"expected {(*batch, q.shape[-2], k.shape[-2])}, got {tuple(out.shape)}"],
            )


def bilinear_values(bilinear_scores, g) -> None:
    for case in range(5):
        batch, q, k, W, desc = _bilinear_case(g, square=case < 2)
        out = call(bilinear_scores, q, k, W, name="bilinear_scores")
        expect(
            out,
            _bilinear(q, k, W, batch),
            "bilinear_scores",
            desc,
            reread=visible.SEC_SCORING,
            variants=lambda: {
                f"your result equals {n}": v for n, v in visible.bilinear_wrong_variants(q, k, W).items()
            },
        )


def _additive(q, k, W1, W2, w):
    kk = F.linear(k.double(), W1.double())[..., None, :, :]      # (..., 1, Tk, h)
    qq = F.linear(q.double(), W2.double())[..., :, None, :]      # (..., Tq, 1, h)
    return (torch.tanh(qq + kk) * w.double()).sum(-1).float()


def _additive_case(g, square=False):
    batch = _shape(g, 0, 2)
    Tq, Tk, dq, dk, h = randint(g, 1, 7), randint(g, 1, 7), randint(g, 2, 9), randint(g, 2, 9), randint(g, 2, 11)
    if square:
        dk = dq
    q, k = torch.randn(*batch, Tq, dq, generator=g), torch.randn(*batch, Tk, dk, generator=g)
    W1, W2 = torch.randn(h, dk, generator=g) / math.sqrt(dk), torch.randn(h, dq, generator=g) / math.sqrt(dq)
    w = torch.randn(h, generator=g)
    desc = f"q {tuple(q.shape)}, k {tuple(k.shape)}, W1 {tuple(W1.shape)}, W2 {tuple(W2.shape)}, w {tuple(w.shape)}"
    return batch, (q, k, W1, W2, w), desc


def additive_shapes(additive_scores, g) -> None:
    for _ in range(5):
        batch, args, desc = _additive_case(g)
        out = tensor(call(additive_scores, *args, name="additive_scores"), "additive_scores", desc)
        want = (*batch, args[0].shape[-2], args[1].shape[-2])
        if tuple(out.shape) != want:
            raise CheckFailed("additive_scores has the wrong shape", reread=visible.SEC_SCORING,
                              details=[f"case: {desc}", f"expected {want}, got {tuple(out.shape)}"])


def additive_values(additive_scores, g) -> None:
    for case in range(5):
        batch, args, desc = _additive_case(g, square=case < 2)
        out = call(additive_scores, *args, name="additive_scores")
        expect(
            out,
            _additive(*args),
            "additive_scores",
            desc,
            reread=visible.SEC_SCORING,
            variants=lambda: {f"your result equals {n}": v for n, v in visible.additive_wrong_variants(*args).items()},
        )


def _einsum(fn, q, k, v, mask):
    return visible._student_einsum(fn, q, k, v, mask)


def einsum_values(einsum_attention, g) -> None:
    for _ in range(4):
        _attention_case(einsum_attention, _einsum, g, (randint(g, 1, 4),), randint(g, 1, 8), randint(g, 1, 9),
                        randint(g, 2, 24), randint(g, 1, 11), reread=visible.SEC_EINSUM)


def einsum_batch_dims(einsum_attention, g) -> None:
    for n_batch in (0, 2, 3):
        batch = tuple(randint(g, 1, 3) for _ in range(n_batch))
        _attention_case(einsum_attention, _einsum, g, batch, randint(g, 1, 7), randint(g, 1, 8), randint(g, 2, 16),
                        randint(g, 1, 9), case=f"{n_batch} batch axes, ", reread=visible.SEC_EINSUM)


def einsum_mask(einsum_attention, g) -> None:
    for _ in range(2):
        T = randint(g, 2, 8)
        _attention_case(einsum_attention, _einsum, g, (randint(g, 1, 3),), T, T, randint(g, 2, 16), randint(g, 1, 8),
                        torch.ones(T, T, dtype=torch.bool).tril(), "causal, ", visible.SEC_CAUSAL)
    for _ in range(2):
        B, Tq, Tk = randint(g, 1, 4), randint(g, 1, 7), randint(g, 2, 8)
        _attention_case(einsum_attention, _einsum, g, (B,), Tq, Tk, randint(g, 2, 16), randint(g, 1, 8),
                        _padding(g, B, Tk, 1), "padding, ", visible.SEC_PADDING)


# ----------------------------------------------------------------------------------------
def head_structure(SelfAttentionHead, g) -> None:
    for _ in range(3):
        d_model, d_head = randint(g, 2, 30), randint(g, 1, 14)
        head = visible._make_head(SelfAttentionHead, d_model, d_head)
        visible._head_linears(head, d_model, d_head)
        n = sum(p.numel() for p in head.parameters())
        if n != 3 * d_model * d_head:
            raise CheckFailed("SelfAttentionHead has extra parameters", reread=visible.SEC_ROLES,
                              details=[f"case: d_model={d_model}, d_head={d_head}: {n} parameters, "
                                       f"expected {3 * d_model * d_head}"])


def _head_case(cls, g, mask_kind=None):
    B, T, d_model, d_head = randint(g, 1, 4), randint(g, 1, 9), randint(g, 2, 24), randint(g, 1, 12)
    head = visible._make_head(cls, d_model, d_head)
    Wq, Wk, Wv = visible._head_linears(head, d_model, d_head)
    with torch.no_grad():
        for p in (Wq, Wk, Wv):
            p.copy_(torch.randn(d_head, d_model, generator=g) * 2 / math.sqrt(d_model))
    x = torch.randn(B, T, d_model, generator=g)
    mask = None
    if mask_kind == "causal":
        mask = torch.ones(T, T, dtype=torch.bool).tril()
    elif mask_kind == "padding":
        mask = _padding(g, B, T, 1)
    desc = f"x {tuple(x.shape)}, d_head={d_head}" + (
        f", {mask_kind} mask {tuple(mask.shape)}" if mask is not None else ""
    )
    with torch.no_grad():
        out = visible.call_with_mask(head, x, mask=mask, name="SelfAttentionHead.forward", reread=visible.SEC_MATRIX)
        Wq, Wk, Wv = (p.detach() for p in (Wq, Wk, Wv))
        x64 = x.double()
        want = F.scaled_dot_product_attention(F.linear(x64, Wq.double()), F.linear(x64, Wk.double()),
                                              F.linear(x64, Wv.double()), attn_mask=mask).float()
    if isinstance(out, tuple):
        raise CheckFailed(
            "SelfAttentionHead.forward returns a tuple", hint="forward(x, mask) returns only the output tensor"
        )
    expect(
        out,
        want,
        "SelfAttentionHead output",
        desc,
        reread=visible.SEC_MATRIX,
        variants=lambda: {
            f"your result equals {n}": v for n, v in visible.head_wrong_variants(Wq, Wk, Wv, x, mask).items()
        },
    )


def head_forward(SelfAttentionHead, g) -> None:
    for _ in range(4):
        _head_case(SelfAttentionHead, g)


def head_mask(SelfAttentionHead, g) -> None:
    for kind in ("causal", "padding", "padding", "causal"):
        _head_case(SelfAttentionHead, g, kind)


guard(globals())
