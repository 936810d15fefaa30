"""Exercise 07 beyond the shared checks of tests/test_checks.py: the by-parts decoder and the greedy
oracle agree with PyTorch and the package's module, every named variant differs from the right
answer, and the hidden checks refuse the package's reference."""

import pytest
import torch
import torch.nn as nn

from attention_workbook import blocks as reference
from attention_workbook.checks import CheckFailed
from attention_workbook.checks import ex07 as checks
from awb_grader.hidden import ex07 as hidden


def test_oracles_agree_with_torch_and_the_reference_module():
    # the by-parts decoder equals nn.TransformerDecoderLayer once the weights are the same
    layer = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    checks.randomize_(layer, 0)
    block = reference.from_torch_decoder_layer(layer).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    keep_t = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    keep_s = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    with torch.no_grad():
        want = layer(x, mem, tgt_mask=~torch.ones(5, 5, dtype=torch.bool).tril(),
                     tgt_key_padding_mask=~keep_t, memory_key_padding_mask=~keep_s)
        got = checks.decoder_by_parts(block, x, mem, keep_t, keep_s)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the greedy oracle agrees with the workbook's greedy_decode on scripted models
    scripts = [[4, 2], [5, 6, 7, 2], [8, 9, 3]]
    model = checks.ScriptedModel(scripts, 10, 1)
    assert torch.equal(checks.greedy_oracle(scripts, 6, 1, 2),
                       reference.greedy_decode(model, torch.zeros(3, 2, dtype=torch.long), 6, 1, 2))


def test_every_named_variant_differs_from_the_correct_output():
    layer = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    checks.randomize_(layer, 1)
    block = reference.from_torch_decoder_layer(layer).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [True] * 2 + [False] * 3])
    with torch.no_grad():
        want = checks.decoder_by_parts(block, x, mem, keep, keep)
        for name, kw in checks.WIRINGS.items():
            assert not checks.close(checks.decoder_by_parts(block, x, mem, keep, keep, **kw), want), name
    # each greedy variant differs from the right answer in at least one of the visible cases
    cases = [
        ([[5, 6, 2, 7, 7]], 10),
        ([[4, 2], [5, 6, 7, 2], [8, 9, 3, 9, 3, 9, 3, 9]], 6),
        ([[2, 5], [6, 6, 2, 4]], 8),
    ]
    names = checks.greedy_wrong_variants(*cases[0][:1], cases[0][1], 1, 2).keys()
    for name in names:
        differs = []
        for scripts, max_len in cases:
            want = checks.greedy_oracle(scripts, max_len, 1, 2)
            v = checks.greedy_wrong_variants(scripts, max_len, 1, 2)[name]
            differs.append(v.shape != want.shape or not torch.equal(v, want))
        assert any(differs), name


def test_hidden_checks_reject_the_packaged_reference():
    with pytest.raises(CheckFailed, match="imported"):
        hidden.decoder_values(reference.DecoderBlock)
    with pytest.raises(CheckFailed, match="imported"):
        hidden.greedy_single(reference.greedy_decode)
