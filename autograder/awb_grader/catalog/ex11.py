"""Misconception catalog for exercise 11 (flash_forward_kernel, delta_kernel, dkdv_kernel, dq_kernel, FlashAttention,
FlashCausalSelfAttention): the backward pass's mistakes (D from one tile's P and dP, the scale missing or twice,
L in the other base, P without L or without the causal mask, padded rows not zeroed, an unnormalised P, a
transposed product, the causal loops a tile off, dQ written by several programs without atomics), the
Function's launch mistakes and the module's; and correct alternatives, among them public Triton kernels adapted
to the exercise's interfaces (``outside.py``: each with its source)."""

from . import Alternative, Mistake, edit
from . import ex11_outside as outside

A = "11_flash_attention_backward"

FWD = ("test_forward_values", "test_forward_causal", "test_forward_layouts")
FUNCTION = ("test_function_grads", "test_function_layouts")
FUNCTION_GPT = FUNCTION + ("test_gpt_trains",)

_FUSED_ATOMIC = '''@triton.jit
def dkdv_dq_kernel(Q, K, V, DO, L, Delta, DK, DV, DQ,
                   stride_qb, stride_qh, stride_qt, stride_qd,
                   stride_kb, stride_kh, stride_kt, stride_kd,
                   stride_vb, stride_vh, stride_vt, stride_vd,
                   stride_dob, stride_doh, stride_dot, stride_dod,
                   stride_dkb, stride_dkh, stride_dkt, stride_dkd,
                   stride_dvb, stride_dvh, stride_dvt, stride_dvd,
                   H, T_Q, T_K, scale,
                   CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    """dK, dV of key tile j and its share of dQ, added into DQ (float32, (B, H, T_Q, D) contiguous, zeroed)."""
    j, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    cols = j * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd,
                mask=cols[:, None] < T_K, other=0.0)
    v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd,
                mask=cols[:, None] < T_K, other=0.0)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    first = 0
    if CAUSAL:
        first = (j * BLOCK_N) // BLOCK_M * BLOCK_M
    for start in range(first, T_Q, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
                    mask=rows[:, None] < T_Q, other=0.0)
        do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dot + dims[None, :] * stride_dod,
                     mask=rows[:, None] < T_Q, other=0.0)
        lse = tl.load(L + bh * T_Q + rows, mask=rows < T_Q, other=0.0)
        delta = tl.load(Delta + bh * T_Q + rows, mask=rows < T_Q, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        keep = (rows[:, None] < T_Q) & (cols[None, :] < T_K)
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q)
        dq_part = tl.dot(ds.to(k.dtype), k) * scale                      # this key tile's share of dQ_i
        tl.atomic_add(DQ + bh * T_Q * D + rows[:, None] * D + dims[None, :], dq_part, mask=rows[:, None] < T_Q)
    tl.store(DK + b * stride_dkb + h * stride_dkh + cols[:, None] * stride_dkt + dims[None, :] * stride_dkd,
             (dk * scale).to(DK.dtype.element_ty), mask=cols[:, None] < T_K)
    tl.store(DV + b * stride_dvb + h * stride_dvh + cols[:, None] * stride_dvt + dims[None, :] * stride_dvd,
             dv.to(DV.dtype.element_ty), mask=cols[:, None] < T_K)


''' + edit(A, "FlashAttention", (
    ("        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)\n", "dq.stride(),\n"
     "            H, T_Q, T_K, scale, CAUSAL=ctx.causal, BLOCK_M=bm, BLOCK_N=bn, D=D)\n"),
    "        dk, dv = torch.empty_like(k), torch.empty_like(v)\n"
    "        dq32 = torch.zeros((B, H, T_Q, D), dtype=torch.float32, device=q.device)    # atomics add into it\n"
    "        dkdv_dq_kernel[(triton.cdiv(T_K, bn), B * H)](\n"
    "            q, k, v, do, lse, delta, dk, dv, dq32, *q.stride(), *k.stride(), *v.stride(), *do.stride(),\n"
    "            *dk.stride(), *dv.stride(), H, T_Q, T_K, scale, CAUSAL=ctx.causal, BLOCK_M=bm, BLOCK_N=bn, D=D)\n"
    "        dq = dq32.to(q.dtype)\n"))

