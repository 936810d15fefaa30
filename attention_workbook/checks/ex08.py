"""Visible checks for exercise 08_train_a_gpt: get_batch, lr_at, GPT and generate.

Small, fast cases. When a result is wrong the check recomputes what the common mistakes
produce (targets not shifted, warmup off by one, no causal mask, top-k keeping the wrong
tokens, temperature after the softmax, ...) and names the one the student's output matches.
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .core import guard, CheckFailed, call, close, expect_shape, expect_tensor, passed

LECTURE = "lectures/08_train_a_gpt.ipynb"
SEC_DATA = f"lecture 08, section 3 'The data' ({LECTURE}#data)"
SEC_MODEL = f"lecture 08, section 4 'The model' ({LECTURE}#model)"
SEC_SCHEDULE = f"lecture 08, section 5 'The optimizer and the learning-rate schedule' ({LECTURE}#schedule)"
SEC_GENERATE = f"lecture 08, section 8 'Generating text' ({LECTURE}#generation)"


@contextlib.contextmanager
def one_thread():
    """Run tiny models on one thread: on a busy 2-core machine two OpenMP threads spin-wait on
    each other and a 40-step check takes ten times longer. The caller's setting is restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_threaded(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_thread():
            return fn(*args, **kwargs)
    return wrapper


# ----------------------------------------------------------------------------------------
# get_batch
# ----------------------------------------------------------------------------------------
def _student_batch(get_batch, data, block_size, batch_size, seed):
    try:
        out = call(get_batch, data, block_size, batch_size, torch.Generator().manual_seed(seed),
                   name="get_batch", reread=SEC_DATA)
    except CheckFailed as e:
        if "equal size" in e.title or "out of" in e.title:
            raise CheckFailed(e.title, reread=SEC_DATA, student_tb=e.student_tb, details=e.details,
                              hint="a window runs past the end of the data: the largest valid start is "
                                   "len(data) - block_size - 1 (its target window ends on the last character); "
                                   "remember that torch.randint(n, ...) draws 0 .. n - 1") from None
        raise
    if not (isinstance(out, tuple) and len(out) == 2):
        raise CheckFailed("get_batch must return a pair (x, y)", hint="end with `return x, y`", reread=SEC_DATA)
    x, y = out
    expect_tensor(x, "x", SEC_DATA)
    expect_tensor(y, "y", SEC_DATA)
    return x, y


def get_batch_shift(get_batch) -> None:
    """x and y are (B, T) windows of the data and y is x shifted by one position."""
    data = torch.arange(1000, 1100)  # consecutive numbers: the next token is always +1
    x, y = _student_batch(get_batch, data, 8, 4, seed=0)
    inputs = "data = torch.arange(1000, 1100), block_size 8, batch_size 4"
    expect_shape(x, (4, 8), "x", inputs=inputs, reread=SEC_DATA, hint="x is (batch_size, block_size)")
    expect_shape(y, (4, 8), "y", inputs=inputs, reread=SEC_DATA, hint="y is (batch_size, block_size)")
    if x.dtype != torch.long or y.dtype != torch.long:
        raise CheckFailed(f"x and y should be int64 token ids, got {x.dtype} and {y.dtype}", reread=SEC_DATA,
                          hint="slice the data tensor (already int64); do not convert to float")
    if not torch.equal(x[:, 1:], x[:, :-1] + 1):
        raise CheckFailed("the rows of x are not contiguous windows of the data", reread=SEC_DATA,
                          hint="each row is data[i : i + block_size] for a random start i",
                          details=[f"your x[0]: {x[0].tolist()}"])
    if torch.equal(y, x):
        raise CheckFailed("y equals x: the targets are not shifted", reread=SEC_DATA,
                          hint="the targets are not shifted: y must be data[i + 1 : i + 1 + block_size], "
                               "the NEXT character at every position", details=[f"x[0]: {x[0].tolist()}",
                                                                                 f"y[0]: {y[0].tolist()}"])
    if not torch.equal(y, x + 1):
        hint = None
        if torch.equal(y, x - 1):
            hint = "y is shifted the wrong way: the target at position t is the character AFTER x[t]"
        elif torch.equal(y, x + 2):
            hint = "y is shifted by two: use data[i + 1 : i + 1 + block_size]"
        raise CheckFailed("y is not x shifted by one", reread=SEC_DATA,
                          hint=hint or "y[b, t] must be the character that follows x[b, t] in the data",
                          details=[f"x[0]: {x[0].tolist()}", f"y[0]: {y[0].tolist()}"])
    passed("get_batch: x is (B, T), y is x shifted by one")


