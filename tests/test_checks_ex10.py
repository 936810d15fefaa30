"""Exercise 10 beyond the shared checks of tests/test_checks.py: the package's kernels (what lecture 10
runs and a GPU benchmark imports) pass the visible checks and equal SDPA; tritonenv switches on the
interpreter where there is no GPU and says what to do where Triton is missing; a kernel that stores
past row T - 1 is named; and the hidden checks, replayed outside the learner's process (kernels
launched through the replay's ``launch`` message), fail a catalogued mistake and pass the solution."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("attention_workbook.tritonenv")   # (it skips where Triton is missing)

from attention_workbook import triton_attention as ta
from attention_workbook.checks import ex10 as checks
from attention_workbook.checks import graded, own
from attention_workbook.checks.core import CheckFailed

A = "10_flash_attention_triton"
REPO = Path(__file__).resolve().parent.parent


def test_package_kernels_pass_the_visible_checks():
    """The reference module's kernels, launched by the checks as a learner's would be."""
    with own.trusting():
        checks.softmax_kernel_values(ta.softmax_kernel)
        checks.softmax_kernel_strides(ta.softmax_kernel)
        checks.flash_kernel_causal(ta.flash_attention_kernel)
        checks.flash_kernel_strides(ta.flash_attention_kernel)
        checks.flash_kernel_fp16(ta.flash_attention_kernel)
        checks.flash_attention_layouts(ta.flash_attention_forward)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_forward_equals_sdpa(causal):
    """What the GPU benchmark imports: (B, H, T, D) of any strides, T not a multiple of the tiles."""
    x = torch.randn(2, 37, 3, 32)
    q, k, v = x.transpose(1, 2), torch.randn(2, 3, 32, 37).transpose(-1, -2), torch.randn(2, 3, 37, 32)
    out = ta.flash_attention_forward(q, k, v, causal=causal, block_m=32, block_n=16)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert (out - want).abs().max() < 1e-5
    assert [n for n in graded.ANSWERS[A]] == ["softmax_kernel", "flash_attention_kernel", "flash_attention"]


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": str(REPO)}, cwd=REPO)


def test_tritonenv_sets_the_interpreter_before_triton_is_imported():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""                       # no GPU, whatever the machine has
    r = _python("import sys; from attention_workbook import tritonenv as t; "
                "import os; print(os.environ['TRITON_INTERPRET'], t.INTERPRETED, t.DEVICE)", env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "True", "cpu"]


def test_tritonenv_after_an_early_import_of_triton_says_what_to_do():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    r = _python("import triton\ntry:\n    import attention_workbook.tritonenv\n"
                "except ImportError as e:\n    print(e)\n", env)
    assert r.returncode == 0, r.stderr
    assert "restart the kernel" in r.stdout


def test_tritonenv_without_triton_says_what_to_do():
    code = ("import importlib.util as u; real = u.find_spec\n"
            "u.find_spec = lambda name, *a: None if name == 'triton' else real(name, *a)\n"
            "try:\n    import attention_workbook.tritonenv\n"
            "except ImportError as e:\n    print(type(e).__name__); print(e)\n")
    r = _python(code, dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("TritonMissing") and "Colab" in r.stdout and "pip install" in r.stdout


def test_a_store_past_the_last_row_is_named():
    """Not in the catalog (a learner's own output buffer would be written past its end): the visible
    check puts the output at the front of a NaN-filled buffer and reads what lands after it."""
    import importlib.util

    src = Path(ta.__file__).read_text().replace("from .tritonenv", "from attention_workbook.tritonenv")
    src = src.replace("out.to(O.dtype.element_ty), mask=rows[:, None] < T)", "out.to(O.dtype.element_ty))")
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"awb_store_unmasked_{os.getpid()}.py"
    path.write_text(src)
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        with own.trusting(), pytest.raises(CheckFailed, match="wrote outside O"):
            checks.flash_kernel_padding(mod.flash_attention_kernel)
    finally:
        path.unlink()


def test_hidden_checks_replayed_outside_fail_a_mistake(tmp_path):
    """The outside verdict launches the learner's kernels in its replay process (the ``launch``
    message): the solution passes there (tests/test_adversarial.py, for every exercise), and a kernel
    whose accumulator is not rescaled fails there, in the kernel's cells; the launcher's cell passes,
    since it is called with a stand-in kernel bound to its name (``call`` with ``rebind``)."""
    import nbformat

    from awb_grader import catalog
    from awb_grader.verdict import outside as verdict
    from awb_grader.core.course import SOLUTIONS, ensure_kernel_path

    ensure_kernel_path()
    mistake = next(m for m in catalog.mistakes(A) if m.id == "flash_acc_not_rescaled")
    nb = nbformat.read(SOLUTIONS / A / f"{A}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == mistake.cell:
            cell.source = mistake.source
    cells = ["test_softmax_kernel_values", "test_flash_kernel_values", "test_flash_attention_values"]
    got = verdict.outside_verdicts(nb, tmp_path, cells, timeout=120)
    assert got["test_softmax_kernel_values"] == "pass", got
    assert got["test_flash_kernel_values"].startswith("fail") and "hidden test: flash_attention_kernel" in \
        got["test_flash_kernel_values"], got
    assert got["test_flash_attention_values"] == "pass", got


def test_every_tensor_the_checks_hand_to_a_kernel_is_on_the_kernels_device(monkeypatch):
    """On a GPU a kernel refuses tensors on the CPU. No GPU here, so the checks and the battery are made to
    believe the kernels' device is "meta" (a device every PyTorch has, holding no data): the first launch of
    every check records where the tensors it passes are, kernel and stand-in alike, and stops there."""
    from attention_workbook.checks import battery
    from attention_workbook.checks.battery import ex10 as randomized

    class Stop(Exception):
        pass

    seen: list[tuple[str, set]] = []

    def record(where):
        def stop(*args, **kwargs):
            flat = [a for a in args if isinstance(a, torch.Tensor)]
            for a in args:
                if isinstance(a, (tuple, list)):
                    flat += [t for t in a if isinstance(t, torch.Tensor)]
                if isinstance(a, dict):
                    flat += [t for t in a.values() if isinstance(t, torch.Tensor)]
            seen.append((where, {t.device.type for t in flat}))
            raise Stop
        return stop

    monkeypatch.setattr(checks, "device", lambda: "meta")
    monkeypatch.setattr(checks, "launch_kernel", record("kernel"))
    monkeypatch.setattr(checks, "_attention", lambda q, k, v, causal: torch.zeros(q.shape, dtype=torch.float64))
    monkeypatch.setattr(checks.KernelStandIn, "_emulate", lambda self, grid, a: record("stand-in")(*a.values()))
    answers = {"softmax_kernel": ta.softmax_kernel, "flash_attention_kernel": ta.flash_attention_kernel,
               "flash_attention": ta.flash_attention_forward}
    items = battery.ITEMS[A]
    with own.trusting():
        for item in items:
            for check in (getattr(checks, item.check),
                          lambda *a, _c=getattr(randomized, item.check): _c(*a, g=torch.Generator().manual_seed(0))):
                before = len(seen)
                with pytest.raises((Stop, CheckFailed)):
                    check(*[answers[n] for n in item.args])
                assert len(seen) == before + 1, f"{item.check}: no launch recorded"
    assert len(seen) == 2 * len(items)
    assert all(devices == {"meta"} for _, devices in seen), seen


def test_lecture_10_makes_every_tensor_a_kernel_reads_on_DEVICE():
    """Lecture 10 on a GPU: in every cell that launches a kernel, each tensor made there is made on DEVICE
    (``device=DEVICE`` or ``.to(DEVICE)``), DEVICE is tritonenv's, and the timing cell waits for the GPU."""
    import ast

    import nbformat

    nb = nbformat.read(REPO / "lectures" / f"{A}.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert any("DEVICE = tritonenv.DEVICE" in src for src in code)
    factories = {"randn", "rand", "zeros", "ones", "empty", "full", "arange", "tensor", "linspace"}
    launching, problems = 0, []
    for src in code:
        tree = ast.parse("\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))))
        launches = any(isinstance(n, ast.Call) and (isinstance(n.func, ast.Subscript)      # kernel[grid](...)
                                                    or ast.unparse(n.func).startswith("ta."))  # the package's
                       for n in ast.walk(tree))
        if not launches:
            continue
        launching += 1
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in factories
                    and isinstance(n.func.value, ast.Name) and n.func.value.id == "torch"):
                continue
            if any(k.arg == "device" and ast.unparse(k.value) == "DEVICE" for k in n.keywords):
                continue
            up, moved = n, False
            while up in parents:                         # a .to(DEVICE) on the way up the expression
                up = parents[up]
                if isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute) and up.func.attr == "to" \
                        and any(ast.unparse(a) == "DEVICE" for a in up.args):
                    moved = True
                    break
            if not moved:
                problems.append(f"line {n.lineno}: {ast.unparse(n)[:80]}")
    assert launching >= 8 and not problems, problems
    timing = next(src for src in code if "median_time" in src and "perf_counter" in src)
    assert timing.count("torch.cuda.synchronize()") >= 2 and "INTERPRETED" in timing


