"""Misconception catalog for exercise 09 (online_softmax, tiled_attention, GroupedQueryAttention,
apply_rope, sliding_window_mask, generate_cached)."""

from . import Alternative, Mistake, edit

A = "09_attention_at_scale"

_NOT_CACHED = '''@torch.no_grad()
def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    model.eval()
    for _ in range(max_new_tokens):
        logits = model(idx)[0][:, -1, :]
        if temperature == 0:
            nxt = logits.argmax(dim=-1, keepdim=True)
        else:
            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1, generator=generator)
        idx = torch.cat([idx, nxt], dim=1)
    return idx
'''

_NO_MAX = '''def online_softmax(x, block=4):
    l = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    for s in range(0, x.shape[-1], block):
        l = l + torch.exp(x[..., s:s + block]).sum(dim=-1, keepdim=True)
    return torch.exp(x) / l
'''

_WINDOW_SLICES = '''def sliding_window_mask(T, window):
    mask = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        mask[i, i - window + 1:i + 1] = True
    return mask
'''

MISTAKES = [
    # -- online_softmax ----------------------------------------------------------------------
    Mistake(
        id="online_sum_not_rescaled", cell="online_softmax",
        description="the running sum is not rescaled when a block raises the maximum: old terms keep the old maximum",
        source=edit(A, "online_softmax", ("l = l * torch.exp(m - ref) + ", "l = l + ")),
        must_fail=("test_online_softmax_values",), hint="running sum is not rescaled", label="sum not rescaled"),
    Mistake(
        id="online_rescale_inverted", cell="online_softmax",
        description="the sum is rescaled by exp(new max - old max) instead of exp(old max - new max)",
        source=edit(A, "online_softmax", ("torch.exp(m - ref) + ", "torch.exp(ref - m) + ")),
        must_fail=("test_online_softmax_values",), hint="rescaling factor is inverted"),
    Mistake(
        id="online_no_max", cell="online_softmax",
        description="exponentiates the scores without a running maximum: right for small values, inf/inf = nan "
                    "for large ones",
        source=_NO_MAX,
        must_fail=("test_online_softmax_edge",), hint="no running maximum is subtracted", visible=True),
    Mistake(
        id="online_last_block_skipped", cell="online_softmax",
        description="the loop stops before a last, shorter block: right only when n is a multiple of block",
        source=edit(A, "online_softmax", ("range(0, x.shape[-1], block)", "range(0, x.shape[-1] - block + 1, block)")),
        must_fail=("test_online_softmax_edge",), hint="last, shorter block is skipped", visible=True),
    Mistake(
        id="online_nan_on_masked_block", cell="online_softmax",
        description="no guard for a maximum that is still -inf: a whole block of -inf gives nan",
        source=edit(A, "online_softmax", ('ref = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)',
                                          "ref = m_new")),
        must_fail=("test_online_softmax_edge",), hint="nan where a whole block is -inf", visible=True),
    # issue 34: shipped and fixed in FlagGems (flagos-ai/FlagGems PR #330: a loop-style online softmax kernel
    # gave nan for -inf inputs) and reported in Dao-AILab/quack PR #64 (a warp whose values are all -inf)
    # -- tiled_attention ---------------------------------------------------------------------
    Mistake(
        id="tiled_acc_not_rescaled", cell="tiled_attention",
        description="the running output is not rescaled when a tile raises the maximum",
        source=edit(A, "tiled_attention", ("acc = acc * rescale + ", "acc = acc + ")),
        must_fail=("test_tiled_attention_values",), hint="acc is not rescaled", label="output not rescaled"),
    Mistake(
        id="tiled_sum_not_rescaled", cell="tiled_attention",
        description="the running sum is not rescaled when a tile raises the maximum",
        source=edit(A, "tiled_attention", ("l = l * rescale + ", "l = l + ")),
        must_fail=("test_tiled_attention_values",), hint="sum l is not rescaled", label="sum not rescaled"),
    Mistake(
        id="tiled_per_tile_softmax", cell="tiled_attention",
        description="each tile is normalised by its own sum and the tiles' outputs added: weights no longer sum to 1",
        source=edit(A, "tiled_attention", ("acc = acc * rescale + p @ v[..., s:s + block, :]",
                                           "acc = acc * rescale + (p / p.sum(dim=-1, keepdim=True)) @ v[..., s:s + block, :]"),
                    ("return acc / l", "return acc")),
        must_fail=("test_tiled_attention_values", "test_tiled_attention_mask"), hint="normalised by its own sum"),
    Mistake(
        id="tiled_no_scaling", cell="tiled_attention",
        description="scores not divided by sqrt(d)",
        source=edit(A, "tiled_attention", (" / math.sqrt(q.shape[-1])", "")),
        must_fail=("test_tiled_attention_values",), hint="not scaled by 1/sqrt(d)", label="no sqrt(d) scaling"),
    Mistake(
        id="tiled_scaled_by_dv", cell="tiled_attention",
        description="scores divided by the square root of the value width: right only when d == dv",
        source=edit(A, "tiled_attention", ("math.sqrt(q.shape[-1])", "math.sqrt(v.shape[-1])")),
        must_fail=("test_tiled_attention_values", "test_tiled_attention_mask"), hint="scaled by the value width",
        visible=True),
    Mistake(
        id="tiled_four_dims_only", cell="tiled_attention",
        description="slices and transposes by fixed axis numbers: works for (B, H, T, d) only",
        source=edit(A, "tiled_attention",
                    ("k[..., s:s + block, :].transpose(-2, -1)", "k[:, :, s:s + block, :].transpose(2, 3)")),
        must_fail=("test_tiled_attention_values", "test_tiled_attention_mask"), hint="leading axes", visible=True),
    Mistake(
        id="tiled_mask_inverted", cell="tiled_attention",
        description="masked_fill with the mask itself: True treated as blocked",
        source=edit(A, "tiled_attention", ("~mask[..., s:s + block]", "mask[..., s:s + block]")),
        must_fail=("test_tiled_attention_mask",), hint="mask is inverted"),
    Mistake(
        id="tiled_nan_on_masked_tile", cell="tiled_attention",
        description="no guard for a maximum that is still -inf: a tile masked for a whole query row gives nan",
        source=edit(A, "tiled_attention", ('ref = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)',
                                           "ref = m_new")),
        must_fail=("test_tiled_attention_mask",), hint="nan where a whole tile is masked", visible=True),
    # -- GroupedQueryAttention ---------------------------------------------------------------
    Mistake(
        id="gqa_heads_tiled", cell="GroupedQueryAttention",
        description="key/value heads tiled (kv0, kv1, kv0, kv1) instead of repeated in place (kv0, kv0, kv1, kv1)",
        source=edit(A, "GroupedQueryAttention",
                    ("split_heads(k, self.n_kv_heads).repeat_interleave(group, dim=1)",
                     "split_heads(k, self.n_kv_heads).repeat(1, group, 1, 1)"),
                    ("split_heads(v, self.n_kv_heads).repeat_interleave(group, dim=1)",
                     "split_heads(v, self.n_kv_heads).repeat(1, group, 1, 1)")),
        must_fail=("test_gqa_groups",), hint="repeated in the wrong order", label="kv heads in the wrong order"),
    Mistake(
        id="gqa_keys_values_swapped", cell="GroupedQueryAttention",
        description="the first half of W_kv's output used as the values and the second as the keys",
        source=edit(A, "GroupedQueryAttention", ("k, v = self.W_kv(x).split(", "v, k = self.W_kv(x).split(")),
        must_fail=("test_gqa_as_mha", "test_gqa_groups"), hint="keys and values swapped"),
    Mistake(
        id="gqa_full_kv", cell="GroupedQueryAttention",
        description="n_kv_heads ignored: W_kv has n_heads key and value heads (plain multi-head attention)",
        source=edit(A, "GroupedQueryAttention",
                    ("nn.Linear(d_model, 2 * n_kv_heads * self.d_head)", "nn.Linear(d_model, 2 * d_model)"),
                    ("split(self.n_kv_heads * self.d_head, dim=-1)", "split(D, dim=-1)"),
                    ("split_heads(k, self.n_kv_heads).repeat_interleave(group, dim=1)", "split_heads(k, self.n_heads)"),
                    ("split_heads(v, self.n_kv_heads).repeat_interleave(group, dim=1)", "split_heads(v, self.n_heads)")),
        must_fail=("test_gqa_groups",), hint="W_kv has n_heads key and value heads", label="n_kv_heads ignored"),
    Mistake(
        id="gqa_mask_or_causal", cell="GroupedQueryAttention",
        description="with both a mask and is_causal, the causal mask is dropped: right when only one is given",
        source=edit(A, "GroupedQueryAttention", ("mask = causal if mask is None else mask & causal",
                                                 "mask = causal if mask is None else mask")),
        must_fail=("test_gqa_as_mha",), hint="only one is applied", visible=True),
    # issue 24: a bug a public trainer shipped and fixed (ByteDance-Seed/VeOmni PR #162: its repeat_kv,
    # written for (B, heads, T, Dh), was applied to (B, T, heads, Dh) and repeated the wrong axis)
    Mistake(
        id="gqa_repeat_on_time_axis", cell="GroupedQueryAttention",
        description="key/value heads repeated along the time axis (dim=2) instead of the head axis (dim=1): "
                    "right only when n_kv_heads == n_heads",
        source=edit(A, "GroupedQueryAttention", ("repeat_interleave(group, dim=1)", "repeat_interleave(group, dim=2)")),
        must_fail=("test_gqa_groups",), label="kv repeated along time"),
    # -- apply_rope --------------------------------------------------------------------------
    Mistake(
        id="rope_half_split", cell="apply_rope",
        description="pairs x[i] with x[i + d/2] (the half-split convention), not the adjacent pairs asked for",
        source=edit(A, "apply_rope", ("even, odd = x[..., 0::2], x[..., 1::2]", "even, odd = x[..., :d // 2], x[..., d // 2:]"),
                    ("y[..., 0::2] = even * cos - odd * sin", "y[..., :d // 2] = even * cos - odd * sin"),
                    ("y[..., 1::2] = even * sin + odd * cos", "y[..., d // 2:] = even * sin + odd * cos")),
        must_fail=("test_apply_rope_values", "test_apply_rope_positions"), hint="ADJACENT pairs",
        label="RoPE pairs not adjacent"),
    Mistake(
        id="rope_wrong_frequencies", cell="apply_rope",
        description="frequencies base ** (-i / d) instead of base ** (-2i / d)",
        source=edit(A, "apply_rope", ("-torch.arange(0, d, 2, dtype=torch.float64) / d",
                                      "-torch.arange(0, d // 2, dtype=torch.float64) / d")),
        must_fail=("test_apply_rope_values",), hint="wrong frequencies"),
    Mistake(
        id="rope_clockwise", cell="apply_rope",
        description="rotates by minus the angle (the sine terms' signs swapped)",
        source=edit(A, "apply_rope", ("even * cos - odd * sin", "even * cos + odd * sin"),
                    ("even * sin + odd * cos", "odd * cos - even * sin")),
        must_fail=("test_apply_rope_values",), hint="rotates clockwise"),
    Mistake(
        id="rope_positions_ignored", cell="apply_rope",
        description="always rotates by 0 .. T-1, whatever positions says: right only for the default",
        source=edit(A, "apply_rope", ("    if positions is None:\n        positions = torch.arange(T)",
                                      "    positions = torch.arange(T)")),
        must_fail=("test_apply_rope_positions",), hint="positions argument is ignored", visible=True),
    Mistake(
        id="rope_base_ignored", cell="apply_rope",
        description="the base is fixed at 10000: right only for the default base",
        source=edit(A, "apply_rope", ("theta = base ** (", "theta = 10000.0 ** (")),
        must_fail=("test_apply_rope_values",), hint="base argument is ignored", visible=True),
    # -- sliding_window_mask -----------------------------------------------------------------
    Mistake(
        id="window_one_too_wide", cell="sliding_window_mask",
        description="query i sees window + 1 keys (i - j <= window)",
        source=edit(A, "sliding_window_mask", ("(j > i - window)", "(j >= i - window)")),
        must_fail=("test_sliding_window_mask",), hint="not window + 1", label="window off by one (wide)"),
    Mistake(
        id="window_one_too_narrow", cell="sliding_window_mask",
        description="query i sees window - 1 keys: itself not counted in the window",
        source=edit(A, "sliding_window_mask", ("(j > i - window)", "(j > i - window + 1)")),
        must_fail=("test_sliding_window_mask",), hint="not window - 1", label="window off by one (narrow)"),
    Mistake(
        id="window_not_causal", cell="sliding_window_mask",
        description="a symmetric band |i - j| < window: queries see the future",
        source=edit(A, "sliding_window_mask", ("(j <= i) & (j > i - window)", "(i - j).abs() < window")),
        must_fail=("test_sliding_window_mask",), hint="not causal"),
    Mistake(
        id="window_negative_slice", cell="sliding_window_mask",
        description="slices each row from i - window + 1 without clamping at 0: the first rows are emptied; "
                    "right only for window = 1",
        source=_WINDOW_SLICES,
        must_fail=("test_sliding_window_mask",), hint="clamp the start at 0", visible=True),
    # -- generate_cached ---------------------------------------------------------------------
    Mistake(
        id="cache_positions_restart", cell="generate_cached",
        description="each new token gets position embedding 0.. again instead of the position after the cache",
        source=edit(A, "generate_cached",
                    ("model.pos_emb(torch.arange(past, past + t))", "model.pos_emb(torch.arange(t))")),
        must_fail=("test_generate_cached_equal",), hint="restart at 0", label="positions restart in the cache"),
    Mistake(
        id="cache_replaced", cell="generate_cached",
        description="the cache is overwritten by the newest key and value instead of appended to",
        source=edit(A, "generate_cached", ("""            if layer[0] is not None:
                k, v = torch.cat([layer[0], k], dim=2), torch.cat([layer[1], v], dim=2)
""", "")),
        must_fail=("test_generate_cached_equal",), hint="replaced instead of appended"),
    Mistake(
        id="cache_prefill_not_causal", cell="generate_cached",
        description="the prompt is read without the causal mask",
        source=edit(A, "generate_cached", ("is_causal=(past == 0 and t > 1)", "is_causal=False")),
        must_fail=("test_generate_cached_equal",), hint="without the causal mask"),
    Mistake(
        id="cache_not_used", cell="generate_cached",
        description="runs the whole model on the whole text at every step (lecture 08's generate): right tokens, "
                    "no cache",
        source=_NOT_CACHED,
        must_fail=("test_generate_cached_steps",), hint="not cached"),
    Mistake(
        id="cache_sampling_options_ignored", cell="generate_cached",
        description="temperature and top_k are ignored: right only for the defaults",
        source=edit(A, "generate_cached", ("""            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float("-inf"))
""", "")),
        must_fail=("test_generate_cached_equal",), hint="temperature and top_k are ignored", visible=True),
    # -- issue 24: a bug public KV-cache decoders shipped and later fixed ----------------------
    Mistake(
        id="cache_decode_is_causal", cell="generate_cached",
        description="is_causal=True at every step: with one new query and a longer cache, SDPA's causal mask is "
                    "aligned top-left, so the new token sees only the first key (pytorch/pytorch issue #144858; "
                    "onnx/onnx PR #8068 fixed the same alignment in the ONNX Attention operator for KV-cache "
                    "decode)",
        source=edit(A, "generate_cached", ("is_causal=(past == 0 and t > 1)", "is_causal=True")),
        must_fail=("test_generate_cached_equal",), hint="is_causal=True while decoding",
        label="is_causal while decoding"),
]