def get_batch_random(get_batch) -> None:
    """Random starts drawn from the generator (reproducible), covering every valid window."""
    data = torch.arange(12)
    T = 8  # valid starts: 0 .. 3 (the target window of start 3 ends at data[11])
    x1, y1 = _student_batch(get_batch, data, T, 64, seed=5)
    x2, _ = _student_batch(get_batch, data, T, 64, seed=5)
    if not torch.equal(x1, x2):
        raise CheckFailed("two calls with identically seeded generators gave different batches", reread=SEC_DATA,
                          hint="draw the starts with torch.randint(..., generator=generator)")
    starts = set(x1[:, 0].tolist())
    if int(y1.max()) > 11 or starts - {0, 1, 2, 3}:
        raise CheckFailed("a window runs past the end of the data", reread=SEC_DATA,
                          hint="the largest valid start is len(data) - block_size - 1, and torch.randint(n, ...) "
                               "draws 0 .. n - 1: choose n so that the largest draw is that start")
    if starts != {0, 1, 2, 3}:
        raise CheckFailed("some valid windows are never drawn", reread=SEC_DATA,
                          hint="every start from 0 to len(data) - block_size - 1 inclusive must be possible: "
                               "torch.randint(n, ...) draws 0 .. n - 1, so n is one more than the largest start",
                          details=[f"starts drawn in 64 windows of data = arange(12), block_size 8: {sorted(starts)}; "
                                   f"valid: [0, 1, 2, 3]"])
    xa, _ = _student_batch(get_batch, torch.arange(500), 8, 16, seed=1)
    xb, _ = _student_batch(get_batch, torch.arange(500), 8, 16, seed=2)
    if torch.equal(xa, xb):
        raise CheckFailed("generators with different seeds gave the same batch", reread=SEC_DATA,
                          hint="draw the starts from the generator you are given (generator=generator), not from "
                               "one you create or seed yourself")
    passed("get_batch: reproducible random windows from the given generator, every valid start possible, "
           "none out of range")


# ----------------------------------------------------------------------------------------
# lr_at
# ----------------------------------------------------------------------------------------
def _lr(lr_at, step, warmup, max_steps, max_lr, min_lr):
    out = call(lr_at, step, warmup, max_steps, max_lr, min_lr, name="lr_at", reread=SEC_SCHEDULE)
    try:
        return float(out)
    except (TypeError, ValueError):
        raise CheckFailed(f"lr_at returned {type(out).__name__}, not a number", reread=SEC_SCHEDULE,
                          hint="did you forget a `return`?" if out is None else None) from None


def lr_at_warmup(lr_at) -> None:
    """Linear warmup: step 0 gives max_lr / warmup_steps, step warmup_steps - 1 gives max_lr."""
    W, M, hi, lo = 10, 100, 1e-3, 1e-4
    got = [_lr(lr_at, s, W, M, hi, lo) for s in range(W)]
    want = [hi * (s + 1) / W for s in range(W)]
    if not all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, want)):
        hint = "during warmup lr = max_lr * (step + 1) / warmup_steps"
        if math.isclose(got[0], 0.0, abs_tol=1e-12) and all(math.isclose(a, hi * s / W, rel_tol=1e-6, abs_tol=1e-12)
                                                           for s, a in enumerate(got)):
            hint = ("warmup is off by one: step 0 has learning rate 0, a wasted step; use (step + 1) / warmup_steps "
                    "so step 0 gets max_lr / warmup_steps and step warmup_steps - 1 reaches max_lr")
        raise CheckFailed("the warmup values are wrong", reread=SEC_SCHEDULE, hint=hint,
                          details=[f"warmup_steps={W}, max_lr={hi}: expected {[f'{v:.1e}' for v in want[:4]]} ..., "
                                   f"yours {[f'{v:.1e}' for v in got[:4]]} ..."])
    passed("lr_at: linear warmup from max_lr / warmup_steps up to max_lr")


