"""Outside code for exercise 11: public Triton backward kernels, adapted to the exercise's interfaces as test
fixtures (the code nobody here wrote that the checks must hold against), and bugs that shipped in them and were
later reported or fixed. Each is an answer cell (or two) of the notebook; ``catalog/ex11.py`` lists the correct
ones as ALTERNATIVES (full marks) and the shipped bugs as MISTAKES (they must lose points).

What "adapted" changes, for every kernel here: the exercise's signatures (each tensor with its own four strides,
``L`` and ``Delta`` as contiguous float32 ``(B, H, T_Q)``, ``L`` in natural-log units, ``scale`` given), masks where
``T_Q``, ``T_K`` are not multiples of the tiles (the sources assume multiples, or branch on constexpr EVEN_*
flags the exercise's launch does not pass), and no autotuning. What each keeps is its own way of computing:

* Triton's fused-attention tutorial, ``python/tutorials/06-fused-attention.py`` in triton-lang/triton at commit
  003da478d84f5bb0f51b3988cf0ea0bbe60282b7 (``_attn_bwd_preprocess``, ``_attn_bwd_dkdv``, ``_attn_bwd_dq``,
  ``_attn_bwd``): the transposed formulation of dK/dV (``pT = exp2(k q^T - m)``, keys by queries), base-2
  exponentials, the diagonal tiles in a masked first stage of sub-tiles and the rest in an unmasked second
  stage, dQ walking its key tiles right to left. At that commit the backward ignores ``causal`` (always the
  causal structure): triton-lang/triton issue #4541 (2024-08-19) and #5660, fixed by PR #8565 (merged
  2025-10-28: ``start_m = 0`` for dK/dV, ``start_n = 0`` for dQ without the mask when not causal). The
  alternative has that fix; the mistake ``outside_tutorial_backward_always_causal`` has the shipped structure.
  The scale multiplies the scores here (the tutorial multiplies K by it in PyTorch first, and dQ by ln 2 at the
  end): the exercise's kernels receive K as it is.
* Tri Dao's ``flash_attn/flash_attn_triton.py`` in Dao-AILab/flash-attention at commit
  00583fb14af7b84c4dca7531dc23126870eb0d35 (``_bwd_kernel_one_col_block`` with ``ATOMIC_ADD=True``, the
  ``SEQUENCE_PARALLEL`` configuration): one program per key block computes dK, dV and adds its share of dQ with
  ``tl.atomic_add`` into a zeroed float32 buffer; scores masked with -inf, ``begin_m`` rounded down to a multiple
  of BLOCK_M, ``dS`` scaled before its cast. It is a whole backward, so it replaces the ``FlashAttention`` cell
  (the exercise's forward and D kernels launched as they are); its LSE and D loads are masked here (the source
  pads them to a multiple of 128 rows).
* FlagAttention's ``src/flag_attn/flash.py`` in FlagOpen/FlagAttention at commit
  ee91638dec6da8c00c4113d179f469e0ffcd5852 (``_bwd_preprocess``, ``_bwd_kv_kernel``, ``_bwd_q_kernel``): masked
  loads without ``other=``, ``p = exp2(s * qk_scale - L * log2(e))`` from the natural-log L, ``P`` and ``dS``
  masked after they are computed. Two bugs it shipped and fixed: commit 63735de ("bugfix: _bwd_preprocess does
  not handles stride of o & do correctly", 2023-10-31), and commit 7b91f00 (PR #8, "fix a bug in upper bound of
  kernels that loop along tiles in a row ... to avoid illegal memory access", 2023-12-29: the causal dQ loop ran
  to ``(start_m + 1) * BLOCK_M`` past N with its loads unmasked when N was a multiple of BLOCK_N).
* Triton's tutorial once launched its D pre-processing on the forward's grid with the backward's block:
  triton-lang/triton PR #2020 ("Allow BLOCK(bwd) != BLOCK_M(fwd) in flash attention", 2023-08: "``_bwd_preprocess``
  will produce wrong results or even cause invalid memory access"). Adapted as a Function that launches
  ``delta_kernel`` on the forward's grid ``(cdiv(T_Q, block_m), B * H)`` with ``BLOCK_M=block_n``; its Delta is
  zeroed (the source's ``empty_like``), so the rows it never computes are 0 on every run rather than whatever
  memory held.
"""

