"""Battery for exercise 09 (online_softmax, tiled_attention, GroupedQueryAttention, apply_rope,
sliding_window_mask, generate_cached).

Oracles: ``torch.softmax`` and ``F.scaled_dot_product_attention``; lecture 05's
``MultiHeadAttention`` with the same weights and a per-head loop for grouped-query attention;
complex multiplication for RoPE; a double loop for the window; lecture 08's uncached
``generate`` on the same model, token for token. Random sizes, leading axes, blocks, masks and
model configurations; a failing case is named by the visible check's variants.
"""

from __future__ import annotations

import torch

from .. import ex09 as visible
from ._util import CheckFailed, call, guard, randint


def _lead(g) -> tuple[int, ...]:
    return tuple(randint(g, 1, 3) for _ in range(randint(g, 0, 2)))


def online_softmax_values(online_softmax, g) -> None:
    for _ in range(4):
        block = randint(g, 1, 5)
        n = block * randint(g, 1, 5)
        x = torch.randn(*_lead(g), n, generator=g) * randint(g, 1, 3) + torch.linspace(0, randint(g, 0, 6), n)
        visible._online_case(online_softmax, x, block, f"random x {tuple(x.shape)}")
    block = randint(g, 2, 5)
    x = torch.randn(*_lead(g), block * randint(g, 2, 4) + randint(g, 1, block - 1), generator=g) * randint(g, 1, 3)
    visible.online_one_pass(online_softmax, x, block)


def online_softmax_edge(online_softmax, g) -> None:
    for case in range(4):
        block = randint(g, 2, 6)
        n = block * randint(g, 1, 3) + randint(g, 1, block - 1) if case % 2 == 0 else randint(g, 1, block)
        x = torch.randn(*_lead(g), n, generator=g) * randint(g, 1, 20) + 400 * randint(g, -2, 2)
        if n > block:
            x[..., :block] = float("-inf")
        visible._online_case(
            online_softmax, x, block, f"random x {tuple(x.shape)} (partial blocks, -inf, large values)"
        )
    x = torch.randn(*_lead(g), randint(g, 2, 9), generator=g) - 900.0 * randint(g, 1, 3)        # all far below 0
    visible._online_case(online_softmax, x, randint(g, 1, 4), f"random x {tuple(x.shape)} (every value far below 0)")


def _qkv(g):
    lead = _lead(g)
    Tq, Tk, d, dv = randint(g, 1, 8), randint(g, 1, 16), randint(g, 2, 12), randint(g, 1, 10)
    return (torch.randn(*lead, Tq, d, generator=g) * 1.5, torch.randn(*lead, Tk, d, generator=g) * 1.5,
            torch.randn(*lead, Tk, dv, generator=g))