def lr_at_cosine(lr_at) -> None:
    """Cosine from max_lr (at warmup_steps) down to min_lr (at max_steps), then constant."""
    W, M, hi, lo = 10, 110, 1e-3, 1e-4
    cases = {10: hi, 60: (hi + lo) / 2, 35: lo + 0.5 * (1 + math.cos(math.pi * 0.25)) * (hi - lo), 110: lo}
    for s, want in cases.items():
        got = _lr(lr_at, s, W, M, hi, lo)
        if not math.isclose(got, want, rel_tol=1e-6):
            hint = "lr = min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr) with r = (step - warmup) / (max - warmup)"
            naive = lo + 0.5 * (1 + math.cos(math.pi * s / M)) * (hi - lo)
            if math.isclose(got, naive, rel_tol=1e-6):
                hint = ("your cosine starts at step 0, not after the warmup: use r = (step - warmup_steps) / "
                        "(max_steps - warmup_steps)")
            elif math.isclose(got, 0.5 * (1 + math.cos(math.pi * (s - W) / (M - W))) * hi, rel_tol=1e-6):
                hint = "your cosine ends at 0, not at min_lr: add min_lr and scale by (max_lr - min_lr)"
            raise CheckFailed(f"lr_at({s}, warmup_steps={W}, max_steps={M}, max_lr={hi}, min_lr={lo}) is wrong",
                              reread=SEC_SCHEDULE, hint=hint, details=[f"expected {want:.4e}, yours {got:.4e}"])
    for s in (111, 150, 10_000):
        got = _lr(lr_at, s, W, M, hi, lo)
        if not math.isclose(got, lo, rel_tol=1e-6):
            raise CheckFailed(f"after max_steps the learning rate should stay at min_lr; step {s} gives {got:.3e}",
                              reread=SEC_SCHEDULE,
                              hint="after max_steps return min_lr: the cosine would climb back up")
    M = 100   # warmup_steps = 0 (no warmup, as the text says): the cosine starts at step 0 with max_lr
    for s, want in {0: hi, 50: (hi + lo) / 2, 100: lo}.items():
        try:
            got = _lr(lr_at, s, 0, M, hi, lo)
        except CheckFailed as e:
            if "ZeroDivisionError" in e.title:
                raise CheckFailed(f"lr_at({s}, warmup_steps=0, ...) divides by zero", reread=SEC_SCHEDULE,
                                  student_tb=e.student_tb,
                                  hint="warmup_steps may be 0 (no warmup): then no step is a warmup step, and "
                                       "the cosine runs from step 0") from None
            raise
        if not math.isclose(got, want, rel_tol=1e-6):
            raise CheckFailed(f"lr_at({s}, warmup_steps=0, max_steps={M}, max_lr={hi}, min_lr={lo}) is wrong",
                              reread=SEC_SCHEDULE, details=[f"expected {want:.4e}, yours {got:.4e}"],
                              hint="with warmup_steps=0 there is no warmup: the cosine starts at max_lr at step 0")
    passed("lr_at: cosine decay to min_lr at max_steps, constant afterwards (also with warmup_steps=0)")


# ----------------------------------------------------------------------------------------
# GPT
# ----------------------------------------------------------------------------------------
def _build(GPT, seed=0, **kw):
    args = dict(vocab_size=65, block_size=16, n_layer=2, n_head=4, d_model=32, dropout=0.0)
    args.update(kw)
    torch.manual_seed(seed)
    model = call(GPT, name="GPT", reread=SEC_MODEL, **args)
    if not isinstance(model, nn.Module):
        raise CheckFailed("GPT(...) did not build an nn.Module", reread=SEC_MODEL)
    return model.eval()


def _forward(model, idx, targets=None):
    out = call(model, idx, targets, name="GPT.forward", reread=SEC_MODEL)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise CheckFailed("GPT.forward must return a pair (logits, loss)", reread=SEC_MODEL,
                          hint="return logits, loss  (loss is None when targets is None)")
    return out


def _expect_every_position(logits, B, T, V, what, inputs):
    """logits (B, T, V): one row of scores per position, with or without targets."""
    expect_tensor(logits, "logits", SEC_MODEL)
    if tuple(logits.shape) == (B * T, V):
        hint = ("your logits are flattened to (B*T, V): flatten only what you pass to F.cross_entropy and return "
                "the logits as (B, T, V), with or without targets")
    elif tuple(logits.shape) in ((B, 1, V), (B, V)):
        hint = ("your model returns the logits of the last position only: forward returns (B, T, V), one row per "
                "position (training needs them all; generate picks the last one itself)")
    else:
        hint = "logits are (B, T, vocab_size): one score per possible next character at every position"
    expect_shape(logits, (B, T, V), what, inputs=inputs, reread=SEC_MODEL, hint=hint)


GPT_DROPOUT = ("dropout goes on the sum of the embeddings (step 1: x = drop(tok_emb(idx) + pos_emb(...))) and, "
               "through Block(d_model, n_head, dropout=dropout), inside every block; nowhere after ln_f or lm_head")


