"""Formgrader in a real browser: the instructor's door that is a button.

A course root graded by the cohort command (``python -m awb_grader cohort``) on an LMS zip of
three submissions of exercise 05 (``tests/test_doors.py``'s honest work and encoded tampering,
and a file cut short, which is not a notebook). JupyterLab runs from the virtual environment
with nbgrader's server extension, in the course root (so formgrader loads the course's
``nbgrader_config.py``: the sandbox kernel and the outside verdict), on 127.0.0.1 with a token;
Debian's Chromium drives it through Playwright (the skip rules and the browser fixture are
``tests/test_browser.py``'s).

Before the browser opens, the honest and the tampering submission lose the cohort's grade
(nbgrader's ``Gradebook.remove_submission`` and their autograded folders): formgrader lists them
as "needs autograding", as it would after an instructor collected them. Then, in the UI:
JupyterLab's Nbgrader menu -> Formgrader -> Manage Assignments (no banner about the exchange)
-> the assignment's submissions -> the autograde button of each student; the score column and,
under Manual Grading, the flag column must say what the cohort command said in ``flags.csv``:
the same scores, tampering flagged, honest work not. The unreadable file shows flagged at 0
with its reason on its submission's page, and every student has a readable name (not
"None, None"). Screenshots are kept in the test's temporary folder (printed).

A fourth submission (issue 38) is honest work whose last cell displays a plot and HTML that would
run in the instructor's browser (a script, an onerror handler, a javascript: link, an iframe and an
image pointing at the server's /api/, a JavaScript output): its manual-grading page and its
feedback HTML (opened from disk) must run none of it, with the page's console and requests
recorded; it keeps its full score, flagged for its active HTML, and is never signed.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
import test_browser
from test_browser import jupyterlab, playwright_api
from test_doors import A, _run, door_cases

from awb_grader.core.metadata import verdict_of
from awb_grader.isolation.sandbox import UNPROTECTED_ENV
from awb_grader.isolation import tiers
from awb_grader.core.gradebook import UNGRADABLE_TITLE

browser = test_browser.browser  # the module-scoped Chromium fixture, shared

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.sandbox, pytest.mark.xdist_group("browser"),
              pytest.mark.skipif(not tiers.protected(),
                                 reason="no isolation tier here: formgrader's autograde refuses (test_doors.py)")]

UI = ("honest", "tampering")           # autograded again from formgrader's button
CORRUPT = "jules"                      # not a notebook: the cohort records it flagged at 0
XSS = "xss"                            # honest work, then outputs that would run in the instructor's browser
# issue 38: what the student's last cell displays; any of it that runs changes the title, marks the
# page, logs, or calls the Jupyter server's /api/ with the instructor's cookies
PAYLOAD = ("<script>document.title='XSS-RAN';console.log('XSS-RAN');fetch('/api/contents/?xss=1')</script>"
           "<img src=x onerror=\"document.body.dataset.xss='1';fetch('/api/contents/?xss=2')\">"
           "<a id=xsslink href=\"javascript:document.body.dataset.xss='2'\">details</a>"
           "<iframe src=\"/api/contents/?xss=3\"></iframe><img src=\"/api/contents/?xss=4\">"
           "<table><tr><th>tbl-head</th></tr><tr><td>tbl-cell</td></tr></table>")


def xss_notebook():
    """door_cases' honest work, plus a plot (a PNG: it must still show), the payload and a markdown cell."""
    nb = door_cases()["honest"]
    nb.cells.append(nbformat.v4.new_code_cell(
        "import io\nimport matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "from IPython.display import HTML, Image, Javascript, display\n"
        "plt.figure(); plt.plot([0, 1, 4]); _png = io.BytesIO(); plt.savefig(_png, format='png')\n"
        "display(Image(_png.getvalue()))\n"
        f"display(HTML({PAYLOAD!r}))\ndisplay(Javascript(\"document.body.dataset.xss='3'\"))"))
    # a markdown cell of the student's (formgrader's template renders markdown cells unsanitized)
    nb.cells.append(nbformat.v4.new_markdown_cell("My notes <img src=y onerror=\"document.body.dataset.xss='4'\">"))
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(course root, {student: flags.csv row}): the cohort command's grades of the three files,
    then the honest and tampering submissions' grades removed (formgrader grades those)."""
    tmp = tmp_path_factory.mktemp("formgrader")
    cases = door_cases()
    lms = tmp / "lms.zip"
    with zipfile.ZipFile(lms, "w") as zf:
        for s in UI:
            zf.writestr(f"{s}_{A}.ipynb", nbformat.writes(cases[s]))
        zf.writestr(f"{CORRUPT}_{A}.ipynb", nbformat.writes(cases["honest"])[:1500])
        zf.writestr(f"{XSS}_{A}.ipynb", nbformat.writes(xss_notebook()))
    root = tmp / "course"
    t0 = time.monotonic()
    res = _run([sys.executable, "-m", "awb_grader", "cohort", str(lms), "--exercises", "05", "--workers", "2",
                "--course", str(root), "--timeout", "20", "--no-feedback"], tmp)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    with open(root / "flags.csv") as fh:
        flags = {r["student"]: r for r in csv.DictReader(fh)}
    print(f"cohort command: {time.monotonic() - t0:.1f} s")
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for s in UI:
            gb.remove_submission(A, s)
    for s in UI:
        shutil.rmtree(root / "autograded" / s / A)
    return root, flags


