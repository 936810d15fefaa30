"""Misconception catalog for exercise 10 (softmax_kernel, flash_attention_kernel, flash_attention): the
kernel mistakes the exercise names (an accumulator not rescaled, padded keys not masked, the causal
loop one tile short, addresses computed as if contiguous, an fp16 accumulator) and the launcher's."""

from . import Alternative, Mistake, edit

A = "10_flash_attention_triton"

LAUNCHER = ("test_flash_attention_values", "test_flash_attention_layouts")

_TORCH_LAUNCHER = '''def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    B, H, T, D = q.shape
    scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(D)             # (B, H, T, T)
    if causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    w = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return ((w / w.sum(dim=-1, keepdim=True)) @ v.float()).to(q.dtype)
'''

MISTAKES = [
    # -- softmax_kernel ------------------------------------------------------------------------
    Mistake(
        id="softmax_pad_zero", cell="softmax_kernel",
        description="padded columns loaded as 0.0: their exp(0 - max) counts in the sum; right only when n_cols == "
                    "BLOCK",
        source=edit(A, "softmax_kernel", ('other=float("-inf")', "other=0.0")),
        must_fail=("test_softmax_kernel_values", "test_softmax_kernel_strides"), hint="padded columns",
        label="padded columns not -inf", visible=True),
    Mistake(
        id="softmax_no_max", cell="softmax_kernel",
        description="no maximum subtracted: exp overflows for large values (inf / inf = nan)",
        source=edit(A, "softmax_kernel", ("    x = x - tl.max(x, axis=0)\n", "")),
        must_fail=("test_softmax_kernel_values",), hint="no maximum is subtracted", visible=True),
    Mistake(
        id="softmax_rows_ncols_apart", cell="softmax_kernel",
        description="the rows assumed n_cols apart (row * n_cols) instead of the row stride",
        source=edit(A, "softmax_kernel", ("X + row * stride_x + cols", "X + row * n_cols + cols")),
        must_fail=("test_softmax_kernel_strides",), hint="read n_cols apart", visible=True),
    Mistake(
        id="softmax_store_unmasked", cell="softmax_kernel",
        description="the store has no mask: BLOCK - n_cols values are written past the end of each row",
        source=edit(A, "softmax_kernel", ("e / tl.sum(e, axis=0), mask=inside)", "e / tl.sum(e, axis=0))")),
        must_fail=("test_softmax_kernel_values", "test_softmax_kernel_strides"), hint="past column n_cols",
        visible=True),
    # -- flash_attention_kernel ----------------------------------------------------------------
    Mistake(
        id="flash_acc_not_rescaled", cell="flash_attention_kernel",
        description="the accumulator is not rescaled when a tile raises the maximum",
        source=edit(A, "flash_attention_kernel", ("acc = acc * alpha[:, None] + ", "acc = acc + ")),
        must_fail=("test_flash_kernel_values",), hint="accumulator acc is not rescaled",
        label="accumulator not rescaled"),
    Mistake(
        id="flash_l_not_rescaled", cell="flash_attention_kernel",
        description="the running sum is not rescaled when a tile raises the maximum",
        source=edit(A, "flash_attention_kernel", ("l = l * alpha + ", "l = l + ")),
        must_fail=("test_flash_kernel_values",), hint="running sum l is not rescaled", label="sum not rescaled"),
    Mistake(
        id="flash_padded_keys_unmasked", cell="flash_attention_kernel",
        description="padded keys not masked: loaded as zeros, their score 0 counts; right when T is a multiple of "
                    "BLOCK_N, and under the causal mask",
        source=edit(A, "flash_attention_kernel",
                    ("        keep = cols[None, :] < T\n        if CAUSAL:\n            keep = keep & (",
                     "        keep = cols[None, :] >= 0\n        if CAUSAL:\n            keep = keep & (")),
        must_fail=("test_flash_kernel_padding", "test_flash_kernel_strides", "test_flash_attention_values",
                   "test_flash_attention_layouts"),
        hint="padded keys are not masked", label="padded keys not masked", visible=True),
    Mistake(
        id="flash_causal_one_tile_short", cell="flash_attention_kernel",
        description="the causal loop stops before the tile that holds the diagonal (an off-by-one tile skip)",
        source=edit(A, "flash_attention_kernel", ("tl.minimum((i + 1) * BLOCK_M, T)", "tl.minimum(i * BLOCK_M, T)")),
        must_fail=("test_flash_kernel_causal",), hint="causal loop stops one tile early",
        label="causal loop one tile short"),
    Mistake(
        id="flash_causal_strict", cell="flash_attention_kernel",
        description="the causal mask keeps keys < the query: a query does not see itself (row 0 sees nothing)",
        source=edit(A, "flash_attention_kernel", ("cols[None, :] <= rows[:, None]", "cols[None, :] < rows[:, None]")),
        must_fail=("test_flash_kernel_causal",), hint="does not see its own key"),
    Mistake(
        id="flash_contiguous_addresses", cell="flash_attention_kernel",
        description="addresses computed as if q, k, v and O were contiguous: right only for contiguous tensors",
        source=edit(A, "flash_attention_kernel",
                    ("Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd",
                     "Q + bh * T * D + rows[:, None] * D + dims[None, :]"),
                    ("K + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd",
                     "K + bh * T * D + cols[:, None] * D + dims[None, :]"),
                    ("V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd",
                     "V + bh * T * D + cols[:, None] * D + dims[None, :]"),
                    ("O + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od",
                     "O + bh * T * D + rows[:, None] * D + dims[None, :]")),
        must_fail=("test_flash_kernel_strides", "test_flash_attention_layouts"), hint="wrong strides for the non-",
        label="strides ignored", visible=True),
    Mistake(
        id="flash_fp16_accumulator", cell="flash_attention_kernel",
        description="the accumulator kept in the input's dtype: right for float32 inputs, fp16 rounding for fp16",
        source=edit(A, "flash_attention_kernel",
                    ("acc = tl.zeros([BLOCK_M, D], tl.float32)", "acc = tl.zeros([BLOCK_M, D], q.dtype)"),
                    ("acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)",
                     "acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)).to(q.dtype)")),
        must_fail=("test_flash_kernel_fp16",), hint="accumulator loses the small terms", label="fp16 accumulator",
        visible=True),
    # -- flash_attention -----------------------------------------------------------------------
    Mistake(
        id="launcher_grid_batch_only", cell="flash_attention",
        description="the grid's second axis is B, not B * H: only the first heads are computed",
        source=edit(A, "flash_attention", ("grid = (triton.cdiv(T, block_m), B * H)", "grid = (triton.cdiv(T, block_m), B)")),
        must_fail=LAUNCHER, hint="grid's second axis must be B * H", label="grid misses the heads"),
    Mistake(
        id="launcher_q_strides_everywhere", cell="flash_attention",
        description="q's strides passed for k and v: right when the three share a layout",
        source=edit(A, "flash_attention", ("*k.stride(), *v.stride()", "*q.stride(), *q.stride()")),
        must_fail=("test_flash_attention_layouts",), hint="read with q's strides", label="q's strides for k and v",
        visible=True),
    Mistake(
        id="launcher_scale_over_d", cell="flash_attention",
        description="scale 1 / D instead of 1 / sqrt(D)",
        source=edit(A, "flash_attention", ("1 / math.sqrt(D)", "1 / D")),
        must_fail=LAUNCHER, hint="scaled by 1 / D"),
    Mistake(
        id="launcher_causal_dropped", cell="flash_attention",
        description="CAUSAL=False whatever causal says",
        source=edit(A, "flash_attention", ("CAUSAL=causal", "CAUSAL=False")),
        must_fail=LAUNCHER, hint="CAUSAL is not passed on"),
    Mistake(
        id="launcher_attention_in_torch", cell="flash_attention",
        description="the attention computed in PyTorch with a (T, T) score matrix: the kernel is never launched",
        source=_TORCH_LAUNCHER,
        must_fail=("test_flash_attention_layouts",), hint="(T, T) score matrix", label="no kernel launched"),
]