from . import edit

A = "11_flash_attention_backward"

# -- Triton's tutorial (06-fused-attention.py @ 003da478) ---------------------------------------------------------
_TUTORIAL_DKDV_STEPS = '''@triton.jit
def _dkdv_steps(dk, dv, Q, k, v, DO, L, Delta, stride_qt, stride_qd, stride_dot, stride_dod,
                T_Q, T_K, qk_scale, start_n, start_m, num_steps,
                BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, D: tl.constexpr, MASK: tl.constexpr):
    """_attn_bwd_dkdv of the tutorial: dK, dV of the key block start_n from num_steps query blocks of BLOCK_M1."""
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    offs_k = tl.arange(0, D)
    curr_m = start_m
    for blk_idx in range(num_steps):
        offs_m = curr_m + tl.arange(0, BLOCK_M1)
        qT = tl.load(Q + offs_m[None, :] * stride_qt + offs_k[:, None] * stride_qd, mask=offs_m[None, :] < T_Q,
                     other=0.0)                                              # (D, BLOCK_M1)
        m = tl.load(L + offs_m, mask=offs_m < T_Q, other=0.0) * 1.4426950408889634   # the base-2 log-sum-exp
        pT = tl.math.exp2(tl.dot(k, qT) * qk_scale - m[None, :])             # (BLOCK_N1, BLOCK_M1)
        ok = (offs_m[None, :] < T_Q) & (offs_n[:, None] < T_K)
        if MASK:
            ok = ok & (offs_m[None, :] >= offs_n[:, None])                   # autoregressive masking
        pT = tl.where(ok, pT, 0.0)
        do = tl.load(DO + offs_m[:, None] * stride_dot + offs_k[None, :] * stride_dod, mask=offs_m[:, None] < T_Q,
                     other=0.0)
        dv += tl.dot(pT.to(do.dtype), do)
        Di = tl.load(Delta + offs_m, mask=offs_m < T_Q, other=0.0)
        dpT = tl.dot(v, tl.trans(do)).to(tl.float32)
        dsT = pT * (dpT - Di[None, :])
        dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT))
        curr_m += BLOCK_M1
    return dk, dv


'''

_TUTORIAL_DKDV_CAUSAL = '''    if CAUSAL:
        # the diagonal: query rows start_n ... start_n + BLOCK_N in masked sub-blocks, then the rows below unmasked
        if BLOCK_M < BLOCK_N:
            dk, dv = _dkdv_steps(dk, dv, Qh, k, v, DOh, Lh, Dh, stride_qt, stride_qd, stride_dot, stride_dod,
                                 T_Q, T_K, qk_scale, start_n, start_n, BLOCK_N // BLOCK_M, BLOCK_M, BLOCK_N, D, True)
        else:
            dk, dv = _dkdv_steps(dk, dv, Qh, k, v, DOh, Lh, Dh, stride_qt, stride_qd, stride_dot, stride_dod,
                                 T_Q, T_K, qk_scale, start_n, start_n, 1, BLOCK_N, BLOCK_N, D, True)
        start_m = start_n + BLOCK_N
        dk, dv = _dkdv_steps(dk, dv, Qh, k, v, DOh, Lh, Dh, stride_qt, stride_qd, stride_dot, stride_dod,
                             T_Q, T_K, qk_scale, start_n, start_m, tl.cdiv(T_Q - start_m, BLOCK_M), BLOCK_M,
                             BLOCK_N, D, False)
'''

