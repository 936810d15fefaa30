"""Are all these heads needed? Zero attention heads of a trained GPT and measure the loss.

``ablate_heads`` zeroes the output of chosen (layer, head) pairs inside a ``with`` block (through
``CausalSelfAttention.head_mask``); ``head_ablation`` measures, head by head, how much the
validation loss rises, always on the same windows (lecture 08, section 10; Michel, Levy and
Neubig, "Are Sixteen Heads Really Better than One?", 2019).
"""

from __future__ import annotations

import contextlib

import torch

from .gpt import GPT
from .training import estimate_loss


@contextlib.contextmanager
def ablate_heads(model: GPT, heads: list[tuple[int, int]]):
    """Zero the output of the given (layer, head) pairs inside the ``with`` block."""
    attns = model.attentions()
    try:
        for layer, head in heads:
            a = attns[layer]
            if a.head_mask is None:
                a.head_mask = torch.ones(a.n_heads, device=a.W_o.weight.device)
            a.head_mask[head] = 0.0
        yield model
    finally:
        for a in attns:
            a.head_mask = None


@torch.no_grad()
def head_ablation(model: GPT, val_data: torch.Tensor, batch_size: int = 16, eval_iters: int = 8,
                  device: str = "cpu", seed: int = 0, progress: bool = False) -> tuple[float, torch.Tensor]:
    """Val loss of the full model and the change (n_layer, n_head) when each single head is zeroed.

    Every measurement uses the same windows (fixed seed), so the differences are not sampling noise.
    """
    from .progress import tqdm

    est = lambda: estimate_loss(model, {"val": val_data}, model.block_size, batch_size, eval_iters,
                                device, seed=seed)["val"]
    base = est()
    delta = torch.zeros(model.n_layer, model.n_head)
    pairs = [(l, h) for l in range(model.n_layer) for h in range(model.n_head)]
    for l, h in tqdm(pairs, desc="ablating heads", disable=not progress):
        with ablate_heads(model, [(l, h)]):
            delta[l, h] = est() - base
    return base, delta
