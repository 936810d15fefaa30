"""The committed release is what nbgrader generates from solutions/, and the notebooks have
the structure nbgrader and students rely on."""

import re

import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator

from awb_grader.devtools import release
from awb_grader.core.course import EXERCISES, SOLUTIONS, Course, assignments

ASSIGNMENTS = assignments()


def _nb(path):
    return nbformat.read(path, as_version=4)


def _meta(cell):
    return cell.metadata.get("nbgrader", {})


@pytest.fixture(scope="module")
def release_problems() -> list[str]:
    """What differs between the committed release and a fresh one: nbgrader generate_assignment for every
    exercise in one course (each test below reads its exercise's lines)."""
    return release.diff()


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_in_sync(assignment, release_problems):
    problems = [p for p in release_problems if p.startswith(f"exercises/{assignment}/")]
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_graded_items_in_sync(release_problems):
    """attention_workbook/checks/graded.py is what the release's nbgrader metadata says."""
    problems = [p for p in release_problems if not p.startswith("exercises/")]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_nbgrader_metadata_valid(assignment):
    for path in (SOLUTIONS / assignment / f"{assignment}.ipynb", EXERCISES / assignment / f"{assignment}.ipynb"):
        MetadataValidator().validate_nb(_nb(path))  # raises on invalid nbgrader metadata


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_notebook_structure(assignment):
    nb = _nb(SOLUTIONS / assignment / f"{assignment}.ipynb")
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "solutions are stored without outputs"
    prev = None
    n_solution = n_tests = 0
    for cell in nb.cells:
        meta = _meta(cell)
        if meta.get("solution"):
            n_solution += 1
            assert "### BEGIN SOLUTION" in cell.source, f"{meta['grade_id']}: no solution region"
        if meta.get("grade"):
            n_tests += 1
            gid = meta["grade_id"]
            # nbgrader re-adds a deleted test cell after the previous answer/test cell, and
            # crashes if that previous cell is any other kind: keep tests right after them
            assert prev is not None and (_meta(prev).get("solution") or _meta(prev).get("grade")), (
                f"test cell {gid} must directly follow an answer or test cell")
            assert "### BEGIN HIDDEN TESTS" in cell.source, f"{gid}: no hidden tests"
            hidden = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1]
            assert "awb_grader.hidden" in hidden, f"{gid}: hidden logic must live in awb_grader.hidden"
            visible = cell.source.split("### BEGIN HIDDEN TESTS", 1)[0]
            assert visible.strip(), f"{gid}: no visible check before the hidden tests"
            assert meta.get("points", 0) > 0
        prev = cell
    assert n_solution and n_tests
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "★" in text and re.search(r"\d+\s*min", text), "each exercise states difficulty and expected time"
    assert "lectures/" in text, "the exercise links back to its lecture"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_has_no_solutions_or_hidden_tests(assignment):
    nb = _nb(EXERCISES / assignment / f"{assignment}.ipynb")
    text = "\n".join(c.source for c in nb.cells)
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text and "awb_grader" not in text
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


@pytest.mark.slow
@pytest.mark.parametrize("assignment", [ASSIGNMENTS[0], ASSIGNMENTS[-1]])
def test_unsolved_release_fails_validation(assignment, tmp_path):
    """nbgrader's validator (a kernel of the course's spec, outside any grading run) reports failures for
    the unsolved student version: the first exercise and the last (Triton's interpreter). That every
    answer left as its stub fails each of its test cells, in every exercise, is tests/test_checks.py's."""
    from nbgrader.validator import Validator

    cfg = Course(tmp_path / "course").config()
    results = Validator(config=cfg).validate(str(EXERCISES / assignment / f"{assignment}.ipynb"))
    assert results.get("failed"), f"the unsolved release of {assignment} passes validation: {results}"


@pytest.mark.slow
def test_a_kernel_started_outside_a_grading_run_gets_the_tier_that_runs_here(tmp_path, monkeypatch):
    """nbgrader's validator starts a kernel of the course's kernel spec outside any grading run (no
    tier decided, no zygote): the launcher decides the tier itself, and where a new process cannot
    start as the sandbox's uid (the Landlock tier as root, Python under a folder closed to other
    users: pyenv or conda in a 0700 /root) it forks a zygote of its own. Here with the Landlock tier
    forced; before, the launcher assumed bubblewrap and, on a machine without it, the kernel died."""
    from nbgrader.validator import Validator

    from awb_grader.isolation import tiers

    monkeypatch.setenv(tiers.FORCE_ENV, "landlock")
    if tiers.detect().name != "landlock":
        pytest.skip("the Landlock tier cannot run here: " + tiers.detect().describe())
    for var in ("AWB_SANDBOX_MODE", "AWB_ZYGOTE", "AWB_ZYGOTE_TOKEN", "AWB_SANDBOX_UID"):
        monkeypatch.delenv(var, raising=False)
    log = tmp_path / "kernel.log"
    monkeypatch.setenv("AWB_KERNEL_LOG", str(log))
    assignment = "04_queries_keys_values"
    cfg = Course(tmp_path / "course").config()
    results = Validator(config=cfg).validate(str(EXERCISES / assignment / f"{assignment}.ipynb"))
    assert results.get("failed"), f"the unsolved release of {assignment} passes validation: {results}"
    assert "a kernel started outside a grading run: the landlock tier" in log.read_text(), log.read_text()[-2000:]

