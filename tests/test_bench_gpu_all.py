"""benchmarks/bench_gpu_all.py keeps working without a GPU: issue 45's parts (the Triton chapters, the kernels
against SDPA, the new training candidates) rehearsed on this CPU, small, and the pieces the GPU call relies on.
The figures come from the GPU call (results/gpu_issue45.md); nothing here times anything."""

import importlib.util
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")       # the chapters and the kernels part run Triton (its interpreter here)

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "bench_gpu_all.py"
SHARED_DATA = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"


def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu_all", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """One rehearsal of issue 45's parts, small: the chapters with one alternative and one mistake of each
    exercise on both sides (the 'device', which is the interpreter here, and the interpreter), no lecture;
    the kernels at T = 32 and 64; two of the new training candidates (FlexAttention is skipped on a CPU)."""
    import os

    from conftest import small_corpus

    out = tmp_path_factory.mktemp("rehearsal")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for var in ("PYTEST_CURRENT_TEST", "AWB_SMOKE"):
        env.pop(var, None)
    corpus = []
    if SHARED_DATA.is_file():
        corpus = ["--corpus", str(SHARED_DATA)]
    else:
        env["AWB_CORPUS"] = str(small_corpus(out))
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, str(SCRIPT), "--rehearse", "--no-compile", "--out", str(out),
                          "--parts", "chapters", "kernels", "train", "--runs", "h100-fast-foreach", "h100-fast-flex",
                          "--catalog-limit", "1", "--skip-lectures", "--target", "3.6", *corpus],
                         capture_output=True, text=True, env=env, timeout=300)
    print(f"rehearsal: {time.perf_counter() - t0:.1f} s")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads((out / "gpu_all.json").read_text()), (out / "gpu_all.md").read_text()


def rows(data, part, *words):
    return [r for r in data["verdicts"] if r["part"] == part and all(w in r["item"] for w in words)]


def test_rehearsal_writes_the_pass_fail_table_with_every_row(rehearsal):
    data, md = rehearsal
    assert data["rehearsal"] and data["parts"] == ["chapters", "kernels", "train"]
    # goal 1: the lecture (left out here, and said so), the solution, one alternative, one mistake, the comparison
    assert [r["verdict"] for r in rows(data, "chapters", "lecture 10")] == ["skipped"]
    assert [r["verdict"] for r in rows(data, "chapters", "exercise 10", "the solution passes")] == ["pass"]
    assert [r["verdict"] for r in rows(data, "chapters", "exercise 10", "alternative `")] == ["pass"]
    assert [r["verdict"] for r in rows(data, "chapters", "exercise 10", "mistake `")] == ["pass"]
    same = rows(data, "chapters", "exercise 10", "as Triton's interpreter")
    assert [r["verdict"] for r in same] == ["pass"]
    assert "3 entries run on both sides; 0 cells differ in their verdict" in same[0]["detail"]
    eleven = rows(data, "chapters", "exercise 11") + rows(data, "chapters", "lecture 11")
    assert eleven, "exercise and lecture 11 are named: measured where they exist, skipped and said so where not"
    # goal 2: exercise 10's forward checked in fp16 and bf16, causal and not; 11's backward; timings marked
    for dtype in ("float16", "bfloat16"):
        for causal in (False, True):
            assert len(rows(data, "kernels", "10's forward", f"SDPA: {dtype}, causal={causal}")) == 1
    for causal in (False, True):
        fp16 = rows(data, "kernels", "10's forward", f"SDPA: float16, causal={causal}")
        assert [r["verdict"] for r in fp16] == ["pass"]
    assert rows(data, "kernels", "exercise 11's backward")
    timing = rows(data, "kernels", "time and peak memory")
    assert [r["verdict"] for r in timing] == ["rehearsal"] and "not figures" in timing[0]["detail"]
    assert len(rows(data, "kernels", "SDPA's kernels")) == 8          # fwd and fwd+bwd, 2 dtypes, causal and not
    # goal 3: the candidates, one trained (marked a rehearsal), FlexAttention skipped with its reason
    foreach = rows(data, "train", "`h100-fast-foreach`")
    assert [r["verdict"] for r in foreach] == ["rehearsal"] and "AdamW foreach" in foreach[0]["detail"]
    flex = rows(data, "train", "`h100-fast-flex`")
    assert [r["verdict"] for r in flex] == ["skipped"] and "no backward on a CPU" in flex[0]["detail"]
    # the markdown holds the same table, each row once
    assert "## Pass/fail" in md and "REHEARSAL" in md
    for r in data["verdicts"]:
        assert md.count(f"| {r['part']} | {r['item']} |") == 1, r["item"]


def test_rehearsal_runs_both_sides_of_the_comparison(rehearsal):
    data, _ = rehearsal
    entries = [r for r in data["chapters"] if r["kind"] == "entry"]
    assert {(r["role"], r["type"]) for r in entries} == {(role, kind) for role in ("device", "interpreter")
                                                         for kind in ("solution", "alternative", "mistake")}
    mistake = next(r for r in entries if r["type"] == "mistake" and r["role"] == "device")
    assert set(mistake["must_fail"]) <= set(mistake["lost"]) and mistake["battery_exact"]
    assert all(r["backend"] == "Triton's interpreter" for r in entries)


def test_judge_names_what_a_mistake_keeps():
    b = bench()
    got = b.judge("mistake", {"a": "Check failed: padded columns", "b": None}, {"a": "padded columns", "b": None},
                  ("a", "b"), "padded columns")
    assert got["verdict"] == "FAIL" and "keep ['b']" in got["why"]
    got = b.judge("mistake", {"a": "Check failed: something", "b": "x"}, {"a": None, "b": None}, ("a", "b"), "padded")
    assert got["verdict"] == "FAIL" and "no visible message names 'padded'" in got["why"]
    assert "the battery passes every cell" in got["why"]
    assert b.judge("solution", {"a": None}, {"a": None}, (), None)["verdict"] == "pass"
    assert b.judge("alternative", {"a": None}, {"a": "wrong"}, (), None)["verdict"] == "FAIL"


def test_compare_backends_reads_verdicts_and_messages_numbers_aside():
    b = bench()
    base = {"kind": "entry", "exercise": "10_x", "type": "mistake", "id": "m", "verdict": "pass"}
    interp = {**base, "role": "interpreter", "visible": {"a": "max error 0.5", "b": None, "c": "wrote NaN"},
              "battery": {"a": None}}
    dev = {**base, "role": "device", "visible": {"a": "max error 0.25", "b": "TF32 rounding", "c": "read garbage"},
           "battery": {"a": None}}
    (rec,) = b.compare_backends([interp, dev])
    assert [(d["cell"], d["how"]) for d in rec["differences"]] == [("b", "verdict"), ("c", "message")]
    assert b.compare_backends([interp]) == []          # one side only: nothing to compare


def test_a_verdict_that_differs_is_flagged_a_message_that_differs_is_listed():
    b = bench()
    setup = {"kind": "setup", "backend": "NVIDIA H200", "device_workers": 10, "interpreter_workers": 4,
             "chapters": {"10": {"lecture": None, "exercise": "10_x"}, "11": {"lecture": None, "exercise": None}}}
    entry = {"kind": "entry", "exercise": "10_x", "type": "mistake", "id": "m", "role": "device", "verdict": "pass",
             "why": "loses 1 cells"}
    diff = lambda how: {"kind": "compare", "exercise": "10_x", "type": "mistake", "id": "m", "differences": [
        {"cell": "c", "check": "visible", "how": how, "interpreter": "x", "device": "y"}]}
    for how, verdict in (("message", "pass"), ("verdict", "differs")):
        data = {"parts": ["chapters"], "chapters": [setup, entry, diff(how)], "target": 1.5}
        (same,) = rows({"verdicts": b.verdicts(data)}, "chapters", "as Triton's interpreter")
        assert same["verdict"] == verdict, how
    md = b.markdown({"environment": {"gpu": "NVIDIA H200", "capability": "9.0"}, "command": "x", "target": 1.5,
                     "parts": ["chapters"], "chapters": [setup, entry, diff("verdict")], "train": []})
    assert "| **differs** |" in md and "| 10 | mistake `m` | c | visible (verdict) | x | y |" in md
    assert "Device: NVIDIA H200 (compute capability 9.0" in md


def test_flex_variant_computes_what_the_model_computes(monkeypatch):
    """The ``flex`` candidate swaps each block's attention for FlexAttention in its child only: the same logits
    as the model's own SDPA path (no dropout, float32), and the model's class untouched."""
    from attention_workbook import gpt

    b = bench()
    forward = gpt.CausalSelfAttention.forward
    torch.manual_seed(0)
    model = gpt.GPT(vocab_size=65, block_size=32, n_layer=2, n_head=2, d_model=32)
    b.variant_model(model, {"attention": "flex"}, 32, "cpu")
    assert all(type(blk.attn).__name__ == "FlexCausalSelfAttention" for blk in model.blocks)
    data = torch.randint(65, (200,), generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # FlexAttention's note that it runs uncompiled (once per process)
        diff = b.flex_against_sdpa(model, data, 32, "cpu", None)
    assert diff < 1e-5
    assert all(type(blk.attn).__name__ == "FlexCausalSelfAttention" for blk in model.blocks)   # put back
    assert gpt.CausalSelfAttention.forward is forward


def test_foreach_variant_is_the_same_adamw_without_fused(monkeypatch):
    from attention_workbook import gpt, training

    b = bench()
    monkeypatch.setattr(training, "configure_optimizer", training.configure_optimizer)   # restored after
    assert b.bench_variant({"optimizer": "foreach"}, "cuda") == "AdamW foreach (not fused)"
    model = gpt.GPT(vocab_size=65, block_size=8, n_layer=1, n_head=2, d_model=16)
    opt = training.configure_optimizer(model, 0.1, 1e-3, device="cuda")
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert all(g["foreach"] and not g.get("fused") for g in opt.param_groups)
    with pytest.raises(ValueError, match="unknown variant"):
        b.bench_variant({"attention": "sparse"}, "cpu")


def test_every_issue45_run_is_a_known_candidate_with_pinned_settings():
    b = bench()
    assert b.ISSUE45_RUNS[0] == "h100-fast" and b.TRAIN_RUNS["h100-fast"][:2] == ("h100-fast", {})  # the reference
    for label in b.ISSUE45_RUNS[1:]:
        preset, overrides, cap, *variant = b.TRAIN_RUNS[label]
        assert preset == "h100-fast" and "dropout" in overrides and "max_iters" in overrides, label
        assert all(v in b.VARIANT_KEYS[k] for v_ in variant for k, v in v_.items())
    assert b.PLANS["45"]["parts"] == ["chapters", "kernels", "train"]
    plan = b.PLANS["45"]
    assert sum(plan[f"budget_{p}"] for p in plan["parts"]) <= plan["deadline"] <= 480


def test_a_lecture_run_lists_each_error_and_what_prints_differently(tmp_path):
    import nbformat

    b = bench()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in ("print('seen 3 times')", "raise ValueError('boom')",
                                                           "print('later')")]
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="seen 7 times\n")]  # numbers aside
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="earlier\n")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "99_demo.ipynb"
    nbformat.write(nb, path)
    rec = b.run_lecture("99", path, tmp_path, time.perf_counter() + 120, "interpreter")
    assert rec["verdict"] == "FAIL" and rec["ran"] == rec["code_cells"] == 3
    assert [(e["cell"], e["error"]) for e in rec["errors"]] == [(1, "ValueError: boom")]
    assert [(d["cell"], d["stored"], d["now"]) for d in rec["differ_from_stored"]] == [
        (1, "(nothing)", "ValueError: boom"), (2, "earlier", "later")]
    assert (tmp_path / rec["executed_notebook"]).is_file()
