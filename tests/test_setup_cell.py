"""The generated setup cell, run for real in a Jupyter kernel that believes it is on Colab.

Every way the install can fail ends in two lines (what happened, what to do) rendered as the
cell's error, with no traceback and no CalledProcessError; the success path installs the pinned
release from a git repository. No network is needed: the failures use a missing local
repository, a local HTTP server answering 404 (missing) or 401 (private), a closed port (no
network), a tag that does not exist, and a pip that cannot run; the success path a local clone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from attention_workbook import config

REPO = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RESTART = "then Runtime > Restart session and run all."

pytestmark = pytest.mark.slow  # starts a notebook kernel


class _GitHost(BaseHTTPRequestHandler):
    """What GitHub answers to git without credentials: 401 for a private repository, 404 else."""

    def do_GET(self):  # the name http.server calls
        if "/private/" in self.path:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
        else:
            self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def git_host():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GitHost)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def release_repo(tmp_path_factory):
    """A git repository holding the package, tagged with the release, and a later commit on top."""
    src = tmp_path_factory.mktemp("upstream")
    shutil.copytree(REPO / "attention_workbook", src / "attention_workbook",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "release"], check=True)
    subprocess.run(git + ["tag", config.repository()[1]], check=True)
    init = src / "attention_workbook" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "9.9.9-after-the-release-'))
    subprocess.run(git + ["commit", "-qam", "work after the release"], check=True)
    return src


def _cell(source):
    return nbformat.v4.new_code_cell(source)


def _run(cells, cwd):
    """Execute cells in one fresh kernel whose google.colab module exists; return the notebook."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [_cell("import sys, types\nKERNEL_PYTHON = sys.executable\n"
                      "sys.modules['google'] = types.ModuleType('google')\n"
                      "sys.modules['google.colab'] = types.ModuleType('google.colab')"), *cells]
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.pop("PYTHONPATH", None)  # the kernel must not see the checkout through PYTHONPATH
    env.update(no_proxy="127.0.0.1,localhost", GIT_CONFIG_NOSYSTEM="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)
    return nb


def _texts(cell):
    out = []
    for o in cell.outputs:
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type == "error":
            out.append("\n".join(o.traceback) + f"\n{o.ename}: {o.evalue}")
        else:
            out.extend(str(v) for v in o.get("data", {}).values())
    return out


FAILURES = {
    # case: (url, release, {"python": the interpreter that runs pip}, what the first line must say)
    "missing local repository": (
        "file:///nonexistent/attention-workbook",
        None,
        {},
        "the repository is missing or private",
    ),
    "missing (HTTP 404)": ("{host}/missing/attention-workbook", None, {}, "the repository is missing or private"),
    "private (HTTP 401)": ("{host}/private/attention-workbook", None, {}, "the repository is missing or private"),
    "no network": ("https://127.0.0.1:9/attention-workbook/attention-workbook", None, {}, "no network"),
    "no such release": (
        "file://{repo}",
        "v0.0.0-never-tagged",
        {},
        "the repository has no release v0.0.0-never-tagged",
    ),
    "pip missing": ("file://{repo}", None, {"python": "{nopip}"}, "pip is missing from this runtime"),
}


def test_every_failure_ends_in_two_lines_without_a_traceback(tmp_path, git_host, release_repo):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "nopip")], check=True)
    nopip = tmp_path / "nopip" / "bin" / "python"  # a Python without pip
    work = tmp_path / "content"  # Colab's working folder: no attention_workbook/ in it or above
    work.mkdir()
    cells, cases = [], []
    for case, (url, release, env, why) in FAILURES.items():
        url = url.format(host=git_host, repo=release_repo)
        python = env.get("python", "").format(nopip=nopip)
        cells.append(_cell(f"sys.executable = {python!r} or KERNEL_PYTHON"))
        cells.append(_cell(config.setup_cell_source(url, release)))
        cases.append((case, url, release or config.repository()[1], why, len(cells)))
    nb = _run(cells, work)
    for case, url, release, why, index in cases:
        cell = nb.cells[index]
        text = "\n".join(_texts(cell))
        assert [o.output_type for o in cell.outputs] == ["error"], (case, text)
        error = cell.outputs[0]
        assert error.ename == "SetupFailed", (case, text)
        lines = [ANSI.sub("", line) for line in error.traceback]
        assert len(lines) == 2, (case, lines)
        assert lines[0] == f"Setup failed: could not install {url}@{release}: {why}.", (case, lines)
        assert lines[1].startswith("To fix: ") and lines[1].endswith(RESTART), (case, lines)
        for word in ("Traceback", "CalledProcessError", "subprocess", 'File "'):
            assert word not in "\n".join(error.traceback), (case, word, lines)
        print(f"{case}:\n  " + "\n  ".join(lines))


def test_success_installs_the_pinned_release_and_prints_nothing(tmp_path, release_repo):
    target = tmp_path / "site"  # stands for Colab's site-packages; pip installs there
    work = tmp_path / "content"
    work.mkdir()
    prepare = _cell(
        f"import os, sys\nos.environ['PIP_TARGET'] = {str(target)!r}\n"
        "os.environ['PIP_NO_INDEX'] = '1'\n"
        "os.environ['PIP_NO_BUILD_ISOLATION'] = '0'  # build with this venv's setuptools, offline\n"
        f"sys.path.insert(0, {str(target)!r})"
    )
    setup = _cell(config.setup_cell_source(f"file://{release_repo}"))
    check = _cell("print(attention_workbook.__file__, attention_workbook.__version__)")
    nb = _run([prepare, setup, check], work)
    assert nb.cells[2].outputs == [], _texts(nb.cells[2])
    printed = "".join(_texts(nb.cells[3])).split()
    assert printed[0].startswith(str(target)), printed
    assert printed[1] == config.repository()[1].lstrip("v"), "the release tag was installed, not a later commit"


def test_local_checkout_needs_no_install(tmp_path):
    """Outside Colab, a notebook inside the checkout imports the checkout's package, silently."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [_cell(config.setup_cell_source()), _cell("print(attention_workbook.__file__)")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO / "lectures")}}
    ).execute(env=env)
    assert nb.cells[0].outputs == []
    assert "".join(_texts(nb.cells[1])).strip() == str(REPO / "attention_workbook" / "__init__.py")
