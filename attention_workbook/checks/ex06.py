"""Visible checks for exercise 06_transformer_block.

Small, readable cases. When a result is wrong, the checks recompute what the common mistakes
would have produced (sin/cos swapped, LayerNorm over the wrong axis, residual after the norm,
...) and name the one the student's output matches.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .core import (
    guard,
    CheckFailed,
    expect_int,
    call,
    close,
    expect_close,
    expect_shape,
    expect_tensor,
    first_match,
    forbid,
    passed,
)

LECTURE = "lectures/06_transformer_block.ipynb"
SEC_FFN = f"lecture 06, section 1 'Attention only re-averages' ({LECTURE}#ffn)"
SEC_POS = f"lecture 06, section 2 'Order: position encodings' ({LECTURE}#positions)"
SEC_LN = f"lecture 06, section 4 'LayerNorm' ({LECTURE}#layernorm)"
SEC_BLOCK = f"lecture 06, section 5 'post-LN vs pre-LN' ({LECTURE}#pre-post)"
SEC_PARAMS = f"lecture 06, section 6 'Counting parameters' ({LECTURE}#params)"
SEC_TORCH = f"lecture 06, section 7 'Our block against nn.TransformerEncoderLayer' ({LECTURE}#pytorch)"

NO_BUILTIN_LN = "write LayerNorm from mean, variance and sqrt yourself: F.layer_norm / nn.LayerNorm are off limits here"


def layer_norm_builtins():
    return [(F, "layer_norm"), (torch, "layer_norm")]


# ----------------------------------------------------------------------------------------
# sinusoidal_positions
# ----------------------------------------------------------------------------------------
def _pe_loops(T: int, d: int) -> torch.Tensor:
    """The formula, one entry at a time (float64 math, then float32)."""
    pe = torch.zeros(T, d, dtype=torch.float64)
    for t in range(T):
        for i in range(d // 2):
            angle = t / 10000 ** (2 * i / d)
            pe[t, 2 * i] = math.sin(angle)
            pe[t, 2 * i + 1] = math.cos(angle)
    return pe.float()


def pe_wrong_variants(T: int, d: int) -> dict[str, torch.Tensor]:
    t = torch.arange(T, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float64)
    good = t / 10000 ** (two_i / d)

    def interleave(a, b):
        return torch.stack([a, b], dim=-1).reshape(T, d).float()

    col = torch.arange(d, dtype=torch.float64)
    per_col = t / 10000 ** (col / d)                    # exponent k/d with k the column index
    per_col_pe = torch.where(col.long() % 2 == 0, per_col.sin(), per_col.cos()).float()
    pair = t / 10000 ** (torch.arange(d // 2, dtype=torch.float64) / d)   # i/d instead of 2i/d
    return {
        "cos in the even columns and sin in the odd ones (swapped)": interleave(good.cos(), good.sin()),
        "all sines first, then all cosines (halves, not interleaved)": torch.cat([good.sin(), good.cos()], -1).float(),
        "the exponent uses the pair index i/d instead of 2i/d": interleave(pair.sin(), pair.cos()),
        "the exponent uses the column index k/d, so sin and cos of a pair get different frequencies": per_col_pe,
        "t multiplied by 10000^(2i/d) instead of divided": interleave((t * 10000 ** (two_i / d)).sin(),
                                                                      (t * 10000 ** (two_i / d)).cos()),
    }


def _student_pe(fn, T, d):
    out = call(fn, T, d, name="sinusoidal_positions", reread=SEC_POS)
    return expect_tensor(out, "sinusoidal_positions", reread=SEC_POS)


def sinusoidal_shape(sinusoidal_positions) -> None:
    """Shape (T, d_model), floating point; row 0 is [0, 1, 0, 1, ...] (sin 0, cos 0)."""
    for T, d in ((6, 8), (1, 2)):
        pe = _student_pe(sinusoidal_positions, T, d)
        expect_shape(pe, (T, d), f"sinusoidal_positions({T}, {d})", reread=SEC_POS,
                     hint="one row per position, one column per model dimension")
        if not pe.is_floating_point():
            raise CheckFailed(f"sinusoidal_positions returns dtype {pe.dtype}", hint="build it from float tensors",
                              reread=SEC_POS)
    pe = _student_pe(sinusoidal_positions, 6, 8)
    row0 = torch.tensor([0.0, 1.0] * 4)
    if not close(pe[0], row0):
        hint = ("row 0 is [1, 0, 1, 0, ...]: sine goes in the even columns (sin 0 = 0), cosine in the odd ones"
                if close(pe[0], 1 - row0) else "at t = 0 every sine is 0 and every cosine is 1")
        raise CheckFailed("sinusoidal_positions: position 0 should be [0, 1, 0, 1, ...]", hint=hint, reread=SEC_POS,
                          details=[f"your row 0: {[round(v, 3) for v in pe[0].tolist()]}"])
    passed("sinusoidal_positions: shape (T, d_model), position 0 = [sin 0, cos 0, ...]")


def sinusoidal_values(sinusoidal_positions) -> None:
    """Every entry matches PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(...)."""
    T, d = 12, 16
    pe = _student_pe(sinusoidal_positions, T, d)
    expect_shape(pe, (T, d), f"sinusoidal_positions({T}, {d})", reread=SEC_POS)
    want = _pe_loops(T, d)
    if not close(pe, want):
        name = first_match(pe.float(), pe_wrong_variants(T, d), atol=1e-2)   # large float32 angles
        hint = (f"your table equals {name}" if name else
                "compare entry by entry with the formula, e.g. PE[1, 2] should be sin(1 / 10000^(2/16))")
        expect_close(pe, want, f"sinusoidal_positions({T}, {d})", hint=hint, reread=SEC_POS)
    passed("sinusoidal_positions: every entry matches sin/cos(t / 10000^(2i/d))")


# ----------------------------------------------------------------------------------------
# LayerNorm
# ----------------------------------------------------------------------------------------
def _make(cls, *args, name, reread, **kwargs):
    obj = call(cls, *args, name=name, reread=reread, **kwargs)
    if not isinstance(obj, nn.Module):
        raise CheckFailed(f"{name}(...) is not an nn.Module", hint="subclass nn.Module and call super().__init__()",
                          reread=reread)
    return obj


def _ln_forward(ln, x):
    with forbid(layer_norm_builtins(), NO_BUILTIN_LN):
        out = call(ln, x, name="LayerNorm.forward", reread=SEC_LN)
    return expect_tensor(out, "LayerNorm.forward", reread=SEC_LN)


def ln_reference(x, weight, bias, eps):
    x64 = x.double()
    mu = x64.mean(-1, keepdim=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdim=True)
    return ((x64 - mu) / torch.sqrt(var + eps) * weight.double() + bias.double()).float()


def ln_wrong_variants(x, weight, bias, eps) -> dict[str, torch.Tensor]:
    x64, w, b = x.double(), weight.double(), bias.double()
    out = {}
    for dim, label in ((0, "the batch (dim=0)"), (-2, "the sequence (dim=-2)"))[:max(x.dim() - 1, 0)]:
        mu = x64.mean(dim, keepdim=True)
        var = x64.var(dim, keepdim=True, unbiased=False)
        out[f"statistics over {label}"] = ((x64 - mu) / torch.sqrt(var + eps) * w + b).float()
    mu = x64.mean(-1, keepdim=True)
    out["the unbiased variance (divides by d - 1)"] = (
        (x64 - mu) / torch.sqrt(x64.var(-1, keepdim=True, unbiased=True) + eps) * w + b).float()
    sd = x64.var(-1, keepdim=True, unbiased=False).sqrt()
    out["eps added outside the square root"] = ((x64 - mu) / (sd + eps) * w + b).float()
    out["no eps at all"] = ((x64 - mu) / sd * w + b).float()
    out["no gain and bias applied"] = ((x64 - mu) / torch.sqrt(sd ** 2 + eps)).float()
    out["the standard deviation instead of the variance under the sqrt"] = (
        (x64 - mu) / torch.sqrt(sd + eps) * w + b
    ).float()
    return out


def _ln_hint(name):
    if name is None:
        return None
    if "statistics over" in name:
        return (
            f"your output equals LayerNorm with {name}: take mean and variance over the features, dim=-1, keepdim=True"
        )
    if "unbiased" in name:
        return "you used the unbiased variance: pass unbiased=False (or correction=0), LayerNorm divides by d"
    if "eps" in name:
        return f"your output equals {name}: eps goes inside the square root, sqrt(var + eps)"
    return f"your output equals {name}"


def _ln_params(ln):
    w, b = getattr(ln, "weight", None), getattr(ln, "bias", None)
    if not isinstance(w, nn.Parameter) or not isinstance(b, nn.Parameter):
        raise CheckFailed("LayerNorm needs attributes `weight` and `bias` that are nn.Parameter",
                          hint="wrap the gain and the bias, each of shape (d,), in nn.Parameter (plain tensors are "
                               "not trained and not copied by load_state_dict)", reread=SEC_LN)
    return w, b


def layernorm_params(LayerNorm) -> None:
    """weight (ones) and bias (zeros) are nn.Parameters of shape (d,); eps is stored (default 1e-5)."""
    ln = _make(LayerNorm, 6, name="LayerNorm", reread=SEC_LN)
    w, b = _ln_params(ln)
    expect_shape(w, (6,), "LayerNorm(6).weight", reread=SEC_LN)
    expect_shape(b, (6,), "LayerNorm(6).bias", reread=SEC_LN)
    if not (torch.equal(w.detach(), torch.ones(6)) and torch.equal(b.detach(), torch.zeros(6))):
        raise CheckFailed("LayerNorm should start with weight = ones and bias = zeros",
                          hint="at initialisation LayerNorm is a plain standardisation", reread=SEC_LN)
    n = sum(p.numel() for p in ln.parameters())
    if n != 12:
        raise CheckFailed(f"LayerNorm(6) has {n} parameters, expected 12 (gain and bias)", reread=SEC_LN)
    if getattr(ln, "eps", None) != 1e-5 or getattr(_make(LayerNorm, 6, eps=1e-3, name="LayerNorm", reread=SEC_LN),
                                                    "eps", None) != 1e-3:
        raise CheckFailed("LayerNorm should keep its eps argument in self.eps (default 1e-5)", reread=SEC_LN)
    passed("LayerNorm: weight (ones) and bias (zeros) are parameters of shape (d,), eps stored")


def _random_ln(LayerNorm, d, eps=1e-5, seed=0):
    ln = _make(LayerNorm, d, eps=eps, name="LayerNorm", reread=SEC_LN)
    w, b = _ln_params(ln)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w.copy_(1 + 0.5 * torch.randn(d, generator=g))
        b.copy_(0.5 * torch.randn(d, generator=g))
    return ln, w.detach().clone(), b.detach().clone()


def layernorm_values(LayerNorm) -> None:
    """Matches the formula on (B, T, d), (B, H, T, d) and (d,) inputs with random gain and bias."""
    ln, w, b = _random_ln(LayerNorm, 8)
    g = torch.Generator().manual_seed(1)
    for shape in ((3, 4, 8), (2, 2, 3, 8), (8,)):       # x is (..., d): any number of leading axes
        x = torch.randn(shape, generator=g) * 3 + 1
        inputs = f"x of shape {shape}, random weight and bias"
        out = _ln_forward(ln, x)
        expect_shape(out, x.shape, "LayerNorm(x)", reread=SEC_LN, inputs=inputs)
        want = ln_reference(x, w, b, 1e-5)
        if not close(out, want):
            hint = _ln_hint(first_match(out.float(), ln_wrong_variants(x, w, b, 1e-5), atol=1e-5))
            expect_close(
                out,
                want,
                "LayerNorm(x)",
                hint=hint or "mean and biased variance over dim=-1, then * weight + bias",
                reread=SEC_LN,
                inputs=inputs,
            )
    passed("LayerNorm: per-token mean and biased variance over the features, gain and bias applied (any leading axes)")


def layernorm_eps(LayerNorm) -> None:
    """eps inside the sqrt: a token with a tiny variance, and a constant token (variance 0)."""
    ln, w, b = _random_ln(LayerNorm, 8, eps=1e-5)
    g = torch.Generator().manual_seed(2)
    x = 1 + 1e-3 * torch.randn(2, 8, generator=g)       # variance ~1e-6, comparable to eps
    x[1] = 2.0                                          # a constant token: variance exactly 0
    out = _ln_forward(ln, x)
    if not bool(torch.isfinite(out).all()):
        raise CheckFailed("LayerNorm of a constant token (variance 0) gives inf or nan",
                          hint="add eps to the variance before the square root: sqrt(var + eps)", reread=SEC_LN)
    want = ln_reference(x, w, b, 1e-5)
    if not close(out, want, atol=1e-4, rtol=1e-4):
        hint = _ln_hint(first_match(out.float(), ln_wrong_variants(x, w, b, 1e-5), atol=1e-4))
        expect_close(out, want, "LayerNorm of a token with variance ~1e-6 (eps = 1e-5 matters here)",
                     hint=hint or "eps goes inside the square root: (x - mean) / sqrt(var + eps)",
                     reread=SEC_LN, atol=1e-4, rtol=1e-4)
    ln, w, b = _random_ln(LayerNorm, 8, eps=1e-3, seed=1)   # a non-default eps must be used, not 1e-5
    x = 1 + 0.03 * torch.randn(2, 8, generator=g)            # variance ~1e-3, comparable to eps
    out = _ln_forward(ln, x)
    want = ln_reference(x, w, b, 1e-3)
    if not close(out, want, atol=1e-4, rtol=1e-4):
        hint = ("your LayerNorm ignores its eps argument (it uses 1e-5): keep eps in self.eps and use it"
                if close(out, ln_reference(x, w, b, 1e-5), atol=1e-4, rtol=1e-4) else
                _ln_hint(first_match(out.float(), ln_wrong_variants(x, w, b, 1e-3), atol=1e-4)))
        expect_close(out, want, "LayerNorm(8, eps=1e-3) of a token with variance ~1e-3", hint=hint, reread=SEC_LN,
                     atol=1e-4, rtol=1e-4)
    passed("LayerNorm: eps inside the square root (tiny and zero variance handled, eps argument used)")


# ----------------------------------------------------------------------------------------
# FeedForward
# ----------------------------------------------------------------------------------------
def _linears(module, name, reread):
    lins = [m for m in module.modules() if isinstance(m, nn.Linear)]
    if len(lins) != 2:
        raise CheckFailed(f"{name} should contain exactly two nn.Linear layers, found {len(lins)}",
                          hint="Linear(d_model, d_ff), ReLU, Linear(d_ff, d_model), Dropout", reread=reread)
    return lins


def feedforward_structure(FeedForward) -> None:
    """Two linear layers d_model -> d_ff -> d_model with biases, a Dropout(p), shape kept."""
    ff = _make(FeedForward, 8, 20, name="FeedForward", reread=SEC_FFN)    # d_ff = 20, not the usual 4 * d_model
    l1, l2 = _linears(ff, "FeedForward(8, 20)", SEC_FFN)
    if (l1.in_features, l1.out_features, l2.in_features, l2.out_features) != (8, 20, 20, 8):
        raise CheckFailed(
            "FeedForward(8, 20): the linear layers should be 8 -> 20 and 20 -> 8",
            details=[f"yours: {l1.in_features} -> {l1.out_features} and {l2.in_features} -> {l2.out_features}"],
            hint="the hidden width is the d_ff argument (often, but not always, 4 * d_model): "
            "expand to d_ff, then project back",
            reread=SEC_FFN,
        )
    if l1.bias is None or l2.bias is None:
        raise CheckFailed("FeedForward's linear layers should have biases", reread=SEC_FFN)
    x = torch.randn(2, 5, 8)
    out = expect_tensor(call(ff.eval(), x, name="FeedForward.forward", reread=SEC_FFN), "FeedForward.forward")
    expect_shape(out, (2, 5, 8), "FeedForward(x)", reread=SEC_FFN, inputs="x of shape (2, 5, 8)")
    ff2 = _make(FeedForward, 8, 20, 0.3, name="FeedForward", reread=SEC_FFN)
    if not any(isinstance(m, nn.Dropout) and abs(m.p - 0.3) < 1e-9 for m in ff2.modules()):
        raise CheckFailed("FeedForward(8, 20, dropout=0.3) has no nn.Dropout(0.3)",
                          hint="end the network with nn.Dropout(dropout)", reread=SEC_FFN)
    ffn_dropout_placement(FeedForward, 8, 20, torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(4)))
    ff = _make(FeedForward, 8, 20, name="FeedForward", reread=SEC_FFN)
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        a = expect_tensor(call(ff.train(), x, name="FeedForward.forward", reread=SEC_FFN), "FeedForward.forward")
        b = expect_tensor(call(ff.eval(), x, name="FeedForward.forward", reread=SEC_FFN), "FeedForward.forward")
    if not close(a, b):
        raise CheckFailed("FeedForward(8, 20), built without a dropout argument, drops values in train mode",
                          hint=DEFAULT_DROPOUT, reread=SEC_FFN)
    passed("FeedForward: Linear 8 -> 20, Linear 20 -> 8 with biases, Dropout(p) on the output (or after the ReLU), "
           "shape (B, T, D) kept")


DEFAULT_DROPOUT = "dropout=0.0 is the default: without a dropout argument nothing is dropped, in train mode too"
DEFAULT_PRE_LN = "pre_ln=True is the default: TransformerBlock(d_model, n_heads, d_ff) is a pre-LN block (GPT's)"


def block_defaults(cls, D=16, H=2, d_ff=32, seed=8, reread=SEC_BLOCK) -> None:
    """TransformerBlock(d_model, n_heads, d_ff) is pre-LN without dropout: in train mode it equals
    the block built with pre_ln=True, dropout=0.0 and the same weights, in eval mode."""
    torch.manual_seed(seed)
    default = _block(cls, D, H, d_ff, reread=reread)
    randomize_(default, seed)
    explicit = _block(cls, D, H, d_ff, dropout=0.0, pre_ln=True, reread=reread)
    try:
        explicit.load_state_dict(default.state_dict())
    except RuntimeError:     # a block whose structure depends on the arguments: compare what can be compared
        return
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        out = expect_tensor(
            call(default.train(), x, name="TransformerBlock.forward", reread=reread), "TransformerBlock"
        )
        want = expect_tensor(
            call(explicit.eval(), x, name="TransformerBlock.forward", reread=reread), "TransformerBlock"
        )
        if close(out, want):
            return
        post = _block(cls, D, H, d_ff, dropout=0.0, pre_ln=False, reread=reread)
        post.load_state_dict(default.state_dict())
        as_post = close(out, call(post.eval(), x, name="TransformerBlock.forward", reread=reread))
    raise CheckFailed(
        f"TransformerBlock({D}, {H}, {d_ff}), built without pre_ln and dropout arguments, is not a "
        "pre-LN block without dropout",
        hint=DEFAULT_PRE_LN if as_post else DEFAULT_DROPOUT,
        reread=reread,
    )


FFN_DROPOUT = ("the dropout goes on the network's output, after the second linear layer (the Annotated "
               "Transformer's place, right after the ReLU, is accepted too), never on its input")


def ffn_dropout_placement(FeedForward, D, d_ff, x, reread=SEC_FFN) -> None:
    """In train mode with dropout=1 every dropped value is 0, so where the dropout sits shows: at the end
    the output is 0; right after the ReLU (the Annotated Transformer's variant) it is the second
    layer's bias."""
    ff = _make(FeedForward, D, d_ff, 1.0, name="FeedForward", reread=reread)
    _, l2 = _linears(ff, f"FeedForward({D}, {d_ff})", reread)
    ff.train()
    with torch.no_grad():
        out = expect_tensor(call(ff, x, name="FeedForward.forward (train mode, dropout=1.0)", reread=reread),
                            "FeedForward.forward")
        expect_shape(out, x.shape, "FeedForward(x) in train mode", reread=reread)
        at_end, after_relu = (
            torch.zeros_like(x),
            l2.bias.expand(x.shape) if l2.bias is not None else torch.zeros_like(x),
        )
        if not (close(out, at_end) or close(out, after_relu)):
            raise CheckFailed(f"FeedForward({D}, {d_ff}, dropout=1.0) in train mode: the dropout is not on the "
                              "network's output", hint=FFN_DROPOUT, reread=reread,
                              details=["with p = 1 dropout zeroes everything it sees: at the end the output is 0, "
                                       "right after the ReLU it is the second layer's bias",
                                       f"yours: max |output| = {float(out.abs().max()):.3g}"])


def ffn_wrong_variants(x, l1, l2):
    h = F.linear(x, l1.weight, l1.bias)
    return {
        "no ReLU: two linear layers in a row (a single linear map)": F.linear(h, l2.weight, l2.bias),
        "the ReLU after the second linear layer": F.relu(F.linear(h, l2.weight, l2.bias)),
        "a ReLU after both linear layers": F.relu(F.linear(F.relu(h), l2.weight, l2.bias)),
        "GELU instead of ReLU": F.linear(F.gelu(h), l2.weight, l2.bias),
        "tanh instead of ReLU": F.linear(torch.tanh(h), l2.weight, l2.bias),
        "sigmoid instead of ReLU": F.linear(torch.sigmoid(h), l2.weight, l2.bias),
    }


def feedforward_values(FeedForward) -> None:
    """Linear, ReLU, Linear on every position with the same weights (eval mode)."""
    torch.manual_seed(3)
    ff = _make(FeedForward, 8, 32, name="FeedForward", reread=SEC_FFN).eval()
    l1, l2 = _linears(ff, "FeedForward(8, 32)", SEC_FFN)
    x = torch.randn(2, 5, 8)
    out = expect_tensor(call(ff, x, name="FeedForward.forward", reread=SEC_FFN), "FeedForward.forward")
    expect_shape(out, (2, 5, 8), "FeedForward(x)", reread=SEC_FFN)
    with torch.no_grad():
        want = F.linear(F.relu(F.linear(x, l1.weight, l1.bias)), l2.weight, l2.bias)
        cands = ffn_wrong_variants(x, l1, l2)
    if not close(out, want):
        name = first_match(out, cands)
        hint = (f"your output equals {name}: the network is Linear, ReLU, Linear" if name else
                "apply linear1, then ReLU, then linear2 (then dropout) to the last axis")
        expect_close(out, want, "FeedForward(x)", hint=hint, reread=SEC_FFN, inputs="x of shape (2, 5, 8)")
    passed("FeedForward: Linear -> ReLU -> Linear, the same weights at every position")


# ----------------------------------------------------------------------------------------
# TransformerBlock
# ----------------------------------------------------------------------------------------
def _block(cls, *args, reread=SEC_BLOCK, **kwargs):
    block = _make(cls, *args, name="TransformerBlock", reread=reread, **kwargs)
    for attr in ("attn", "ff", "ln1", "ln2"):
        if not isinstance(getattr(block, attr, None), nn.Module):
            raise CheckFailed(f"your TransformerBlock has no sub-module `{attr}`",
                              hint="use the attribute names of the exercise: self.attn, self.ff, self.ln1, self.ln2",
                              reread=reread)
    return block


def randomize_(module: nn.Module, seed: int, scale: float = 0.2) -> None:
    """Random weights everywhere (LayerNorm gains around 1), so every parameter matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            is_norm_gain = p.dim() == 1 and name.endswith("weight")
            p.copy_(1 + 0.3 * noise if is_norm_gain else scale * noise)


def block_by_parts(block, x, mask, pre_ln):
    """The block's forward computed from its own sub-modules (black boxes), the right way round."""
    attn = lambda h: block.attn(h, mask=mask)
    if pre_ln:
        h = x + attn(block.ln1(x))
        return h + block.ff(block.ln2(h))
    h = block.ln1(x + attn(x))
    return block.ln2(h + block.ff(h))


def block_wrong_variants(block, x, mask, pre_ln):
    attn = lambda h: block.attn(h, mask=mask)
    ln1, ln2, ff = block.ln1, block.ln2, block.ff
    out = {}
    if pre_ln:
        h = ln1(x) + attn(ln1(x))
        out["a residual that adds the normalised x, ln1(x) + attn(ln1(x)), instead of x + attn(ln1(x))"] = ln2(h) + ff(
            ln2(h)
        )
        out["a residual that adds the normalised x around the attention, ln1(x) + attn(ln1(x))"] = h + ff(ln2(h))
        h = ln1(x + attn(x))
        out["post-LN (the pre_ln flag is ignored)"] = ln2(h + ff(h))
        h = x + attn(ln1(x))
        out["no residual around the feed-forward network"] = ff(ln2(h))
        out["ln1 used for both sub-layers"] = h + ff(ln1(h))
        h = x + attn(x)
        out["no LayerNorm before the attention"] = h + ff(ln2(h))
        out["pre-LN but the mask is not passed to the attention"] = (lambda h: h + ff(ln2(h)))(x + block.attn(ln1(x)))
    else:
        h = x + attn(ln1(x))
        out["pre-LN (the pre_ln flag is ignored)"] = h + ff(ln2(h))
        h = ln1(x + attn(x))
        out["no residual around the feed-forward network"] = ln2(ff(h))
        out["ln1 used for both sub-layers"] = ln1(h + ff(h))
        h = ln1(x) + attn(ln1(x))
        out["a residual that adds the normalised x"] = ln2(h) + ff(ln2(h))
    return out


def _block_hint(name, pre_ln):
    if name is None:
        return ("pre-LN: x = x + drop(attn(ln1(x), mask=mask)); x = x + ff(ln2(x))" if pre_ln else
                "post-LN: x = ln1(x + drop(attn(x, mask=mask))); x = ln2(x + ff(x))")
    if "adds the normalised" in name:
        return f"your block computes {name}: the residual added after the norm; keep the stream x un-normalised"
    if "flag is ignored" in name:
        return f"your block computes {name}: branch on self.pre_ln"
    if "mask" in name:
        return "your block ignores the mask: pass mask on to self.attn(..., mask=mask)"
    return f"your block computes {name}"


def _check_heads(cls, pre_ln, reread=SEC_BLOCK):
    """The attention is built with the n_heads the block is given, for several values (not a fixed number)."""
    for n_heads in (1, 2, 8):
        block = _block(cls, 16, n_heads, 32, pre_ln=pre_ln)
        got = getattr(block.attn, "n_heads", n_heads)
        if isinstance(got, int) and got != n_heads:
            raise CheckFailed(f"TransformerBlock(16, n_heads={n_heads}, ...) built its attention with {got} heads",
                              reread=reread,
                              hint="pass the block's n_heads argument on to MultiHeadAttention, do not fix the number")


def _check_ff_width(block, D, d_ff, reread=SEC_BLOCK):
    """The block's feed-forward has the hidden width d_ff the block is given (32 here, not the usual
    4 * d_model): the grader loads weights of exactly these sizes into the block's own sub-modules."""
    n = sum(p.numel() for p in block.ff.parameters())
    want = 2 * D * d_ff + d_ff + D
    if n != want:
        raise CheckFailed(f"TransformerBlock(d_model={D}, n_heads, d_ff={d_ff}): its feed-forward has {n:,} "
                          f"parameters, expected {want:,} (Linear {D} -> {d_ff} and {d_ff} -> {D}, with biases)",
                          hint="the feed-forward's hidden width is the d_ff argument, whatever d_model is: "
                               "see FeedForward's own check",
                          reread=reread)


def _check_block(cls, pre_ln, mask_kind=None, seed=0, n_heads=4):
    torch.manual_seed(seed)
    _check_heads(cls, pre_ln)
    block = _block(cls, 16, n_heads, 32, pre_ln=pre_ln).eval()
    _check_ff_width(block, 16, 32)
    randomize_(block, seed)
    x = torch.randn(2, 5, 16)
    mask = None
    pad = torch.tensor([[True] * 5, [True, True, True, False, False]])
    if mask_kind == "causal":
        mask = torch.ones(5, 5, dtype=torch.bool).tril()
    elif mask_kind == "padding":
        mask = pad[:, None, None, :]                                        # (B, 1, 1, T)
    elif mask_kind == "causal+padding":
        mask = pad[:, None, None, :] & torch.ones(5, 5, dtype=torch.bool).tril()   # (B, 1, T, T)
    out = expect_tensor(call(block, x, mask=mask, name="TransformerBlock.forward", reread=SEC_BLOCK),
                        "TransformerBlock.forward")
    expect_shape(out, x.shape, "TransformerBlock(x)", reread=SEC_BLOCK, inputs="x of shape (2, 5, 16)")
    with torch.no_grad():
        want = block_by_parts(block, x, mask, pre_ln)
        if not close(out, want):
            name = first_match(out, block_wrong_variants(block, x, mask, pre_ln))
            expect_close(out, want, f"TransformerBlock(pre_ln={pre_ln})(x{', mask' if mask is not None else ''})",
                         hint=_block_hint(name, pre_ln), reread=SEC_BLOCK,
                         inputs=f"x of shape (2, 5, 16), mask: {mask_kind or 'None'}, random weights")
    return block, x, out


BLOCK_DROPOUT = ("dropout goes on each sub-layer's output, before the residual add: x + drop(sublayer(...)); "
                 "never on the residual stream, the LayerNorm's output or the sub-layer's input")


def block_dropout_variants(block, x, pre_ln):
    """What the block gives in train mode with dropout=1 (every dropped value 0) under the common
    misplacements; the attention, LayerNorms and feed-forward are the block's own (black boxes)."""
    attn, ln1, ln2, ff = (lambda h: block.attn(h)), block.ln1, block.ln2, block.ff
    zero = torch.zeros_like(x)
    if pre_ln:
        return {
            "dropout over the whole residual stream, drop(x + attn(ln1(x)))": zero + ff(ln2(zero)),
            "dropout over the whole residual stream around both sub-layers": zero,
            "no dropout on the attention's output": (lambda h: h + ff(ln2(h)))(x + attn(ln1(x))),
            "dropout on the attention's input, attn(drop(ln1(x)))": (lambda h: h + ff(ln2(h)))(x + attn(zero)),
        }
    return {
        "dropout after the LayerNorm, drop(ln1(x + attn(x)))": ln2(zero + ff(zero)),
        "dropout after both LayerNorms": zero,
        "no dropout on the attention's output": (lambda h: ln2(h + ff(h)))(ln1(x + attn(x))),
        "dropout on the attention's input, attn(drop(x))": (lambda h: ln2(h + ff(h)))(ln1(x + attn(zero))),
    }


def block_dropout_placement(cls, pre_ln, D=16, H=2, d_ff=32, B=2, T=5, seed=0, reread=SEC_BLOCK) -> None:
    """In train mode with dropout=1.0 dropout zeroes whatever it is applied to, so the output shows
    where it sits: the attention's contribution is gone (x in pre-LN, ln1(x) in post-LN), and the
    feed-forward's is whatever your FeedForward gives in train mode (its own dropout; 0 when the
    block drops the sub-layer's output too, as the Annotated Transformer does)."""
    torch.manual_seed(seed)
    block = _block(cls, D, H, d_ff, dropout=1.0, pre_ln=pre_ln, reread=reread)
    randomize_(block, seed)
    block.train()
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        out = expect_tensor(call(block, x, name="TransformerBlock.forward (train mode, dropout=1.0)", reread=reread),
                            "TransformerBlock.forward")
        expect_shape(out, x.shape, "TransformerBlock(x) in train mode", reread=reread)
        h = x if pre_ln else block.ln1(x)
        ff_in = block.ln2(h) if pre_ln else h
        finish = (lambda s: s) if pre_ln else block.ln2
        accepted = [finish(h + block.ff(ff_in)), finish(h)]
        if not any(close(out, a) for a in accepted):
            name = first_match(out, block_dropout_variants(block, x, pre_ln))
            raise CheckFailed(f"TransformerBlock(pre_ln={pre_ln}, dropout=1.0) in train mode: the dropout is in "
                              "the wrong place", reread=reread,
                              hint=(f"your block applies {name}: " if name else "") + BLOCK_DROPOUT,
                              details=["with p = 1 dropout zeroes what it is applied to: the attention's "
                                       "contribution vanishes and the stream keeps " + ("x" if pre_ln else "ln1(x)"),
                                       f"inputs: x of shape {tuple(x.shape)}, random weights"])


def block_pre_ln(TransformerBlock) -> None:
    """pre_ln=True: x + attn(ln1(x)), then + ff(ln2(.)), computed from your own sub-modules; in train
    mode the dropout sits on the attention's output, before the residual add."""
    _check_block(TransformerBlock, True)
    block_dropout_placement(TransformerBlock, True, seed=6)
    block_defaults(TransformerBlock)
    passed("TransformerBlock(pre_ln=True): x = x + drop(attn(ln1(x))); x = x + ff(ln2(x))")


def block_post_ln(TransformerBlock) -> None:
    """pre_ln=False: ln1(x + attn(x)), then ln2(. + ff(.)); here with 2 heads; in train mode the
    dropout sits on the attention's output, before the residual add."""
    _check_block(TransformerBlock, False, n_heads=2)
    block_dropout_placement(TransformerBlock, False, seed=7)
    passed("TransformerBlock(pre_ln=False): x = ln1(x + drop(attn(x))); x = ln2(x + ff(x))")


def block_mask(TransformerBlock) -> None:
    """The mask reaches the attention: a causal mask hides the future, a padding mask the pads;
    is_causal=True builds the causal mask itself (and combines it with a given mask)."""
    block, x, out = _check_block(TransformerBlock, True, "causal", seed=1)
    x2 = x.clone()
    x2[:, 3:] = torch.randn(2, 2, 16)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    out2 = call(block, x2, mask=mask, name="TransformerBlock.forward", reread=SEC_BLOCK)
    if not close(out2[:, :3], out[:, :3]):
        raise CheckFailed("with a causal mask, changing tokens 3..4 changed the outputs at positions 0..2",
                          hint="pass the mask on to self.attn(..., mask=mask)", reread=SEC_BLOCK)
    _check_block(TransformerBlock, False, "padding", seed=2)
    _check_block(TransformerBlock, False, "causal+padding", seed=3, n_heads=2)
    _check_is_causal(TransformerBlock, True, seed=4)
    _check_is_causal(TransformerBlock, False, seed=5, n_heads=2)
    passed("TransformerBlock: the mask reaches the attention ((T, T), (B, 1, 1, T) and (B, 1, T, T) masks); "
           "is_causal=True hides the future, alone and with a padding mask")


def causal_wrong_variants(block, x, mask, pre_ln):
    """What the block computes with ``is_causal=True`` under the common mistakes."""
    T = x.shape[-2]
    tril = torch.ones(T, T, dtype=torch.bool).tril()
    out = {"is_causal ignored (no causal mask)": block_by_parts(block, x, mask, pre_ln)}
    if mask is not None:
        out["the causal mask replaced the given mask instead of being combined with it (&)"] = \
            block_by_parts(block, x, tril, pre_ln)
        out["the masks combined with | instead of &"] = block_by_parts(block, x, mask | tril, pre_ln)
    flipped = ~tril if mask is None else mask & ~tril
    out["the causal mask inverted (True above the diagonal), but True means 'may attend'"] = \
        block_by_parts(block, x, flipped, pre_ln)
    return out


def _check_is_causal(cls, pre_ln, seed, n_heads=4):
    """forward(x, is_causal=True) equals the block under the (T, T) causal mask, and with a
    mask too under mask & causal (computed from the block's own sub-modules)."""
    torch.manual_seed(seed)
    block = _block(cls, 16, n_heads, 32, pre_ln=pre_ln).eval()
    randomize_(block, seed)
    x = torch.randn(2, 5, 16)
    tril = torch.ones(5, 5, dtype=torch.bool).tril()
    pad = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]   # (B, 1, 1, T)
    for mask, kind in ((None, "None"), (pad, "padding (B, 1, 1, T)")):
        try:
            out = call(block, x, mask=mask, is_causal=True, name="TransformerBlock.forward", reread=SEC_BLOCK)
        except CheckFailed as e:
            if "is_causal" in e.title:
                e.hint = "give forward a third argument, forward(self, x, mask=None, is_causal=False)"
                e.args = (e.plain(),)
            raise
        out = expect_tensor(out, "TransformerBlock.forward")
        expect_shape(out, x.shape, "TransformerBlock(x, is_causal=True)", reread=SEC_BLOCK,
                     inputs="x of shape (2, 5, 16)")
        with torch.no_grad():
            want = block_by_parts(block, x, tril if mask is None else mask & tril, pre_ln)
            if not close(out, want):
                name = first_match(out, causal_wrong_variants(block, x, mask, pre_ln))
                hint = (f"your block computes {name}" if name else
                        "with is_causal=True use the (T, T) causal mask, combined with mask by & when one is given")
                expect_close(out, want, f"TransformerBlock(pre_ln={pre_ln})(x, mask={kind}, is_causal=True)",
                             hint=hint, reread=SEC_BLOCK,
                             inputs=f"x of shape (2, 5, 16), mask: {kind}, random weights")


