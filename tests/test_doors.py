"""One door to a grade: every way an instructor grades runs the same protected core.

``nbgrader autograde`` (and formgrader's button, which calls the same nbgrader API: see
``tests/test_browser.py``), ``python -m awb_grader grade`` and ``python -m awb_grader cohort`` all
load the course's ``nbgrader_config.py``, which plugs ``awb_grader.core.config`` into nbgrader's own
extension points: the sandbox kernel spec and kernel manager, and the autograde preprocessors
(sandbox guard, outside verdict, gradebook flag). The slow test grades six kinds of submission
through the three command-line doors, with the real commands, and finds the same scores and flags.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from awb_grader import catalog
from awb_grader.isolation import sandbox
from awb_grader.core.kernel_manager import SandboxKernelManager
from awb_grader.core.metadata import META, verdict_of
from awb_grader.core.preprocessors.flag_submission import FlagSubmission
from awb_grader.core.preprocessors.sandbox_guard import SandboxGuard
from awb_grader.isolation.sandbox import KERNEL_NAME, UNPROTECTED_ENV, UNPROTECTED_NOTE, Refused
from awb_grader.catalog.shortcuts import SHORTCUTS
from awb_grader.isolation import tiers
from awb_grader.core.course import AUTOGRADER, EXERCISES, REPO, Course
from awb_grader.devtools.variants import student_notebook

import peeking

A = "05_multi_head_attention"
RELEASE = EXERCISES / A / f"{A}.ipynb"
BWRAP = sandbox.bwrap_works()
PROTECTED = tiers.protected()       # bubblewrap, or the Landlock tier where namespaces are refused
FREEZE = "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)   # the kernel stops itself\n"


def door_cases() -> dict[str, nbformat.NotebookNode]:
    """{student: notebook}: honest work, a catalogued mistake, delegation to the workbook's
    reference, encoded tampering with the checks (implementing nothing), a kernel that freezes,
    full marks with a cell that prints the hidden checks' module if it can find it (issue 31)."""
    mistake = catalog.mistakes(A)[0]
    short = {s.id: s for s in SHORTCUTS}
    deleg, tamper = short["mha_subclasses_reference"], short["tamper_encoded_05"]
    first = next(c.metadata["nbgrader"]["grade_id"] for c in nbformat.read(RELEASE, as_version=4).cells
                 if c.metadata.get("nbgrader", {}).get("solution"))
    answers = [c.metadata["nbgrader"]["grade_id"] for c in nbformat.read(RELEASE, as_version=4).cells
               if c.metadata.get("nbgrader", {}).get("solution")]
    return {
        "honest": student_notebook(RELEASE, A),
        "mistake": student_notebook(RELEASE, A, {mistake.cell: mistake.source, **mistake.extra_cells}),
        "delegation": student_notebook(RELEASE, A, dict(deleg.cells)),
        "tampering": student_notebook(RELEASE, A, dict(tamper.cells),
                                      unanswered=tuple(a for a in answers if a not in tamper.cells)),
        "frozen": student_notebook(RELEASE, A, {first: FREEZE}),
        "peeking": peeking.peeking_notebook(RELEASE, A),
    }


# -- the configuration every door loads --------------------------------------------------------
def test_every_nbgrader_app_gets_the_protected_settings(tmp_path):
    from traitlets.config.loader import PyFileConfigLoader

    for cfg in (Course(tmp_path).config(),
                PyFileConfigLoader("nbgrader_config.py", path=str(AUTOGRADER)).load_config()):
        assert cfg.Execute.kernel_name == KERNEL_NAME
        assert cfg.Execute.kernel_manager_class == "awb_grader.core.kernel_manager.SandboxKernelManager"
        assert cfg.KernelManager.transport == "ipc"
        pre = list(cfg.Autograde.autograde_preprocessors)
        ours = "awb_grader.core.preprocessors."
        assert pre[0] == ours + "sandbox_guard.SandboxGuard" and pre[-1] == ours + "flag_submission.FlagSubmission"
        assert pre.index(ours + "sandbox_execute.SandboxExecute") < pre.index(ours + "outside_verdict.OutsideVerdict") \
            < pre.index("nbgrader.preprocessors.SaveAutoGrades")
    # the course root a Course writes holds the same, for plain `nbgrader ...` run inside it
    assert "load_subconfig" in (tmp_path / "nbgrader_config.py").read_text()
    assert (tmp_path / "exchange").is_dir()          # formgrader's exchange folder exists


