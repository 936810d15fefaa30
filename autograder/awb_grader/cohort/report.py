"""The cohort report page: ``summary/index.html``, one static file an instructor opens from disk.

Written after every cohort run (and ``make demo``) from what the run leaves in the course
root: the scores from nbgrader's gradebook (what ``grades.csv`` exports), the statuses and
reasons from ``flags.csv``, the error texts of the failed checks from the run's records (to
name the catalogued misconceptions), and the answers that look alike (``similarity.py``).
Re-running the cohort rewrites it. Sections:

1. scores per exercise: the figures of the text summary and a histogram (inline SVG);
2. every graded check: how many passed (a bar), and the catalogued mistakes its failures
   most often mean, with the hint the student was shown;
3. flagged and ungradable submissions (and files that name no exercise) with their reasons
   and a link to each student's feedback;
4. answers that look alike: each pair with its shares and the matching code side by side;
5. every student's grade per exercise (blank: nothing submitted).

The page is inert: every string that comes from a submission (student names, reasons, code)
is HTML-escaped, and a Content-Security-Policy allows no script, no request, only the page's
own styles and inline pictures.
"""

from __future__ import annotations

import csv
import datetime
import html
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from . import lms_export, similarity

FLAG_STATUSES = ("flagged", "ungradable", "unmatched", "not read")
SHOWN_PAIRS = 30          # per exercise with their code; every pair is in similarity.csv


def esc(x) -> str:
    return html.escape(str(x), quote=True)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


@dataclass
class Check:
    cell: str
    max_score: float
    graded: int               # submissions graded (not ungradable)
    passed: int
    mistakes: list            # [(description, hint, n students or 0 when only the catalog names it)]


def read_flags(root: Path) -> list[dict]:
    p = Path(root) / "flags.csv"
    if not p.exists():
        return []
    with open(p, newline="") as fh:
        return list(csv.DictReader(fh))


def read_cells(db_url: str) -> dict:
    """{assignment: {cell: (max_score, {student: score})}} from the gradebook."""
    from nbgrader.api import Gradebook

    out: dict = {}
    with Gradebook(db_url) as gb:
        for a in gb.assignments:
            per = out.setdefault(a.name, {})
            for nb in a.notebooks:
                for gc in nb.grade_cells:
                    per[gc.name] = (float(gc.max_score), {})
            for sub in a.submissions:
                for nb in sub.notebooks:
                    for g in nb.grades:
                        if g.name in per:
                            per[g.name][1][sub.student.id] = float(g.score or 0)
    return out


def _cell_order(release_root: Path, assignment: str, cells) -> list[str]:
    import nbformat

    p = Path(release_root) / assignment / f"{assignment}.ipynb"
    order = []
    if p.exists():
        order = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nbformat.read(p, as_version=4).cells]
    return sorted(cells, key=lambda c: (order.index(c) if c in order else len(order), c))


def checks(assignment: str, cells: dict, status: dict, records: dict, release_root: Path) -> list[Check]:
    """Per graded check: passed / graded, and the catalogued mistakes that explain its
    failures (``catalog.explains`` on the failing students' error texts)."""
    from .. import catalog

    cat = catalog.mistakes(assignment)
    out = []
    for cell in _cell_order(release_root, assignment, cells):
        mx, scores = cells[cell]
        graded = {s: v for s, v in scores.items() if status.get(s) != "ungradable"}
        failing = [s for s, v in graded.items() if v < mx]
        named = [m for m in cat if cell in m.must_fail]
        n = Counter()
        for m in named:
            for s in failing:
                r = records.get(s)
                if r is not None and catalog.explains(m, r.failed_cells, r.errors):
                    n[m.id] += 1
        ranked = sorted((m for m in named if n[m.id]), key=lambda m: -n[m.id])[:3]
        mistakes = [(m.description, m.hint, n[m.id]) for m in ranked]
        if failing and not mistakes:       # only hidden checks catch it: what the catalog says fails here
            mistakes = [(m.description, m.hint, 0) for m in named[:2]]
        out.append(Check(cell, mx, len(graded), len(graded) - len(failing), mistakes))
    return out


