"""Battery for exercise 06 (positions, LayerNorm, FeedForward, TransformerBlock, counts, loading).

Oracles: ``math.sin``/``math.cos`` per entry for the position table; ``F.layer_norm`` with the
same weights; ``F.linear``/``F.relu`` on the student's own weights for the feed-forward;
``nn.TransformerEncoderLayer`` (pre- and post-LN) for the block, whose sub-modules are swapped
for the workbook's holding the layer's weights (so the block's wiring is what is tested);
parameter counts from PyTorch modules.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import ex06 as visible
from ._util import CheckFailed, as_int, call, close, expect, first_match, guard, randint


def _pe(T, d):
    return torch.tensor([[math.sin(t / 10000 ** (k / d)) if k % 2 == 0 else math.cos(t / 10000 ** ((k - 1) / d))
                          for k in range(d)] for t in range(T)], dtype=torch.float32)


def sinusoidal_shape(sinusoidal_positions, g) -> None:
    for _ in range(5):
        T, d = randint(g, 1, 50), 2 * randint(g, 1, 30)
        pe = visible._student_pe(sinusoidal_positions, T, d)
        if tuple(pe.shape) != (T, d) or not pe.is_floating_point():
            raise CheckFailed(f"sinusoidal_positions({T}, {d}) should be a float tensor of shape ({T}, {d})",
                              details=[f"got {pe.dtype} {tuple(pe.shape)}"], reread=visible.SEC_POS)


def sinusoidal_values(sinusoidal_positions, g) -> None:
    for T, d in [(randint(g, 10, 90), 2 * randint(g, 2, 40)) for _ in range(4)] + [(64, 256)]:
        pe = visible._student_pe(sinusoidal_positions, T, d)
        expect(pe.float(), _pe(T, d), f"sinusoidal_positions({T}, {d})", f"T={T}, d_model={d}", atol=1e-4, rtol=1e-4,
               variants=lambda: visible.pe_wrong_variants(T, d), reread=visible.SEC_POS)


def _ln(LayerNorm, d, eps, g):
    ln = visible._make(LayerNorm, d, eps=eps, name="LayerNorm", reread=visible.SEC_LN)
    w, b = visible._ln_params(ln)
    with torch.no_grad():
        w.copy_(1 + 0.5 * torch.randn(d, generator=g))
        b.copy_(0.5 * torch.randn(d, generator=g))
    return ln, w.detach().clone(), b.detach().clone()


def _ln_expect(ln, w, b, eps, x, case, **tol):
    out = visible._ln_forward(ln, x)
    want = F.layer_norm(x.double(), (x.shape[-1],), w.double(), b.double(), eps).float()
    try:
        expect(out, want, "LayerNorm(x) vs F.layer_norm with the same weights", case, **tol, reread=visible.SEC_LN)
    except CheckFailed as e:
        if tuple(out.shape) == tuple(x.shape):
            e.hint = visible._ln_hint(first_match(out, visible.ln_wrong_variants(x, w, b, eps), atol=1e-4))
            e.args = (e.plain(),)
        raise


def layernorm_params(LayerNorm, g) -> None:
    for _ in range(3):
        d, eps = randint(g, 1, 70), [1e-5, 1e-6, 1e-3][randint(g, 0, 2)]
        ln = visible._make(LayerNorm, d, eps=eps, name="LayerNorm", reread=visible.SEC_LN)
        params = dict(ln.named_parameters())
        if set(params) != {"weight", "bias"} or any(tuple(p.shape) != (d,) for p in params.values()):
            raise CheckFailed(
                f"LayerNorm({d}) should have exactly the parameters weight and bias of shape ({d},)",
                details=[f"got {[(n, tuple(p.shape)) for n, p in params.items()]}"],
                reread=visible.SEC_LN,
            )
        if not (
            torch.equal(params["weight"].detach(), torch.ones(d))
            and torch.equal(params["bias"].detach(), torch.zeros(d))
        ):
            raise CheckFailed("LayerNorm should start at weight = 1, bias = 0", reread=visible.SEC_LN)
        if getattr(ln, "eps", None) != eps:
            raise CheckFailed(f"LayerNorm({d}, eps={eps}) does not keep eps in self.eps", reread=visible.SEC_LN)


def layernorm_values(LayerNorm, g) -> None:
    for _ in range(5):
        lead = tuple(randint(g, 1, 5) for _ in range(randint(g, 1, 3)))
        d = randint(g, 2, 50)
        ln, w, b = _ln(LayerNorm, d, 1e-5, g)
        x = torch.randn(lead + (d,), generator=g) * (0.5 + 4 * float(torch.rand(1, generator=g))) + 3 * float(
            torch.randn(1, generator=g)
        )
        _ln_expect(ln, w, b, 1e-5, x, f"x {tuple(x.shape)}")


def layernorm_eps(LayerNorm, g) -> None:
    for eps in (1e-3, 1e-5):
        d = randint(g, 4, 40)
        ln, w, b = _ln(LayerNorm, d, eps, g)
        x = -2 + math.sqrt(eps) * torch.randn(5, d, generator=g)     # variance comparable to eps
        x[randint(g, 0, 4)] = 0.75                                    # variance exactly 0
        out = visible._ln_forward(ln, x)
        if not bool(torch.isfinite(out).all()):
            raise CheckFailed(f"LayerNorm(eps={eps}) returns inf/nan for a token whose features are all equal",
                              hint="eps goes inside the square root, sqrt(var + eps)", reread=visible.SEC_LN)
        _ln_expect(ln, w, b, eps, x, f"eps={eps}, tokens with variance ~eps and 0", atol=1e-4, rtol=1e-4)


def _two_linears(ff):
    lins = visible._linears(ff, "FeedForward", visible.SEC_FFN)
    if len(lins) != 2:
        raise CheckFailed(f"FeedForward should contain two nn.Linear layers, found {len(lins)}", reread=visible.SEC_FFN)
    return lins


def feedforward_structure(FeedForward, g) -> None:
    for _ in range(3):
        D, d_ff, p = randint(g, 2, 50), randint(g, 2, 100), [0.0, 0.1, 0.3][randint(g, 0, 2)]
        ff = visible._make(FeedForward, D, d_ff, p, name="FeedForward", reread=visible.SEC_FFN)
        l1, l2 = _two_linears(ff)
        if (l1.in_features, l1.out_features, l2.in_features, l2.out_features) != (D, d_ff, d_ff, D):
            raise CheckFailed(f"FeedForward({D}, {d_ff}) should map {D} -> {d_ff} -> {D}", reread=visible.SEC_FFN)
        n = sum(q.numel() for q in ff.parameters())
        if n != 2 * D * d_ff + d_ff + D:
            raise CheckFailed(f"FeedForward({D}, {d_ff}) has {n} parameters, expected {2 * D * d_ff + d_ff + D}",
                              reread=visible.SEC_FFN)
        if p and not any(isinstance(m, nn.Dropout) and abs(m.p - p) < 1e-12 for m in ff.modules()):
            raise CheckFailed(f"FeedForward(..., dropout={p}) has no nn.Dropout({p})", reread=visible.SEC_FFN)
        visible.ffn_dropout_placement(
            FeedForward, D, d_ff, torch.randn(randint(g, 1, 3), randint(g, 1, 6), D, generator=g)
        )
        ff = visible._make(FeedForward, D, d_ff, name="FeedForward", reread=visible.SEC_FFN)
        x = torch.randn(randint(g, 1, 3), randint(g, 1, 6), D, generator=g)
        with torch.no_grad():
            if not close(
                call(ff.train(), x, name="FeedForward.forward"), call(ff.eval(), x, name="FeedForward.forward")
            ):
                raise CheckFailed(f"FeedForward({D}, {d_ff}) without a dropout argument drops values in train mode",
                                  hint=visible.DEFAULT_DROPOUT, reread=visible.SEC_FFN)


def feedforward_values(FeedForward, g) -> None:
    for _ in range(4):
        D, d_ff = randint(g, 2, 40), randint(g, 2, 90)
        ff = visible._make(FeedForward, D, d_ff, name="FeedForward", reread=visible.SEC_FFN).eval()
        l1, l2 = _two_linears(ff)
        x = torch.randn(randint(g, 1, 4), randint(g, 1, 9), D, generator=g)
        with torch.no_grad():
            out = call(ff, x, name="FeedForward.forward", reread=visible.SEC_FFN)
            want = F.linear(F.relu(F.linear(x.double(), l1.weight.double(), l1.bias.double())),
                            l2.weight.double(), l2.bias.double()).float()
            expect(out, want, "FeedForward(x)", f"D={D}, d_ff={d_ff}, x {tuple(x.shape)}",
                   variants=lambda: visible.ffn_wrong_variants(x, l1, l2), reread=visible.SEC_FFN)


def _swap_in_reference_parts(block, layer):
    """Make the block's own sub-modules compute the reference of their kind with the layer's
    weights. The objects stay the ones the block holds (their forward is redirected, nothing is
    replaced), so a block that reaches block.attn, block.ff, ... through residual wrapper modules
    or a ModuleList computes with the same weights (as the grader's hidden check does)."""
    from attention_workbook.blocks import from_torch_encoder_layer
    ref = from_torch_encoder_layer(layer).eval()
    ln1, ln2 = nn.LayerNorm(layer.norm1.normalized_shape), nn.LayerNorm(layer.norm2.normalized_shape)
    ln1.load_state_dict(layer.norm1.state_dict())
    ln2.load_state_dict(layer.norm2.state_dict())
    for mine, theirs in ((block.attn, ref.attn), (block.ff, ref.ff), (block.ln1, ln1), (block.ln2, ln2)):
        mine.forward = theirs.forward
    return block


def _block_vs_torch(cls, pre_ln, g, with_mask, n=3):
    for _ in range(n):
        H = randint(g, 1, 4)
        D, d_ff, B, T = H * randint(g, 2, 8), randint(g, 4, 48), randint(g, 1, 3), randint(g, 2, 9)
        layer = nn.TransformerEncoderLayer(D, H, d_ff, dropout=0.0, batch_first=True, norm_first=pre_ln)
        visible.randomize_(layer, randint(g, 10_000, 10_000_000))
        layer.eval()
        block = visible._block(cls, D, H, d_ff, pre_ln=pre_ln)
        for attr in ("attn", "ff", "ln1", "ln2"):
            if not hasattr(block, attr):
                raise CheckFailed(f"TransformerBlock has no attribute `{attr}`", reread=visible.SEC_BLOCK)
        block = _swap_in_reference_parts(block, layer).eval()
        x = torch.randn(B, T, D, generator=g)
        keep, kwargs, mask = torch.ones(B, T, dtype=torch.bool), {}, None
        if with_mask:
            keep = torch.arange(T)[None, :] < torch.randint(1, T + 1, (B,), generator=g)[:, None]
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            mask = keep[:, None, None, :] & causal                      # (B, 1, T, T)
            kwargs = {"src_mask": ~causal, "src_key_padding_mask": ~keep}
        case = f"B={B}, T={T}, D={D}, H={H}, d_ff={d_ff}, mask={'causal+padding' if with_mask else 'None'}"
        with torch.no_grad():
            want = layer(x, **kwargs)
            out = call(block, x, mask=mask, name="TransformerBlock.forward", reread=visible.SEC_BLOCK)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want.shape):
                expect(out, want, "TransformerBlock(x)", case, reread=visible.SEC_BLOCK)
            try:
                expect(out[keep], want[keep], f"TransformerBlock(pre_ln={pre_ln}) vs nn.TransformerEncoderLayer("
                       f"norm_first={pre_ln})", case, atol=1e-5, rtol=1e-5, reread=visible.SEC_BLOCK)
            except CheckFailed as e:
                name = first_match(out, visible.block_wrong_variants(block, x, mask, pre_ln))
                e.hint = visible._block_hint(name, pre_ln)
                e.args = (e.plain(),)
                raise


