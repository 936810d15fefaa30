"""The cohort command: collection by nbgrader's zip_collect with our file-name collector, the
misconception insight, the static tamper scan, the sandbox command line, and (slow) an
idempotent re-run plus late submissions graded without regrading the rest."""

import csv
import os
import re
import zipfile

import nbformat
import pytest

from awb_grader import catalog
from awb_grader.cohort import run as cohort
from awb_grader.verdict import outside as verdict
from awb_grader.isolation import sandbox, tiers
from awb_grader.cohort.collect import DEFAULT_PATTERN, collect
from awb_grader.cohort.summary import misconceptions
from awb_grader.core.records import Record
from awb_grader.core.course import EXERCISES, REPO, Course
from awb_grader.devtools.variants import student_notebook

A = "04_queries_keys_values"
RELEASE = EXERCISES / A / f"{A}.ipynb"


@pytest.mark.parametrize("name,student,file_id", [
    ("ada_04_queries_keys_values.ipynb", "ada", "04_queries_keys_values"),
    ("ada_late_12345_67890_04_queries_keys_values-1.ipynb", "ada", "04_queries_keys_values"),
    ("downloads/ada/04_queries_keys_values.ipynb", "ada", "04_queries_keys_values"),
    ("x/extracted/ada_04_queries_keys_values (1).ipynb", "ada", "04_queries_keys_values"),
    ("ben.smith_05_multi_head_attention.ipynb", "ben.smith", "05_multi_head_attention"),
])
def test_default_pattern_reads_lms_names(name, student, file_id):
    m = re.match(DEFAULT_PATTERN, "/tmp/course/downloaded/04_queries_keys_values/extracted/" + name)
    assert m and m["student_id"] == student and m["file_id"] == file_id


def test_default_pattern_rejects_names_without_an_exercise():
    assert not re.match(DEFAULT_PATTERN, "/tmp/extracted/ada_homework.ipynb")
    assert not re.match(DEFAULT_PATTERN, "/tmp/extracted/notes.txt")


def test_zip_collect_sorts_a_multi_exercise_zip(tmp_path):
    """nbgrader's ZipCollectApp with our collector: each exercise gets its own files, renamed
    files are normalised and noted, a file that names no exercise is reported."""
    z = tmp_path / "lms.zip"
    text = nbformat.writes(student_notebook(RELEASE, A))
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr(f"ada_{A}.ipynb", text)
        zf.writestr(f"ben_late_1_{A} (2).ipynb", text)
        zf.writestr(f"ben_late_1_{A} (1).ipynb", "an older copy")      # LMS duplicates: the latest wins
        zf.writestr("ben_05_multi_head_attention.ipynb", "{}")
        zf.writestr("carl_homework.ipynb", text)
    course = Course(tmp_path / "course", release_dir=EXERCISES)   # read-only use of the committed release
    got = collect(z, tmp_path / "course" / "inbox", course, [A, "05_multi_head_attention"])
    assert set(got.subs[A]) == {"ada", "ben"}
    assert set(got.subs["05_multi_head_attention"]) == {"ben"}
    assert f"ben_late_1_{A} (2).ipynb" in got.renamed[("ben", A)] and "2 files" in got.renamed[("ben", A)]
    assert set(got.renamed) == {("ben", A)}
    assert got.subs[A]["ben"][0].read_text() == text
    assert [u.split("/")[-1] for u in got.unmatched] == ["carl_homework.ipynb"]
    path, ts = got.subs[A]["ada"]
    assert path.name == f"{A}.ipynb" and path.read_text() == text