def test_the_sandbox_kernel_spec_is_found_by_the_kernel_manager():
    km = SandboxKernelManager(kernel_name=KERNEL_NAME)
    assert km.kernel_spec.argv[1:3] == ["-m", "awb_grader.isolation.launcher"]
    assert km.kernel_spec.interrupt_mode == "message"


def test_where_no_tier_can_run_every_door_refuses_unless_told(monkeypatch, tmp_path):
    from awb_grader.isolation import tiers

    monkeypatch.setattr(sandbox, "_BWRAP_OK", False)
    monkeypatch.setattr(tiers, "_BWRAP_WHY", "bubblewrap: Creating new namespace failed: Operation not permitted")
    monkeypatch.setattr(tiers, "_LANDLOCK", ("Landlock: this kernel has none (Linux 5.13 or later ...)", ""))
    monkeypatch.delenv(tiers.FORCE_ENV, raising=False)
    monkeypatch.delenv(UNPROTECTED_ENV, raising=False)
    nb = nbformat.v4.new_notebook()
    guard = SandboxGuard()
    with pytest.raises(Refused, match="Creating new namespace failed.*Landlock: this kernel has none"):
        guard.preprocess(nb, {})
    from awb_grader.cohort.run import run_cohort

    with pytest.raises(Refused, match="unprotected"):
        run_cohort(tmp_path / "nothing.zip", tmp_path / "course", exercises=["05"], say=lambda *a: None)
    assert not (tmp_path / "course" / "gradebook.db").exists()       # refused before grading anything
    monkeypatch.setenv("AWB_SANDBOX_MODE", "bwrap")
    nb, _ = SandboxGuard(unprotected=True).preprocess(nb, {})
    assert nb.metadata[META]["sandbox"] == "limits"
    assert nb.metadata[META]["reasons"] == [UNPROTECTED_NOTE]     # on the grade's own line
    assert os.environ["AWB_SANDBOX_MODE"] == "limits"
    with pytest.raises(Refused, match="not the grading sandbox"):
        SandboxGuard(config=_config(kernel="python3")).preprocess(nb, {})


def test_a_student_nbgrader_created_gets_a_readable_name(tmp_path):
    """nbgrader's autograde creates a student it does not know with no name (formgrader would
    read "None, None"); the last autograde step names them by their id, keeping real names."""
    from nbgrader.api import Gradebook

    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db) as gb:
        gb.add_student("ada")
        gb.add_student("ben", first_name="Ben", last_name="Okafor")
    nb = nbformat.v4.new_notebook()
    for student in ("ada", "ben"):
        FlagSubmission().preprocess(nb, {"nbgrader": {"db_url": db, "student": student,
                                                              "assignment": A, "notebook": A}})
    with Gradebook(db) as gb:
        assert sorted((s.id, s.first_name, s.last_name) for s in gb.students) == [
            ("ada", "", "ada"),
            ("ben", "Ben", "Okafor"),
        ]


def test_a_regrade_without_a_flag_clears_the_gradebooks_flag(tmp_path):
    """nbgrader keeps a regraded submission's flag; the gradebook must say what this grading found
    (a submission whose kernel an accident killed, graded again, is no longer flagged), and a
    flagged one is flagged."""
    from nbgrader.api import Gradebook

    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db) as gb:
        gb.add_assignment(A)
        gb.add_notebook(A, A)
        gb.add_student("ada")
        gb.add_submission(A, "ada")
    info = {"nbgrader": {"db_url": db, "student": "ada", "assignment": A, "notebook": A}}
    seen = []
    for status in ("flagged", "ok", "flagged"):
        nb = nbformat.v4.new_notebook()
        nb.metadata[META] = {"status": status, "reasons": [], "withheld": {}}
        FlagSubmission().preprocess(nb, info)
        with Gradebook(db) as gb:
            seen.append(gb.find_submission_notebook(A, A, "ada").flagged)
    assert seen == [True, False, True]


