"""Toy data for lectures 02 (attention as lookup) and 03 (simplified self-attention).

Everything here is hand-built and tiny, so the numbers in the lectures can be read and
checked by eye:

* a key/value table of sentence roles (``role_table``): the "dictionary" that lecture 02
  turns from a hard lookup into a soft one;
* a toy Spanish -> English pair with made-up encoder and decoder states
  (``toy_translation``): the cross-attention example of lecture 02;
* one decoding step that must write a name its vocabulary lacks (``toy_copy``): lecture 02's
  example of attention used to copy from the source;
* word vectors with named features for "The baker sells bread" (``toy_embeddings``): the
  running example of lecture 03.

No attention function lives here: the lectures write those in front of the reader and the
exercises ask the student to write them again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# ---------------------------------------------------------------------------------------------
# Lecture 02: a table of sentence roles, "Ada wrote the program for them; she ..."
# ---------------------------------------------------------------------------------------------

ROLE_FEATURES = ["agent", "pronoun", "patient", "recipient", "action"]

# role -> (word that fills the role, key vector over ROLE_FEATURES)
_ROLES = {
    "Subject": ("Ada", [1.0, 0.0, 0.0, 0.0, 0.0]),
    "Pronoun": ("she", [0.6, 1.0, 0.0, 0.0, 0.0]),
    "Object": ("the program", [0.0, 0.0, 1.0, 0.0, 0.0]),
    "Indirect object": ("them", [0.0, 0.5, 0.3, 1.0, 0.0]),
    "Verb": ("wrote", [0.0, 0.0, 0.0, 0.0, 1.0]),
}


@dataclass
class RoleTable:
    """The role table as tensors. ``keys`` is (m, d), ``values`` is (m, m) one-hot (row i says
    "the word of role i"), so a soft lookup returns a readable blend of words."""

    roles: list[str]          # m key names
    words: list[str]          # m value names
    keys: torch.Tensor        # (m, d) with d = len(ROLE_FEATURES)
    values: torch.Tensor      # (m, m) one-hot rows

    def as_dict(self) -> dict[str, str]:
        return dict(zip(self.roles, self.words))


def role_table() -> RoleTable:
    roles = list(_ROLES)
    words = [w for w, _ in _ROLES.values()]
    keys = torch.tensor([k for _, k in _ROLES.values()])      # (m, d)
    values = torch.eye(len(roles))                            # (m, m)
    return RoleTable(roles, words, keys, values)


# ---------------------------------------------------------------------------------------------
# Lecture 02: cross-attention in a (pretend) encoder-decoder
# ---------------------------------------------------------------------------------------------

@dataclass
class ToyTranslation:
    source: list[str]             # T_src tokens the encoder read
    target: list[str]             # T_tgt tokens the decoder writes
    alignment: list[int]          # for each target position, the source position it translates
    encoder_states: torch.Tensor  # (T_src, d): keys = values in cross-attention
    decoder_states: torch.Tensor  # (T_tgt, d): one query per target position


def toy_translation(d: int = 16, noise: float = 0.35, scale: float = 2.0, seed: int = 0) -> ToyTranslation:
    """"la casa azul es muy grande" -> "the blue house is very big", with states built by hand.

    Each source word stands for a "meaning" vector (a random direction of length ``scale``).
    An encoder state is its word's meaning plus noise; the decoder state at target position t
    is the meaning of the word it is about to translate plus noise. A real network has to
    *learn* states with this property; here we build them so that the mechanism is visible.
    Note the reordering: "casa azul" becomes "blue house".
    """
    source = ["la", "casa", "azul", "es", "muy", "grande"]
    target = ["the", "blue", "house", "is", "very", "big"]
    alignment = [0, 2, 1, 3, 4, 5]
    g = torch.Generator().manual_seed(seed)
    meaning = torch.randn(len(source), d, generator=g)
    meaning = scale * meaning / meaning.norm(dim=-1, keepdim=True)             # (T_src, d)
    enc = meaning + noise * torch.randn(len(source), d, generator=g)           # (T_src, d)
    dec = meaning[alignment] + noise * torch.randn(len(target), d, generator=g)  # (T_tgt, d)
    return ToyTranslation(source, target, alignment, enc, dec)


# ---------------------------------------------------------------------------------------------
# Lecture 02: attention that copies a word from the source
# ---------------------------------------------------------------------------------------------

@dataclass
class ToyCopy:
    source: list[str]             # T_src source tokens; one of them is a rare name
    written: list[str]            # what the decoder has written so far
    vocab: list[str]              # the decoder's output vocabulary (V words): no names in it
    encoder_states: torch.Tensor  # (T_src, d): keys = values
    query: torch.Tensor           # (d,): the decoder state at the step that must write the name
    vocab_logits: torch.Tensor    # (V,): the decoder's own scores for generating each vocab word
    p_gen: float                  # probability of generating from the vocabulary rather than copying


def toy_copy(d: int = 16, noise: float = 0.35, scale: float = 2.0, seed: int = 0) -> ToyCopy:
    """"la casa de Itzel es azul" -> "the house of Itzel ...": the next word is a name that the
    decoder's output vocabulary does not contain.

    States are built like ``toy_translation``'s: each source word has a random "meaning"
    direction; the decoder state at this step is the meaning of the name plus noise (what a
    trained model would learn: "I am about to write the word over there"). The vocabulary scores
    and ``p_gen`` are set by hand: after "the house of" the decoder expects a word it has no
    entry for, so its best vocabulary guess is the unknown-word token.
    """
    source = ["la", "casa", "de", "Itzel", "es", "azul"]
    written = ["the", "house", "of"]
    vocab = ["<unk>", "the", "house", "of", "is", "blue", "red", "big", "a", "."]
    g = torch.Generator().manual_seed(seed)
    meaning = torch.randn(len(source), d, generator=g)
    meaning = scale * meaning / meaning.norm(dim=-1, keepdim=True)              # (T_src, d)
    enc = meaning + noise * torch.randn(len(source), d, generator=g)            # (T_src, d)
    query = meaning[source.index("Itzel")] + noise * torch.randn(d, generator=g)  # (d,)
    #                            <unk> the  house of   is   blue red  big  a    .
    vocab_logits = torch.tensor([2.0, 0.6, 0.2, 0.1, 0.4, 0.3, 0.0, 0.1, 0.5, 0.2])
    return ToyCopy(source, written, vocab, enc, query, vocab_logits, p_gen=0.3)


# ---------------------------------------------------------------------------------------------
# Lecture 03: "The baker sells bread"
# ---------------------------------------------------------------------------------------------

EMBEDDING_FEATURES = ["noun", "person", "action", "food", "determiner", "singular"]

_WORD_VECTORS = {
    #              noun person action food  det  singular
    "The":        [0.2, 0.0,   0.0,   0.0,  1.0, 0.6],
    "baker":      [1.0, 1.0,   0.1,   0.3,  0.0, 0.8],
    "sells":      [0.0, 0.4,   1.0,   0.2,  0.0, 0.5],
    "bread":      [1.0, 0.0,   0.0,   1.0,  0.0, 0.3],
    "woman":      [1.0, 1.0,   0.0,   0.0,  0.0, 0.8],
    "cooks":      [0.0, 0.4,   1.0,   0.3,  0.0, 0.5],
    "a":          [0.2, 0.0,   0.0,   0.0,  1.0, 0.9],
    "soup":       [1.0, 0.0,   0.0,   1.0,  0.0, 0.4],
    "dog":        [1.0, 0.1,   0.0,   0.0,  0.0, 0.8],
    "sleeps":     [0.0, 0.2,   1.0,   0.0,  0.0, 0.5],
}

SENTENCE = ["The", "baker", "sells", "bread"]


def vocabulary() -> list[str]:
    return list(_WORD_VECTORS)


def toy_embeddings(words: list[str] | str | None = None) -> torch.Tensor:
    """(S, D) word vectors for ``words`` (default: "The baker sells bread"), D = 6 named
    features (``EMBEDDING_FEATURES``). Accepts a list of words or a space-separated string."""
    if words is None:
        words = SENTENCE
    if isinstance(words, str):
        words = words.split()
    unknown = [w for w in words if w not in _WORD_VECTORS]
    if unknown:
        raise KeyError(f"no toy vector for {unknown}; known words: {vocabulary()}")
    return torch.tensor([_WORD_VECTORS[w] for w in words])   # (S, D)