_TUTORIAL_DKDV = '''@triton.jit
def dkdv_kernel(Q, K, V, DO, L, Delta, DK, DV,
                stride_qb, stride_qh, stride_qt, stride_qd,
                stride_kb, stride_kh, stride_kt, stride_kd,
                stride_vb, stride_vh, stride_vt, stride_vd,
                stride_dob, stride_doh, stride_dot, stride_dod,
                stride_dkb, stride_dkh, stride_dkt, stride_dkd,
                stride_dvb, stride_dvh, stride_dvt, stride_dvd,
                H, T_Q, T_K, scale,
                CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    pid, bhid = tl.program_id(0), tl.program_id(1)
    off_b, off_h = bhid // H, bhid % H
    Qh = Q + off_b * stride_qb + off_h * stride_qh
    DOh = DO + off_b * stride_dob + off_h * stride_doh
    Lh, Dh = L + bhid * T_Q, Delta + bhid * T_Q
    qk_scale = scale * 1.4426950408889634
    start_n = pid * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, D)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    # load K and V: they stay in SRAM throughout the inner loop
    k = tl.load(K + off_b * stride_kb + off_h * stride_kh + offs_n[:, None] * stride_kt + offs_k[None, :] * stride_kd,
                mask=offs_n[:, None] < T_K, other=0.0)
    v = tl.load(V + off_b * stride_vb + off_h * stride_vh + offs_n[:, None] * stride_vt + offs_k[None, :] * stride_vd,
                mask=offs_n[:, None] < T_K, other=0.0)
''' + _TUTORIAL_DKDV_CAUSAL + '''    else:
        # PR #8565: not causal, every query block from 0, no mask
        dk, dv = _dkdv_steps(dk, dv, Qh, k, v, DOh, Lh, Dh, stride_qt, stride_qd, stride_dot, stride_dod,
                             T_Q, T_K, qk_scale, start_n, 0, tl.cdiv(T_Q, BLOCK_M), BLOCK_M, BLOCK_N, D, False)
    dk *= scale
    tl.store(DV + off_b * stride_dvb + off_h * stride_dvh + offs_n[:, None] * stride_dvt + offs_k[None, :] * stride_dvd,
             dv.to(DV.dtype.element_ty), mask=offs_n[:, None] < T_K)
    tl.store(DK + off_b * stride_dkb + off_h * stride_dkh + offs_n[:, None] * stride_dkt + offs_k[None, :] * stride_dkd,
             dk.to(DK.dtype.element_ty), mask=offs_n[:, None] < T_K)
'''

_TUTORIAL_DQ_STEPS = '''@triton.jit
def _dq_steps(dq, q, K, V, do, m, Di, stride_kt, stride_kd, stride_vt, stride_vd, T_Q, T_K, qk_scale, start_m,
              start_n, num_steps, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr, D: tl.constexpr,
              MASK: tl.constexpr):
    """_attn_bwd_dq of the tutorial: dQ of the query block start_m from num_steps key blocks of BLOCK_N2."""
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    offs_k = tl.arange(0, D)
    curr_n = start_n
    for blk_idx in range(num_steps):
        offs_n = curr_n + tl.arange(0, BLOCK_N2)
        kT = tl.load(K + offs_n[None, :] * stride_kt + offs_k[:, None] * stride_kd, mask=offs_n[None, :] < T_K,
                     other=0.0)                                              # (D, BLOCK_N2)
        vT = tl.load(V + offs_n[None, :] * stride_vt + offs_k[:, None] * stride_vd, mask=offs_n[None, :] < T_K,
                     other=0.0)
        p = tl.math.exp2(tl.dot(q, kT) * qk_scale - m)
        ok = (offs_m[:, None] < T_Q) & (offs_n[None, :] < T_K)
        if MASK:
            ok = ok & (offs_m[:, None] >= offs_n[None, :])
        p = tl.where(ok, p, 0.0)
        dp = tl.dot(do, vT).to(tl.float32)
        ds = p * (dp - Di[:, None])
        dq += tl.dot(ds.to(kT.dtype), tl.trans(kT))
        curr_n += BLOCK_N2
    return dq


'''

_TUTORIAL_DQ_CAUSAL = '''    if CAUSAL:
        # the diagonal block in masked sub-blocks, then the key blocks to its left unmasked
        if BLOCK_N < BLOCK_M:
            dq = _dq_steps(dq, q, Kh, Vh, do, m, Di, stride_kt, stride_kd, stride_vt, stride_vd, T_Q, T_K,
                           qk_scale, start_m, start_m, BLOCK_M // BLOCK_N, BLOCK_M, BLOCK_N, D, True)
            dq = _dq_steps(dq, q, Kh, Vh, do, m, Di, stride_kt, stride_kd, stride_vt, stride_vd, T_Q, T_K,
                           qk_scale, start_m, 0, start_m // BLOCK_N, BLOCK_M, BLOCK_N, D, False)
        else:
            dq = _dq_steps(dq, q, Kh, Vh, do, m, Di, stride_kt, stride_kd, stride_vt, stride_vd, T_Q, T_K,
                           qk_scale, start_m, start_m, 1, BLOCK_M, BLOCK_M, D, True)
            dq = _dq_steps(dq, q, Kh, Vh, do, m, Di, stride_kt, stride_kd, stride_vt, stride_vd, T_Q, T_K,
                           qk_scale, start_m, 0, start_m // BLOCK_M, BLOCK_M, BLOCK_M, D, False)
'''

