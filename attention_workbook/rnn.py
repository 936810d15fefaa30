"""A vanilla RNN, small enough to read in one sitting: what lecture 01 unrolls and measures.

    h_t = tanh(x_t @ W_xh + h_{t-1} @ W_hh + b)          x_t (B, D_in), h_t (B, H)

Weights act from the right (``x @ W``), the convention of ``nn.Linear``'s math written out and
of every later lecture (``x @ W_q``). The recurrent matrix is a random orthogonal matrix times
``weight_scale``, so ``weight_scale`` *is* its spectral radius: below 1 signals shrink at every
step, above 1 they can grow (until tanh saturates).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn


@dataclass
class RNNConfig:
    d_in: int = 8           # size of each input vector x_t
    d_hidden: int = 16      # size of the hidden state h_t
    weight_scale: float = 1.0  # spectral radius of W_hh
    input_scale: float = 1.0   # W_xh entries ~ N(0, input_scale^2 / d_in)
    seed: int = 0


def orthogonal(n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random (n, n) orthogonal matrix (QR of a Gaussian matrix, signs fixed)."""
    a = torch.randn(n, n, generator=generator)
    q, r = torch.linalg.qr(a)
    return q * torch.sign(torch.diagonal(r))  # (n, n); columns scaled by +-1 stay orthonormal


class VanillaRNN(nn.Module):
    """One tanh cell applied T times. ``forward`` returns every hidden state, (B, T, H)."""

    def __init__(self, cfg: RNNConfig):
        super().__init__()
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.seed)
        H, D = cfg.d_hidden, cfg.d_in
        self.W_xh = nn.Parameter(torch.randn(D, H, generator=g) * cfg.input_scale / D**0.5)  # (D_in, H)
        self.W_hh = nn.Parameter(orthogonal(H, g) * cfg.weight_scale)                        # (H, H)
        self.b = nn.Parameter(torch.zeros(H))                                                # (H,)

    def extra_repr(self) -> str:
        # the parameters are plain nn.Parameters, not submodules: without this, print() says "VanillaRNN()"
        c = self.cfg
        return f"d_in={c.d_in}, d_hidden={c.d_hidden}, weight_scale={c.weight_scale}"

    def step(self, x_t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One time step: (B, D_in), (B, H) -> (B, H)."""
        return torch.tanh(x_t @ self.W_xh + h @ self.W_hh + self.b)

    def forward(self, x: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
        B, T, _ = x.shape                                   # (B, T, D_in)
        h = x.new_zeros(B, self.cfg.d_hidden) if h0 is None else h0  # (B, H)
        states = []
        for t in range(T):                                  # T steps, each waits for the last
            h = self.step(x[:, t], h)                       # (B, H)
            states.append(h)
        return torch.stack(states, dim=1)                   # (B, T, H)


def sequential_steps_rnn(T: int) -> list[int]:
    """How many cell applications must finish before h_t exists, for t = 0..T-1."""
    return [t + 1 for t in range(T)]


def sequential_steps_attention(T: int) -> list[int]:
    """Same count for one self-attention layer: every output is one (parallel) matrix product away."""
    return [1 for _ in range(T)]


def seconds_per_call(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
                     clock: Callable[[], float] = time.perf_counter) -> float:
    """Best (smallest) seconds of ``fn()`` over ``repeats`` runs, after ``warmup`` runs.

    The minimum, not the mean: on a shared machine other processes only ever add time, so the
    fastest run is the closest to what the computation itself costs. ``clock`` is wall-clock
    time by default; ``time.process_time`` counts only the CPU time this process used, which
    leaves out the time spent waiting for a turn on a busy processor."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


# The workbook's long-range reference: "his" near the end refers to the surveyor named in the
# first two tokens, 95 tokens earlier, with no other pronoun for him in between.
PASSAGE = (
    "Oskar Lindqvist , a surveyor from a small fishing town , charted the northern coast in 1884 . "
    "Before that survey , ships found the harbour by a single lamp on the cliffs and by the memory "
    "of old pilots . The work took eleven summers of rowing , climbing and measuring , with a crew "
    "of four and a borrowed theodolite . Later charts added depths , beacons and radio signals , "
    "and the harbour has long since moved , yet pilots who know these waters still say that every "
    "safe passage north begins with his chart ."
)


def tokens(text: str = PASSAGE) -> list[str]:
    """Whitespace tokens (the passage is written with spaces around punctuation)."""
    return text.split()
