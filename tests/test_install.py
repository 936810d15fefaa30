"""README's two commands on a fresh machine: the Makefile picks PyTorch's build by itself
(tools/install_torch.py), CI runs the README command with no manual pre-install, and the
README's quick start is exactly `make demo` and `make test`."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import install_torch as it  # noqa: E402


def test_torch_range_comes_from_requirements():
    assert it.torch_requirement() == "torch>=2.1,<3"


@pytest.mark.parametrize("index, system, gpu, want", [
    ("auto", "Linux", False, it.CPU_INDEX),
    ("auto", "Windows", False, it.CPU_INDEX),
    ("auto", "Linux", True, None),          # the default (CUDA) build where there is a GPU
    ("auto", "Darwin", False, None),        # PyPI's macOS wheels have no CUDA
    ("", "Linux", False, it.CPU_INDEX),
    ("pypi", "Linux", False, None),
    ("https://download.pytorch.org/whl/cu126", "Linux", False, "https://download.pytorch.org/whl/cu126"),
])
def test_choice_of_index(index, system, gpu, want):
    assert it.choose(index, system, gpu)[0] == want


def test_unreachable_index_is_reported_not_raised():
    # port 9 (discard) on the loopback: refused at once
    problem = it.probe("http://127.0.0.1:9/whl/cpu", timeout=5)
    assert problem and "cannot be reached" in problem
    assert it.probe(str(REPO)) is None and "does not exist" in it.probe(str(REPO / "no-such-index"))


def test_cpu_build_found_among_pips_own_versions(monkeypatch):
    out = "torch (2.15.0)\nAvailable versions: 3.0.0+cpu, 2.15.0, 2.14.1, 2.13.0+cpu, 2.13.0, 2.0.1+cpu\n"
    monkeypatch.setattr(it, "pip", lambda *a, **k: subprocess.CompletedProcess(a, 0, out, ""))
    assert it.local_cpu_version("torch>=2.1,<3") == "2.13.0+cpu"   # newest +cpu within the range
    monkeypatch.setattr(it, "pip", lambda *a, **k: subprocess.CompletedProcess(a, 0, out.replace("+cpu", ""), ""))
    assert it.local_cpu_version("torch>=2.1,<3") is None


@pytest.mark.parametrize("index", ["auto", "https://unreachable.invalid/whl/cpu"])
@pytest.mark.parametrize("reachable, local_cpu, want", [
    (True, None, ["--index-url {index} torch>=2.1,<3"]),
    (False, "2.13.0+cpu", ["torch==2.13.0+cpu"]),
    (False, None, ["torch>=2.1,<3"]),            # the plain install, with a loud line
])
def test_fallbacks_without_gpu(monkeypatch, capsys, index, reachable, local_cpu, want):
    monkeypatch.setattr(it, "installed_torch", lambda: None)
    monkeypatch.setattr(it, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(it.platform, "system", lambda: "Linux")
    monkeypatch.setattr(it, "probe", lambda index, timeout=0: None if reachable else "it cannot be reached (test)")
    monkeypatch.setattr(it, "local_cpu_version", lambda req: local_cpu)
    assert it.main(["--index", index, "--dry-run"]) == 0
    out = capsys.readouterr().out
    url = it.CPU_INDEX if index == "auto" else index
    assert re.findall(r"would run: pip install (.*)", out) == [w.format(index=url) for w in want], out
    if not reachable:
        assert "cannot be reached" in out
    if not reachable and not local_cpu:
        assert "CUDA build" in out


def test_gpu_machine_keeps_the_default_build(monkeypatch, capsys):
    monkeypatch.setattr(it, "installed_torch", lambda: None)
    monkeypatch.setattr(it, "has_nvidia_gpu", lambda: True)
    monkeypatch.setattr(it.platform, "system", lambda: "Linux")
    assert it.main(["--dry-run"]) == 0
    assert re.findall(r"would run: pip install (.*)", capsys.readouterr().out) == ["torch>=2.1,<3"]


def test_an_installed_torch_in_range_is_kept(monkeypatch, capsys):
    monkeypatch.setattr(it, "installed_torch", lambda: "2.13.0+cpu")
    assert it.main(["--dry-run"]) == 0
    assert "already installed" in capsys.readouterr().out


def test_makefile_installs_torch_before_the_requirements():
    mk = (REPO / "Makefile").read_text()
    assert "TORCH_INDEX ?= auto" in mk
    assert mk.index("tools/install_torch.py") < mk.index("-r requirements.txt")


def test_ci_runs_the_readme_command_without_a_manual_torch_install():
    ci = (REPO / ".ci" / "run").read_text()
    code = "\n".join(ln for ln in ci.splitlines() if not ln.lstrip().startswith("#"))
    assert "make test" in code and "pip install" not in code


def test_readme_quick_start_is_two_commands():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", readme, re.S).group(1)
    commands = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.split("#", 1)[0].strip()]
    assert commands == ["make demo", "make test"]