# -- pictures -----------------------------------------------------------------------------------
def histogram_svg(percentages: list[float], label: str) -> str:
    """Ten bins of 10 % (the last one includes 100 %), counts on the bars."""
    bins = [0] * 10
    for p in percentages:
        bins[min(9, int(p // 10))] += 1
    top = max(bins) or 1
    w, h, left, bottom = 320, 150, 24, 22
    bw = (w - left - 4) / 10
    parts = [f'<svg class="hist" viewBox="0 0 {w} {h}" role="img" aria-label="{esc(label)}">']
    for i, n in enumerate(bins):
        bh = (h - bottom - 16) * n / top
        x, y = left + i * bw, h - bottom - bh
        rng = f"{i * 10}-{i * 10 + 10} %"
        parts.append(f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{bw - 2:.1f}" height="{bh:.1f}" class="bin" '
                     f'data-bin="{i}" data-count="{n}"><title>{rng}: {n} student(s)</title></rect>')
        if n:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{y - 3:.1f}" class="count">{n}</text>')
    for i in range(0, 11, 2):
        parts.append(f'<text x="{left + i * bw:.1f}" y="{h - 6}" class="axis{" end" if i == 10 else ""}">'
                     f"{i * 10}</text>")
    parts.append(f'<line x1="{left}" y1="{h - bottom}" x2="{w - 4}" y2="{h - bottom}" class="base"/>')
    parts.append("</svg>")
    return "".join(parts)


def bar(share: float) -> str:
    return f'<span class="bar" aria-hidden="true"><span style="width:{100 * share:.1f}%"></span></span>'


# -- sections -----------------------------------------------------------------------------------
def _status_badge(status: str) -> str:
    return f'<span class="badge {esc(status)}">{esc(status)}</span>'


def _end(out: list, empty: bool, none: str) -> str:
    """Close a section: say ``none`` where it has nothing to show."""
    return "\n".join([*out, *([f"<p>{none}</p>"] if empty else []), "</section>"])


def section_scores(g: lms_export.Grades, flags: list[dict]) -> str:
    out = ['<section id="scores"><h2>Scores per exercise</h2><div class="cards">']
    for a in g.assignments:
        sc = [g.score[(s, a)] for s in g.students if (s, a) in g.score]
        mx = g.max_score[a]
        flagged = sum(1 for f in flags if f["assignment"] == a and f["status"] in ("flagged", "ungradable"))
        pct = [100 * x / mx if mx else 0 for x in sc]
        stats = [("submissions", len(sc)), ("mean", _fmt(round(statistics.mean(sc), 2)) if sc else "-"),
                 ("median", _fmt(statistics.median(sc)) if sc else "-"), ("max", _fmt(mx)),
                 ("full marks", sum(x == mx for x in sc)), ("zero", sum(x == 0 for x in sc)), ("flagged", flagged)]
        out.append(f'<div class="card exercise" data-assignment="{esc(a)}"><h3>{esc(a)}</h3><dl class="stats">')
        out += [f'<div><dt>{k}</dt><dd data-stat="{k}">{v}</dd></div>' for k, v in stats]
        out.append("</dl>" + histogram_svg(pct, f"score distribution of {a}")
                   + '<p class="axis-label">students per score band (% of the points)</p></div>')
    out.append("</div></section>")
    return "\n".join(out)


def section_checks(per: dict) -> str:
    out = ['<section id="checks"><h2>Checks: how many passed, and what the failures mean</h2>']
    for a, rows in per.items():
        out.append(f'<h3>{esc(a)}</h3><ul class="checks" data-assignment="{esc(a)}">')
        for c in rows:
            share = c.passed / c.graded if c.graded else 0
            out.append(f'<li class="check" data-cell="{esc(c.cell)}" data-passed="{c.passed}" data-graded="{c.graded}">'
                       f'<div class="row"><code>{esc(c.cell)}</code> {bar(share)} '
                       f'<span class="n">{c.passed} of {c.graded} passed</span></div>')
            if c.mistakes:
                out.append('<ul class="mistakes">')
                for desc, hint, n in c.mistakes:
                    who = f"{n} student(s)" if n else "catalogued (no message names it)"
                    h = f' <span class="hint">hint shown: &ldquo;{esc(hint)}&rdquo;</span>' if hint else ""
                    out.append(f'<li><span class="who">{who}</span> {esc(desc)}{h}</li>')
                out.append("</ul>")
            out.append("</li>")
        out.append("</ul>")
    return _end(out, not per, "No graded checks.")


def _feedback_href(root: Path, student: str, a: str) -> str:
    """The student's feedback page relative to summary/, where nbgrader wrote one."""
    if not (Path(root) / "feedback" / student / a / f"{a}.html").exists():
        return ""
    return "../feedback/" + "/".join(quote(p, safe="") for p in (student, a, f"{a}.html"))


def _feedback_link(root: Path, student: str, a: str) -> str:
    href = _feedback_href(root, student, a)
    return f'<a href="{esc(href)}">feedback</a>' if href else ""


def section_flags(root: Path, flags: list[dict]) -> str:
    rows = [f for f in flags if f["status"] in FLAG_STATUSES]
    repaired = [f for f in flags if f["status"] == "repaired"]
    out = [f'<section id="flagged"><h2>Flagged and ungradable submissions ({len(rows)})</h2>']
    if rows:
        out.append('<div class="scroll"><table class="flags"><thead><tr><th>student</th><th>exercise</th>'
                   "<th>status</th><th>score</th><th>reasons</th><th></th></tr></thead><tbody>")
        for f in rows:
            reasons = "".join(f"<li>{esc(r.strip())}</li>" for r in f["reasons"].split(" | ") if r.strip())
            student, a, st = f["student"], f["assignment"], f["status"]
            score = esc(f["score"]) + ("/" + esc(f["max_score"]) if f["max_score"] else "")
            out.append(f'<tr data-student="{esc(student)}" data-assignment="{esc(a)}" data-status="{esc(st)}">'
                       f"<td>{esc(student)}</td><td>{esc(a)}</td><td>{_status_badge(st)}</td><td>{score}</td>"
                       f'<td><ul class="reasons">{reasons}</ul></td><td>{_feedback_link(root, student, a)}</td></tr>')
        out.append("</tbody></table></div>")
    else:
        out.append("<p>None.</p>")
    if repaired:
        out.append(f"<details><summary>{len(repaired)} repaired before grading (graded normally)</summary><ul>")
        out += [f'<li><b>{esc(f["student"])}</b> {esc(f["assignment"])}: {esc(f["reasons"])}</li>' for f in repaired]
        out.append("</ul></details>")
    out.append("</section>")
    return "\n".join(out)


def section_similarity(findings: dict) -> str:
    out = ['<section id="similar"><h2>Answers that look alike</h2>',
           '<p class="note">For review only: nothing here changes a grade. Compared by copydetect (winnowed '
           "fingerprints of the answer cells, names and layout ignored), the release's own code discounted. "
           "A share is the part of one student's own answer code found in the other's.</p>"]
    for a, f in findings.items():
        out.append(f'<div class="sim" data-assignment="{esc(a)}"><h3>{esc(a)}</h3>'
                   f"<p>{f.compared} student(s) with answer code of their own compared; "
                   f'<b data-pairs="{len(f.pairs)}">{len(f.pairs)} pair(s)</b> to review.</p>')
        if f.reference:
            names = ", ".join(f'{esc(s)} ({100 * v:.0f}%)' for s, v in sorted(f.reference.items()))
            out.append(f'<p class="reference">Answers that are mostly the reference solution\'s code '
                       f'({len(f.reference)}): {names}'
                       + (f"; {f.folded} pair(s) alike only through the reference solution's code are not "
                          "listed one by one" if f.folded else "")
                       + ".</p>")
        for i, p in enumerate(f.pairs):
            if i == SHOWN_PAIRS:
                out.append(f"<p>{len(f.pairs) - SHOWN_PAIRS} more pair(s) in similarity.csv.</p>")
                break
            out.append(f'<details class="pair" data-a="{esc(p.a)}" data-b="{esc(p.b)}"{" open" if i == 0 else ""}>'
                       f"<summary><b>{esc(p.a)}</b> &harr; <b>{esc(p.b)}</b>: "
                       f'<span class="share">{100 * p.share_a:.0f}%</span> of {esc(p.a)}\'s answer code is in '
                       f'{esc(p.b)}\'s, <span class="share">{100 * p.share_b:.0f}%</span> of {esc(p.b)}\'s in '
                       f"{esc(p.a)}'s ({p.matched} matching tokens)</summary>")
            for c in p.cells:
                left, right = c.highlighted()
                out.append(f'<h4><code>{esc(c.grade_id)}</code></h4><div class="side">'
                           f'<figure><figcaption>{esc(p.a)}</figcaption><pre class="code">{left}</pre></figure>'
                           f'<figure><figcaption>{esc(p.b)}</figcaption><pre class="code">{right}</pre></figure></div>')
            out.append("</details>")
        out.append("</div>")
    return _end(out, not findings, "Nothing to compare.")


def section_grades(root: Path, g: lms_export.Grades, status: dict) -> str:
    head = "".join(f'<th data-assignment="{esc(a)}">{esc(a)}<br><small>/ {_fmt(g.max_score[a])}</small></th>'
                   for a in g.assignments)
    out = [f'<section id="grades"><h2>Grades ({len(g.students)} students)</h2>'
           '<p class="note">Blank: nothing submitted.</p>'
           f'<div class="scroll"><table class="grades"><thead><tr><th>student</th>{head}</tr></thead><tbody>']
    for s in g.students:
        cells = []
        for a in g.assignments:
            st = status.get((s, a), "")
            val = _fmt(g.score[(s, a)]) if (s, a) in g.score else ""
            href = _feedback_href(root, s, a)
            shown = f'<a href="{esc(href)}">{val}</a>' if href and val else val
            cells.append(f'<td class="{esc(st)}" data-assignment="{esc(a)}" data-score="{val}">{shown}</td>')
        out.append(f'<tr data-student="{esc(s)}"><th>{esc(s)}</th>{"".join(cells)}</tr>')
    out.append("</tbody></table></div></section>")
    return "\n".join(out)


STYLE = Path(__file__).with_name("report.css")
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def render(root: Path, g: lms_export.Grades, flags: list[dict], per_checks: dict, findings: dict,
           files: list[str]) -> str:
    status = {(f["student"], f["assignment"]): f["status"] for f in flags}
    n_subs = len(g.score)
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    n_flag = sum(1 for f in flags if f["status"] in FLAG_STATUSES)
    n_pairs = sum(len(f.pairs) for f in findings.values())
    body = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        "<title>Cohort report</title>", f"<style>{STYLE.read_text()}</style></head><body>",
        "<header><h1>Cohort report</h1>",
        f'<p class="lead"><span id="n-students">{len(g.students)}</span> student(s), '
        f'<span id="n-submissions">{n_subs}</span> submission(s) over {len(g.assignments)} exercise(s); '
        f"{n_flag} flagged, ungradable or unmatched; {n_pairs} pair(s) of alike answers to review. "
        f"Written {now} from the gradebook and flags.csv.</p>",
        '<nav><a href="#scores">scores</a><a href="#checks">checks</a><a href="#flagged">flagged</a>'
        '<a href="#similar">alike answers</a><a href="#grades">grades</a></nav></header><main>',
        section_scores(g, flags), section_checks(per_checks), section_flags(root, flags),
        section_similarity(findings), section_grades(root, g, status), "</main>",
        "<footer><p>Files beside this page (paths from the course root):</p><ul>"
        + "".join(f"<li><code>{esc(f)}</code></li>" for f in files) + "</ul></footer></body></html>",
    ]
    return "\n".join(body)


def write_similarity_csv(findings: dict, dest: Path) -> Path:
    with open(dest, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["assignment", "student_a", "student_b", "share_a", "share_b", "matching_tokens", "cells"])
        for a, f in findings.items():
            for p in f.pairs:
                w.writerow([a, p.a, p.b, f"{p.share_a:.3f}", f"{p.share_b:.3f}", p.matched,
                            " ".join(c.grade_id for c in p.cells)])
            for s, v in sorted(f.reference.items()):
                w.writerow([a, s, similarity.REFERENCE, f"{v:.3f}", "", "", ""])
    return dest


def write_all(root: Path, course, records: list, sources: dict | None = None) -> list[str]:
    """Write the LMS imports, ``summary/similarity.csv`` and ``summary/index.html`` for the
    course root ``root`` (a ``Course``'s gradebook and release); ``records``: the run's
    Records (their error texts name the misconceptions). Returns the lines that say where."""
    root = Path(root)
    (root / "summary").mkdir(parents=True, exist_ok=True)
    lms_lines = lms_export.export(root, course.db, sources)
    g = lms_export.read_gradebook(course.db)
    flags = read_flags(root)
    by_a: dict = defaultdict(dict)
    for r in records:
        by_a[r.assignment][r.student] = r
    cells = read_cells(course.db)
    per_checks = {}
    for a in g.assignments:
        status = {f["student"]: f["status"] for f in flags if f["assignment"] == a}
        per_checks[a] = checks(a, cells.get(a, {}), status, by_a.get(a, {}), course.release_root)
    graded: dict = defaultdict(list)
    for f in flags:
        if f["status"] not in ("ungradable", "unmatched", "not read"):
            graded[f["assignment"]].append(f["student"])
    findings = similarity.cohort_findings(root, course.release_root, graded)
    sim_csv = write_similarity_csv(findings, root / "summary" / "similarity.csv")
    files = ["grades.csv", "flags.csv", "summary/summary.txt", "summary/similarity.csv",
             "lms/canvas_grades.csv", "lms/moodle_grades.csv", "feedback/<student>/<exercise>/"]
    page = root / "summary" / "index.html"
    tmp = page.with_suffix(".tmp")
    tmp.write_text(render(root, g, flags, per_checks, findings, files), encoding="utf-8")
    tmp.replace(page)
    n_pairs = sum(len(f.pairs) for f in findings.values())
    return [f"report:   {page} (open it in a browser)",
            f"alike:    {sim_csv} ({n_pairs} pair(s) to review; no points changed)", *lms_lines]