ALTERNATIVES = [
    Alternative(
        id="written_differently",
        description="online softmax with torch.split and nan_to_num; tiled attention over query tiles too, with "
                    "einsum; GQA with expand + reshape and an explicit softmax; RoPE with complex numbers; the window "
                    "from two triangles; the cache as a small class, linear layers called through F.linear",
        cells={
            "online_softmax": '''def online_softmax(x, block=4):
    m = x.new_full((*x.shape[:-1], 1), -math.inf)
    total = x.new_zeros((*x.shape[:-1], 1))
    for chunk in torch.split(x, block, dim=-1):
        new_max = torch.maximum(m, chunk.amax(dim=-1, keepdim=True))
        shift = new_max.nan_to_num(neginf=0.0)
        total = total * (m - shift).exp() + (chunk - shift).exp().sum(-1, keepdim=True)
        m = new_max
    return (x - m).exp() / total
''',
            "tiled_attention": '''def tiled_attention(q, k, v, mask=None, block=16):
    d, Tq, Tk = q.shape[-1], q.shape[-2], k.shape[-2]
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    if mask is not None:
        mask = mask.broadcast_to(*batch, Tq, Tk)
    rows = []
    for a in range(0, Tq, block):                              # tiles of queries too
        qa = q[..., a:a + block, :]
        best = torch.full((*qa.shape[:-1], 1), -math.inf)
        denom = torch.zeros_like(best)
        out = torch.zeros(*qa.shape[:-1], v.shape[-1])
        for b in range(0, Tk, block):
            s = torch.einsum("...id,...jd->...ij", qa, k[..., b:b + block, :]) / d ** 0.5
            if mask is not None:
                s = torch.where(mask[..., a:a + block, b:b + block], s, -math.inf)
            new = torch.maximum(best, s.amax(-1, keepdim=True))
            shift = torch.where(new.isinf(), 0.0, new)
            w = (s - shift).exp()
            c = (best - shift).exp()
            denom = denom * c + w.sum(-1, keepdim=True)
            out = out * c + torch.einsum("...ij,...jd->...id", w, v[..., b:b + block, :])
            best = new
        rows.append(out / denom)
    return torch.cat(rows, dim=-2)
''',
            "GroupedQueryAttention": '''class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        hd = d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_kv = nn.Linear(d_model, 2 * n_kv_heads * hd)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None, is_causal=False):
        B, T, D = x.shape
        H, Hkv = self.n_heads, self.n_kv_heads
        hd = D // H
        q = self.W_q(x).view(B, T, H, hd).transpose(1, 2)
        kv = self.W_kv(x).view(B, T, 2, Hkv, hd)
        k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)          # (B, Hkv, T, hd)
        k = k[:, :, None].expand(B, Hkv, H // Hkv, T, hd).reshape(B, H, T, hd)
        v = v[:, :, None].expand(B, Hkv, H // Hkv, T, hd).reshape(B, H, T, hd)
        s = q @ k.transpose(-1, -2) / math.sqrt(hd)
        allowed = torch.ones(T, T, dtype=torch.bool)
        if mask is not None:
            allowed = allowed & mask
        if is_causal:
            allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
        w = torch.exp(s.masked_fill(~allowed, -math.inf) - s.amax(-1, keepdim=True))
        y = (w / w.sum(-1, keepdim=True)) @ v
        return self.W_o(y.transpose(1, 2).reshape(B, T, D))
''',
            "apply_rope": '''def apply_rope(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    pos = torch.arange(T) if positions is None else positions
    freqs = 1.0 / base ** (torch.arange(d // 2, dtype=torch.float64) * 2 / d)
    turn = torch.polar(torch.ones(T, d // 2, dtype=torch.float64), torch.outer(pos.double(), freqs))
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * turn).reshape(x.shape).to(x.dtype)
''',
            "sliding_window_mask": '''def sliding_window_mask(T, window):
    ones = torch.ones(T, T, dtype=torch.bool)
    return torch.tril(ones) & ~torch.tril(ones, diagonal=-window)
''',
            "generate_cached": '''class KVCache:
    def __init__(self, n):
        self.keys, self.values = [None] * n, [None] * n

    def add(self, i, k, v):
        if self.keys[i] is not None:
            k = torch.cat((self.keys[i], k), dim=-2)
            v = torch.cat((self.values[i], v), dim=-2)
        self.keys[i], self.values[i] = k, v
        return k, v


def cached_logits(model, tokens, cache, start):
    B, t = tokens.shape
    h = model.tok_emb(tokens) + model.pos_emb.weight[start:start + t]
    for i, blk in enumerate(model.blocks):
        att = blk.attn
        D, H = att.d_model, att.n_heads
        z = F.linear(blk.ln1(h), att.W_qkv.weight, att.W_qkv.bias)
        q, k, v = (z[..., j * D:(j + 1) * D].reshape(B, t, H, D // H).transpose(1, 2) for j in range(3))
        k, v = cache.add(i, k, v)
        s = q @ k.transpose(-1, -2) / math.sqrt(D // H)
        keep = torch.arange(start + t)[None, :] <= torch.arange(start, start + t)[:, None]
        y = s.masked_fill(~keep, -math.inf).softmax(-1) @ v
        h = h + att.W_o(y.transpose(1, 2).reshape(B, t, D))
        h = h + blk.ff(blk.ln2(h))
    return model.lm_head(model.ln_f(h[:, -1]))


def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    model.eval()
    with torch.no_grad():
        cache = KVCache(len(model.blocks))
        logits = cached_logits(model, idx, cache, 0)
        for n in range(max_new_tokens):
            if not temperature:                                  # greedy
                token = logits.max(dim=-1, keepdim=True).indices
            else:
                logits = logits / temperature
                if top_k:
                    v, _ = torch.topk(logits, min(top_k, logits.shape[-1]))
                    logits = torch.where(logits < v[:, -1:], -math.inf, logits)
                token = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            idx = torch.cat((idx, token), 1)
            if n < max_new_tokens - 1:
                logits = cached_logits(model, token, cache, idx.shape[1] - 1)
    return idx
''',
        },
    ),
    Alternative(
        id="warnings_tensor_copies",
        description="apply_rope and sliding_window_mask that copy tensors with torch.tensor(tensor) (PyTorch warns "
                    "about it): correct, so full marks, warnings or not",
        cells={
            "apply_rope": edit(A, "apply_rope", ("angle = positions.double()[:, None]",
                                                 "angle = torch.tensor(positions).double()[:, None]")),
            "sliding_window_mask": edit(A, "sliding_window_mask", ("i = torch.arange(T).unsqueeze(1)",
                                                                   "i = torch.tensor(torch.arange(T)).unsqueeze(1)")),
        }),
]