_TUTORIAL_DQ = '''@triton.jit
def dq_kernel(Q, K, V, DO, L, Delta, DQ,
              stride_qb, stride_qh, stride_qt, stride_qd,
              stride_kb, stride_kh, stride_kt, stride_kd,
              stride_vb, stride_vh, stride_vt, stride_vd,
              stride_dob, stride_doh, stride_dot, stride_dod,
              stride_dqb, stride_dqh, stride_dqt, stride_dqd,
              H, T_Q, T_K, scale,
              CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    pid, bhid = tl.program_id(0), tl.program_id(1)
    off_b, off_h = bhid // H, bhid % H
    Kh = K + off_b * stride_kb + off_h * stride_kh
    Vh = V + off_b * stride_vb + off_h * stride_vh
    qk_scale = scale * 1.4426950408889634
    start_m = pid * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, D)
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qt + offs_k[None, :] * stride_qd,
                mask=offs_m[:, None] < T_Q, other=0.0)
    do = tl.load(DO + off_b * stride_dob + off_h * stride_doh + offs_m[:, None] * stride_dot
                 + offs_k[None, :] * stride_dod, mask=offs_m[:, None] < T_Q, other=0.0)
    m = tl.load(L + bhid * T_Q + offs_m, mask=offs_m < T_Q, other=0.0)[:, None] * 1.4426950408889634
    Di = tl.load(Delta + bhid * T_Q + offs_m, mask=offs_m < T_Q, other=0.0)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
''' + _TUTORIAL_DQ_CAUSAL + '''    else:
        # PR #8565: not causal, every key block from 0, no mask
        dq = _dq_steps(dq, q, Kh, Vh, do, m, Di, stride_kt, stride_kd, stride_vt, stride_vd, T_Q, T_K, qk_scale,
                       start_m, 0, tl.cdiv(T_K, BLOCK_N), BLOCK_M, BLOCK_N, D, False)
    dq *= scale
    tl.store(DQ + off_b * stride_dqb + off_h * stride_dqh + offs_m[:, None] * stride_dqt + offs_k[None, :] * stride_dqd,
             dq.to(DQ.dtype.element_ty), mask=offs_m[:, None] < T_Q)
'''

TUTORIAL = {"dkdv_kernel": _TUTORIAL_DKDV_STEPS + _TUTORIAL_DKDV, "dq_kernel": _TUTORIAL_DQ_STEPS + _TUTORIAL_DQ}


def _always_causal(src: str, causal_block: str) -> str:
    """The shipped structure (issue #4541): the causal stages whatever CAUSAL says."""
    body = causal_block.replace("    if CAUSAL:\n", "", 1)
    body = "\n".join(line[4:] if line.startswith("        ") else line for line in body.splitlines()) + "\n"
    start = src.index(causal_block)
    end = src.index("    dk *= scale\n" if "dk *= scale" in src else "    dq *= scale\n")
    return src[:start] + body + src[end:]


TUTORIAL_ALWAYS_CAUSAL = {"dkdv_kernel": _always_causal(TUTORIAL["dkdv_kernel"], _TUTORIAL_DKDV_CAUSAL),
                          "dq_kernel": _always_causal(TUTORIAL["dq_kernel"], _TUTORIAL_DQ_CAUSAL)}

