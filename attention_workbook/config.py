"""Where the workbook lives online: Colab badges and setup cells are generated from this.

The repository URL is read from ``[tool.attention-workbook]`` in ``pyproject.toml`` when the
package runs from a checkout; the constants below are the fallback for an installed copy and
are kept equal to it by ``tests/test_links.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = "https://github.com/attention-workbook/attention-workbook"
BRANCH = "main"

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def repository() -> tuple[str, str]:
    """(url, branch) from pyproject.toml when available, else the constants above."""
    if _PYPROJECT.exists():
        text = _PYPROJECT.read_text()
        block = text.split("[tool.attention-workbook]", 1)
        if len(block) == 2:
            url = re.search(r'^repository\s*=\s*"([^"]+)"', block[1], re.M)
            branch = re.search(r'^branch\s*=\s*"([^"]+)"', block[1], re.M)
            if url and branch:
                return url.group(1).rstrip("/"), branch.group(1)
    return REPOSITORY, BRANCH


def colab_url(notebook_path: str) -> str:
    """Colab link for a notebook path relative to the repository root."""
    url, branch = repository()
    slug = url.split("github.com/", 1)[1]
    return f"https://colab.research.google.com/github/{slug}/blob/{branch}/{notebook_path}"


def colab_badge(notebook_path: str) -> str:
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({colab_url(notebook_path)})"
    )


def setup_cell_source() -> str:
    """The first code cell of every notebook: works on Colab and in a local checkout."""
    url, branch = repository()
    return f'''# Setup (works on Colab and locally). On Colab it installs only the workbook's helper
# package: torch, numpy, matplotlib and ipywidgets are already there.
import sys, subprocess, pathlib
if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "git+{url}@{branch}"], check=True)
else:  # a local checkout: make the helper package importable even if it is not installed
    for parent in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents][:4]:
        if (parent / "attention_workbook").is_dir():
            sys.path.insert(0, str(parent))
            break
import attention_workbook'''