ALTERNATIVES = [
    Alternative(
        id="written_differently",
        description="the softmax with exp2 and log2(e); the forward kernel as Triton's tutorial writes it (exp2 with "
                    "scale * log2(e), pointers advanced tile by tile, the causal loop in two stages: tiles before the "
                    "diagonal unmasked, the diagonal tile masked); the launcher with integer arithmetic for the grid",
        cells={
            "softmax_kernel": '''@triton.jit
def softmax_kernel(X, Y, stride_x, stride_y, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = tl.arange(0, BLOCK)
    row = tl.load(X + pid * stride_x + offsets, mask=offsets < n_cols, other=-float("inf"))
    row = row.to(tl.float32) * 1.4426950408889634                   # log2(e): exp(x) = exp2(x * log2(e))
    num = tl.exp2(row - tl.max(row, axis=0))
    den = tl.sum(num, axis=0)
    tl.store(Y + pid * stride_y + offsets, num / den, mask=offsets < n_cols)
''',
            "flash_attention_kernel": '''@triton.jit
def _tile(acc, l, m, q, k_ptrs, v_ptrs, rows, lo, hi, T, qk_scale, stride_kt, stride_vt,
          MASK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols0 = tl.arange(0, BLOCK_N)
    k_ptrs += lo * stride_kt
    v_ptrs += lo * stride_vt
    for start in range(lo, hi, BLOCK_N):
        cols = start + cols0
        k = tl.load(k_ptrs, mask=cols[None, :] < T, other=0.0)           # (D, BLOCK_N): k transposed
        qk = tl.dot(q, k) * qk_scale
        ok = cols[None, :] < T
        if MASK:
            ok = ok & (rows[:, None] >= cols[None, :])
        qk = tl.where(ok, qk, -1.0e6)
        m_ij = tl.maximum(m, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m - m_ij)
        l = l * alpha + tl.sum(p, 1)
        v = tl.load(v_ptrs, mask=cols[:, None] < T, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_ij
        k_ptrs += BLOCK_N * stride_kt
        v_ptrs += BLOCK_N * stride_vt
    return acc, l, m


@triton.jit
def flash_attention_kernel(Q, K, V, O,
                           stride_qb, stride_qh, stride_qt, stride_qd,
                           stride_kb, stride_kh, stride_kt, stride_kd,
                           stride_vb, stride_vh, stride_vt, stride_vd,
                           stride_ob, stride_oh, stride_ot, stride_od,
                           H, T, scale,
                           CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    d = tl.arange(0, D)
    q_ptrs = Q + off_z * stride_qb + off_h * stride_qh + rows[:, None] * stride_qt + d[None, :] * stride_qd
    k_ptrs = K + off_z * stride_kb + off_h * stride_kh + cols[None, :] * stride_kt + d[:, None] * stride_kd
    v_ptrs = V + off_z * stride_vb + off_h * stride_vh + cols[:, None] * stride_vt + d[None, :] * stride_vd
    q = tl.load(q_ptrs, mask=rows[:, None] < T, other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0e-30
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    qk_scale = scale * 1.44269504                                        # log2(e)
    if CAUSAL:
        diag = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N                  # the first key tile that needs the mask
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, k_ptrs, v_ptrs, rows, 0, diag, T, qk_scale, stride_kt, stride_vt,
                              False, BLOCK_M, BLOCK_N)
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, k_ptrs, v_ptrs, rows, diag, tl.minimum((start_m + 1) * BLOCK_M, T),
                              T, qk_scale, stride_kt, stride_vt, True, BLOCK_M, BLOCK_N)
    else:
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, k_ptrs, v_ptrs, rows, 0, T, T, qk_scale, stride_kt, stride_vt,
                              False, BLOCK_M, BLOCK_N)
    acc = acc / l_i[:, None]
    o_ptrs = O + off_z * stride_ob + off_h * stride_oh + rows[:, None] * stride_ot + d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(O.type.element_ty), mask=rows[:, None] < T)
''',
            "flash_attention": '''def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    batch, heads, length, width = q.shape
    out = torch.empty_like(q)                                 # same strides as q: passed as they are
    grid = ((length + block_m - 1) // block_m, batch * heads)
    flash_attention_kernel[grid](
        q, k, v, out,
        q.stride(0), q.stride(1), q.stride(2), q.stride(3),
        k.stride(0), k.stride(1), k.stride(2), k.stride(3),
        v.stride(0), v.stride(1), v.stride(2), v.stride(3),
        out.stride(0), out.stride(1), out.stride(2), out.stride(3),
        heads, length, width ** -0.5,
        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=width)
    return out
''',
        }),
    Alternative(
        id="no_tile_skipping",
        description="the causal kernel walks every key tile and masks (slower, but right): skipping tiles is an "
                    "optimisation the checks cannot see and do not require",
        cells={"flash_attention_kernel": edit(A, "flash_attention_kernel",
                                              ("end = tl.minimum((i + 1) * BLOCK_M, T)", "end = T"))}),
    Alternative(
        id="warnings_in_launcher",
        description="a launcher that warns (warnings.warn on every call, a deprecated torch.cuda query): correct, "
                    "so full marks, warnings or not",
        cells={"flash_attention": edit(A, "flash_attention", (
            "    B, H, T, D = q.shape\n",
            "    import warnings\n    warnings.warn('flash_attention: block sizes are not tuned', UserWarning)\n"
            "    B, H, T, D = q.shape\n"))}),
]
