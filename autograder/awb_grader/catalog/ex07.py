"""Misconception catalog for exercise 07 (decoder block, seq2seq model, greedy decoding)."""

from . import Alternative, Mistake, edit, solution

A = "07_encoder_decoder"

# the decoder block without its causal mask (the mask from the padding alone)
_NON_CAUSAL_DECODER = edit(A, "DecoderBlock", (("T = x.size(1)", "# (B, 1, T, T)"),
                                               "mask = None if self_mask is None else self_mask[:, None, None, :]"
                                               "  # (B, 1, 1, T)"))

_S2S_TORCH = '''class Seq2SeqTransformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=32, pad_id=0):
        super().__init__()
        self.pad_id = pad_id
        self.src_emb, self.tgt_emb = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.transformer = nn.Transformer(d_model, n_heads, n_layers, n_layers, d_ff, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d_model, tgt_vocab)

    def forward(self, src, tgt):
        S, T = src.size(1), tgt.size(1)
        h = self.src_emb(src) + self.pos(torch.arange(S))
        y = self.tgt_emb(tgt) + self.pos(torch.arange(T))
        causal = nn.Transformer.generate_square_subsequent_mask(T)
        out = self.transformer(h, y, tgt_mask=causal, src_key_padding_mask=src == self.pad_id,
                               memory_key_padding_mask=src == self.pad_id)
        return self.head(out)
'''

