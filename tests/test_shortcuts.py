"""Shortcuts earn nothing; every correct structure earns everything.

One cohort run (the real ``cohort`` command: nbgrader's zip_collect, the bubblewrap sandbox when
it is available, parallel shards, outside-the-kernel verdicts) grades, for exercises 04-08,
every catalogued shortcut (``catalog/shortcuts.py``: delegation to the workbook's reference as a
subclass, a wrapper, an alias import, a getattr; tampering with encoded names) together with an
honest student and every correct alternative of each exercise (including blocks that reach
their sub-modules through wrapper modules).
"""

import csv

import nbformat
import pytest

from awb_grader import catalog, cohort, sandbox
from awb_grader.catalog.shortcuts import shortcuts
from awb_grader.course import EXERCISES
from awb_grader.variants import solution_cells, student_notebook

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cohort")]
EXERCISE_IDS = ["04", "05", "06", "07", "08"]
SHORTCUTS = shortcuts()
BWRAP = sandbox.bwrap_works()


def _student(name: str) -> str:
    return name.replace("_", "-")


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    from nbgrader.api import Gradebook

    tmp = tmp_path_factory.mktemp("shortcuts")
    inbox = tmp / "in"
    inbox.mkdir()
    honest = {}
    for sc in SHORTCUTS:
        a = sc.assignment
        others = tuple(c for c in solution_cells(a) if c not in sc.cells) if sc.unanswered else ()
        nb = student_notebook(EXERCISES / a / f"{a}.ipynb", a, dict(sc.cells), unanswered=others)
        nbformat.write(nb, inbox / f"{_student(sc.id)}_{a}.ipynb")
    for a in sorted({sc.assignment for sc in SHORTCUTS}):
        release = EXERCISES / a / f"{a}.ipynb"
        nbformat.write(student_notebook(release, a), inbox / f"honest_{a}.ipynb")
        honest[(a, "honest")] = "the reference solution"
        for alt in catalog.alternatives(a):
            st = _student(f"alt-{alt.id}")
            nbformat.write(student_notebook(release, a, dict(alt.cells)), inbox / f"{st}_{a}.ipynb")
            honest[(a, st)] = alt.description
    res = cohort.run_cohort(inbox, tmp / "course", EXERCISE_IDS, workers=2, timeout=60, feedback=False,
                            progress=False, say=lambda *a: None)
    recs = {(r.assignment, r.student): r for r in res.records}
    in_kernel = {}
    with Gradebook(f"sqlite:///{res.root / 'gradebook.db'}") as gb:
        for (a, s) in recs:
            sub = gb.find_submission_notebook(a, a, s)
            in_kernel[(a, s)] = {g.name: float(g.auto_score or 0) for g in sub.grades}
    with open(res.root / "flags.csv") as fh:
        flags = {(r["assignment"], r["student"]): r for r in csv.DictReader(fh)}
    return res, recs, in_kernel, flags, honest


def test_the_batch_ran_in_the_sandbox(graded):
    res = graded[0]
    assert res.sandbox == ("bwrap" if BWRAP else "limits")


@pytest.mark.parametrize("sc", SHORTCUTS, ids=lambda s: s.id)
def test_each_shortcut_loses_its_points_and_is_flagged(graded, sc):
    _, recs, in_kernel, flags, _ = graded
    r = recs[(sc.assignment, _student(sc.id))]
    assert r.status == "flagged", (r.status, r.reasons)
    lost = set(sc.must_fail) - set(r.failed_cells)
    assert not lost, f"kept points on {sorted(lost)}: {r.reasons}"
    if sc.kind.startswith("tampering"):
        assert r.score == 0, (r.score, r.reasons)
    row = flags[(sc.assignment, _student(sc.id))]
    assert sc.flag in row["reasons"], row["reasons"]
    if sc.kind.startswith("delegation"):
        # the flag names what was used, and the student's own kernel already said so
        assert "attention_workbook." in row["reasons"]
        assert all(in_kernel[(sc.assignment, _student(sc.id))][c] == 0 for c in sc.must_fail), \
            in_kernel[(sc.assignment, _student(sc.id))]


def test_honest_students_and_every_alternative_get_full_marks(graded):
    _, recs, _, _, honest = graded
    wrong = {k: (r.score, r.max_score, r.status, r.reasons) for k, r in recs.items()
             if k in honest and (r.score != r.max_score or r.status != "ok")}
    assert not wrong, wrong
    assert ("06_transformer_block", "alt-wrapped-sublayers") in honest
    assert ("07_encoder_decoder", "alt-wrapped-sublayers") in honest


def test_every_kind_is_catalogued_for_every_exercise():
    kinds = {"delegation: subclass", "delegation: wrapper", "delegation: alias", "delegation: getattr",
             "tampering: encoded"}
    for ex in EXERCISE_IDS:
        got = {s.kind for s in SHORTCUTS if s.assignment.startswith(ex)}
        assert kinds <= got, (ex, kinds - got)
