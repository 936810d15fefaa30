"""Hidden checks for exercise 06: randomized shapes and values, independent oracles.

Oracles: an explicit double loop over math.sin/math.cos for the position table;
``nn.LayerNorm`` with copied weights; ``nn.Linear``/``F.relu`` on the student's own weights for
the feed-forward network; ``nn.TransformerEncoderLayer`` with copied weights for the block: the
layer's weights are copied *into* the block's own sub-modules ``attn``, ``ff``, ``ln1``, ``ln2``
(in place, so a block that reaches them through wrapper modules is graded the same), and each
of those sub-modules is made to compute the reference function of its kind from those weights,
so this grades the block's wiring, not the earlier answers again; parameters counted from
``nn.Linear``/``nn.LayerNorm`` modules. Seeds are fixed. Written against ``_adapter`` so the
same checks run inside the kernel and outside it (``verdict.py``).
Tolerance: atol 1e-5 + rtol 1e-4 (float32), 1e-5 for the equivalence with PyTorch's layers.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook.checks.ex06 import layer_norm_builtins, randomize_

from . import _adapter as A
from ._adapter import forbid
from ._base import guard, CheckFailed, as_int, call, close, fail_values, own_code, randint, rng

TOL = "atol 1e-5 + rtol 1e-4"
TORCH_TOL = "atol 1e-5 + rtol 1e-5"


def _new(cls, *args, name, **kwargs):
    obj = A.new(cls, *args, name=name, **kwargs)
    if not A.is_module(obj):
        raise CheckFailed(f"hidden test: {name}(...) is not an nn.Module")
    return obj


# ----------------------------------------------------------------------------------------
def _pe_oracle(T, d):
    rows = []
    for t in range(T):
        row = []
        for k in range(d):
            freq = 1.0 / (10000.0 ** ((k - k % 2) / d))
            row.append(math.sin(t * freq) if k % 2 == 0 else math.cos(t * freq))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)


def sinusoidal_shape(sinusoidal_positions) -> None:
    own_code(sinusoidal_positions, "sinusoidal_positions")
    g = rng(601)
    for _ in range(5):
        T, d = randint(g, 1, 40), 2 * randint(g, 1, 24)
        pe = call(sinusoidal_positions, T, d, name="sinusoidal_positions")
        if not isinstance(pe, torch.Tensor) or tuple(pe.shape) != (T, d) or not pe.is_floating_point():
            raise CheckFailed(
                f"hidden test: sinusoidal_positions({T}, {d}) should be a float tensor of shape ({T}, {d})",
                details=[f"got {type(pe).__name__} {tuple(getattr(pe, 'shape', ()))}"],
            )


def sinusoidal_values(sinusoidal_positions) -> None:
    g = rng(602)
    for T, d in [(randint(g, 20, 80), 2 * randint(g, 2, 32)) for _ in range(4)] + [(50, 512)]:
        pe = call(sinusoidal_positions, T, d, name="sinusoidal_positions")
        want = _pe_oracle(T, d)
        if not isinstance(pe, torch.Tensor) or not close(pe.float(), want, atol=1e-4, rtol=1e-4):
            fail_values(f"sinusoidal_positions({T}, {d})", pe if isinstance(pe, torch.Tensor) else torch.zeros(0),
                        want, f"T={T}, d_model={d}", "atol 1e-4 + rtol 1e-4")


# ----------------------------------------------------------------------------------------
def _ln_pair(LayerNorm, d, eps, g):
    ours = _new(LayerNorm, d, eps=eps, name="LayerNorm")
    ref = nn.LayerNorm(d, eps=eps)
    with torch.no_grad():
        ref.weight.copy_(1 + 0.5 * torch.randn(d, generator=g))
        ref.bias.copy_(0.5 * torch.randn(d, generator=g))
    w, b = A.get(ours, "weight", None), A.get(ours, "bias", None)
    if not isinstance(w, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise CheckFailed("hidden test: LayerNorm has no `weight` / `bias` tensors")
    try:
        A.load(ours, {"weight": ref.weight.detach(), "bias": ref.bias.detach()})
    except A.LoadError as e:
        raise CheckFailed(f"hidden test: cannot load LayerNorm({d}) weights: {e}") from None
    return ours, ref


def _ln_call(ln, x):
    with forbid(layer_norm_builtins(), "F.layer_norm / nn.LayerNorm are off limits inside LayerNorm"):
        out = call(ln, x, name="LayerNorm.forward")
    if not isinstance(out, torch.Tensor):
        raise CheckFailed("hidden test: LayerNorm.forward did not return a tensor")
    return out


def layernorm_params(LayerNorm) -> None:
    own_code(LayerNorm, "LayerNorm")
    g = rng(603)
    for _ in range(3):
        d = randint(g, 1, 64)
        eps = [1e-5, 1e-6, 1e-3][randint(g, 0, 2)]
        ln = _new(LayerNorm, d, eps=eps, name="LayerNorm")
        params = A.params(ln)
        if set(params) != {"weight", "bias"} or any(tuple(p.shape) != (d,) for p in params.values()):
            raise CheckFailed(
                f"hidden test: LayerNorm({d}) should have exactly the parameters weight and bias of shape ({d},)",
                details=[f"got {[(n, tuple(p.shape)) for n, p in params.items()]}"],
            )
        if not (
            torch.equal(params["weight"].detach(), torch.ones(d))
            and torch.equal(params["bias"].detach(), torch.zeros(d))
        ):
            raise CheckFailed("hidden test: LayerNorm should start at weight = 1, bias = 0")
        if A.get(ln, "eps", None) != eps:
            raise CheckFailed(f"hidden test: LayerNorm({d}, eps={eps}) does not keep eps in self.eps")


def layernorm_values(LayerNorm) -> None:
    g = rng(604)
    for _ in range(5):
        lead = tuple(randint(g, 1, 5) for _ in range(randint(g, 1, 3)))
        d = randint(g, 2, 48)
        ours, ref = _ln_pair(LayerNorm, d, 1e-5, g)
        x = torch.randn(lead + (d,), generator=g) * (0.5 + 4 * torch.rand(1, generator=g)) + 2 * torch.randn(
            1, generator=g
        )
        out = _ln_call(ours, x)
        with torch.no_grad():
            want = ref(x)
        if not close(out, want):
            fail_values(
                "LayerNorm(x) vs nn.LayerNorm with the same weights", out, want, f"x of shape {tuple(x.shape)}", TOL
            )


def layernorm_eps(LayerNorm) -> None:
    g = rng(605)
    for eps in (1e-5, 1e-3):
        d = randint(g, 4, 32)
        ours, ref = _ln_pair(LayerNorm, d, eps, g)
        x = 3 + math.sqrt(eps) * torch.randn(4, d, generator=g)     # variance comparable to eps
        x[0] = -1.5                                                  # variance exactly 0
        out = _ln_call(ours, x)
        with torch.no_grad():
            want = ref(x)
        if not bool(torch.isfinite(out).all()) or not close(out, want, atol=1e-4, rtol=1e-4):
            fail_values(f"LayerNorm(eps={eps}) of tokens with variance ~eps and 0", out, want,
                        f"x of shape {tuple(x.shape)}", "atol 1e-4 + rtol 1e-4")


# ----------------------------------------------------------------------------------------
def _two_linears(ff):
    """describe() entries of the two nn.Linear sub-modules, in order."""
    lins = [m for m in A.describe(ff) if m["kind"] == "Linear"]
    if len(lins) != 2:
        raise CheckFailed(f"hidden test: FeedForward should contain two nn.Linear layers, found {len(lins)}")
    return lins


def feedforward_structure(FeedForward) -> None:
    own_code(FeedForward, "FeedForward")
    g = rng(606)
    for _ in range(3):
        D, d_ff = randint(g, 2, 40), randint(g, 2, 90)
        p = [0.0, 0.1, 0.25][randint(g, 0, 2)]
        ff = _new(FeedForward, D, d_ff, p, name="FeedForward")
        l1, l2 = _two_linears(ff)
        if (l1["in_features"], l1["out_features"], l2["in_features"], l2["out_features"]) != (D, d_ff, d_ff, D):
            raise CheckFailed(f"hidden test: FeedForward({D}, {d_ff}) should map {D} -> {d_ff} -> {D}")
        n = sum(q.numel() for q in A.params(ff).values())
        if n != 2 * D * d_ff + d_ff + D:
            raise CheckFailed(
                f"hidden test: FeedForward({D}, {d_ff}) has {n} parameters, expected {2 * D * d_ff + d_ff + D}"
            )
        if p and not any(m["kind"] == "Dropout" and abs(m["p"] - p) < 1e-12 for m in A.describe(ff)):
            raise CheckFailed(f"hidden test: FeedForward(..., dropout={p}) has no nn.Dropout({p})")
        # train mode, p = 1: dropout on the output gives 0; right after the ReLU (accepted), linear2's bias
        ff = A.train(_new(FeedForward, D, d_ff, 1.0, name="FeedForward"), True)
        _, l2 = _two_linears(ff)
        b2 = A.params(ff).get(f"{l2['path']}.bias")
        x = torch.randn(randint(g, 1, 3), randint(g, 1, 6), D, generator=g)
        with torch.no_grad():
            out = call(ff, x, name="FeedForward.forward")
        accepted = [torch.zeros_like(x)] + ([b2.detach().expand(x.shape)] if isinstance(b2, torch.Tensor) else [])
        if not isinstance(out, torch.Tensor) or not any(close(out, a) for a in accepted):
            raise CheckFailed(f"hidden test: FeedForward({D}, {d_ff}, dropout=1.0) in train mode should give 0 "
                              "(dropout on the output) or linear2's bias (dropout right after the ReLU)")
        ff = _new(FeedForward, D, d_ff, name="FeedForward")          # dropout=0.0 by default: train == eval
        with torch.no_grad():
            a = call(A.train(ff, True), x, name="FeedForward.forward")
            b = call(A.train(ff, False), x, name="FeedForward.forward")
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or not close(a, b):
            raise CheckFailed(f"hidden test: FeedForward({D}, {d_ff}) without a dropout argument drops values in "
                              "train mode (the default is dropout=0.0)")


def feedforward_values(FeedForward) -> None:
    g = rng(607)
    for _ in range(4):
        D, d_ff = randint(g, 2, 40), randint(g, 2, 90)
        ff = A.train(_new(FeedForward, D, d_ff, name="FeedForward"), False)
        l1, l2 = _two_linears(ff)
        w = A.params(ff)
        if not all(f"{l['path']}.bias" in w for l in (l1, l2)):
            raise CheckFailed("hidden test: FeedForward's nn.Linear layers need biases")
        w1, b1, w2, b2 = (w[f"{l['path']}.{n}"].double() for l in (l1, l2) for n in ("weight", "bias"))
        x = torch.randn(randint(g, 1, 4), randint(g, 1, 9), D, generator=g)
        out = call(ff, x, name="FeedForward.forward")
        with torch.no_grad():
            h = (x.double() @ w1.T + b1).clamp_min(0)
            want = (h @ w2.T + b2).float()
        if not isinstance(out, torch.Tensor) or not close(out, want):
            fail_values("FeedForward(x)", out if isinstance(out, torch.Tensor) else torch.zeros(0), want,
                        f"D={D}, d_ff={d_ff}, x {tuple(x.shape)}", TOL)


# ----------------------------------------------------------------------------------------
def load_reference_parts(block, parts: dict, what: str) -> None:
    """Copy a PyTorch layer's weights INTO the block's own sub-modules, in place, and make each
    of them compute the reference function of its kind from those weights (``_adapter.standin``).
    The objects stay the ones the block holds, so a block that reaches ``block.attn`` through a
    wrapper module (a residual sub-layer, a ModuleList) computes with the same weights.
    ``parts``: {attribute: (kind, torch module)} with kind "mha" | "feed_forward" | "layer_norm"."""
    values, standins = {}, []
    for attr, (kind, theirs) in parts.items():
        if kind == "mha":
            values.update({f"{attr}.W_qkv.weight": theirs.in_proj_weight, f"{attr}.W_qkv.bias": theirs.in_proj_bias,
                           f"{attr}.W_o.weight": theirs.out_proj.weight, f"{attr}.W_o.bias": theirs.out_proj.bias})
            standins.append((attr, kind, theirs.num_heads))
        elif kind == "feed_forward":
            lins = [m for m in A.describe(block, attr) if m["kind"] == "Linear"]
            if len(lins) != 2:
                raise CheckFailed(f"hidden test: {what}.{attr} should contain two nn.Linear layers, found {len(lins)}")
            for mine, lin in zip(lins, theirs):
                values.update({f"{mine['path']}.weight": lin.weight, f"{mine['path']}.bias": lin.bias})
            standins.append((attr, kind))
        else:
            values.update({f"{attr}.weight": theirs.weight, f"{attr}.bias": theirs.bias})
            standins.append((attr, kind, float(theirs.eps)))
    try:
        A.load(block, {k: v.detach() for k, v in values.items()})
        for attr, kind, *options in standins:
            A.standin(block, attr, kind, *options)
    except A.LoadError as e:
        raise CheckFailed(f"hidden test: cannot load the reference weights into the {what}'s own sub-modules",
                          hint="keep the sub-modules the exercise names (multi-head attention with W_qkv and W_o, "
                               "a feed-forward with two nn.Linear, LayerNorms with weight and bias)",
                          details=[str(e)[:200]]) from None


def _load_encoder_layer(block, layer):
    load_reference_parts(
        block,
        {
            "attn": ("mha", layer.self_attn),
            "ff": ("feed_forward", (layer.linear1, layer.linear2)),
            "ln1": ("layer_norm", layer.norm1),
            "ln2": ("layer_norm", layer.norm2),
        },
        "TransformerBlock",
    )


def _block_vs_torch(cls, pre_ln, seed, with_mask, is_causal=False):
    own_code(cls, "TransformerBlock")
    g = rng(seed)
    for case in range(3):
        H = randint(g, 1, 4)
        D, d_ff = H * randint(g, 2, 8), randint(g, 4, 48)
        B, T = randint(g, 1, 3), randint(g, 2, 9)
        layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout=0.0, batch_first=True, norm_first=pre_ln)
        randomize_(layer, seed + case)
        layer.eval()
        block = _new(cls, D, H, d_ff, pre_ln=pre_ln, name="TransformerBlock")
        for attr in ("attn", "ff", "ln1", "ln2"):
            if not A.has(block, attr):
                raise CheckFailed(f"hidden test: TransformerBlock has no attribute `{attr}`")
        _load_encoder_layer(block, layer)
        A.train(block, False)
        x = torch.randn(B, T, D, generator=g)
        keep = torch.ones(B, T, dtype=torch.bool)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        if with_mask:
            lengths = torch.randint(1, T + 1, (B,), generator=g)
            keep = torch.arange(T)[None, :] < lengths[:, None]
            if is_causal:  # holes anywhere (key 0 kept): trailing padding alone never shows under causal
                keep = torch.rand(B, T, generator=g) < 0.6
                keep[:, 0] = True
        padding = keep[:, None, None, :] if with_mask else None          # (B, 1, 1, T)
        if is_causal:   # the block builds the causal part itself; a padding mask, if any, is passed
            call_kwargs = {"mask": padding, "is_causal": True}
        else:
            call_kwargs = {"mask": padding & causal if with_mask else None}  # (B, 1, T, T)
        kwargs = {"src_mask": ~causal} if with_mask or is_causal else {}
        if with_mask:
            kwargs["src_key_padding_mask"] = ~keep
        with torch.no_grad():
            want = layer(x, **kwargs)
            out = call(block, x, **call_kwargs, name="TransformerBlock.forward")
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want.shape):
            fail_values("TransformerBlock(x)", out if isinstance(out, torch.Tensor) else torch.zeros(0), want,
                        f"B={B}, T={T}, D={D}, H={H}", TORCH_TOL)
        rows = keep                                                        # every row without a mask
        if not close(out[rows], want[rows], atol=1e-5, rtol=1e-5):
            fail_values(f"TransformerBlock(pre_ln={pre_ln}) vs nn.TransformerEncoderLayer(norm_first={pre_ln})",
                        out[rows], want[rows],
                        f"B={B}, T={T}, D={D}, H={H}, d_ff={d_ff}, mask={'causal+padding' if with_mask else 'None'}"
                        f"{', is_causal=True' if is_causal else ''}",
                        TORCH_TOL)


def _block_dropout(cls, pre_ln, seed):
    """Train mode with dropout=1.0: every dropped value is 0. The attention's output must be dropped
    before the residual add (pre-LN: the stream keeps x; post-LN: ln1(x)); the feed-forward (made to
    compute Linear-ReLU-Linear from the layer's weights) adds its output, or nothing when the block
    drops that sub-layer's output too (the Annotated Transformer's wiring)."""
    g = rng(seed)
    for case in range(2):
        H = randint(g, 1, 4)
        D, d_ff = H * randint(g, 2, 8), randint(g, 4, 48)
        B, T = randint(g, 1, 3), randint(g, 2, 9)
        layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout=0.0, batch_first=True, norm_first=pre_ln)
        randomize_(layer, seed + case)
        block = _new(cls, D, H, d_ff, dropout=1.0, pre_ln=pre_ln, name="TransformerBlock")
        _load_encoder_layer(block, layer)
        A.train(block, True)
        x = torch.randn(B, T, D, generator=g)
        with torch.no_grad():
            out = call(block, x, name="TransformerBlock.forward")
            ff = lambda h: layer.linear2(F.relu(layer.linear1(h)))
            if pre_ln:
                accepted = [x + ff(layer.norm2(x)), x]
            else:
                h = layer.norm1(x)
                accepted = [layer.norm2(h + ff(h)), layer.norm2(h)]
        if not isinstance(out, torch.Tensor) or not any(close(out, a) for a in accepted):
            fail_values(f"TransformerBlock(pre_ln={pre_ln}, dropout=1.0) in train mode (dropout on each sub-layer's "
                        "output, before the residual add)", out if isinstance(out, torch.Tensor) else torch.zeros(0),
                        accepted[0], f"B={B}, T={T}, D={D}, H={H}, d_ff={d_ff}", TOL)


def _block_defaults(cls, seed):
    """TransformerBlock(d_model, n_heads, d_ff), in train mode, equals nn.TransformerEncoderLayer(norm_first=True)
    in eval mode with the same weights: pre-LN and no dropout by default."""
    g = rng(seed)
    H = randint(g, 1, 4)
    D, d_ff, B, T = H * randint(g, 2, 8), randint(g, 4, 48), randint(g, 1, 3), randint(g, 2, 9)
    layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout=0.0, batch_first=True, norm_first=True)
    randomize_(layer, seed)
    layer.eval()
    block = _new(cls, D, H, d_ff, name="TransformerBlock")
    _load_encoder_layer(block, layer)
    A.train(block, True)
    x = torch.randn(B, T, D, generator=g)
    with torch.no_grad():
        want = layer(x)
        out = call(block, x, name="TransformerBlock.forward")
    if not isinstance(out, torch.Tensor) or not close(out, want, atol=1e-5, rtol=1e-5):
        fail_values(
            "TransformerBlock(d_model, n_heads, d_ff) (defaults: pre_ln=True, dropout=0.0) in train mode vs "
            "nn.TransformerEncoderLayer(norm_first=True)",
            out if isinstance(out, torch.Tensor) else torch.zeros(0),
            want,
            f"B={B}, T={T}, D={D}, H={H}, d_ff={d_ff}",
            TORCH_TOL,
        )


def block_pre_ln(TransformerBlock) -> None:
    _block_vs_torch(TransformerBlock, True, 610, with_mask=False)
    _block_dropout(TransformerBlock, True, 615)
    _block_defaults(TransformerBlock, 617)


def block_post_ln(TransformerBlock) -> None:
    _block_vs_torch(TransformerBlock, False, 620, with_mask=False)
    _block_dropout(TransformerBlock, False, 625)


def block_mask(TransformerBlock) -> None:
    _block_vs_torch(TransformerBlock, True, 630, with_mask=True)
    _block_vs_torch(TransformerBlock, False, 640, with_mask=True)
    _block_vs_torch(TransformerBlock, True, 650, with_mask=False, is_causal=True)
    _block_vs_torch(TransformerBlock, False, 660, with_mask=True, is_causal=True)


# ----------------------------------------------------------------------------------------
def block_param_count(block_param_count) -> None:
    own_code(block_param_count, "block_param_count")
    g = rng(650)
    cases = [(randint(g, 1, 300), randint(g, 1, 900), bool(randint(g, 0, 1))) for _ in range(6)]
    cases += [(768, 3072, True), (12288, 49152, True), (1024, 4096, False)]
    for D, d_ff, bias in cases:
        mods = [nn.Linear(D, 3 * D, bias=bias), nn.Linear(D, D, bias=bias), nn.Linear(D, d_ff, bias=bias),
                nn.Linear(d_ff, D, bias=bias), nn.LayerNorm(D), nn.LayerNorm(D)] if D * d_ff < 2_000_000 else None
        if mods is not None:
            want = sum(p.numel() for m in mods for p in m.parameters())
        else:  # too large to allocate: count weight shapes without building tensors
            shapes = [(3 * D, D), (D, D), (d_ff, D), (D, d_ff)]
            want = sum(o * i + (o if bias else 0) for o, i in shapes) + 4 * D
        got = as_int(call(block_param_count, D, d_ff, bias=bias, name="block_param_count"))
        if got != want:
            raise CheckFailed(f"hidden test: block_param_count({D}, {d_ff}, bias={bias}) = {got}, expected {want}")
    D, d_ff = randint(g, 1, 300), randint(g, 1, 900)                   # bias=True by default
    want = 4 * D * D + 2 * D * d_ff + 4 * D + d_ff + D + 4 * D
    if as_int(call(block_param_count, D, d_ff, name="block_param_count")) != want:
        raise CheckFailed(f"hidden test: block_param_count({D}, {d_ff}) should count the biases (bias=True by default)")


# ----------------------------------------------------------------------------------------
def _loader(fn, norm_first, seed):
    own_code(fn, "from_torch_encoder_layer")
    g = rng(seed)
    for case in range(3):
        H = randint(g, 1, 4)
        D, d_ff = H * randint(g, 2, 8), randint(g, 4, 48)
        layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first)
        randomize_(layer, seed + case)
        layer.eval()
        block = call(fn, layer, name="from_torch_encoder_layer")
        if not A.is_module(block):
            raise CheckFailed("hidden test: from_torch_encoder_layer did not return an nn.Module")
        A.train(block, False)
        x = torch.randn(randint(g, 1, 3), randint(g, 1, 9), D, generator=g)
        with torch.no_grad():
            want = layer(x)
            out = call(block, x, name="the loaded block")
        if not isinstance(out, torch.Tensor) or not close(out, want, atol=1e-5, rtol=1e-5):
            fail_values(f"the loaded block vs nn.TransformerEncoderLayer(norm_first={norm_first})",
                        out if isinstance(out, torch.Tensor) else torch.zeros(0), want,
                        f"D={D}, H={H}, d_ff={d_ff}, x {tuple(x.shape)}", TORCH_TOL)


def from_torch_post_ln(from_torch_encoder_layer) -> None:
    _loader(from_torch_encoder_layer, False, 660)


def from_torch_pre_ln(from_torch_encoder_layer) -> None:
    _loader(from_torch_encoder_layer, True, 670)


guard(globals())  # every check records warnings instead of printing them (core.guard)
