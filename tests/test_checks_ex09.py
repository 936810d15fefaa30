"""Exercise 09 beyond the shared checks of tests/test_checks.py: the visible checks accept the
package's reference (attention_workbook.inference) when told to trust it and name it when a
submission hands it in, the hidden checks refuse it, and the reference module itself is right."""

import pytest
import torch
import torch.nn.functional as F

from attention_workbook import gpt, inference
from attention_workbook.checks import ex09 as checks
from attention_workbook.checks import graded, own
from attention_workbook.checks.core import CheckFailed
from awb_grader.hidden import ex09 as hidden

A = "09_attention_at_scale"
CELLS = {cell: (args[0], check) for cell, _points, check, args in graded.TESTS[A]}   # -> (answer, check)


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_package_reference_passes_visible(cell):
    """The checks accept attention_workbook.inference's versions (when told to trust them)."""
    answer, fn = CELLS[cell]
    reference = getattr(inference, answer)
    if answer == "tiled_attention":       # the lecture's defaults to block=64; the exercise's signature says 16
        def reference(q, k, v, mask=None, block=16):
            return inference.tiled_attention(q, k, v, mask, block)
    with own.trusting():
        getattr(checks, fn)(reference)


def test_visible_check_names_the_reference_a_submission_uses():
    with pytest.raises(CheckFailed, match="workbook's reference `attention_workbook.inference.apply_rope`"):
        checks.apply_rope_values(inference.apply_rope)
    with pytest.raises(CheckFailed, match="not written in the notebook"):
        hidden.apply_rope_values(inference.apply_rope)


# ------------------------------------------------------------------------------------------
# the reference module the lecture uses
# ------------------------------------------------------------------------------------------
def test_reference_attention_pieces_match_pytorch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 11, generator=g) * 30
    x[0, :5] = float("-inf")
    torch.testing.assert_close(inference.online_softmax(x, 4), x.softmax(-1))
    q, k, v = torch.randn(2, 5, 8, generator=g), torch.randn(2, 13, 8, generator=g), torch.randn(2, 13, 3, generator=g)
    mask = torch.rand(5, 13, generator=g) < 0.5
    mask[:, 0] = True
    torch.testing.assert_close(inference.tiled_attention(q, k, v, mask, block=4),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    m = inference.GroupedQueryAttention(24, 6, 2)
    xx = torch.randn(2, 7, 24, generator=g)
    with torch.no_grad():
        q = m.W_q(xx).view(2, 7, 6, 4).transpose(1, 2)
        kk, vv = m.W_kv(xx).chunk(2, -1)
        kk, vv = kk.view(2, 7, 2, 4).transpose(1, 2), vv.view(2, 7, 2, 4).transpose(1, 2)
        want = m.W_o(F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=True)
                     .transpose(1, 2).reshape(2, 7, 24))
        torch.testing.assert_close(m(xx, is_causal=True), want)


def test_gqa_from_mha_with_all_heads_is_the_mha_and_rope_is_relative():
    from attention_workbook.mha import MultiHeadAttention

    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        torch.testing.assert_close(inference.gqa_from_mha(mha, 4)(x, is_causal=True), mha(x, is_causal=True))
        assert inference.gqa_from_mha(mha, 1)(x).shape == (2, 6, 32)
    qv, kv = torch.randn(1, 16), torch.randn(1, 16)
    rope = inference.apply_rope
    score = lambda i, j: float(rope(qv, torch.tensor([i])) @ rope(kv, torch.tensor([j])).T)
    assert abs(score(5, 2) - score(40, 37)) < 1e-4 and abs(score(5, 2) - score(5, 3)) > 1e-3
    assert torch.equal(inference.sliding_window_mask(4, 2), checks.window_oracle(4, 2))


