"""Misconception catalog for exercise 06 (positions, LayerNorm, feed-forward, the block,
parameter counts, loading nn.TransformerEncoderLayer)."""

from . import Alternative, Mistake, edit

A = "06_transformer_block"

_PE = ("test_sinusoidal_shape", "test_sinusoidal_values")
_BLOCK_ALL = ("test_block_pre_ln", "test_block_post_ln", "test_block_mask")
_LOADER = ("test_from_torch_post_ln", "test_from_torch_pre_ln")

MISTAKES = [
    # -- sinusoidal_positions ----------------------------------------------------------------
    Mistake(
        id="pe_sin_cos_swapped", cell="sinusoidal_positions",
        description="cosine in the even columns and sine in the odd ones",
        source=edit(A, "sinusoidal_positions", ("pe[:, 0::2] = torch.sin(angle)\n    pe[:, 1::2] = torch.cos(angle)",
                                               "pe[:, 0::2] = torch.cos(angle)\n    pe[:, 1::2] = torch.sin(angle)")),
        must_fail=_PE, hint="even columns"),
    Mistake(
        id="pe_halves", cell="sinusoidal_positions",
        description="all sines then all cosines (concatenated halves) instead of interleaved columns",
        source=edit(A, "sinusoidal_positions", (("pe = torch.zeros", "return pe"),
                                               "return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)")),
        must_fail=_PE, hint="halves"),
    Mistake(
        id="pe_exponent_pair_index", cell="sinusoidal_positions",
        description="exponent i/d with the pair index i instead of 2i/d",
        source=edit(A, "sinusoidal_positions", ("two_i = torch.arange(0, d_model,", "i = torch.arange(d_model //"),
                                               ("(two_i ", "(i ")),
        must_fail=("test_sinusoidal_values",), hint="pair index"),
    Mistake(
        id="pe_exponent_column_index", cell="sinusoidal_positions",
        description="exponent k/d with the column index k, so a sin/cos pair gets two frequencies",
        source='''def sinusoidal_positions(T, d_model):
    pe = torch.zeros(T, d_model)
    for t in range(T):
        for k in range(d_model):
            angle = t / 10000 ** (k / d_model)
            pe[t, k] = math.sin(angle) if k % 2 == 0 else math.cos(angle)
    return pe
''',
        must_fail=("test_sinusoidal_values",), hint="column index"),
    Mistake(
        id="pe_multiply", cell="sinusoidal_positions",
        description="t multiplied by 10000^(2i/d) instead of divided by it",
        source=edit(A, "sinusoidal_positions", ("t / 10000", "t * 10000")),
        must_fail=("test_sinusoidal_values",), hint="multiplied"),
    # -- LayerNorm ---------------------------------------------------------------------------
    Mistake(
        id="ln_wrong_axis", cell="LayerNorm",
        description="LayerNorm statistics over the batch axis (BatchNorm-like) instead of the features",
        source=edit(A, "LayerNorm", ("mean(dim=-1, keepdim=", "mean(dim=0, keepdim="),
                                    ("var(dim=-1, keepdim=", "var(dim=0, keepdim=")),
        must_fail=("test_layernorm_values", "test_layernorm_eps", "test_from_torch_post_ln", "test_from_torch_pre_ln"),
        hint="dim=-1"),
    Mistake(
        id="ln_unbiased_variance", cell="LayerNorm",
        description="the unbiased variance (divides by d - 1), torch's default for .var()",
        source=edit(A, "LayerNorm", (", unbiased=False", "")),
        must_fail=("test_layernorm_values", "test_layernorm_eps"), hint="unbiased"),
    Mistake(
        id="ln_eps_outside_sqrt", cell="LayerNorm",
        description="eps added to the standard deviation, outside the square root",
        source=edit(A, "LayerNorm", ("var = x.var", "std = x.std"), ("torch.sqrt(var", "(std")),
        must_fail=("test_layernorm_eps",), hint="inside the square root"),
    Mistake(
        id="ln_plain_tensors", cell="LayerNorm",
        description="gain and bias stored as plain tensors, not nn.Parameter (never trained)",
        source=edit(A, "LayerNorm", ("nn.Parameter(torch.ones(d)", "torch.ones(d"),
                                    ("nn.Parameter(torch.zeros(d)", "torch.zeros(d")),
        must_fail=("test_layernorm_params", "test_layernorm_values", "test_layernorm_eps"), hint="nn.Parameter"),
    Mistake(
        id="ln_builtin", cell="LayerNorm",
        description="calls F.layer_norm instead of writing LayerNorm",
        source=edit(A, "LayerNorm", (("mu = x.mean", "self.bias\n"),
                                    "return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)\n")),
        must_fail=("test_layernorm_values", "test_layernorm_eps"), hint="off limits"),
    Mistake(
        id="ln_no_gain_bias", cell="LayerNorm",
        description="normalises but never applies the gain and bias",
        source=edit(A, "LayerNorm", (" * self.weight + self.bias", "")),
        must_fail=("test_layernorm_values", "test_layernorm_eps"), hint="no gain and bias"),
    # -- FeedForward -------------------------------------------------------------------------
    Mistake(
        id="ff_no_relu", cell="FeedForward",
        description="two linear layers without the ReLU between them (a single linear map)",
        source=edit(A, "FeedForward", ("ReLU(), nn.", "")),
        must_fail=("test_feedforward_values",), hint="no ReLU"),
    Mistake(
        id="ff_relu_last", cell="FeedForward",
        description="the ReLU after the second linear layer: outputs can never be negative",
        source=edit(A, "FeedForward", ("ReLU(), nn.Linear(d_ff, d_model),\n"
                                       "                                ",
                                       "Linear(d_ff, d_model), nn.ReLU(),")),
        must_fail=("test_feedforward_values",), hint="ReLU after the second"),
    Mistake(
        id="ff_ignores_d_ff", cell="FeedForward",
        description="hidden width d_model instead of d_ff",
        source=edit(A, "FeedForward", ("d_ff), nn.ReLU(), nn.Linear(d_ff", "d_model), nn.ReLU(), nn.Linear(d_model")),
        must_fail=("test_feedforward_structure",) + _BLOCK_ALL + _LOADER, hint="d_ff"),
    Mistake(
        id="ff_gelu", cell="FeedForward",
        description="GELU instead of the ReLU the exercise (and nn.TransformerEncoderLayer) uses",
        source=edit(A, "FeedForward", (".ReLU(", ".GELU(")),
        must_fail=("test_feedforward_values",), hint="GELU"),
    Mistake(
        id="ff_no_dropout", cell="FeedForward",
        description="the dropout argument is ignored",
        source=edit(A, "FeedForward", (",\n                                 nn.Dropout(dropout)", "")),
        must_fail=("test_feedforward_structure",), hint="Dropout", visible=True),
    # -- TransformerBlock --------------------------------------------------------------------
    Mistake(
        id="block_residual_after_norm", cell="TransformerBlock",
        description="pre-LN with the residual added after the norm: ln(x) + attn(ln(x))",
        source=edit(A, "TransformerBlock", ("x = x + self.drop(self.attn(self.ln1(x), mask=mask))   # (B, T, D)\n"
                                            "            x = x + self.ff(self.ln2(x)",
                                            "h = self.ln1(x)\n"
                                            "            x = h + self.drop(self.attn(h, mask=mask))\n"
                                            "            h = self.ln2(x)\n"
                                            "            x = h + self.ff(h")),
        must_fail=("test_block_pre_ln", "test_block_mask"), hint="residual added after the norm"),
    Mistake(
        id="block_ignores_pre_ln", cell="TransformerBlock",
        description="always post-LN, whatever pre_ln says",
        source=edit(A, "TransformerBlock", (("if self.pre_ln:", "x = self.ln2(x + self.ff(x))"),
                                           "x = self.ln1(x + self.drop(self.attn(x, mask=mask)))\n"
                                           "        x = self.ln2(x + self.ff(x))")),
        must_fail=("test_block_pre_ln", "test_block_mask"), hint="branch on self.pre_ln"),
    Mistake(
        id="block_mask_dropped", cell="TransformerBlock",
        description="the mask is never passed on to the attention",
        source=edit(A, "TransformerBlock", ("), mask=mask)", "))"), ("x, mask=mask", "x")),
        must_fail=("test_block_mask",), hint="pass mask on"),
    Mistake(
        id="block_no_ff_residual", cell="TransformerBlock",
        description="no residual connection around the feed-forward network",
        source=edit(A, "TransformerBlock", ("= x + self.ff", "= self.ff"), ("ln2(x + self.", "ln2(self.")),
        must_fail=_BLOCK_ALL, hint="no residual around the feed-forward"),
    Mistake(
        id="block_one_layernorm", cell="TransformerBlock",
        description="the same LayerNorm (ln1) used before both sub-layers",
        source=edit(A, "TransformerBlock", ("(self.ln2(x)", "(self.ln1(x)"), ("self.ln2(x ", "self.ln1(x ")),
        must_fail=_BLOCK_ALL, hint="ln1 used for both"),
    # -- block_param_count -------------------------------------------------------------------
    Mistake(
        id="count_no_biases", cell="block_param_count",
        description="forgets the biases of the linear layers",
        source=edit(A, "block_param_count", (" + (4 * D if bias else 0)", ""), (" + ((d_ff + D) if bias else 0)", "")),
        must_fail=("test_block_param_count",), hint="biases of the linear layers are missing"),
    Mistake(
        id="count_no_layernorm", cell="block_param_count",
        description="forgets the LayerNorms' gains and biases",
        source=edit(A, "block_param_count", (" + layer_norms", "")),
        must_fail=("test_block_param_count",), hint="LayerNorms are missing"),
    Mistake(
        id="count_no_output_projection", cell="block_param_count",
        description="counts 3 D^2 for attention (W_q, W_k, W_v) and forgets W_o",
        source=edit(A, "block_param_count", ("4 * D * D + (4 * D if", "3 * D * D + (3 * D if")),
        must_fail=("test_block_param_count",), hint="W_o forgotten"),
    Mistake(
        id="count_bias_false_drops_layernorm_bias", cell="block_param_count",
        description="bias=False also removes the LayerNorm biases",
        source=edit(A, "block_param_count", ("layer_norms = 2 * 2 * D", "layer_norms = 2 * 2 * D if bias else 2 * D")),
        must_fail=("test_block_param_count",), hint="LayerNorm biases"),
    # -- from_torch_encoder_layer ------------------------------------------------------------
    Mistake(
        id="loader_ignores_norm_first", cell="from_torch_encoder_layer",
        description="builds a pre-LN block whatever layer.norm_first says",
        source=edit(A, "from_torch_encoder_layer", (", pre_ln=layer.norm_first", "")),
        must_fail=("test_from_torch_post_ln",), hint="norm_first"),
    Mistake(
        id="loader_norms_swapped", cell="from_torch_encoder_layer",
        description="norm1 copied into ln2 and norm2 into ln1",
        source=edit(A, "from_torch_encoder_layer",
                    ("(block.ln1.weight, layer.norm1.weight), (block.ln1.bias, layer.norm1.bias)",
                     "(block.ln1.weight, layer.norm2.weight), (block.ln1.bias, layer.norm2.bias)"),
                    ("(block.ln2.weight, layer.norm2.weight), (block.ln2.bias, layer.norm2.bias)",
                     "(block.ln2.weight, layer.norm1.weight), (block.ln2.bias, layer.norm1.bias)")),
        must_fail=_LOADER, hint="swapped"),
    Mistake(
        id="loader_no_biases", cell="from_torch_encoder_layer",
        description="copies the weight matrices but not the biases of the linear layers",
        source=edit(A, "from_torch_encoder_layer", (", (block.attn.W_qkv.bias, sa.in_proj_bias)", ""),
                    (", (block.attn.W_o.bias, sa.out_proj.bias)", ""), (", (lin1.bias, layer.linear1.bias)", ""),
                    (", (lin2.bias, layer.linear2.bias)", "")),
        must_fail=_LOADER, hint="biases were not copied"),
    Mistake(
        id="loader_no_layernorms", cell="from_torch_encoder_layer",
        description="forgets to copy the LayerNorm weights",
        source=edit(A, "from_torch_encoder_layer", ((",\n             (block.ln1.weight", "layer.norm2.bias)"), "")),
        must_fail=_LOADER, hint="LayerNorm weights were not copied"),
    # -- contract only: right for some of the inputs the text promises, visibly wrong on the others
    Mistake(
        id="pe_with_batch_axis", cell="sinusoidal_positions",
        description="returns the table with a batch axis, (1, T, d_model), ready to add to (B, T, D) embeddings",
        source=edit(A, "sinusoidal_positions", ("    return pe\n", "    return pe.unsqueeze(0)\n")),
        must_fail=_PE, hint="one row per position", visible=True),
    Mistake(
        id="ln_fixed_eps", cell="LayerNorm",
        description="forward uses 1e-5 whatever eps the layer was built with",
        source=edit(A, "LayerNorm", ("torch.sqrt(var + self.eps)", "torch.sqrt(var + 1e-5)")),
        must_fail=("test_layernorm_eps",), hint="ignores its eps argument", visible=True),
    Mistake(
        id="ln_dim_2", cell="LayerNorm",
        description="statistics over dim=2: the features of a (B, T, d) input only, wrong for other shapes",
        source=edit(A, "LayerNorm", ("x.mean(dim=-1, keepdim=True)", "x.mean(dim=2, keepdim=True)"),
                    ("x.var(dim=-1, keepdim=True, unbiased=False)", "x.var(dim=2, keepdim=True, unbiased=False)")),
        must_fail=("test_layernorm_values", "test_layernorm_eps"), hint="dim=-1", visible=True),
    Mistake(
        id="ff_width_4_d_model", cell="FeedForward",
        description="hidden width fixed at 4 * d_model (the usual value) instead of the d_ff argument",
        source=edit(A, "FeedForward", ("nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)",
                                       "nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model)")),
        must_fail=("test_feedforward_structure",) + _BLOCK_ALL + _LOADER, hint="d_ff", visible=True),
    Mistake(
        id="block_fixed_heads", cell="TransformerBlock",
        description="the attention always gets 4 heads, whatever n_heads says",
        source=edit(A, "TransformerBlock", ("MultiHeadAttention(d_model, n_heads)", "MultiHeadAttention(d_model, 4)")),
        must_fail=_BLOCK_ALL + _LOADER, hint="n_heads", visible=True),
    Mistake(
        id="block_no_is_causal", cell="TransformerBlock",
        description="forward(x, mask=None) without the is_causal argument: right with masks, but exercise 08's "
                    "GPT cannot call it",
        source=edit(A, "TransformerBlock",
                    ("def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False)",
                     "def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None)"),
                    ("        if is_causal:                                                  # hide the future\n"
                     "            T = x.size(-2)\n"
                     "            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()   # (T, T)\n"
                     "            mask = causal if mask is None else mask & causal\n", "")),
        must_fail=("test_block_mask",), hint="forward(self, x, mask=None, is_causal=False)", visible=True,
        label="no is_causal argument"),
    Mistake(
        id="block_is_causal_ignored", cell="TransformerBlock",
        description="accepts is_causal but never builds the causal mask",
        source=edit(A, "TransformerBlock", ("        if is_causal:                                                  # hide the future\n"
                                            "            T = x.size(-2)\n"
                                            "            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()   # (T, T)\n"
                                            "            mask = causal if mask is None else mask & causal\n", "")),
        must_fail=("test_block_mask",), hint="is_causal ignored", visible=True),
    Mistake(
        id="block_causal_replaces_mask", cell="TransformerBlock",
        description="is_causal=True replaces the given mask with the causal one: padding is no longer masked",
        source=edit(A, "TransformerBlock", ("mask = causal if mask is None else mask & causal", "mask = causal")),
        must_fail=("test_block_mask",), hint="replaced the given mask", visible=True),
    Mistake(
        id="block_causal_inverted", cell="TransformerBlock",
        description="the causal mask built with triu (True on the future), the opposite of True = may attend",
        source=edit(A, "TransformerBlock", (".tril()   # (T, T)", ".triu(diagonal=1)   # (T, T)")),
        must_fail=("test_block_mask",), hint="causal mask inverted", visible=True),
    Mistake(
        id="count_math_pow", cell="block_param_count",
        description="counts with math.pow, which returns a float: the right number, but not an integer",
        source=edit(A, "block_param_count", ("attention = 4 * D * D", "attention = 4 * math.pow(D, 2)")),
        must_fail=("test_block_param_count",), hint="float", visible=True),
    # -- dropout placement (issue 24: real code put it after the LayerNorm or over the stream) --------
    Mistake(
        id="block_dropout_whole_stream", cell="TransformerBlock",
        description="pre-LN dropout over the whole residual stream, drop(x + attn(ln1(x))), instead of on the "
                    "attention's output before the residual add",
        source=edit(A, "TransformerBlock", ("x = x + self.drop(self.attn(self.ln1(x), mask=mask))",
                                            "x = self.drop(x + self.attn(self.ln1(x), mask=mask))")),
        must_fail=("test_block_pre_ln",), hint="whole residual stream", label="dropout over the residual stream"),
    Mistake(
        id="block_dropout_after_layernorm", cell="TransformerBlock",
        description="post-LN dropout after the LayerNorm, drop(ln1(x + attn(x))), instead of on the attention's "
                    "output before the residual add (a bug a public encoder layer shipped)",
        source=edit(A, "TransformerBlock", ("x = self.ln1(x + self.drop(self.attn(x, mask=mask)))",
                                            "x = self.drop(self.ln1(x + self.attn(x, mask=mask)))")),
        must_fail=("test_block_post_ln",), hint="dropout after the LayerNorm", label="dropout after the LayerNorm"),
    Mistake(
        id="ff_dropout_on_input", cell="FeedForward",
        description="the feed-forward's dropout on its input instead of its output",
        source=edit(A, "FeedForward", ("self.net = nn.Sequential(nn.Linear(d_model, d_ff)",
                                       "self.net = nn.Sequential(nn.Dropout(dropout), nn.Linear(d_model, d_ff)"),
                    (",\n                                 nn.Dropout(dropout))", ")")),
        must_fail=("test_feedforward_structure",), hint="never on its input", label="FFN dropout on its input"),
    # -- surviving mutants of the solution (tools/mutation.py): the defaults the text gives ---------
    Mistake(
        id="ff_default_dropout_1", cell="FeedForward",
        description="dropout=1.0 as the default: right whenever dropout is passed, everything dropped in training "
                    "otherwise",
        source=edit(A, "FeedForward", ("d_ff: int, dropout: float = 0.0)", "d_ff: int, dropout: float = 1.0)")),
        must_fail=("test_feedforward_structure",), hint="dropout=0.0 is the default", label="FFN drops all by default"),
    Mistake(
        id="block_default_post_ln", cell="TransformerBlock",
        description="pre_ln=False as the default: right whenever pre_ln is passed, but TransformerBlock(d_model, "
                    "n_heads, d_ff) (as exercise 08 builds GPT's blocks) is post-LN",
        source=edit(A, "TransformerBlock", ("dropout: float = 0.0, pre_ln: bool = True)",
                                            "dropout: float = 0.0, pre_ln: bool = False)")),
        must_fail=("test_block_pre_ln",), hint="pre_ln=True is the default", label="post-LN by default"),
    Mistake(
        id="block_default_dropout_1", cell="TransformerBlock",
        description="dropout=1.0 as the block's default",
        source=edit(A, "TransformerBlock",
                    ("d_ff: int, dropout: float = 0.0, pre_ln", "d_ff: int, dropout: float = 1.0, pre_ln")),
        must_fail=("test_block_pre_ln",), hint="dropout=0.0 is the default", label="block drops all by default"),
    Mistake(
        id="count_default_no_bias", cell="block_param_count",
        description="bias=False as the count's default",
        source=edit(A, "block_param_count", ("d_ff: int, bias: bool = True)", "d_ff: int, bias: bool = False)")),
        must_fail=("test_block_param_count",), hint="bias=True is the default", label="count without biases by default"),
    Mistake(
        id="loader_fixed_heads", cell="from_torch_encoder_layer",
        description="builds the block with 4 heads instead of reading layer.self_attn.num_heads",
        source=edit(A, "from_torch_encoder_layer", ("TransformerBlock(sa.embed_dim, sa.num_heads,",
                                                    "TransformerBlock(sa.embed_dim, 4,")),
        must_fail=_LOADER, hint="num_heads", visible=True),
]

