"""Exercise 09's visible and hidden checks, run directly (no kernel, no nbgrader).

The solution cells and the package's reference (attention_workbook.inference) pass; every
catalogued alternative passes; every catalogued mistake fails the checks it names, visibly and
hidden, and the visible message contains its hint; the reference module itself is right.
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook import gpt, inference
from attention_workbook.checks import ex09 as checks
from attention_workbook.checks.core import CheckFailed
from attention_workbook.mha import merge_heads, split_heads
from awb_grader import catalog as cat
from awb_grader.catalog import ex09 as catalog
from awb_grader.hidden import ex09 as hidden

A = "09_attention_at_scale"
# test cell -> (the answer cell it grades, the check function name)
CELLS = {
    "test_online_softmax_values": ("online_softmax", "online_softmax_values"),
    "test_online_softmax_edge": ("online_softmax", "online_softmax_edge"),
    "test_tiled_attention_values": ("tiled_attention", "tiled_attention_values"),
    "test_tiled_attention_mask": ("tiled_attention", "tiled_attention_mask"),
    "test_gqa_as_mha": ("GroupedQueryAttention", "gqa_as_mha"),
    "test_gqa_groups": ("GroupedQueryAttention", "gqa_groups"),
    "test_apply_rope_values": ("apply_rope", "apply_rope_values"),
    "test_apply_rope_positions": ("apply_rope", "apply_rope_positions"),
    "test_sliding_window_mask": ("sliding_window_mask", "sliding_window_mask_values"),
    "test_generate_cached_equal": ("generate_cached", "generate_cached_equal"),
    "test_generate_cached_steps": ("generate_cached", "generate_cached_steps"),
}


def define(source: str, name: str):
    """Run a notebook cell's source as a student would (the notebook's imports in scope)."""
    ns = {"torch": torch, "nn": nn, "F": F, "math": math, "split_heads": split_heads, "merge_heads": merge_heads,
          "GPT": gpt.GPT, "generate": gpt.generate, "__name__": "__main__"}
    exec(compile(source, f"<cell {name}>", "exec"), ns)  # noqa: S102 - our catalog
    return ns[name]


def solution(name):
    return define(cat.solution(A, name), name)


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_solution_passes_visible_and_hidden(cell, capsys):
    answer, fn = CELLS[cell]
    obj = solution(answer)
    getattr(checks, fn)(obj)
    getattr(hidden, fn)(obj)
    assert "\u2714" in capsys.readouterr().out


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_package_reference_passes_visible(cell):
    """The checks accept attention_workbook.inference's versions (when told to trust them)."""
    from attention_workbook.checks import own

    answer, fn = CELLS[cell]
    with own.trusting():
        getattr(checks, fn)(getattr(inference, answer))


def test_visible_check_names_the_reference_a_submission_uses():
    with pytest.raises(CheckFailed, match="workbook's reference `attention_workbook.inference.apply_rope`"):
        checks.apply_rope_values(inference.apply_rope)
    with pytest.raises(CheckFailed, match="not written in the notebook"):
        hidden.apply_rope_values(inference.apply_rope)


@pytest.mark.parametrize("alt", catalog.ALTERNATIVES, ids=lambda a: a.id)
def test_alternatives_pass(alt):
    for cell, (answer, fn) in CELLS.items():
        obj = define(alt.cells[answer], answer) if answer in alt.cells else solution(answer)
        getattr(checks, fn)(obj)
        getattr(hidden, fn)(obj)


@pytest.mark.parametrize("mistake", catalog.MISTAKES, ids=lambda m: m.id)
def test_mistakes_fail_with_their_hint(mistake):
    obj = define(mistake.source, mistake.cell)
    messages = []
    for cell in mistake.must_fail:
        answer, fn = CELLS[cell]
        assert answer == mistake.cell
        with pytest.raises(CheckFailed) as visible:
            getattr(checks, fn)(obj)
        messages.append(visible.value.plain())
        with pytest.raises(CheckFailed) as secret:
            getattr(hidden, fn)(obj)
        assert secret.value.plain().startswith("Check failed: hidden test:") or "raised" in secret.value.plain()
    if mistake.hint:
        assert any(mistake.hint.lower() in m.lower() for m in messages), messages


def test_catalog_size_and_coverage():
    per_item = {}
    for m in catalog.MISTAKES:
        per_item[m.cell] = per_item.get(m.cell, 0) + 1
    assert set(per_item) == {a for a, _ in CELLS.values()}
    assert min(per_item.values()) >= 3, per_item
    assert {c for m in catalog.MISTAKES for c in m.must_fail} == set(CELLS)


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
    score = lambda i, j: float(inference.apply_rope(qv, torch.tensor([i])) @ inference.apply_rope(kv, torch.tensor([j])).T)
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