def gpt_dropout(GPT, vocab_size=37, block_size=8, n_layer=2, n_head=2, d_model=16, B=2, T=5, seed=9) -> None:
    """GPT(dropout=p) passes p on to every block; in train mode with p = 1 the embeddings' dropout zeroes
    x. With every bias inside the blocks set to 0 (a block then maps 0 to 0, whatever its own dropout)
    and random biases outside them (ln_f's), the logits are then the same for any input and not 0:
    lm_head(ln_f(0)). Dropout missing on the embeddings makes them depend on the input; dropout after
    ln_f or on the logits makes them 0."""
    cfg = dict(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=n_head, d_model=d_model)
    model = _build(GPT, seed=seed, dropout=0.3, **cfg)
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.Module) or not all(
            any(isinstance(m, nn.Dropout) and abs(m.p - 0.3) < 1e-12 for m in b.modules()) for b in blocks.children()):
        raise CheckFailed("GPT(..., dropout=0.3): some block has no nn.Dropout(0.3)", reread=SEC_MODEL,
                          hint="build every block with the model's dropout: Block(d_model, n_head, dropout=dropout)")
    model = _build(GPT, seed=seed, dropout=1.0, **cfg).train()
    g = torch.Generator().manual_seed(seed)
    outside = False
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                inside = name.startswith("blocks.")
                outside = outside or not inside
                p.copy_(torch.zeros_like(p) if inside else torch.randn(p.shape, generator=g))
        a, _ = _forward(model, torch.randint(vocab_size, (B, T), generator=g))
        b, _ = _forward(model, torch.randint(vocab_size, (B, T), generator=g))
    _expect_every_position(a, B, T, vocab_size, "logits in train mode", f"idx ({B}, {T})")
    same = close(a, b) and close(a, a[:1, :1].expand_as(a))
    if not same or (outside and float(a.abs().max()) < 1e-6):
        raise CheckFailed("GPT(dropout=1.0) in train mode: the dropout is not where the exercise puts it",
                          reread=SEC_MODEL, hint=GPT_DROPOUT,
                          details=["with p = 1 dropout zeroes what it is applied to, so the embeddings' sum becomes "
                                   "0 and the logits lm_head(ln_f(0)): the same for every input and position, "
                                   "and not 0 (ln_f's bias is random here, the blocks' biases 0)",
                                   "yours " + ("depend on the input" if not same else "are all 0")])


GIVEN_INIT = ("keep the given code of the GPT cell as it is: self.block_size = block_size first, the call that "
              "applies _init_weights last, and _init_weights unchanged (every nn.Linear and nn.Embedding weight "
              "drawn from a normal with mean 0 and std 0.02, every bias 0)")


