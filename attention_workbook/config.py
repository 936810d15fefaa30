"""Where the workbook lives online: Colab badges and setup cells are generated from this.

The repository URL and the release learners use are read from ``[tool.attention-workbook]`` in
``pyproject.toml`` when the package runs from a checkout; the constants below are the fallback
for an installed copy and are kept equal to it by ``tests/test_links.py``.

The release is a git tag (``v`` + the package version). Both the Colab badge and the setup
cell's install use it, so a learner on Colab gets the notebook and the checks of one release,
and neither changes under a class while ``main`` moves on. Publishing a release: set
``version`` and ``release`` in ``pyproject.toml``, run ``make links`` (rewrites every badge and
setup cell, then the student release), commit, tag that commit with the release and push the tag.
"""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = "https://github.com/attention-workbook/attention-workbook"
RELEASE = "v0.1.0"

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def repository() -> tuple[str, str]:
    """(url, release tag) from pyproject.toml when available, else the constants above."""
    if _PYPROJECT.exists():
        block = _PYPROJECT.read_text().split("[tool.attention-workbook]", 1)
        if len(block) == 2:
            url = re.search(r'^repository\s*=\s*"([^"]+)"', block[1], re.M)
            release = re.search(r'^release\s*=\s*"([^"]+)"', block[1], re.M)
            if url and release:
                return url.group(1).rstrip("/"), release.group(1)
    return REPOSITORY, RELEASE


def colab_url(notebook_path: str) -> str:
    """Colab link for a notebook path relative to the repository root, at the release tag."""
    url, release = repository()
    slug = url.split("github.com/", 1)[1]
    return f"https://colab.research.google.com/github/{slug}/blob/{release}/{notebook_path}"


def colab_badge(notebook_path: str) -> str:
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({colab_url(notebook_path)})"
    )


# The setup cell, generated into every notebook. It must never leave a learner with a
# traceback they cannot read: any failure ends in two lines (what happened, what to do) and a
# SetupFailed exception that Jupyter and Colab render as those two lines only (IPython calls
# ``_render_traceback_``), which also stops "Run all" before cells that would need the package.
_SETUP = '''\
# @title Setup (run this first) {{ display-mode: "form" }}
# Locally this uses the repository's own helper package. On Colab it installs the workbook's
# helper package, release {release}, and nothing else (torch, numpy, matplotlib, ipywidgets are there).
import importlib, importlib.util, os, pathlib, re, subprocess, sys


class SetupFailed(Exception):
    def _render_traceback_(self):  # Jupyter and Colab show these two lines, no traceback
        return ["\\x1b[31m" + line + "\\x1b[0m" for line in str(self).splitlines()]


def _setup(repo="{url}", release="{release}"):
    here, colab = pathlib.Path.cwd(), "google.colab" in sys.modules
    for folder in [here, *here.parents][:4] + (sorted(here.glob("*/")) if colab else []):
        if (folder / "attention_workbook").is_dir():  # a checkout, or on Colab the repository's ZIP unzipped
            sys.path.insert(0, str(folder))
            return
    if not colab:
        if importlib.util.find_spec("attention_workbook") is None:
            raise SetupFailed("Setup failed: no attention_workbook package here (not installed, no attention_workbook/ folder).\\n"
                              "To fix: open this notebook inside a checkout of " + repo + " (make lab), then restart and run all.")
        return
    try:
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", f"git+{{repo}}@{{release}}"],
                             capture_output=True, text=True, timeout=600, env={{**os.environ, "GIT_TERMINAL_PROMPT": "0"}})
        log = ((pip.stdout + pip.stderr).strip() or "pip failed") if pip.returncode else ""
    except (OSError, subprocess.SubprocessError) as error:
        log = str(error)
    if not log:
        importlib.invalidate_caches()
        return
    upload = ("download the repository's ZIP (GitHub: Code > Download ZIP), upload it to Colab's Files panel "
              "and run !unzip -q FILE.zip")
    for pattern, why, fix in [
        ("No module named pip", "pip is missing from this runtime", "run !python -m ensurepip in a new cell"),
        ("Cannot find command 'git'", "git is missing from this runtime", upload),
        ("did not match any file|Remote branch .* not found", f"the repository has no release {{release}}",
         "ask your instructor for the right link, or " + upload),
        ("[Rr]epository .*not found|could not read Username|prompts disabled|Authentication failed|not appear to be a git",
         "the repository is missing or private", "ask your instructor for the right link, or " + upload),
        ("resolve host|Name or service not known|unable to access|Failed to connect|timed out|[Nn]etwork is unreachable",
         "no network", "reconnect the runtime (Runtime > Disconnect and delete runtime, then Connect)"),
        ("", log.splitlines()[-1], upload)]:
        if re.search(pattern, log):
            raise SetupFailed(f"Setup failed: could not install {{repo}}@{{release}}: {{why}}.\\n"
                              f"To fix: {{fix}}, then Runtime > Restart session and run all.")


_setup()
import attention_workbook'''


def setup_cell_source(repository_url: str | None = None, release: str | None = None) -> str:
    """The first code cell of every notebook: works on Colab and in a local checkout.

    Both arguments default to the repository setting; tests pass others (a local clone).
    """
    url, rel = repository()
    return _SETUP.format(url=repository_url or url, release=release or rel)
