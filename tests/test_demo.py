"""`make demo` end to end: the demo cohort grades to its expected table, nbgrader's export and
feedback are written, re-grading is idempotent, and feedback never shows hidden-test code."""

import csv
import html
import re

import pytest
import report_page

from awb_grader.devtools import demo
from awb_grader.core.course import AUTOGRADER
from awb_grader import catalog
from awb_grader.cohort.pipeline import grade_submissions, table
from awb_grader.core.records import Record

pytestmark = pytest.mark.xdist_group("demo")


# session scope: xdist may interleave other modules on this worker; the demo must run once
@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "demo"
    rows = demo.run(root=root, quiet=True)
    return root, rows


@pytest.mark.slow
def test_demo_table_matches_expected(demo_run):
    root, rows = demo_run
    got = [(r.student, f"{r.score:g}", f"{r.max_score:g}", r.status, "; ".join(r.misconceptions)) for r in rows]
    want = [(e["student"], e["score"], e["max_score"], e["status"], e["misconceptions"]) for e in demo.expected_rows()]
    assert got == want
    assert {r.student: r.unanswered for r in rows if r.unanswered} == {"chloe": ["scaled_dot_product_attention"]}
    reasons = {r.student: " ".join(r.reasons) for r in rows}
    assert "invalid JSON" in reasons["jules"]
    assert "metadata was missing" in reasons["hana"]
    assert "time limit" in reasons["gita"]
    assert "SyntaxError" in reasons["farid"]
    assert "edited test cell" in reasons["ivan"] and "deleted" in reasons["ivan"]


@pytest.mark.slow
@pytest.mark.browser
def test_demo_report_page_shows_what_the_csvs_hold(demo_run):
    """summary/index.html in Chromium: no console error, the figures of grades.csv and flags.csv,
    dev's misconception under the checks it fails, links to the feedback pages."""
    root, _ = demo_run
    read = report_page.check(root)
    assert "sqrt(d)" in read["text"] and "jules" in read["text"]
    assert "1 student(s) attention scores not divided by sqrt(d)" in " ".join(read["text"].split())   # dev
    assert (root / "lms" / "canvas_grades.csv").exists() and (root / "lms" / "moodle_grades.csv").exists()


@pytest.mark.slow
def test_demo_writes_nbgrader_export_and_feedback(demo_run):
    root, rows = demo_run
    with open(root / "grades.csv") as fh:
        exported = {r["student_id"]: r for r in csv.DictReader(fh)}
    for r in rows:
        if r.status != "ungradable":
            assert float(exported[r.student]["raw_score"]) == r.score
            assert (root / "feedback" / r.student / demo.ASSIGNMENT / f"{demo.ASSIGNMENT}.html").exists()
    assert (root / "originals" / "hana" / demo.ASSIGNMENT).exists(), "the repaired notebook's original is kept"


@pytest.mark.slow
def test_feedback_reveals_no_hidden_test_code(demo_run):
    root, _ = demo_run
    hidden_src = (AUTOGRADER / "awb_grader" / "hidden" / "ex04.py").read_text()
    secret_lines = [ln.strip() for ln in hidden_src.splitlines()
                    if len(ln.strip()) > 30 and not ln.strip().startswith(("#", '"""', "def ", "from ", "import "))]
    assert len(secret_lines) > 20
    checked = 0
    for fb in (root / "feedback").rglob("*.html"):
        text = html.unescape(re.sub(r"<[^>]+>", "", fb.read_text()))
        leaked = [ln for ln in secret_lines if ln in text]
        assert not leaked, f"{fb} shows hidden-check code: {leaked[:3]}"
        assert 'File "' not in text or "awb_grader" not in text.split('File "', 1)[1][:200]
        checked += 1
    assert checked >= 8


