"""Install PyTorch into the virtual environment that runs this script: the CPU build on a
machine without an NVIDIA GPU.

PyPI's Linux wheels of torch are the CUDA build: on a machine without an NVIDIA GPU they bring
about 2.5 GB of ``nvidia-*`` and ``triton`` wheels that nothing uses. The Makefile runs this
before ``pip install -r requirements.txt``, which then finds torch already installed.

    python tools/install_torch.py [--index auto|pypi|URL] [--dry-run]

``--index`` (the Makefile's ``TORCH_INDEX``):

* ``auto`` (default): Linux or Windows without an NVIDIA GPU -> PyTorch's CPU wheel index;
  an NVIDIA GPU (``nvidia-smi -L`` succeeds, or the driver lists one in /proc) -> the default
  build from pip's own indexes; macOS -> pip's own indexes (PyPI's macOS torch has no CUDA);
* ``pypi`` (or ``default``): pip's own indexes, whatever they hold;
* a URL: that index (e.g. ``https://download.pytorch.org/whl/cu126`` for one CUDA version).

An index that cannot be reached (or has no matching wheel) is reported in one line, then the
plain install runs. Without a GPU the fallback first asks pip which versions it sees without
that index (a local wheel folder, a company mirror): a CPU build there (version ``X+cpu``) is
installed rather than the CUDA one; only when there is none does the plain install pull the
CUDA build, and it says so. A torch already installed within the range is kept. The torch
requirement is read from requirements.txt.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT = 10  # s: an unreachable index costs at most this


def say(msg: str) -> None:
    print(f"torch: {msg}", flush=True)


def torch_requirement(requirements: Path = REPO / "requirements.txt") -> str:
    """The ``torch...`` line of requirements.txt (one source of truth for the range)."""
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if re.match(r"torch\s*([<>=!~;\[]|$)", line):
            return line.replace(" ", "")
    return "torch"


def _specifier(requirement: str):
    """A SpecifierSet for the requirement's range (``packaging``, or pip's vendored copy in a
    fresh environment), or None."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        try:
            from pip._vendor.packaging.requirements import Requirement
        except ImportError:  # pragma: no cover - pip without its vendored packaging
            return None
    return Requirement(requirement).specifier


def has_nvidia_gpu() -> bool:
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    for smi in (shutil.which("nvidia-smi"), "/usr/lib/wsl/lib/nvidia-smi"):
        if smi and Path(smi).exists():
            try:
                res = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                continue
            if res.returncode == 0 and "GPU" in res.stdout:
                return True
    return False


def choose(index: str, system: str, gpu: bool) -> tuple[str | None, str]:
    """(index URL, or None for pip's own indexes; why)."""
    index = (index or "auto").strip()
    if index.lower() in ("pypi", "default", "none"):
        return None, "TORCH_INDEX=pypi: pip's own indexes"
    if index.lower() != "auto":
        return index, f"TORCH_INDEX={index}"
    if gpu:
        return None, "NVIDIA GPU found: the default (CUDA) build from pip's own indexes"
    if system == "Darwin":
        return None, "macOS: PyPI's build (no CUDA libraries there)"
    return CPU_INDEX, "no NVIDIA GPU found: the CPU build"


def probe(index: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None if ``index`` answers for torch, else why not (one line)."""
    if index.startswith("file:") or "://" not in index:
        path = Path(index[len("file://"):] if index.startswith("file://") else index)
        return None if path.exists() else f"{path} does not exist"
    url = index.rstrip("/") + "/torch/"
    cafile = os.environ.get("PIP_CERT") or os.environ.get("REQUESTS_CA_BUNDLE") or None
    try:
        ctx = ssl.create_default_context(cafile=cafile)
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
            resp.read(1024)
        return None
    except urllib.error.HTTPError as e:
        return f"{url} answered HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return f"{url} cannot be reached ({reason})"


def pip(*args: str, capture: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args]
    return subprocess.run(cmd, capture_output=capture, text=True)


def installed_torch() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def cuda_dists() -> list[str]:
    """Installed distributions that only a CUDA build of torch brings."""
    names = {(d.metadata["Name"] or "").lower() for d in metadata.distributions()}
    return sorted(n for n in names if n.startswith("nvidia-") or n in ("triton", "cuda-toolkit", "cuda-bindings"))


def local_cpu_version(requirement: str) -> str | None:
    """The newest CPU build (``X+cpu``) of torch that pip sees with its own configuration
    (find-links, mirrors), within the requirement's range; None if it sees none."""
    res = pip("index", "versions", "torch", capture=True)
    m = re.search(r"^Available versions:\s*(.+)$", res.stdout or "", re.M)
    if res.returncode != 0 or not m:
        return None
    spec = _specifier(requirement)
    cpu = [v.strip() for v in m.group(1).split(",") if v.strip().endswith("+cpu")]
    if spec is not None:
        cpu = [v for v in cpu if spec.contains(v, prereleases=False)]
    return cpu[0] if cpu else None  # pip lists the newest first


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", default=os.environ.get("TORCH_INDEX", "auto"),
                    help="auto (default), pypi, or an index URL")
    ap.add_argument("--dry-run", action="store_true", help="say what would be installed, install nothing")
    args = ap.parse_args(argv)

    requirement = torch_requirement()
    have = installed_torch()
    spec = _specifier(requirement)
    if have and (spec is None or spec.contains(have, prereleases=True)):
        say(f"{have} already installed (satisfies {requirement})")
        return 0

    gpu = has_nvidia_gpu()
    index, why = choose(args.index, platform.system(), gpu)
    cpu_only = not gpu and platform.system() != "Darwin"  # where PyPI's build would bring CUDA
    plan = [] if args.dry_run else None

    def install(*pip_args: str) -> bool:
        if plan is not None:
            plan.append("pip install " + " ".join(pip_args))
            return True
        return pip("install", "-q", *pip_args).returncode == 0

    done = False
    if index is not None:
        problem = probe(index)
        if problem is None:
            say(f"{why}; installing {requirement} from {index}")
            done = install("--index-url", index, requirement)
            if not done:
                say(f"no matching torch wheel from {index}")
        else:
            say(f"{why}, but {problem}")
    else:
        say(f"{why}; installing {requirement}")
        done = install(requirement)
    if not done and cpu_only:
        version = local_cpu_version(requirement)
        if version:
            say(f"falling back to pip's own indexes, which hold a CPU build: torch=={version}")
            done = install(f"torch=={version}")
    if not done and index is not None:
        warn = " (the CUDA build: about 2.5 GB of nvidia-* wheels this machine cannot use)" if cpu_only else ""
        say(f"falling back to the plain install from pip's own indexes{warn}; "
            f"to avoid it, give a reachable index: make ... TORCH_INDEX=URL")
        done = install(requirement)
    if plan is not None:
        for step in plan:
            say(f"would run: {step}")
        return 0
    if not done:
        say("installation failed (see pip's message above)")
        return 1
    extra = cuda_dists()
    say(f"{installed_torch()} installed" + (f" with {len(extra)} CUDA package(s)" if extra else ", no CUDA packages"))
    if extra and not gpu:
        say(f"WARNING: {len(extra)} CUDA package(s) installed on a machine without an NVIDIA GPU: "
            f"{', '.join(extra[:4])}{', ...' if len(extra) > 4 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
