"""Misconception catalog for exercise 05 (multi-head attention).

The mistakes are written as edits of the solution, the way they happen in practice: everything
else right, one line wrong.
"""

from . import Alternative, Mistake, edit

A = "05_multi_head_attention"

_MHA_ALL = ("test_mha_self", "test_mha_weights", "test_mha_mask", "test_mha_cross", "test_from_torch")

MISTAKES = [
    # -- split_heads / merge_heads -----------------------------------------------------------
    Mistake(
        id="split_direct_view", cell="split_heads",
        description="split_heads reshapes (B, T, D) straight to (B, H, T, D/H): tokens are poured into heads "
                    "in reading order and the sequence is scrambled (right shape, wrong content)",
        source=edit(A, "split_heads",
                    ("x.view(B, T, n_heads, D // n_heads).transpose(1, 2)", "x.reshape(B, n_heads, T, D // n_heads)")),
        must_fail=("test_split_heads_values",) + _MHA_ALL, hint="straight to (B, H, T, D/H)"),
    Mistake(
        id="split_interleaved", cell="split_heads",
        description="split_heads cuts D as (D/H, H): head h gets every H-th feature instead of a block",
        source=edit(A, "split_heads", ("view(B, T, n_heads, D // n_heads).transpose(1, 2)",
                                      "view(B, T, D // n_heads, n_heads).permute(0, 3, 1, 2)")),
        must_fail=("test_split_heads_values",) + _MHA_ALL, hint="(D/H, H)"),
    Mistake(
        id="split_no_transpose", cell="split_heads",
        description="split_heads stops at (B, T, H, D/H): the transpose that puts heads before tokens is missing",
        source=edit(A, "split_heads", (".transpose(1, 2)", "")),
        must_fail=("test_split_heads_shape", "test_split_heads_values") + _MHA_ALL, hint="transpose(1, 2)",
        visible=True),
    Mistake(
        id="merge_without_transpose", cell="merge_heads",
        description="merge_heads reshapes (B, H, T, Dh) directly to (B, T, D) without transposing back first",
        source=edit(A, "merge_heads", ("transpose(1, 2).", "")),
        must_fail=("test_merge_heads",) + _MHA_ALL, hint="without transposing first"),
    Mistake(
        id="merge_heads_wrong_order", cell="merge_heads",
        description="merge_heads interleaves the heads' features (permute to (B, T, Dh, H)) instead of "
                    "concatenating head 0, head 1, ...",
        source=edit(A, "merge_heads", ("transpose(1, 2", "permute(0, 2, 3, 1")),
        must_fail=("test_merge_heads",) + _MHA_ALL, hint="heads merged in the wrong order"),
    Mistake(
        id="merge_view_after_transpose", cell="merge_heads",
        description="merge_heads calls .view after transpose: PyTorch refuses (the tensor is not contiguous)",
        source=edit(A, "merge_heads", ("reshape", "view")),
        must_fail=("test_merge_heads",) + _MHA_ALL, hint=".reshape(", visible=True),
    # -- MultiHeadAttention ------------------------------------------------------------------
    Mistake(
        id="scale_sqrt_d", cell="MultiHeadAttention",
        description="scores divided by sqrt(D) instead of sqrt(D/H): every head's softmax is too flat",
        source=edit(A, "MultiHeadAttention", ("math.sqrt(D // H)", "math.sqrt(D)")),
        must_fail=_MHA_ALL, hint="sqrt(D/H)"),
    Mistake(
        id="qkv_chunk_order", cell="MultiHeadAttention",
        description="q/k/v taken from W_qkv's output in the wrong order (keys first)",
        source=edit(A, "MultiHeadAttention", ("            q, k,", "            k, q,")),
        must_fail=("test_mha_self", "test_mha_weights", "test_mha_mask", "test_from_torch"),
        hint="chunk order"),
    Mistake(
        id="missing_w_o", cell="MultiHeadAttention",
        description="no output projection: the merged heads are returned without W_o",
        source=edit(A, "MultiHeadAttention", ("self.W_o(merge_heads(weights @ v)", "merge_heads(weights @ v")),
        must_fail=("test_mha_self", "test_mha_mask", "test_mha_cross", "test_from_torch"), hint="missing W_o"),
    Mistake(
        id="mask_not_broadcast_over_heads", cell="MultiHeadAttention",
        description="an extra axis inserted into the mask (written for a (B, T, S) mask): a (T, S) causal or "
                    "(B, 1, 1, S) padding mask no longer lines up with (B, H, T, S)",
        source=edit(A, "MultiHeadAttention", ("mask,", "mask.unsqueeze(1),")),
        must_fail=("test_mha_mask", "test_mha_weights", "test_mha_cross"), hint="broadcast", visible=True),
    Mistake(
        id="mask_wrong_axis", cell="MultiHeadAttention",
        description="the mask transposed (applied to the query axis instead of the key axis)",
        source=edit(A, "MultiHeadAttention", ("mask,", "mask.transpose(-2, -1),")),
        must_fail=("test_mha_mask", "test_mha_weights", "test_mha_cross"), hint="wrong axis"),
    Mistake(
        id="softmax_query_axis", cell="MultiHeadAttention",
        description="softmax over the query axis (dim=-2) instead of the keys",
        source=edit(A, "MultiHeadAttention", ("=-1)                ", "=-2)                ")),
        must_fail=_MHA_ALL, hint="query axis"),
    Mistake(
        id="softmax_head_axis", cell="MultiHeadAttention",
        description="softmax over the head axis (dim=1) instead of the keys",
        source=edit(A, "MultiHeadAttention", ("dim=-1)                ", "dim=1)                ")),
        must_fail=_MHA_ALL, hint="head axis"),
    Mistake(
        id="cross_keys_from_x", cell="MultiHeadAttention",
        description="cross-attention computes keys and values from x instead of kv",
        source=edit(A, "MultiHeadAttention", ("(kv,", "(x,")),
        must_fail=("test_mha_cross", "test_from_torch"), hint="keys and values from x"),
    Mistake(
        id="bias_dropped", cell="MultiHeadAttention",
        description="W_qkv and W_o built without biases whatever `bias` says",
        source=edit(A, "MultiHeadAttention", ("d_model, bias=bias)\n"
                                              "        self.W_o",
                                              "d_model, bias=False)\n"
                                              "        self.W_o"),
                                             ("d_model, bias=bias)\n"
                                              "        self.last_weights",
                                              "d_model, bias=False)\n"
                                              "        self.last_weights")),
        must_fail=("test_mha_init", "test_mha_self", "test_from_torch"), hint="bias dropped"),
    Mistake(
        id="forward_calls_sdpa", cell="MultiHeadAttention",
        description="forward calls F.scaled_dot_product_attention instead of writing the attention",
        source=edit(A, "MultiHeadAttention",
                    (("q = q / math.sqrt", "self.last_weights = weights.detach()\n"),
                     "y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"),
                    ("merge_heads(weights @ v)", "merge_heads(y)")),
        must_fail=_MHA_ALL, hint="off limits"),
    # -- mha_param_count / from_torch ---------------------------------------------------------
    Mistake(
        id="param_count_without_bias", cell="mha_param_count",
        description="parameter count forgets the biases (4 D^2 whatever `bias` says)",
        source=edit(A, "mha_param_count", (" + (4 * d_model if bias else 0)", "")),
        must_fail=("test_mha_param_count",), hint="bias dropped from the count"),
    Mistake(
        id="param_count_one_bias_per_matrix", cell="mha_param_count",
        description="parameter count with one D-sized bias per matrix (2 D) instead of 3 D for W_qkv plus D for W_o",
        source=edit(A, "mha_param_count", ("4 * d_model if bias", "2 * d_model if bias")),
        must_fail=("test_mha_param_count",), hint="3D + D biases"),
    Mistake(
        id="param_count_without_w_o", cell="mha_param_count",
        description="parameter count of W_qkv only: the output projection W_o is forgotten",
        source=edit(A, "mha_param_count",
                    ("4 * d_model * d_model + (4 * d_model", "3 * d_model * d_model + (3 * d_model")),
        must_fail=("test_mha_param_count",), hint="W_o is D x D"),
    Mistake(
        id="from_torch_transposed_out_proj", cell="from_torch",
        description="from_torch copies out_proj.weight transposed (it is square, so nothing complains)",
        source=edit(A, "from_torch", ("copy_(mha.out_proj.weight)", "copy_(mha.out_proj.weight.T)")),
        must_fail=("test_from_torch",), hint="copy them as they are"),
    Mistake(
        id="from_torch_ignores_bias_flag", cell="from_torch",
        description="from_torch always builds a module with biases, so a bias-free nn.MultiheadAttention gets "
                    "random biases added",
        source=edit(A, "from_torch", (", bias=bias)", ")")),
        must_fail=("test_from_torch",), hint="has no biases", visible=True),
    Mistake(
        id="from_torch_forgets_biases", cell="from_torch",
        description="from_torch copies the weight matrices but not the biases",
        source=edit(A, "from_torch", (", bias=bias)", ")"), (("        if bias:", "out_proj.bias)\n"), "")),
        must_fail=("test_from_torch",), hint="biases were not copied"),
    # -- the cross path (issue 24: a real bias=False crash there cost points in test_from_torch only) ------
    Mistake(
        id="cross_bias_slice_of_none", cell="MultiHeadAttention",
        description="the cross-attention path slices W_qkv.bias without checking for None: fails with bias=False",
        source=edit(A, "MultiHeadAttention",
                    ("q = F.linear(x, W[:D], None if b is None else b[:D])", "q = F.linear(x, W[:D], b[:D])"),
                    ("k, v = F.linear(kv, W[D:], None if b is None else b[D:])", "k, v = F.linear(kv, W[D:], b[D:])")),
        must_fail=("test_mha_cross", "test_from_torch"), hint="bias=False", label="cross path needs a bias"),
    Mistake(
        id="cross_same_length_as_self", cell="MultiHeadAttention",
        description="treats kv of the same shape as x as self-attention (keys and values from x): right only "
                    "while the source length differs from the target length",
        source=edit(A, "MultiHeadAttention", ("if kv is None:                                         # self-attention",
                                              "if kv is None or kv.shape == x.shape:                  # self-attention")),
        must_fail=("test_mha_cross",), hint="keys and values from x", label="kv of x's shape taken as x"),
    # -- surviving mutants of the solution (tools/mutation.py), closed by new checks -----------------
    Mistake(
        id="mha_default_no_bias", cell="MultiHeadAttention",
        description="bias=False as the default: right whenever bias is passed, but MultiHeadAttention(d_model, "
                    "n_heads) (as exercises 06-08 build it) has no biases",
        source=edit(A, "MultiHeadAttention", ("n_heads: int, bias: bool = True)", "n_heads: int, bias: bool = False)")),
        must_fail=("test_mha_init",), hint="bias=True is the default", label="no biases by default"),
    Mistake(
        id="param_count_default_no_bias", cell="mha_param_count",
        description="bias=False as the count's default: mha_param_count(d_model) leaves out the biases",
        source=edit(A, "mha_param_count", ("bias: bool = True", "bias: bool = False")),
        must_fail=("test_mha_param_count",), hint="bias=True is the default", label="count without biases by default"),
    # -- contract only: right for some of the inputs the text promises, visibly wrong on the others
    Mistake(
        id="forward_needs_bias", cell="MultiHeadAttention",
        description="forward slices W_qkv.bias without checking for None: right with bias=True, fails with bias=False",
        source=edit(A, "MultiHeadAttention", (
            """        if kv is None:                                         # self-attention
            q, k, v = self.W_qkv(x).split(D, dim=-1)           # 3 x (B, T, D)
        else:                                                  # cross-attention
            W, b = self.W_qkv.weight, self.W_qkv.bias
            q = F.linear(x, W[:D], None if b is None else b[:D])                            # (B, T, D)
            k, v = F.linear(kv, W[D:], None if b is None else b[D:]).split(D, dim=-1)       # 2 x (B, S, D)""",
            """        W, b = self.W_qkv.weight, self.W_qkv.bias
        src = x if kv is None else kv
        q = F.linear(x, W[:D], b[:D])                                  # (B, T, D)
        k, v = F.linear(src, W[D:], b[D:]).split(D, dim=-1)            # 2 x (B, S, D)""")),
        must_fail=("test_mha_self", "test_mha_cross", "test_from_torch"), hint="bias=False", visible=True),
    Mistake(
        id="param_count_math_pow", cell="mha_param_count",
        description="counts with math.pow, which returns a float: the right number, but not an integer",
        source=edit(A, "mha_param_count", ("4 * d_model * d_model", "4 * math.pow(d_model, 2)")),
        must_fail=("test_mha_param_count",), hint="float", visible=True),
]

