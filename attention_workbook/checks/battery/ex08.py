"""Battery for exercise 08 (get_batch, lr_at, GPT, generate).

Oracles: windows are found by searching the data for each row; the schedule is recomputed in
float64 from the angle of the cosine; the GPT is checked through properties (shapes,
``F.cross_entropy`` of its own logits, loss at init near ln V, causality under random
perturbations, position dependence, one tied (V, D) matrix, overfitting one batch); generate
runs on stand-in models whose next-token distribution is known (sampled frequencies against
softmax(top-k(logits) / temperature)).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import ex08 as visible
from ._util import CheckFailed, call, close, guard, randint


def _batch(get_batch, data, T, B, seed):
    out = visible._student_batch(get_batch, data, T, B, seed)
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        raise CheckFailed("get_batch must return two tensors (x, y)", reread=visible.SEC_DATA)
    return out


def get_batch_shift(get_batch, g) -> None:
    for _ in range(5):
        n, T, B = randint(g, 30, 400), randint(g, 1, 14), randint(g, 1, 10)
        data = torch.randint(0, 80, (n,), generator=g)
        x, y = _batch(get_batch, data, T, B, seed=randint(g, 0, 10**6))
        case = f"len(data)={n}, block_size={T}, batch_size={B}"
        if tuple(x.shape) != (B, T) or tuple(y.shape) != (B, T):
            raise CheckFailed(f"get_batch shapes {tuple(x.shape)}, {tuple(y.shape)}; expected ({B}, {T})",
                              details=[f"case: {case}"], reread=visible.SEC_DATA)
        windows = data.unfold(0, T + 1, 1)
        for b in range(B):
            row = torch.cat([x[b], y[b, -1:]])
            if not bool((windows == row).all(1).any()) or not torch.equal(y[b, :-1], x[b, 1:]):
                raise CheckFailed("a (x, y) row is not a window of the data with y = x shifted by one",
                                  details=[f"case: {case}, row {b}"], reread=visible.SEC_DATA)


def get_batch_random(get_batch, g) -> None:
    for _ in range(4):
        T, extra = randint(g, 2, 10), randint(g, 1, 4)
        data = torch.arange(T + extra)                 # valid starts: 0 .. extra - 1
        seed = randint(g, 0, 10**6)
        x1, y1 = _batch(get_batch, data, T, 200, seed)
        x2, y2 = _batch(get_batch, data, T, 200, seed)
        if not (torch.equal(x1, x2) and torch.equal(y1, y2)):
            raise CheckFailed("get_batch is not reproducible with a seeded generator", reread=visible.SEC_DATA,
                              details=[f"case: len(data)={T + extra}, block_size={T}"])
        starts = set(x1[:, 0].tolist())
        if starts != set(range(extra)) or int(y1.max()) >= T + extra:
            raise CheckFailed("the window starts drawn are not exactly the valid ones", reread=visible.SEC_DATA,
                              details=[f"case: len(data)={T + extra}, block_size={T}: valid starts "
                                       f"{list(range(extra))}, drawn {sorted(starts)} in 200 windows"])
    x_a, _ = _batch(get_batch, torch.arange(700), 9, 16, seed=5)
    x_b, _ = _batch(get_batch, torch.arange(700), 9, 16, seed=6)
    if torch.equal(x_a, x_b):
        raise CheckFailed("different generator seeds gave the same batch (is the generator used?)",
                          reread=visible.SEC_DATA)


def _lr_oracle(step, warmup, max_steps, hi, lo):
    if step < warmup:
        return hi * (step + 1) / warmup
    if step >= max_steps:
        return lo
    angle = math.pi * (step - warmup) / (max_steps - warmup)
    return lo + (hi - lo) * (1 + math.cos(angle)) / 2


def _lr_case(lr_at, step, W, M, hi, lo):
    got = call(lr_at, step, W, M, hi, lo, name="lr_at", reread=visible.SEC_SCHEDULE)
    want = _lr_oracle(step, W, M, hi, lo)
    try:
        ok = math.isclose(float(got), want, rel_tol=1e-6, abs_tol=1e-12)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise CheckFailed("lr_at differs from linear warmup + cosine decay", reread=visible.SEC_SCHEDULE,
                          details=[f"case: step={step}, warmup_steps={W}, max_steps={M}, max_lr={hi:.2e}, "
                                   f"min_lr={lo:.2e}: got {got!r}, expected {want:.6e} (relative tolerance 1e-6)"])


def lr_at_warmup(lr_at, g) -> None:
    for _ in range(4):
        W = randint(g, 1, 60)
        M = W + randint(g, 1, 600)
        hi = 10 ** (-randint(g, 2, 4)) * randint(g, 1, 9)
        for step in sorted({0, W // 2, W - 1, randint(g, 0, W - 1)}):
            _lr_case(lr_at, step, W, M, hi, hi / 10)


def lr_at_cosine(lr_at, g) -> None:
    for _ in range(4):
        W = randint(g, 0, 50)
        M = W + randint(g, 2, 900)
        hi = 10 ** (-randint(g, 2, 4)) * randint(g, 1, 9)
        lo = hi * randint(g, 0, 5) / 10
        for step in sorted({W, M - 1, M, M + randint(g, 1, 1000), randint(g, W, M), randint(g, W, M)}):
            _lr_case(lr_at, step, W, M, hi, lo)
    M = randint(g, 2, 900)   # warmup_steps = 0 (the text states it): the cosine starts at step 0
    for step in (0, randint(g, 1, M - 1), M, M + 3):
        _lr_case(lr_at, step, 0, M, 6e-4, 6e-5)


def _config(g):
    n_head = randint(g, 1, 4)
    return dict(vocab_size=2 * randint(g, 10, 34) + 1, block_size=randint(g, 8, 20), n_layer=randint(g, 1, 2),
                n_head=n_head, d_model=n_head * 8 * randint(g, 1, 2), dropout=0.0)


def _build(GPT, cfg, g):
    return visible._build(GPT, seed=randint(g, 0, 10**6), **cfg)


def _fwd(model, idx, targets=None):
    return visible._forward(model, idx, targets)


@visible.single_threaded
def gpt_forward(GPT, g) -> None:
    for _ in range(3):
        cfg = _config(g)
        V = cfg["vocab_size"]
        model = _build(GPT, cfg, g)
        B, T = randint(g, 1, 4), randint(g, 1, cfg["block_size"])
        idx, targets = torch.randint(V, (B, T), generator=g), torch.randint(V, (B, T), generator=g)
        logits, loss = _fwd(model, idx)
        if tuple(logits.shape) != (B, T, V) or loss is not None:
            raise CheckFailed(
                "GPT.forward without targets must give logits (B, T, V) and loss None",
                reread=visible.SEC_MODEL,
                details=[f"case: {cfg}, idx ({B}, {T}); got {tuple(logits.shape)}"],
            )
        logits, loss = _fwd(model, idx, targets)
        want = F.cross_entropy(logits.detach().double().reshape(B * T, V), targets.reshape(B * T))
        if (
            not isinstance(loss, torch.Tensor)
            or loss.numel() != 1
            or not close(loss.detach().double().reshape(()), want, atol=1e-4)
        ):
            raise CheckFailed("the loss is not the mean cross-entropy of the logits against the targets",
                              reread=visible.SEC_MODEL, details=[f"case: {cfg}, idx ({B}, {T}); tolerance 1e-4"])
        if abs(loss.item() - math.log(V)) > 0.35:
            raise CheckFailed(
                "the loss at initialisation is far from ln(vocab_size)",
                reread=visible.SEC_MODEL,
                details=[f"case: {cfg}: loss {loss.item():.3f}, ln V = {math.log(V):.3f}, tolerance 0.35"],
            )
    cfg = _config(g)
    visible.gpt_dropout(GPT, vocab_size=cfg["vocab_size"], block_size=cfg["block_size"], n_layer=cfg["n_layer"],
                        n_head=cfg["n_head"], d_model=cfg["d_model"], B=randint(g, 1, 3),
                        T=randint(g, 1, cfg["block_size"]), seed=randint(g, 0, 10_000))
    cfg = _config(g)
    visible.gpt_given(GPT, vocab_size=cfg["vocab_size"], block_size=cfg["block_size"], n_layer=cfg["n_layer"],
                      n_head=cfg["n_head"], d_model=cfg["d_model"], seed=randint(g, 0, 10_000))


@visible.single_threaded
def gpt_causal(GPT, g) -> None:
    for _ in range(3):
        cfg = _config(g)
        V, T = cfg["vocab_size"], cfg["block_size"]
        model = _build(GPT, cfg, g)
        idx = torch.randint(V, (2, T), generator=g)
        with torch.no_grad():
            base, _ = _fwd(model, idx)
            for _ in range(3):
                t = randint(g, 0, T - 1)
                changed = idx.clone()
                changed[:, t] = (changed[:, t] + randint(g, 1, V - 1)) % V
                new, _ = _fwd(model, changed)
                if t > 0 and (new[:, :t] - base[:, :t]).abs().max().item() > 1e-5:
                    raise CheckFailed("a token changes the logits at earlier positions (not causal)",
                                      reread=visible.SEC_MODEL, details=[f"case: {cfg}, changed position {t}"])
                if (new[:, t] - base[:, t]).abs().max().item() < 1e-7:
                    raise CheckFailed("changing a token does not change the logits at its own position",
                                      reread=visible.SEC_MODEL, details=[f"case: {cfg}, position {t}"])


@visible.single_threaded
def gpt_positions_and_tying(GPT, g) -> None:
    for _ in range(2):
        cfg = _config(g)
        V, D, T = cfg["vocab_size"], cfg["d_model"], cfg["block_size"]
        model = _build(GPT, cfg, g)
        with torch.no_grad():
            logits, _ = _fwd(model, torch.full((1, T - randint(g, 1, 3)), randint(g, 0, V - 1), dtype=torch.long))
        if (logits[0, 1:] - logits[0, :1]).abs().max().item() < 1e-6:
            raise CheckFailed("identical tokens give identical logits at every position (no position information)",
                              reread=visible.SEC_MODEL, details=[f"case: {cfg}"])
        vd = [p for p in model.parameters() if tuple(p.shape) in ((V, D), (D, V))]
        if len(vd) != 1:
            raise CheckFailed(f"{len(vd)} distinct vocab x d_model matrices, expected 1 (weights tied)",
                              reread=visible.SEC_MODEL, details=[f"case: {cfg}"])
    cfg = _config(g)
    V = cfg["vocab_size"]
    T = cfg["block_size"] + (cfg["block_size"] == cfg["d_model"])          # one (T, D) parameter: the positions
    visible.gpt_adds_positions(GPT, vocab_size=V, block_size=T, n_layer=cfg["n_layer"],
                               n_head=cfg["n_head"], d_model=cfg["d_model"], seed=randint(g, 0, 10_000),
                               a=randint(g, 0, V // 2 - 1), b=randint(g, V // 2, V - 1))


@visible.single_threaded
def gpt_overfits(GPT, g) -> None:
    cfg = dict(vocab_size=randint(g, 30, 65), block_size=8, n_layer=1, n_head=2, d_model=32, dropout=0.0)
    model = _build(GPT, cfg, g).train()
    n_params = sum(p.numel() for p in model.parameters())
    if n_params < cfg["vocab_size"] * 32 + 4 * 32 * 32:
        raise CheckFailed("the blocks' parameters are not registered in the model (a plain list instead of "
                          "nn.ModuleList?)", reread=visible.SEC_MODEL, details=[f"case: {cfg}: {n_params} parameters"])
    x = torch.randint(cfg["vocab_size"], (4, 8), generator=g)
    y = torch.randint(cfg["vocab_size"], (4, 8), generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(50):
        _, loss = _fwd(model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if loss.item() > 0.5:
        raise CheckFailed("the model does not overfit a single batch", reread=visible.SEC_MODEL,
                          details=[f"case: {cfg}, batch (4, 8), 50 Adam steps at lr 1e-2: loss {loss.item():.3f} "
                                   "(threshold 0.5)"])


class NextTokenStub(nn.Module):
    """Next-token scores that depend on the last token: logits[..., j] = base[j] + 20 [j == (tok + s) % V].
    The hidden checks hand the same stub to the student's ``generate`` (``replay_support.maker``)."""

    def __init__(self, base, block_size, shift=None):
        super().__init__()
        self.base, self.block_size, self.shift, self.longest = base, block_size, shift, 0
        self.grad_seen = False

    def forward(self, idx, targets=None):
        B, T = idx.shape
        self.longest = max(self.longest, T)
        self.grad_seen = self.grad_seen or torch.is_grad_enabled()
        if T > self.block_size:
            raise IndexError(f"index out of range: context {T} > block_size {self.block_size}")
        V = self.base.numel()
        logits = self.base.expand(B, T, V).clone()
        if self.shift is not None:
            logits = logits + 20 * F.one_hot((idx + self.shift) % V, V).float()
        return logits, None


