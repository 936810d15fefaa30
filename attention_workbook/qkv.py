"""Lecture 04 (queries, keys, values): the reference attention function and the small
experiments the lecture runs.

Mask convention (the one ``torch.nn.functional.scaled_dot_product_attention`` uses, and the
exercises too): a mask is a **bool** tensor that broadcasts to the scores ``(..., Tq, Tk)``,
``True`` where the query **may** attend to the key.

Shapes: ``q (..., Tq, d)``, ``k (..., Tk, d)``, ``v (..., Tk, dv)`` -> ``out (..., Tq, dv)``,
``weights (..., Tq, Tk)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


# --------------------------------------------------------------------------- masks and attention
def causal_mask(T: int, device=None) -> torch.Tensor:
    """(T, T) bool, True where key position <= query position (no peeking at the future)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def padding_mask(lengths, T: int) -> torch.Tensor:
    """(B, 1, T) bool, True for the real keys of each sequence (the first ``lengths[b]``).

    The middle axis of size 1 broadcasts over the queries of the (B, Tq, Tk) scores.
    """
    lengths = torch.as_tensor(lengths)
    positions = torch.arange(T, device=lengths.device)  # (T,)
    return (positions[None, :] < lengths[:, None])[:, None, :]  # (B, 1, T)


def stable_softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(s - max) / sum exp(s - max): same value as softmax, never overflows.

    A row that is entirely -inf (a query allowed to see nothing) gives NaN, like torch.softmax.
    """
    shifted = scores - scores.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


def attention(q, k, v, mask=None, scale: bool = True, temperature: float = 1.0):
    """softmax(q k^T / sqrt(d) / temperature, masked) v  ->  (out (..., Tq, dv), weights (..., Tq, Tk)).

    ``scale=False`` drops the 1/sqrt(d) (the lecture's experiment); ``temperature`` divides the
    scores once more (>1 flattens, <1 sharpens).
    """
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1)  # (..., Tq, Tk)
    if scale:
        scores = scores / math.sqrt(d)
    scores = scores / temperature
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # before the softmax
    weights = stable_softmax(scores, dim=-1)  # (..., Tq, Tk)
    return weights @ v, weights


# --------------------------------------------------------------------------- the lecture's toy world
@dataclass
class Lookup:
    """The key/value table of the lecture: a 'sentence memory' addressed by grammatical role."""

    roles: list
    fillers: list
    keys: torch.Tensor  # (n, n) one-hot role vectors
    values: torch.Tensor  # (n, n) one-hot filler vectors


def role_table() -> Lookup:
    roles = ["Subject", "Pronoun", "Object", "Indirect object", "Verb"]
    fillers = ["Professor Perry", "He", "Machine Learning", "Them", "Taught"]
    eye = torch.eye(len(roles))
    return Lookup(roles, fillers, eye.clone(), eye.clone())


# Hand-made 6-feature embeddings for a tiny sentence; features:
# [noun, pronoun, verb, animate, determiner, food]
FEATURES = ["noun", "pronoun", "verb", "animate", "determiner", "food"]
SENTENCE = ["the", "man", "ate", "breakfast", "and", "he", "left"]
_EMB = {
    "the": [0, 0, 0, 0, 1, 0],
    "man": [1, 0, 0, 1, 0, 0],
    "ate": [0, 0, 1, 0, 0, 0],
    "breakfast": [1, 0, 0, 0, 0, 1],
    "and": [0, 0, 0, 0, 0, 0],
    "he": [0, 1, 0, 1, 0, 0],
    "left": [0, 0, 1, 0, 0, 0],
}


def sentence_embeddings(words=SENTENCE, noise: float = 0.05, seed: int = 0) -> torch.Tensor:
    """(T, 6) embeddings of ``words`` from the feature table, plus a little noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.tensor([_EMB[w] for w in words], dtype=torch.float32)
    return x + noise * torch.randn(x.shape, generator=g)


# --------------------------------------------------------------------------- scaling experiment
def dot_product_spread(dims, n_pairs: int = 4000, seed: int = 0):
    """For each d: variance of q.k and of q.k/sqrt(d), with q, k entries i.i.d. N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    raw, scaled = [], []
    for d in dims:
        q = torch.randn(n_pairs, d, generator=g)
        k = torch.randn(n_pairs, d, generator=g)
        dots = (q * k).sum(-1)  # (n_pairs,)
        raw.append(float(dots.var()))
        scaled.append(float((dots / math.sqrt(d)).var()))
    return raw, scaled


def softmax_peak(dims, T: int = 16, n_rows: int = 500, seed: int = 0):
    """For each d: mean largest weight and mean softmax-gradient size, unscaled and scaled.

    Returns a dict of lists: peak_raw, peak_scaled, grad_raw, grad_scaled. The gradient size
    is the mean Frobenius norm of the softmax Jacobian diag(p) - p p^T of a row: it goes to 0
    when the softmax saturates (one weight near 1), which is what stalls learning.
    """
    g = torch.Generator().manual_seed(seed)
    out = {"peak_raw": [], "peak_scaled": [], "grad_raw": [], "grad_scaled": []}
    for d in dims:
        q = torch.randn(n_rows, 1, d, generator=g)
        k = torch.randn(n_rows, T, d, generator=g)
        s = (q * k).sum(-1)  # (n_rows, T)
        for tag, scores in (("raw", s), ("scaled", s / math.sqrt(d))):
            p = torch.softmax(scores, dim=-1)  # (n_rows, T)
            jac = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # (n_rows, T, T)
            out[f"peak_{tag}"].append(float(p.max(-1).values.mean()))
            out[f"grad_{tag}"].append(float(jac.flatten(1).norm(dim=-1).mean()))
    return out