@pytest.mark.slow
def test_regrading_is_idempotent(demo_run):
    root, rows = demo_run
    from awb_grader.core.course import Course

    course = Course(root, release_dir=root / "release", timeout=demo.DEMO_TIMEOUT)
    subs = {s: root / "downloaded" / f"{s}.ipynb" for s in ("ada", "hana", "jules")}
    again = grade_submissions(course, demo.ASSIGNMENT, subs, feedback=False, progress=False)
    before = {r.student: (r.score, r.status) for r in rows}
    assert {r.student: (r.score, r.status) for r in again} == {s: before[s] for s in subs}
    from nbgrader.api import Gradebook

    with Gradebook(course.db) as gb:
        subs = {sub.student.id: sub for sub in gb.assignment_submissions(demo.ASSIGNMENT)}
        assert set(subs) == {r.student for r in rows}      # the unreadable file too: a flagged 0
        assert subs["jules"].score == 0 and subs["jules"].notebooks[0].flagged
        assert {sub.student.last_name for sub in subs.values()} == set(subs)   # formgrader: "ada, ", not "None, None"


def test_table_names_mistakes_and_wraps_long_notes():
    long_reason = "edited test cell(s) test_sdpa_padding: restored from the release when grading; " * 2
    rows = [Record("04", "dev", score=21, max_score=30,
                   misconceptions=["no sqrt(d) scaling", "padding mask on the query axis"]),
            Record("04", "chloe", score=22, max_score=30, unanswered=["scaled_dot_product_attention"]),
            Record("04", "ivan", score=26, max_score=30, status="flagged", reasons=[long_reason.strip()]),
            Record("04", "ada", score=30, max_score=30)]
    text = table(rows, notes_width=60)
    lines = text.splitlines()
    assert "dev      21/30  ok       no sqrt(d) scaling; padding mask on the query axis" in lines
    assert "chloe    22/30  ok       unanswered: scaled_dot_product_attention" in lines
    assert lines[-1] == "ada      30/30  ok       -"
    assert max(len(ln) for ln in lines) <= len("student  22/30  flagged  ") + 60
    ivan = text[text.index("ivan"):text.index("ada")]
    assert " ".join(ivan.split()[3:]) == long_reason.strip(), "long notes wrap; nothing is cut"


def _ex04_named(errors):
    groups = catalog.named_by_errors("04_queries_keys_values", list(errors), errors)
    return [sorted(m.id for m in g) for g in groups]


def test_mistakes_are_named_by_their_hints():
    # dev: two mistakes, each named by its own visible hint
    assert _ex04_named({"test_sdpa_values": "CheckFailed: ... no scaling ...", "test_sdpa_causal": "",
                        "test_sdpa_padding": "", "test_padding_mask": "keys and queries are swapped"}) == [
        ["padding_mask_queries"], ["sdpa_no_scaling"]]
    # a hint that is part of a longer one of the same answer cell ("dim=" in "softmax over dim="): the longer wins
    assert _ex04_named({"test_softmax_values": "your output equals a softmax over dim=0: reduce with `dim=dim`",
                        "test_softmax_dim": "your output equals a softmax over dim=0"}) == [["softmax_wrong_axis"]]
    # the stability check's two messages each name their own mistake ...
    from attention_workbook.checks.ex04 import GLOBAL_MAX
    assert _ex04_named({"test_softmax_stability": "exp(10000) overflows: subtract the maximum of each row first"}) == [
        ["softmax_no_max_subtraction"]]
    assert _ex04_named({"test_softmax_stability": GLOBAL_MAX}) == [["softmax_global_max"]]
    # ... and one message that both hints are in cannot tell them apart: the table says "A or B"
    assert _ex04_named({"test_softmax_stability": "subtract the maximum of the whole tensor"}) == [
        ["softmax_global_max", "softmax_no_max_subtraction"]]
    # failures that no hint explains (an unanswered function) name nothing
    assert _ex04_named({c: "NotImplementedError: " for c in ("test_sdpa_values", "test_sdpa_causal",
                                                             "test_sdpa_padding", "test_sdpa_shapes")}) == []