def test_cached_generation_is_the_uncached_text_and_refuses_a_sliding_window():
    torch.manual_seed(0)
    model = gpt.GPT(19, 16, 2, 2, 16).eval()
    idx = torch.randint(19, (3, 4))
    a = gpt.generate(model, idx, 12, top_k=5, generator=torch.Generator().manual_seed(3))
    b = inference.generate_cached(model, idx, 12, top_k=5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    cache = inference.KVCache(2)
    inference.forward_cached(model, idx, cache)
    assert cache.length == 4 and cache.nbytes() == 2 * 2 * 3 * 2 * 4 * 8 * 4
    with pytest.raises(ValueError):
        inference.generate_cached(model, idx, 13)


def test_block_flops_and_cache_size():
    f = inference.block_flops(T=100, D=10)
    assert f == {"projections": 8 * 100 * 100, "feed_forward": 16 * 100 * 100, "attention": 4 * 100 * 100 * 10}
    assert inference.attention_share(60, 10) == 0.5          # T = 6D
    assert inference.cache_bytes_per_token(96, 96, 128, 2) == 4_718_592   # GPT-3: 4.5 MiB per token


def test_lecture_helpers_for_layouts_traffic_and_the_trace():
    """Lecture 09's half-split RoPE is adjacent-pair RoPE on permuted coordinates; the slow-memory
    count is FlashAttention's; the trace's rescaled sum drops exactly where the maximum rises."""
    g = torch.Generator().manual_seed(1)
    x, pos = torch.randn(2, 5, 8, generator=g), torch.tensor([3, 0, 7, 1, 9])
    perm = torch.cat([torch.arange(0, 8, 2), torch.arange(1, 8, 2)])
    torch.testing.assert_close(inference.apply_rope_half(x[..., perm], pos), inference.apply_rope(x, pos)[..., perm])
    assert inference.slow_memory_traffic(1024, 64, 128) == {"standard": 4 * 1024**2 + 4 * 1024 * 64,
                                                            "tiled": 2 * 1024 * 64 * (1 + 8),
                                                            "flash1": 2 * 1024 * 64 + (3 * 1024 * 64 + 4 * 1024) * 8}
    row = torch.tensor([1.0, 0.0, 3.0, 2.0, 5.0])
    trace = inference.online_softmax_trace(row, 2)
    assert [t["l_rescaled"] < t["l_old"] for t in trace] == [False, True, True]
    assert abs(trace[-1]["l"] - float(torch.exp(row - 5.0).sum())) < 1e-6
    toy = inference.ToyAttentionModel(7, 6, d_model=8, kind="full")
    assert toy(torch.randint(7, (2, 6), generator=g)).shape == (2, 6, 7)


def test_cached_generation_with_temperature_zero_is_greedy_like_generate():
    torch.manual_seed(0)
    model = gpt.GPT(19, 16, 2, 2, 16).eval()
    idx = torch.randint(19, (2, 3))
    greedy = gpt.generate(model, idx, 9, temperature=0)
    assert torch.equal(greedy, inference.generate_cached(model, idx, 9, temperature=0))


# ------------------------------------------------------------------------------------------
# issue 46: hints that name the mistake (and its section) where they stayed generic; the catalog
# (autograder/awb_grader/catalog/ex09.py) grades one of each through nbgrader
# ------------------------------------------------------------------------------------------
def _solution_with(cell, *changes):
    """The exercise's namespace with one answer cell edited, its function returned (tests/nbrun.py)."""
    import nbrun
    from awb_grader.catalog import edit

    return nbrun.namespace(A, {cell: edit(A, cell, *changes)})[cell]


def _online_lanes(x, block=4, start=float("-inf")):
    """Each lane (entry j of every block) keeps its own running max and sum, combined at the end; no guard."""
    lanes = min(block, x.shape[-1])
    m = torch.full(x.shape[:-1] + (lanes,), start)
    l = torch.zeros_like(m)
    for s in range(0, x.shape[-1], block):
        xb = x[..., s:s + block]
        w = xb.shape[-1]
        m_new = torch.maximum(m[..., :w], xb)
        l[..., :w] = l[..., :w] * torch.exp(m[..., :w] - m_new) + torch.exp(xb - m_new)
        m[..., :w] = m_new
    top = m.max(dim=-1, keepdim=True).values
    return torch.exp(x - top) / (l * torch.exp(m - top)).sum(dim=-1, keepdim=True)


def _online_entries(x, block=4):
    """Entry by entry (the block ignored), no guard."""
    m = torch.full(x.shape[:-1] + (1,), float("-inf"))
    l = torch.zeros_like(m)
    for j in range(x.shape[-1]):
        m_new = torch.maximum(m, x[..., j:j + 1])
        l = l * torch.exp(m - m_new) + torch.exp(x[..., j:j + 1] - m_new)
        m = m_new
    return torch.exp(x - m) / l


@pytest.mark.parametrize("fn", [_online_lanes, _online_entries], ids=["lane-by-lane", "entry-by-entry"])
def test_online_nan_of_a_maximum_still_at_minus_inf_names_the_guard_whatever_the_loop(fn):
    """The edge check's row with -inf at every other entry has no block that is all -inf: these loops
    make it nan all the same, and the hint names the missing guard (not the generic rescaling)."""
    with pytest.raises(CheckFailed) as info:
        checks.online_softmax_edge(fn)
    e = info.value
    assert e.hint.startswith(checks.NAN_GUARD) and "exp(-inf - (-inf))" in e.hint, e.plain()
    assert e.reread == checks.SEC_MASKED and checks.NAN_GUARD_SEEN in e.details
    assert "rows [0, 2]" in e.details[0]            # row 2: -inf at every other entry, no block of -inf


def test_a_nan_the_minus_inf_entries_do_not_cause_is_not_the_guard():
    """Replacing the -inf entries by finite ones decides: a maximum started at 0 on a row far below 0 stays
    nan (named as such), even where a whole block is -inf; a missing guard's nan goes away."""
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0)) - 900.0
    x[:, :4] = float("-inf")                        # a whole block of -inf in every row
    start0 = lambda z, block=4: _online_lanes(z, block, start=0.0)
    out = start0(x)
    assert torch.isnan(out).all()
    assert not checks.nan_from_inf(out, x, start0)
    assert checks.name_online_nan(out, x, 4, rerun=start0) == "the running maximum starts at 0"
    assert checks.name_online_nan(out, x, 4) == "nan where a whole block is -inf"      # where alone cannot tell
    y = torch.randn(3, 9, generator=torch.Generator().manual_seed(1))
    y[2, ::2] = float("-inf")
    entries = lambda z: _online_entries(z, 3)
    assert checks.nan_from_inf(entries(y), y, entries)
    assert checks.name_online_nan(entries(y), y, 3, rerun=entries) == checks.NAN_GUARD
    assert checks.name_online_nan(entries(y), y, 3) is None


