"""Battery for exercise 05 (split_heads, merge_heads, MultiHeadAttention, mha_param_count, from_torch).

Oracles: ``torch.chunk`` / ``torch.cat`` of feature blocks for the head split and merge;
PyTorch's ``nn.MultiheadAttention`` with the same random weights and biases for the module (a
failing case is named by the visible check's ``diagnose_mha``); its parameter count for
``mha_param_count``. Random B, T, S (T != S for cross-attention), D, H; causal, padding and
per-head masks.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .. import ex05 as visible
from ._util import CheckFailed, as_int, call, exact, guard, randint


def _sizes(g):
    H, Dh = randint(g, 1, 6), randint(g, 1, 7)
    return randint(g, 1, 4), randint(g, 1, 9), H * Dh, H


def _split_oracle(x, H):          # (B, T, D) -> (B, H, T, Dh): head h holds features h*Dh:(h+1)*Dh
    return torch.stack(x.chunk(H, dim=-1), dim=1)


def _merge_oracle(y):             # (B, H, T, Dh) -> (B, T, H*Dh)
    return torch.cat(y.unbind(1), dim=-1)


def split_heads_shape(split_heads, g) -> None:
    for _ in range(5):
        B, T, D, H = _sizes(g)
        out = visible._split(split_heads, torch.randn(B, T, D, generator=g), H)
        if tuple(out.shape) != (B, H, T, D // H):
            raise CheckFailed("split_heads returns the wrong shape", reread=visible.SEC_RESHAPE,
                              details=[f"case: x {(B, T, D)}, n_heads={H}; expected {(B, H, T, D // H)}, "
                                       f"got {tuple(out.shape)}"])


def split_heads_values(split_heads, g) -> None:
    for _ in range(5):
        B, T, D, H = _sizes(g)
        x = torch.randn(B, T, D, generator=g)
        out = visible._split(split_heads, x, H)
        exact(out, _split_oracle(x, H), "split_heads(x)", f"x {(B, T, D)}, n_heads={H}",
              variants=lambda: visible.split_wrong_variants(x, H), reread=visible.SEC_RESHAPE)


def merge_heads(merge_heads, g) -> None:
    for _ in range(5):
        B, T, D, H = _sizes(g)
        y = torch.randn(B, T, H, D // H, generator=g).transpose(1, 2)   # (B, H, T, Dh), not contiguous
        out = visible.call_view_aware(merge_heads, y, name="merge_heads", reread=visible.SEC_RESHAPE)
        exact(out, _merge_oracle(y), "merge_heads(y)", f"y {(B, H, T, D // H)} (non-contiguous)",
              variants=lambda: visible.merge_wrong_variants(y), reread=visible.SEC_RESHAPE)


def mha_init(MultiHeadAttention, g) -> None:
    for _ in range(4):
        _, _, D, H = _sizes(g)
        for bias in (True, False):
            m = visible._build(MultiHeadAttention, D, H, bias=bias)
            n = sum(p.numel() for p in m.parameters())
            want = sum(p.numel() for p in nn.MultiheadAttention(D, H, bias=bias).parameters())
            if n != want:
                raise CheckFailed("MultiHeadAttention has the wrong number of parameters", reread=visible.SEC_COUNT,
                                  details=[f"case: D={D}, H={H}, bias={bias}: {n}, expected {want} "
                                           "(nn.MultiheadAttention's count)"])
        m = call(MultiHeadAttention, D, H, name="MultiHeadAttention")  # bias=True is the default
        if (
            getattr(getattr(m, "W_qkv", None), "bias", None) is None
            or getattr(getattr(m, "W_o", None), "bias", None) is None
        ):
            raise CheckFailed(f"MultiHeadAttention({D}, {H}) without a bias argument has no biases",
                              hint=visible.DEFAULT_BIAS, reread=visible.SEC_EFFICIENCY)


def _case(MultiHeadAttention, g, *, cross=False, mask_kind=None, bias=True, check_weights=False, same_length=False):
    B, T, D, H = _sizes(g)
    S = randint(g, 1, 10) if cross else T
    if cross and S == T and not same_length:
        S = T + 1
    if same_length:   # kv as long as x, but another tensor
        S = T
    ref = visible.random_torch_mha(D, H, bias=bias, seed=randint(g, 10_000, 10_000_000))
    m = visible._build(MultiHeadAttention, D, H, bias=bias)
    visible.load_from_torch(m, ref)
    x = torch.randn(B, T, D, generator=g)
    kv = torch.randn(B, S, D, generator=g) if cross else None
    mask = None
    if mask_kind == "causal":
        mask = torch.ones(T, S, dtype=torch.bool).tril()
    elif mask_kind == "padding":
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        mask = (torch.arange(S)[None, :] < lengths[:, None])[:, None, None, :]
    elif mask_kind == "per_head":
        mask = torch.rand(B, H, T, S, generator=g) > 0.5
        mask[..., randint(g, 0, S - 1)] = True
    what = (f"B={B}, T={T}, S={S}, D={D}, H={H}, bias={bias}" + (", cross-attention" if cross else "")
            + (f", {mask_kind} mask {tuple(mask.shape)}" if mask is not None else ""))
    _, want_w = visible._compare(m, ref, x, kv, mask, what=what,
                                 reread=visible.SEC_MASKS if (cross or mask is not None) else visible.SEC_EFFICIENCY)
    if check_weights:
        w = visible.last_weights(m)
        if w is None:
            raise CheckFailed("self.last_weights is not a tensor after forward", details=[f"case: {what}"],
                              reread=visible.SEC_EFFICIENCY)
        exact_w = tuple(w.shape) == tuple(want_w.shape)
        if not exact_w or not visible.close(w, want_w):
            raise CheckFailed("self.last_weights differs from nn.MultiheadAttention's per-head weights",
                              reread=visible.SEC_EFFICIENCY,
                              details=[f"case: {what}", f"expected shape {tuple(want_w.shape)}, got {tuple(w.shape)}"])


def mha_self(MultiHeadAttention, g) -> None:
    for _ in range(4):
        _case(MultiHeadAttention, g)
    _case(MultiHeadAttention, g, bias=False)


def mha_weights(MultiHeadAttention, g) -> None:
    for _ in range(3):
        _case(MultiHeadAttention, g, check_weights=True)
    _case(MultiHeadAttention, g, cross=True, mask_kind="padding", check_weights=True)


def mha_mask(MultiHeadAttention, g) -> None:
    for kind in ("padding", "causal", "per_head", "padding", "causal"):
        _case(MultiHeadAttention, g, mask_kind=kind)


def mha_cross(MultiHeadAttention, g) -> None:
    for kind in (None, "padding", None, "per_head"):
        _case(MultiHeadAttention, g, cross=True, mask_kind=kind)
    _case(MultiHeadAttention, g, cross=True, same_length=True)            # S = T, kv is not x
    for kind in (None, "padding"):
        _case(MultiHeadAttention, g, cross=True, mask_kind=kind, bias=False)


def mha_param_count(mha_param_count, g) -> None:
    cases = [(_sizes(g)[2], bias) for _ in range(5) for bias in (True, False)] + [(randint(g, 100, 20000), False)]
    for D, bias in cases:
        got = call(mha_param_count, D, bias=bias, name="mha_param_count")
        n = as_int(got)
        # nn.MultiheadAttention's own count (built only where it is small enough to allocate)
        want = (sum(p.numel() for p in nn.MultiheadAttention(D, 1, bias=bias).parameters()) if D <= 512
                else 4 * D * D + (4 * D if bias else 0))
        if n != want:
            raise CheckFailed("mha_param_count is wrong", reread=visible.SEC_COUNT,
                              details=[f"case: d_model={D}, bias={bias}: {got!r}, expected {want}"])
    D = _sizes(g)[2]
    got = call(mha_param_count, D, name="mha_param_count")
    if as_int(got) != 4 * D * D + 4 * D:
        raise CheckFailed(f"mha_param_count({D}) = {got!r}, expected {4 * D * D + 4 * D} (biases by default)",
                          hint=visible.DEFAULT_BIAS, reread=visible.SEC_COUNT)


def from_torch(from_torch, MultiHeadAttention=None, g=None) -> None:
    for i in range(4):
        B, T, D, H = _sizes(g)
        bias = i != 2
        ref = visible.random_torch_mha(D, H, bias=bias, seed=randint(g, 10_000, 10_000_000))
        m = call(from_torch, ref, name="from_torch", reread=visible.SEC_TORCH)
        if not isinstance(m, nn.Module):
            raise CheckFailed("from_torch did not return a module", reread=visible.SEC_TORCH)
        if MultiHeadAttention is not None and not isinstance(m, MultiHeadAttention):
            raise CheckFailed("from_torch must return your MultiHeadAttention", reread=visible.SEC_TORCH)
        S = T + randint(g, 1, 4)
        x, kv = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
        for kv_ in (None, kv):
            visible._compare(m, ref, x, kv_, None, what=f"from_torch(ref), B={B}, T={T}, D={D}, H={H}, bias={bias}"
                             + (f", cross-attention S={S}" if kv_ is not None else ""), reread=visible.SEC_TORCH)


guard(globals())
