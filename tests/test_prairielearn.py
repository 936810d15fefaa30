"""PrairieLearn: the files an externally graded question needs, and the grader run as
PrairieLearn runs it: in a real Docker daemon (``docker_daemon.py``) with Docker's defaults (no
added capabilities or security options, no network), ``/grade`` holding ``serverFilesCourse/``,
the question's ``tests/`` and the upload in ``student/``; the entrypoint writes
``/grade/results/results.json``. Bubblewrap cannot make namespaces there: the grades come from
the Landlock tier, as root.

The grading image's Python is the test suite's own (``AWB_PYTHON``, the entrypoint's one
setting, bound read-only), instead of the image that ``graders/awb/Dockerfile`` builds. The
uploads, one job each in one container: a forger (results.json, the gradebook, the grader's files,
a detached process that keeps rewriting results.json), then the Gradescope test's six: honest,
a catalogued mistake, a delegation, encoded tampering, a broken file, the peeking submission that
answers one function from the published checks' inputs (this build keeps the published seeds: full
marks, and nothing of the hidden checks in what the student reads).
"""

import json
import os
import shutil

import pytest

from awb_grader.platforms import harness, prairielearn
from docker_daemon import VENV
from test_gradescope import A, DELEGATION, MISTAKE, RELEASE, uploads

import peeking

PL_TIMEOUT_S = 600


def test_question_files(tmp_path):
    q = prairielearn.build("04", tmp_path / "pl", image="me/awb-grader")
    info = json.loads((q / "info.json").read_text())
    opts = info["externalGradingOptions"]
    assert info["gradingMethod"] == "External" and opts["enabled"] and opts["image"] == "me/awb-grader"
    assert opts["serverFilesCourse"] == ["awb/"]
    entry = tmp_path / "pl" / opts["entrypoint"].replace("/grade/", "", 1)
    assert entry.exists() and entry.stat().st_mode & 0o111
    assert 'file-names="04_queries_keys_values.ipynb"' in (q / "question.html").read_text()
    assert json.loads((q / "tests" / "harness.json").read_text())["assignment"] == A
    assert (tmp_path / "pl" / "graders" / "awb" / "Dockerfile").exists()
    # the shared course files serve every exercise's question
    assert (entry.parent / "solutions" / A / f"{A}.ipynb").exists()


def test_results_json_format():
    out = harness.Outcome(A, "ok", 3.0, 4.0, tests=[harness.Test("t1", 3.0, 3.0, "passed", True),
                                                    harness.Test("t2", 0.0, 1.0, "no scaling", False)])
    res = prairielearn.results_json(out)
    assert res["gradable"] is True and res["score"] == 0.75 and res["message"].startswith(A)
    assert res["tests"][1] == {"name": "t2", "points": 0.0, "max_points": 1.0, "message": "no scaling"}
    broken = prairielearn.results_json(harness.Outcome(A, "error", 0.0, 4.0))
    assert broken["gradable"] is False and broken["score"] == 0.0     # the grader's failure: not charged


RUN_ALL = """
set -u
for name in $(cat /uploads/order); do
  rm -rf /grade/student /grade/results /grade/awb-work && mkdir -p /grade/student
  cp /uploads/$name.file /grade/student/04_queries_keys_values.ipynb
  /grade/serverFilesCourse/awb/run_prairielearn > /uploads/out/$name.log 2>&1
  echo "rc $?" >> /uploads/out/$name.log
  cp /grade/results/results.json /uploads/out/$name.json 2>/dev/null || true
done
sleep 3      # a process that outlived its kernel would rewrite results.json now
cp /grade/results/results.json /uploads/out/last.json
"""