def gpt_given(GPT, vocab_size=37, block_size=12, n_layer=2, n_head=2, d_model=32, seed=4) -> None:
    """The given lines of the GPT cell (block_size, _init_weights) and the default dropout=0.0."""
    cfg = dict(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=n_head, d_model=d_model)
    model = _build(GPT, seed=seed, **cfg)
    if getattr(model, "block_size", None) != block_size:
        raise CheckFailed(f"GPT(block_size={block_size}).block_size is {getattr(model, 'block_size', None)!r}",
                          reread=SEC_MODEL, hint=GIVEN_INIT)
    for path, m in model.named_modules():
        if not isinstance(m, (nn.Linear, nn.Embedding)):
            continue
        w = m.weight.detach().double()
        mean, std = float(w.mean()), float(w.std())
        if abs(mean) > 0.01 or not 0.001 < std < 0.025:      # (lecture 08's GPT scales some down further)
            raise CheckFailed(f"GPT(...).{path}.weight at initialisation has mean {mean:.3g} and std {std:.3g}, "
                              "expected mean 0 and std 0.02", reread=SEC_MODEL, hint=GIVEN_INIT)
        bias = getattr(m, "bias", None)
        if isinstance(bias, torch.Tensor) and bool(bias.detach().abs().max() > 0):
            raise CheckFailed(f"GPT(...).{path}.bias is not 0 at initialisation", reread=SEC_MODEL, hint=GIVEN_INIT)
    torch.manual_seed(seed)
    model = call(GPT, name="GPT", reread=SEC_MODEL, **cfg)                 # dropout left at its default
    idx = torch.randint(vocab_size, (2, block_size), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        a, _ = _forward(model.train(), idx)
        b, _ = _forward(model.eval(), idx)
    if not close(a, b, atol=1e-6):
        raise CheckFailed(f"GPT({', '.join(f'{k}={v}' for k, v in cfg.items())}) without a dropout argument gives "
                          "other logits in train mode than in eval mode", reread=SEC_MODEL,
                          hint="dropout=0.0 is the default: without a dropout argument nothing is dropped")


@single_threaded
def gpt_forward(GPT) -> None:
    """Shapes, loss None without targets, and a loss near ln(65) at initialisation."""
    model = _build(GPT)
    idx = torch.randint(65, (3, 16), generator=torch.Generator().manual_seed(0))
    logits, loss = _forward(model, idx)
    _expect_every_position(logits, 3, 16, 65, "logits", "idx (B=3, T=16), vocab 65")
    if loss is not None:
        raise CheckFailed("with targets=None the loss should be None", reread=SEC_MODEL)
    short_hint = "use the positions 0..T-1 of the INPUT, T = idx.shape[1], not all block_size of them"
    try:
        logits, loss = _forward(model, idx[:, :5])
    except CheckFailed as e:
        if "raised" not in e.title:
            raise
        raise CheckFailed(f"for a sequence shorter than block_size (T=5 < 16): {e.title}", hint=short_hint,
                          reread=SEC_MODEL, student_tb=e.student_tb) from None
    expect_shape(logits, (3, 5, 65), "logits for a sequence shorter than block_size", reread=SEC_MODEL,
                 hint=short_hint)
    targets = torch.randint(65, (3, 16), generator=torch.Generator().manual_seed(1))
    logits, loss = _forward(model, idx, targets)
    _expect_every_position(logits, 3, 16, 65, "logits when targets are given", "idx and targets (B=3, T=16), vocab 65")
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise CheckFailed("the loss should be a scalar tensor", reread=SEC_MODEL,
                          hint="F.cross_entropy(logits.view(B * T, V), targets.view(B * T)) averages to a scalar")
    want = F.cross_entropy(logits.reshape(-1, 65).float(), targets.reshape(-1))
    if not close(loss.detach(), want.detach(), atol=1e-4):
        raise CheckFailed("the loss is not the mean cross-entropy of logits[b, t] against targets[b, t]",
                          reread=SEC_MODEL, details=[f"yours {loss.item():.4f}, expected {want.item():.4f}"],
                          hint="flatten (B, T, V) to (B*T, V) and targets to (B*T,); do not shift the targets again "
                               "(get_batch already did)")
    if abs(loss.item() - math.log(65)) > 0.3:
        raise CheckFailed(f"the loss at initialisation is {loss.item():.2f}, far from ln(65) = {math.log(65):.2f}",
                          reread=SEC_MODEL, hint="initialise the weights small (normal, std 0.02) so that every "
                          "character starts about equally likely")
    other = _build(GPT, seed=5, vocab_size=37, block_size=12, n_layer=1, n_head=2, d_model=16)   # not 65
    idx = torch.randint(37, (2, 12), generator=torch.Generator().manual_seed(2))
    logits2, loss2 = _forward(other, idx, idx)
    if tuple(logits2.shape) in ((2 * 12, 37), (2, 1, 37), (2, 37)):
        _expect_every_position(logits2, 2, 12, 37, "logits of GPT(vocab_size=37, block_size=12, ...)",
                               "idx and targets (B=2, T=12), vocab 37")
    expect_shape(logits2, (2, 12, 37), "logits of GPT(vocab_size=37, block_size=12, n_layer=1, n_head=2, d_model=16)",
                 reread=SEC_MODEL, hint="build every layer from the arguments (vocab_size, block_size, ...): the "
                                        "checks use other sizes than tiny-shakespeare's 65 characters")
    gpt_dropout(GPT)
    gpt_given(GPT)
    passed(f"GPT: logits (B, T, V), loss {loss.item():.3f} at init (ln 65 = {math.log(65):.3f}), dropout on the "
           "embeddings and in every block")


@single_threaded
def gpt_causal(GPT) -> None:
    """Changing a token never changes a logit at an earlier position."""
    model = _build(GPT, seed=1)
    idx = torch.randint(65, (2, 16), generator=torch.Generator().manual_seed(2))
    base, _ = _forward(model, idx)
    _expect_every_position(base, 2, 16, 65, "logits", "idx (B=2, T=16), vocab 65")
    for t in (3, 10):
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 5) % 65
        new, _ = _forward(model, changed)
        moved = (new[:, :t] - base[:, :t]).abs().amax().item()
        if moved > 1e-5:
            raise CheckFailed(f"changing the token at position {t} changed the logits at earlier positions",
                              reread=SEC_MODEL, details=[f"largest change before position {t}: {moved:.3g}"],
                              hint="the causal mask is missing: call every block with is_causal=True, so "
                                   "position t only attends to positions <= t")
        if (new[:, t:] - base[:, t:]).abs().amax().item() < 1e-6:
            raise CheckFailed(f"changing the token at position {t} changed nothing at all", reread=SEC_MODEL,
                              hint="the logits must depend on the input tokens")
    passed("GPT: causal (a changed token moves no earlier logit)")