def _config(kernel: str):
    from traitlets.config import Config

    c = Config()
    c.Execute.kernel_name = kernel
    return c


def test_each_exercise_provides_only_what_its_import_cell_and_checks_use():
    from awb_grader.isolation.provided import provided_modules

    p04, p06, p08 = (provided_modules(a) for a in ("04_queries_keys_values", "06_transformer_block", "08_train_a_gpt"))
    assert {"attention_workbook.checks.ex04", "attention_workbook.checks.battery.ex04"} <= p04
    assert not {"attention_workbook.qkv", "attention_workbook.mha", "attention_workbook.gpt"} & p04
    assert "attention_workbook.mha" in p06          # its import cell loads 05's MultiHeadAttention
    assert "attention_workbook.gpt" in p08 and "attention_workbook.qkv" not in p08


def test_the_provided_files_are_computed_once_per_exercise_for_the_launchers(monkeypatch):
    """The grading process announces the list (SandboxGuard); each kernel's launcher, a new
    process, reads it instead of reading the exercise again; the kernel itself never sees it."""
    from awb_grader.isolation import provided

    monkeypatch.delenv(provided.PROVIDED_ENV, raising=False)
    A4 = "04_queries_keys_values"
    computed = provided.provided_files(A4)
    provided.announce(A4)
    assert os.environ[provided.PROVIDED_ENV].split(os.pathsep) == [A4, *map(str, computed)]
    monkeypatch.setattr(provided, "provided_modules", lambda *a: pytest.fail("computed again"))
    assert provided.provided_files(A4) == computed
    assert provided.PROVIDED_ENV not in sandbox.kernel_env()


@pytest.mark.sandbox
@pytest.mark.skipif(not BWRAP, reason="needs bubblewrap")
def test_the_sandbox_binds_only_what_the_exercise_provides(tmp_path, monkeypatch):
    """A reference the exercise does not provide is not there: delegating to it fails to import.
    Nothing of the hidden checks is there either, in the kernel's sandbox or the replay's (which
    holds the replay's own two files besides): they run only in the grader's process."""
    monkeypatch.setenv("AWB_SANDBOX_MODE", "bwrap")
    cwd = tmp_path / "ada" / "04_queries_keys_values"
    cwd.mkdir(parents=True)
    hidden_file = AUTOGRADER / "awb_grader" / "hidden" / "ex04.py"
    probe = ("import importlib\nfor m in ('attention_workbook.checks.ex04', 'awb_grader.hidden.ex04', "
             "'awb_grader.hidden._adapter', 'attention_workbook.qkv', 'attention_workbook.mha', "
             "'awb_grader.replay_support'):\n"
             "    try:\n        importlib.import_module(m); print('ok', m)\n"
             "    except ImportError:\n        print('missing', m)\n"
             f"try:\n    open({str(hidden_file)!r}).read(); print('read')\nexcept OSError:\n    print('unreadable')\n"
             # the grader's bytecode of what it provides is there, read-only (provided.compile_bytecode)
             "import importlib.util, attention_workbook.checks.ex04 as m\n"
             "pyc = importlib.util.cache_from_source(m.__file__)\n"
             "print('bytecode', open(pyc, 'rb').read(4) == importlib.util.MAGIC_NUMBER)\n"
             "try:\n    open(pyc, 'ab')\nexcept OSError:\n    print('read-only')\n")
    env = {**os.environ, "PYTHONPATH": f"{AUTOGRADER}{os.pathsep}{REPO}"}
    common = ["ok attention_workbook.checks.ex04", "missing awb_grader.hidden.ex04",
              "missing awb_grader.hidden._adapter", "missing attention_workbook.qkv", "missing attention_workbook.mha"]
    for ro, last in (((), ["missing awb_grader.replay_support"]),                    # the kernel's sandbox
                     (sandbox.REPLAY_FILES, ["ok awb_grader.replay_support"])):     # the replay's
        cmd = sandbox.sandbox_command([sys.executable, "-c", probe], str(cwd), env=env, ro=ro)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout.split("\n")
        assert out[:9] == [*common, *last, "unreadable", "bytecode True", "read-only"], out