def _dropout(cls, pre_ln, g):
    H = randint(g, 1, 4)
    visible.block_dropout_placement(cls, pre_ln, D=H * randint(g, 2, 8), H=H, d_ff=randint(g, 4, 48),
                                    B=randint(g, 1, 3), T=randint(g, 2, 9), seed=randint(g, 10_000, 10_000_000))


def block_pre_ln(TransformerBlock, g) -> None:
    _block_vs_torch(TransformerBlock, True, g, with_mask=False)
    _dropout(TransformerBlock, True, g)
    H = randint(g, 1, 4)
    visible.block_defaults(TransformerBlock, D=H * randint(g, 2, 8), H=H, d_ff=randint(g, 4, 48),
                           seed=randint(g, 10_000, 10_000_000))


def block_post_ln(TransformerBlock, g) -> None:
    _block_vs_torch(TransformerBlock, False, g, with_mask=False)
    _dropout(TransformerBlock, False, g)


def block_mask(TransformerBlock, g) -> None:
    _block_vs_torch(TransformerBlock, True, g, with_mask=True, n=2)
    _block_vs_torch(TransformerBlock, False, g, with_mask=True, n=2)


def block_param_count(block_param_count, g) -> None:
    cases = [(randint(g, 1, 300), randint(g, 1, 900), bool(randint(g, 0, 1))) for _ in range(6)]
    cases += [(512, 2048, True), (randint(g, 2000, 9000), randint(g, 8000, 30000), True)]
    for D, d_ff, bias in cases:
        if D * d_ff < 2_000_000:
            want = visible.param_count_reference(D, d_ff, bias)
        else:   # too large to allocate: count the module shapes
            want = sum(o * i + (o if bias else 0) for o, i in [(3 * D, D), (D, D), (d_ff, D), (D, d_ff)]) + 4 * D
        got = call(block_param_count, D, d_ff, bias=bias, name="block_param_count", reread=visible.SEC_PARAMS)
        if as_int(got) != want:
            named = next((k for k, v in visible.param_wrong_variants(D, d_ff, bias).items() if v == as_int(got)), None)
            raise CheckFailed(f"block_param_count({D}, {d_ff}, bias={bias}) = {got!r}, expected {want}",
                              hint=f"your count matches {named}" if named else None, reread=visible.SEC_PARAMS)
    D, d_ff = randint(g, 1, 300), randint(g, 1, 900)
    got = call(block_param_count, D, d_ff, name="block_param_count", reread=visible.SEC_PARAMS)
    if as_int(got) != visible.param_count_reference(D, d_ff, True):
        raise CheckFailed(
            f"block_param_count({D}, {d_ff}) = {got!r}, expected {visible.param_count_reference(D, d_ff, True)}",
            hint="bias=True is the default: without a bias argument the linear layers' biases count",
            reread=visible.SEC_PARAMS,
        )


