"""Lecture 08's GPT and its machinery: the model and graded pieces (attention_workbook.gpt), presets,
devices, the training loop (training) and head ablation (ablation)."""

import copy
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from attention_workbook import ablation, devices, gpt, presets, training
from attention_workbook.blocks import TransformerBlock
from attention_workbook.gpt import GPT, generate, get_batch, lr_at


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on one thread: two OpenMP threads on a busy 2-core machine mostly wait."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(**kw):
    torch.manual_seed(0)
    args = dict(vocab_size=65, block_size=16, n_layer=2, n_head=4, d_model=32)
    args.update(kw)
    return GPT(**args)


def test_shapes_and_loss_at_init_is_ln_vocab():
    m = tiny()
    idx = torch.randint(65, (3, 16), generator=torch.Generator().manual_seed(1))
    logits, loss = m(idx)
    assert logits.shape == (3, 16, 65) and loss is None
    _, loss = m(idx, torch.roll(idx, -1, dims=1))
    assert abs(loss.item() - math.log(65)) < 0.1  # small init: every character about equally likely
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, 17, dtype=torch.long))


def test_causal_future_tokens_change_no_earlier_logit():
    m = tiny().eval()
    idx = torch.randint(65, (2, 16), generator=torch.Generator().manual_seed(2))
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 7) % 65
    a, _ = m(idx)
    b, _ = m(changed)
    assert torch.equal(a[:, :9], b[:, :9])
    assert (a[:, 9:] - b[:, 9:]).abs().max() > 1e-3


def test_positions_matter_and_weights_are_tied():
    m = tiny().eval()
    logits, _ = m(torch.full((1, 8), 5))
    assert (logits[0, 0] - logits[0, 5]).abs().max() > 1e-4  # same token, different positions
    assert m.lm_head.weight is m.tok_emb.weight
    D, V, T, L = 32, 65, 16, 2
    block = 4 * D * D + 4 * D + 2 * (D * 4 * D) + 4 * D + D + 4 * D  # attention, feed-forward, 2 LayerNorms
    assert m.num_params() == V * D + T * D + L * block + 2 * D
    untied = tiny(tie_weights=False)
    assert untied.num_params() == m.num_params() + V * D


def test_bias_free_variant_has_no_bias_vectors():
    m = tiny(bias=False)
    assert all(p.dim() == 2 or "ln" in n for n, p in m.named_parameters())
    assert not any(n.endswith(".bias") for n, _ in m.named_parameters())


def test_fast_attention_path_matches_the_weights_path_and_lecture06_block():
    m = tiny().eval()
    idx = torch.randint(65, (2, 12), generator=torch.Generator().manual_seed(3))
    fast, _ = m(idx)
    maps = m.attention_maps(idx)                                         # (L, B, H, T, T)
    assert maps.shape == (2, 2, 4, 12, 12)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 2, 4, 12))
    assert maps.triu(1).abs().max() == 0                                 # nothing looks ahead
    for a in m.attentions():
        a.keep_weights = True
    slow, _ = m(idx)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    # our Block is lecture 06's TransformerBlock: same weights -> same output
    ours = m.blocks[0]
    ref = TransformerBlock(32, 4, 128, pre_ln=True, activation=torch.nn.GELU).eval()
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(2, 12, 32)
    torch.testing.assert_close(ours(x, is_causal=True), ref(x, is_causal=True), atol=1e-5, rtol=1e-5)


def test_head_ablation_zeroes_one_head():
    m = tiny().eval()
    idx = torch.randint(65, (1, 10), generator=torch.Generator().manual_seed(4))
    base, _ = m(idx)
    with ablation.ablate_heads(m, [(1, 2)]):
        ablated, _ = m(idx)
        assert m.blocks[1].attn.head_mask.tolist() == [1, 1, 0, 1]
    assert (base - ablated).abs().max() > 1e-5
    # by hand: head 2's output is columns 16:24 of W_o's input in layer 1 (Dh = 32 / 4 = 8)
    by_hand = copy.deepcopy(m)
    with torch.no_grad():
        by_hand.blocks[1].attn.W_o.weight[:, 16:24] = 0.0
    torch.testing.assert_close(by_hand(idx)[0], ablated)
    again, _ = m(idx)
    torch.testing.assert_close(again, base)  # restored after the with block
    data = torch.randint(65, (500,), generator=torch.Generator().manual_seed(5))
    full, delta = ablation.head_ablation(m, data, batch_size=4, eval_iters=2)
    assert delta.shape == (2, 4) and math.isfinite(full)


