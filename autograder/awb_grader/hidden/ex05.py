"""Hidden checks for exercise 05 (multi-head attention): randomized shapes, independent oracles.

Oracles:
* split/merge: explicit loops over (batch, head, token) that copy feature blocks one by one;
* MultiHeadAttention: PyTorch's ``nn.MultiheadAttention`` with the same (random) weights and
  biases, and a float64 per-head loop reference written without any reshape;
* mha_param_count: the parameter count of ``nn.MultiheadAttention``.
Randomized B, T, S (T != S for cross-attention), D and H with fixed seeds (deterministic
grading). Tolerance: atol 1e-5 + rtol 1e-4 (float32).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from attention_workbook.checks.ex05 import NO_BUILTIN, builtin_attention, random_torch_mha, torch_reference

from . import _adapter as A
from ._adapter import forbid
from ._base import guard, CheckFailed, as_int, call, close, fail_values, own_code, randint, rng

TOL = "atol 1e-5 + rtol 1e-4"


# ----------------------------------------------------------------------------------------
# oracles
# ----------------------------------------------------------------------------------------
def split_oracle(x: torch.Tensor, H: int) -> torch.Tensor:
    B, T, D = x.shape
    Dh = D // H
    out = torch.empty(B, H, T, Dh, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                out[b, h, t] = x[b, t, h * Dh:(h + 1) * Dh]
    return out


def merge_oracle(y: torch.Tensor) -> torch.Tensor:
    B, H, T, Dh = y.shape
    out = torch.empty(B, T, H * Dh, dtype=y.dtype)
    for b in range(B):
        for t in range(T):
            for h in range(H):
                out[b, t, h * Dh:(h + 1) * Dh] = y[b, h, t]
    return out


def loop_oracle(ref: nn.MultiheadAttention, x, kv=None, mask=None):
    """float64, one (batch, head) at a time, weights sliced by rows: no reshape anywhere."""
    kv = x if kv is None else kv
    D, H = ref.embed_dim, ref.num_heads
    Dh = D // H
    W, Wo = ref.in_proj_weight.detach().double(), ref.out_proj.weight.detach().double()
    b_in = (
        ref.in_proj_bias.detach().double() if ref.in_proj_bias is not None else torch.zeros(3 * D, dtype=torch.float64)
    )
    b_o = ref.out_proj.bias.detach().double() if ref.out_proj.bias is not None else torch.zeros(D, dtype=torch.float64)
    B, T, S = x.size(0), x.size(1), kv.size(1)
    m = None if mask is None else torch.broadcast_to(mask, (B, H, T, S))
    x64, kv64 = x.double(), kv.double()
    concat = torch.zeros(B, T, D, dtype=torch.float64)
    weights = torch.zeros(B, H, T, S, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            rq = slice(h * Dh, (h + 1) * Dh)
            rk = slice(D + h * Dh, D + (h + 1) * Dh)
            rv = slice(2 * D + h * Dh, 2 * D + (h + 1) * Dh)
            q = x64[b] @ W[rq].T + b_in[rq]      # (T, Dh)
            k = kv64[b] @ W[rk].T + b_in[rk]     # (S, Dh)
            v = kv64[b] @ W[rv].T + b_in[rv]     # (S, Dh)
            s = q @ k.T / math.sqrt(Dh)
            if m is not None:
                s = s.masked_fill(~m[b, h], float("-inf"))
            e = (s - s.amax(-1, keepdim=True)).exp()
            w = e / e.sum(-1, keepdim=True)
            weights[b, h] = w
            concat[b, :, rq] = w @ v
    return (concat @ Wo.T + b_o).float(), weights.float()


# ----------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------
def _sizes(g):
    H = randint(g, 1, 6)
    Dh = randint(g, 1, 7)
    return randint(g, 1, 4), randint(g, 1, 8), H * Dh, H


def _build(MultiHeadAttention, ref: nn.MultiheadAttention):
    bias = ref.in_proj_bias is not None
    m = A.new(MultiHeadAttention, ref.embed_dim, ref.num_heads, bias=bias, name="MultiHeadAttention")
    if not all((A.submodule(m, a) or {}).get("kind") == "Linear" for a in ("W_qkv", "W_o")):
        raise CheckFailed("hidden test: MultiHeadAttention needs nn.Linear attributes W_qkv and W_o")
    weights = {"W_qkv.weight": ref.in_proj_weight, "W_o.weight": ref.out_proj.weight}
    if bias:
        weights.update({"W_qkv.bias": ref.in_proj_bias, "W_o.bias": ref.out_proj.bias})
    try:
        A.load(m, {k: v.detach() for k, v in weights.items()})
    except (A.LoadError, RuntimeError, AttributeError) as e:
        raise CheckFailed("hidden test: cannot load weights into W_qkv (3D x D) / W_o (D x D) with biases as asked",
                          details=[f"D={ref.embed_dim}, H={ref.num_heads}, bias={bias}: {str(e)[:120]}"]) from None
    return m


def _forward(m, x, kv=None, mask=None):
    kwargs = {k: v for k, v in (("kv", kv), ("mask", mask)) if v is not None}
    with forbid(builtin_attention(), NO_BUILTIN):
        out = call(m, x, name="MultiHeadAttention forward", **kwargs)
    if not isinstance(out, torch.Tensor):
        raise CheckFailed("hidden test: MultiHeadAttention forward did not return a tensor")
    return out


def _mha_case(MultiHeadAttention, g, *, cross=False, mask_kind=None, bias=True, check_weights=False, seed=0,
              same_length=False):
    B, T, D, H = _sizes(g)
    S = randint(g, 1, 9) if cross else T
    if cross and S == T and not same_length:
        S = T + 1
    if same_length:   # kv as long as x, but another tensor
        S = T
    ref = random_torch_mha(D, H, bias=bias, seed=seed)
    m = _build(MultiHeadAttention, ref)
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
        mask[..., 0] = True
    out = _forward(m, x, kv, mask)
    want, want_w = torch_reference(ref, x, kv, mask)
    loop_out, loop_w = loop_oracle(ref, x, kv, mask)
    case = (f"B={B}, T={T}, S={S}, D={D}, H={H}, bias={bias}" + (", cross-attention" if cross else "")
            + (f", mask {mask_kind} {tuple(mask.shape)}" if mask is not None else ""))
    if not close(want, loop_out, atol=1e-4):  # the two oracles must agree (guards the oracles themselves)
        raise RuntimeError(f"hidden oracle disagreement in {case}")
    if not close(out, want):
        fail_values("MultiHeadAttention output", out, want, case, TOL)
    if check_weights:
        w = A.get(m, "last_weights", None)
        if not isinstance(w, torch.Tensor):
            raise CheckFailed("hidden test: self.last_weights is not set after forward", details=[f"case: {case}"])
        if not close(w, loop_w):
            fail_values("last_weights", w, loop_w, case, TOL)


# ----------------------------------------------------------------------------------------
# the checks (one per test cell)
# ----------------------------------------------------------------------------------------
def split_heads_shape(split_heads) -> None:
    own_code(split_heads, "split_heads")
    g = rng(501)
    for _ in range(5):
        B, T, D, H = _sizes(g)
        out = call(split_heads, torch.randn(B, T, D, generator=g), H, name="split_heads")
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, H, T, D // H):
            raise CheckFailed("hidden test: split_heads returns the wrong shape",
                              details=[f"case: x {(B, T, D)}, n_heads={H}; expected {(B, H, T, D // H)}, got "
                                       f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}"])


def split_heads_values(split_heads) -> None:
    g = rng(502)
    for _ in range(5):
        B, T, D, H = _sizes(g)
        x = torch.randn(B, T, D, generator=g)
        out = call(split_heads, x, H, name="split_heads")
        want = split_oracle(x, H)
        if not isinstance(out, torch.Tensor) or not close(out, want, atol=0, rtol=0):
            fail_values("split_heads(x)", out if isinstance(out, torch.Tensor) else torch.empty(0), want,
                        f"x {(B, T, D)}, n_heads={H}", "exact")


def merge_heads(merge_heads) -> None:
    own_code(merge_heads, "merge_heads")
    g = rng(503)
    for _ in range(5):
        B, T, D, H = _sizes(g)
        y = torch.randn(B, T, H, D // H, generator=g).transpose(1, 2)  # (B, H, T, Dh), not contiguous
        out = call(merge_heads, y, name="merge_heads")
        want = merge_oracle(y)
        if not isinstance(out, torch.Tensor) or not close(out, want, atol=0, rtol=0):
            fail_values("merge_heads(y)", out if isinstance(out, torch.Tensor) else torch.empty(0), want,
                        f"y {(B, H, T, D // H)}", "exact")


def mha_init(MultiHeadAttention) -> None:
    own_code(MultiHeadAttention, "MultiHeadAttention")
    g = rng(504)
    for _ in range(4):
        _, _, D, H = _sizes(g)
        for bias in (True, False):
            ref = nn.MultiheadAttention(D, H, bias=bias, batch_first=True)
            m = _build(MultiHeadAttention, ref)
            n, want = sum(p.numel() for p in A.params(m).values()), sum(p.numel() for p in ref.parameters())
            if n != want:
                raise CheckFailed("hidden test: MultiHeadAttention has the wrong number of parameters",
                                  details=[f"case: D={D}, H={H}, bias={bias}: {n}, expected {want}"])
        m = A.new(MultiHeadAttention, D, H, name="MultiHeadAttention")     # bias=True is the default
        if not {"W_qkv.bias", "W_o.bias"} <= set(A.params(m)):
            raise CheckFailed("hidden test: MultiHeadAttention(d_model, n_heads) without a bias argument has no biases",
                              details=[f"case: D={D}, H={H}"])


def mha_self(MultiHeadAttention) -> None:
    own_code(MultiHeadAttention, "MultiHeadAttention")
    g = rng(505)
    for i in range(4):
        _mha_case(MultiHeadAttention, g, seed=50 + i)
    _mha_case(MultiHeadAttention, g, bias=False, seed=59)


def mha_weights(MultiHeadAttention) -> None:
    g = rng(506)
    for i in range(3):
        _mha_case(MultiHeadAttention, g, check_weights=True, seed=60 + i)
    _mha_case(MultiHeadAttention, g, cross=True, mask_kind="padding", check_weights=True, seed=64)


def mha_mask(MultiHeadAttention) -> None:
    g = rng(507)
    for i, kind in enumerate(("causal", "padding", "per_head", "causal", "padding")):
        _mha_case(MultiHeadAttention, g, mask_kind=kind, seed=70 + i)


def mha_cross(MultiHeadAttention) -> None:
    g = rng(508)
    for i, kind in enumerate((None, None, "padding", "per_head")):
        _mha_case(MultiHeadAttention, g, cross=True, mask_kind=kind, seed=80 + i)
    _mha_case(MultiHeadAttention, g, cross=True, same_length=True, seed=85)
    for i, kind in enumerate((None, "padding")):
        _mha_case(MultiHeadAttention, g, cross=True, mask_kind=kind, bias=False, seed=86 + i)


def mha_param_count(mha_param_count) -> None:
    own_code(mha_param_count, "mha_param_count")
    g = rng(509)
    for _ in range(6):
        _, _, D, H = _sizes(g)
        for bias in (True, False):
            n = as_int(call(mha_param_count, D, bias=bias, name="mha_param_count"))
            want = sum(p.numel() for p in nn.MultiheadAttention(D, H, bias=bias).parameters())
            if n != want:
                raise CheckFailed("hidden test: mha_param_count is wrong",
                                  details=[f"case: d_model={D}, bias={bias}: {n!r}, expected {want}"])
    D = _sizes(g)[2]
    if as_int(call(mha_param_count, D, name="mha_param_count")) != 4 * D * D + 4 * D:
        raise CheckFailed("hidden test: mha_param_count(d_model) counts the biases by default (bias=True)",
                          details=[f"case: d_model={D}"])
    n = as_int(call(mha_param_count, 12288, bias=False, name="mha_param_count"))
    if n != 4 * 12288 ** 2:
        raise CheckFailed("hidden test: mha_param_count(12288, bias=False) is wrong (GPT-3 width)")


def from_torch(from_torch, MultiHeadAttention=None) -> None:
    own_code(from_torch, "from_torch")
    g = rng(510)
    for i in range(4):
        B, T, D, H = _sizes(g)
        bias = i != 3
        ref = random_torch_mha(D, H, bias=bias, seed=90 + i)
        m = call(from_torch, ref, name="from_torch")
        if not A.is_module(m):
            raise CheckFailed("hidden test: from_torch did not return a module")
        if MultiHeadAttention is not None and not A.instance_of(m, MultiHeadAttention):
            raise CheckFailed("hidden test: from_torch must return your MultiHeadAttention")
        S = T + randint(g, 1, 4)
        x, kv = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
        for kv_ in (None, kv):
            out = _forward(m, x, kv_)
            want, _ = torch_reference(ref, x, kv_)
            if not close(out, want):
                fail_values("from_torch(ref)(x)", out, want,
                            f"B={B}, T={T}, S={S if kv_ is not None else T}, D={D}, H={H}, bias={bias}", TOL)


guard(globals())  # every check records warnings instead of printing them (core.guard)