MISTAKES = [
    # -- DecoderBlock ------------------------------------------------------------------------
    Mistake(
        id="decoder_no_causal_mask", cell="DecoderBlock",
        description="the decoder's self-attention has no causal mask: it sees the future",
        source=_NON_CAUSAL_DECODER,
        must_fail=("test_decoder_values", "test_decoder_causal"), hint="causal"),
    Mistake(
        id="decoder_cross_keys_from_decoder", cell="DecoderBlock",
        description="cross-attention keys and values taken from the decoder stream instead of the memory",
        source=edit(A, "DecoderBlock", ("memory, mask=mem", "x")),
        must_fail=("test_decoder_values", "test_decoder_masks"), hint="instead of the memory"),
    Mistake(
        id="decoder_cross_queries_from_memory", cell="DecoderBlock",
        description="cross-attention the wrong way round: queries from the memory, keys/values from the decoder",
        source=edit(A, "DecoderBlock", ("x, kv=memory, mask=mem", "memory, kv=x")),
        must_fail=("test_decoder_shapes", "test_decoder_values", "test_decoder_causal", "test_decoder_masks"),
        hint="shape mismatch"),
    Mistake(
        id="decoder_memory_mask_query_axis", cell="DecoderBlock",
        description="memory mask reshaped onto the query axis, (B, 1, S, 1)",
        source=edit(A, "DecoderBlock", ("None, None, :]  #", "None, :, None]  #")),
        must_fail=("test_decoder_masks",), hint="query axis"),
    Mistake(
        id="decoder_memory_mask_ignored", cell="DecoderBlock",
        description="the memory mask is never applied: padded source tokens get attention",
        source=edit(A, "DecoderBlock", (("        mem = None", "# (B, 1, 1, S)\n"), ""), (", mask=mem", "")),
        must_fail=("test_decoder_masks",), hint="memory mask ignored"),
    Mistake(
        id="decoder_pre_ln", cell="DecoderBlock",
        description="pre-LN order instead of the paper's post-LN",
        source=edit(A, "DecoderBlock", ("self.ln1(x + self.drop(self.self_attn(x, mask=mask)",
                                        "x + self.drop(self.self_attn(self.ln1(x), mask=mask"),
                                       ("self.ln2(x + self.drop(self.cross_attn(x, kv=memory, mask=mem)",
                                        "x + self.drop(self.cross_attn(self.ln2(x), kv=memory, mask=mem"),
                                       ("self.ln3(x + self.ff", "x + self.ff(self.ln3")),
        must_fail=("test_decoder_values", "test_decoder_masks"), hint="pre-LN"),
    Mistake(
        id="decoder_no_cross_residual", cell="DecoderBlock",
        description="no residual connection around the cross-attention",
        source=edit(A, "DecoderBlock", ("ln2(x + self.", "ln2(self.")),
        must_fail=("test_decoder_values", "test_decoder_masks"), hint="no residual"),
    # -- Seq2SeqTransformer ------------------------------------------------------------------
    Mistake(
        id="s2s_no_positions", cell="Seq2SeqTransformer",
        description="no position encodings: the model cannot see the order of the source",
        source=edit(A, "Seq2SeqTransformer", (" + self.pos[: src.size(1)]", ""), (" + self.pos[: tgt.size(1)]", "")),
        must_fail=("test_seq2seq_source",), hint="position"),
    Mistake(
        id="s2s_source_padding_not_masked", cell="Seq2SeqTransformer",
        description="source padding is never masked, in the encoder or in the cross-attention",
        source=edit(A, "Seq2SeqTransformer", (", mask=src_keep[:, None, None, :]", ""),
                                             (", memory_mask=src_keep", "")),
        must_fail=("test_seq2seq_padding",), hint="padding"),
    Mistake(
        id="s2s_memory_is_decoder", cell="Seq2SeqTransformer",
        description="the decoder blocks get the decoder's own stream as memory: the source is never read",
        source=edit(A, "Seq2SeqTransformer", ("h, self_mask=tgt_keep, memory_mask=src_keep", "y, self_mask=tgt_keep")),
        must_fail=("test_seq2seq_source",), hint="memory"),
    Mistake(
        id="s2s_head_src_vocab", cell="Seq2SeqTransformer",
        description="output layer sized to the source vocabulary",
        source=edit(A, "Seq2SeqTransformer", ("tgt_vocab)", "src_vocab)")),
        must_fail=("test_seq2seq_shapes",), hint="tgt_vocab"),
    Mistake(
        id="s2s_non_causal_decoder", cell="Seq2SeqTransformer",
        description="a decoder block without the causal mask: the model peeks at the target",
        source=solution(A, "Seq2SeqTransformer"),
        extra_cells={"DecoderBlock": _NON_CAUSAL_DECODER},
        must_fail=("test_seq2seq_causal",), hint="look ahead"),
    # -- greedy_decode -----------------------------------------------------------------------
    Mistake(
        id="greedy_never_stops", cell="greedy_decode",
        description="decodes max_len steps whatever happens: never stops at eos",
        source=edit(A, "greedy_decode", (("            if bool(finished.all()):", "break\n"), "")),
        must_fail=("test_greedy_single", "test_greedy_batch"), hint="never stops at eos"),
    Mistake(
        id="greedy_stops_at_first_finished", cell="greedy_decode",
        description="stops as soon as one sequence emits eos, cutting the others short",
        source=edit(A, "greedy_decode", ("bool(finished.all()", "finished.any(")),
        must_fail=("test_greedy_batch", "test_greedy_last_position"), hint="not every sequence"),
    Mistake(
        id="greedy_first_position_logits", cell="greedy_decode",
        description="reads the next token from the first position's logits",
        source=edit(A, "greedy_decode", ("[:, -1].argmax", "[:, 0].argmax")),
        must_fail=("test_greedy_last_position",), hint="last position"),
    Mistake(
        id="greedy_keeps_generating_after_eos", cell="greedy_decode",
        description="finished sequences keep receiving the model's tokens instead of eos",
        source=edit(A, "greedy_decode", ("            next_tok = next_tok.masked_fill(finished, eos_id)\n", "")),
        must_fail=("test_greedy_batch",), hint="after their first eos"),
    Mistake(
        id="greedy_drops_bos", cell="greedy_decode",
        description="returns the generated tokens without the leading bos",
        source=edit(A, "greedy_decode", ("ys\n", "ys[:, 1:]\n")),
        must_fail=("test_greedy_single", "test_greedy_batch"), hint="without the bos"),
    Mistake(
        id="greedy_off_by_one", cell="greedy_decode",
        description="one step fewer than max_len (range(max_len - 1))",
        source=edit(A, "greedy_decode", ("max_len)", "max_len - 1)")),
        must_fail=("test_greedy_batch",), hint="max_len"),
    # -- dropout placement (issue 24: a public decoder layer shipped it after the LayerNorm) ----------
    Mistake(
        id="decoder_dropout_after_layernorm", cell="DecoderBlock",
        description="dropout after each attention's LayerNorm, drop(ln(x + attn(x))), instead of on the "
                    "attention's output before the residual add",
        source=edit(A, "DecoderBlock",
                    ("x = self.ln1(x + self.drop(self.self_attn(x, mask=mask)))",
                     "x = self.drop(self.ln1(x + self.self_attn(x, mask=mask)))"),
                    ("x = self.ln2(x + self.drop(self.cross_attn(x, kv=memory, mask=mem)))",
                     "x = self.drop(self.ln2(x + self.cross_attn(x, kv=memory, mask=mem)))")),
        must_fail=("test_decoder_values",), hint="dropout after the LayerNorms", label="dropout after the LayerNorm"),
    Mistake(
        id="decoder_no_cross_dropout", cell="DecoderBlock",
        description="no dropout on the cross-attention's output (only the self-attention's is dropped)",
        source=edit(A, "DecoderBlock",
                    ("x = self.ln2(x + self.drop(self.cross_attn(x, kv=memory, mask=mem)))",
                     "x = self.ln2(x + self.cross_attn(x, kv=memory, mask=mem))")),
        must_fail=("test_decoder_values",), hint="no dropout on the cross-attention", label="no cross-attention dropout"),
    Mistake(
        id="s2s_nn_transformer", cell="Seq2SeqTransformer",
        description="the model built on nn.Transformer instead of the learner's own blocks (the text rules it out)",
        source=_S2S_TORCH,
        must_fail=("test_seq2seq_shapes", "test_seq2seq_causal", "test_seq2seq_source", "test_seq2seq_padding"),
        hint="off limits", label="nn.Transformer instead of own blocks"),
    # -- surviving mutants of the solution (tools/mutation.py): the defaults the text gives ---------
    Mistake(
        id="decoder_default_dropout_1", cell="DecoderBlock",
        description="dropout=1.0 as the decoder block's default",
        source=edit(A, "DecoderBlock", ("d_ff: int, dropout: float = 0.0)", "d_ff: int, dropout: float = 1.0)")),
        must_fail=("test_decoder_values",), hint="dropout=0.0 is the default", label="decoder drops all by default"),
    Mistake(
        id="s2s_default_pad_1", cell="Seq2SeqTransformer",
        description="pad_id=1 as the default: right whenever pad_id is passed, wrong for Seq2SeqTransformer(src, tgt)",
        source=edit(A, "Seq2SeqTransformer",
                    ("max_len: int = 32, pad_id: int = 0)", "max_len: int = 32, pad_id: int = 1)")),
        must_fail=("test_seq2seq_padding",), hint="defaults", label="pad_id 1 by default"),
    Mistake(
        id="s2s_default_d_model_65", cell="Seq2SeqTransformer",
        description="d_model=65 as the default: with n_heads=4 the default model cannot be built",
        source=edit(A, "Seq2SeqTransformer",
                    ("tgt_vocab: int, d_model: int = 64,", "tgt_vocab: int, d_model: int = 65,")),
        must_fail=("test_seq2seq_padding",), hint=None, label="default d_model 65"),
    # -- contract only: right for some of the inputs the text promises, visibly wrong on the others
    Mistake(
        id="decoder_masks_required", cell="DecoderBlock",
        description="uses self_mask and memory_mask without checking for None: right with padding masks only",
        source=edit(A, "DecoderBlock",
                    ("""        if self_mask is not None:
            mask = mask & self_mask[:, None, None, :]""", """        mask = mask & self_mask[:, None, None, :]"""),
                    ("mem = None if memory_mask is None else memory_mask[:, None, None, :]",
                     "mem = memory_mask[:, None, None, :]")),
        must_fail=("test_decoder_shapes", "test_decoder_values", "test_decoder_causal", "test_decoder_masks"),
        hint="optional", visible=True),
    Mistake(
        id="decoder_fixed_heads", cell="DecoderBlock",
        description="both attentions always get 4 heads, whatever n_heads says",
        source=edit(A, "DecoderBlock", ("""        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)""", """        self.self_attn = MultiHeadAttention(d_model, 4)
        self.cross_attn = MultiHeadAttention(d_model, 4)""")),
        must_fail=("test_decoder_shapes", "test_decoder_values", "test_decoder_causal", "test_decoder_masks",
                   "test_seq2seq_shapes", "test_seq2seq_causal", "test_seq2seq_source", "test_seq2seq_padding"),
        hint="n_heads", visible=True),
    Mistake(
        id="s2s_pad_is_zero", cell="Seq2SeqTransformer",
        description="masks the token id 0 as padding instead of the pad_id the model was built with",
        source=edit(A, "Seq2SeqTransformer", ("src != self.pad_id, tgt != self.pad_id", "src != 0, tgt != 0")),
        must_fail=("test_seq2seq_padding",), hint="pad_id", visible=True),
    Mistake(
        id="greedy_one_sequence_only", cell="greedy_decode",
        description="reads the next token with .item(): right for a batch of one sequence only",
        source=edit(A, "greedy_decode",
                    ("""            next_tok = model(src, ys)[:, -1].argmax(dim=-1)                       # (B,)
            next_tok = next_tok.masked_fill(finished, eos_id)
            ys = torch.cat([ys, next_tok[:, None]], dim=1)
            finished = finished | (next_tok == eos_id)""",
                     """            tok = eos_id if bool(finished) else model(src, ys)[:, -1].argmax(dim=-1).item()
            ys = torch.cat([ys, torch.tensor([[tok]])], dim=1)
            finished = finished | (tok == eos_id)""")),
        must_fail=("test_greedy_batch", "test_greedy_last_position"), hint="batch", visible=True),
]