def test_importing_the_workbooks_kernels_is_named_at_once_and_by_the_grader():
    """``attention_workbook.triton_attention`` holds kernels that pass every check: imported as the answers,
    the visible checks and the battery say at once that they are the workbook's (a Triton kernel is judged by
    the function it wraps), and the grader's static reading flags them; the launcher that launches the
    imported kernel is flagged as well, in all three (sandboxed grading agrees: 0/14, flagged)."""
    import nbrun
    from attention_workbook.checks import battery
    from awb_grader.verdict import delegation

    imports = {"softmax_kernel": "from attention_workbook.triton_attention import softmax_kernel\n",
               "flash_attention_kernel": "from attention_workbook.triton_attention import flash_attention_kernel\n"}
    ns = nbrun.namespace(A, imports)
    first = [t[0] for t in graded.TESTS[A] if t[0] in ("test_softmax_kernel_values", "test_flash_kernel_values",
                                                        "test_flash_attention_values")]
    for gid, result in nbrun.run_tests(A, ns, first, "visible").items():
        assert result.message and "the workbook's reference" in result.message, (gid, result.message)
    saved = list(battery.ITEMS[A])
    battery.ITEMS[A] = [it for it in saved if it.cell in first]
    try:
        report = battery.run(A, ns, progress=False)
    finally:
        battery.ITEMS[A] = saved
    assert report.earned == 0 and all("attention_workbook.triton_attention" in r.verdict for r in report.rows), \
        report.table()
    launcher = nbrun.answers(A)["flash_attention"]
    found = delegation.scan([*imports.values(), launcher], [*imports.values(), launcher], "10")
    assert found["softmax_kernel"] == ["is attention_workbook.triton_attention.softmax_kernel"]
    assert found["flash_attention_kernel"] == ["is attention_workbook.triton_attention.flash_attention_kernel"]
    assert found["flash_attention"] == ["uses attention_workbook.triton_attention.flash_attention_kernel"]
