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