# issue 22: one pass, and no (Tq, Tk) score matrix (the checks watch the operations, ex09.Watch)
MISTAKES += [
    Mistake(
        id="online_max_first", cell="online_softmax",
        description="the whole row's maximum taken first (x.max), then the blocks summed: the right values, "
                    "but the two-pass softmax",
        source=edit(A, "online_softmax", ('m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype)',
                                          "m = x.max(dim=-1, keepdim=True).values")),
        must_fail=("test_online_softmax_values",), hint="two-pass softmax", label="max of the whole row first"),
    Mistake(
        id="online_two_loops", cell="online_softmax",
        description="one loop over the blocks for the maximum, a second one for the sum: the right values, two passes",
        source=edit(A, "online_softmax", ("    for s in range(0, x.shape[-1], block):\n        xb =",
                                          "    for s in range(0, x.shape[-1], block):\n"
                                          "        m = torch.maximum(m, x[..., s:s + block].max(dim=-1, keepdim=True).values)\n"
                                          "    for s in range(0, x.shape[-1], block):\n        xb =")),
        must_fail=("test_online_softmax_values",), hint="two-pass softmax", label="two loops over the blocks"),
    Mistake(
        id="tiled_full_scores", cell="tiled_attention",
        description="every tile sliced out of the whole (Tq, Tk) score matrix: the right values, the memory "
                    "tiling was meant to save",
        source=edit(A, "tiled_attention", ("scores = q @ k[..., s:s + block, :].transpose(-2, -1) / math.sqrt(q.shape[-1])",
                                           "scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))[..., s:s + block]")),
        must_fail=("test_tiled_attention_values",), hint="never build the whole", label="whole score matrix built"),
]