# -- Tri Dao's flash_attn_triton.py @ 00583fb1: one column block per program, dQ by atomic adds -------------------
_FLASH_ATTN_TRITON_KERNEL = '''@triton.jit
def _bwd_kernel_one_col_block(Q, K, V, DO, DQ, DK, DV, LSE, D,
                              stride_qb, stride_qh, stride_qm, stride_qd,
                              stride_kb, stride_kh, stride_kn, stride_kd,
                              stride_vb, stride_vh, stride_vn, stride_vd,
                              stride_dob, stride_doh, stride_dom, stride_dod,
                              stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                              stride_dvb, stride_dvh, stride_dvn, stride_dvd,
                              nheads, seqlen_q, seqlen_k, softmax_scale,
                              IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_HEADDIM: tl.constexpr):
    start_n, off_hb = tl.program_id(0), tl.program_id(1)
    off_b, off_h = off_hb // nheads, off_hb % nheads
    Q += off_b * stride_qb + off_h * stride_qh
    K += off_b * stride_kb + off_h * stride_kh
    V += off_b * stride_vb + off_h * stride_vh
    DO += off_b * stride_dob + off_h * stride_doh
    DQ += off_hb * seqlen_q * BLOCK_HEADDIM                        # the float32 accumulator, (B*H, T_Q, D)
    LSE += off_hb * seqlen_q
    D += off_hb * seqlen_q
    # We need to make sure begin_m is a multiple of BLOCK_M (not BLOCK_N)
    begin_m = 0 if not IS_CAUSAL else ((start_n * BLOCK_N) // BLOCK_M) * BLOCK_M
    offs_qm = begin_m + tl.arange(0, BLOCK_M)
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_HEADDIM)
    q_ptrs = Q + (offs_qm[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    do_ptrs = DO + (offs_qm[:, None] * stride_dom + offs_d[None, :] * stride_dod)
    dq_ptrs = DQ + (offs_qm[:, None] * BLOCK_HEADDIM + offs_d[None, :])
    dv = tl.zeros([BLOCK_N, BLOCK_HEADDIM], dtype=tl.float32)
    dk = tl.zeros([BLOCK_N, BLOCK_HEADDIM], dtype=tl.float32)
    k = tl.load(K + (offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd), mask=offs_n[:, None] < seqlen_k,
                other=0.0)
    v = tl.load(V + (offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd), mask=offs_n[:, None] < seqlen_k,
                other=0.0)
    num_block_m = tl.cdiv(seqlen_q, BLOCK_M)
    for start_m in range(begin_m, num_block_m * BLOCK_M, BLOCK_M):
        offs_m_curr = start_m + offs_m
        q = tl.load(q_ptrs, mask=offs_m_curr[:, None] < seqlen_q, other=0.0)
        # recompute p = softmax(qk, dim=-1).T
        qk = tl.dot(q, tl.trans(k))
        qk = tl.where(offs_n[None, :] < seqlen_k, qk, float("-inf"))
        if IS_CAUSAL:
            qk = tl.where(offs_m_curr[:, None] >= (offs_n[None, :]), qk, float("-inf"))
        lse_i = tl.load(LSE + offs_m_curr, mask=offs_m_curr < seqlen_q, other=0.0)
        p = tl.exp(qk * softmax_scale - lse_i[:, None])
        do = tl.load(do_ptrs, mask=offs_m_curr[:, None] < seqlen_q, other=0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        dp = tl.dot(do, tl.trans(v))
        Di = tl.load(D + offs_m_curr, mask=offs_m_curr < seqlen_q, other=0.0)
        ds = (p * (dp - Di[:, None]) * softmax_scale).to(q.dtype)
        dk += tl.dot(tl.trans(ds), q)
        # parallelizing across the seqlen_k dimension: every column block adds its share of dQ
        tl.atomic_add(dq_ptrs, tl.dot(ds, k), mask=offs_m_curr[:, None] < seqlen_q)
        dq_ptrs += BLOCK_M * BLOCK_HEADDIM
        q_ptrs += BLOCK_M * stride_qm
        do_ptrs += BLOCK_M * stride_dom
    tl.store(DV + off_b * stride_dvb + off_h * stride_dvh + (offs_n[:, None] * stride_dvn + offs_d[None, :] * stride_dvd),
             dv.to(DV.dtype.element_ty), mask=offs_n[:, None] < seqlen_k)
    tl.store(DK + off_b * stride_dkb + off_h * stride_dkh + (offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd),
             dk.to(DK.dtype.element_ty), mask=offs_n[:, None] < seqlen_k)


'''