def test_cells_from_an_older_release_are_unmarked_not_fatal(tmp_path):
    """A notebook downloaded before the exercise changed carries cell ids the release no longer
    has; nbgrader would crash on it (KeyError 'grade_id'): the check unmarks them instead."""
    from awb_grader.cohort.submissions import inspect_notebook
    from awb_grader.core.records import REPAIRED

    nb = student_notebook(RELEASE, A)
    ro = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("ro-"))
    ro.metadata.nbgrader["grade_id"] = "ro-00000000"
    p = tmp_path / "old.ipynb"
    nbformat.write(nb, p)
    ins = inspect_notebook(p, RELEASE, tmp_path / "originals")
    assert ins.status == REPAIRED and "ro-00000000" in ins.reasons[0]
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nbformat.read(p, as_version=4).cells]
    assert "ro-00000000" not in ids and all("nbgrader" not in c.metadata or c.metadata.nbgrader.get("grade_id")
                                            for c in nbformat.read(p, as_version=4).cells)


def test_misconceptions_name_the_catalogued_mistake():
    m = next(x for x in catalog.mistakes(A) if x.id == "softmax_wrong_axis")
    recs = [Record(A, f"s{i}", "x", 25, 30, "ok", [], list(m.must_fail),
                   {c: f"CheckFailed: ... {m.hint} ..." for c in m.must_fail}) for i in range(3)]
    recs.append(Record(A, "ok", "x", 30, 30, "ok"))
    top = misconceptions(recs, A)
    assert top[0]["cell"] in m.must_fail and top[0]["n"] == 3
    assert top[0]["mistakes"][0] == (m.description, 3)


def test_suspicious_code_spots_patched_machinery_only():
    assert verdict.suspicious_code("import torch\ntorch.allclose = lambda *a, **k: True")
    assert verdict.suspicious_code("import numpy as np\nsetattr(np, 'allclose', f)")
    assert verdict.suspicious_code("get_ipython().showtraceback = None\n")
    assert verdict.suspicious_code("import sys\nsys.modules['torch'] = None")
    honest = ("def softmax(x, dim=-1):\n    e = (x - x.amax(dim, keepdim=True)).exp()\n"
              "    return e / e.sum(dim, keepdim=True)\n")
    assert verdict.suspicious_code(honest) == []


def test_sandbox_command_isolates_the_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("AWB_SANDBOX_MODE", "bwrap")
    monkeypatch.setenv("AWB_DB_URL", "postgresql+psycopg2://secret@localhost/db")
    cwd = tmp_path / "autograded" / "ada" / A
    cwd.mkdir(parents=True)
    cmd = sandbox.kernel_command(str(tmp_path / "rt" / "sock" / "k.json"), str(cwd))
    joined = " ".join(cmd)
    assert cmd[:4] == ["timeout", "-s", "KILL", cmd[3]] and "bwrap" in cmd
    for flag in ("--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session", "--as=", "--nproc="):
        assert flag in joined
    binds = [cmd[i + 1] for i, x in enumerate(cmd) if x in ("--bind", "--ro-bind")]
    writable = [cmd[i + 1] for i, x in enumerate(cmd) if x == "--bind"]
    assert writable == [str(cwd), str(tmp_path / "rt" / "sock")]
    assert not any(b.startswith(str(REPO / "solutions")) for b in binds)
    assert str(REPO) not in binds and str(tmp_path) not in binds
    assert "secret" not in joined                   # the gradebook URL never reaches student code


def test_kernel_sockets_fit_a_unix_socket_path_whatever_the_course_root(tmp_path):
    deep = tmp_path / ("x" * 120) / "runtime"
    sockets = sandbox.short_socket_root()
    try:
        env = sandbox.worker_environment(3, deep, sockets / "w3")
        assert len(env["KernelManager.ip"]) + 4 <= sandbox.SUN_PATH_MAX
        assert env["KernelManager.ip"].startswith(str(sockets))
        assert os.environ["AWB_KERNEL_LOG"] == str(deep.resolve() / "kernel.log")   # the log stays with the course
        with pytest.raises(RuntimeError, match="longer than a Unix socket allows"):
            sandbox.worker_environment(3, deep)          # sockets under the deep folder: refused, clearly
    finally:
        import shutil

        shutil.rmtree(sockets, ignore_errors=True)


