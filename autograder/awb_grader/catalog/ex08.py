"""Misconception catalog for exercise 08 (get_batch, lr_at, GPT, generate)."""

from . import Alternative, Mistake, edit

A = "08_train_a_gpt"

MISTAKES = [
    # -- get_batch ---------------------------------------------------------------------------
    Mistake(
        id="targets_not_shifted", cell="get_batch",
        description="targets are the inputs themselves (y = x): the model learns to copy, not to predict",
        source=edit(A, "get_batch", (("y = torch.stack", "return x, y"), "return x, x.clone()")),
        must_fail=("test_get_batch_shift",), hint="targets are not shifted"),
    Mistake(
        id="batch_start_out_of_range", cell="get_batch",
        description="starts drawn up to len(data) - block_size: the last window's targets run past the end",
        source=edit(A, "get_batch", ("len(data) - block_size,", "len(data) - block_size + 1,")),
        must_fail=("test_get_batch_random",), hint="runs past the end"),
    Mistake(
        id="batch_ignores_generator", cell="get_batch",
        description="starts drawn without the generator: batches are not reproducible",
        source=edit(A, "get_batch", (", generator=generator)", ")")),
        must_fail=("test_get_batch_random",), hint="generator=generator"),
    # -- lr_at -------------------------------------------------------------------------------
    Mistake(
        id="warmup_off_by_one", cell="lr_at",
        description="warmup as step / warmup_steps: step 0 has learning rate 0",
        source=edit(A, "lr_at", ("(step + 1)", "step")),
        must_fail=("test_lr_at_warmup",), hint="warmup is off by one"),
    Mistake(
        id="cosine_ignores_warmup", cell="lr_at",
        description="cosine over step / max_steps: it starts below max_lr and misses min_lr at max_steps",
        source=edit(A, "lr_at", ("math.pi * r", "math.pi * step / max_steps")),
        must_fail=("test_lr_at_cosine",), hint="starts at step 0, not after the warmup"),
    Mistake(
        id="no_floor_after_max_steps", cell="lr_at",
        description="no constant min_lr after max_steps: the cosine climbs back up",
        source=edit(A, "lr_at", ("    if step >= max_steps:\n        return min_lr\n", "")),
        must_fail=("test_lr_at_cosine",), hint="after max_steps"),
    Mistake(
        id="cosine_to_zero", cell="lr_at",
        description="cosine decays to 0 instead of min_lr",
        source=edit(A, "lr_at", ("min_lr + 0.5 * (1 + math.cos(math.pi * r)) * (max_lr - min_lr)",
                                 "0.5 * (1 + math.cos(math.pi * r)) * max_lr")),
        must_fail=("test_lr_at_cosine",), hint="ends at 0, not at min_lr"),
    # -- GPT ---------------------------------------------------------------------------------
    Mistake(
        id="causal_mask_missing", cell="GPT",
        description="blocks called without is_causal=True: every position sees the future",
        source=edit(A, "GPT", (", is_causal=True", "")),
        must_fail=("test_gpt_causal",), hint="causal mask is missing"),
    Mistake(
        id="position_embeddings_missing", cell="GPT",
        description="position embeddings created but never added: the model cannot tell the order",
        source=edit(A, "GPT", ("tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))   # (B, T, D)\n"
                               "        x = self.drop(x",
                               "drop(self.tok_emb(idx)")),
        must_fail=("test_gpt_positions_tying",), hint="position embeddings are not added"),
    Mistake(
        id="weight_tying_broken_copy", cell="GPT",
        description="weight tying by copying .data: two separate parameters that drift apart",
        source=edit(A, "GPT", ("weight = self.tok_emb.weight", "weight.data = self.tok_emb.weight.data")),
        must_fail=("test_gpt_positions_tying",), hint="weight tying is broken"),
    Mistake(
        id="targets_shifted_twice", cell="GPT",
        description="the loss shifts the targets again (logits[:, :-1] vs targets[:, 1:]): get_batch already did",
        source=edit(A, "GPT", ("logits.view(B * T, -1), targets.reshape(B * T",
                               "logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1")),
        must_fail=("test_gpt_forward",), hint="do not shift the targets again"),
    Mistake(
        id="blocks_in_python_list", cell="GPT",
        description="blocks kept in a Python list: their parameters are not registered and never train",
        source=edit(A, "GPT", ("nn.ModuleList([Block(d_model, n_head, dropout=dropout) for _ in range(n_layer)])",
                               "[Block(d_model, n_head, dropout=dropout) for _ in range(n_layer)]")),
        must_fail=("test_gpt_overfits",), hint="nn.ModuleList"),
    # -- generate ----------------------------------------------------------------------------
    Mistake(
        id="context_not_cropped", cell="generate",
        description="the whole sequence is fed to the model: it fails once it is longer than block_size",
        source=edit(A, "generate", ("[:, -model.block_size:]", "")),
        must_fail=("test_generate_basics",), hint="not cropped"),
    Mistake(
        id="first_position_logits", cell="generate",
        description="uses the logits of the first position instead of the last",
        source=edit(A, "generate", ("logits[:, -1, :]", "logits[:, 0, :]")),
        must_fail=("test_generate_basics",), hint="LAST position"),
    Mistake(
        id="temperature_after_softmax", cell="generate",
        description="temperature applied to the probabilities after the softmax: it has no effect",
        source=edit(A, "generate", ("logits[:, -1, :] / temperature", "logits[:, -1, :]"),
                    ("F.softmax(logits, dim=-1)", "F.softmax(logits, dim=-1) / temperature")),
        must_fail=("test_generate_sampling",), hint="applied after the softmax"),
    Mistake(
        id="top_k_keeps_wrong_tokens", cell="generate",
        description="top-k compares with the largest logit instead of the k-th largest: only the top token survives",
        source=edit(A, "generate", ("kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]",
                                    "v = torch.topk(logits, top_k).values"),
                                   ('kth, float("-inf"', "v[:, [0]], float('-inf'")),
        must_fail=("test_generate_sampling",), hint="top-k keeps the wrong tokens"),
    Mistake(
        id="top_k_keeps_smallest", cell="generate",
        description="top-k with largest=False: keeps the k least likely tokens",
        source=edit(A, "generate", ("kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]",
                                    "v = torch.topk(logits, top_k, largest=False).values"),
                                   ('< kth, float("-inf"', "> v[:, [-1]], float('-inf'")),
        must_fail=("test_generate_sampling",), hint="top-k keeps the wrong tokens"),
    Mistake(
        id="generator_not_used", cell="generate",
        description="samples with the global random state: text is not reproducible from a seed",
        source=edit(A, "generate", (", generator=generator", "")),
        must_fail=("test_generate_basics",), hint="pass the generator on"),
    # -- issue 24: bugs public GPT samplers shipped and later fixed -----------------------------
    Mistake(
        id="top_k_fill_tiny_not_minus_inf", cell="generate",
        description="the tokens outside the top k filled with a tiny positive number instead of -inf: they stay "
                    "in the softmax (minGPT's top_k_logits wrote 1e-10 for -1e10; karpathy/minGPT issue #10, "
                    "fixed in commit 8909e1b)",
        source=edit(A, "generate", ('logits < kth, float("-inf")', "logits < kth, 1e-10")),
        must_fail=("test_generate_sampling",), hint="top-k keeps the wrong tokens", label="top-k fill 1e-10"),
    Mistake(
        id="top_k_threshold_without_keepdim", cell="generate",
        description="the k-th largest logit taken as values[:, -1], shape (B,), and compared with (B, V) logits: "
                    "right for one prompt, wrong or an error for a batch (huggingface/transformers PR #338, "
                    "'Fix top k generation for k != 0')",
        source=edit(A, "generate", (".values[:, [-1]]", ".values[:, -1]")),
        # basics: its hidden part samples a batch with top_k
        must_fail=("test_generate_basics", "test_generate_sampling"), hint="k-th largest logit of each row",
        label="top-k threshold (B,)"),
    # -- contract only: right for some of the inputs the text promises, visibly wrong on the others
    Mistake(
        id="batch_own_generator", cell="get_batch",
        description="draws the starts from a generator it seeds itself: reproducible, but blind to the seed given",
        source=edit(A, "get_batch", ("generator=generator)", "generator=torch.Generator().manual_seed(0))")),
        must_fail=("test_get_batch_random",), hint="generator you are given", visible=True),
    Mistake(
        id="warmup_zero_division", cell="lr_at",
        description="computes the warmup fraction before the test: divides by zero when warmup_steps is 0",
        source=edit(A, "lr_at", ("""    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps""", """    warm = (step + 1) / warmup_steps
    if step < warmup_steps:
        return max_lr * warm""")),
        must_fail=("test_lr_at_cosine",), hint="divides by zero", visible=True),
    # -- issue 24: what well-known public GPTs return (right for their own training loops) ------------
    Mistake(
        id="gpt_flat_logits_with_targets", cell="GPT",
        description="returns the logits flattened to (B*T, V) when targets are given (as a well-known lecture "
                    "GPT does): the loss is right, the logits' shape is not",
        source=edit(A, "GPT", ("            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))",
                               "            logits = logits.view(B * T, -1)\n"
                               "            loss = F.cross_entropy(logits, targets.reshape(B * T))")),
        must_fail=("test_gpt_forward",), hint="flattened to (B*T, V)", label="logits flattened with targets"),
    Mistake(
        id="gpt_last_position_only", cell="GPT",
        description="without targets returns only the last position's logits, (B, 1, V) (nanoGPT's inference "
                    "shortcut): generation works, the contract (B, T, V) does not hold",
        source=edit(A, "GPT", ("        logits = self.lm_head(self.ln_f(x))                                        # (B, T, V)",
                               "        if targets is None:\n            x = x[:, [-1], :]\n"
                               "        logits = self.lm_head(self.ln_f(x))                                        # (B, T, V)")),
        must_fail=("test_gpt_forward", "test_gpt_causal", "test_gpt_positions_tying"), hint="last position only",
        label="last position's logits only"),
    Mistake(
        id="gpt_dropout_not_in_blocks", cell="GPT",
        description="the blocks are built without the model's dropout (Block(d_model, n_head)): only the "
                    "embeddings are ever dropped",
        source=edit(A, "GPT", ("Block(d_model, n_head, dropout=dropout)", "Block(d_model, n_head)")),
        must_fail=("test_gpt_forward",), hint="Block(d_model, n_head, dropout=dropout)", label="dropout not passed to the blocks"),
    Mistake(
        id="gpt_dropout_after_ln_f", cell="GPT",
        description="dropout on the final LayerNorm's output instead of on the embeddings' sum",
        source=edit(A, "GPT", ("        x = self.drop(x)\n", ""),
                    ("logits = self.lm_head(self.ln_f(x))", "logits = self.lm_head(self.drop(self.ln_f(x)))")),
        must_fail=("test_gpt_forward",), hint="nowhere after ln_f", label="dropout after ln_f"),
    Mistake(
        id="generate_top_k_batch_axis", cell="generate",
        description="the number of kept tokens capped by the batch size (logits.size(0)) instead of the vocabulary: "
                    "right for many prompts, top-1 for a single one (a surviving mutant of the solution)",
        source=edit(A, "generate", ("min(top_k, logits.size(-1))", "min(top_k, logits.size(0))")),
        must_fail=("test_generate_sampling",), hint="whatever the batch size", label="top-k capped by the batch size"),
    Mistake(
        id="generate_with_gradients", cell="generate",
        description="generate without @torch.no_grad(): the tokens are right, but every step records gradients "
                    "(a surviving mutant of the solution)",
        source=edit(A, "generate", ("@torch.no_grad()\n", "")),
        must_fail=("test_generate_basics",), hint="@torch.no_grad()", label="generate records gradients"),
    Mistake(
        id="gpt_vocab_65", cell="GPT",
        description="embedding and output layer built for 65 characters (tiny-shakespeare) whatever vocab_size says",
        source=edit(A, "GPT", ("nn.Embedding(vocab_size, d_model)", "nn.Embedding(65, d_model)"),
                    ("nn.Linear(d_model, vocab_size, bias=False)", "nn.Linear(d_model, 65, bias=False)")),
        must_fail=("test_gpt_forward", "test_gpt_positions_tying"), hint="vocab_size", visible=True),
    Mistake(
        id="gpt_all_positions", cell="GPT",
        description="adds all block_size position vectors: right only for T == block_size",
        source=edit(A, "GPT", ("self.pos_emb(torch.arange(T, device=idx.device))", "self.pos_emb.weight")),
        must_fail=("test_gpt_forward", "test_gpt_positions_tying"), hint="positions 0..T-1", visible=True),
    Mistake(
        id="generate_one_prompt", cell="generate",
        description="samples from the first row's probabilities only: right for a single prompt (B = 1)",
        source=edit(A, "generate", ("torch.multinomial(probs, num_samples=1, generator=generator)",
                                    "torch.multinomial(probs[0], num_samples=1, generator=generator)[None]")),
        must_fail=("test_generate_basics", "test_generate_sampling"), hint="work on all rows at once",
        visible=True),
]

