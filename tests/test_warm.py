"""Warm grading kernels (``awb_grader.devtools.warm``): forked from a process with PyTorch imported, they
must grade exactly as nbgrader's default kernel does, and behave as a kernel of its own."""

import os
import re
import time

import nbformat
import pytest
from nbclient import NotebookClient

from awb_grader import catalog
from awb_grader.devtools.variants import grade_variants
from awb_grader.devtools.warm import KERNEL_NAME, warm_kernels

A = "04_queries_keys_values"
pytestmark = pytest.mark.slow   # every test here starts kernels


def _outputs(nb):
    """Per graded cell: what a grade or a feedback page is made of (types, texts, errors), with
    ANSI codes and memory addresses removed, and a stream's consecutive pieces joined."""
    def clean(s):
        return re.sub(r"0x[0-9a-f]+", "0x?", re.sub(r"\x1b\[[0-9;]*m", "", s))

    out = {}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code" or not gid:
            continue
        items = []
        for o in cell.get("outputs", []):
            if o.output_type == "stream":   # how a stream is cut into messages is timing
                if items and items[-1][0] == o.name:
                    items[-1] = (o.name, items[-1][1] + clean(o.text))
                else:
                    items.append((o.name, clean(o.text)))
            elif o.output_type == "error":
                items.append(("error", o.ename, clean(o.evalue)))
            else:
                items.append((o.output_type, sorted(o.get("data", {}))))
        out[gid] = items
    return out


def test_warm_kernels_grade_exactly_as_new_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "always")
    mistakes = [m for m in catalog.mistakes(A) if m.hint][:3]
    variants = {"reference": {}, **{f"mistake-{m.id}": {m.cell: m.source, **m.extra_cells} for m in mistakes},
                "alternative": dict(catalog.alternatives(A)[0].cells)}
    warm = grade_variants(A, variants, tmp_path / "warm", timeout=60, warm=True)
    cold = grade_variants(A, variants, tmp_path / "cold", timeout=60, warm=False)
    assert warm.scores == cold.scores
    for student in variants:
        assert _outputs(warm.autograded(student, A)) == _outputs(cold.autograded(student, A)), student
    assert len({warm.total(s) for s in variants}) > 1, "the variants must not all score alike"


PROBE = """\
import os, sys, numpy
print(os.getcwd() == {cwd!r}, sys.path[0] in ('', {cwd!r}), os.environ.get('AWB_WARM_PROBE'))
print('seed', numpy.random.randint(1 << 30))
print('torch' in sys.modules, 'attention_workbook' in sys.modules)
"""


def _run(cells, cwd, timeout=60):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=timeout, interrupt_on_timeout=True, allow_errors=True,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_a_warm_kernel_is_a_fresh_process_of_its_own(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    with warm_kernels():
        # set after the zygote started: a kernel still sees it (it reads its own environment)
        monkeypatch.setenv("AWB_WARM_PROBE", "seen")
        nb_a = _run([PROBE.format(cwd=str(a))], a)
        nb_b = _run(
            [PROBE.format(cwd=str(b)), "import time\nwhile True: time.sleep(0.01)", "print('after')"], b, timeout=3
        )
    lines_a, lines_b = _text(nb_a.cells[0]).splitlines(), _text(nb_b.cells[0]).splitlines()
    assert lines_a[0] == "True True seen" and lines_b[0] == "True True seen"
    assert lines_a[1] != lines_b[1], "two kernels drew the same NumPy seed"
    assert lines_a[2] == "True False", "torch preloaded, the workbook's own package not"
    # the looping cell was interrupted at its time limit, and the same kernel went on
    assert any(o.output_type == "error" and o.ename == "KeyboardInterrupt" for o in nb_b.cells[1].outputs)
    assert _text(nb_b.cells[2]) == "after\n"


def test_a_kernel_the_zygote_cannot_honour_starts_new(tmp_path, monkeypatch, capfd):
    with warm_kernels():
        monkeypatch.setenv("PYTHONHASHSEED", "123")  # read when Python starts: not the zygote's
        nb = _run(
            [
                "import sys, os\n"
                "print(sys.flags.hash_randomization, os.environ['PYTHONHASHSEED'], 'torch' in sys.modules)"
            ],
            tmp_path,
        )
    assert _text(nb.cells[0]) == "1 123 False\n"
    assert "differs from the zygote's in PYTHONHASHSEED" in capfd.readouterr().err


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def test_nothing_is_left_running(tmp_path):
    """Kernels end with their notebook; a kernel still running when its grader stops the zygote
    ends too, and so do the zygote and the launchers."""
    import subprocess

    from jupyter_client.manager import KernelManager

    def ours():
        """This test process's descendants that are zygotes, launchers or kernels (the other
        pytest worker's kernels are not counted)."""
        rows = [
            line.split(None, 2)
            for line in subprocess.run(
                ["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True
            ).stdout.splitlines()
        ]
        parent = {int(r[0]): int(r[1]) for r in rows if len(r) == 3}
        args = {int(r[0]): r[2] for r in rows if len(r) == 3}

        def mine(pid):
            while pid > 1:
                pid = parent.get(pid, 0)
                if pid == os.getpid():
                    return True
            return False

        return {pid: a for pid, a in args.items()
                if mine(pid) and ("awb_grader.devtools.warm" in a or "ipykernel" in a)}

    with warm_kernels():
        _run(["print(1)"], tmp_path)  # a notebook's kernel: ends with it
        km = KernelManager(kernel_name=KERNEL_NAME)  # a kernel still running at the end
        km.start_kernel(cwd=str(tmp_path))
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        seen = ours()
        assert sum("serve" in a for a in seen.values()) == 2, seen  # the zygote and its fork
        assert sum("launch" in a for a in seen.values()) == 1, seen
    kc.stop_channels()
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in seen if "launch" not in seen[p]):
        time.sleep(0.2)
    assert [seen[p] for p in seen if "launch" not in seen[p] and _alive(p)] == []
    km.shutdown_kernel(now=True)  # its launcher: already ended with it
    assert not any(_alive(p) for p in seen)
    assert os.environ.get("AWB_WARM_SOCKET") is None