def _gen(generate, model, idx, n, **kw):
    out = visible._gen(generate, model, idx, n, **kw)
    if not isinstance(out, torch.Tensor):
        raise CheckFailed("generate must return a tensor", reread=visible.SEC_GENERATE)
    return out


@visible.single_threaded
def generate_basics(generate, g) -> None:
    for _ in range(3):
        V, bs, shift = randint(g, 5, 30), randint(g, 2, 6), randint(g, 1, 4)
        B, T, n = randint(g, 1, 3), randint(g, bs + 1, bs + 8), randint(g, 2, 8)
        model = NextTokenStub(torch.zeros(V), bs, shift)
        prompt = torch.randint(V, (B, T), generator=g)
        out = _gen(generate, model, prompt, n, top_k=1)
        want = prompt.clone()
        for _ in range(n):
            want = torch.cat([want, (want[:, -1:] + shift) % V], dim=1)
        if model.grad_seen:
            raise CheckFailed("generate runs the model with gradients enabled", reread=visible.SEC_GENERATE,
                              hint=visible.NO_GRAD)
        if model.longest > bs or tuple(out.shape) != (B, T + n) or not torch.equal(out, want):
            raise CheckFailed("greedy (top_k=1) generation from a prompt longer than block_size is wrong",
                              reread=visible.SEC_GENERATE,
                              details=[f"case: vocab {V}, block_size {bs}, prompt ({B}, {T}), {n} new tokens; "
                                       f"longest context fed to the model {model.longest}"])
    model = NextTokenStub(torch.randn(13, generator=g), 4)
    seed = randint(g, 0, 10**6)
    a = _gen(generate, model, torch.zeros(4, 3, dtype=torch.long), 6, generator=torch.Generator().manual_seed(seed))
    b = _gen(generate, model, torch.zeros(4, 3, dtype=torch.long), 6, generator=torch.Generator().manual_seed(seed))
    if not torch.equal(a, b):
        raise CheckFailed("generate is not reproducible with a seeded generator", reread=visible.SEC_GENERATE)