ALTERNATIVES = [
    Alternative(
        id="vectorised_and_functional",
        description="index arithmetic in get_batch, clamp-style schedule, positions as an nn.Parameter and the "
                    "output layer as F.linear with the embedding matrix, inverse-CDF sampling with torch.rand",
        cells={
            "get_batch": '''def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(0, len(data) - block_size, (batch_size, 1), generator=generator)
    offsets = torch.arange(block_size)[None, :]
    return data[starts + offsets], data[starts + offsets + 1]
''',
            "lr_at": '''def lr_at(step, warmup_steps, max_steps, max_lr, min_lr):
    if step >= max_steps:
        return min_lr
    warm = min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0
    if step < warmup_steps:
        return max_lr * warm
    progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * (1 + math.cos(progress * math.pi)) / 2
''',
            "GPT": '''class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, d_model, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.zeros(block_size, d_model))
        nn.init.normal_(self.pos, std=0.02)
        self.blocks = nn.Sequential(*[Block(d_model, n_head, dropout=dropout) for _ in range(n_layer)])
        self.norm = nn.LayerNorm(d_model)
        self.dropout = dropout
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        h = F.dropout(self.tok_emb(idx) + self.pos[:T], self.dropout, self.training)
        for blk in self.blocks:
            h = blk(h, is_causal=True)
        logits = F.linear(self.norm(h), self.tok_emb.weight)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())
''',
            "generate": '''@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = idx
    for _ in range(max_new_tokens):
        logits = model(out[:, -model.block_size:])[0][:, -1] / temperature
        if top_k:
            kth = logits.sort(dim=-1, descending=True).values[:, top_k - 1:top_k]
            logits = torch.where(logits >= kth, logits, torch.full_like(logits, -math.inf))
        cdf = logits.softmax(-1).cumsum(-1)
        u = torch.rand(cdf.size(0), 1, generator=generator, device=cdf.device)
        choice = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp(max=cdf.size(-1) - 1)
        out = torch.cat([out, choice], dim=1)
    return out
''',
        },
    ),
    Alternative(
        id="warnings_tensor_copies_and_implicit_dim",
        description="get_batch that copies windows with torch.tensor(tensor) and generate with a softmax "
                    "whose dim is left implicit (torch warns about both; on 2-D logits the implicit dim is the "
                    "last one): correct, so full marks, warnings or not",
        cells={
            "get_batch": edit(A, "get_batch", ("torch.stack([data[i:i + block_size] for i in starts.tolist()])",
                                               "torch.stack([torch.tensor(data[i:i + block_size]) for i in starts.tolist()])")),
            "generate": edit(A, "generate", ("probs = F.softmax(logits, dim=-1)", "probs = F.softmax(logits)")),
        }),
]

