"""Toy data of lecture 05 (multi-head attention): tiny sentences and a hand-built 4-head model.

Each head has a job you can name (trained heads are messier), so the pictures can be read:

* head 0, previous word: compares positions;
* head 1, noun -> its adjective: compares word classes;
* heads 2 and 3, verb -> its subject / its object: a verb looks for the earliest / the latest
  noun of the sentence, which in these short subject-verb-object sentences is the one that does
  the action and the one it is done to.

Token vector x = [position one-hot (8) | word-class one-hot (8) | word identity (16)], D = 32,
H = 4, Dh = 8. The reference model itself is ``attention_workbook.mha``; this module only sets
its weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .mha import MultiHeadAttention

WORD_CLASSES = ["start", "det", "adj", "noun", "verb", "punct", "prep", "pron"]
VOCAB = {
    "<s>": "start", "the": "det", "a": "det",
    "young": "adj", "small": "adj", "old": "adj", "tired": "adj",
    "fox": "noun", "hen": "noun", "nurse": "noun", "cat": "noun", "dog": "noun",
    "chased": "verb", "fed": "verb", "saw": "verb", "slept": "verb",
    ".": "punct", "in": "prep", "she": "pron", "he": "pron",
}
TOY_SENTENCES = [
    "<s> a young fox chased the hen .",
    "<s> the hen chased a young fox .",     # the same words, the roles swapped
    "<s> the old nurse fed a cat .",
]
TOY_HEAD_NAMES = ["previous word", "noun -> its adjective", "verb -> its subject", "verb -> its object"]
TOY_MAX_LEN = 8


def class_features(words) -> torch.Tensor:
    """(T, 8) one-hot word classes (the order of ``WORD_CLASSES``)."""
    idx = torch.tensor([WORD_CLASSES.index(VOCAB[w]) for w in words])
    return F.one_hot(idx, len(WORD_CLASSES)).float()


def toy_embed(words, seed: int = 0) -> torch.Tensor:
    """(T, 32) token vectors [position one-hot | class one-hot | fixed random word identity]."""
    if len(words) > TOY_MAX_LEN:
        raise ValueError(f"toy sentences have at most {TOY_MAX_LEN} tokens")
    g = torch.Generator().manual_seed(seed)
    ident = {w: torch.randn(16, generator=g) / 4 for w in VOCAB}  # same vector for a word every time
    pos = F.one_hot(torch.arange(len(words)), TOY_MAX_LEN).float()  # (T, 8)
    return torch.cat([pos, class_features(words), torch.stack([ident[w] for w in words])], dim=-1)


def toy_mha(strength: float = 5.0, seed: int = 0) -> MultiHeadAttention:
    """A MultiHeadAttention(32, 4) whose heads are set by hand (see ``TOY_HEAD_NAMES``).

    ``strength`` is the score gap after the 1/sqrt(Dh) scaling: bigger = sharper heads.
    Tokens with nothing to look for park their attention on ``<s>`` (an "attention sink").
    """
    D, H, Dh, P = 32, 4, 8, TOY_MAX_LEN
    c = strength * math.sqrt(Dh)
    C = {name: P + i for i, name in enumerate(WORD_CLASSES)}  # column of each class feature in x
    Wq, Wk = torch.zeros(D, D), torch.zeros(D, D)
    # head 0, previous word: query of position i = e_{i-1} (+ a little e_i), key = e_j
    for i in range(P):
        if i > 0:
            Wq[0 * Dh + i - 1, i] = c
        Wq[0 * Dh + i, i] = 0.4 * c
        Wk[0 * Dh + i, i] = 1.0
    # head 1, noun -> its adjective: key = class one-hot; a noun's query asks for "adj"
    h = 1
    for j, name in enumerate(WORD_CLASSES):
        Wk[h * Dh + j, C[name]] = 1.0
        Wq[h * Dh + WORD_CLASSES.index("start"), C[name]] = 0.5 * c  # everyone: the sink
    Wq[h * Dh + WORD_CLASSES.index("adj"), C["noun"]] = c
    # heads 2 and 3, verb -> its subject / object: key = [is noun, is <s>, position j]; a verb's
    # query asks for a noun (3 units) and for an early (head 2) or late (head 3) position (1/2 unit
    # per position); every other word asks for <s>
    for h, direction in ((2, -1.0), (3, 1.0)):
        Wk[h * Dh + 0, C["noun"]] = 1.0
        Wk[h * Dh + 1, C["start"]] = 1.0
        for j in range(P):
            Wk[h * Dh + 2, j] = float(j)
        Wq[h * Dh + 0, C["verb"]] = 3 * c
        Wq[h * Dh + 2, C["verb"]] = direction * 0.5 * c
        for name in WORD_CLASSES:
            if name != "verb":
                Wq[h * Dh + 1, C[name]] = 0.5 * c
    g = torch.Generator().manual_seed(seed)
    Wv = torch.zeros(D, D)
    Wv[:, 2 * P:] = torch.randn(D, 16, generator=g) / 2  # values carry the word identity
    Wo = torch.linalg.qr(torch.randn(D, D, generator=g))[0]
    m = MultiHeadAttention(D, H, bias=False)
    with torch.no_grad():
        m.W_qkv.weight.copy_(torch.cat([Wq, Wk, Wv]))
        m.W_o.weight.copy_(Wo)
    return m.eval()