# ----------------------------------------------------------------------------------------
# block_param_count
# ----------------------------------------------------------------------------------------
def param_count_reference(D, d_ff, bias=True):
    """Counted from modules (not from a formula): PyTorch's own numel."""
    lin = lambda i, o: nn.Linear(i, o, bias=bias)
    mods = [lin(D, 3 * D), lin(D, D), lin(D, d_ff), lin(d_ff, D), nn.LayerNorm(D), nn.LayerNorm(D)]
    return sum(p.numel() for m in mods for p in m.parameters())


def param_wrong_variants(D, d_ff, bias):
    b = 1 if bias else 0
    return {
        "bias=False also removed the LayerNorm biases": (4 * D * D + 2 * D * d_ff + 2 * D) if not bias else -1,
        "the biases of the linear layers are missing": 4 * D * D + 2 * D * d_ff + 4 * D,
        "the LayerNorms are missing": 4 * D * D + 2 * D * d_ff + b * (5 * D + d_ff),
        "the LayerNorms are counted with the gain only (D each)": 4 * D * D + 2 * D * d_ff + b * (5 * D + d_ff) + 2 * D,
        "the attention counts 3 D^2 (W_o forgotten)": 3 * D * D + 2 * D * d_ff + b * (4 * D + d_ff) + 4 * D,
        "the feed-forward counts one matrix (D d_ff)": 4 * D * D + D * d_ff + b * (5 * D + d_ff) + 4 * D,
    }


