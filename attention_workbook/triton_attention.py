"""Lecture 10's Triton kernels: a fused row softmax and FlashAttention's forward pass.

The reference the lecture runs and a GPU benchmark imports (``flash_attention_forward``). Where
no CUDA GPU is visible the kernels run in Triton's interpreter (``tritonenv``): the same
results on the CPU, slowly.

``flash_attention_kernel`` is FlashAttention-2's forward pass (Dao, 2023): one program per tile
of ``BLOCK_M`` queries of one (batch, head); it walks the keys and values ``BLOCK_N`` rows at a
time, keeping per query the running maximum ``m``, the running sum ``l`` and the unnormalised
output ``acc`` in float32, rescales ``l`` and ``acc`` when the maximum rises, and divides once
at the end. Under the causal mask it stops after the tile that holds the diagonal.
"""

from __future__ import annotations

import math

import torch

from .tritonenv import DEVICE, INTERPRETED, tl, triton

__all__ = ["DEVICE", "INTERPRETED", "add_kernel", "vector_add", "softmax_kernel", "softmax",
           "flash_attention_kernel", "flash_attention_forward"]


@triton.jit
def add_kernel(X, Y, Out, n, BLOCK: tl.constexpr):
    """out[i] = x[i] + y[i]: program p adds entries p * BLOCK .. p * BLOCK + BLOCK - 1."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)    # (BLOCK,) the entries of this program
    inside = offs < n                                         # the last program may hang past the end
    x = tl.load(X + offs, mask=inside)
    y = tl.load(Y + offs, mask=inside)
    tl.store(Out + offs, x + y, mask=inside)


def vector_add(x: torch.Tensor, y: torch.Tensor, block: int = 64) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK=block)
    return out


@triton.jit
def softmax_kernel(X, Y, stride_x, stride_y, n_cols, BLOCK: tl.constexpr):
    """y[row] = softmax(x[row]): program ``row`` reads its row once, keeps it in registers, writes it once."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)                                # (BLOCK,) BLOCK >= n_cols, a power of 2
    inside = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=inside, other=float("-inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)                                 # padding stays -inf: exp(-inf) = 0
    e = tl.exp(x)
    tl.store(Y + row * stride_y + cols, e / tl.sum(e, axis=0), mask=inside)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Row softmax of a 2-D tensor whose rows are contiguous, one program per row."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    softmax_kernel[(x.shape[0],)](x, y, x.stride(0), y.stride(0), x.shape[1],
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


@triton.jit
def flash_attention_kernel(Q, K, V, O,
                           stride_qb, stride_qh, stride_qt, stride_qd,
                           stride_kb, stride_kh, stride_kt, stride_kd,
                           stride_vb, stride_vh, stride_vt, stride_vd,
                           stride_ob, stride_oh, stride_ot, stride_od,
                           H, T, scale,
                           CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                           FP16_ACC: tl.constexpr = False):
    """O[b, h] = softmax(Q[b, h] K[b, h]^T * scale) V[b, h] for one tile of BLOCK_M queries.
    Grid: (cdiv(T, BLOCK_M), B * H); program (i, b * H + h). ``FP16_ACC`` keeps acc in float16: the mistake
    lecture 10, section 9 measures (never use it)."""
    i, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = i * BLOCK_M + tl.arange(0, BLOCK_M)                # (BLOCK_M,) this program's queries
    dims = tl.arange(0, D)                                    # (D,)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
                mask=rows[:, None] < T, other=0.0)            # (BLOCK_M, D), read once
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)         # running maximum
    l = tl.zeros([BLOCK_M], tl.float32)                       # running sum of exp(s - m)
    acc = tl.zeros([BLOCK_M, D], tl.float32)                  # running sum of exp(s - m) v
    if FP16_ACC:
        acc = tl.zeros([BLOCK_M, D], tl.float16)              # (the mistake: rounded to fp16 at every tile)
    end = T
    if CAUSAL:
        end = tl.minimum((i + 1) * BLOCK_M, T)                # causal: no key tile after the diagonal
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)                  # (BLOCK_N,) this tile's keys
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd,
                    mask=cols[:, None] < T, other=0.0)        # (BLOCK_N, D)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd,
                    mask=cols[:, None] < T, other=0.0)        # (BLOCK_N, D)
        s = tl.dot(q, tl.trans(k)).to(tl.float32) * scale     # (BLOCK_M, BLOCK_N) scores of this tile
        keep = cols[None, :] < T                              # padded keys of the last tile
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))              # every row has a key in its first tile
        alpha = tl.exp(m - m_new)                             # rescales what l and acc hold so far
        p = tl.exp(s - m_new[:, None])                        # (BLOCK_M, BLOCK_N)
        l = l * alpha + tl.sum(p, axis=1)
        acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)).to(acc.dtype)
        m = m_new
    out = acc / l[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od,
             out.to(O.dtype.element_ty), mask=rows[:, None] < T)


def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                            block_m: int = 16, block_n: int = 16, fp16_accumulator: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v for q, k, v (B, H, T, D) of any strides; D a power of 2 (>= 16 on a GPU).
    ``fp16_accumulator`` is lecture 10's demonstration of the wrong way (acc rounded to fp16)."""
    B, H, T, D = q.shape
    o = torch.empty((B, H, T, D), dtype=q.dtype, device=q.device)
    grid = (triton.cdiv(T, block_m), B * H)
    flash_attention_kernel[grid](q, k, v, o, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                                 H, T, 1 / math.sqrt(D), CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=D,
                                 FP16_ACC=fp16_accumulator)
    return o