PRODUCT = sorted((REPO / "autograder" / "awb_grader").rglob("*.py"))      # the grading core
FORBIDDEN = {
    "namespace, mount or capability code of our own": re.compile(r"\bctypes\b|CLONE_NEW|\bprctl\b|\bunshare\("),
    "a dependency's internals patched": re.compile(
        r"sys\.modules\[[^\]]*\]\s*=|\b(api|common|manager|kernelspec|jsonschema|nbgrader|jupyter_client)\.\w+\s*=[^=]"),
    "a private method of a dependency overridden": re.compile(r"def _async_wait|def _create_environment"),
}


@pytest.mark.parametrize("what", list(FORBIDDEN))
def test_no_jail_or_patch_of_a_dependency_in_the_product(what):
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()}" for p in PRODUCT
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if FORBIDDEN[what].search(line) and not line.lstrip().startswith("#")]
    assert hits == [], what


def test_the_forbidden_patterns_would_find_what_was_there():
    """The scan above can fail: it finds the lines this product used to hold."""
    old = ["_LIBC = ctypes.CDLL(None, use_errno=True)", '_sys("unshare", CLONE_NEWPID | CLONE_NEWNS)',
           "api.get_alembic_version = get_alembic_version", "sys.modules[name] = stand_in",
           "common.jsonschema = _SchemaCheckedOnce(common.jsonschema)",
           "    async def _async_wait(self, pollinterval: float = 0.1) -> None:"]
    assert all(any(rx.search(line) for rx in FORBIDDEN.values()) for line in old)