# surviving mutants of the solution (tools/mutation.py, issue 24)
MISTAKES += [
    Mistake(
        id="gpt_default_dropout_1", cell="GPT",
        description="dropout=1.0 as the default: right whenever dropout is passed, drops everything in train mode "
                    "by default",
        source=edit(A, "GPT", ("dropout: float = 0.0):", "dropout: float = 1.0):")),
        must_fail=("test_gpt_forward",), hint="dropout=0.0 is the default", label="default dropout 1.0"),
    Mistake(
        id="gpt_block_size_dropped", cell="GPT",
        description="the given self.block_size = block_size replaced: generate cannot crop the context",
        source=edit(A, "GPT", ("self.block_size = block_size", "self.block_size = None")),
        must_fail=("test_gpt_forward",), hint="given code of the GPT cell", label="block_size attribute lost"),
    Mistake(
        id="gpt_head_bias", cell="GPT",
        description="lm_head with a bias: the tied output layer gets V extra parameters the table does not have",
        source=edit(A, "GPT",
                    ("nn.Linear(d_model, vocab_size, bias=False)", "nn.Linear(d_model, vocab_size, bias=True)")),
        must_fail=("test_gpt_positions_tying",), hint="bias=False", label="lm_head with a bias"),
    Mistake(
        id="gpt_init_mean_1", cell="GPT",
        description="the given _init_weights changed to mean 1.0: the loss at initialisation still looks right "
                    "(ln_f centres x), the weights are not small",
        source=edit(A, "GPT",
                    ("nn.init.normal_(m.weight, mean=0.0, std=0.02)", "nn.init.normal_(m.weight, mean=1.0, std=0.02)")),
        must_fail=("test_gpt_forward",), hint="_init_weights unchanged", label="init mean 1"),
    Mistake(
        id="gpt_init_biases_kept", cell="GPT",
        description="the given _init_weights no longer zeroes the biases (PyTorch's uniform default stays)",
        source=edit(A, "GPT", ('getattr(m, "bias", None)', 'getattr(m, "biases", None)')),
        must_fail=("test_gpt_forward",), hint="_init_weights unchanged", label="biases not zeroed"),
    Mistake(
        id="gpt_positions_subtracted", cell="GPT",
        description="x = tok_emb(idx) - pos_emb(...): still position-aware and trainable, not the model described",
        source=edit(A, "GPT", ("x = self.tok_emb(idx) + self.pos_emb(", "x = self.tok_emb(idx) - self.pos_emb(")),
        must_fail=("test_gpt_positions_tying",), hint="not subtracted", label="positions subtracted"),
]