FLASH_ATTN_TRITON = {"FlashAttention": _FLASH_ATTN_TRITON_KERNEL + edit(A, "FlashAttention", (
    ("        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)\n", "dq.stride(),\n"
     "            H, T_Q, T_K, scale, CAUSAL=ctx.causal, BLOCK_M=bm, BLOCK_N=bn, D=D)\n"),
    "        dk, dv = torch.empty_like(k), torch.empty_like(v)\n"
    "        dq_accum = torch.zeros((B * H, T_Q, D), dtype=torch.float32, device=q.device)\n"
    "        _bwd_kernel_one_col_block[(triton.cdiv(T_K, bn), B * H)](\n"
    "            q, k, v, do, dq_accum, dk, dv, lse, delta, *q.stride(), *k.stride(), *v.stride(), *do.stride(),\n"
    "            *dk.stride(), *dv.stride(), H, T_Q, T_K, scale, IS_CAUSAL=ctx.causal, BLOCK_M=bm, BLOCK_N=bn,\n"
    "            BLOCK_HEADDIM=D)\n"
    "        dq = dq_accum.view(B, H, T_Q, D).to(q.dtype)\n"))}

# -- FlagAttention's flash.py @ ee91638d -------------------------------------------------------------------------
_FLAG_DELTA = '''@triton.jit
def delta_kernel(O, DO, Delta,
                 stride_ob, stride_oh, stride_ot, stride_od,
                 stride_dob, stride_doh, stride_dot, stride_dod,
                 H, T_Q, BLOCK_M: tl.constexpr, D: tl.constexpr):
    off_h, off_z = tl.program_id(1) % H, tl.program_id(1) // H
    Out = O + off_z * stride_ob + off_h * stride_oh
    DOh = DO + off_z * stride_dob + off_h * stride_doh
    Dlt = Delta + (off_z * H + off_h) * T_Q
    off_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_n = tl.arange(0, D)
    mask_m = off_m < T_Q
    o = tl.load(Out + off_m[:, None] * stride_ot + off_n[None, :] * stride_od, mask=mask_m[:, None]).to(tl.float32)
    do = tl.load(DOh + off_m[:, None] * stride_dot + off_n[None, :] * stride_dod, mask=mask_m[:, None]).to(tl.float32)
    delta = tl.sum(o * do, axis=1)
    tl.store(Dlt + off_m, delta, mask=mask_m)
'''

_FLAG_DELTA_CONTIGUOUS = '''@triton.jit
def delta_kernel(O, DO, Delta,
                 stride_ob, stride_oh, stride_ot, stride_od,
                 stride_dob, stride_doh, stride_dot, stride_dod,
                 H, T_Q, BLOCK_M: tl.constexpr, D: tl.constexpr):
    # before FlagAttention's 63735de: rows found as if O and dO were contiguous (B*H*T_Q rows of D)
    off_m = tl.program_id(1) * T_Q + tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    in_head = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M) < T_Q
    off_n = tl.arange(0, D)
    o = tl.load(O + off_m[:, None] * D + off_n[None, :], mask=in_head[:, None]).to(tl.float32)
    do = tl.load(DO + off_m[:, None] * D + off_n[None, :], mask=in_head[:, None]).to(tl.float32)
    delta = tl.sum(o * do, axis=1)
    tl.store(Delta + off_m, delta, mask=in_head)
'''