@single_threaded
def gpt_positions_and_tying(GPT) -> None:
    """Position embeddings are added; the output layer shares the token embedding's weights."""
    model = _build(GPT, seed=2, vocab_size=37)
    logits, _ = _forward(model, torch.full((1, 8), 7, dtype=torch.long))
    _expect_every_position(logits, 1, 8, 37, "logits", "idx (B=1, T=8) of one repeated character, vocab 37")
    if (logits[0, 1:] - logits[0, :1]).abs().amax().item() < 1e-6:
        raise CheckFailed("a sequence of identical characters gives identical logits at every position",
                          reread=SEC_MODEL, hint="position embeddings are not added: x = tok_emb(idx) + "
                                                 "pos_emb(torch.arange(T)); without them attention ignores order")
    mats = [p for p in model.parameters() if tuple(p.shape) in ((37, 32), (32, 37))]
    if len(mats) != 1:
        raise CheckFailed(f"GPT(vocab_size=37, d_model=32) holds {len(mats)} separate (vocab_size x d_model) "
                          "matrices, expected 1 (tied)",
                          reread=SEC_MODEL,
                          hint="weight tying is broken: after creating lm_head, set "
                               "self.lm_head.weight = self.tok_emb.weight (and create nothing after that which "
                               "replaces it)")
    gpt_adds_positions(GPT)
    passed("GPT: position embeddings added, output layer tied to the token embedding")


POS_ADDED = ("the position embedding is added to the token embedding, x = tok_emb(idx) + pos_emb(positions) "
             "(not subtracted, not multiplied)")


def gpt_adds_positions(GPT, vocab_size=37, block_size=8, n_layer=2, n_head=2, d_model=32, seed=6, a=3, b=11) -> None:
    """The output layer has no bias (no parameter of shape (vocab_size,)); and x = tok_emb(idx) + pos_emb(...):
    with every row of the position table (the (block_size, d_model) parameter) set to minus the embedding of
    token c (the (vocab_size, d_model) one), a sequence of c's gives x = 0: the same logits for two such c.
    block_size, d_model and vocab_size differ, so each shape names one parameter."""
    model = _build(GPT, seed=seed, vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=n_head,
                   d_model=d_model)
    params = dict(model.named_parameters())
    if any(tuple(p.shape) == (vocab_size,) for p in params.values()):
        raise CheckFailed(f"GPT(vocab_size={vocab_size}, ...) has a parameter of shape ({vocab_size},): the output "
                          "layer has a bias", reread=SEC_MODEL,
                          hint="lm_head = nn.Linear(d_model, vocab_size, bias=False): the tied output layer has no "
                               "bias (the table in the exercise)")
    pos = [p for p in params.values() if tuple(p.shape) == (block_size, d_model)]
    tok = [p for p in params.values() if tuple(p.shape) == (vocab_size, d_model)]
    if len(pos) != 1 or len(tok) != 1:
        return                                   # another layout (the tying check above says what is missing)
    out = []
    for c in (a, b):
        with torch.no_grad():
            pos[0].copy_(-tok[0][c].expand_as(pos[0]))
            logits, _ = _forward(model, torch.full((1, block_size), c, dtype=torch.long))
        out.append(logits)
    if not close(out[0], out[1], atol=1e-5):
        raise CheckFailed("with pos_emb's rows set to minus the embedding of token c, a sequence of c's should reach "
                          f"the blocks as x = 0 (the same logits for c = {a} and c = {b}); yours differ",
                          reread=SEC_MODEL, hint=POS_ADDED)


