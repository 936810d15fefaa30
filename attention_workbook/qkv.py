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
# Hand-made 6-feature embeddings for a tiny sentence; features:
# [noun, pronoun, verb, animate, determiner, food]
FEATURES = ["noun", "pronoun", "verb", "animate", "determiner", "food"]
SENTENCE = ["the", "pilot", "drank", "coffee", "and", "she", "left"]
_EMB = {
    "the": [0, 0, 0, 0, 1, 0],
    "pilot": [1, 0, 0, 1, 0, 0],
    "drank": [0, 0, 1, 0, 0, 0],
    "coffee": [1, 0, 0, 0, 0, 1],
    "and": [0, 0, 0, 0, 0, 0],
    "she": [0, 1, 0, 1, 0, 0],
    "left": [0, 0, 1, 0, 0, 0],
}


@dataclass
class WordTable:
    """Lecture 04's recap of the soft lookup: the words of a sentence stored as key/value pairs.

    Key of a word: its feature vector over ``FEATURES`` ("how it is found"); value: a one-hot
    vector naming the word ("what it hands over"), so a soft lookup returns a readable blend.
    """

    words: list
    keys: torch.Tensor  # (n, 6) feature vectors
    values: torch.Tensor  # (n, n) one-hot word identities


def word_table(words=SENTENCE) -> WordTable:
    """The distinct words of ``words`` (first occurrence order) as a key/value table."""
    names = list(dict.fromkeys(words))
    keys = torch.tensor([_EMB[w] for w in names], dtype=torch.float32)  # (n, 6)
    return WordTable(names, keys, torch.eye(len(names)))


def feature_query(strength: float = 1.0, **features: float) -> torch.Tensor:
    """(6,) query vector asking for the named features, e.g. ``feature_query(2.0, noun=1, animate=1)``."""
    unknown = set(features) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; known: {FEATURES}")
    return strength * torch.tensor([float(features.get(f, 0.0)) for f in FEATURES])


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


# --------------------------------------------------------------------------- the shape-flow picture
_FLOW_COLORS = {"x": "#d9d9d9", "w": "#cdb8e6", "q": "#9ec5ea", "k": "#f6c28b", "v": "#a8d8a0",
                "s": "#f2a6a6", "y": "#8fd3cf"}


def _matrix(ax, x, y, rows, cols, name, shape, color):
    """A rows x cols grid of unit cells, top-left corner at (x, y), labels below it."""
    from matplotlib.patches import Rectangle

    for r in range(rows):
        for c in range(cols):
            ax.add_patch(Rectangle((x + c, y - r - 1), 1, 1, fc=color, ec="white", lw=1.0))
    ax.text(x + cols / 2, y - rows - 0.35, f"{name}\n{shape}", ha="center", va="top", fontsize=9)
    return x + cols


def _equation(ax, y, terms):
    """terms: (rows, cols, name, shape, color) matrices and plain strings ("@", "=", ...) between them."""
    x = 0.0
    for t in terms:
        if isinstance(t, str):
            gap = 2.4 if len(t) < 3 else 0.42 * max(len(line) for line in t.splitlines()) + 1.2
            ax.text(x + gap / 2, y - 1.0, t, ha="center", va="center", fontsize=13 if len(t) < 3 else 9)
            x += gap
        else:
            x = _matrix(ax, x, y, *t)
    return x


def draw_shape_flow(Tq: int = 4, Tk: int = 6, d_model: int = 5, d: int = 3, dv: int = 2, axes=None):
    """Picture of Attention(Q, K, V) = softmax(Q K^T / sqrt(d)) V with every matrix drawn to its shape.

    Left: the three projections (queries from the Tq query tokens, keys and values from the Tk
    key/value tokens). Right: scores, softmax along each row, weighted sum of the values.
    Returns the figure.
    """
    import matplotlib.pyplot as plt

    c = _FLOW_COLORS
    left = [
        [(Tq, d_model, "X", f"(Tq, D)\n({Tq}, {d_model})", c["x"]), "@",
         (d_model, d, "W_q", f"(D, d)\n({d_model}, {d})", c["w"]), "=",
         (Tq, d, "Q", f"(Tq, d)\n({Tq}, {d})", c["q"])],
        [(Tk, d_model, "X_kv", f"(Tk, D)\n({Tk}, {d_model})", c["x"]), "@",
         (d_model, d, "W_k", f"(D, d)\n({d_model}, {d})", c["w"]), "=",
         (Tk, d, "K", f"(Tk, d)\n({Tk}, {d})", c["k"])],
        [(Tk, d_model, "X_kv", f"(Tk, D)\n({Tk}, {d_model})", c["x"]), "@",
         (d_model, dv, "W_v", f"(D, dv)\n({d_model}, {dv})", c["w"]), "=",
         (Tk, dv, "V", f"(Tk, dv)\n({Tk}, {dv})", c["v"])],
    ]
    right = [
        [(Tq, d, "Q", f"({Tq}, {d})", c["q"]), "@", (d, Tk, "K^T", f"(d, Tk)\n({d}, {Tk})", c["k"]), "=",
         (Tq, Tk, "scores / sqrt(d)", f"(Tq, Tk)\n({Tq}, {Tk})", c["s"]), "softmax\nalong\neach row\n->",
         (Tq, Tk, "weights A", "each row\nsums to 1", c["s"])],
        [(Tq, Tk, "A", f"({Tq}, {Tk})", c["s"]), "@", (Tk, dv, "V", f"({Tk}, {dv})", c["v"]), "=",
         (Tq, dv, "Y", f"(Tq, dv)\n({Tq}, {dv})", c["y"])],
    ]
    widths = [d_model + max(d, dv) * 2 + 2 * 2.4, d + 3 * Tk + 2 * 2.4 + 5.0]
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(14, 5.6), gridspec_kw={"width_ratios": widths})
    for ax, rows, title in ((axes[0], left, "1. three projections"),
                            (axes[1], right, "2. scores, softmax over the keys, weighted sum of the values")):
        y, width = 0.0, 0.0
        for eq in rows:
            width = max(width, _equation(ax, y, eq))
            y -= max(t[0] for t in eq if not isinstance(t, str)) + 3.2
        ax.set_xlim(-0.5, width + 0.5)
        ax.set_ylim(y + 1.5, 0.8)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(title, fontsize=10)
    fig = axes[0].figure
    fig.tight_layout()
    return fig