def block_param_count(block_param_count) -> None:
    """Equals sum(p.numel()) of a block, with and without linear biases."""
    for D, d_ff, bias in ((64, 256, True), (32, 100, True), (64, 256, False)):
        got = expect_int(call(block_param_count, D, d_ff, bias=bias, name="block_param_count", reread=SEC_PARAMS),
                         f"block_param_count({D}, {d_ff}, bias={bias})", reread=SEC_PARAMS)
        want = param_count_reference(D, d_ff, bias)
        if got != want:
            names = [n for n, v in param_wrong_variants(D, d_ff, bias).items() if v == got]
            hint = (f"your count matches a block where {names[0]}" if names else
                    "attention 4 D^2 (+ 4 D biases), feed-forward 2 D d_ff (+ d_ff + D), two LayerNorms 2 D each")
            raise CheckFailed(f"block_param_count({D}, {d_ff}, bias={bias}) = {got:,}, expected {want:,}",
                              hint=hint, reread=SEC_PARAMS)
    got = expect_int(call(block_param_count, 64, 256, name="block_param_count", reread=SEC_PARAMS),
                     "block_param_count(64, 256)", reread=SEC_PARAMS)
    if got != param_count_reference(64, 256, True):
        raise CheckFailed(f"block_param_count(64, 256) = {got:,}, expected {param_count_reference(64, 256, True):,}",
                          hint="bias=True is the default: without a bias argument the linear layers' biases count",
                          reread=SEC_PARAMS)
    passed("block_param_count: matches sum(p.numel()) with and without biases (with them by default)")