ALTERNATIVES = [
    Alternative(
        id="loops_and_functional",
        description="positions by exp/log, LayerNorm with correction=0 and rsqrt, a FeedForward with named "
                    "layers and F.relu, nn.LayerNorm in the block, a state_dict loader, a count from shapes",
        cells={
            "sinusoidal_positions": '''def sinusoidal_positions(T, d_model):
    pos = torch.arange(T).float().unsqueeze(1)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2).float() / d_model)
    sin, cos = torch.sin(pos * inv_freq), torch.cos(pos * inv_freq)
    return torch.stack([sin, cos], dim=-1).flatten(1)
''',
            "LayerNorm": '''class LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        var = torch.var(x, dim=-1, keepdim=True, correction=0)
        return self.weight * centred * torch.rsqrt(var + self.eps) + self.bias
''',
            "FeedForward": '''class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.fc_in = nn.Linear(d_model, d_ff)
        self.fc_out = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.fc_out(F.relu(self.fc_in(x))))
''',
            "TransformerBlock": '''class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, pre_ln=True):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)
        self.pre_ln = pre_ln

    def _sa(self, h, mask):
        return self.dropout(self.attn(h, mask=mask))

    def forward(self, x, mask=None, is_causal=False):
        if is_causal:
            T = x.shape[-2]
            future = torch.triu(torch.ones(T, T, device=x.device), diagonal=1).bool()   # True = the future
            mask = ~future if mask is None else torch.logical_and(mask, ~future)
        if not self.pre_ln:
            x = self.ln1(x + self._sa(x, mask))
            return self.ln2(x + self.ff(x))
        x = x + self._sa(self.ln1(x), mask)
        return x + self.ff(self.ln2(x))
''',
            "block_param_count": '''def block_param_count(d_model, d_ff, bias=True):
    shapes = [(3 * d_model, d_model), (d_model, d_model), (d_ff, d_model), (d_model, d_ff)]
    total = sum(o * i + (o if bias else 0) for o, i in shapes)
    return int(total + 2 * (2 * d_model))
''',
            "from_torch_encoder_layer": '''def from_torch_encoder_layer(layer):
    block = TransformerBlock(layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features,
                             pre_ln=layer.norm_first)
    src = layer.state_dict()
    mapping = {"attn.W_qkv.weight": "self_attn.in_proj_weight", "attn.W_qkv.bias": "self_attn.in_proj_bias",
               "attn.W_o.weight": "self_attn.out_proj.weight", "attn.W_o.bias": "self_attn.out_proj.bias",
               "ff.fc_in.weight": "linear1.weight", "ff.fc_in.bias": "linear1.bias",
               "ff.fc_out.weight": "linear2.weight", "ff.fc_out.bias": "linear2.bias",
               "ln1.weight": "norm1.weight", "ln1.bias": "norm1.bias",
               "ln2.weight": "norm2.weight", "ln2.bias": "norm2.bias"}
    block.load_state_dict({ours: src[theirs] for ours, theirs in mapping.items()})
    return block
''',
        }),
    Alternative(
        id="wrapped_sublayers",
        description="a block that reaches its attention, feed-forward and LayerNorms through small residual "
                    "wrapper modules (pre- or post-LN), holding the same objects as block.attn, block.ff, ...",
        cells={
            "TransformerBlock": '''class Residual(nn.Module):
    """x + drop(fn(norm(x))) (pre-LN) or norm(x + drop(fn(x))) (post-LN)."""

    def __init__(self, norm, fn, dropout, pre_ln):
        super().__init__()
        self.norm, self.fn, self.drop, self.pre_ln = norm, fn, nn.Dropout(dropout), pre_ln

    def forward(self, x, **kwargs):
        if self.pre_ln:
            return x + self.drop(self.fn(self.norm(x), **kwargs))
        return self.norm(x + self.drop(self.fn(x, **kwargs)))


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, pre_ln=True):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2 = LayerNorm(d_model), LayerNorm(d_model)
        self.sublayers = nn.ModuleList([Residual(self.ln1, self.attn, dropout, pre_ln),
                                        Residual(self.ln2, self.ff, 0.0, pre_ln)])

    def forward(self, x, mask=None, is_causal=False):
        if is_causal:
            T = x.size(-2)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()   # (T, T)
            mask = causal if mask is None else mask & causal
        x = self.sublayers[0](x, mask=mask)        # (B, T, D)
        return self.sublayers[1](x)
''',
        }),
    Alternative(
        id="annotated_transformer_dropout",
        description="the Annotated Transformer's dropout: inside the feed-forward right after the ReLU, and on "
                    "each sub-layer's output in the block (x + drop(ff(ln2(x))))",
        cells={
            "FeedForward": edit(A, "FeedForward", ("nn.ReLU(), nn.Linear(d_ff, d_model),\n                                 nn.Dropout(dropout))",
                                                   "nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))")),
            "TransformerBlock": edit(A, "TransformerBlock", ("x = x + self.ff(self.ln2(x))", "x = x + self.drop(self.ff(self.ln2(x)))"),
                                     ("x = self.ln2(x + self.ff(x))", "x = self.ln2(x + self.drop(self.ff(x)))")),
        }),
    Alternative(
        id="ffn_dropout_after_relu",
        description="the feed-forward's dropout right after the ReLU (the Annotated Transformer's place), none at "
                    "its end, the block as the exercise writes it",
        cells={"FeedForward": edit(A, "FeedForward", ("nn.ReLU(), nn.Linear(d_ff, d_model),\n                                 nn.Dropout(dropout))",
                                                      "nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))"))}),
    Alternative(
        id="warnings_torch_range",
        description="positions from torch.range (deprecated: torch warns on every call): correct, so full "
                    "marks, warnings or not",
        cells={"sinusoidal_positions": edit(A, "sinusoidal_positions", ("torch.arange(T, dtype=torch.float32)[:, None]",
                                                                         "torch.range(0, T - 1)[:, None]"))}),
]