ALTERNATIVES = [
    Alternative(
        id="einsum_chunks",
        description="split/merge with chunk/stack and cat/unbind; attention in einsum on (B, T, H, Dh) tensors; "
                    "from_torch through load_state_dict",
        cells={
            "split_heads": '''def split_heads(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)
''',
            "merge_heads": '''def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)
''',
            "MultiHeadAttention": '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, kv=None, mask=None):
        D, H = self.d_model, self.n_heads
        src = x if kv is None else kv
        Wq, Wk, Wv = self.W_qkv.weight.chunk(3, dim=0)
        if self.W_qkv.bias is not None:
            bq, bk, bv = self.W_qkv.bias.chunk(3)
        else:
            bq = bk = bv = None
        q = F.linear(x, Wq, bq).unflatten(-1, (H, D // H))      # (B, T, H, Dh)
        k = F.linear(src, Wk, bk).unflatten(-1, (H, D // H))    # (B, S, H, Dh)
        v = F.linear(src, Wv, bv).unflatten(-1, (H, D // H))
        scores = torch.einsum("bthd,bshd->bhts", q, k) * (D // H) ** -0.5
        if mask is not None:
            scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
        w = scores.softmax(dim=-1)
        self.last_weights = w.detach()
        y = torch.einsum("bhts,bshd->bthd", w, v).flatten(-2)   # (B, T, D)
        return self.W_o(y)
''',
            "mha_param_count": '''def mha_param_count(d_model, bias=True):
    shapes = [(3 * d_model, d_model), (d_model, d_model)]
    n = sum(a * b for a, b in shapes)
    if bias:
        n += sum(a for a, _ in shapes)
    return n
''',
            "from_torch": '''def from_torch(mha):
    has_bias = mha.in_proj_bias is not None
    m = MultiHeadAttention(mha.embed_dim, mha.num_heads, bias=has_bias)
    state = {"W_qkv.weight": mha.in_proj_weight, "W_o.weight": mha.out_proj.weight}
    if has_bias:
        state.update({"W_qkv.bias": mha.in_proj_bias, "W_o.bias": mha.out_proj.bias})
    m.load_state_dict({k: t.detach().clone() for k, t in state.items()})
    return m
''',
        }),
    Alternative(
        id="permute_and_head_loop",
        description="split/merge with permute and flatten; forward loops over heads slicing W_qkv's rows",
        cells={
            "split_heads": '''def split_heads(x, n_heads):
    B, T, D = x.shape
    return x.reshape(B, T, n_heads, -1).permute(0, 2, 1, 3)
''',
            "merge_heads": '''def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)
''',
            "MultiHeadAttention": '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, kv=None, mask=None):
        D, H = self.d_model, self.n_heads
        Dh = D // H
        kv = x if kv is None else kv
        W = self.W_qkv.weight
        b = self.W_qkv.bias if self.W_qkv.bias is not None else torch.zeros(3 * D)
        B, T, S = x.shape[0], x.shape[1], kv.shape[1]
        outs, ws = [], []
        for h in range(H):
            rows = torch.arange(h * Dh, (h + 1) * Dh)
            q = x @ W[rows].T + b[rows]
            k = kv @ W[D + rows].T + b[D + rows]
            v = kv @ W[2 * D + rows].T + b[2 * D + rows]
            s = q @ k.transpose(1, 2) / math.sqrt(Dh)
            if mask is not None:
                s = s.masked_fill(~mask.expand(B, H, T, S)[:, h], float("-inf"))
            w = torch.softmax(s, dim=-1)
            ws.append(w)
            outs.append(w @ v)
        self.last_weights = torch.stack(ws, dim=1).detach()
        return self.W_o(torch.cat(outs, dim=-1))
''',
        }),
    Alternative(
        id="warnings_last_weights_with_graph",
        description="keeps last_weights without .detach() (the graph stays attached: torch warns when such a "
                    "tensor is turned into a number) and copies weights with torch.tensor(tensor) (torch warns "
                    "to use clone): correct, so full marks, warnings or not",
        cells={
            "MultiHeadAttention": edit(A, "MultiHeadAttention",
                                       ("self.last_weights = weights.detach()", "self.last_weights = weights")),
            "from_torch": edit(A, "from_torch", ("ours.W_qkv.weight.copy_(mha.in_proj_weight)",
                                                 "ours.W_qkv.weight.copy_(torch.tensor(mha.in_proj_weight))")),
        }),
]