# ----------------------------------------------------------------------------------------
# from_torch_encoder_layer
# ----------------------------------------------------------------------------------------
def torch_layer(D, H, d_ff, norm_first, seed):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first)
    randomize_(layer, seed)
    return layer.eval()


def _loader_wrong_variants(layer, x):
    """What the common loading mistakes compute, built with the workbook's reference block."""
    from attention_workbook.blocks import from_torch_encoder_layer as ref_loader

    out = {}
    with torch.no_grad():
        b = ref_loader(layer).eval()
        b.pre_ln = not layer.norm_first
        out["a block with the other LayerNorm order (norm_first not read)"] = b(x)
        b = ref_loader(layer).eval()
        b.ln1, b.ln2 = b.ln2, b.ln1
        out["a block with norm1 and norm2 swapped"] = b(x)
        b = ref_loader(layer).eval()
        for m in (b.attn.W_qkv, b.attn.W_o, b.ff.net[0], b.ff.net[2]):
            m.bias.zero_()
        out["a block whose linear biases were not copied"] = b(x)
        b = ref_loader(layer).eval()
        b.ln1.weight.fill_(1.0), b.ln1.bias.zero_(), b.ln2.weight.fill_(1.0), b.ln2.bias.zero_()
        out["a block whose LayerNorm weights were not copied"] = b(x)
    return out


