"""Writing notebooks: jupytext's percent format carries every notebook losslessly, and
tools/nbcells.py completes what an author leaves out (nbgrader's metadata, locked cells)."""

import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import nbcells  # noqa: E402

ALL = sorted(REPO.glob("lectures/*.ipynb")) + sorted(REPO.glob("solutions/*/*.ipynb")) \
    + sorted(REPO.glob("exercises/*/*.ipynb"))


def _content(nb):
    return [(c.cell_type, c.source, c.metadata.get("nbgrader"), c.metadata.get("tags")) for c in nb.cells]


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(REPO)))
def test_percent_script_round_trip_is_lossless(path):
    """What CONTRIBUTING.md tells authors to do (ipynb -> py:percent -> ipynb) keeps every cell's
    type, source, nbgrader metadata and tags."""
    nb = nbformat.read(path, as_version=4)
    back = jupytext.reads(jupytext.writes(nb, fmt="py:percent"), fmt="py:percent")
    assert _content(back) == _content(nb)


def test_update_keeps_outputs_and_changes_only_the_edit(tmp_path):
    """`jupytext --update` puts an edited script back into a lecture without losing its outputs."""
    lecture = REPO / "lectures" / "00_tensor_shapes.ipynb"
    nb = nbformat.read(lecture, as_version=4)
    out = tmp_path / lecture.name
    nbformat.write(nb, out)
    script = tmp_path / "00_tensor_shapes.py"
    script.write_text(jupytext.writes(nb, fmt="py:percent").replace("# ## 1.", "# ## One.", 1))
    subprocess.run([sys.executable, "-m", "jupytext", "--to", "ipynb", "--update", str(script), "-o", str(out), "-q"],
                   check=True)
    new = nbformat.read(out, as_version=4)
    diff = [i for i, (a, b) in enumerate(zip(nb.cells, new.cells)) if a.source != b.source]
    assert len(new.cells) == len(nb.cells)
    assert len(diff) == 1 and new.cells[diff[0]].source.startswith("## One.")
    assert [c.get("outputs") for c in new.cells] == [c.get("outputs") for c in nb.cells]
    assert [c.id for c in new.cells] == [c.id for c in nb.cells]


def test_sync_completes_nbgrader_metadata(tmp_path, monkeypatch):
    """An author marks only answer cells (solution, grade_id) and test cells (grade, grade_id,
    points); sync gives them nbgrader's other fields and locks every other cell, under unique ids."""
    rel = Path("solutions/04_queries_keys_values/04_queries_keys_values.ipynb")
    nb = nbformat.read(REPO / rel, as_version=4)
    full = [dict(c.metadata.get("nbgrader", {})) for c in nb.cells]
    for cell in nb.cells:
        meta = cell.metadata.pop("nbgrader")
        if meta["solution"]:
            cell.metadata["nbgrader"] = {"solution": True, "grade_id": meta["grade_id"]}
        elif meta["grade"]:
            cell.metadata["nbgrader"] = {"grade": True, "grade_id": meta["grade_id"], "points": meta["points"]}
    monkeypatch.setattr(nbcells, "ROOT", tmp_path)
    (tmp_path / rel).parent.mkdir(parents=True)
    nbformat.write(nb, tmp_path / rel)
    assert nbcells.sync([tmp_path / rel]) == [tmp_path / rel]
    done = [c.metadata["nbgrader"] for c in nbformat.read(tmp_path / rel, as_version=4).cells]
    for want, got in zip(full, done):
        if want["solution"] or want["grade"]:
            assert got == want
        else:
            assert got == {**want, "grade_id": got["grade_id"]} and got["grade_id"].startswith("ro-")
    assert len({m["grade_id"] for m in done}) == len(done)
    assert nbcells.sync([tmp_path / rel]) == []


@pytest.mark.slow
def test_the_documented_recipe_stores_fresh_outputs(tmp_path):
    """CONTRIBUTING's two steps (``--update``, then ``--execute`` on the notebook) store the edited
    code's output under the old cell ids; ``--update --execute`` in one command keeps the old output."""
    lecture = tmp_path / "lectures" / "NN_tiny.ipynb"
    lecture.parent.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Tiny"),
                                         nbformat.v4.new_code_cell('print("before")')])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, lecture)
    jt = [sys.executable, "-m", "jupytext", "-q"]
    subprocess.run([*jt, "--execute", "--run-path", str(lecture.parent), str(lecture)], check=True)
    ids = [c.id for c in nbformat.read(lecture, as_version=4).cells]
    script = tmp_path / "tiny.py"
    subprocess.run([*jt, "--to", "py:percent", str(lecture), "-o", str(script)], check=True)
    script.write_text(script.read_text().replace('print("before")', 'print("after")'))

    one_step = tmp_path / "one_step.ipynb"
    one_step.write_bytes(lecture.read_bytes())
    subprocess.run([*jt, "--to", "ipynb", "--update", str(script), "-o", str(one_step), "--execute",
                    "--run-path", str(lecture.parent)], check=True)
    subprocess.run([*jt, "--to", "ipynb", "--update", str(script), "-o", str(lecture)], check=True)
    subprocess.run([*jt, "--execute", "--run-path", str(lecture.parent), str(lecture)], check=True)

    def printed(path):
        return nbformat.read(path, as_version=4).cells[1].outputs[0]["text"]

    assert printed(lecture) == "after\n" and [c.id for c in nbformat.read(lecture, as_version=4).cells] == ids
    assert printed(one_step) == "before\n", "jupytext now refreshes outputs in one step: simplify CONTRIBUTING"