@pytest.fixture(scope="module")
def lab(graded, tmp_path_factory):
    """JupyterLab with nbgrader's server extension, started in the course root; yields (url, token)."""
    root, _ = graded
    tmp = tmp_path_factory.mktemp("lab")
    # the course root is the working directory: formgrader reads its nbgrader_config.py from there
    with jupyterlab(tmp, root, cwd=root, drop=(UNPROTECTED_ENV,),
                    PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}") as got:
        yield got
    print("JupyterLab's log:", tmp / "server.log")


def _autograde(frame, student) -> str:
    """Press the autograde button of ``student``'s row; returns the text of the dialog that answers."""
    row = frame.locator("#main-table tr").filter(has=frame.locator("td.student-id", has_text=student))
    row.locator("td.autograde a").click()
    dialog = frame.locator("#success-modal, #error-modal")
    dialog.wait_for(state="visible", timeout=240_000)
    text = dialog.inner_text()
    dialog.locator(".modal-footer button").click()
    dialog.wait_for(state="detached", timeout=30_000)
    return text


def test_formgrader_autogrades_as_the_cohort_command_does(browser, lab, graded):
    root, flags = graded
    base, token = lab
    shots = root.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    t0 = time.monotonic()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{base}/lab?reset&token={token}")
    # JupyterLab's Nbgrader menu (nbgrader's lab extension) -> Formgrader: a panel holding formgrader
    page.locator(".lm-MenuBar-item", has_text="Nbgrader").click()
    page.locator(".lm-Menu-item[data-command='nbgrader:open-formgrader']").click()
    fg = page.frame_locator("iframe[src*='formgrader']")
    table = fg.locator("#main-table")
    table.locator("td", has_text=A).first.wait_for()
    assert fg.locator("#warning-exchange").count() == 0, fg.locator("#warning-exchange").inner_text()
    assert not fg.locator(".alert-warning, .alert-danger").filter(has_text="exchange").count()
    page.screenshot(path=str(shots / "1_manage_assignments.png"))

    # Manage Assignments -> the number of submissions of exercise 05 -> Manage Submissions
    assignment = fg.locator("#main-table tr").filter(has=fg.locator("td", has_text=A))
    assignment.locator("td.num-submissions a").click()
    fg.locator("#main-table td.student-id", has_text=CORRUPT).wait_for()
    before = {s: fg.locator("#main-table tr").filter(has=fg.locator("td.student-id", has_text=s))
              .locator("td.status").inner_text() for s in (*UI, CORRUPT)}
    assert before == {"honest": "needs autograding", "tampering": "needs autograding", CORRUPT: "graded"}, before
    page.screenshot(path=str(shots / "2_before_autograde.png"))
    t_ready = time.monotonic()

    dialogs = {s: _autograde(fg, s) for s in UI}
    t_graded = time.monotonic()
    for s, text in dialogs.items():
        assert f"Successfully autograded '{A}' for student '{s}'" in text, text
    rows = {}
    for s in (*UI, CORRUPT):
        row = fg.locator("#main-table tr").filter(has=fg.locator("td.student-id", has_text=s))
        row.locator("td.status", has_text="graded").wait_for()
        rows[s] = {"name": row.locator("td.student-name").inner_text().strip(),
                   "status": row.locator("td.status").inner_text().strip(),
                   "score": row.locator("td.score").inner_text().strip()}
    page.screenshot(path=str(shots / "3_after_autograde.png"))

    # Manual Grading -> exercise 05 -> its notebook: the flag column, each row named
    crumbs = fg.locator("ol.breadcrumb li")
    fg.locator("ul.nav a", has_text="Manual Grading").click()
    playwright_api.expect(crumbs).to_have_count(1)
    fg.locator("#main-table td.name a", has_text=A).click()          # the assignment
    playwright_api.expect(crumbs).to_have_count(2)
    fg.locator("#main-table td.name a", has_text=A).click()          # its notebook
    playwright_api.expect(crumbs).to_have_count(3)
    fg.locator("#main-table td.flagged").first.wait_for()
    fg.locator("button", has_text="Show All Names").click()
    flagged = {}
    for s in (*UI, CORRUPT):
        row = fg.locator("#main-table tr").filter(has=fg.locator("td.name a.name-shown", has_text=s))
        flagged[s] = row.locator("td.flagged .glyphicon-flag").count() == 1
        assert row.locator("td.score").inner_text().strip() == rows[s]["score"], s
    page.screenshot(path=str(shots / "4_manual_grading_flags.png"))

    # the unreadable file's submission page says why it was not graded
    fg.locator("#main-table tr").filter(has=fg.locator("td.name a.name-shown", has_text=CORRUPT)) \
        .locator("td.name a.name-shown").click()
    note = fg.locator("h2", has_text=UNGRADABLE_TITLE)
    note.wait_for()
    note_text = fg.locator(".jp-MarkdownOutput, .rendered_html, .text_cell_render").filter(
        has_text=UNGRADABLE_TITLE).first.inner_text()
    page.screenshot(path=str(shots / "5_unreadable_submission.png"))
    page.close()

    # what formgrader shows = what the cohort command wrote in flags.csv
    full = float(flags["honest"]["max_score"])
    for s in (*UI, CORRUPT):
        assert rows[s]["score"] == f"{float(flags[s]['score']):g} / {full:g}", (s, rows[s], flags[s])
        assert flagged[s] == (flags[s]["status"] in ("flagged", "ungradable")), (s, flagged[s], flags[s]["status"])
        assert rows[s]["name"] == f"{s}," and "None" not in rows[s]["name"], rows[s]
    assert rows["honest"]["score"] == f"{full:g} / {full:g}" and not flagged["honest"]
    assert rows["tampering"]["score"] == f"0 / {full:g}" and flagged["tampering"]
    assert flags[CORRUPT]["status"] == "ungradable" and flagged[CORRUPT]
    assert "invalid JSON" in flags[CORRUPT]["reasons"] and "invalid JSON" in note_text, note_text
    # formgrader's button ran the protected autograde (the sandbox, the outside verdict), whose
    # reasons are the cohort command's, word for word
    for s in UI:
        verdict = verdict_of(root / "autograded" / s / A / f"{A}.ipynb")
        assert verdict["sandbox"] == tiers.detect().name, verdict
        assert " | ".join(verdict["reasons"]) == flags[s]["reasons"], (s, verdict["reasons"], flags[s]["reasons"])
    print(f"formgrader in the browser: {time.monotonic() - t0:.1f} s (formgrader open {t_ready - t0:.1f} s, "
          f"two autogrades {t_graded - t_ready:.1f} s); screenshots in {shots}")
    for s in (*UI, CORRUPT):
        print(f"  {s:<10} formgrader: {rows[s]['name']!r} {rows[s]['status']}, {rows[s]['score']}, "
              f"{'flagged' if flagged[s] else 'not flagged'} | cohort: {flags[s]['score']}/{flags[s]['max_score']} "
              f"{flags[s]['status']}")