_TORCH_FUNCTION = '''class FlashAttention(torch.autograd.Function):
    """Attention in PyTorch: the probabilities kept for the backward (what FlashAttention avoids)."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_m=16, block_n=16):
        s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])       # (B, H, T_Q, T_K)
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        p = torch.exp(s - s.amax(dim=-1, keepdim=True))
        p = p / p.sum(dim=-1, keepdim=True)
        ctx.save_for_backward(q, k, v, p)
        return (p @ v.float()).to(q.dtype)

    @staticmethod
    def backward(ctx, do):
        q, k, v, p = ctx.saved_tensors
        do = do.float()
        dv = p.transpose(-1, -2) @ do
        dp = do @ v.float().transpose(-1, -2)
        ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True)) / math.sqrt(q.shape[-1])
        dq, dk = ds @ k.float(), ds.transpose(-1, -2) @ q.float()
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def flash_attention(q, k, v, causal=False, block_m=16, block_n=16):
    return FlashAttention.apply(q, k, v, causal, block_m, block_n)
'''

MISTAKES = [
    # -- flash_forward_kernel ----------------------------------------------------------------------
    Mistake(
        id="fwd_lse_base2", cell="flash_forward_kernel",
        description="L stored in base 2 (m * log2(e) + log2(l)), as a kernel written with exp2 has it: the backward's "
                    "exp(S - L) is then wrong",
        source=edit(A, "flash_forward_kernel", ("m + tl.log(l), mask=rows < T_Q)",
                                                "m * 1.4426950408889634 + tl.log2(l), mask=rows < T_Q)")),
        must_fail=FWD + FUNCTION_GPT, hint="L is in base 2", label="L in base 2"),
    Mistake(
        id="fwd_causal_one_tile_short", cell="flash_forward_kernel",
        description="the causal loop stops before the tile that holds the diagonal",
        source=edit(A, "flash_forward_kernel", ("tl.minimum((i + 1) * BLOCK_M, T_K)", "tl.minimum(i * BLOCK_M, T_K)")),
        must_fail=("test_forward_causal", "test_forward_layouts") + FUNCTION_GPT,
        hint="causal loop stops one tile early", label="forward causal loop one tile short"),
    Mistake(
        id="fwd_fp16_accumulator", cell="flash_forward_kernel",
        description="the output accumulator kept in the input's dtype: right in float32, fp16 rounding for fp16",
        source=edit(A, "flash_forward_kernel",
                    ("acc = tl.zeros([BLOCK_M, D], tl.float32)", "acc = tl.zeros([BLOCK_M, D], q.dtype)"),
                    ("acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)",
                     "acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)).to(q.dtype)")),
        must_fail=("test_forward_layouts",), hint="an fp16 accumulator loses", label="fp16 forward accumulator",
        visible=True),
    Mistake(
        id="fwd_contiguous_addresses", cell="flash_forward_kernel",
        description="addresses computed as if q, k, v and O were contiguous: right only for contiguous tensors",
        source=edit(A, "flash_forward_kernel",
                    ("Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd",
                     "Q + bh * T_Q * D + rows[:, None] * D + dims[None, :]"),
                    ("K + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd",
                     "K + bh * T_K * D + cols[:, None] * D + dims[None, :]"),
                    ("V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd",
                     "V + bh * T_K * D + cols[:, None] * D + dims[None, :]"),
                    ("O + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od",
                     "O + bh * T_Q * D + rows[:, None] * D + dims[None, :]")),
        must_fail=("test_forward_layouts", "test_function_layouts", "test_gpt_trains"), hint="wrong strides for",
        label="forward strides ignored", visible=True),
    # -- delta_kernel ------------------------------------------------------------------------------
    Mistake(
        id="delta_do_read_with_o_strides", cell="delta_kernel",
        description="dO read with O's strides: right when both share a layout (contiguous O and dO)",
        source=edit(A, "delta_kernel", (
            "DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dot + dims[None, :] * stride_dod",
            "DO + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od")),
        must_fail=("test_delta_layouts", "test_function_layouts", "test_gpt_trains"), hint="dO is read with O's strides",
        label="dO with O's strides", visible=True),
    Mistake(
        id="delta_fp16_products", cell="delta_kernel",
        description="the products dO * O summed in the inputs' dtype: right in float32, fp16 rounding for fp16",
        source=edit(A, "delta_kernel", ("mask=rows[:, None] < T_Q, other=0.0).to(tl.float32)              # (BLOCK_M, D)",
                                        "mask=rows[:, None] < T_Q, other=0.0)"),
                    ("mask=rows[:, None] < T_Q, other=0.0).to(tl.float32)             # (BLOCK_M, D)",
                     "mask=rows[:, None] < T_Q, other=0.0)")),
        must_fail=("test_delta_layouts",), hint="summed in float16", label="Delta summed in fp16", visible=True),
    Mistake(
        id="delta_sum_axis0", cell="delta_kernel",
        description="Delta reduced over the query axis (axis=0) instead of the head dimension",
        source=edit(A, "delta_kernel", ("tl.sum(o * do, axis=1)", "tl.sum(o * do, axis=0)")),
        must_fail=("test_delta_values", "test_delta_layouts") + FUNCTION_GPT, hint="sums over the wrong axis",
        label="Delta over the wrong axis"),
    # -- dkdv_kernel -------------------------------------------------------------------------------
    Mistake(
        id="dkdv_no_scale", cell="dkdv_kernel",
        description="dK stored without the scale: dS is the gradient of the scaled scores",
        source=edit(A, "dkdv_kernel", ("(dk * scale).to(DK.dtype.element_ty)", "dk.to(DK.dtype.element_ty)")),
        must_fail=("test_dkdv_values", "test_dkdv_causal", "test_dkdv_layouts") + FUNCTION_GPT,
        hint="scale is missing from dK", label="no scale in dK"),
    Mistake(
        id="dkdv_scale_twice", cell="dkdv_kernel",
        description="the scale applied to dS and again to dK at the store",
        source=edit(A, "dkdv_kernel", ("ds = p * (dp - delta[:, None])", "ds = p * (dp - delta[:, None]) * scale")),
        must_fail=("test_dkdv_values", "test_dkdv_causal", "test_dkdv_layouts") + FUNCTION_GPT,
        hint="applied twice to dK", label="scale twice in dK"),
    Mistake(
        id="dkdv_p_without_lse", cell="dkdv_kernel",
        description="P recomputed as exp(S) without subtracting L: unnormalised probabilities",
        source=edit(A, "dkdv_kernel", ("tl.exp(s - lse[:, None]), 0.0)        # P recomputed from L",
                                       "tl.exp(s), 0.0)")),
        must_fail=("test_dkdv_values", "test_dkdv_causal", "test_dkdv_layouts") + FUNCTION_GPT,
        hint="without subtracting L", label="P without L (dK/dV)"),
    Mistake(
        id="dkdv_p_without_causal_mask", cell="dkdv_kernel",
        description="P recomputed without the causal mask: keys after the query get probability",
        source=edit(A, "dkdv_kernel", ("""        keep = (rows[:, None] < T_Q) & (cols[None, :] < T_K)
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
""", """        keep = (rows[:, None] < T_Q) & (cols[None, :] < T_K)
""")),
        must_fail=("test_dkdv_causal", "test_dkdv_layouts") + FUNCTION_GPT,
        hint="without the causal mask", label="P without the causal mask"),
    Mistake(
        id="dkdv_delta_from_tile", cell="dkdv_kernel",
        description="D recomputed from the tile's P and dP (rowsum over one key tile) instead of dO and O",
        source=edit(A, "dkdv_kernel", ("ds = p * (dp - delta[:, None])", "ds = p * (dp - tl.sum(p * dp, axis=1)[:, None])")),
        must_fail=("test_dkdv_values", "test_dkdv_causal", "test_dkdv_layouts") + FUNCTION_GPT,
        hint="recomputed from the tile's P and dP", label="D from one tile's P and dP"),
    Mistake(
        id="dkdv_dp_transposed", cell="dkdv_kernel",
        description="dP computed as V dO^T (keys by queries): a transposed product, wrong (or a shape error) when "
                    "the tiles are square (or not)",
        source=edit(A, "dkdv_kernel", ("dp = tl.dot(do, tl.trans(v))", "dp = tl.dot(v, tl.trans(do))")),
        must_fail=("test_dkdv_values", "test_dkdv_causal", "test_dkdv_layouts") + FUNCTION_GPT,
        hint="dP is transposed", label="dP transposed"),
    Mistake(
        id="dkdv_causal_start_late", cell="dkdv_kernel",
        description="the causal loop over query tiles starts one tile after the one that holds row j * BLOCK_N",
        source=edit(A, "dkdv_kernel", ("first = (j * BLOCK_N) // BLOCK_M * BLOCK_M",
                                       "first = ((j * BLOCK_N) // BLOCK_M + 1) * BLOCK_M")),
        must_fail=("test_dkdv_causal", "test_dkdv_layouts") + FUNCTION_GPT,
        hint="starts one tile late", label="dK/dV causal loop a tile late"),
    Mistake(
        id="dkdv_padded_rows_unmasked", cell="dkdv_kernel",
        description="the last query tile's rows not zeroed: Q and dO loaded without masks read past T_Q (another "
                    "head's rows, or garbage on a GPU)",
        source=edit(A, "dkdv_kernel",
                    ("+ dims[None, :] * stride_qd,\n                    mask=rows[:, None] < T_Q, other=0.0)",
                     "+ dims[None, :] * stride_qd)"),
                    ("+ dims[None, :] * stride_dod,\n                     mask=rows[:, None] < T_Q, other=0.0)",
                     "+ dims[None, :] * stride_dod)")),
        must_fail=("test_dkdv_values", "test_dkdv_causal", "test_dkdv_layouts") + FUNCTION,
        hint="nan in dK or dV", label="padded query rows not zeroed"),
    Mistake(
        id="dkdv_unnormalised_p", cell="dkdv_kernel",
        description="P recomputed as exp(S - the tile's row maximum), the forward's habit: unnormalised, so dV "
                    "and dK are off by each row's sum",
        source=edit(A, "dkdv_kernel", ("tl.exp(s - lse[:, None]), 0.0)        # P recomputed from L",
                                       "tl.exp(s - tl.max(tl.where(keep, s, float('-inf')), axis=1)[:, None]), 0.0)")),
        must_fail=("test_dkdv_values", "test_dkdv_causal", "test_dkdv_layouts") + FUNCTION_GPT,
        hint="an unnormalised P", label="unnormalised P in dV"),
    Mistake(
        id="dkdv_fp16_accumulators", cell="dkdv_kernel",
        description="dK and dV accumulated in the input's dtype: right in float32, fp16 rounding for fp16",
        source=edit(A, "dkdv_kernel",
                    ("dk = tl.zeros([BLOCK_N, D], tl.float32)\n    dv = tl.zeros([BLOCK_N, D], tl.float32)",
                     "dk = tl.zeros([BLOCK_N, D], k.dtype)\n    dv = tl.zeros([BLOCK_N, D], v.dtype)"),
                    ("dv += tl.dot(tl.trans(p).to(do.dtype), do)", "dv = (dv + tl.dot(tl.trans(p).to(do.dtype), do)).to(v.dtype)"),
                    ("dk += tl.dot(tl.trans(ds).to(q.dtype), q)", "dk = (dk + tl.dot(tl.trans(ds).to(q.dtype), q)).to(k.dtype)")),
        must_fail=("test_dkdv_layouts",), hint="fp16 accumulators lose", label="fp16 dK/dV accumulators",
        visible=True),
    # -- dq_kernel ---------------------------------------------------------------------------------
    Mistake(
        id="dq_no_scale", cell="dq_kernel",
        description="dQ stored without the scale",
        source=edit(A, "dq_kernel", ("(dq * scale).to(DQ.dtype.element_ty)", "dq.to(DQ.dtype.element_ty)")),
        must_fail=("test_dq_values", "test_dq_causal", "test_dq_layouts") + FUNCTION_GPT,
        hint="scale is missing from dQ", label="no scale in dQ"),
    Mistake(
        id="dq_overwritten", cell="dq_kernel",
        description="dQ overwritten by each key tile's term instead of accumulated",
        source=edit(A, "dq_kernel", ("dq += tl.dot(ds.to(k.dtype), k)", "dq = tl.dot(ds.to(k.dtype), k)")),
        must_fail=("test_dq_values", "test_dq_causal", "test_dq_layouts") + FUNCTION_GPT,
        hint="overwritten by each key tile", label="dQ not accumulated"),
    Mistake(
        id="dq_causal_one_tile_short", cell="dq_kernel",
        description="the causal loop over key tiles stops before the diagonal tile",
        source=edit(A, "dq_kernel", ("end = tl.minimum((i + 1) * BLOCK_M, T_K)", "end = tl.minimum(i * BLOCK_M, T_K)")),
        must_fail=("test_dq_causal", "test_dq_layouts") + FUNCTION_GPT,
        hint="stops one tile early", label="dQ causal loop one tile short"),
    Mistake(
        id="dq_exp2_natural_lse", cell="dq_kernel",
        description="P recomputed with exp2 and the scores in base 2, L left in natural-log units",
        source=edit(A, "dq_kernel", ("tl.exp(s - lse[:, None]), 0.0)", "tl.exp2(s * 1.4426950408889634 - lse[:, None]), 0.0)")),
        must_fail=("test_dq_values", "test_dq_causal", "test_dq_layouts") + FUNCTION_GPT,
        hint="tl.exp2 on L in natural-log units", label="exp2 with a natural-log L"),
    Mistake(
        id="dq_stored_with_do_strides", cell="dq_kernel",
        description="dQ stored with dO's strides (the address of the tile it was loaded from): right when dQ and "
                    "dO share a layout",
        source=edit(A, "dq_kernel", (
            "DQ + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqt + dims[None, :] * stride_dqd",
            "DQ + b * stride_dob + h * stride_doh + rows[:, None] * stride_dot + dims[None, :] * stride_dod")),
        must_fail=("test_dq_layouts",), hint="dQ is stored with do's strides", label="dQ with dO's strides",
        visible=True),
    # -- FlashAttention ----------------------------------------------------------------------------
    Mistake(
        id="fn_grads_swapped", cell="FlashAttention",
        description="backward returns dk, dq, dv: the gradients in the wrong order",
        source=edit(A, "FlashAttention", ("return dq, dk, dv, None, None, None", "return dk, dq, dv, None, None, None")),
        must_fail=FUNCTION_GPT, hint="wrong order", label="gradients in the wrong order"),
    Mistake(
        id="fn_backward_returns_three", cell="FlashAttention",
        description="backward returns only dq, dk, dv: autograd wants one gradient per input of forward",
        source=edit(A, "FlashAttention", ("return dq, dk, dv, None, None, None", "return dq, dk, dv")),
        must_fail=FUNCTION_GPT, hint="incorrect number of gradients", label="backward returns 3 values"),
    Mistake(
        id="fn_causal_not_in_backward", cell="FlashAttention",
        description="the backward kernels launched with CAUSAL=False whatever the forward was",
        source=edit(A, "FlashAttention", ("*dk.stride(), *dv.stride(), H, T_Q, T_K, scale, CAUSAL=ctx.causal",
                                          "*dk.stride(), *dv.stride(), H, T_Q, T_K, scale, CAUSAL=False"),
                    ("H, T_Q, T_K, scale, CAUSAL=ctx.causal, BLOCK_M=bm, BLOCK_N=bn, D=D)\n        return",
                     "H, T_Q, T_K, scale, CAUSAL=False, BLOCK_M=bm, BLOCK_N=bn, D=D)\n        return")),
        must_fail=FUNCTION_GPT, hint="CAUSAL is not passed to the backward kernels", label="backward not causal"),
    Mistake(
        id="fn_do_with_o_strides", cell="FlashAttention",
        description="dO's strides taken from O (do.stride() never passed): right when autograd hands a contiguous dO",
        source=edit(A, "FlashAttention", ("o, do, delta, *o.stride(), *do.stride(), H, T_Q,",
                                          "o, do, delta, *o.stride(), *o.stride(), H, T_Q,"),
                    ("*v.stride(), *do.stride(),\n            *dk.stride()", "*v.stride(), *o.stride(),\n            *dk.stride()"),
                    ("*do.stride(), *dq.stride(),", "*o.stride(), *dq.stride(),")),
        must_fail=("test_function_layouts", "test_gpt_trains"), hint="pass do.stride() for dO",
        label="dO with O's strides", visible=True),
    Mistake(
        id="fn_lse_in_input_dtype", cell="FlashAttention",
        description="L allocated in q's dtype: right in float32, L rounded to fp16 for fp16 inputs",
        source=edit(A, "FlashAttention", ("lse = torch.empty((B, H, T_Q), dtype=torch.float32",
                                          "lse = torch.empty((B, H, T_Q), dtype=q.dtype")),
        must_fail=("test_function_layouts",), hint="keep L and Delta in float32", label="L in fp16", visible=True),
    Mistake(
        id="fn_attention_in_torch", cell="FlashAttention",
        description="forward and backward written in PyTorch with the (T_Q, T_K) probabilities: no kernel launched",
        source=_TORCH_FUNCTION,
        must_fail=("test_function_layouts",), hint="score matrix", label="no kernel launched"),
    Mistake(
        id="fn_fused_dq_without_atomics", cell="FlashAttention",
        description="dQ computed inside the dK/dV kernel, every key-tile program writing its share with tl.store "
                    "instead of tl.atomic_add: the last program's share wins (on a GPU, whichever stores last)",
        source=_FUSED_ATOMIC.replace("tl.atomic_add(DQ + bh", "tl.store(DQ + bh"),
        must_fail=FUNCTION_GPT, hint="dK and dV are right and dQ is wrong", label="dQ without atomics"),
    # -- FlashCausalSelfAttention --------------------------------------------------------------------
    Mistake(
        id="mod_merge_without_transpose", cell="FlashCausalSelfAttention",
        description="heads merged by reshaping (B, H, T, Dh) to (B, T, Dm) without moving the head axis back",
        source=edit(A, "FlashCausalSelfAttention", ("y.transpose(1, 2).reshape(B, T, Dm)", "y.reshape(B, T, Dm)")),
        must_fail=("test_gpt_trains",), hint="merged without moving the head axis back", label="heads merged wrong"),
    Mistake(
        id="mod_split_without_transpose", cell="FlashCausalSelfAttention",
        description="heads split by reshaping (B, T, Dm) to (B, H, T, Dh) directly",
        source=edit(A, "FlashCausalSelfAttention", ("t.view(B, T, H, Dm // H).transpose(1, 2)",
                                                    "t.reshape(B, H, T, Dm // H)")),
        must_fail=("test_gpt_trains",), hint="split without the transpose", label="heads split wrong"),
    Mistake(
        id="mod_always_causal", cell="FlashCausalSelfAttention",
        description="always causal: right inside the GPT (is_causal=True), wrong when called with is_causal=False",
        source=edit(A, "FlashCausalSelfAttention", ("causal=is_causal)", "causal=True)")),
        must_fail=("test_gpt_trains",), hint="causal whatever is_causal says", label="always causal", visible=True),
    Mistake(
        id="mod_mask_ignored", cell="FlashCausalSelfAttention",
        description="a mask (or kv) given is silently ignored: right when neither is given (inside the GPT), no "
                    "ValueError when one is",
        source=edit(A, "FlashCausalSelfAttention", (
            "        if kv is not None or mask is not None:\n"
            "            raise ValueError(\"FlashCausalSelfAttention: self-attention without a mask only\")\n", "")),
        must_fail=("test_gpt_trains",), hint="ran without a word", label="mask ignored", visible=True),
    Mistake(
        id="mod_no_output_projection", cell="FlashCausalSelfAttention",
        description="the heads merged but W_o never applied",
        source=edit(A, "FlashCausalSelfAttention", ("return self.W_o(y.transpose(1, 2).reshape(B, T, Dm))",
                                                    "return y.transpose(1, 2).reshape(B, T, Dm)")),
        must_fail=("test_gpt_trains",), hint="W_o is not applied", label="no W_o"),
]

