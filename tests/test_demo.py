"""`make demo` end to end: the demo cohort grades to its expected table, nbgrader's export and
feedback are written, re-grading is idempotent, and feedback never shows hidden-test code."""

import csv
import html
import re

import pytest

from awb_grader import demo
from awb_grader.course import AUTOGRADER
from awb_grader.pipeline import grade_submissions

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
    got = [(r.student, f"{r.score:g}", f"{r.max_score:g}", r.status) for r in rows]
    want = [(e["student"], e["score"], e["max_score"], e["status"]) for e in demo.expected_rows()]
    assert got == want
    reasons = {r.student: " ".join(r.reasons) for r in rows}
    assert "invalid JSON" in reasons["jules"]
    assert "metadata was missing" in reasons["hana"]
    assert "time limit" in reasons["gita"]
    assert "SyntaxError" in reasons["farid"]
    assert "edited test cell" in reasons["ivan"] and "deleted" in reasons["ivan"]


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
    from awb_grader.course import Course

    course = Course(root, release_dir=root / "release", timeout=demo.DEMO_TIMEOUT)
    subs = {s: root / "downloaded" / f"{s}.ipynb" for s in ("ada", "hana", "jules")}
    again = grade_submissions(course, demo.ASSIGNMENT, subs, feedback=False, progress=False)
    before = {r.student: (r.score, r.status) for r in rows}
    assert {r.student: (r.score, r.status) for r in again} == {s: before[s] for s in subs}
    from nbgrader.api import Gradebook

    with Gradebook(course.db) as gb:
        assert len(gb.assignment_submissions(demo.ASSIGNMENT)) == sum(r.status != "ungradable" for r in rows)