def test_get_batch_targets_are_inputs_shifted_by_one():
    data = torch.arange(100, 200)
    x, y = get_batch(data, 8, 5, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 8)
    assert torch.equal(y, x + 1)                     # data is consecutive integers
    assert int(y.max()) <= 199
    x2, _ = get_batch(data, 8, 5, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)


def test_lr_schedule_at_known_steps():
    kw = dict(warmup_steps=10, max_steps=110, max_lr=1e-3, min_lr=1e-4)
    assert lr_at(0, **kw) == pytest.approx(1e-4)          # (0 + 1) / 10 of max_lr: step 0 learns
    assert lr_at(4, **kw) == pytest.approx(5e-4)
    assert lr_at(9, **kw) == pytest.approx(1e-3)
    assert lr_at(10, **kw) == pytest.approx(1e-3)
    assert lr_at(60, **kw) == pytest.approx(5.5e-4)       # half way down the cosine
    assert lr_at(110, **kw) == pytest.approx(1e-4)
    assert lr_at(5000, **kw) == pytest.approx(1e-4)
    lrs = [lr_at(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    assert lr_at(0, 0, 100, 1.0, 0.0) == 1.0              # no warmup


def test_generate_crops_samples_and_is_reproducible():
    m = tiny()
    prompt = torch.randint(65, (2, 40), generator=torch.Generator().manual_seed(6))  # longer than block_size
    out = generate(m, prompt, 5, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 45) and torch.equal(out[:, :40], prompt)
    again = generate(m, prompt, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    greedy = generate(m, prompt, 5, temperature=0)
    assert torch.equal(greedy, generate(m, prompt, 5, top_k=1))
    assert m.training  # mode restored


def test_top_k_and_temperature_shape_the_distribution():
    class Fixed(torch.nn.Module):
        block_size = 4
        training = False

        def forward(self, idx):
            assert idx.size(1) <= 4
            logits = torch.tensor([0.0, 1.0, 2.0, 3.0, 0.5]).expand(idx.size(0), idx.size(1), 5)
            return logits, None

    m = Fixed()
    g = torch.Generator().manual_seed(0)
    start = torch.zeros(20000, 6, dtype=torch.long)
    nxt = generate(m, start, 1, top_k=2, generator=g)[:, -1]
    assert set(nxt.tolist()) == {2, 3}
    p = torch.bincount(nxt, minlength=5).float() / len(nxt)
    assert p[3].item() == pytest.approx(math.e / (1 + math.e), abs=0.02)
    nxt = generate(m, start, 1, temperature=0.5, generator=g)[:, -1]
    p = torch.bincount(nxt, minlength=5).float() / len(nxt)
    expected = F.softmax(torch.tensor([0.0, 1.0, 2.0, 3.0, 0.5]) / 0.5, dim=-1)
    torch.testing.assert_close(p, expected, atol=0.02, rtol=0)


def test_overfits_a_single_batch():
    m = tiny(n_layer=1, d_model=32)
    data = torch.randint(65, (400,), generator=torch.Generator().manual_seed(7))
    x, y = get_batch(data, 16, 4, torch.Generator().manual_seed(0))
    opt = training.configure_optimizer(m, 0.0, 1e-2)
    for _ in range(60):
        _, loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.3


def test_optimizer_decays_matrices_only():
    m = tiny()
    opt = training.configure_optimizer(m, 0.1, 1e-3)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == m.num_params()


def test_presets_and_choice(monkeypatch):
    for name, cfg in presets.PRESETS.items():
        assert cfg.model.d_model % cfg.model.n_head == 0, name
        assert cfg.warmup_iters < cfg.max_iters
    monkeypatch.delenv("AWB_PRESET", raising=False)
    monkeypatch.setenv("AWB_SMOKE", "1")
    assert presets.choose_preset("cpu") == "smoke"
    assert presets.choose_preset("cpu", override="t4") == "t4"
    monkeypatch.delenv("AWB_SMOKE")
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.delenv("AWB_GRADING", raising=False)
    assert presets.choose_preset("cpu") == "cpu"
    with pytest.raises(ValueError):
        presets.choose_preset("cpu", "huge")
    cfg = presets.PRESETS["cpu"].with_overrides(n_layer=1, lr=1.0)
    assert cfg.model.n_layer == 1 and cfg.lr == 1.0 and presets.PRESETS["cpu"].model.n_layer != 1
    assert presets.TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert devices.amp_dtype("cpu", "fp32") is None and devices.amp_dtype("cuda", "fp16") == torch.float16


def test_h100_fast_preset_is_large_gpu_trained_for_speed(monkeypatch):
    """``h100-fast``: the ``large-gpu`` model with CUDA graphs, dropout 0.05 and a 600-step cosine (the
    settings measured fastest, results/gpt_shakespeare.md); only by name."""
    fast, large = presets.PRESETS["h100-fast"], presets.PRESETS["large-gpu"]
    assert fast.model == replace(large.model, dropout=0.05) and large.model.dropout == 0.2
    assert fast.compile == "reduce-overhead" and not large.compile
    assert (fast.max_iters, fast.batch_size, fast.lr) == (600, large.batch_size, large.lr)
    assert fast.warmup_iters < fast.max_iters < large.max_iters
    assert presets.TrainConfig.from_dict(fast.to_dict()) == fast
    fake_gpu(monkeypatch, "NVIDIA H100 80GB HBM3")
    assert presets.choose_preset("cuda") == "large-gpu"              # never the automatic choice
    assert presets.choose_preset("cuda", "h100-fast") == "h100-fast"


@pytest.mark.parametrize("device,mode,calls", [("cuda", "reduce-overhead", 3), ("cuda", "max-autotune", 3),
                                               ("cuda", True, 1), ("cuda", "default", 1),
                                               ("cpu", "reduce-overhead", 1)])
def test_compile_warmup_records_cuda_graphs_before_the_clock(monkeypatch, device, mode, calls):
    """CUDA graphs are recorded on a compiled model's second call: in the modes that use them,
    ``training.compiled`` makes three calls (forward + backward) before the clock starts, else one."""
    seen = []

    def fake_compile(model, **kw):
        seen.append(kw)
        return lambda x, y: (seen.append("call"), model(x, y))[1]
    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)   # no GPU here: the model runs on the CPU
    cfg = replace(presets.PRESETS["smoke"], compile=mode)
    model = GPT.from_config(cfg.model)
    data = torch.randint(65, (500,), generator=torch.Generator().manual_seed(0))
    step_model, seconds = training.compiled(model, cfg, training.RunInfo(device=device), data, cfg.model.block_size)
    assert seen[0] == ({"mode": mode} if isinstance(mode, str) else {}) and seen.count("call") == calls
    assert all(p.grad is None for p in model.parameters()) and seconds >= 0


def test_command_line_overrides():
    """One parser for --set KEY=VALUE (the training script and the GPU benchmark share it)."""
    got = presets.parse_overrides(["max_iters=500", "lr=3e-3", "compile=true", "d_ff=none", "precision=bf16",
                                   "name=a=b"])
    assert got == {"max_iters": 500, "lr": 3e-3, "compile": True, "d_ff": None, "precision": "bf16", "name": "a=b"}
    assert type(got["max_iters"]) is int and type(got["lr"]) is float
    cfg = presets.PRESETS["smoke"].with_overrides(**presets.parse_overrides(["n_layer=3", "max_iters=7"]))
    assert (cfg.model.n_layer, cfg.max_iters) == (3, 7)


def _smoke_run(tmp_path, data, max_iters=20, stop_at=None):
    cfg = replace(presets.PRESETS["smoke"], max_iters=max_iters, eval_interval=10, eval_iters=2)
    torch.manual_seed(cfg.seed)
    model = GPT.from_config(cfg.model)

    def stop(step, hist):
        if step == stop_at:
            raise KeyboardInterrupt  # a Colab disconnect, right after the checkpoint at this step

    try:
        hist = training.train(model, cfg, data[:9000], data[9000:], ckpt_path=tmp_path / "ckpt.pt",
                         progress=False, on_eval=stop)
    except KeyboardInterrupt:
        return model, None
    return model, hist


def test_train_loop_learns_checkpoints_and_resumes_exactly(tmp_path):
    text = ("To be, or not to be, that is the question:\n" * 300)[:10000]
    data = torch.tensor([ord(c) % 65 for c in text])
    full, hist = _smoke_run(tmp_path / "a", data)
    assert hist["step"] == [10, 20] and hist["val"][-1] < hist["val"][0] < math.log(65)
    assert hist["tokens_per_s"][-1] > 0 and len(hist["lr"]) == 2
    ck = training.load_checkpoint(tmp_path / "a" / "ckpt.pt")
    assert ck["step"] == 20 and ck["config"]["name"] == "smoke"
    # interrupted at step 10, then resumed: the same weights as the uninterrupted run
    _, none = _smoke_run(tmp_path / "b", data, stop_at=10)
    assert none is None and training.load_checkpoint(tmp_path / "b" / "ckpt.pt")["step"] == 10
    resumed, hist_b = _smoke_run(tmp_path / "b", data)
    assert hist_b["step"] == [10, 20]
    for p, q in zip(full.parameters(), resumed.parameters()):
        torch.testing.assert_close(p, q)
    model, ck = training.model_from_checkpoint(tmp_path / "b" / "ckpt.pt")
    torch.testing.assert_close(model(data[None, :32])[0], resumed.eval()(data[None, :32])[0])


@pytest.mark.slow
def test_benchmark_script_smoke(tmp_path, monkeypatch):
    """benchmarks/bench_gpt_cpu.py end to end, tiny: nanoGPT's own code (the offline anchor copy)
    for 20 iterations, the smoke preset, one yardstick for both (the real figures are in results/)."""
    import importlib.util
    import json
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    shared = repo.parent / "shared"
    if not (shared / "data" / "tinyshakespeare.txt").is_file() or not (shared / "anchors" / "nanogpt").is_dir():
        pytest.skip(f"no local tiny-shakespeare / nanoGPT anchor under {shared}")
    monkeypatch.setenv("AWB_TINYSHAKESPEARE", str(shared / "data" / "tinyshakespeare.txt"))
    spec = importlib.util.spec_from_file_location("bench_gpt_cpu", repo / "benchmarks" / "bench_gpt_cpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    bench.main(["--nanogpt", str(shared / "anchors" / "nanogpt"), "--preset", "smoke", "--set", "block_size=64",
                "--nanogpt-set", "max_iters=20", "--nanogpt-set", "lr_decay_iters=20", "--nanogpt-set",
                "eval_interval=20", "--threads", "1", "--overhead", "5", "--json", str(out)])
    pair = json.loads(out.read_text())["pairs"][0]
    assert pair["nanogpt"]["checkpoint_iter"] == 20 and pair["nanogpt"]["params"] > 0
    assert pair["preset"]["steps"] == 30                       # the smoke preset's own step cap
    assert 0 < pair["nanogpt"]["val"] < 5 and 0 < pair["preset"]["val"] < 5
    assert pair["ratio_val"] == round(pair["preset"]["val"] / pair["nanogpt"]["val"], 4)


# -- precision and preset per device (simulated: no GPU is needed) ----------------------------
GPUS = {  # name: (compute capability, memory in bytes)
    "Tesla T4": ((7, 5), 15.6e9),
    "Tesla V100-SXM2-16GB": ((7, 0), 16.9e9),
    "NVIDIA L4": ((8, 9), 23.7e9),
    "NVIDIA A100-SXM4-40GB": ((8, 0), 42.4e9),
    "NVIDIA H100 80GB HBM3": ((9, 0), 85.0e9),
}


def fake_gpu(monkeypatch, name):
    cap, mem = GPUS[name]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: cap)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index=0: type("Props", (), {"name": name, "total_memory": int(mem), "major": cap[0],
                                                           "minor": cap[1]})())
    # what torch answers by default on a T4 too (bf16 *emulation* counts): it must not decide
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    for var in ("AWB_PRESET", "AWB_SMOKE", "AWB_GRADING", "PYTEST_CURRENT_TEST"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("name,preset,dtype", [
    ("Tesla T4", "t4", torch.float16),                  # emulated bf16 only: fp16 + GradScaler
    ("Tesla V100-SXM2-16GB", "t4", torch.float16),
    ("NVIDIA L4", "t4", torch.bfloat16),                # native bf16, but 24 GB: the T4-sized model
    ("NVIDIA A100-SXM4-40GB", "large-gpu", torch.bfloat16),
    ("NVIDIA H100 80GB HBM3", "large-gpu", torch.bfloat16),
])
def test_gpu_precision_and_preset(monkeypatch, name, preset, dtype):
    fake_gpu(monkeypatch, name)
    assert devices.pick_device() == "cuda"
    assert presets.choose_preset("cuda") == preset
    assert devices.amp_dtype("cuda") == dtype and devices.amp_dtype("cuda:0") == dtype
    assert devices.amp_dtype("cuda", presets.PRESETS[preset].precision) == dtype
    assert devices.amp_dtype("cuda", "fp32") is None                     # an explicit choice wins


@pytest.mark.parametrize("flags,fast", [
    ("fpu sse2 avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni", True),   # Zen 4 / Cooper Lake
    ("fpu sse2 avx2 fma amx_bf16 amx_tile amx_int8", True),                 # Sapphire Rapids
    ("fpu sse2 avx2 fma avx512f avx512bw", False),                          # AVX-512 without bf16
    ("fpu sse2 avx2 fma", False),                                           # no AVX-512 at all
])
def test_cpu_precision_and_preset(monkeypatch, flags, fast):
    assert devices.cpu_has_fast_bf16("processor : 0\nflags : " + flags + "\n") is fast
    monkeypatch.setattr(devices, "cpu_has_fast_bf16", lambda cpuinfo=None: fast)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for var in ("AWB_PRESET", "AWB_SMOKE", "AWB_GRADING", "PYTEST_CURRENT_TEST"):
        monkeypatch.delenv(var, raising=False)
    assert presets.choose_preset("cpu") == "cpu"
    assert devices.amp_dtype("cpu") == (torch.bfloat16 if fast else None)


# -- the time budget ----------------------------------------------------------------------------
def test_lr_in_budget_follows_the_clock():
    kw = dict(warmup_steps=10, max_lr=1e-3, min_lr=1e-4)
    assert gpt.lr_in_budget(0, 0.0, warmup_seconds=0.0, max_seconds=100.0, **kw) == pytest.approx(1e-4)
    assert gpt.lr_in_budget(9, 3.0, warmup_seconds=0.0, max_seconds=100.0, **kw) == pytest.approx(1e-3)
    # after the warmup (which ended at 4 s) the cosine runs over the 96 s left, whatever the step
    for step in (10, 500, 10**6):
        assert gpt.lr_in_budget(step, 4.0, warmup_seconds=4.0, max_seconds=100.0, **kw) == pytest.approx(1e-3)
        assert gpt.lr_in_budget(step, 52.0, warmup_seconds=4.0, max_seconds=100.0, **kw) == pytest.approx(5.5e-4)
        assert gpt.lr_in_budget(step, 100.0, warmup_seconds=4.0, max_seconds=100.0, **kw) == pytest.approx(1e-4)
        assert gpt.lr_in_budget(step, 250.0, warmup_seconds=4.0, max_seconds=100.0, **kw) == pytest.approx(1e-4)
    # the same curve as lr_at when seconds are proportional to steps
    for s in range(10, 200, 7):
        assert gpt.lr_in_budget(s, s * 0.5, warmup_seconds=5.0, max_seconds=100.0, **kw) == \
            pytest.approx(gpt.lr_at(s, 10, 200, 1e-3, 1e-4))


def test_train_stops_when_the_budget_is_spent_with_the_schedule_at_its_end():
    text = ("To be, or not to be, that is the question:\n" * 300)[:10000]
    data = torch.tensor([ord(c) % 65 for c in text])
    cfg = replace(presets.PRESETS["smoke"], max_iters=10**6, max_seconds=1.0, warmup_iters=3, eval_interval=10**9,
                  eval_iters=2)
    torch.manual_seed(0)
    model = GPT.from_config(cfg.model)
    evals = []
    hist = training.train(model, cfg, data[:9000], data[9000:], progress=False,
                     on_eval=lambda step, h: evals.append(step))
    assert 10 <= hist["last_step"] < cfg.max_iters          # stopped by the clock, not the step cap
    assert hist["train_seconds"] >= 1.0                        # the budget is spent ...
    steps, lrs = zip(*hist["lr"])
    assert max(lrs) <= cfg.lr                                  # ... the cosine after the warmup ...
    assert list(lrs) == sorted(lrs, reverse=True)              # ... decays monotonically ...
    assert lrs[-1] < cfg.min_lr + 0.2 * (cfg.lr - cfg.min_lr)  # ... to near its end at the last logged step
    assert evals == [hist["last_step"]] and hist["seconds"] == [hist["train_seconds"]]