@pytest.mark.parametrize("shift,clockwise,hint", [
    (True, True, "two mistakes: it rotates clockwise, and the frequencies are off by one"),
    (True, False, checks.ROPE_SHIFTED),
    (False, True, checks.ROPE_CLOCKWISE),
])
def test_rope_clockwise_and_shifted_frequencies_are_named_together(shift, clockwise, hint):
    changes = [("-torch.arange(0, d, 2, dtype=torch.float64) / d",
                "-torch.arange(-2, d - 2, 2, dtype=torch.float64) / d")] if shift else []
    if clockwise:
        changes += [("even * cos - odd * sin", "even * cos + odd * sin"),
                    ("even * sin + odd * cos", "odd * cos - even * sin")]
    apply_rope = _solution_with("apply_rope", *changes)
    for check in (checks.apply_rope_values, checks.apply_rope_positions):
        with pytest.raises(CheckFailed) as info:
            check(apply_rope)
        assert info.value.hint.startswith(hint), info.value.plain()
        assert info.value.reread == checks.SEC_ROPE


@pytest.mark.parametrize("new,hint", [
    ("model.tok_emb(tokens) + (model.pos_emb(torch.arange(past, past + t)) if past == 0 else 0)",
     "the new token gets no position embedding"),
    ("model.tok_emb(tokens)", "no token gets a position embedding"),
])
def test_cache_without_position_embeddings_is_named(new, hint):
    old = "model.tok_emb(tokens) + model.pos_emb(torch.arange(past, past + t))"
    generate_cached = _solution_with("generate_cached", (old, new))
    with pytest.raises(CheckFailed) as info:
        checks.generate_cached_equal(generate_cached)
    e = info.value
    assert e.hint.startswith(hint), e.plain()
    assert e.reread == checks.SEC_CACHE_BUG and "'The classic bug'" in e.reread and e.reread.endswith("#kv-cache)")


@pytest.mark.parametrize("new", ["~mask", "~mask[:, :, :, s:s + block]"], ids=["mask-not-tiled", "mask-4-d-only"])
def test_tiled_mask_crash_rereads_the_tiled_attention_section(new):
    tiled_attention = _solution_with("tiled_attention", ("~mask[..., s:s + block]", new))
    checks.tiled_attention_values(tiled_attention)                      # no mask: right
    with pytest.raises(CheckFailed) as info:
        checks.tiled_attention_mask(tiled_attention)
    e = info.value
    assert e.hint == checks.MASK_TILES and e.reread == checks.SEC_FLASH and e.reread.endswith("#tiled)"), e.plain()