# surviving mutants of the solution (tools/mutation.py, issue 24): the signatures' default blocks
MISTAKES += [
    Mistake(
        id="online_default_block_5", cell="online_softmax",
        description="block=5 as the default: right values whatever the block, but not the block the signature gives",
        source=edit(A, "online_softmax", ("block: int = 4)", "block: int = 5)")),
        must_fail=("test_online_softmax_values",), hint="is the default the signature gives",
        label="default block 5"),
    Mistake(
        id="tiled_default_block_17", cell="tiled_attention",
        description="block=17 as the default: right values whatever the block, tiles one key wider than the "
                    "signature says",
        source=edit(A, "tiled_attention", ("block: int = 16)", "block: int = 17)")),
        must_fail=("test_tiled_attention_values",), hint="is the default the signature gives",
        label="default block 17"),
]

# surviving mutants of the solution (tools/mutation.py, issue 24): generate_cached
MISTAKES += [
    Mistake(
        id="cache_with_gradients", cell="generate_cached",
        description="generate_cached without @torch.no_grad(): the right tokens, every step records gradients",
        source=edit(A, "generate_cached", ("@torch.no_grad()\n", "")),
        must_fail=("test_generate_cached_steps",), hint="@torch.no_grad()", label="cache records gradients"),
    Mistake(
        id="cache_past_from_layer_1", cell="generate_cached",
        description="the number of cached positions read from the second layer's cache: right for two layers "
                    "or more, an IndexError for a one-block GPT",
        source=edit(A, "generate_cached", ("cache[0][0].shape[2]", "cache[1][0].shape[2]")),
        must_fail=("test_generate_cached_equal",), hint=None, label="cache length from layer 1"),
    Mistake(
        id="cache_prompt_causal_from_3", cell="generate_cached",
        description="the prompt read causally only from three tokens on: a two-token prompt's first position "
                    "sees the second, and the deeper layers cache keys that know the future",
        source=edit(A, "generate_cached", ("is_causal=(past == 0 and t > 1)", "is_causal=(past == 0 and t > 2)")),
        must_fail=("test_generate_cached_equal",), hint="two-token prompt", label="two-token prompt not causal"),
]

