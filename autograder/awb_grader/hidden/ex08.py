"""Hidden checks for exercise 08 (get_batch, lr_at, GPT, generate): randomized cases.

Oracles are independent of the solution: windows are verified by searching the data for each
row (no assumption on how the starts are drawn); the schedule is recomputed in float64 from the
angle of the cosine; the GPT is checked through properties (shapes, cross-entropy recomputed
from its own logits, loss at init near ln V, causality under random perturbations, position
dependence, one tied (V, D) matrix, overfitting one batch); generate is checked against
stand-in models with known next-token distributions (frequencies over 30000 samples,
tolerance 0.02 absolute).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attention_workbook.checks.ex08 import single_threaded

from . import _adapter as A
from ._base import guard, CheckFailed, call, close, own_code, randint, rng


# ----------------------------------------------------------------------------------------
# get_batch
# ----------------------------------------------------------------------------------------
def _batch(get_batch, data, T, B, seed):
    out = call(get_batch, data, T, B, torch.Generator().manual_seed(seed), name="get_batch")
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        raise CheckFailed("hidden test: get_batch must return two tensors (x, y)")
    return out


def get_batch_shift(get_batch) -> None:
    own_code(get_batch, "get_batch")
    g = rng(801)
    for case in range(5):
        n, T, B = randint(g, 30, 300), randint(g, 1, 12), randint(g, 1, 9)
        data = torch.randint(0, 65, (n,), generator=g)
        x, y = _batch(get_batch, data, T, B, seed=case)
        if tuple(x.shape) != (B, T) or tuple(y.shape) != (B, T):
            raise CheckFailed(f"hidden test: get_batch shapes {tuple(x.shape)}, {tuple(y.shape)}; expected ({B}, {T})",
                              details=[f"case: len(data)={n}, block_size={T}, batch_size={B}"])
        windows = data.unfold(0, T + 1, 1)  # (n - T, T + 1): every (input, target) window
        for b in range(B):
            row = torch.cat([x[b], y[b, -1:]])
            match = (windows == row).all(1)
            if not bool(match.any()) or not torch.equal(y[b, :-1], x[b, 1:]):
                raise CheckFailed("hidden test: a (x, y) row is not a window of the data with y = x shifted by one",
                                  details=[f"case: len(data)={n}, block_size={T}, batch_size={B}, row {b}"])


def get_batch_random(get_batch) -> None:
    g = rng(802)
    for case in range(4):
        T = randint(g, 2, 10)
        extra = randint(g, 1, 4)
        data = torch.arange(T + extra)      # valid starts: 0 .. extra - 1
        x1, y1 = _batch(get_batch, data, T, 200, seed=10 + case)
        x2, y2 = _batch(get_batch, data, T, 200, seed=10 + case)
        if not (torch.equal(x1, x2) and torch.equal(y1, y2)):
            raise CheckFailed("hidden test: get_batch is not reproducible with a seeded generator",
                              details=[f"case: len(data)={T + extra}, block_size={T}"])
        starts = set(x1[:, 0].tolist())
        if starts != set(range(extra)) or int(y1.max()) >= T + extra:
            raise CheckFailed("hidden test: the window starts drawn are not exactly the valid ones",
                              details=[f"case: len(data)={T + extra}, block_size={T}: valid starts "
                                       f"{list(range(extra))}, drawn {sorted(starts)} in 200 windows"])
    x_a, _ = _batch(get_batch, torch.arange(500), 8, 16, seed=1)
    x_b, _ = _batch(get_batch, torch.arange(500), 8, 16, seed=2)
    if torch.equal(x_a, x_b):
        raise CheckFailed("hidden test: different generator seeds gave the same batch (is the generator used?)")


# ----------------------------------------------------------------------------------------
# lr_at
# ----------------------------------------------------------------------------------------
def _lr_oracle(step, warmup, max_steps, hi, lo):
    if step < warmup:
        return hi * (step + 1) / warmup
    if step >= max_steps:
        return lo
    angle = math.pi * (step - warmup) / (max_steps - warmup)
    return lo + (hi - lo) * (math.cos(angle) + 1) / 2


def _lr_case(lr_at, step, W, M, hi, lo):
    got = call(lr_at, step, W, M, hi, lo, name="lr_at")
    want = _lr_oracle(step, W, M, hi, lo)
    try:
        ok = math.isclose(float(got), want, rel_tol=1e-6, abs_tol=1e-12)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise CheckFailed("hidden test: lr_at differs from warmup + cosine",
                          details=[f"case: step={step}, warmup_steps={W}, max_steps={M}, max_lr={hi:.2e}, "
                                   f"min_lr={lo:.2e}: expected {want:.6e} (relative tolerance 1e-6)"])


def lr_at_warmup(lr_at) -> None:
    own_code(lr_at, "lr_at")
    g = rng(803)
    for _ in range(4):
        W = randint(g, 1, 50)
        M = W + randint(g, 1, 500)
        hi = 10 ** (-randint(g, 2, 4)) * randint(g, 1, 9)
        for step in sorted({0, W // 2, W - 1, randint(g, 0, W - 1)}):
            _lr_case(lr_at, step, W, M, hi, hi / 10)


def lr_at_cosine(lr_at) -> None:
    own_code(lr_at, "lr_at")
    g = rng(804)
    for _ in range(4):
        W = randint(g, 0, 40)
        M = W + randint(g, 2, 800)
        hi = 10 ** (-randint(g, 2, 4)) * randint(g, 1, 9)
        lo = hi * randint(g, 0, 5) / 10
        for step in sorted({W, M - 1, M, M + randint(g, 1, 1000), randint(g, W, M), randint(g, W, M)}):
            _lr_case(lr_at, step, W, M, hi, lo)
    M = randint(g, 2, 800)   # warmup_steps = 0: no warmup (the text states it), the cosine starts at step 0
    for step in (0, randint(g, 1, M - 1), M, M + 1):
        _lr_case(lr_at, step, 0, M, 3e-4, 3e-5)


# ----------------------------------------------------------------------------------------
# GPT
# ----------------------------------------------------------------------------------------
def _config(g):
    n_head = randint(g, 1, 4)
    # odd vocabularies: never equal to block_size or to a multiple of d_model (the tied-matrix count)
    return dict(vocab_size=2 * randint(g, 10, 34) + 1, block_size=randint(g, 8, 20), n_layer=randint(g, 1, 2),
                n_head=n_head, d_model=n_head * 8 * randint(g, 1, 2), dropout=0.0)


def _build(GPT, cfg, seed):
    model = A.new(GPT, name="GPT", seed=seed, **cfg)
    if not A.is_module(model):
        raise CheckFailed("hidden test: GPT(...) is not an nn.Module")
    return A.train(model, False)


def _fwd(model, idx, targets=None):
    out = call(model, idx, targets, name="GPT.forward")
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor)):
        raise CheckFailed("hidden test: GPT.forward must return (logits, loss)")
    return out


@single_threaded
def gpt_forward(GPT) -> None:
    own_code(GPT, "GPT")
    g = rng(805)
    for case in range(3):
        cfg = _config(g)
        V, Tmax = cfg["vocab_size"], cfg["block_size"]
        model = _build(GPT, cfg, seed=case)
        B, T = randint(g, 1, 4), randint(g, 1, Tmax)
        idx = torch.randint(V, (B, T), generator=g)
        targets = torch.randint(V, (B, T), generator=g)
        logits, loss = _fwd(model, idx)
        if tuple(logits.shape) != (B, T, V) or loss is not None:
            raise CheckFailed("hidden test: GPT.forward without targets must give logits (B, T, V) and loss None",
                              details=[f"case: {cfg}, idx ({B}, {T}); got {tuple(logits.shape)}"])
        logits, loss = _fwd(model, idx, targets)
        if tuple(logits.shape) != (B, T, V):
            raise CheckFailed("hidden test: GPT.forward with targets must still give logits (B, T, V)",
                              details=[f"case: {cfg}, idx ({B}, {T}); got {tuple(logits.shape)}"])
        want = F.cross_entropy(logits.double().reshape(B * T, V), targets.reshape(B * T))
        if (
            not isinstance(loss, torch.Tensor)
            or loss.numel() != 1
            or not close(loss.double().reshape(()), want, atol=1e-4)
        ):
            raise CheckFailed("hidden test: the loss is not the mean cross-entropy of the logits against the targets",
                              details=[f"case: {cfg}, idx ({B}, {T}); tolerance 1e-4"])
        # at initialisation every symbol is about equally likely
        if abs(loss.item() - math.log(V)) > 0.35:
            raise CheckFailed(
                "hidden test: the loss at initialisation is far from ln(vocab_size)",
                details=[f"case: {cfg}: loss {loss.item():.3f}, ln V = {math.log(V):.3f}, tolerance 0.35"],
            )
    _gpt_dropout(GPT, g, seed=7)
    _gpt_given(GPT, g, seed=8)


def _gpt_given(GPT, g, seed):
    """The given lines of the cell (block_size; _init_weights: normal(0, 0.02) weights, zero biases) and
    the default dropout=0.0 (train mode equals eval mode)."""
    cfg = {k: v for k, v in _config(g).items() if k != "dropout"}
    model = A.new(GPT, name="GPT", seed=seed, **cfg)
    if A.get(model, "block_size", None) != cfg["block_size"]:
        raise CheckFailed(
            "hidden test: GPT(...).block_size is not the block_size it was given", details=[f"case: {cfg}"]
        )
    weights = A.params(model)
    for m in A.describe(model):
        if m["kind"] not in ("Linear", "Embedding") or f"{m['path']}.weight" not in weights:
            continue                                    # (the tied lm_head.weight is tok_emb.weight)
        w = weights[f"{m['path']}.weight"].double()
        bias = weights.get(f"{m['path']}.bias")
        if abs(float(w.mean())) > 0.01 or not 0.001 < float(w.std()) < 0.025 or (
                bias is not None and bool(bias.abs().max() > 0)):
            raise CheckFailed("hidden test: the given initialisation (normal weights with mean 0 and std 0.02, "
                              f"zero biases) is not in place: {m['path']}", details=[f"case: {cfg}"])
    idx = torch.randint(cfg["vocab_size"], (2, cfg["block_size"]), generator=g)
    with torch.no_grad():
        a, _ = _fwd(A.train(model, True), idx)
        b, _ = _fwd(A.train(model, False), idx)
    if not close(a, b, atol=1e-6):
        raise CheckFailed("hidden test: GPT(...) without a dropout argument differs between train and eval mode "
                          "(dropout=0.0 is the default)", details=[f"case: {cfg}"])


def _every_position(logits, shape, cfg):
    """One row of logits per position: (B, T, ...) (the vocabulary axis is gpt_forward's business)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(shape[:2]):
        raise CheckFailed(f"hidden test: GPT.forward must give logits {tuple(shape)} (B, T, V), one row per position",
                          details=[f"case: {cfg}; got {tuple(getattr(logits, 'shape', ()))}"])


def _gpt_dropout(GPT, g, seed):
    """Dropout passed to every block (an nn.Dropout(p) in each); in train mode with p = 1 and every bias
    inside the blocks set to 0 (random outside them), the logits are lm_head(ln_f(0)): the same for
    any input and position, and not 0."""
    cfg = _config(g)
    V = cfg["vocab_size"]
    model = A.new(GPT, name="GPT", seed=seed, **{**cfg, "dropout": 0.3})
    mods = A.describe(model)
    block_ids = {m["path"].split(".")[1] for m in mods if m["path"].startswith("blocks.")}
    drops = {m["path"].split(".")[1] for m in mods if m["path"].startswith("blocks.") and m["kind"] == "Dropout"
             and abs(m["p"] - 0.3) < 1e-12}
    if not block_ids or block_ids != drops:
        raise CheckFailed("hidden test: GPT(..., dropout=0.3) has a block without nn.Dropout(0.3)",
                          details=[f"case: {cfg}"])
    model = A.train(A.new(GPT, name="GPT", seed=seed, **{**cfg, "dropout": 1.0}), True)
    values = {k: (torch.zeros_like(v) if k.startswith("blocks.") else torch.randn(v.shape, generator=g))
              for k, v in A.params(model).items() if k.endswith("bias")}
    A.load(model, values)
    outside = any(not k.startswith("blocks.") for k in values)
    B, T = randint(g, 1, 3), randint(g, 1, cfg["block_size"])
    with torch.no_grad():
        a, _ = _fwd(model, torch.randint(V, (B, T), generator=g))
        b, _ = _fwd(model, torch.randint(V, (B, T), generator=g))
    _every_position(a, (B, T, V), cfg)
    if not (close(a, b) and close(a, a[:1, :1].expand_as(a))) or (outside and float(a.abs().max()) < 1e-6):
        raise CheckFailed("hidden test: GPT(dropout=1.0) in train mode: the logits should be lm_head(ln_f(0)) at "
                          "every position (dropout on the embeddings' sum, inside the blocks, nowhere after ln_f)",
                          details=[f"case: {cfg}, idx ({B}, {T})"])


@single_threaded
def gpt_causal(GPT) -> None:
    g = rng(806)
    for case in range(3):
        cfg = _config(g)
        V, T = cfg["vocab_size"], cfg["block_size"]
        model = _build(GPT, cfg, seed=10 + case)
        idx = torch.randint(V, (2, T), generator=g)
        base, _ = _fwd(model, idx)
        _every_position(base, (2, T, V), cfg)
        for _ in range(3):
            t = randint(g, 0, T - 1)
            changed = idx.clone()
            changed[:, t] = (changed[:, t] + randint(g, 1, V - 1)) % V
            new, _ = _fwd(model, changed)
            if t > 0 and (new[:, :t] - base[:, :t]).abs().max().item() > 1e-5:
                raise CheckFailed("hidden test: a token changes logits at earlier positions (not causal)",
                                  details=[f"case: {cfg}, changed position {t}; tolerance 1e-5"])
            if (new[:, t] - base[:, t]).abs().max().item() < 1e-7:
                raise CheckFailed("hidden test: changing a token does not change the logits at its own position",
                                  details=[f"case: {cfg}, position {t}"])


@single_threaded
def gpt_positions_and_tying(GPT) -> None:
    g = rng(807)
    for case in range(2):
        cfg = _config(g)
        V, D, T = cfg["vocab_size"], cfg["d_model"], cfg["block_size"]
        model = _build(GPT, cfg, seed=20 + case)
        tok = randint(g, 0, V - 1)
        logits, _ = _fwd(model, torch.full((1, T - 2), tok, dtype=torch.long))   # shorter than block_size
        _every_position(logits, (1, T - 2, V), cfg)
        if (logits[0, 1:] - logits[0, :1]).abs().max().item() < 1e-6:
            raise CheckFailed("hidden test: identical tokens give identical logits at every position "
                              "(no position information)", details=[f"case: {cfg}"])
        vd = [p for p in A.params(model).values() if tuple(p.shape) in ((V, D), (D, V))]
        if len(vd) != 1:
            raise CheckFailed(f"hidden test: {len(vd)} distinct vocab x d_model matrices, expected 1 (weights tied)",
                              details=[f"case: {cfg}"])
        params = A.params(model)
        if any(tuple(p.shape) == (V,) for p in params.values()):
            raise CheckFailed("hidden test: the output layer has a bias (a parameter of shape (vocab_size,))",
                              details=[f"case: {cfg}"])
        pos = [k for k, p in params.items() if tuple(p.shape) == (T, D)]
        tok = [p for p in params.values() if tuple(p.shape) == (V, D)]
        if len(pos) != 1 or len(tok) != 1 or T == D:
            continue                             # another layout: the position check needs one table of each
        out = []
        for c in (randint(g, 0, V // 2 - 1), randint(g, V // 2, V - 1)):
            # every row of the position table = minus token c's embedding: c's reach the blocks as x = 0
            A.load(model, {pos[0]: -tok[0][c].expand(T, D).clone()})
            logits, _ = _fwd(model, torch.full((1, T), c, dtype=torch.long))
            out.append(logits)
        if not close(out[0], out[1], atol=1e-5):
            raise CheckFailed("hidden test: x = tok_emb(idx) + pos_emb(positions): with pos_emb = -tok_emb[c] in every "
                              "row, two such tokens c must give the same logits (x = 0)", details=[f"case: {cfg}"])


@single_threaded
def gpt_overfits(GPT) -> None:
    g = rng(808)
    cfg = dict(vocab_size=randint(g, 30, 65), block_size=8, n_layer=1, n_head=2, d_model=32, dropout=0.0)
    model = A.train(_build(GPT, cfg, seed=30), True)
    weights = {k: v.requires_grad_(True) for k, v in A.params(model).items()}
    n_params = sum(p.numel() for p in weights.values())
    if n_params < cfg["vocab_size"] * 32 + 4 * 32 * 32:
        raise CheckFailed("hidden test: the blocks' parameters are not registered in the model",
                          details=[f"case: {cfg}: {n_params} parameters"])
    x = torch.randint(cfg["vocab_size"], (4, 8), generator=g)
    y = torch.randint(cfg["vocab_size"], (4, 8), generator=g)
    # Adam runs here on copies of the weights; the model computes its loss and the gradients
    opt = torch.optim.Adam(weights.values(), lr=1e-2)
    for _ in range(50):
        A.load(model, {k: v.detach() for k, v in weights.items()})
        loss, grad = call(A.grads, model, x, y, name="GPT forward + backward")
        if set(grad) != set(weights):
            raise CheckFailed("hidden test: the model's parameters changed during training")
        for k, w in weights.items():
            w.grad = grad[k]
        opt.step()
    if not loss <= 0.5:
        raise CheckFailed("hidden test: the model does not overfit a single batch",
                          details=[f"case: {cfg}, batch (4, 8), 50 Adam steps at lr 1e-2: loss {loss:.3f} "
                                   f"(threshold 0.5)"])


# ----------------------------------------------------------------------------------------
# generate
# ----------------------------------------------------------------------------------------
def _gen(generate, model, idx, n, **kw):
    out = call(generate, model, idx, n, name="generate", **kw)
    if not isinstance(out, torch.Tensor):
        raise CheckFailed("hidden test: generate must return a tensor")
    return out


@single_threaded
def generate_basics(generate) -> None:
    own_code(generate, "generate")
    g = rng(809)
    for case in range(3):
        V, bs, shift = randint(g, 5, 30), randint(g, 2, 6), randint(g, 1, 4)
        B, T, n = randint(g, 1, 3), randint(g, bs + 1, bs + 8), randint(g, 2, 8)
        model = A.make("ex08.stub", torch.zeros(V), bs, shift)
        prompt = torch.randint(V, (B, T), generator=g)
        out = _gen(generate, model, prompt, n, top_k=1)
        want = prompt.clone()
        for _ in range(n):
            want = torch.cat([want, (want[:, -1:] + shift) % V], dim=1)
        if A.get(model, "grad_seen", False):
            raise CheckFailed("hidden test: generate runs the model with gradients enabled (use @torch.no_grad())")
        longest = A.get(model, "longest")
        if longest > bs or tuple(out.shape) != (B, T + n) or not torch.equal(out, want):
            raise CheckFailed("hidden test: greedy (top_k=1) generation from a long prompt is wrong",
                              details=[f"case: vocab {V}, block_size {bs}, prompt ({B}, {T}), {n} new tokens; "
                                       f"longest context fed to the model {longest}"])
    model = A.make("ex08.stub", torch.randn(11, generator=g), 4)
    a = _gen(generate, model, torch.zeros(5, 2, dtype=torch.long), 7, generator=torch.Generator().manual_seed(3))
    b = _gen(generate, model, torch.zeros(5, 2, dtype=torch.long), 7, generator=torch.Generator().manual_seed(3))
    if not torch.equal(a, b):
        raise CheckFailed("hidden test: generate is not reproducible with a seeded generator")


@single_threaded
def generate_sampling(generate) -> None:
    g = rng(810)
    N = 30000
    for case in range(3):
        V = randint(g, 4, 9)
        base = torch.randn(V, generator=g) * 1.5
        temp = [1.0, 0.7, 1.6][case]
        k = randint(g, 2, V - 1) if case else None
        out = _gen(
            generate,
            A.make("ex08.stub", base, 4),
            torch.zeros(N, 1, dtype=torch.long),
            1,
            temperature=temp,
            top_k=k,
            generator=torch.Generator().manual_seed(case),
        )
        freq = torch.bincount(out[:, -1], minlength=V).double() / N
        want = base.double() / temp
        if k is not None:
            kth = sorted(want.tolist(), reverse=True)[k - 1]
            want = want.masked_fill(want < kth, float("-inf"))
        want = F.softmax(want, -1)
        if (freq - want).abs().max().item() > 0.02:
            raise CheckFailed("hidden test: sampled frequencies differ from softmax(top-k(logits) / temperature)",
                              details=[f"case: vocab {V}, temperature {temp}, top_k {k}; {N} samples, "
                                       f"tolerance 0.02 absolute"])
    V = randint(g, 4, 9)                                   # one prompt (B = 1 < k): top-k per row, not per batch
    base = torch.randperm(V, generator=g).float()
    k = randint(g, 2, V - 1)
    out = _gen(generate, A.make("ex08.stub", base, 4), torch.zeros(1, 1, dtype=torch.long), 1500, top_k=k,
               generator=torch.Generator().manual_seed(7))
    if set(out[0, 1:].tolist()) != set(torch.topk(base, k).indices.tolist()):
        raise CheckFailed("hidden test: with one prompt, top_k should sample exactly the k most likely tokens",
                          details=[f"case: vocab {V}, top_k {k}, 1500 tokens from one prompt"])


guard(globals())  # every check records warnings instead of printing them (core.guard)
