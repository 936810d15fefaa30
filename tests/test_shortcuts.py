"""Shortcuts earn nothing; contract breaks lose what they must, visibly; every correct structure
earns everything.

One cohort run (the real ``cohort`` command: nbgrader's zip_collect, the bubblewrap sandbox when
it is available, parallel shards, outside-the-kernel verdicts) grades, for exercises 04-09,
a sample of the catalogued shortcuts (``catalog/shortcuts.py``: delegation to the workbook's reference
as a subclass, a wrapper, an alias import, a getattr, importlib / ``__import__`` / ``sys.modules``, an
``nn.Module`` holding the reference; tampering with encoded names): every kind and every exercise at
least once (``tests/catalog_parts.py``; ``make test-catalog`` grades the other shortcuts in a second
run, and tests/test_own_work.py reads every one from the source on every run), the first catalogued
contract-breaking mistake of each exercise (``visible=True``; ``tests/test_catalog.py`` grades the
others) and an honest student of each exercise. (Every correct alternative, blocks that reach their
sub-modules through wrapper modules included, is graded through nbgrader, unflagged and with full marks,
by ``tests/test_catalog.py``: a sample in ``make test``, the others in ``make test-catalog``.)
"""

import csv

import nbformat
import pytest

from awb_grader import catalog
from awb_grader.cohort import run as cohort
from awb_grader.isolation import tiers
from awb_grader.verdict import outside as verdict
from awb_grader.catalog.shortcuts import shortcuts
from awb_grader.core.course import assignments
from awb_grader.core.outputs import error_text
from awb_grader.devtools import synth
from catalog_parts import graded_elsewhere, named_earlier, shortcut_rest, shortcut_sample

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.xdist_group("cohort")]
EXERCISE_IDS = synth.SHORTCUT_EXERCISES
SHORTCUTS = shortcuts()
# the first contract break of each exercise (tests/catalog_parts.py): the others are graded by test_catalog
# (`make test-catalog`) and in-process on every run (test_visible_hints: they lose only where the visible check fails)
CONTRACT = [(a, m) for a in assignments() for m in graded_elsewhere(a)]
TIER = tiers.detect().name if tiers.protected() else "limits"


def _student(name: str) -> str:
    return name.replace("_", "-")


def grade(tmp, contract, which, with_honest=True):
    """(cohort result, {(a, student): record}, {(a, student): {cell: score in the kernel}}, flags.csv rows,
    honest students) of one sandboxed cohort run over the shortcuts ``which`` and the contract breaks."""
    from nbgrader.api import Gradebook

    inbox = tmp / "in"
    honest = synth.shortcut_cohort(inbox, contract, list(which), with_honest=with_honest)
    res = cohort.run_cohort(
        inbox,
        tmp / "course",
        EXERCISE_IDS,
        workers=2,
        timeout=60,
        feedback=False,
        unprotected=TIER == "limits",
        progress=False,
        say=lambda *a: None,
    )
    recs = {(r.assignment, r.student): r for r in res.records}
    in_kernel = {}
    with Gradebook(f"sqlite:///{res.root / 'gradebook.db'}") as gb:
        for (a, s) in recs:
            sub = gb.find_submission_notebook(a, a, s)
            in_kernel[(a, s)] = {g.name: float(g.auto_score or 0) for g in sub.grades}
    with open(res.root / "flags.csv") as fh:
        flags = {(r["assignment"], r["student"]): r for r in csv.DictReader(fh)}
    return res, recs, in_kernel, flags, honest


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    return grade(tmp_path_factory.mktemp("shortcuts"), CONTRACT, shortcut_sample())


@pytest.fixture(scope="session")
def graded_rest(tmp_path_factory):
    return grade(tmp_path_factory.mktemp("shortcuts-rest"), [], shortcut_rest(), with_honest=False)


def test_the_batch_ran_in_the_sandbox(graded):
    res = graded[0]
    assert res.sandbox == TIER


@pytest.mark.parametrize("sc", shortcut_sample(), ids=lambda s: s.id)
def test_each_shortcut_loses_its_points_and_is_flagged(graded, sc):
    loses_its_points_and_is_flagged(graded, sc)


@pytest.mark.full_catalog
@pytest.mark.parametrize("sc", shortcut_rest(), ids=lambda s: s.id)
def test_each_other_shortcut_loses_its_points_and_is_flagged(graded_rest, sc):
    """The shortcuts the sample leaves out (``make test-catalog``)."""
    loses_its_points_and_is_flagged(graded_rest, sc)


def test_the_sample_grades_every_kind_and_exercise_and_the_two_parts_are_the_catalog():
    sample, rest = shortcut_sample(), shortcut_rest()
    assert sorted(s.id for s in sample + rest) == sorted(s.id for s in SHORTCUTS)
    assert not {s.id for s in sample} & {s.id for s in rest}
    assert {s.kind for s in sample} == {s.kind for s in SHORTCUTS}
    assert {s.assignment for s in sample} == {s.assignment for s in SHORTCUTS}


def loses_its_points_and_is_flagged(graded, sc):
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


@pytest.mark.parametrize("a, m", CONTRACT, ids=[f"{a[:2]}-{m.id}" for a, m in CONTRACT])
def test_each_contract_break_fails_its_visible_check_and_loses_only_there(graded, a, m):
    """Right on some promised inputs, wrong on others: every must_fail cell loses its points with
    the VISIBLE check's message (the student could see it before submitting), naming the mistake;
    no other cell loses anything, and nothing is flagged (a wrong answer is not a shortcut)."""
    res, recs, _, flags, _ = graded
    st = _student("contract-" + m.id)
    r = recs[(a, st)]
    assert r.status == "ok", (r.status, r.reasons)
    assert set(r.failed_cells) == set(m.must_fail), (sorted(r.failed_cells), m.must_fail)
    nb = nbformat.read(res.root / "autograded" / st / a / f"{a}.ipynb", as_version=4)
    texts = {c: error_text(nb, c) for c in m.must_fail}
    hidden = [c for c, t in texts.items() if not t or "hidden test" in t or verdict.HIDDEN_FAILED in t]
    assert not hidden, f"{m.id}: not a visible failure in {hidden}: {texts}"
    assert any(m.hint.lower() in t.lower() for t in texts.values()), (m.hint, texts)
    # the grade table names it from those messages (as tests/test_catalog.py requires of the rest)
    groups = catalog.named_by_errors(a, r.failed_cells, texts)
    assert any(m in g for g in groups) and not named_earlier(a, m, groups), [[x.id for x in g] for g in groups]
    assert flags[(a, st)]["failed_cells"].split() == r.failed_cells


def test_honest_students_get_full_marks(graded):
    _, recs, _, _, honest = graded
    wrong = {k: (r.score, r.max_score, r.status, r.reasons) for k, r in recs.items()
             if k in honest and (r.score != r.max_score or r.status != "ok")}
    assert not wrong, wrong
    assert len(honest) == len(EXERCISE_IDS)


def test_every_kind_is_catalogued_for_every_exercise():
    kinds = {"delegation: subclass", "delegation: wrapper", "delegation: alias", "delegation: getattr",
             "delegation: importlib", "delegation: composition", "tampering: encoded",
             "tampering: encoded delegation"}
    for ex in EXERCISE_IDS:
        got = {s.kind for s in SHORTCUTS if s.assignment.startswith(ex)}
        assert kinds <= got, (ex, kinds - got)
        assert any(a.startswith(ex) for a, _ in CONTRACT), ex