# issue 34: slips an outside reading found (a learner's own attempts, and bugs public code shipped)
_NAN_BLOCK_FACTORED = '''def online_softmax(x, block=4):
    m = torch.full(x.shape[:-1] + (1,), float("-inf"))
    l = torch.zeros_like(m)
    for s in range(0, x.shape[-1], block):
        xb = x[..., s:s + block]
        bm = xb.amax(dim=-1, keepdim=True)
        m_new = torch.maximum(m, bm)
        l = l * torch.exp(m - m_new) + torch.exp(bm - m_new) * torch.exp(xb - bm).sum(dim=-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / l
'''

# Hugging Face's rotate_half layout (pairs x[i], x[i + d/2]) with the angles repeated in place, as adjacent
# pairs need: the two conventions mixed
_ROPE_HALF_WITH_INPLACE_ANGLES = '''def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    pos = torch.arange(T) if positions is None else positions
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2).float() / d)
    emb = torch.outer(pos.float(), inv_freq).repeat_interleave(2, dim=-1)          # (T, d)
    return x * emb.cos() + rotate_half(x) * emb.sin()
'''

MISTAKES += [
    Mistake(
        id="online_max_starts_at_0", cell="online_softmax",
        description="the running maximum starts at 0 instead of -inf: right while a row reaches above about -80, "
                    "nan for a row like [-1000, -1001, -1002] (FluxML/NNlib.jl PR #43 fixed the same "
                    "max(0, row max) in its softmax, which failed for softmax([-10000, -10000]))",
        source=edit(A, "online_softmax", ('m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype)',
                                          "m = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)")),
        must_fail=("test_online_softmax_edge",), hint="running maximum starts at 0", visible=True,
        label="running max starts at 0"),
    Mistake(
        id="online_block_maximum_no_guard", cell="online_softmax",
        description="each block's terms taken against the block's own maximum and then rescaled, with no guard for "
                    "a maximum still at -inf: a first block that is all -inf makes the row nan",
        source=_NAN_BLOCK_FACTORED,
        must_fail=("test_online_softmax_edge",), hint="nan where a whole block is -inf", visible=True,
        label="nan on a block of -inf"),
    Mistake(
        id="online_ignores_block", cell="online_softmax",
        description="one entry per step whatever block says: the right values, but not the blocks the signature asks "
                    "for",
        source=edit(A, "online_softmax", ("for s in range(0, x.shape[-1], block):\n        xb = x[..., s:s + block]",
                                          "for s in range(x.shape[-1]):\n        xb = x[..., s:s + 1]")),
        must_fail=("test_online_softmax_values",), hint="block argument is ignored", visible=True,
        label="block ignored"),
    Mistake(
        id="tiled_mask_four_dims_only", cell="tiled_attention",
        description="the mask's tile taken by fixed axes (mask[:, :, :, s:s + block]): works for a 4-D padding mask "
                    "only, an IndexError for a (Tq, Tk) mask",
        source=edit(A, "tiled_attention", ("~mask[..., s:s + block]", "~mask[:, :, :, s:s + block]")),
        must_fail=("test_tiled_attention_mask",), hint="fails only when given a mask", visible=True,
        label="mask tiled by fixed axes"),
    Mistake(
        id="rope_angles_tiled_adjacent_pairs", cell="apply_rope",
        description="adjacent pairs, but the d angles laid out as the half-split layout's (theta_0 .. theta_(d/2-1) "
                    "twice, one copy after the other): the two entries of a pair turn by different angles "
                    "(facebookresearch/vjepa2 PR #15 reports the same .repeat where repeat_interleave was meant)",
        source=edit(A, "apply_rope",
                    ("angle = positions.double()[:, None] * theta[None, :]",
                     "angle = positions.double()[:, None] * theta.repeat(2)[None, :]"),
                    ("y[..., 0::2] = even * cos - odd * sin", "y[..., 0::2] = even * cos[:, 0::2] - odd * sin[:, 0::2]"),
                    ("y[..., 1::2] = even * sin + odd * cos", "y[..., 1::2] = even * sin[:, 1::2] + odd * cos[:, 1::2]")),
        must_fail=("test_apply_rope_values", "test_apply_rope_positions"), hint="frequencies do not match the pairs",
        label="RoPE angles tiled"),
    Mistake(
        id="rope_half_pairs_inplace_angles", cell="apply_rope",
        description="rotate_half's pairs (x[i], x[i + d/2]) with the angles repeated in place for adjacent pairs: "
                    "two conventions mixed (raiyanyahya/how-to-train-your-gpt issue #6, fixed in PR #7)",
        source=_ROPE_HALF_WITH_INPLACE_ANGLES,
        must_fail=("test_apply_rope_values", "test_apply_rope_positions"), hint="frequencies do not match the pairs",
        label="RoPE layouts mixed"),
    Mistake(
        id="rope_frequencies_shifted", cell="apply_rope",
        description="the exponent (2k - 1) / d with k counted from 1, i.e. -(2i + 1) / d: every frequency off by half "
                    "a pair (stanford-cs336/assignment1-basics issue #22: its handout wrote (2k - 1)/d for the "
                    "paper's 2(k - 1)/d, fixed in 1.0.6)",
        source=edit(A, "apply_rope", ("-torch.arange(0, d, 2, dtype=torch.float64) / d",
                                      "-torch.arange(1, d + 1, 2, dtype=torch.float64) / d")),
        must_fail=("test_apply_rope_values", "test_apply_rope_positions"), hint="frequencies are off by one",
        label="RoPE frequencies shifted"),
    Mistake(
        id="rope_squeeze_breaks_one_pair", cell="apply_rope",
        description="the angles squeezed to drop size-1 axes: right for d >= 4, a shape error for d = 2 (one pair) "
                    "with T > 1",
        source=edit(A, "apply_rope", ("cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)",
                                      "cos, sin = torch.cos(angle).squeeze().to(x.dtype), "
                                      "torch.sin(angle).squeeze().to(x.dtype)")),
        must_fail=("test_apply_rope_values", "test_apply_rope_positions"), hint="d = 2 is a single pair",
        visible=True, label="RoPE fails for d = 2"),
    Mistake(
        id="cache_temperature_zero_divides", cell="generate_cached",
        description="temperature=0 divided by instead of taken as greedy decoding: inf and nan logits, and "
                    "torch.multinomial refuses them (karpathy/nanoGPT issue #738; Lightning-AI/litgpt issue #401)",
        source=edit(A, "generate_cached", (("        if temperature == 0:", "generator=generator)   # (B, 1)\n"),
                                           """        logits = logits / temperature
        if top_k is not None:
            kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        nxt = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1, generator=generator)   # (B, 1)
""")),
        must_fail=("test_generate_cached_equal",), hint="temperature=0 means greedy", visible=True,
        label="temperature 0 divides"),
    Mistake(
        id="cache_replaced_positions_counted", cell="generate_cached",
        description="the cache overwritten by the newest key and value, with the positions counted apart from it "
                    "(so they stay right): each new token attends to itself alone",
        source=edit(A, "generate_cached",
                    ("    cache = [[None, None] for _ in model.blocks]", "    seen = [0]\n    cache = [[None, None] for _ in model.blocks]"),
                    ("past = 0 if cache[0][0] is None else cache[0][0].shape[2]", "past = seen[0]"),
                    ("        t = tokens.shape[1]\n", "        t = tokens.shape[1]\n        seen[0] += t\n"),
                    ("""            if layer[0] is not None:
                k, v = torch.cat([layer[0], k], dim=2), torch.cat([layer[1], v], dim=2)
""", "")),
        must_fail=("test_generate_cached_equal",), hint="replaced instead of appended", label="cache replaced"),
]

