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


def _read(page) -> dict:
    """What the page shows, read from the DOM the browser built."""
    assert page.locator("script").count() == 0
    assert not page.evaluate("""() => [...document.querySelectorAll('*')].some(
        e => [...e.attributes].some(a => a.name.startsWith('on')))"""), "an event-handler attribute on the page"
    stats = {}
    for card in page.locator(".exercise").all():
        a = card.get_attribute("data-assignment")
        stats[a] = {dd.get_attribute("data-stat"): dd.inner_text() for dd in card.locator("dd").all()}
        stats[a]["histogram"] = sum(int(r.get_attribute("data-count")) for r in card.locator("rect.bin").all())
    cells = {(row.get_attribute("data-student"), td.get_attribute("data-assignment")): td.get_attribute("data-score")
             for row in page.locator("table.grades tbody tr").all() for td in row.locator("td").all()}
    flagged = {(tr.get_attribute("data-student"), tr.get_attribute("data-assignment"), tr.get_attribute("data-status")):
               tr.inner_text() for tr in page.locator("table.flags tbody tr").all()}
    checks = {(ul.get_attribute("data-assignment"), li.get_attribute("data-cell")):
              (int(li.get_attribute("data-passed")), int(li.get_attribute("data-graded")))
              for ul in page.locator("ul.checks").all() for li in ul.locator("li.check").all()}
    pairs = {}
    for sim in page.locator(".sim").all():
        a = sim.get_attribute("data-assignment")
        pairs[a] = [(d.get_attribute("data-a"), d.get_attribute("data-b"), d.locator(".side").count(),
                     d.locator(".side pre.code").count()) for d in sim.locator("details.pair").all()]
    return {"students": int(page.locator("#n-students").inner_text()), "stats": stats, "cells": cells,
            "flagged": flagged, "checks": checks, "pairs": pairs, "text": page.locator("body").inner_text()}


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
                     if f["status"] in ("flagged", "ungradable", "unmatched")}
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