# bugs that shipped in public Triton backward kernels and were later reported or fixed (ex11_outside.py: sources)
MISTAKES += [
    Mistake(
        id="outside_tutorial_backward_always_causal", cell="dkdv_kernel",
        description="Triton's fused-attention tutorial's backward (06-fused-attention.py @ 003da478) adapted as it "
                    "shipped: the causal stages whatever causal says (triton-lang/triton issue #4541, fixed by PR "
                    "#8565)",
        source=outside.TUTORIAL_ALWAYS_CAUSAL["dkdv_kernel"],
        extra_cells={"dq_kernel": outside.TUTORIAL_ALWAYS_CAUSAL["dq_kernel"]},
        must_fail=("test_dkdv_values", "test_dkdv_layouts", "test_dq_values", "test_dq_layouts",
                   "test_function_grads", "test_function_layouts"),
        hint="though CAUSAL is False", label="tutorial backward always causal"),
    Mistake(
        id="outside_flagattention_preprocess_contiguous", cell="delta_kernel",
        description="FlagAttention's _bwd_preprocess before its fix 63735de: O and dO read as if contiguous",
        source=outside.FLAG_DELTA_CONTIGUOUS,
        must_fail=("test_delta_layouts", "test_function_layouts", "test_gpt_trains"), hint="wrong strides for o, do",
        label="FlagAttention preprocess strides", visible=True),
    Mistake(
        id="outside_flagattention_dq_loop_bound", cell="dq_kernel",
        description="FlagAttention's _bwd_q_kernel before its fix 7b91f00 (PR #8): the causal loop runs to "
                    "(i + 1) * BLOCK_M past T_K, with unmasked loads when T_K is a multiple of BLOCK_N",
        source=outside.FLAG_DQ_LOOP_BOUND,
        must_fail=("test_dq_causal",), hint="not (i + 1) * BLOCK_M", label="FlagAttention dQ loop bound"),
    Mistake(
        id="outside_preprocess_on_forward_grid", cell="FlashAttention",
        description="the D kernel launched on the forward's grid with the backward's block (Triton's tutorial before "
                    "PR #2020): rows of Delta never computed when block_n < block_m",
        source=outside.PREPROCESS_ON_FORWARD_GRID,
        must_fail=("test_function_grads",), hint="dV does not use Delta", label="D on the forward's grid"),
]

