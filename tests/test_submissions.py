"""Submission inspection and repair, without running any kernel."""

import json

import nbformat
import pytest

from awb_grader.core.course import EXERCISES
from awb_grader.cohort.submissions import inspect_notebook
from awb_grader.core.records import FLAGGED, OK, REPAIRED, UNGRADABLE
from awb_grader.devtools.variants import student_notebook

A = "04_queries_keys_values"
RELEASE = EXERCISES / A / f"{A}.ipynb"


@pytest.fixture
def good(tmp_path):
    p = tmp_path / "good.ipynb"
    nbformat.write(student_notebook(RELEASE, A), p)
    return p


def _grade_ids(path):
    nb = nbformat.read(path, as_version=4)
    return [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]


def test_clean_submission_is_ok(good):
    assert inspect_notebook(good, RELEASE).status == OK


def test_corrupt_and_empty_are_ungradable_with_reason(tmp_path, good):
    bad = tmp_path / "bad.ipynb"
    bad.write_text(good.read_text()[:300])
    ins = inspect_notebook(bad, RELEASE)
    assert ins.status == UNGRADABLE and "invalid JSON" in ins.reasons[0] and not ins.gradable
    empty = tmp_path / "empty.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), empty)
    assert "empty notebook" in inspect_notebook(empty, RELEASE).reasons[0]
    binary = tmp_path / "bin.ipynb"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert inspect_notebook(binary, RELEASE).status == UNGRADABLE


def test_stripped_metadata_is_restored_and_original_kept(tmp_path, good):
    want = _grade_ids(good)
    nb = nbformat.read(good, as_version=4)
    for c in nb.cells:
        c.metadata.pop("nbgrader", None)
    nb.cells.insert(5, nbformat.v4.new_code_cell("print('a scratch cell of my own')"))
    p = tmp_path / "stripped.ipynb"
    nbformat.write(nb, p)
    ins = inspect_notebook(p, RELEASE, originals_dir=tmp_path / "orig")
    assert ins.status == REPAIRED, ins.reasons
    got = [g for g in _grade_ids(p)]
    assert [g for g in got if g] == [g for g in want if g]
    assert (tmp_path / "orig" / "stripped.ipynb").exists()
    original = json.loads((tmp_path / "orig" / "stripped.ipynb").read_text())
    assert not any("nbgrader" in c["metadata"] for c in original["cells"])


def test_missing_answer_cell_is_flagged(tmp_path, good):
    nb = nbformat.read(good, as_version=4)
    for c in nb.cells:
        c.metadata.pop("nbgrader", None)
    nb.cells = [c for c in nb.cells if "def padding_mask" not in c.source]
    p = tmp_path / "s.ipynb"
    nbformat.write(nb, p)
    ins = inspect_notebook(p, RELEASE)
    assert ins.status == FLAGGED and "padding_mask" in " ".join(ins.reasons)


def test_edited_test_cell_and_duplicates_are_reported(tmp_path, good):
    nb = nbformat.read(good, as_version=4)
    test_cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_causal_mask")
    test_cell.source = "pass"
    dup = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax")
    nb.cells.append(nbformat.from_dict(json.loads(json.dumps(dup))))
    nb.cells[-1].id = "dupcell1"
    p = tmp_path / "e.ipynb"
    nbformat.write(nb, p)
    ins = inspect_notebook(p, RELEASE)
    text = " ".join(ins.reasons)
    assert ins.status == FLAGGED and "test_causal_mask" in text and "duplicate" in text
    assert _grade_ids(p).count("softmax") == 1