def tiled_attention_values(tiled_attention, g) -> None:
    for _ in range(4):
        q, k, v = _qkv(g)
        visible._tiled(tiled_attention, q, k, v, None, randint(g, 1, 6),
                       f"random q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    block = randint(g, 3, 6)                  # d <= block; Tq > 2 max(d, dv); Tk > 2 block
    d, dv, lead = randint(g, 2, block), randint(g, 1, 6), _lead(g)
    Tq, Tk = 2 * max(d, dv) + randint(g, 2, 8), block * randint(g, 3, 6) + randint(g, 0, block - 1)
    visible.tiled_memory(
        tiled_attention,
        torch.randn(*lead, Tq, d, generator=g),
        torch.randn(*lead, Tk, d, generator=g),
        torch.randn(*lead, Tk, dv, generator=g),
        block,
    )


def tiled_attention_mask(tiled_attention, g) -> None:
    for case in range(4):
        q, k, v = _qkv(g)
        Tq, Tk = q.size(-2), k.size(-2)
        if case % 2:
            mask = torch.arange(Tk)[None, :] <= (Tk - Tq + torch.arange(Tq))[:, None]
            mask[:, 0] = True
        else:
            mask = torch.rand(Tq, Tk, generator=g) < 0.3
            mask[torch.arange(Tq), torch.randint(Tk, (Tq,), generator=g)] = True
        visible._tiled(tiled_attention, q, k, v, mask, randint(g, 1, 5),
                       f"random q {tuple(q.shape)}, k {tuple(k.shape)}, mask {tuple(mask.shape)}")


def gqa_as_mha(GroupedQueryAttention, g) -> None:
    from ...mha import MultiHeadAttention

    for _ in range(2):
        H = randint(g, 1, 4)
        D, B, T = H * randint(g, 2, 5), randint(g, 1, 3), randint(g, 2, 7)
        mha = MultiHeadAttention(D, H).eval()
        m = visible._gqa(GroupedQueryAttention, D, H, H, seed=randint(g, 0, 99))
        with torch.no_grad():
            m.W_q.weight.copy_(mha.W_qkv.weight[:D])
            m.W_q.bias.copy_(mha.W_qkv.bias[:D])
            m.W_kv.weight.copy_(mha.W_qkv.weight[D:])
            m.W_kv.bias.copy_(mha.W_qkv.bias[D:])
            m.W_o.load_state_dict(mha.W_o.state_dict())
        x = torch.randn(B, T, D, generator=g)
        pad = (torch.rand(B, 1, 1, T, generator=g) < 0.7).expand(B, 1, T, T).clone()
        pad[..., 0] = True
        for mask, is_causal in ((None, True), (pad, False), (pad, True)):
            with torch.no_grad():
                want = mha(x, mask=mask, is_causal=is_causal)
            visible._gqa_compare(m, x, mask, is_causal, want, f"random GroupedQueryAttention({D}, {H}, {H}), "
                                                             f"x ({B}, {T}, {D}), is_causal={is_causal}", H, H)


def gqa_groups(GroupedQueryAttention, g) -> None:
    for case in range(3):
        Hkv = randint(g, 1, 3)
        H = Hkv * randint(g, 2, 3)
        D, B, T = H * randint(g, 2, 4), randint(g, 1, 3), randint(g, 2, 6)
        m = visible._gqa(GroupedQueryAttention, D, H, Hkv, seed=randint(g, 0, 99))
        with torch.no_grad():
            for lin in (m.W_q, m.W_kv, m.W_o):
                lin.weight.normal_(0, 0.5, generator=g)
                lin.bias.normal_(0, 0.1, generator=g)
        x = torch.randn(B, T, D, generator=g)
        is_causal = case % 2 == 1
        causal = torch.ones(T, T, dtype=torch.bool).tril() if is_causal else None
        want = visible._attn_loop(x, *[t.detach() for t in visible._weights(m)], H, Hkv, causal)
        visible._gqa_compare(m, x, None, is_causal, want, f"random GroupedQueryAttention({D}, {H}, {Hkv}), "
                                                         f"is_causal={is_causal}", H, Hkv)


def apply_rope_values(apply_rope, g) -> None:
    for case in range(5):
        x = torch.randn(*_lead(g), randint(g, 1 if case < 4 else 2, 8), 2 * randint(g, 1, 6) if case < 4 else 2,
                        generator=g)
        kw = {} if case in (0, 1, 4) else {"base": float(randint(g, 50, 5000))}
        visible._rope(apply_rope, x, f"random x {tuple(x.shape)}", **kw)


def apply_rope_positions(apply_rope, g) -> None:
    for _ in range(4):
        T = randint(g, 1, 7)
        x = torch.randn(*_lead(g), T, 2 * randint(g, 1, 6), generator=g)
        pos = torch.randint(0, 100, (T,), generator=g)
        visible._rope(apply_rope, x, f"random x {tuple(x.shape)}, positions {pos.tolist()}", positions=pos)


def sliding_window_mask_values(sliding_window_mask, g) -> None:
    for _ in range(6):
        T = randint(g, 1, 10)
        w = randint(g, 1, T + 2)
        out = call(sliding_window_mask, T, w, name="sliding_window_mask", reread=visible.SEC_LOCAL)
        want = visible.window_oracle(T, w)
        if not isinstance(out, torch.Tensor) or out.dtype != torch.bool or not torch.equal(out, want):
            name = None
            if isinstance(out, torch.Tensor) and tuple(out.shape) == (T, T):
                name = next((n for n, c in visible.window_variants(T, w).items()
                             if torch.equal(out.bool(), c) and not torch.equal(c, want)), None)
            raise CheckFailed(f"sliding_window_mask({T}, {w}) differs from the window rule", hint=name,
                              reread=visible.SEC_LOCAL, details=[f"case: T={T}, window={w} (exact, bool)"])


def _config(g):
    H = randint(g, 1, 4)
    return dict(vocab_size=randint(g, 7, 30), block_size=randint(g, 10, 20), n_layer=randint(g, 2, 3),
                n_head=H, d_model=H * 4 * randint(g, 1, 2))


def generate_cached_equal(generate_cached, g) -> None:
    for case in range(4):
        cfg = _config(g)
        model = visible.tiny_gpt(randint(g, 0, 999), **cfg)
        B, T = randint(g, 1, 3), randint(g, 2, cfg["block_size"] - 2)
        n = randint(g, 1, cfg["block_size"] - T)
        kw = [{}, {"top_k": 3}, {"temperature": 0.8, "top_k": 5}, {"temperature": 0}][case]
        visible._compare_generation(generate_cached, model, torch.randint(cfg["vocab_size"], (B, T), generator=g), n,
                                    f"random GPT{tuple(cfg.values())}, prompt ({B}, {T}), {n} tokens", **kw)
    for n_layer, T in ((1, randint(g, 2, 6)), (randint(g, 2, 3), 2)):       # one block; a two-token prompt
        cfg = {**_config(g), "n_layer": n_layer, "n_head": 4, "d_model": 32}
        n = randint(g, 4, cfg["block_size"] - T)
        visible._compare_generation(generate_cached, visible.tiny_gpt(randint(g, 0, 999), **cfg),
                                    torch.randint(cfg["vocab_size"], (2, T), generator=g), n,
                                    f"random GPT{tuple(cfg.values())}, prompt (2, {T}), {n} tokens")


def generate_cached_steps(generate_cached, g) -> None:
    cfg = _config(g)
    model = visible.tiny_gpt(randint(g, 0, 999), **cfg)
    T = randint(g, 2, cfg["block_size"] - 4)
    n = randint(g, 2, cfg["block_size"] - T)
    rec = visible._Recorder(model)
    try:
        visible._gen_cached(generate_cached, model, torch.randint(cfg["vocab_size"], (2, T), generator=g), n,
                            generator=torch.Generator().manual_seed(1))
    finally:
        rec.remove()
    if rec.grad:
        raise CheckFailed("generate_cached runs the blocks with gradients enabled", reread=visible.SEC_CACHE,
                          hint="decorate generate_cached with @torch.no_grad() (the exercise asks for it)")
    L = len(model.blocks)
    widths = [rec.ln[i] for i in range(0, len(rec.ln), L)]
    if rec.full or widths[:1] != [T] or any(w != 1 for w in widths[1:]) or len(widths) not in (n, n + 1):
        raise CheckFailed("generate_cached does not read the prompt once and then one token per step",
                          reread=visible.SEC_CACHE,
                          hint="not cached: after the prompt, feed only the newest token and take the older keys "
                               "and values from the cache",
                          details=[f"case: GPT{tuple(cfg.values())}, prompt (2, {T}), {n} tokens: positions per pass "
                                   f"{widths[:10]}, calls of the model's own forward {rec.full}"])


guard(globals())  # every check records warnings instead of printing them (core.guard)
