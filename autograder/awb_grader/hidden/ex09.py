"""Hidden checks for exercise 09 (online_softmax, tiled_attention, GroupedQueryAttention,
apply_rope, sliding_window_mask, generate_cached): randomized cases.

Oracles are independent of the solution: ``torch.softmax`` and ``F.scaled_dot_product_attention``
in float64; ``nn.MultiheadAttention`` with the same weights and SDPA's own ``enable_gqa``;
an explicit loop over the rotation pairs; a double loop for the window; and lecture 08's
uncached ``generate`` on an identically seeded copy of the model (token for token).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook.checks.ex08 import single_threaded
from attention_workbook.checks.ex09 import NO_SDPA, NO_SOFTMAX, online_builtins, tiled_builtins

from . import _adapter as A
from ..replay_support import recording_gpt
from ._base import CheckFailed, call, close, fail_values, guard, own_code, randint, rng


def _lead(g) -> tuple[int, ...]:
    return tuple(randint(g, 1, 3) for _ in range(randint(g, 0, 2)))


# ----------------------------------------------------------------------------------------
# online_softmax
# ----------------------------------------------------------------------------------------
def _online_case(fn, x, block, case):
    with A.forbid(online_builtins(), NO_SOFTMAX):
        out = call(fn, x.clone(), block, name="online_softmax")
    want = torch.softmax(x.double(), dim=-1)
    if not isinstance(out, torch.Tensor) or not close(out, want.to(x.dtype), atol=1e-5):
        fail_values("online_softmax", out if isinstance(out, torch.Tensor) else torch.empty(0), want, case,
                    "1e-5 absolute")


def online_softmax_values(online_softmax) -> None:
    own_code(online_softmax, "online_softmax")
    g = rng(901)
    for _ in range(5):
        block = randint(g, 1, 6)
        n = block * randint(g, 1, 6)
        x = torch.randn(*_lead(g), n, generator=g) * randint(g, 1, 4) + torch.linspace(0, randint(g, 0, 8), n)
        _online_case(online_softmax, x, block, f"x {tuple(x.shape)}, block {block} (n a multiple of block)")
    block = randint(g, 2, 5)
    x = torch.randn(*_lead(g), block * randint(g, 3, 5) + randint(g, 1, block - 1), generator=g) * 2
    _one_pass(online_softmax, x, block, f"x {tuple(x.shape)}, block {block}")
    x = torch.randn(*_lead(g), 4 * randint(g, 3, 5) + randint(g, 1, 3), generator=g)
    _one_pass(online_softmax, x, 4, f"x {tuple(x.shape)}, block left at its default (4)", default=True)


def _watched(block, x, call_it):
    """What a call computes on the way (attention_workbook.checks.ex09.Watch, run where the student's code runs)."""
    watch = A.make("ex09.watch", block, x)
    watch("start")
    try:
        call_it()
    finally:
        report = watch("stop")
    return report


def _one_pass(fn, x, block, case, default=False):
    def run():
        with A.forbid(online_builtins(), NO_SOFTMAX):
            call(fn, *((x.clone(),) if default else (x.clone(), block)), name="online_softmax")
    r = _watched(block, x, run)
    if default and r["widest"] != block:
        raise CheckFailed("hidden test: online_softmax(x) without a block argument does not read blocks of the "
                          "default size 4", details=[f"case: {case}: widest reduction {r['widest']}"])
    if r["wide"] or r["extra_sweeps"] > 1:
        raise CheckFailed("hidden test: online_softmax is not one pass (a reduction over more than a block, or x "
                          "read in more than one sweep before the final exp(x - m) / l)",
                          details=[f"case: {case}: " + (f"a {r['wide'][0][0]} over {tuple(r['wide'][0][1])}"
                                                        if r["wide"] else f"{r['extra_sweeps']} returns to the start")])


def online_softmax_edge(online_softmax) -> None:
    g = rng(902)
    for case in range(6):
        block = randint(g, 2, 7)
        n = block * randint(g, 1, 4) + randint(g, 1, block - 1) if case % 2 == 0 else randint(g, 1, block)
        x = torch.randn(*_lead(g), n, generator=g) * randint(g, 1, 30) + 500 * randint(g, -2, 2)
        if n > 1:
            dead = torch.rand(x.shape, generator=g) < 0.4
            dead[..., randint(g, 0, n - 1)] = False                 # one finite entry per row
            if n > block:
                dead[..., :block] = True
                dead[..., block] = False
            x = x.masked_fill(dead, float("-inf"))
        finite = x[torch.isfinite(x)]
        _online_case(online_softmax, x, block, f"x {tuple(x.shape)}, block {block}, -inf entries, finite values "
                                               f"from {float(finite.min()):.0f} to {float(finite.max()):.0f}")
    x = torch.randn(*_lead(g), randint(g, 2, 12), generator=g) - 1000.0 * randint(g, 1, 3)    # every entry far below 0
    block = randint(g, 1, 5)
    _online_case(online_softmax, x, block, f"x {tuple(x.shape)}, block {block}, every value near "
                                           f"{float(x.mean()):.0f}")


# ----------------------------------------------------------------------------------------
# tiled_attention
# ----------------------------------------------------------------------------------------
def _tiled_case(fn, q, k, v, mask, block, case):
    kw = {} if mask is None else {"mask": mask}
    with A.forbid(tiled_builtins(), NO_SDPA):
        out = call(fn, q, k, v, block=block, name="tiled_attention", **kw)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    if not isinstance(out, torch.Tensor) or not close(out, want.to(q.dtype), atol=1e-5):
        fail_values("tiled_attention", out if isinstance(out, torch.Tensor) else torch.empty(0), want, case,
                    "1e-5 absolute")


def _qkv(g, lead=None):
    lead = _lead(g) if lead is None else lead
    Tq, Tk, d, dv = randint(g, 1, 9), randint(g, 1, 20), randint(g, 2, 16), randint(g, 1, 12)
    return (torch.randn(*lead, Tq, d, generator=g) * 1.5, torch.randn(*lead, Tk, d, generator=g) * 1.5,
            torch.randn(*lead, Tk, dv, generator=g))


def tiled_attention_values(tiled_attention) -> None:
    own_code(tiled_attention, "tiled_attention")
    g = rng(903)
    for _ in range(5):
        q, k, v = _qkv(g)
        block = randint(g, 1, 8)
        _tiled_case(tiled_attention, q, k, v, None, block,
                    f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, block {block}")
    block = randint(g, 3, 6)                  # d <= block; Tq > 2 max(d, dv); Tk > 2 block
    d, dv = randint(g, 2, block), randint(g, 1, 6)
    Tq, Tk, lead = 2 * max(d, dv) + randint(g, 2, 8), block * randint(g, 3, 6) + randint(g, 0, block - 1), _lead(g)
    q, k, v = (torch.randn(*lead, Tq, d, generator=g), torch.randn(*lead, Tk, d, generator=g),
               torch.randn(*lead, Tk, dv, generator=g))
    case = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, block {block}"
    _tiled_case(tiled_attention, q, k, v, None, block, case)

    def run():
        with A.forbid(tiled_builtins(), NO_SDPA):
            call(tiled_attention, q, k, v, block=block, name="tiled_attention")
    r = _watched(block, None, run)
    if r["largest"][0] * 2 >= math.prod((*lead, Tq, Tk)) or r["wide"]:
        raise CheckFailed("hidden test: tiled_attention builds (half) the whole (..., Tq, Tk) score matrix, or reduces "
                          "over more than block keys at once",
                          details=[f"case: {case}: largest tensor {tuple(r['largest'][1])}, wide {r['wide'][:1]}"])
    Tk = 16 * randint(g, 2, 3) + randint(g, 1, 15)          # the default block=16: tiles of 16 keys
    q, k, v = torch.randn(Tq, d, generator=g), torch.randn(Tk, d, generator=g), torch.randn(Tk, dv, generator=g)

    def run_default():
        with A.forbid(tiled_builtins(), NO_SDPA):
            call(tiled_attention, q, k, v, name="tiled_attention")
    r = _watched(16, None, run_default)
    if r["widest"] != 16:
        raise CheckFailed("hidden test: tiled_attention(q, k, v) without a block argument does not work on tiles of "
                          "the default 16 keys", details=[f"case: q {tuple(q.shape)}, k {tuple(k.shape)}: widest "
                                                          f"reduction {r['widest']}"])


def tiled_attention_mask(tiled_attention) -> None:
    g = rng(904)
    for case in range(8):
        q, k, v = _qkv(g, lead=[(), (randint(g, 1, 3),), (randint(g, 1, 3), randint(g, 1, 3))][case % 3])
        Tq, Tk = q.size(-2), k.size(-2)
        block = randint(g, 1, 6)
        if case >= 6:         # a window over longer sequences: whole tiles masked for the later queries
            T, lead, d = randint(g, 10, 20), q.shape[:-2], q.size(-1)
            q, k = torch.randn(*lead, T, d, generator=g), torch.randn(*lead, T, d, generator=g)
            v = torch.randn(*lead, T, v.size(-1), generator=g)
            w = randint(g, 1, 3)
            i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
            mask = (j <= i) & (i - j < w)
            block = randint(g, 2, 4)
            kind = f"window {w}"
        elif case % 3 == 0:     # causal over the last Tq keys (queries that follow Tk - Tq earlier ones)
            mask = torch.arange(Tk)[None, :] <= (Tk - Tq + torch.arange(Tq))[:, None]
            mask[:, 0] = True
            kind = "causal"
        elif case % 3 == 1:     # one leading axis here: a padding mask (B, 1, Tk), broadcast over the queries
            mask = torch.rand(q.size(0), 1, Tk, generator=g) < 0.7
            mask[..., 0] = True
            kind = "padding (B, 1, Tk)"
        else:
            mask = torch.rand(Tq, Tk, generator=g) < 0.3
            mask[torch.arange(Tq), torch.randint(Tk, (Tq,), generator=g)] = True
            kind = "random (Tq, Tk)"
        _tiled_case(tiled_attention, q, k, v, mask, block,
                    f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, {kind} mask, block {block}")


# ----------------------------------------------------------------------------------------
# GroupedQueryAttention
# ----------------------------------------------------------------------------------------
def _build_gqa(GQA, D, H, Hkv, seed):
    m = A.new(GQA, D, H, Hkv, name="GroupedQueryAttention", seed=seed)
    Dh = D // H
    found = {d["path"]: d for d in A.describe(m)}
    for name, (i, o) in (("W_q", (D, D)), ("W_kv", (D, 2 * Hkv * Dh)), ("W_o", (D, D))):
        d = found.get(name)
        if d is None or d["kind"] != "Linear" or (d["in_features"], d["out_features"]) != (i, o) or not d["bias"]:
            raise CheckFailed(f"hidden test: GroupedQueryAttention({D}, {H}, {Hkv}).{name} should be "
                              f"nn.Linear({i}, {o}) with a bias")
    return A.train(m, False)


def _load(m, g, D, H, Hkv, scale=0.4):
    Dh = D // H
    w = {"W_q.weight": torch.randn(D, D, generator=g) * scale, "W_q.bias": torch.randn(D, generator=g) * 0.1,
         "W_kv.weight": torch.randn(2 * Hkv * Dh, D, generator=g) * scale,
         "W_kv.bias": torch.randn(2 * Hkv * Dh, generator=g) * 0.1,
         "W_o.weight": torch.randn(D, D, generator=g) * scale, "W_o.bias": torch.randn(D, generator=g) * 0.1}
    A.load(m, w)
    return w


def _gqa_call(m, x, mask, is_causal):
    kw = {}
    if mask is not None:
        kw["mask"] = mask
    if is_causal:
        kw["is_causal"] = True
    with torch.no_grad():
        return call(m, x, name="GroupedQueryAttention.forward", **kw)


def gqa_as_mha(GroupedQueryAttention) -> None:
    own_code(GroupedQueryAttention, "GroupedQueryAttention")
    g = rng(905)
    for case in range(4):
        H = randint(g, 1, 4)
        D, B, T = H * randint(g, 2, 6), randint(g, 1, 3), randint(g, 1, 8)
        m = _build_gqa(GroupedQueryAttention, D, H, H, seed=case)
        w = _load(m, g, D, H, H)
        ref = nn.MultiheadAttention(D, H, batch_first=True).double().eval()
        with torch.no_grad():
            ref.in_proj_weight.copy_(torch.cat([w["W_q.weight"], w["W_kv.weight"]]))
            ref.in_proj_bias.copy_(torch.cat([w["W_q.bias"], w["W_kv.bias"]]))
            ref.out_proj.weight.copy_(w["W_o.weight"])
            ref.out_proj.bias.copy_(w["W_o.bias"])
        x = torch.randn(B, T, D, generator=g)
        keep = torch.rand(B, T, generator=g) < 0.7
        keep[:, 0] = True
        pad = keep[:, None, None, :].expand(B, 1, T, T)                 # (B, 1, T, T), True = may attend
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        for mask, is_causal, allowed in ((None, False, None), (None, True, causal), (pad, False, pad),
                                         (pad, True, pad & causal)):
            out = _gqa_call(m, x, mask, is_causal)
            attn_mask = None if allowed is None else ~allowed.expand(B, H, T, T).reshape(B * H, T, T)
            with torch.no_grad():
                want = ref(x.double(), x.double(), x.double(), attn_mask=attn_mask, need_weights=False)[0]
            if not isinstance(out, torch.Tensor) or not close(out, want.float(), atol=1e-5):
                fail_values("GroupedQueryAttention output", out if isinstance(out, torch.Tensor) else torch.empty(0),
                            want, f"n_kv_heads == n_heads = {H}, D = {D}, x ({B}, {T}, {D}), mask "
                                  f"{'none' if mask is None else '(B, 1, T, T)'}, is_causal={is_causal}; "
                                  "oracle nn.MultiheadAttention with the same weights", "1e-5 absolute")


def gqa_groups(GroupedQueryAttention) -> None:
    g = rng(906)
    for case in range(4):
        Hkv = randint(g, 1, 3)
        H = Hkv * randint(g, 2, 3)
        Dh = randint(g, 2, 5)
        D, B, T = H * Dh, randint(g, 1, 3), randint(g, 2, 7)
        m = _build_gqa(GroupedQueryAttention, D, H, Hkv, seed=10 + case)
        w = _load(m, g, D, H, Hkv, scale=0.6)
        x = torch.randn(B, T, D, generator=g)
        is_causal = case % 2 == 1
        out = _gqa_call(m, x, None, is_causal)
        xd = x.double()
        q = F.linear(xd, w["W_q.weight"].double(), w["W_q.bias"].double()).view(B, T, H, Dh).transpose(1, 2)
        kv = F.linear(xd, w["W_kv.weight"].double(), w["W_kv.bias"].double())
        k = kv[..., :Hkv * Dh].reshape(B, T, Hkv, Dh).transpose(1, 2)
        v = kv[..., Hkv * Dh:].reshape(B, T, Hkv, Dh).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)   # PyTorch's own GQA
        want = F.linear(y.transpose(1, 2).reshape(B, T, D), w["W_o.weight"].double(), w["W_o.bias"].double())
        if not isinstance(out, torch.Tensor) or not close(out, want.float(), atol=1e-5):
            fail_values("GroupedQueryAttention output", out if isinstance(out, torch.Tensor) else torch.empty(0),
                        want, f"n_heads {H}, n_kv_heads {Hkv}, D {D}, x ({B}, {T}, {D}), is_causal={is_causal}; "
                              "oracle F.scaled_dot_product_attention(enable_gqa=True)", "1e-5 absolute")


# ----------------------------------------------------------------------------------------
# apply_rope
# ----------------------------------------------------------------------------------------
def _rope_loop(x, positions, base):
    """Each adjacent pair rotated by its own 2 x 2 matrix, one pair at a time (float64)."""
    T, d = x.shape[-2:]
    out = x.double().clone()
    for t in range(T):
        p = float(positions[t])
        for i in range(d // 2):
            a = p * base ** (-2.0 * i / d)
            c, s = math.cos(a), math.sin(a)
            x0, x1 = x[..., t, 2 * i].double(), x[..., t, 2 * i + 1].double()
            out[..., t, 2 * i] = c * x0 - s * x1
            out[..., t, 2 * i + 1] = s * x0 + c * x1
    return out


def _rope_case(fn, x, case, **kw):
    out = call(fn, x.clone(), name="apply_rope", **kw)
    pos = kw.get("positions")
    want = _rope_loop(x, torch.arange(x.size(-2)) if pos is None else pos, kw.get("base", 10000.0))
    if not isinstance(out, torch.Tensor) or not close(out, want.to(x.dtype), atol=1e-5):
        fail_values("apply_rope", out if isinstance(out, torch.Tensor) else torch.empty(0), want, case,
                    "1e-5 absolute")


def apply_rope_values(apply_rope) -> None:
    own_code(apply_rope, "apply_rope")
    g = rng(907)
    for case in range(5):
        x = torch.randn(*_lead(g), randint(g, 1 if case < 4 else 2, 9), 2 * randint(g, 1, 8) if case < 4 else 2,
                        generator=g)
        kw = {} if case in (0, 1, 4) else {"base": [500.0, 1e6][case - 2]}
        _rope_case(apply_rope, x, f"x {tuple(x.shape)}, default positions, base {kw.get('base', 10000.0)}", **kw)


def apply_rope_positions(apply_rope) -> None:
    g = rng(908)
    for case in range(4):
        T = randint(g, 1, 8)
        x = torch.randn(*_lead(g), T, 2 * randint(g, 1, 8), generator=g)
        if case % 2 == 0:
            start = randint(g, 1, 50)
            pos = torch.arange(start, start + T)
        else:
            pos = torch.randint(0, 200, (T,), generator=g)
        _rope_case(apply_rope, x, f"x {tuple(x.shape)}, positions {pos.tolist()}", positions=pos)


# ----------------------------------------------------------------------------------------
# sliding_window_mask
# ----------------------------------------------------------------------------------------
def sliding_window_mask_values(sliding_window_mask) -> None:
    own_code(sliding_window_mask, "sliding_window_mask")
    g = rng(909)
    for _ in range(6):
        T = randint(g, 1, 12)
        w = randint(g, 1, T + 3)
        out = call(sliding_window_mask, T, w, name="sliding_window_mask")
        want = torch.tensor([[i - w < j <= i for j in range(T)] for i in range(T)], dtype=torch.bool)
        if not isinstance(out, torch.Tensor) or out.dtype != torch.bool or not torch.equal(out, want):
            raise CheckFailed("hidden test: sliding_window_mask differs from the window rule",
                              details=[f"case: T={T}, window={w}: query i may attend to keys i - window + 1 .. i "
                                       "(bool (T, T), exact)"])


# ----------------------------------------------------------------------------------------
# generate_cached
# ----------------------------------------------------------------------------------------
def _config(g):
    H = randint(g, 1, 4)
    return dict(vocab_size=randint(g, 7, 40), block_size=randint(g, 10, 24), n_layer=randint(g, 2, 3),
                n_head=H, d_model=H * 4 * randint(g, 1, 3))


def _gen_case(fn, g, seed, over=None, T=None, **kw):
    from attention_workbook.gpt import generate

    cfg = {**_config(g), **(over or {})}
    model = A.make("ex09.gpt", cfg, seed)
    oracle = recording_gpt(cfg, seed)                              # the same weights, here
    B, T = randint(g, 1, 3), randint(g, 2, cfg["block_size"] - 2) if T is None else T
    n = randint(g, 1 if T > 2 else 4, cfg["block_size"] - T)        # (a short prompt: its keys matter later on)
    idx = torch.randint(cfg["vocab_size"], (B, T), generator=g)
    out = call(fn, model, idx.clone(), n, generator=torch.Generator().manual_seed(seed), name="generate_cached", **kw)
    want = generate(oracle, idx.clone(), n, generator=torch.Generator().manual_seed(seed), **kw)
    case = (f"GPT{tuple(cfg.values())} (vocab, block_size, n_layer, n_head, d_model), prompt ({B}, {T}), {n} tokens, "
            f"{kw}")
    return model, out, want, case, (T, n)


@single_threaded
def generate_cached_equal(generate_cached) -> None:
    own_code(generate_cached, "generate_cached")
    g = rng(910)
    for case in range(7):     # then: a one-block GPT, a two-token prompt, greedy decoding (temperature=0)
        kw = [{}, {"top_k": 4}, {"temperature": 0.8}, {"temperature": 1.3, "top_k": 2}, {"over": {"n_layer": 1}},
              {"T": 2, "over": {"n_layer": 2, "n_head": 4, "d_model": 32}}, {"temperature": 0}][case]
        _, out, want, desc, _ = _gen_case(generate_cached, g, 20 + case, **kw)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want.shape) or not torch.equal(out, want):
            raise CheckFailed("hidden test: generate_cached differs from the uncached generate with the same seed",
                              details=[f"case: {desc}; oracle: lecture 08's generate on the same weights, token for "
                                       "token"])


@single_threaded
def generate_cached_steps(generate_cached) -> None:
    g = rng(911)
    for case in range(2):
        model, out, want, desc, (T, n) = _gen_case(generate_cached, g, 40 + case)
        fed, full = A.get(model, "fed"), A.get(model, "full_calls")[0]
        if A.get(model, "grad_seen")[0]:
            raise CheckFailed("hidden test: generate_cached runs the blocks with gradients enabled (use "
                              "@torch.no_grad())", details=[f"case: {desc}"])
        ok = full == 0 and fed[:1] == [T] and all(w == 1 for w in fed[1:]) and len(fed) in (n, n + 1)
        if not ok:
            raise CheckFailed("hidden test: generate_cached does not read the prompt once and then one token per step",
                              details=[f"case: {desc}; positions fed to the first block per pass: {fed[:12]}; "
                                       f"calls of the model's own forward: {full}"])


guard(globals())  # every check records warnings instead of printing them (core.guard)