def _quiet(*args):
    pass


def _cohort_in_fresh_process(source, root, **kw):
    """Run a cohort in a new process, as the `cohort` command does. The sandbox setup edits the
    grading process's environment (JUPYTER_PATH, runtime folder, sandbox settings); in a pytest
    worker that already ran other cohorts those edits pile up, and a run inherited a working
    directory that no longer existed (seen twice in the full suite, never alone)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    # not multiprocessing.Pool: its daemonic workers may not start the cohort's own workers
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(cohort.run_cohort, source, root, **kw).result()


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.xdist_group("cohort")
def test_rerun_is_idempotent_and_late_submissions_are_graded_alone(tmp_path, monkeypatch):
    mk = {m.id: m for m in catalog.mistakes(A)}
    m = mk["sdpa_no_scaling"]
    first = tmp_path / "first.zip"
    with zipfile.ZipFile(first, "w") as zf:
        zf.writestr(f"ada_{A}.ipynb", nbformat.writes(student_notebook(RELEASE, A)))
        zf.writestr(f"dev_{A}.ipynb", nbformat.writes(student_notebook(RELEASE, A, {m.cell: m.source})))
    # A course root deep enough that a kernel socket under it would pass the 107-byte limit of a
    # Unix socket path: under pytest-xdist (tmp_path + "popen-gwN/") the sockets used to live in
    # the shard, nbclient failed at once, nbgrader deleted the autograded folder and the starting
    # sandboxed kernel reported its working directory gone (every submission scored 0, flagged).
    root = tmp_path / "a-course-root-as-deep-as-an-instructor-may-choose" / "course"
    quiet = dict(workers=2, timeout=30, progress=False, say=_quiet, exercises=["04"],
                 unprotected=not tiers.protected())
    r1 = _cohort_in_fresh_process(first, root, **quiet)
    assert sorted(r1.graded_now) == [(A, "ada"), (A, "dev")]
    assert r1.sandbox == (tiers.detect().name if tiers.protected() else "limits")
    assert len(str(root / "shards" / "w0" / "runtime" / "sock" / "kernel-ipc-1")) > sandbox.SUN_PATH_MAX
    scores = {r.student: r.score for r in r1.records}
    assert scores["ada"] == r1.records[0].max_score > scores["dev"]
    assert (root / "summary" / "scores.png").stat().st_size > 1000
    assert "sqrt(d)" in r1.summary                     # the insight names dev's misconception
    assert "summary/index.html" in r1.summary and "lms/canvas_grades.csv" in r1.summary   # says where they are
    csv1 = (root / "grades.csv").read_text()

    r2 = _cohort_in_fresh_process(first, root, **quiet)  # same zip again: nothing to do
    assert r2.graded_now == [] and r2.skipped == 2
    assert (root / "grades.csv").read_text() == csv1

    late = tmp_path / "late.zip"                        # a late student and a corrected resubmission
    with zipfile.ZipFile(late, "w") as zf:
        zf.writestr(f"zoe_{A}.ipynb", nbformat.writes(student_notebook(RELEASE, A)))
        zf.writestr(f"dev_{A}.ipynb", nbformat.writes(student_notebook(RELEASE, A)))
    stamp = (root / "autograded" / "ada" / A / f"{A}.ipynb").stat().st_mtime
    r3 = _cohort_in_fresh_process(late, root, **quiet)
    assert sorted(r3.graded_now) == [(A, "dev"), (A, "zoe")]
    assert (root / "autograded" / "ada" / A / f"{A}.ipynb").stat().st_mtime == stamp   # ada not regraded
    with open(root / "grades.csv") as fh:
        rows = {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh)}
    assert rows == {"ada": scores["ada"], "dev": scores["ada"], "zoe": scores["ada"]}
    page = (root / "summary" / "index.html").read_text()        # the report page is rewritten with zoe
    assert all(f'<tr data-student="{s}"><th>' in page for s in ("ada", "dev", "zoe"))