def _watch(page) -> dict:
    """Record what a page does: console messages, requests, dialogs."""
    seen = {"console": [], "requests": [], "dialogs": []}
    page.on("console", lambda m: seen["console"].append(m.text))
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    return seen


def _inert(page, seen, title: str) -> None:
    """Nothing of PAYLOAD ran: the title is the page's own, no handler marked the body, nothing
    logged, no request reached the Jupyter server's /api/ (formgrader's own /formgrader/api/ may)."""
    from urllib.parse import urlparse

    page.wait_for_timeout(1500)          # time for a handler or a fetch to run, had it been there
    assert page.title() == title and "XSS" not in page.title(), page.title()
    assert page.evaluate("document.body.dataset.xss") is None
    link = page.locator("a#xsslink, a:has-text('details')")
    if link.count():
        assert "javascript:" not in (link.first.get_attribute("href") or "")
    assert not [m for m in seen["console"] if "XSS" in m], seen["console"]
    assert not [u for u in seen["requests"] if urlparse(u).path.startswith("/api/")
                or "xss=" in u], seen["requests"]
    assert not seen["dialogs"], seen["dialogs"]
    assert page.locator("img[src^='data:image/png']").count() >= 1          # the plot still shows
    assert page.get_by_text("tbl-cell").count() >= 1                          # and a table's text