COPIED_FORWARD_WRONG = ("the weights were copied correctly (every tensor of the table equals the layer's), so the "
                        "difference is in your block's forward: make the TransformerBlock checks above pass first")


def _inspect_copy(block, layer):
    """Compare the loaded block's tensors with the layer's, and say which were not copied."""
    try:
        lins = [m for m in block.ff.modules() if isinstance(m, nn.Linear)]
        sa = layer.self_attn
        table = [("attn.W_qkv.weight", block.attn.W_qkv.weight, sa.in_proj_weight),
                 ("attn.W_qkv.bias", block.attn.W_qkv.bias, sa.in_proj_bias),
                 ("attn.W_o.weight", block.attn.W_o.weight, sa.out_proj.weight),
                 ("attn.W_o.bias", block.attn.W_o.bias, sa.out_proj.bias),
                 ("ff linear 1 weight", lins[0].weight, layer.linear1.weight),
                 ("ff linear 1 bias", lins[0].bias, layer.linear1.bias),
                 ("ff linear 2 weight", lins[1].weight, layer.linear2.weight),
                 ("ff linear 2 bias", lins[1].bias, layer.linear2.bias),
                 ("ln1.weight", block.ln1.weight, layer.norm1.weight), ("ln1.bias", block.ln1.bias, layer.norm1.bias),
                 ("ln2.weight", block.ln2.weight, layer.norm2.weight), ("ln2.bias", block.ln2.bias, layer.norm2.bias)]
    except Exception:  # noqa: BLE001 - unusual structure: no diagnosis
        return None
    if getattr(block, "pre_ln", layer.norm_first) != layer.norm_first:
        return "your block uses the other LayerNorm order: set pre_ln=layer.norm_first"
    heads = getattr(block.attn, "n_heads", layer.self_attn.num_heads)
    if isinstance(heads, int) and heads != layer.self_attn.num_heads:
        return (f"your block has {heads} heads, the layer {layer.self_attn.num_heads}: read the number of heads "
                "from the layer (layer.self_attn.num_heads)")
    wrong = [
        n
        for n, ours, theirs in table
        if ours is None or tuple(ours.shape) != tuple(theirs.shape) or not torch.equal(ours.detach(), theirs.detach())
    ]
    if not wrong:
        return COPIED_FORWARD_WRONG
    if torch.equal(block.ln1.weight.detach(), layer.norm2.weight.detach()):
        return "norm1 and norm2 are swapped: norm1 belongs to the attention (ln1), norm2 to the feed-forward (ln2)"
    if all(n.endswith("bias") for n in wrong) and not any(n.startswith("ln") for n in wrong):
        return "the biases were not copied: " + ", ".join(wrong)
    if all(n.startswith("ln") for n in wrong):
        return "the LayerNorm weights were not copied: " + ", ".join(wrong)
    return "these tensors differ from the layer's: " + ", ".join(wrong)


