"""The adversarial cohort: hostile and broken submissions graded in one batch with honest ones.

Each kind is flagged with a clear reason, the honest students' grades do not move, nothing is
lost, the gradebook stays consistent and a re-run is idempotent. Kinds (``synth.adversarial_cohort``):
infinite loop, memory hog, fork attempt, syntax error, corrupt JSON, empty notebook, wrong file
names (no exercise / a copy suffix), stripped nbgrader metadata, deleted test cells, edited
locked cells, patched checking machinery, reading solutions/, writing the gradebook, writing
into the repository, network access, 50 MB of output, a renamed and reformatted copy of another
student's answers (under Canvas's file name); all in one LMS zip that also holds uploads that are
archives (one holding a notebook named like another student's, one with a '../' member, one
inflating to 1 GiB) and a '../' member of the download itself (``synth.adversarial_download``).

That the re-check outside the kernel never takes points from correct work is tests/test_catalog.py's:
each exercise's reference and correct alternatives, graded through nbgrader, keep every point and no flag.
"""

import csv
from pathlib import Path

import pytest
import report_page

from awb_grader import catalog
from awb_grader.devtools import synth
from awb_grader.cohort import run as cohort
from awb_grader.isolation import tiers
from awb_grader.core.course import EXERCISES, REPO

A = synth.ADV_ASSIGNMENT
pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.xdist_group("cohort")]
BWRAP = tiers.protected()     # a sandbox of some tier (bubblewrap, or Landlock + seccomp) grades here


def _grade(inbox, course):
    """Exercise 04 of the cohort in ``inbox``, graded into ``course`` (the same options each time)."""
    return cohort.run_cohort(inbox, course, ["04"], workers=2, timeout=20, feedback=False,
                             unprotected=not BWRAP, progress=False, say=lambda *a: None)


# session scope: xdist may interleave other modules on this worker; grade the batch once
@pytest.fixture(scope="session")
def batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adversarial")
    files = synth.adversarial_cohort(tmp / "in", EXERCISES / A / f"{A}.ipynb", REPO, sandboxed=BWRAP)
    files.update(synth.adversarial_download(tmp / "in", tmp / "lms.zip", EXERCISES / A / f"{A}.ipynb"))
    res = _grade(tmp / "lms.zip", tmp / "course")
    return files, res, {r.student: r for r in res.records}


def _lost(res, mistake_id):
    """Points a catalogued mistake must cost: the max of every cell in its must_fail."""
    from nbgrader.api import Gradebook

    m = next(x for x in catalog.mistakes(A) if x.id == mistake_id)
    with Gradebook(f"sqlite:///{res.root / 'gradebook.db'}") as gb:
        cells = {g.name: g.max_score for g in gb.find_notebook(A, A).grade_cells}
    return sum(cells[c] for c in m.must_fail), set(m.must_fail)


def test_every_kind_is_present(batch):
    files, _, _ = batch
    assert len({f["kind"] for f in files.values()}) >= (20 if BWRAP else 15)


def test_nothing_is_lost(batch):
    files, res, recs = batch
    for name, f in files.items():
        if f["expect"] == "unmatched":
            assert any(u.endswith(name) for u in res.unmatched), name
        elif f["expect"].startswith("unread:"):      # skipped, with its reason; nothing written outside
            assert [n for n, why in res.unread if n.endswith(name) and f["expect"][7:] in why], res.unread
            assert not list(Path("/tmp").glob(f"{Path(name).name}*")), name
        else:
            assert f["student"] in recs, f"{name} has no grade record"
    with open(res.root / "flags.csv") as fh:
        flagged = {r["student"] for r in csv.DictReader(fh)}
    assert {f["student"] for f in files.values() if f["expect"] != "unmatched"} <= flagged    # "?": not read
    assert (res.root / "originals" / "hana" / A).exists()


def test_honest_grades_are_unaffected(batch):
    _, res, recs = batch
    full = recs["ada"].max_score
    for s in ("ada", "ben", "nina", "hana", "alice"):
        assert recs[s].score == full, (s, recs[s].reasons)
    lost, cells = _lost(res, "sdpa_no_scaling")
    assert recs["dev"].score == full - lost and set(recs["dev"].failed_cells) == cells
    assert recs["ada"].status == "ok" and recs["dev"].status == "ok"


