"""Exercise 05 beyond the shared checks of tests/test_checks.py: the oracles agree with each other
and with the package's module, every named variant differs from the right answer, the hidden
checks refuse the package's reference, forward may not call PyTorch's attention, and the
catalog holds the reshape mistakes of the brief."""

import pytest
import torch
import torch.nn as nn

import nbrun
from attention_workbook import mha as reference
from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex05 as checks
from awb_grader.catalog import ex05 as catalog
from awb_grader.hidden import ex05 as hidden

A = "05_multi_head_attention"


def test_catalog_has_the_briefs_mistakes():
    ids = [m.id for m in catalog.MISTAKES]
    # the reshape mistakes of the brief are all there, and their hints are explicit
    for needed in ("split_direct_view", "merge_without_transpose", "scale_sqrt_d", "qkv_chunk_order",
                   "missing_w_o", "mask_not_broadcast_over_heads", "mask_wrong_axis", "softmax_query_axis",
                   "softmax_head_axis", "merge_heads_wrong_order", "cross_keys_from_x", "bias_dropped"):
        assert needed in ids


def test_oracles_agree_with_each_other_and_the_reference_module():
    g = torch.Generator().manual_seed(0)
    for B, T, S, D, H in ((2, 3, 5, 12, 3), (1, 4, 4, 8, 1), (3, 2, 6, 20, 5)):
        ref = checks.random_torch_mha(D, H, seed=D)
        ours = reference.from_torch(ref).eval()
        x, kv = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
        mask = torch.rand(B, H, T, S, generator=g) > 0.4
        mask[..., 0] = True
        for args in ((x, None, None), (x, kv, mask), (x, None, mask[..., :T])):
            want, want_w = checks.torch_reference(ref, *args)
            loop, loop_w = hidden.loop_oracle(ref, *args)
            variant, variant_w = checks.variant_forward(*args, checks._params(ref), H)
            torch.testing.assert_close(loop, want, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(loop_w, want_w, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(variant, want, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(variant_w, want_w, atol=1e-5, rtol=1e-4)
            kw = {"kv": args[1], "mask": args[2]}
            torch.testing.assert_close(ours(x, **kw), want, atol=1e-5, rtol=1e-4)
        y = torch.randn(B, H, T, D // H, generator=g)
        assert torch.equal(hidden.split_oracle(hidden.merge_oracle(y), H), y)


def test_every_named_variant_differs_from_the_correct_output():
    """A variant equal to the right answer would make its hint fire on correct code."""
    g = torch.Generator().manual_seed(1)
    ref = checks.random_torch_mha(12, 3, seed=1)
    x, kv = torch.randn(2, 3, 12, generator=g), torch.randn(2, 5, 12, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool).tril()
    for key, (kw, _hint) in checks.MHA_MISTAKES.items():
        for args in ((x, kv, mask), (x, None, mask[:, :3]), (x, kv, None)):
            if (key == "mask_queries" and args[2] is None) or (key == "keys_from_x" and args[1] is None):
                continue  # that deviation only exists with a mask / with kv
            try:
                out, _ = checks.variant_forward(*args, checks._params(ref), 3, **kw)
            except RuntimeError:  # e.g. a query-axis mask with T != S: cannot match anything
                continue
            assert not checks.close(out, checks.torch_reference(ref, *args)[0]), (key, [a is None for a in args])


def test_hidden_checks_reject_the_packaged_reference():
    with pytest.raises(CheckFailed, match="imported"):
        hidden.mha_self(reference.MultiHeadAttention)


def test_forward_may_not_call_the_builtins():
    ns = nbrun.namespace(A)
    Base = ns["MultiHeadAttention"]

    class Cheat(Base):
        def forward(self, x, kv=None, mask=None):
            ref = nn.MultiheadAttention(self.d_model, self.n_heads, batch_first=True)
            return ref(x, x, x)[0]

    with pytest.raises(CheckFailed, match="off limits"):
        checks.mha_self(Cheat)