ALTERNATIVES = [
    Alternative(
        id="written_differently",
        description="a decoder block with masked_fill-built masks and a helper per sub-layer, a model with "
                    "learned positions and pre-LN encoder blocks, a per-sequence greedy loop",
        cells={
            "DecoderBlock": '''class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ln3 = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    @staticmethod
    def _key_mask(keep):
        return None if keep is None else keep.unsqueeze(1).unsqueeze(2)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        T = x.shape[1]
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        allowed = ~future
        pad = self._key_mask(self_mask)
        if pad is not None:
            allowed = torch.logical_and(allowed, pad)
        a = self.self_attn(x, mask=allowed)
        x = self.ln1(x + self.dropout(a))
        c = self.cross_attn(x, kv=memory, mask=self._key_mask(memory_mask))
        x = self.ln2(x + self.dropout(c))
        return self.ln3(x + self.ff(x))
''',
            "Seq2SeqTransformer": '''class Seq2SeqTransformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=32, pad_id=0):
        super().__init__()
        self.pad_id = pad_id
        self.tok_src = nn.Embedding(src_vocab, d_model)
        self.tok_tgt = nn.Embedding(tgt_vocab, d_model)
        self.pos_src = nn.Embedding(max_len, d_model)
        self.pos_tgt = nn.Embedding(max_len, d_model)
        self.enc = nn.ModuleList([TransformerBlock(d_model, n_heads, d_ff, pre_ln=True) for _ in range(n_layers)])
        self.enc_norm = nn.LayerNorm(d_model)
        self.dec = nn.ModuleList([DecoderBlock(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.out = nn.Linear(d_model, tgt_vocab, bias=False)

    def encode(self, src):
        positions = torch.arange(src.shape[1])
        h = self.tok_src(src) + self.pos_src(positions)
        key_mask = (src != self.pad_id)[:, None, None, :]
        for blk in self.enc:
            h = blk(h, mask=key_mask)
        return self.enc_norm(h)

    def forward(self, src, tgt):
        memory = self.encode(src)
        y = self.tok_tgt(tgt) + self.pos_tgt(torch.arange(tgt.shape[1]))
        for blk in self.dec:
            y = blk(y, memory, self_mask=tgt != self.pad_id, memory_mask=src != self.pad_id)
        return self.out(y)
''',
            "greedy_decode": '''def greedy_decode(model, src, max_len, bos_id, eos_id):
    B = src.shape[0]
    seqs = [[bos_id] for _ in range(B)]
    with torch.no_grad():
        for _ in range(max_len):
            if all(eos_id in s[1:] for s in seqs):
                break
            logits = model(src, torch.tensor(seqs, dtype=torch.long))
            best = logits[:, -1, :].argmax(dim=-1).tolist()
            for b in range(B):
                seqs[b].append(eos_id if eos_id in seqs[b][1:] else best[b])
    return torch.tensor(seqs, dtype=torch.long)
''',
        }),
    Alternative(
        id="wrapped_sublayers",
        description="a decoder block that reaches its attentions, feed-forward and LayerNorms through small "
                    "post-LN residual wrapper modules holding the same objects as block.self_attn, ...",
        cells={
            "DecoderBlock": '''class PostNorm(nn.Module):
    """norm(x + drop(fn(x, ...)))"""

    def __init__(self, fn, norm, dropout=0.0):
        super().__init__()
        self.fn, self.norm, self.drop = fn, norm, nn.Dropout(dropout)

    def forward(self, x, **kwargs):
        return self.norm(x + self.drop(self.fn(x, **kwargs)))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.steps = nn.ModuleList([PostNorm(self.self_attn, self.ln1, dropout),
                                    PostNorm(self.cross_attn, self.ln2, dropout), PostNorm(self.ff, self.ln3)])

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        T = x.size(1)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()     # (T, T)
        if self_mask is not None:
            mask = mask & self_mask[:, None, None, :]                        # (B, 1, T, T)
        keep = None if memory_mask is None else memory_mask[:, None, None, :]
        x = self.steps[0](x, mask=mask)
        x = self.steps[1](x, kv=memory, mask=keep)
        return self.steps[2](x)
''',
        }),
    Alternative(
        id="warnings_tensor_copies",
        description="greedy decoding that re-wraps tensors with torch.tensor(tensor) (torch warns to use clone): "
                    "correct, so full marks, warnings or not",
        cells={"greedy_decode": edit(A, "greedy_decode", ("ys = torch.cat([ys, next_tok[:, None]], dim=1)",
                                                          "ys = torch.cat([ys, torch.tensor(next_tok)[:, None]], dim=1)"))}),
]

