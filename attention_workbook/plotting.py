"""Pictures the lectures and exercises share: attention heatmaps with token labels and friends."""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np


def _to_numpy(a) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().float().cpu().numpy()
    return np.asarray(a)


def attention_heatmap(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    annotate: bool | None = None,
    cmap: str = "viridis",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    colorbar: bool = True,
):
    """Draw a (Tq, Tk) weight matrix: rows are queries (who looks), columns keys (who is looked at).

    ``annotate`` writes the numbers in the cells (default: only for small matrices).
    Returns the matplotlib Axes.
    """
    w = _to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"attention_heatmap wants a 2-D (Tq, Tk) matrix, got shape {w.shape}")
    if ax is None:
        size = max(3.0, 0.45 * max(w.shape) + 1.5)
        _, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    tq, tk = w.shape
    ax.set_xticks(range(tk))
    ax.set_yticks(range(tq))
    if key_labels is not None:
        ax.set_xticklabels(list(key_labels), rotation=45, ha="right")
    if query_labels is not None:
        ax.set_yticklabels(list(query_labels))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = tq * tk <= 64
    if annotate:
        # text colour from where the value sits on the colour scale actually drawn
        lo_c, hi_c = im.get_clim()
        span = (hi_c - lo_c) or 1.0
        for i in range(tq):
            for j in range(tk):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center",
                        color="black" if (w[i, j] - lo_c) / span > 0.6 else "white", fontsize=8)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def heatmap_grid(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    ncols: int = 4,
    suptitle: str | None = None,
):
    """Several (Tq, Tk) heatmaps side by side, e.g. one per head: ``weights`` is (n, Tq, Tk)."""
    w = _to_numpy(weights)
    n = w.shape[0]
    ncols = min(ncols, n)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 3.0 * nrows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= n:
            ax.axis("off")
            continue
        attention_heatmap(w[i], query_labels, key_labels, ax=ax, colorbar=False,
                          title=titles[i] if titles else None, annotate=False)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def bar_weights(weights, labels: Sequence[str] | None = None, ax=None, title: str | None = None):
    """One row of attention weights (or any distribution) as bars."""
    w = _to_numpy(weights).reshape(-1)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 0.5 * len(w) + 1), 2.6))
    ax.bar(range(len(w)), w, color="tab:blue")
    ax.set_xticks(range(len(w)))
    if labels is not None:
        ax.set_xticklabels(list(labels), rotation=45, ha="right")
    ax.set_ylim(0, max(1.0, float(w.max()) * 1.05) if len(w) else 1.0)
    if title:
        ax.set_title(title)
    return ax


def box(ax, x: float, y: float, w: float, h: float, text: str, color: str = "#dde8f5", fontsize: float = 8.5):
    """A rounded box centred at (x, y) with a label: the brick of the lectures' architecture drawings."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                fc=color, ec="black", lw=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def arrow(ax, x0: float, y0: float, x1: float, y1: float, **kw):
    """An arrow from (x0, y0) to (x1, y1) (extra keywords go to matplotlib's arrowprops)."""
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", lw=1.2, **kw))