# -- the doors, graded for real -----------------------------------------------------------------
def _run(cmd, cwd, timeout=900, **env):
    full = {**os.environ, "PYTHONPATH": f"{AUTOGRADER}{os.pathsep}{REPO}",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    return subprocess.run(cmd, cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)


def _gradebook(root: Path) -> dict[str, tuple[float, bool]]:
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for sub in gb.assignment_submissions(A):
            nb = sub.notebooks[0]
            out[sub.student.id] = (float(sum(g.score for g in nb.grades)), bool(nb.flagged))
    return out


def grade_through_every_door(tmp: Path, timeout: int = 20) -> dict[str, dict[str, dict]]:
    """{door: {student: {score, flagged, reasons}}} for :func:`door_cases` graded by
    ``nbgrader autograde``, ``python -m awb_grader grade`` and ``... cohort``."""
    cases = door_cases()
    lms = tmp / "lms.zip"
    with zipfile.ZipFile(lms, "w") as zf:
        for student, nb in cases.items():
            zf.writestr(f"{student}_{A}.ipynb", nbformat.writes(nb))
    doors: dict[str, dict[str, dict]] = {}

    # 1. plain nbgrader, in a course root (what formgrader's button runs too)
    root = tmp / "nbgrader"
    course = Course(root)
    course.generate_assignment(A)
    for student, nb in cases.items():
        p = tmp / f"{student}.ipynb"
        nbformat.write(nb, p)
        course.submit(student, A, p)
    res = _run(["nbgrader", "autograde", A], root, AWB_CELL_TIMEOUT=str(timeout))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    doors["nbgrader autograde"] = {
        s: {"score": sc, "flagged": fl,
            "reasons": verdict_of(root / "autograded" / s / A / f"{A}.ipynb").get("reasons", [])}
        for s, (sc, fl) in _gradebook(root).items()}

    # 2-3. the grader's commands (one exercise, and the whole-cohort command)
    for door, cmd in (("grade", ["grade", "05", str(lms)]),
                      ("cohort", ["cohort", str(lms), "--exercises", "05", "--workers", "2"])):
        root = tmp / door
        res = _run([sys.executable, "-m", "awb_grader", *cmd, "--course", str(root), "--timeout", str(timeout)], tmp)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        with open(root / "flags.csv") as fh:
            flags = {r["student"]: r for r in csv.DictReader(fh)}
        books = _gradebook(root)
        doors[door] = {s: {"score": float(r["score"]), "flagged": books[s][1],
                           "reasons": [x for x in r["reasons"].split(" | ") if x], "status": r["status"]}
                       for s, r in flags.items()}
        assert {s: v["score"] for s, v in doors[door].items()} == {s: v[0] for s, v in books.items()}
    return doors


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.xdist_group("cohort")
@pytest.mark.skipif(not PROTECTED, reason="no isolation tier can run here: every door refuses (tested above)")
def test_every_door_gives_the_same_scores_and_flags(tmp_path):
    doors = grade_through_every_door(tmp_path)
    first = doors["nbgrader autograde"]
    full = catalog_max()
    assert first["honest"] == {"score": full, "flagged": False, "reasons": []}
    assert 0 < first["mistake"]["score"] < full and not first["mistake"]["flagged"]
    assert first["delegation"]["flagged"] and first["delegation"]["score"] < full
    assert any("not the student's own work" in r for r in first["delegation"]["reasons"])
    assert first["tampering"]["score"] == 0 and first["tampering"]["flagged"]
    assert any(r.startswith("tampering:") for r in first["tampering"]["reasons"])
    assert first["frozen"]["score"] == 0 and first["frozen"]["flagged"]
    assert any("kernel stopped answering" in r for r in first["frozen"]["reasons"])
    assert first["peeking"] == {"score": full, "flagged": False, "reasons": []}
    # what the peeking student reads (its notebook's outputs, and the feedback the two grader
    # commands generate) holds nothing of the hidden checks: it found no hidden module
    secret = peeking.hidden_text(A)
    for door, root in (("nbgrader autograde", tmp_path / "nbgrader"), ("grade", tmp_path / "grade"),
                       ("cohort", tmp_path / "cohort")):
        nb = nbformat.read(root / "autograded" / "peeking" / A / f"{A}.ipynb", as_version=4)
        shown = [json.dumps(c.get("outputs", [])) for c in nb.cells if c.cell_type == "code"]
        assert "no hidden module in this process" in shown[-1], door        # what the last cell printed
        if door != "nbgrader autograde":
            shown.append(html.unescape((root / "feedback" / "peeking" / A / f"{A}.html").read_text()))
        leaked = [s for s in secret if any(s in text for text in shown)]
        assert not leaked, (door, leaked[:5])
    for door in ("grade", "cohort"):
        for student, got in doors[door].items():
            want = first[student]
            assert (got["score"], got["flagged"], got["reasons"]) == (
                want["score"],
                want["flagged"],
                want["reasons"],
            ), (door, student)
            assert got["status"] == ("flagged" if want["flagged"] else "ok"), (door, student)


def catalog_max() -> float:
    nb = nbformat.read(RELEASE, as_version=4)
    return float(sum(c.metadata["nbgrader"].get("points", 0) for c in nb.cells
                     if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")))


if __name__ == "__main__":      # print the table for the README: python tests/test_doors.py
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        got = grade_through_every_door(Path(tmp))
    students = list(door_cases())
    print("| door | " + " | ".join(students) + " |")
    print("|---|" + "---|" * len(students))
    for door, per in got.items():
        print(
            f"| `{door}` | "
            + " | ".join(
                f"{per[s]['score']:g}/{catalog_max():g}{', flagged' if per[s]['flagged'] else ''}" for s in students
            )
            + " |"
        )