# surviving mutants of the solution (tools/mutation.py, issue 24): defaults the signature gives
MISTAKES += [
    Mistake(
        id="s2s_default_d_ff_129", cell="Seq2SeqTransformer",
        description="d_ff=129 as the default: right whenever d_ff is passed, another model for "
                    "Seq2SeqTransformer(src, tgt)",
        source=edit(A, "Seq2SeqTransformer",
                    ("n_heads: int = 4, d_ff: int = 128,", "n_heads: int = 4, d_ff: int = 129,")),
        must_fail=("test_seq2seq_padding",), hint="defaults spelled out", label="default d_ff 129"),
    Mistake(
        id="s2s_default_n_layers_3", cell="Seq2SeqTransformer",
        description="n_layers=3 as the default: right whenever n_layers is passed, a deeper model by default",
        source=edit(A, "Seq2SeqTransformer", ("n_layers: int = 2, max_len", "n_layers: int = 3, max_len")),
        must_fail=("test_seq2seq_padding",), hint="defaults spelled out", label="default n_layers 3"),
    Mistake(
        id="s2s_default_max_len_33", cell="Seq2SeqTransformer",
        description="max_len=33 as the default: right whenever max_len is passed, 33 positions by default",
        source=edit(A, "Seq2SeqTransformer", ("max_len: int = 32, pad_id", "max_len: int = 33, pad_id")),
        must_fail=("test_seq2seq_padding",), hint="defaults spelled out", label="default max_len 33"),
]
