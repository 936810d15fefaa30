"""Gradescope: the autograder zip, run as Gradescope runs it, in a real Docker daemon
(``docker_daemon.py``: Docker's default seccomp profile and capabilities, no ``--privileged``,
no network): unpacked to ``/autograder/source``, ``setup.sh`` once in one container, then
``run_autograder`` on each upload (``/autograder/submission`` -> ``/autograder/results/results.json``)
in a second container with Gradescope's default memory limit (768 MB): a forger first (it writes
results.json, the gradebook and the grader's files, and leaves a detached process that keeps
rewriting results.json), then an honest notebook, a catalogued mistake, a delegation to the
workbook's reference, encoded tampering, a broken file, and a submission that peeks at the hidden
checks and answers one function from the published checks' inputs (``tests/peeking.py``: this build
has new seeds, so it loses that function's hidden cells). Bubblewrap cannot make namespaces
there: the grades come from the Landlock tier, as root (a uid of its own per sandbox).

``setup.sh`` installs from the package registries on Gradescope; here ``AWB_SETUP_VENV`` points
it at the test suite's own virtual environment (bound read-only) to keep CI short: nothing else
differs. The figures (time and peak memory per upload) are printed.

Fast tests (no kernel): the zip's layout, results.json's shape, hidden-check messages replaced,
reseeding at build time.
"""

import functools
import json
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from awb_grader import catalog
from awb_grader.isolation import tiers
from awb_grader.platforms import gradescope, harness
from awb_grader.catalog.shortcuts import shortcuts
from awb_grader.core.course import EXERCISES
from awb_grader.devtools.variants import solution_cells, student_notebook

import peeking

A = "04_queries_keys_values"
RELEASE = EXERCISES / A / f"{A}.ipynb"
MISTAKE = next(m for m in catalog.mistakes(A) if m.id == "sdpa_no_scaling")
DELEGATION = next(s for s in shortcuts(A) if s.id == "sdpa_wraps_reference")
TAMPERING = next(s for s in shortcuts(A) if s.kind == "tampering: encoded")
GRADESCOPE_MB, GRADESCOPE_S, GRADESCOPE_CPUS = 768, 600, "0.5"     # its defaults: memory, time, half a CPU


KNOWN = ("scaled_dot_product_attention", "sdpa_no_scaling")   # answered from the published checks' inputs


@functools.lru_cache(maxsize=1)
def uploads() -> dict[str, bytes]:
    def nb(cells=None, unanswered=()):
        return nbformat.writes(student_notebook(RELEASE, A, cells, unanswered=unanswered)).encode()

    def others(sc):
        return tuple(c for c in solution_cells(A) if c not in sc.cells) if sc.unanswered else ()

    return {
        "honest": nb(),
        "mistake": nb({MISTAKE.cell: MISTAKE.source, **MISTAKE.extra_cells}),
        "delegation": nb(dict(DELEGATION.cells), others(DELEGATION)),
        "tampering": nb(dict(TAMPERING.cells), others(TAMPERING)),
        "broken": b'{"cells": [ {"cell_type": "code", "source": "def softmax(x',
        "peeking": nbformat.writes(peeking.peeking_notebook(RELEASE, A, known=KNOWN)).encode(),
    }


# -- fast: no kernel ---------------------------------------------------------------------------
def test_a_zygote_for_one_upload_imports_matplotlib_only_where_the_graded_cells_draw():
    """harness.plots_when_graded: exercise 04 draws only in a cell skipped while nbgrader grades;
    01 and 03 import matplotlib in the cells graded runs; an unreadable release: True (as before)."""
    from awb_grader.core.course import resolve

    drawn = {a[:2]: harness.plots_when_graded(EXERCISES / a / f"{a}.ipynb") for a in resolve(["01", "03", "04"])}
    assert drawn == {"01": True, "03": True, "04": False}
    assert harness.plots_when_graded(Path("/nonexistent.ipynb"))