@visible.single_threaded
def generate_sampling(generate, g) -> None:
    N = 30000
    for case, temp in enumerate((1.0, 0.6, 1.8)):
        V = randint(g, 4, 9)
        base = torch.randn(V, generator=g) * 1.5
        k = randint(g, 2, V - 1) if case else None
        out = _gen(generate, NextTokenStub(base, 4), torch.zeros(N, 1, dtype=torch.long), 1, temperature=temp, top_k=k,
                   generator=torch.Generator().manual_seed(randint(g, 0, 10**6)))
        freq = torch.bincount(out[:, -1], minlength=V).double() / N
        want = base.double() / temp
        if k is not None:
            kth = sorted(want.tolist(), reverse=True)[k - 1]
            want = want.masked_fill(want < kth, float("-inf"))
        want = torch.softmax(want, -1)
        if freq.numel() != V or (freq - want).abs().max().item() > 0.02:
            raise CheckFailed("sampled frequencies differ from softmax(top-k(logits) / temperature)",
                              reread=visible.SEC_GENERATE,
                              details=[f"case: vocab {V}, temperature {temp}, top_k {k}; {N} samples, tolerance 0.02"])
    V = randint(g, 4, 9)
    base = torch.randperm(V, generator=g).float()                       # distinct scores: a clear top k
    k = randint(g, 2, V - 1)
    visible.one_prompt_top_k(generate, base, k, set(torch.topk(base, k).indices.tolist()), seed=randint(g, 0, 10**6))


guard(globals())