# issue 46: hints that stayed generic (an outside review): each names the mistake and its lecture section now
MISTAKES += [
    Mistake(
        id="online_lanes_no_guard", cell="online_softmax",
        description="each lane of a block (entry j of every block) keeps its own running maximum and sum, combined "
                    "at the end, with no guard for a maximum still at -inf: a lane whose first entries are -inf "
                    "makes its row nan, though no whole block is -inf (the warp whose values are all -inf of "
                    "Dao-AILab/quack PR #64, in a GPU kernel's layout)",
        source=edit(A, "online_softmax",
                    ("x.shape[:-1] + (1,), float(\"-inf\"), dtype=x.dtype)      # (..., 1) running max",
                     "x.shape[:-1] + (min(block, x.shape[-1]),), float(\"-inf\"), dtype=x.dtype)   # per lane"),
                    ("x.shape[:-1] + (1,), dtype=x.dtype)                      # (..., 1) running sum",
                     "x.shape[:-1] + (min(block, x.shape[-1]),), dtype=x.dtype)   # per lane"),
                    (("m_new = torch.maximum(m, xb.max(", "m = m_new\n"),
                     "w = xb.shape[-1]                                                     # lanes in this block\n"
                     "        m_new = torch.maximum(m[..., :w], xb)\n"
                     "        l[..., :w] = l[..., :w] * torch.exp(m[..., :w] - m_new) + torch.exp(xb - m_new)\n"
                     "        m[..., :w] = m_new\n"),
                    ("return torch.exp(x - m) / l",
                     "M = m.max(dim=-1, keepdim=True).values                                   # the lanes combined\n"
                     "    return torch.exp(x - M) / (l * torch.exp(m - M)).sum(dim=-1, keepdim=True)")),
        must_fail=("test_online_softmax_edge",), hint="the -inf guard is missing", visible=True,
        label="nan on -inf, lane by lane"),
    Mistake(
        id="rope_clockwise_frequencies_shifted", cell="apply_rope",
        description="two mistakes at once: the frequencies of pair i - 1 (base ** (-2(i - 1) / d)) and the rotation "
                    "turned the other way (x R for R x: the sine terms' signs swapped)",
        source=edit(A, "apply_rope", ("-torch.arange(0, d, 2, dtype=torch.float64) / d",
                                      "-torch.arange(-2, d - 2, 2, dtype=torch.float64) / d"),
                    ("even * cos - odd * sin", "even * cos + odd * sin"),
                    ("even * sin + odd * cos", "odd * cos - even * sin")),
        must_fail=("test_apply_rope_values", "test_apply_rope_positions"),
        hint="rotates clockwise, and the frequencies are off by one", label="RoPE clockwise, frequencies shifted"),
    Mistake(
        id="cache_new_token_no_position", cell="generate_cached",
        description="the prompt gets its position embeddings, each new token none: its token embedding alone "
                    "goes through the blocks",
        source=edit(A, "generate_cached",
                    ("model.tok_emb(tokens) + model.pos_emb(torch.arange(past, past + t))",
                     "model.tok_emb(tokens) + (model.pos_emb(torch.arange(past, past + t)) if past == 0 else 0)")),
        must_fail=("test_generate_cached_equal",), hint="the new token gets no position embedding",
        label="new token without position"),
    Mistake(
        id="tiled_mask_not_tiled", cell="tiled_attention",
        description="the whole mask applied to each tile's scores instead of the tile's columns: right while the "
                    "keys fit in one tile, a shape error once they do not",
        source=edit(A, "tiled_attention", ("~mask[..., s:s + block]", "~mask")),
        must_fail=("test_tiled_attention_mask",), hint="fails only when given a mask", visible=True,
        label="mask not tiled"),
]