def _loader_hint(name):
    if name is None:
        return "copy every tensor of the table: in_proj, out_proj, linear1, linear2, norm1, norm2 (weights and biases)"
    if "norm_first" in name:
        return "your block uses the other LayerNorm order: set pre_ln=layer.norm_first"
    return f"your output equals {name}"


def _check_loader(fn, norm_first, seed, n_heads=4):
    layer = torch_layer(16, n_heads, 40, norm_first, seed)
    block = call(fn, layer, name="from_torch_encoder_layer", reread=SEC_TORCH)
    if not isinstance(block, nn.Module):
        raise CheckFailed("from_torch_encoder_layer should return your TransformerBlock (an nn.Module)",
                          hint="did you forget the `return`?" if block is None else None, reread=SEC_TORCH)
    block.eval()
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = layer(x)
        out = expect_tensor(call(block, x, name="your block", reread=SEC_TORCH), "your block")
    if not close(out, want, atol=1e-5, rtol=1e-5):
        name = first_match(out, _loader_wrong_variants(layer, x))
        hint = _loader_hint(name) if name else (_inspect_copy(block, layer) or _loader_hint(None))
        expect_close(out, want, f"the loaded block (norm_first={norm_first}) vs nn.TransformerEncoderLayer",
                     hint=hint, reread=SEC_TORCH, atol=1e-5, rtol=1e-5,
                     inputs=f"nn.TransformerEncoderLayer(16, {n_heads}, 40) with random weights, x of shape (2, 6, 16)")


def from_torch_post_ln(from_torch_encoder_layer) -> None:
    """A post-LN (default) nn.TransformerEncoderLayer loaded into your block: same outputs."""
    _check_loader(from_torch_encoder_layer, False, seed=11, n_heads=2)
    passed("from_torch_encoder_layer: same outputs as nn.TransformerEncoderLayer (post-LN) to 1e-5")


def from_torch_pre_ln(from_torch_encoder_layer) -> None:
    """A norm_first=True layer loaded into your block: same outputs."""
    _check_loader(from_torch_encoder_layer, True, seed=12, n_heads=8)
    passed("from_torch_encoder_layer: same outputs as nn.TransformerEncoderLayer(norm_first=True) to 1e-5")


guard(globals())  # every check records warnings instead of printing them (core.guard)