def test_zip_follows_the_specification(tmp_path):
    z = gradescope.build("04", tmp_path / "ag.zip", visibility="hidden", seed_salt="s3cret")
    with zipfile.ZipFile(z) as zf:
        names = set(zf.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
        settings = json.loads(zf.read("harness.json"))
        hidden = zf.read("autograder/awb_grader/hidden/ex04.py").decode()
    assert {"setup.sh", "run_autograder"} <= names          # at the root, not in a folder
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert f"solutions/{A}/{A}.ipynb" in names and f"exercises/{A}/{A}.ipynb" in names
    assert settings["assignment"] == A and settings["visibility"] == "hidden"
    published = (Path(harness.REPO) / "autograder/awb_grader/hidden/ex04.py").read_text()
    assert settings["reseeded"] >= len(harness.SEED.findall(published)) > 0   # every hidden module
    assert harness.SEED.findall(hidden) != harness.SEED.findall(published)
    # the same secret gives the same seeds: a rebuilt zip grades as the first one did
    assert harness.reseed_text(published, "s3cret")[0] == hidden


def test_results_json_hides_hidden_check_details():
    out = harness.Outcome(A, "ok", 3.0, 6.0, tests=[
        harness.Test("test_a", 2.0, 2.0, "passed", True),
        harness.Test("test_b", 0.0, 1.0, *harness.student_message("CheckFailed", "no scaling by sqrt(d)")),
        harness.Test("test_c", 1.0, 3.0, *harness.student_message(
            "CheckFailed", "hidden test: shape (3, 5, 7) differs by 0.31 (atol 1e-5)"))])
    res = gradescope.results_json(out, "after_published")
    assert res["score"] == 3.0 and res["stdout_visibility"] == "hidden"
    by = {t["name"]: t for t in res["tests"]}
    assert set(by["test_a"]) >= {"name", "score", "max_score", "status", "output", "visibility"}
    assert by["test_a"]["status"] == "passed" and by["test_a"]["visibility"] == "after_published"
    assert by["test_b"] == {**by["test_b"], "status": "failed", "visibility": "visible",
                            "output": "no scaling by sqrt(d)"}
    assert by["test_c"]["output"] == harness.HIDDEN_MESSAGE and by["test_c"]["visibility"] == "after_published"
    assert "0.31" not in json.dumps(res)


# -- slow: the harness end to end, in Docker ------------------------------------------------
RUN_ALL = """
set -u
for name in $(cat /uploads/order); do
  rm -rf /autograder/submission /autograder/results && mkdir -p /autograder/submission
  cp /uploads/$name.file /autograder/submission/$(cat /uploads/$name.as)
  t0=$EPOCHREALTIME
  /autograder/run_autograder > /uploads/out/$name.log 2>&1
  echo "rc $? seconds $(awk "BEGIN {print $EPOCHREALTIME - $t0}")" >> /uploads/out/$name.log
  cp /autograder/results/results.json /uploads/out/$name.json 2>/dev/null || true
done
sleep 3      # a process that outlived its kernel would rewrite results.json now
cp /autograder/results/results.json /uploads/out/last.json
"""


def _forger_upload() -> bytes:
    from test_tiers import DETACHED, FORGER

    first = solution_cells(A)
    first_id = next(iter(first))
    cell = FORGER + "\n" + DETACHED.split("raise NotImplementedError()\n", 1)[1]
    return nbformat.writes(student_notebook(RELEASE, A, {first_id: cell},
                                            unanswered=tuple(c for c in first if c != first_id))).encode()


@pytest.fixture(scope="module")
def graded(docker, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gradescope")
    z = gradescope.build("04", tmp / "autograder.zip", visibility="after_published", seed_salt="private-mirror")
    root = tmp / "root"
    setup = docker.gradescope_setup(z, root)         # as Gradescope's image build does
    assert setup["rc"] == 0, setup["stdout"][-3000:]
    up = tmp / "uploads"
    (up / "out").mkdir(parents=True)
    files = {"forger": _forger_upload(), **uploads()}
    for name, data in files.items():
        (up / f"{name}.file").write_bytes(data)
        (up / f"{name}.as").write_text("notebook.ipynb" if name == "broken" else f"{A}.ipynb")
    (up / "order").write_text(" ".join(files))
    run = docker.run(["-v", f"{root}:/autograder", "-v", f"{up}:/uploads", "--memory", f"{GRADESCOPE_MB}m",
                      "--cpus", GRADESCOPE_CPUS],
                     ["bash", "-c", RUN_ALL], timeout=GRADESCOPE_S * len(files))
    out = {"_setup": setup, "_run": run, "_last": json.loads((up / "out" / "last.json").read_text())}
    for name in files:
        log = (up / "out" / f"{name}.log").read_text() if (up / "out" / f"{name}.log").exists() else ""
        tail = log.strip().splitlines()[-1].split() if log.strip() else ["rc", "?", "seconds", "0"]
        p = up / "out" / f"{name}.json"
        out[name] = (json.loads(p.read_text()) if p.exists() else None,
                     {"rc": int(tail[1]) if tail[1].isdigit() else -1, "seconds": float(tail[3]), "stdout": log})
    print(f"\nGradescope in Docker (default seccomp and capabilities, --memory {GRADESCOPE_MB}m), per upload:")
    for name in files:
        print(f"  {name:<11} {out[name][1]['seconds']:6.1f} s")
    return out


def _uploads(graded):
    return [(k, v) for k, v in graded.items() if not k.startswith("_")]


def _tests(res):
    return {t["name"]: t for t in res["tests"]}


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.xdist_group("docker")
class TestHarness:
    def test_setup_says_which_tier_the_image_gets(self, graded):
        said = graded["_setup"]["stdout"]
        # Docker's defaults refuse bubblewrap its namespaces; where this machine has no bubblewrap at all
        # (the container binds its system), the reason is that one
        why = "bubblewrap: Creating new namespace failed" if shutil.which("bwrap") else tiers.NOT_INSTALLED
        assert "isolation tier: landlock" in said and f"not {why}" in said, said
        assert "falls back" not in said

    def test_every_run_wrote_results_within_gradescope_defaults(self, graded):
        for name, (res, run) in _uploads(graded):
            assert run["rc"] == 0 and res is not None, (name, run["stdout"][-3000:])
            assert run["seconds"] < GRADESCOPE_S, (name, run["seconds"])
            assert "sandbox landlock" in run["stdout"], run["stdout"][:400]

    def test_a_forger_gets_nothing_and_leaves_nothing_running(self, graded):
        res, run = graded["forger"]
        assert res["score"] == 0 and res["extra_data"]["status"] == "flagged", res["output"]
        assert "outside its folder" in run["stdout"]
        assert res["output"] != "forged" and graded["_last"]["output"] != "forged"
        assert graded["_last"] == graded[list(uploads())[-1]][0]    # the last upload's own results, 3 s later

    def test_honest_submission_gets_full_marks(self, graded):
        res, _ = graded["honest"]
        tests = _tests(res)
        assert len(tests) == len(harness.release_cells(RELEASE)) > 10
        assert res["score"] == sum(t["max_score"] for t in tests.values()) == 30
        assert all(t["status"] == "passed" and t["visibility"] == "after_published" for t in tests.values())

    def test_catalogued_mistake_loses_its_points_with_its_hint(self, graded):
        res, run = graded["mistake"]
        tests = _tests(res)
        for c in MISTAKE.must_fail:
            assert tests[c]["score"] == 0 and tests[c]["status"] == "failed", tests[c]
        assert any(MISTAKE.hint.lower() in tests[c]["output"].lower() and tests[c]["visibility"] == "visible"
                   for c in MISTAKE.must_fail), [tests[c]["output"] for c in MISTAKE.must_fail]
        assert res["score"] <= 30 - sum(tests[c]["max_score"] for c in MISTAKE.must_fail)
        assert tests["test_softmax_values"]["score"] == tests["test_softmax_values"]["max_score"]
        assert "likely misconception" in run["stdout"]

    def test_delegation_earns_nothing_and_is_flagged_for_the_instructor(self, graded):
        res, run = graded["delegation"]
        tests = _tests(res)
        assert all(tests[c]["score"] == 0 for c in DELEGATION.must_fail), {c: tests[c] for c in DELEGATION.must_fail}
        assert res["extra_data"]["status"] == "flagged" and "flagged for review" in res["output"]
        assert DELEGATION.flag in run["stdout"] and "attention_workbook." in run["stdout"]

    def test_tampering_scores_zero_with_a_clear_output(self, graded):
        res, run = graded["tampering"]
        assert res["score"] == 0 and res["extra_data"]["status"] == "flagged"
        assert "flagged for review" in res["output"]
        assert all(t["score"] == 0 for t in res["tests"])
        assert "tampering" in run["stdout"]

    def test_broken_file_scores_zero_and_says_why(self, graded):
        res, run = graded["broken"]
        assert res["score"] == 0 and res["extra_data"]["status"] == "ungradable"
        assert "could not be graded" in res["output"] and "Download .ipynb" in res["output"]
        assert all(t["score"] == 0 for t in res["tests"])

    def test_no_hidden_check_code_or_values_reach_students(self, graded):
        secret = peeking.hidden_text(A)
        for name, (res, _) in _uploads(graded):
            text = json.dumps([res["output"], [t["output"] for t in res["tests"]]])
            assert "hidden test:" not in text and "BEGIN HIDDEN" not in text and "awb_grader" not in text, name
            assert not [ln for ln in secret if ln in text], name

    def test_answers_from_the_published_seeds_lose_their_hidden_cells(self, graded):
        """The peeking submission gets its points for what it implements; its function that
        answers right only on the published checks' inputs loses the cells whose hidden checks
        this build re-seeded, with the fixed sentence, and nothing is flagged."""
        res, run = graded["peeking"]
        tests = _tests(res)
        lost = {c for c, t in tests.items() if t["score"] < t["max_score"]}
        assert lost == set(MISTAKE.must_fail), lost
        assert all(tests[c]["output"] == harness.HIDDEN_MESSAGE for c in lost)
        assert res["score"] == 30 - sum(tests[c]["max_score"] for c in lost)
        assert res["extra_data"]["status"] == "ok"
        # the instructor's log has each hidden check's own message; the student's output does not
        assert "hidden check test_sdpa_values: " in run["stdout"]