_FLAG_DKDV = '''@triton.jit
def dkdv_kernel(Q, K, V, DO, L, Delta, DK, DV,
                stride_qz, stride_qh, stride_qm, stride_qk,
                stride_kz, stride_kh, stride_kn, stride_kk,
                stride_vz, stride_vh, stride_vn, stride_vk,
                stride_doz, stride_doh, stride_dom, stride_dok,
                stride_dkz, stride_dkh, stride_dkn, stride_dkk,
                stride_dvz, stride_dvh, stride_dvn, stride_dvk,
                H, M, N, sm_scale,
                CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    input_dtype = Q.dtype.element_ty
    start_n = tl.program_id(0)
    off_h, off_z = tl.program_id(1) % H, tl.program_id(1) // H
    log2e: tl.constexpr = 1.4426950408889634
    qk_scale = sm_scale * log2e
    Q += off_z * stride_qz + off_h * stride_qh
    K += off_z * stride_kz + off_h * stride_kh
    V += off_z * stride_vz + off_h * stride_vh
    DO += off_z * stride_doz + off_h * stride_doh
    DK += off_z * stride_dkz + off_h * stride_dkh
    DV += off_z * stride_dvz + off_h * stride_dvh
    Delta += (off_z * H + off_h) * M
    L += (off_z * H + off_h) * M
    if CAUSAL:
        lo = tl.maximum(start_n * BLOCK_N, 0)
        lo = (lo // BLOCK_M) * BLOCK_M
    else:
        lo = 0
    offs_m_init = lo + tl.arange(0, BLOCK_M)
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m_base = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, D)
    q_ptrs = Q + (offs_m_init[:, None] * stride_qm + offs_k[None, :] * stride_qk)
    k_ptrs = K + (offs_n[:, None] * stride_kn + offs_k[None, :] * stride_kk)
    v_ptrs = V + (offs_n[:, None] * stride_vn + offs_k[None, :] * stride_vk)
    do_ptrs = DO + (offs_m_init[:, None] * stride_dom + offs_k[None, :] * stride_dok)
    dv_ptrs = DV + (offs_n[:, None] * stride_dvn + offs_k[None, :] * stride_dvk)
    dk_ptrs = DK + (offs_n[:, None] * stride_dkn + offs_k[None, :] * stride_dkk)
    mask_n = offs_n < N
    v = tl.load(v_ptrs, mask=mask_n[:, None])
    k = tl.load(k_ptrs, mask=mask_n[:, None])
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    for start_m in range(lo, M, BLOCK_M):
        offs_m = start_m + offs_m_base
        causal_mask = offs_m[:, None] >= offs_n[None, :]
        mask_m = offs_m < M
        valid_mask = mask_m[:, None]
        q = tl.load(q_ptrs, mask=mask_m[:, None])
        s = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        s += tl.dot(q, tl.trans(k))
        l = tl.load(L + offs_m, mask=mask_m)
        p = tl.math.exp2(s * qk_scale - l[:, None] * log2e)
        p = tl.where(valid_mask, p, 0.0)
        if CAUSAL:
            p = tl.where(causal_mask, p, 0.0)
        do = tl.load(do_ptrs, mask=mask_m[:, None])
        dv += tl.dot(tl.trans(p).to(input_dtype), do)
        delta = tl.load(Delta + offs_m, mask=mask_m)
        dp = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        dp += tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        ds = tl.where(valid_mask, ds, 0.0)
        if CAUSAL:
            ds = tl.where(causal_mask, ds, 0.0)
        ds = ds.to(input_dtype)
        dk += tl.dot(tl.trans(ds), q)
        q_ptrs += BLOCK_M * stride_qm
        do_ptrs += BLOCK_M * stride_dom
    dk *= sm_scale
    tl.store(dk_ptrs, dk.to(DK.dtype.element_ty), mask=mask_n[:, None])
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=mask_n[:, None])
'''

_FLAG_DQ_LOADS = '''        mask_n = offs_n < N
        v = tl.load(v_ptrs, mask=mask_n[:, None])
        k = tl.load(k_ptrs, mask=mask_n[:, None])
'''