def _loader(fn, norm_first, g):
    for _ in range(3):
        H = randint(g, 1, 4)
        D, d_ff = H * randint(g, 2, 8), randint(g, 4, 48)
        layer = visible.torch_layer(D, H, d_ff, norm_first, randint(g, 10_000, 10_000_000))
        block = call(fn, layer, name="from_torch_encoder_layer", reread=visible.SEC_TORCH)
        if not isinstance(block, nn.Module):
            raise CheckFailed("from_torch_encoder_layer did not return an nn.Module", reread=visible.SEC_TORCH)
        block.eval()
        x = torch.randn(randint(g, 1, 3), randint(g, 1, 9), D, generator=g)
        case = f"nn.TransformerEncoderLayer(D={D}, H={H}, d_ff={d_ff}, norm_first={norm_first}), x {tuple(x.shape)}"
        with torch.no_grad():
            want = layer(x)
            out = call(block, x, name="the loaded block", reread=visible.SEC_TORCH)
            try:
                expect(out, want, "the loaded block vs nn.TransformerEncoderLayer", case, atol=1e-5, rtol=1e-5,
                       reread=visible.SEC_TORCH)
            except CheckFailed as e:
                if isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(want.shape):
                    name = first_match(out, visible._loader_wrong_variants(layer, x))
                    e.hint = visible._loader_hint(name) if name else (visible._inspect_copy(block, layer)
                                                                      or visible._loader_hint(None))
                    e.args = (e.plain(),)
                raise


def from_torch_post_ln(from_torch_encoder_layer, g) -> None:
    _loader(from_torch_encoder_layer, False, g)


def from_torch_pre_ln(from_torch_encoder_layer, g) -> None:
    _loader(from_torch_encoder_layer, True, g)


guard(globals())