@pytest.fixture(scope="module")
def graded(docker, tmp_path_factory):
    from test_gradescope import _forger_upload

    tmp = tmp_path_factory.mktemp("prairielearn")
    q = prairielearn.build("04", tmp / "course")
    grade, up = tmp / "grade", tmp / "uploads"
    shutil.copytree(tmp / "course" / "serverFilesCourse", grade / "serverFilesCourse", symlinks=True)
    shutil.copytree(q / "tests", grade / "tests")
    (up / "out").mkdir(parents=True)
    files = {"forger": _forger_upload(), **uploads()}
    for name, data in files.items():
        (up / f"{name}.file").write_bytes(data)
    (up / "order").write_text(" ".join(files))
    run = docker.run(["-v", f"{grade}:/grade", "-v", f"{up}:/uploads",
                      "-e", f"AWB_PYTHON={os.path.join(VENV, 'bin', 'python')}"],
                     ["bash", "-c", RUN_ALL], timeout=PL_TIMEOUT_S * len(files))
    out = {"_run": run, "_last": json.loads((up / "out" / "last.json").read_text())}
    for name in files:
        log = (up / "out" / f"{name}.log").read_text() if (up / "out" / f"{name}.log").exists() else "rc ?"
        p = up / "out" / f"{name}.json"
        out[name] = (json.loads(p.read_text()) if p.exists() else None,
                     {"rc": 0 if log.strip().endswith("rc 0") else 1, "stdout": log})
    print(f"\nPrairieLearn in Docker (its defaults): {len(files)} jobs in {run['seconds']:.0f} s")
    return out


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.xdist_group("docker")
class TestGrader:
    def test_every_run_wrote_results(self, graded):
        for name, (res, run) in [(k, v) for k, v in graded.items() if not k.startswith("_")]:
            assert run["rc"] == 0 and res is not None, (name, run["stdout"][-3000:])
            assert set(res) >= {"gradable", "score", "message", "tests"} and 0 <= res["score"] <= 1, name
            assert all(set(t) >= {"name", "points", "max_points", "message"} for t in res["tests"]), name
            assert res["gradable"] is True, (name, res["message"])
            assert "sandbox landlock" in run["stdout"], run["stdout"][:400]

    def test_a_forger_gets_nothing_and_leaves_nothing_running(self, graded):
        res, run = graded["forger"]
        assert res["score"] == 0 and "flagged for review" in res["message"] and "outside its folder" in run["stdout"]
        assert graded["_last"] == graded[list(uploads())[-1]][0]    # the last job's own results, 3 s later

    def test_honest_full_marks(self, graded):
        res, _ = graded["honest"]
        assert res["score"] == 1.0
        assert len(res["tests"]) == len(harness.release_cells(RELEASE))
        assert all(t["points"] == t["max_points"] for t in res["tests"])

    def test_mistake_loses_its_points_with_its_hint(self, graded):
        res, _ = graded["mistake"]
        by = {t["name"]: t for t in res["tests"]}
        assert all(by[c]["points"] == 0 for c in MISTAKE.must_fail)
        assert any(MISTAKE.hint.lower() in by[c]["message"].lower() for c in MISTAKE.must_fail)
        assert 0 < res["score"] < 1

    def test_delegation_and_tampering(self, graded):
        res, run = graded["delegation"]
        by = {t["name"]: t for t in res["tests"]}
        assert all(by[c]["points"] == 0 for c in DELEGATION.must_fail) and res["score"] < 1
        assert DELEGATION.flag in run["stdout"] and "flagged for review" in res["message"]
        res, run = graded["tampering"]
        assert res["score"] == 0 and "flagged for review" in res["message"] and "tampering" in run["stdout"]

    def test_broken_file(self, graded):
        res, _ = graded["broken"]
        assert res["score"] == 0 and "could not be graded" in res["message"]
        text = json.dumps(res)
        assert "Traceback" not in text and "hidden test:" not in text

    def test_peeking_gets_its_points_and_reads_nothing_of_the_hidden_checks(self, graded):
        res, _ = graded["peeking"]
        assert res["score"] == 1.0, res["tests"]           # published seeds: the known answers pass
        text = json.dumps([res["message"], [t["message"] for t in res["tests"]]])
        assert "awb_grader" not in text and "hidden test:" not in text
        assert not [ln for ln in peeking.hidden_text(A) if ln in text]
