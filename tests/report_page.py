"""The cohort report page (``summary/index.html``) opened from disk in the suite's Chromium
(Debian's, driven by Playwright as in test_browser.py) and read against the CSVs beside it.

``check(root)`` is called by test_demo.py and test_adversarial.py on the cohorts they grade
anyway, so the page costs one browser start and one page load per cohort. It asserts: no
console error, no failed request, nothing executable on the page; the figures it shows are the
ones ``grades.csv`` (nbgrader's export), ``flags.csv`` and ``summary/similarity.csv`` hold.
With AWB_REPORT_SHOTS=DIR it also saves the page at a desktop's and a phone's width there.
"""

from __future__ import annotations

import csv
import os
import shutil
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

CHROMIUM = (os.environ.get("AWB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
            or "/usr/bin/chromium")
VIEWPORTS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}


def _playwright():
    try:
        from playwright import sync_api
    except ImportError:
        sync_api, why = None, "Playwright is not installed (pip install -r requirements.txt)"
    else:
        why = None if Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK) else f"no Chromium at {CHROMIUM}"
    if why and os.environ.get("AWB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"AWB_REQUIRE_BROWSER=1 but {why}", pytrace=False)
    if why:
        pytest.skip(why)
    return sync_api


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def check(root: Path, shots: str | None = None) -> dict:
    """Open ``root``/summary/index.html and compare it with the CSVs; returns what it read."""
    api = _playwright()
    root = Path(root)
    page_file = root / "summary" / "index.html"
    grades = _rows(root / "grades.csv")
    flags = _rows(root / "flags.csv")
    alike = _rows(root / "summary" / "similarity.csv")
    shots = shots or os.environ.get("AWB_REPORT_SHOTS")
    with api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport=VIEWPORTS["desktop"])
            problems = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            page.goto(page_file.resolve().as_uri(), wait_until="load")
            read = _read(page)
            assert problems == [], problems
            if shots:
                Path(shots).mkdir(parents=True, exist_ok=True)
                tag = root.parent.name if root.name == "course" else root.name
                for name, vp in VIEWPORTS.items():
                    page.set_viewport_size(vp)
                    page.screenshot(path=str(Path(shots) / f"{tag}-{name}.png"), full_page=True)
        finally:
            browser.close()
    _compare(read, grades, flags, alike)
    return read


READ = """() => {
  const q = (el, sel) => [...el.querySelectorAll(sel)], at = (el, name) => el.getAttribute(name);
  const stats = {};
  for (const card of q(document, '.exercise')) {
    const st = Object.fromEntries(q(card, 'dd').map(dd => [at(dd, 'data-stat'), dd.innerText]));
    st.histogram = q(card, 'rect.bin').reduce((n, r) => n + Number(at(r, 'data-count')), 0);
    stats[at(card, 'data-assignment')] = st;
  }
  return {
    scripts: q(document, 'script').length,
    handlers: q(document, '*').some(e => [...e.attributes].some(a => a.name.startsWith('on'))),
    students: Number(document.querySelector('#n-students').innerText),
    stats,
    cells: q(document, 'table.grades tbody tr').flatMap(tr => q(tr, 'td').map(
      td => [at(tr, 'data-student'), at(td, 'data-assignment'), at(td, 'data-score')])),
    flagged: q(document, 'table.flags tbody tr').map(
      tr => [at(tr, 'data-student'), at(tr, 'data-assignment'), at(tr, 'data-status'), tr.innerText]),
    checks: q(document, 'ul.checks').flatMap(ul => q(ul, 'li.check').map(li => [at(ul, 'data-assignment'),
      at(li, 'data-cell'), Number(at(li, 'data-passed')), Number(at(li, 'data-graded'))])),
    pairs: q(document, '.sim').map(sim => [at(sim, 'data-assignment'), q(sim, 'details.pair').map(d =>
      [at(d, 'data-a'), at(d, 'data-b'), q(d, '.side').length, q(d, '.side pre.code').length])]),
    text: document.body.innerText,
  };
}"""


def _read(page) -> dict:
    """What the page shows, read from the DOM the browser built (one round trip)."""
    got = page.evaluate(READ)
    assert got["scripts"] == 0 and not got["handlers"], "something executable on the page"
    return {"students": got["students"], "stats": got["stats"],
            "cells": {(s, a): v for s, a, v in got["cells"]},
            "flagged": {(s, a, st): text for s, a, st, text in got["flagged"]},
            "checks": {(a, c): (passed, graded) for a, c, passed, graded in got["checks"]},
            "pairs": {a: [tuple(p) for p in pairs] for a, pairs in got["pairs"]}, "text": got["text"]}


def _compare(read: dict, grades: list[dict], flags: list[dict], alike: list[dict]) -> None:
    submitted = [g for g in grades if g["timestamp"]]          # nbgrader's export: no timestamp = nothing submitted
    assert read["students"] == len({g["student_id"] for g in grades})
    for a in {g["assignment"] for g in grades}:
        sc = [float(g["score"]) for g in submitted if g["assignment"] == a]
        st = read["stats"][a]
        assert int(st["submissions"]) == len(sc) == st["histogram"], (a, st)
        assert float(st["mean"]) == pytest.approx(statistics.mean(sc), abs=0.01)
        assert float(st["median"]) == pytest.approx(statistics.median(sc))
        bad = [f for f in flags if f["assignment"] == a and f["status"] in ("flagged", "ungradable")]
        assert int(st["flagged"]) == len(bad)
    for g in grades:
        want = _fmt(float(g["score"])) if g["timestamp"] else ""
        assert read["cells"][(g["student_id"], g["assignment"])] == want, g
    shown = {k[:3] for k in read["flagged"]}
    assert shown == {(f["student"], f["assignment"], f["status"]) for f in flags
                     if f["status"] in ("flagged", "ungradable", "unmatched", "not read")}
    for f in flags:
        key = (f["student"], f["assignment"], f["status"])
        if key in read["flagged"]:
            for reason in filter(None, (r.strip() for r in f["reasons"].split(" | "))):
                assert " ".join(reason.split()) in " ".join(read["flagged"][key].split()), (key, reason)
    failing = defaultdict(int)
    for f in flags:
        if f["status"] not in ("ungradable", "unmatched"):
            for c in f["failed_cells"].split():
                failing[(f["assignment"], c)] += 1
    assert read["checks"], "no graded check on the page"
    for key, (passed, graded) in read["checks"].items():
        assert graded - passed == failing[key], (key, passed, graded)
    listed = defaultdict(list)
    for r in alike:
        if r["student_b"] != "the reference solution":
            listed[r["assignment"]].append((r["student_a"], r["student_b"]))
    for a, pairs in read["pairs"].items():
        assert [(x, y) for x, y, _, _ in pairs] == listed[a][:len(pairs)]
        assert all(sides >= 1 and pres == 2 * sides for _, _, sides, pres in pairs)   # side by side, per cell
