"""Toy data of lectures 02 and 03 (attention_workbook.lookup): shapes, determinism, and the
properties the lectures' text relies on."""

import pytest
import torch

from attention_workbook import lookup


def test_role_table_shapes_and_dict():
    t = lookup.role_table()
    m, d = len(t.roles), len(lookup.ROLE_FEATURES)
    assert t.keys.shape == (m, d)
    assert torch.equal(t.values, torch.eye(m))
    assert t.as_dict()["Subject"] == "Ada" and t.as_dict()["Verb"] == "wrote"


def test_role_keys_hard_lookup_finds_each_role():
    # every key, used as a query, has its own key as the best match (the lecture's hard lookup)
    t = lookup.role_table()
    best = (t.keys @ t.keys.T).argmax(dim=-1)
    assert best.tolist() == list(range(len(t.roles)))


def test_toy_translation_is_deterministic_and_aligned():
    a, b = lookup.toy_translation(seed=0), lookup.toy_translation(seed=0)
    assert torch.equal(a.encoder_states, b.encoder_states)
    assert torch.equal(a.decoder_states, b.decoder_states)
    assert a.encoder_states.shape == (len(a.source), 16)
    assert a.decoder_states.shape == (len(a.target), 16)
    # the lecture says the strongest weight of each decoder query falls on its aligned source word
    scores = a.decoder_states @ a.encoder_states.T
    assert scores.argmax(dim=-1).tolist() == a.alignment
    assert a.alignment[1] == 2 and a.alignment[2] == 1  # "blue house" <- "casa azul" reordering


def test_toy_embeddings_default_sentence_and_the_baker():
    x = lookup.toy_embeddings()
    assert x.shape == (4, len(lookup.EMBEDDING_FEATURES))
    assert torch.equal(x, lookup.toy_embeddings("The baker sells bread"))
    sims = x @ x.T
    # lecture 03: among the *other* words, "The" is most similar to "baker" ...
    others = sims[0, 1:]
    assert int(others.argmax()) == 0
    # ... "baker" to "bread" (both singular nouns), and "baker" has the longest vector
    assert int(sims[1, [0, 2, 3]].argmax()) == 2
    assert int(x.norm(dim=-1).argmax()) == 1
    # ... but every word is most similar to itself (the diagonal dominates)
    assert sims.argmax(dim=-1).tolist() == [0, 1, 2, 3]


def test_toy_embeddings_unknown_word():
    with pytest.raises(KeyError, match="no toy vector"):
        lookup.toy_embeddings(["The", "unicorn"])


def test_toy_copy_points_at_the_name_the_vocabulary_lacks():
    ex = lookup.toy_copy()
    assert ex.encoder_states.shape == (len(ex.source), 16) and ex.query.shape == (16,)
    assert ex.vocab_logits.shape == (len(ex.vocab),)
    # lecture 02, section 8: the name is not in the output vocabulary, the attention finds it,
    # and the vocabulary's own best guess is the unknown-word token
    assert "Itzel" in ex.source and "Itzel" not in ex.vocab
    assert int((ex.encoder_states @ ex.query).argmax()) == ex.source.index("Itzel")
    assert ex.vocab[int(ex.vocab_logits.argmax())] == "<unk>"
    assert 0.0 < ex.p_gen < 1.0