ALTERNATIVES = [
    Alternative(
        id="fused_atomic_dq",
        description="dQ inside the dK/dV kernel with tl.atomic_add into a zeroed float32 buffer (FlashAttention-2's "
                    "first Triton kernels did this): no dq_kernel launch, the same gradients",
        cells={"FlashAttention": _FUSED_ATOMIC}),
    Alternative(
        id="no_causal_skipping",
        description="the causal loops of both backward kernels walk every tile and mask (slower, right): skipping "
                    "tiles is an optimisation the checks cannot see and do not require",
        cells={"dkdv_kernel": edit(A, "dkdv_kernel", ("first = (j * BLOCK_N) // BLOCK_M * BLOCK_M", "first = 0")),
               "dq_kernel": edit(A, "dq_kernel", ("end = tl.minimum((i + 1) * BLOCK_M, T_K)", "end = T_K"))}),
    Alternative(
        id="causal_start_at_key_row",
        description="the dK/dV causal loop starts at row j * BLOCK_N exactly (query tiles not aligned to BLOCK_M, as "
                    "Triton's tutorial starts them): every row that sees the key tile is still visited",
        cells={"dkdv_kernel": edit(A, "dkdv_kernel", ("first = (j * BLOCK_N) // BLOCK_M * BLOCK_M",
                                                      "first = j * BLOCK_N"))}),
    Alternative(
        id="outside_triton_tutorial",
        description="Triton's fused-attention tutorial's backward (06-fused-attention.py @ 003da478, with PR #8565's "
                    "non-causal path): dK/dV transposed, exp2, the diagonal in masked sub-blocks, dQ right to left",
        cells=outside.TUTORIAL),
    Alternative(
        id="outside_flash_attn_triton",
        description="Tri Dao's flash_attn_triton.py backward (@ 00583fb1, SEQUENCE_PARALLEL): one kernel per key "
                    "block, dQ by tl.atomic_add into float32",
        cells=outside.FLASH_ATTN_TRITON),
    Alternative(
        id="outside_flagattention",
        description="FlagAttention's flash.py backward (@ ee91638d): _bwd_preprocess, _bwd_kv_kernel, _bwd_q_kernel",
        cells=outside.FLAG_ATTENTION),
    Alternative(
        id="warnings_in_function",
        description="a Function that warns (warnings.warn in forward, a deprecated call): correct, so full marks, "
                    "warnings or not",
        cells={"FlashAttention": edit(A, "FlashAttention", (
            "        B, H, T_Q, D = q.shape\n        T_K = k.shape[2]\n        o = ",
            "        import warnings\n        warnings.warn('FlashAttention: block sizes are not tuned', UserWarning)\n"
            "        B, H, T_Q, D = q.shape\n        T_K = k.shape[2]\n        o = "))}),
]
