"""A learner's session in a real browser: JupyterLab 4 driven by headless Chromium.

The server runs on 127.0.0.1 (a free port, a token, no browser of its own) over a temporary
copy of a lecture, an exercise and the helper package, so nothing in the repository is saved
over. Chromium is Debian's (`apt-get install chromium`, done by .ci/run), driven by Playwright
from PyPI (which cannot download its own browsers here, hence ``executable_path``). Without
either the module is skipped with the reason, except under AWB_REQUIRE_BROWSER=1 (.ci/run).

1. Lecture 02: "Run All Cells" from the command palette; move the temperature slider with the
   keyboard; the figure under it must change (the image's bytes differ).
2. Exercise 04: a wrong softmax typed into its answer cell; "Run All Cells"; the failing visible
   check must render as the short hint (Check failed / Hint / Reread), never a traceback, and
   its "Reread" link must open the lecture in JupyterLab at the section it names.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = (os.environ.get("AWB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
            or "/usr/bin/chromium")
LECTURE = "lectures/02_attention_as_lookup.ipynb"
REREAD_LECTURE = "lectures/04_queries_keys_values.ipynb"   # the section a failed softmax check names
EXERCISE = "exercises/04_queries_keys_values/04_queries_keys_values.ipynb"
WRONG_SOFTMAX = '''def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """A typical mistake: normalised over the first axis instead of `dim`."""
    e = torch.exp(x - x.max(dim=0, keepdim=True).values)
    return e / e.sum(dim=0, keepdim=True)'''

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in the visible tab

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser")]  # one server, one browser

try:
    from playwright import sync_api as playwright_api
except ImportError:
    playwright_api = None
_MISSING = ("Playwright is not installed (pip install -r requirements.txt)" if playwright_api is None else
            f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)"
            if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)) else None)
if _MISSING and os.environ.get("AWB_REQUIRE_BROWSER") == "1":  # CI installed both: missing is a failure
    pytest.fail(f"AWB_REQUIRE_BROWSER=1 but {_MISSING}", pytrace=False)
if _MISSING:
    pytest.skip(_MISSING, allow_module_level=True)

# JupyterLab settings for a quiet, deterministic page: every cell in the DOM (no windowing),
# no autosave, no news or update notifications over the notebook.
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over a temporary working copy; yields (base url, token)."""
    root = tmp_path_factory.mktemp("lab")
    work = root / "work"
    for rel in (LECTURE, EXERCISE, REREAD_LECTURE):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, work / rel)
    shutil.copytree(REPO / "attention_workbook", work / "attention_workbook",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with jupyterlab(root, work) as got:
        yield got


@contextlib.contextmanager
def jupyterlab(tmp: Path, root_dir: Path, cwd: Path | None = None, drop: tuple = (), **env_extra):
    """A JupyterLab server on 127.0.0.1 serving ``root_dir`` (started in ``cwd``), its settings,
    config, runtime and log under ``tmp``; yields (base url, token) once it answers."""
    settings = tmp / "settings"
    for name, value in SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MPLBACKEND", *drop)}
    env.update(JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               OMP_NUM_THREADS="1", **env_extra)
    log = open(tmp / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root_dir}", "--ServerApp.allow_root=True"],
        cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("JupyterLab did not start:\n" + (tmp / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions"])
        yield b
        b.close()


def _open(browser, lab, rel):
    base, token = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{base}/lab/tree/{rel}?reset&token={token}")  # reset: no tabs restored from another test
    page.locator(f"{PANEL} .jp-Notebook .jp-CodeCell").first.wait_for()
    # the kernel is up when the toolbar's indicator says idle
    page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=120_000)
    return page


def _run_all_cells(page):
    """JupyterLab's "Run All Cells", from the command palette (Ctrl+Shift+C)."""
    palette = page.locator(".lm-CommandPalette-input")
    item = page.locator(".lm-CommandPalette-item[data-command='notebook:run-all-cells']").first
    for _ in range(6):  # while the page settles, focus moves and closes the palette: try again
        page.locator(f"{PANEL} .jp-Cell").first.click()
        page.keyboard.press("Escape")
        page.keyboard.press("Control+Shift+C")
        try:
            palette.fill("Run All Cells", timeout=5_000)
            item.click(timeout=5_000)
            return
        except playwright_api.TimeoutError:
            page.wait_for_timeout(1_000)
    raise AssertionError("the command palette never offered 'Run All Cells'")


def _cell(page, text):
    return page.locator(f"{PANEL} .jp-CodeCell").filter(has_text=text).first


def _image_src(cell) -> str | None:
    img = cell.locator(".jp-OutputArea img")
    return img.first.get_attribute("src") if img.count() else None


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.25)


def test_lecture_widget_redraws_the_figure(browser, lab):
    t0 = time.monotonic()
    page = _open(browser, lab, LECTURE)
    t_open = time.monotonic()
    _run_all_cells(page)
    # every code cell ran: each prompt shows an execution count, none is busy ("[*]")
    page.wait_for_function(
        """sel => { const p = [...document.querySelectorAll(sel)];
                    return p.length > 0 && p.every(e => /\\[\\d+\\]/.test(e.textContent)); }""",
        arg=f"{PANEL} .jp-CodeCell .jp-InputPrompt", timeout=300_000)
    t_ran = time.monotonic()
    assert not page.locator(f"{PANEL} [data-mime-type='application/vnd.jupyter.stderr']").filter(
        has_text="Traceback").count(), "a lecture cell raised"
    cell = _cell(page, "interact(show_lookup")
    handle = cell.locator(".noUi-handle, .ui-slider-handle").first  # ipywidgets 8 (noUiSlider) or 7 (jQuery UI)
    handle.wait_for()
    _wait(lambda: _image_src(cell), 60, "the widget's first figure")
    before = _image_src(cell)
    readout = cell.locator(".widget-readout").first.inner_text()
    handle.focus()
    for _ in range(8):
        page.keyboard.press("ArrowRight")
    _wait(lambda: (_image_src(cell) or before) != before, 60, "the figure to change after moving the slider")
    after = _image_src(cell)
    assert after.startswith("data:image/png;base64,") and after != before
    assert cell.locator(".widget-readout").first.inner_text() != readout, "the slider's value did not move"
    print(f"lecture 02 in the browser: {time.monotonic() - t0:.1f} s (opened and kernel idle {t_open - t0:.1f} s, "
          f"all cells run {t_ran - t_open:.1f} s); temperature {readout} -> "
          f"{cell.locator('.widget-readout').first.inner_text()}, figure {len(before)} -> {len(after)} bytes of src")
    page.close()


def test_exercise_failing_check_shows_the_hint_not_a_traceback(browser, lab):
    t0 = time.monotonic()
    page = _open(browser, lab, EXERCISE)
    answer = _cell(page, "def softmax(x: torch.Tensor")
    answer.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(WRONG_SOFTMAX)
    page.keyboard.press("Escape")
    assert "x.max(dim=0" in answer.locator(".cm-content").inner_text()
    _run_all_cells(page)
    test_cell = _cell(page, "checks.softmax_values(softmax)")
    error = test_cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    error.first.wait_for(timeout=180_000)
    text = test_cell.locator(".jp-OutputArea").inner_text()
    assert "Check failed" in text and "Hint" in text, text
    assert "reread" in text.lower() and "lecture 04" in text, text
    assert "dim" in text, text  # the hint names the mistake: the wrong axis
    for word in ("Traceback", "CheckFailed", 'File "', "site-packages"):
        assert word not in text, (word, text)
    assert len(text.strip().splitlines()) <= 12, text
    # "Run all" stopped at the failing check: the next test cell never ran
    assert _cell(page, "checks.softmax_dim(softmax)").locator(".jp-OutputArea-output").count() == 0
    # "Reread" is a link: it opens the lecture in a new tab of this JupyterLab
    link = test_cell.locator(".jp-OutputArea a", has_text="lecture 04")
    href = link.get_attribute("href")   # JupyterLab resolves the relative link against the notebook's folder
    assert link.count() == 1 and f"/{REREAD_LECTURE}" in href and "#cell-id=softmax" in href, href
    for where in ("on GitHub", "on Colab"):
        assert "/blob/" in test_cell.locator(".jp-OutputArea a", has_text=where).get_attribute("href")
    link.click()
    page.locator(f".lm-TabBar-tab[title*='{REREAD_LECTURE}']").wait_for(timeout=60_000)
    heading = page.locator(f"{PANEL} .jp-MarkdownOutput h2", has_text="numerically stable softmax")
    heading.wait_for()
    # ... at the section (#cell-id=...). JupyterLab 4 drops the fragment while a notebook it has
    # just opened is still building its cells, so the first click may land at the top; with the
    # lecture open, the link scrolls to the section: back to the exercise, click again.
    page.locator(".lm-TabBar-tab[title*='exercises/04_queries_keys_values']").click()
    link.click()
    _wait(lambda: 0 <= (heading.bounding_box() or {}).get("y", -1) < 1000, 60,
          "the lecture to show the section the hint names")
    print(f"exercise 04 in the browser: {time.monotonic() - t0:.1f} s; the test cell shows:\n{text}")
    page.close()