@single_threaded
def gpt_overfits(GPT) -> None:
    """Training on one small batch drives the loss down (the model can learn at all)."""
    torch.manual_seed(0)
    model = _build(GPT, seed=3, block_size=8, n_layer=1, n_head=2, d_model=32).train()
    n_params = sum(p.numel() for p in model.parameters())
    if n_params < 65 * 32 + 4 * 32 * 32:  # at least the embedding and one block's attention matrices
        raise CheckFailed(f"the model registers only {n_params:,} parameters: the blocks' weights are missing",
                          reread=SEC_MODEL, hint="keep the blocks in an nn.ModuleList (a plain Python list hides "
                                                 "their parameters from model.parameters() and the optimizer)")
    g = torch.Generator().manual_seed(4)
    x = torch.randint(65, (4, 8), generator=g)
    y = torch.randint(65, (4, 8), generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(40):
        _, loss = _forward(model, x, y)
        first = loss.item() if first is None else first
        opt.zero_grad()
        call(loss.backward, name="loss.backward", reread=SEC_MODEL)
        opt.step()
    if loss.item() > 0.5:
        raise CheckFailed(
            f"40 Adam steps on a single batch only brought the loss from {first:.2f} to {loss.item():.2f}",
            reread=SEC_MODEL,
            hint="a correct model memorises one batch of 32 tokens quickly: check "
            "that the blocks, ln_f and lm_head are all used and that the parameters are registered "
            "(nn.ModuleList, not a Python list)",
        )
    passed(f"GPT: overfits a single batch (loss {first:.2f} -> {loss.item():.2f} in 40 steps)")


# ----------------------------------------------------------------------------------------
# generate
# ----------------------------------------------------------------------------------------
class FixedLogits(nn.Module):
    """A stand-in model: fixed next-token scores; records the context lengths it is given."""

    def __init__(self, scores, block_size=4, follow=False):
        super().__init__()
        self.scores, self.block_size, self.follow = torch.as_tensor(scores, dtype=torch.float32), block_size, follow
        self.seen: list[int] = []

    def forward(self, idx, targets=None):
        B, T = idx.shape
        self.seen.append(T)  # a real GPT would fail on T > block_size; the stub records it for the hint
        self.grad_seen = getattr(self, "grad_seen", False) or torch.is_grad_enabled()
        V = self.scores.numel()
        logits = self.scores.expand(B, T, V).clone()
        if self.follow:  # strongly prefer (token + 1) % V at each position: tests the LAST position is used
            logits = logits + 20 * F.one_hot((idx + 1) % V, V).float()
        return logits, None


def _gen(generate, model, idx, n, **kw):
    try:
        out = call(generate, model, idx, n, name="generate", reread=SEC_GENERATE, **kw)
    except CheckFailed as e:
        if idx.size(0) > 1 and "raised" in e.title:
            try:   # the same call for the first prompt alone: does it work for B = 1 only?
                call(generate, model, idx[:1], n, name="generate", reread=SEC_GENERATE, **kw)
            except CheckFailed:
                raise e from None
            if kw.get("top_k"):
                try:   # and for the batch without top-k: is it the top-k filter that ignores the batch?
                    call(generate, model, idx, n, name="generate", reread=SEC_GENERATE, **{**kw, "top_k": None})
                except CheckFailed:
                    pass
                else:
                    raise CheckFailed(f"generate fails for a batch of {idx.size(0)} prompts with top_k={kw['top_k']} "
                                      f"(it works for one, and for the batch without top_k): {e.title}",
                                      reread=SEC_GENERATE, student_tb=e.student_tb,
                                      hint="take the k-th largest logit of each row with its axis kept, (B, 1), "
                                           "so that it compares with the logits of its own row (B, V)") from None
            raise CheckFailed(f"generate fails for a batch of {idx.size(0)} prompts (it works for one): {e.title}",
                              reread=SEC_GENERATE, student_tb=e.student_tb,
                              hint="idx is a batch (B, T): work on all rows at once, one new token per row "
                                   "per step (B, 1)") from None
        raise
    out = expect_tensor(out, "generate(...)", SEC_GENERATE)
    if out.size(0) != idx.size(0):
        raise CheckFailed(f"generate returned {out.size(0)} rows for a batch of {idx.size(0)} prompts",
                          reread=SEC_GENERATE, hint="idx is a batch (B, T): keep one row per prompt")
    return out


@single_threaded
def generate_basics(generate) -> None:
    """Shape (B, T + n), prompt kept, context cropped to block_size, last position used, reproducible."""
    model = FixedLogits(torch.zeros(6), block_size=4, follow=True)
    prompt = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2]])  # longer than block_size
    out = _gen(generate, model, prompt, 5, top_k=1)
    expect_shape(out, (1, 14), "generate(model, prompt (1, 9), 5)", reread=SEC_GENERATE,
                 hint="return the prompt followed by the new tokens: torch.cat([idx, next_token], dim=1) each step")
    if max(model.seen) > 4:
        raise CheckFailed("generate fed more than block_size tokens to the model", reread=SEC_GENERATE,
                          hint="the context is not cropped: idx_cond = idx[:, -model.block_size:]")
    if not torch.equal(out[:, :9], prompt):
        raise CheckFailed("the output does not start with the prompt", reread=SEC_GENERATE)
    if getattr(model, "grad_seen", False):
        raise CheckFailed("generate runs the model with gradients enabled", reread=SEC_GENERATE, hint=NO_GRAD)
    if out[0, 9:].tolist() != [3, 4, 5, 0, 1]:
        hint = "use the logits of the LAST position, logits[:, -1, :]: they predict the next token"
        raise CheckFailed(
            "with top_k=1 generate should follow the model's most likely next token",
            hint=hint,
            reread=SEC_GENERATE,
            details=[f"expected new tokens [3, 4, 5, 0, 1], got {out[0, 9:].tolist()}"],
        )
    model = FixedLogits(torch.tensor([0.0, 1.0, 2.0, 0.5]), block_size=4)
    a = _gen(generate, model, torch.zeros(8, 1, dtype=torch.long), 6, generator=torch.Generator().manual_seed(0))
    b = _gen(generate, model, torch.zeros(8, 1, dtype=torch.long), 6, generator=torch.Generator().manual_seed(0))
    if not torch.equal(a, b):
        raise CheckFailed("two calls with identically seeded generators gave different text", reread=SEC_GENERATE,
                          hint="pass the generator on: torch.multinomial(probs, 1, generator=generator)")
    passed("generate: (B, T + n), context cropped to block_size, last position used, reproducible")