@pytest.mark.parametrize(
    "student,status,reason",
    [
        ("loop", "flagged", "time limit"),
        ("hog", "flagged", "memory"),
        ("farid", "ok", "SyntaxError"),
        ("jules", "ungradable", "invalid JSON"),
        ("emptyed", "ungradable", "empty notebook"),
        ("mallet", "ungradable", "a zip archive, not a notebook: archives are never unpacked"),
        ("eve", "ungradable", "a zip archive, not a notebook"),
        ("zed", "ungradable", "a zip archive, not a notebook"),
        ("nina", "repaired", "graded as 04_queries_keys_values.ipynb"),
        ("hana", "repaired", "metadata was missing"),
        ("ivan", "repaired", "deleted"),
        ("edwin", "flagged", "edited test cell"),
        ("patch", "flagged", "re-checked outside"),
        ("shout", "flagged", "output truncated"),
        pytest.param("netty", "flagged", "network", marks=pytest.mark.skipif(not BWRAP, reason="needs a sandbox")),
        pytest.param(
            "writer", "flagged", "outside its folder", marks=pytest.mark.skipif(not BWRAP, reason="needs a sandbox")
        ),
        pytest.param(
            "writer2", "flagged", "outside its folder", marks=pytest.mark.skipif(not BWRAP, reason="needs a sandbox")
        ),
    ],
)
def test_each_kind_is_flagged_with_a_clear_reason(batch, student, status, reason):
    _, _, recs = batch
    r = recs[student]
    assert r.status == status and reason in " ".join(r.reasons), (r.status, r.reasons)


@pytest.mark.skipif(not BWRAP, reason="no isolation tier: reading solutions/ and fork limits are not enforced")
def test_sandbox_blocks_reading_solutions_and_fork_bombs(batch):
    _, res, recs = batch
    assert "outside its folder" in " ".join(recs["reader"].reasons)
    assert {"test_softmax_values", "test_softmax_dim"} <= set(recs["reader"].failed_cells)
    assert "too many processes" in " ".join(recs["forker"].reasons)
    assert recs["forker"].score >= recs["ada"].score - 1  # only causal_mask's test is lost


def test_patched_machinery_earns_nothing(batch):
    _, res, recs = batch
    lost, cells = _lost(res, "softmax_wrong_axis")
    assert cells <= set(recs["patch"].failed_cells)
    assert recs["patch"].score <= recs["ada"].score - lost
    # and nbgrader's own export agrees (the withheld points are in the gradebook)
    with open(res.root / "grades.csv") as fh:
        exported = {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh)}
    assert exported["patch"] == recs["patch"].score


def test_gradebook_is_consistent_and_untouched(batch):
    from nbgrader.api import Gradebook

    _, res, recs = batch
    with Gradebook(f"sqlite:///{res.root / 'gradebook.db'}") as gb:
        subs = {s.student.id: s for s in gb.assignment_submissions(A)}
        assert set(subs) == set(recs)  # an ungradable file too: flagged at 0 (formgrader shows it)
        for s, sub in subs.items():
            assert sub.score == recs[s].score, s
            if recs[s].status == "ungradable":
                assert sub.score == 0 and all(nb.flagged for nb in sub.notebooks), s
            for nb in sub.notebooks:
                for g in nb.grades:
                    assert g.score <= g.max_score, (s, g.name, g.score)  # nobody's grade was rewritten
    assert not (REPO / "exercises" / "PWNED.txt").exists()
    autograded = res.root / "autograded" / "shout" / A / f"{A}.ipynb"
    assert autograded.stat().st_size < 1_000_000


@pytest.mark.browser
def test_report_page_shows_what_the_csvs_hold(batch):
    """summary/index.html of the hostile batch in Chromium: loads with no console error, nothing
    executable in it, the figures of grades.csv, flags.csv and similarity.csv, every reason."""
    _, res, recs = batch
    read = report_page.check(res.root)
    assert ("patch", A, "flagged") in {k[:3] for k in read["flagged"]}
    assert "mallory_homework.ipynb" in read["text"]
    assert "canvas_grades.csv" in res.summary and "index.html" in res.summary
    assert [p[:2] for p in read["pairs"][A]] == [("ben", "copier")]      # the copy, its code side by side
    assert recs["copier"].score == recs["ben"].score                     # listed for review, no points changed
    with open(res.root / "lms" / "canvas_grades.csv", newline="") as fh:
        ids = {r["Student"]: r["ID"] for r in csv.DictReader(fh)}
    assert ids["copier"] == "1234567" and ids["ada"] == ""               # the user id from Canvas's file name


def test_rerun_is_idempotent(batch):
    _, res, _ = batch
    before = {p: (res.root / p).read_text() for p in ("grades.csv", "flags.csv")}
    again = _grade(res.root.parent / "lms.zip", res.root)
    assert again.graded_now == []
    assert {p: (res.root / p).read_text() for p in before} == before


def test_an_inflating_upload_costs_its_own_size(batch):
    """zed's zip inflates to 1 GiB: never unpacked, the course folder holds a few copies of its bytes."""
    _, res, _ = batch
    upload = max(p.stat().st_size for p in res.root.rglob("*04_queries_keys_values.zip"))
    big = [(p, p.stat().st_size) for p in res.root.rglob("*") if p.is_file() and p.stat().st_size > 2 * upload]
    assert upload < 8 << 20 and big == [], big
