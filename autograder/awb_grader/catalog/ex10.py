"""Misconception catalog for exercise 10 (softmax_kernel, flash_attention_kernel, flash_attention): the
kernel mistakes the exercise names (an accumulator not rescaled, padded keys not masked, the causal
loop one tile short, addresses computed as if contiguous, an fp16 accumulator), the slips learners
made and a bug that shipped in public kernels (issue 43: the running maximum started at 0, causal
tiles not skipped, loads without other=, a causal loop reading a whole key/value tile past T), and the
launcher's. A kernel mistake costs the kernel's cells only: the launcher is checked with a stand-in
kernel (checks/ex10.py, KernelStandIn), so every entry's must_fail is exactly the cells it loses."""

from . import Alternative, Mistake, edit

A = "10_flash_attention_triton"

LAUNCHER = ("test_flash_attention_values", "test_flash_attention_layouts")
KERNEL = ("test_flash_kernel_values", "test_flash_kernel_padding", "test_flash_kernel_causal",
          "test_flash_kernel_strides", "test_flash_kernel_fp16")
SOFTMAX = ("test_softmax_kernel_values", "test_softmax_kernel_strides")

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
        must_fail=SOFTMAX, hint="padded columns",
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
        id="softmax_out_ncols_apart", cell="softmax_kernel",
        description="the output rows assumed n_cols apart (row * n_cols) instead of the output's row stride",
        source=edit(A, "softmax_kernel", ("Y + row * stride_y + cols", "Y + row * n_cols + cols")),
        must_fail=("test_softmax_kernel_strides",), hint="output rows are written n_cols apart",
        label="output rows n_cols apart", visible=True),
    Mistake(
        id="softmax_store_unmasked", cell="softmax_kernel",
        description="the store has no mask: BLOCK - n_cols values are written past the end of each row",
        source=edit(A, "softmax_kernel", ("e / tl.sum(e, axis=0), mask=inside)", "e / tl.sum(e, axis=0))")),
        must_fail=SOFTMAX, hint="past column n_cols",
        visible=True),
    Mistake(
        id="softmax_exp2_without_log2e", cell="softmax_kernel",
        description="tl.exp2 in place of tl.exp without log2(e): a softmax of x * ln 2",
        source=edit(A, "softmax_kernel", ("e = tl.exp(x)", "e = tl.exp2(x)")),
        must_fail=SOFTMAX, hint="exp2 without log2(e)", label="exp2 without log2(e)"),
    # -- flash_attention_kernel ----------------------------------------------------------------
    Mistake(
        id="flash_acc_not_rescaled", cell="flash_attention_kernel",
        description="the accumulator is not rescaled when a tile raises the maximum",
        source=edit(A, "flash_attention_kernel", ("acc = acc * alpha[:, None] + ", "acc = acc + ")),
        must_fail=KERNEL, hint="accumulator acc is not rescaled",
        label="accumulator not rescaled"),
    Mistake(
        id="flash_l_not_rescaled", cell="flash_attention_kernel",
        description="the running sum is not rescaled when a tile raises the maximum",
        source=edit(A, "flash_attention_kernel", ("l = l * alpha + ", "l = l + ")),
        must_fail=KERNEL, hint="running sum l is not rescaled", label="sum not rescaled"),
    Mistake(
        id="flash_max_starts_at_zero", cell="flash_attention_kernel",
        description="the running maximum starts at 0, not -inf: right until every score of a row is far below 0, "
                    "where exp(s - 0) underflows, l = 0 and the row is nan",
        source=edit(A, "flash_attention_kernel", ('m = tl.full([BLOCK_M], float("-inf"), tl.float32)',
                                                  "m = tl.zeros([BLOCK_M], tl.float32)")),
        must_fail=("test_flash_kernel_values",), hint="running maximum m starts at 0", label="max starts at 0"),
    Mistake(
        id="flash_sum_starts_at_one", cell="flash_attention_kernel",
        description="the recurrence started as for one phantom key of score 0 (m at 0, l at 1; a log-sum-exp "
                    "started at 0 is the same): every row's sum gets an extra exp(0 - m)",
        source=edit(A, "flash_attention_kernel",
                    ('m = tl.full([BLOCK_M], float("-inf"), tl.float32)', "m = tl.zeros([BLOCK_M], tl.float32)"),
                    ("l = tl.zeros([BLOCK_M], tl.float32)", "l = tl.full([BLOCK_M], 1.0, tl.float32)")),
        must_fail=KERNEL, hint="does not start at 0", label="sum starts at 1"),
    Mistake(
        id="flash_no_division", cell="flash_attention_kernel",
        description="acc stored without the division by l",
        source=edit(A, "flash_attention_kernel", ("(acc / l[:, None]).to(", "acc.to(")),
        must_fail=KERNEL, hint="never divided by l", label="no division by l"),
    Mistake(
        id="flash_exp2_without_log2e", cell="flash_attention_kernel",
        description="tl.exp2 in place of tl.exp (as Triton's tutorial writes it) without log2(e) folded into the "
                    "scale: a softmax of the scores times ln 2",
        source=edit(A, "flash_attention_kernel", ("alpha = tl.exp(m - m_new)", "alpha = tl.exp2(m - m_new)"),
                    ("p = tl.exp(s - m_new[:, None])", "p = tl.exp2(s - m_new[:, None])")),
        must_fail=KERNEL, hint="exp2 without log2(e)", label="exp2 without log2(e)"),
    Mistake(
        id="flash_k_not_transposed", cell="flash_attention_kernel",
        description="tl.dot(q, k): K's tile not transposed (wrong values when D == BLOCK_N, an error otherwise)",
        source=edit(A, "flash_attention_kernel", ("tl.dot(q, tl.trans(k))", "tl.dot(q, k)")),
        must_fail=KERNEL, hint="not transposed", label="K not transposed"),
    Mistake(
        id="flash_padded_keys_unmasked", cell="flash_attention_kernel",
        description="padded keys not masked: loaded as zeros, their score 0 counts; right when T is a multiple of "
                    "BLOCK_N, and under the causal mask",
        source=edit(A, "flash_attention_kernel",
                    ("        keep = cols[None, :] < T\n        if CAUSAL:\n            keep = keep & (",
                     "        keep = cols[None, :] >= 0\n        if CAUSAL:\n            keep = keep & (")),
        must_fail=("test_flash_kernel_padding", "test_flash_kernel_strides"),
        hint="padded keys are not masked", label="padded keys not masked", visible=True),
    Mistake(
        id="flash_loads_without_other", cell="flash_attention_kernel",
        description="K and V loaded with a mask and no other=: the interpreter reads 0 in masked lanes, a GPU "
                    "whatever memory holds (nan or inf make the padded keys' 0 * v nan)",
        source=edit(A, "flash_attention_kernel", ("mask=cols[:, None] < T, other=0.0)           # (BLOCK_N, D)",
                                                  "mask=cols[:, None] < T)                      # (BLOCK_N, D)")),
        must_fail=("test_flash_kernel_padding",), hint="other=", label="loads without other="),
    Mistake(
        id="flash_causal_one_tile_short", cell="flash_attention_kernel",
        description="the causal loop stops before the tile that holds the diagonal (an off-by-one tile skip)",
        source=edit(A, "flash_attention_kernel", ("tl.minimum((i + 1) * BLOCK_M, T)", "tl.minimum(i * BLOCK_M, T)")),
        must_fail=("test_flash_kernel_causal", "test_flash_kernel_strides"), hint="causal loop stops one tile early",
        label="causal loop one tile short"),
    Mistake(
        id="flash_causal_strict", cell="flash_attention_kernel",
        description="the causal mask keeps keys < the query: a query does not see itself (row 0 sees nothing)",
        source=edit(A, "flash_attention_kernel", ("cols[None, :] <= rows[:, None]", "cols[None, :] < rows[:, None]")),
        must_fail=("test_flash_kernel_causal", "test_flash_kernel_strides"), hint="does not see its own key"),
    Mistake(
        id="flash_causal_tiles_not_skipped", cell="flash_attention_kernel",
        description="the causal kernel walks every key tile and masks: right values, but it loads (and computes) "
                    "the tiles after the diagonal that the exercise asks to skip",
        source=edit(A, "flash_attention_kernel", ("end = tl.minimum((i + 1) * BLOCK_M, T)", "end = T")),
        must_fail=("test_flash_kernel_causal",), hint="after the diagonal are not skipped",
        label="causal tiles not skipped"),
    Mistake(
        id="flash_causal_reads_past_T", cell="flash_attention_kernel",
        description="(a bug that shipped in a public kernel) the causal loop runs to (i + 1) * BLOCK_M, not clipped "
                    "to T, and the K and V loads are masked against that bound: the last query tile reads rows of K "
                    "and V past T (a whole tile when BLOCK_M > BLOCK_N); their scores are -inf, but 0 * nan is nan",
        source=edit(A, "flash_attention_kernel",
                    ("end = tl.minimum((i + 1) * BLOCK_M, T)", "end = (i + 1) * BLOCK_M"),
                    ("mask=cols[:, None] < T, other=0.0)           # (BLOCK_N, D)",
                     "mask=cols[:, None] < end, other=0.0)         # (BLOCK_N, D)")),
        must_fail=("test_flash_kernel_causal", "test_flash_kernel_strides"), hint="reads rows of K or V at or past T",
        label="causal loop reads past T"),
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
        must_fail=("test_flash_kernel_strides",), hint="wrong strides for the non-",
        label="strides ignored", visible=True),
    Mistake(
        id="flash_kv_strides_swapped", cell="flash_attention_kernel",
        description="K addressed with V's strides and V with K's: right when the two share a layout",
        source=edit(A, "flash_attention_kernel",
                    ("K + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd",
                     "K + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd"),
                    ("V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd",
                     "V + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd")),
        must_fail=("test_flash_kernel_strides",), hint="K is read with V's strides", label="K and V strides swapped",
        visible=True),
    Mistake(
        id="flash_last_dim_contiguous", cell="flash_attention_kernel",
        description="the last dimension assumed contiguous (d, not d * stride_?d): right unless a tensor's last "
                    "stride is not 1 (K stored transposed)",
        source=edit(A, "flash_attention_kernel",
                    ("dims[None, :] * stride_qd", "dims[None, :]"), ("dims[None, :] * stride_kd", "dims[None, :]"),
                    ("dims[None, :] * stride_vd", "dims[None, :]"), ("dims[None, :] * stride_od", "dims[None, :]")),
        must_fail=("test_flash_kernel_strides",), hint="last dimension is read as if contiguous",
        label="last dimension assumed contiguous", visible=True),
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
        id="launcher_kv_strides_swapped", cell="flash_attention",
        description="v's strides passed for k and k's for v: right when the two share a layout",
        source=edit(A, "flash_attention", ("*k.stride(), *v.stride()", "*v.stride(), *k.stride()")),
        must_fail=("test_flash_attention_layouts",), hint="strides of k and v are swapped",
        label="k's and v's strides swapped", visible=True),
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
        id="launcher_default_block_17", cell="flash_attention",
        description="a default block size of 17 (not a power of 2): right whenever the caller passes block_m",
        source=edit(A, "flash_attention", ("block_m: int = 16, block_n: int = 16)", "block_m: int = 17, block_n: int = 16)")),
        must_fail=LAUNCHER, hint="powers of 2", label="default block size 17", visible=True),
    Mistake(
        id="launcher_attention_in_torch", cell="flash_attention",
        description="the attention computed in PyTorch with a (T, T) score matrix: the kernel is never launched",
        source=_TORCH_LAUNCHER,
        must_fail=LAUNCHER, hint="never launched", label="no kernel launched"),
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
        id="warnings_in_launcher",
        description="a launcher that warns (warnings.warn on every call, a deprecated torch.cuda query): correct, "
                    "so full marks, warnings or not",
        cells={"flash_attention": edit(A, "flash_attention", (
            "    B, H, T, D = q.shape\n",
            "    import warnings\n    warnings.warn('flash_attention: block sizes are not tuned', UserWarning)\n"
            "    B, H, T, D = q.shape\n"))}),
]