def test_student_outputs_are_inert_for_the_instructor(browser, lab, graded):
    """Issue 38: formgrader's manual-grading page and the feedback HTML render the student's
    outputs inert (the course config's HTMLExporter.sanitize_html and SanitizeHTML), the
    submission is flagged for its active HTML with the same score, and it is never signed."""
    from nbformat.sign import NotebookNotary
    from nbgrader.api import Gradebook

    from awb_grader.core.course import Course

    root, flags = graded
    base, token = lab
    shots = root.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    assert flags[XSS]["status"] == "flagged" and "active HTML" in flags[XSS]["reasons"], flags[XSS]
    assert "<script>" in flags[XSS]["reasons"] and "onerror" in flags[XSS]["reasons"], flags[XSS]["reasons"]
    assert flags[XSS]["score"] == flags[XSS]["max_score"], flags[XSS]        # flagged, not scored down
    autograded = root / "autograded" / XSS / A / f"{A}.ipynb"
    assert not NotebookNotary().check_signature(nbformat.read(autograded, as_version=4))
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        sub_id = gb.find_submission_notebook(A, A, XSS).id
        other_id = gb.find_submission_notebook(A, A, CORRUPT).id

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{base}/formgrader?token={token}")                     # log in (the server's cookie)
    page.goto(f"{base}/formgrader/submissions/{other_id}/")
    page.locator("#notebook-container, .container").first.wait_for()
    title = page.title()                                               # what formgrader sets
    seen = _watch(page)
    page.goto(f"{base}/formgrader/submissions/{sub_id}/")
    page.locator(".output_html").first.wait_for()
    page.screenshot(path=str(shots / "6_xss_manual_grading.png"), full_page=True)
    _inert(page, seen, title)
    page.close()

    fb = Course(root).generate_feedback(A, XSS)                        # nbgrader's GenerateFeedback
    assert fb["success"], fb
    html = root / "feedback" / XSS / A / f"{A}.html"
    page = browser.new_page()
    seen = _watch(page)
    page.goto(html.as_uri())
    page.locator(".output_html").first.wait_for()
    page.screenshot(path=str(shots / "7_xss_feedback.png"), full_page=True)
    _inert(page, seen, re.search(r"<title>(.*?)</title>", html.read_text(), re.S).group(1).strip())
    page.close()