_FLAG_DQ = '''@triton.jit
def dq_kernel(Q, K, V, DO, L, Delta, DQ,
              stride_qz, stride_qh, stride_qm, stride_qk,
              stride_kz, stride_kh, stride_kn, stride_kk,
              stride_vz, stride_vh, stride_vn, stride_vk,
              stride_doz, stride_doh, stride_dom, stride_dok,
              stride_dqz, stride_dqh, stride_dqm, stride_dqk,
              H, M, N, sm_scale,
              CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    input_dtype = Q.dtype.element_ty
    start_m = tl.program_id(0)
    off_h, off_z = tl.program_id(1) % H, tl.program_id(1) // H
    log2e: tl.constexpr = 1.4426950408889634
    qk_scale = sm_scale * log2e
    Q += off_z * stride_qz + off_h * stride_qh
    K += off_z * stride_kz + off_h * stride_kh
    V += off_z * stride_vz + off_h * stride_vh
    DO += off_z * stride_doz + off_h * stride_doh
    Delta += (off_z * H + off_h) * M
    L += (off_z * H + off_h) * M
    DQ += off_z * stride_dqz + off_h * stride_dqh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n_base = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, D)
    q_ptrs = Q + (offs_m[:, None] * stride_qm + offs_k[None, :] * stride_qk)
    k_ptrs = K + (offs_n_base[:, None] * stride_kn + offs_k[None, :] * stride_kk)
    v_ptrs = V + (offs_n_base[:, None] * stride_vn + offs_k[None, :] * stride_vk)
    dq_ptrs = DQ + (offs_m[:, None] * stride_dqm + offs_k[None, :] * stride_dqk)
    do_ptrs = DO + (offs_m[:, None] * stride_dom + offs_k[None, :] * stride_dok)
    mask_m = offs_m < M
    q = tl.load(q_ptrs, mask=mask_m[:, None])
    do = tl.load(do_ptrs, mask=mask_m[:, None])
    delta = tl.load(Delta + offs_m, mask=mask_m)
    l = tl.load(L + offs_m, mask=mask_m)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    # see note "Loop-Bound-For-N"
    if CAUSAL:
        hi = tl.minimum(N, (start_m + 1) * BLOCK_M)
    else:
        hi = N
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + offs_n_base
''' + _FLAG_DQ_LOADS + '''        s = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        s += tl.dot(q, tl.trans(k))
        p = tl.math.exp2(s * qk_scale - l[:, None] * log2e)
        dp = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        dp += tl.dot(do.to(input_dtype), tl.trans(v))
        ds = p * (dp - delta[:, None])
        ds = tl.where(mask_n, ds, 0.0)
        if CAUSAL:
            ds = tl.where(offs_m[:, None] >= offs_n[None, :], ds, 0.0)
        dq += tl.dot(ds.to(input_dtype), k)
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    dq *= sm_scale
    tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty), mask=mask_m[:, None])
'''

FLAG_ATTENTION = {"delta_kernel": _FLAG_DELTA, "dkdv_kernel": _FLAG_DKDV, "dq_kernel": _FLAG_DQ}

# before 7b91f00 (PR #8): the causal bound not capped at N, the loads unmasked when N is a multiple of BLOCK_N
# (the source's DIVISIBLE_N path, a constexpr there, a runtime test here)
FLAG_DQ_LOOP_BOUND = _FLAG_DQ.replace("        hi = tl.minimum(N, (start_m + 1) * BLOCK_M)\n",
                                      "        hi = (start_m + 1) * BLOCK_M\n").replace(
    _FLAG_DQ_LOADS, '''        mask_n = offs_n < N
        if N % BLOCK_N == 0:
            v = tl.load(v_ptrs)
            k = tl.load(k_ptrs)
        else:
            v = tl.load(v_ptrs, mask=mask_n[:, None])
            k = tl.load(k_ptrs, mask=mask_n[:, None])
''')

FLAG_DELTA_CONTIGUOUS = _FLAG_DELTA_CONTIGUOUS

# -- PR #2020: the D kernel on the forward's grid with the backward's block ----------------------------------------
PREPROCESS_ON_FORWARD_GRID = edit(A, "FlashAttention",
                                  ("        ctx.causal, ctx.block_m, ctx.block_n = causal, block_m, block_n\n",
                                   "        ctx.causal, ctx.block_m, ctx.block_n = causal, block_m, block_n\n"
                                   "        ctx.grid = (triton.cdiv(T_Q, block_m), B * H)\n"),
                                  ("        delta = torch.empty((B, H, T_Q), dtype=torch.float32, device=q.device)\n"
                                   "        delta_kernel[(triton.cdiv(T_Q, bm), B * H)](o, do, delta, *o.stride(), "
                                   "*do.stride(), H, T_Q,\n"
                                   "                                                     BLOCK_M=bm, D=D)\n",
                                   "        delta = torch.zeros((B, H, T_Q), dtype=torch.float32, device=q.device)\n"
                                   "        delta_kernel[ctx.grid](o, do, delta, *o.stride(), *do.stride(), H, T_Q, "
                                   "BLOCK_M=bn, D=D)\n"))