def _freqs(generate, scores, n_rows=20000, **kw):
    model = FixedLogits(scores, block_size=4)
    out = _gen(generate, model, torch.zeros(n_rows, 1, dtype=torch.long), 1,
               generator=torch.Generator().manual_seed(1), **kw)
    return torch.bincount(out[:, -1], minlength=len(scores)).float() / n_rows


NO_GRAD = ("decorate generate with @torch.no_grad() (or run the loop inside `with torch.no_grad():`): sampling "
           "needs no gradients, and recording them for every step wastes memory")

TOP_K_ONE_ROW = ("top-k must keep k tokens in each row, whatever the batch size: take the k-th largest along the "
                 "vocabulary axis (dim=-1), never along the batch axis")


def one_prompt_top_k(generate, scores, k, want, n=1500, seed=2) -> None:
    """top_k with a batch of ONE prompt (B = 1 < k): a long generation from one row samples exactly the
    k tokens with the largest scores."""
    out = _gen(generate, FixedLogits(scores, block_size=4), torch.zeros(1, 1, dtype=torch.long), n, top_k=k,
               generator=torch.Generator().manual_seed(seed))
    kept = set(out[0, 1:].tolist())
    if kept != set(want):
        raise CheckFailed(
            f"with one prompt and top_k={k} the sampled tokens are {sorted(kept)}, expected "
            f"{sorted(want)} ({n} tokens from logits {[round(v, 2) for v in torch.as_tensor(scores).tolist()]})",
            reread=SEC_GENERATE,
            hint=TOP_K_ONE_ROW,
        )


@single_threaded
def generate_sampling(generate) -> None:
    """The sampled frequencies follow softmax(logits / temperature), restricted to the top k."""
    scores = torch.tensor([0.0, 1.0, 2.0, 3.0, 0.5])
    for temp in (1.0, 0.5):
        p = _freqs(generate, scores, temperature=temp)
        want = F.softmax(scores / temp, -1)
        if (p - want).abs().max() > 0.02:
            hint = "divide the logits by the temperature BEFORE the softmax, then sample with torch.multinomial"
            if temp != 1.0 and (p - F.softmax(scores, -1)).abs().max() < 0.02:
                hint = ("the temperature has no effect: it is applied after the softmax (dividing probabilities "
                        "by a constant changes nothing once they are renormalised): divide the LOGITS by it")
            raise CheckFailed(f"sampled frequencies with temperature {temp} don't match softmax(logits / {temp})",
                              reread=SEC_GENERATE, hint=hint,
                              details=[f"logits {scores.tolist()}", f"expected {[round(v, 3) for v in want.tolist()]}",
                                       f"yours    {[round(v, 3) for v in p.tolist()]}  (20000 samples)"])
    p = _freqs(generate, scores, top_k=2)
    kept = {i for i, v in enumerate(p.tolist()) if v > 0}
    if kept != {2, 3}:
        raise CheckFailed(
            f"with top_k=2 the sampled tokens are {sorted(kept)}, expected [2, 3] (the two largest logits)",
            reread=SEC_GENERATE,
            hint="top-k keeps the wrong tokens: v = torch.topk(logits, k).values; set logits < v[:, [-1]] "
            "(smaller than the k-th largest) to -inf",
        )
    want = F.softmax(torch.tensor([2.0, 3.0]), -1)
    if abs(p[3].item() - want[1].item()) > 0.02:
        raise CheckFailed("with top_k=2 the two kept tokens have the wrong proportions", reread=SEC_GENERATE,
                          hint="after masking, take the softmax of the remaining logits")
    one_prompt_top_k(generate, scores, 2, {2, 3})
    passed("generate: frequencies follow softmax(logits / temperature); top_k keeps the k largest")


guard(globals())  # every check records warnings instead of printing them (core.guard)
