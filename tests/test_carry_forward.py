"""Your own pieces, carried forward: the import cell of exercises 06, 07, 08 and 09 says how to use
your answers from earlier exercises instead of the workbook's (insert a cell below it and paste
the cells it names), and that way works:

* in-process (no kernel): each of them runs every visible and hidden check with the
  solution cells of 05 (and 06) pasted below its import cell exactly as the cell says, and the
  pasted classes are the ones the checks use (08's GPT is built from your TransformerBlock);
* through nbgrader (one autograde): exercise 06 with exercise 05's cells pasted that way gets
  full marks.
"""

import os
import re
import textwrap

import nbformat
import pytest

from attention_workbook.checks import CheckFailed
from awb_grader.core.course import REPO, SOLUTIONS
from awb_grader.devtools.variants import grade_variants, solution_cells, student_notebook

MHA = ("05_multi_head_attention", ("split_heads", "merge_heads", "MultiHeadAttention"))
# what each import cell tells you to paste, in order: (exercise, its answer cells)
RECIPES = {
    "06_transformer_block": (MHA,),
    "07_encoder_decoder": (MHA, ("06_transformer_block", ("sinusoidal_positions", "LayerNorm", "FeedForward",
                                                          "TransformerBlock"))),
    "08_train_a_gpt": (MHA, ("06_transformer_block", ("LayerNorm", "FeedForward", "TransformerBlock"))),
    "09_attention_at_scale": (("05_multi_head_attention", ("split_heads", "merge_heads")),),
}
_HIDDEN_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) HIDDEN TESTS[ \t]*\n?", re.M)


def _import_cell(nb) -> int:
    """Index of the cell that says how to use your own pieces."""
    hits = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "To use YOUR" in c.source]
    assert len(hits) == 1, "one import cell says how to use your own pieces"
    return hits[0]


def pasted_cell(assignment: str, nb) -> str:
    """The cell a learner writes by following the import cell's comment, from the solutions."""
    text = nb.cells[_import_cell(nb)].source
    parts = []
    for exercise, names in RECIPES[assignment]:
        assert f"exercise {exercise[:2]}" in text, f"the import cell does not name exercise {exercise[:2]}"
        cells = solution_cells(exercise)
        for name in names:
            assert re.search(rf"\b{name}\b", text), f"the import cell does not say to paste {name}"
            parts.append(cells[name])
    # lines the comment gives to type in as they are (08: the Block that builds your blocks)
    given = re.search(r"these two lines.*?\n((?:#     .*\n?)+)", text)
    if given:
        parts.append(textwrap.dedent("\n".join(ln[1:] for ln in given.group(1).splitlines())))
    return "\n\n".join(p.rstrip() + "\n" for p in parts)


def with_own_pieces(assignment: str, nb):
    """``nb`` with a code cell below its import cell holding what the comment says to paste."""
    nb = nbformat.from_dict(nb)
    nb.cells.insert(_import_cell(nb) + 1, nbformat.v4.new_code_cell(pasted_cell(assignment, nb)))
    return nb


def run_in_process(nb) -> tuple[dict, dict]:
    """Execute a solution notebook's code cells (hidden tests included) in one namespace, as a
    kernel would: ({test cell id: failure message or None}, namespace)."""
    ns: dict = {"__name__": "__main__"}
    results = {}
    old = os.environ.get("NBGRADER_EXECUTION")
    os.environ["NBGRADER_EXECUTION"] = "autograde"   # the notebooks skip training under grading
    try:
        for cell in nb.cells:
            if cell.cell_type != "code" or "awb-setup" in cell.metadata.get("tags", []):
                continue
            meta = cell.metadata.get("nbgrader", {})
            src = _HIDDEN_MARKERS.sub("", cell.source)
            if not meta.get("grade"):
                exec(compile(src, "<cell>", "exec"), ns)  # noqa: S102 - our notebooks
                continue
            try:
                exec(compile(src, f"<cell {meta['grade_id']}>", "exec"), ns)  # noqa: S102
                results[meta["grade_id"]] = None
            except CheckFailed as e:
                results[meta["grade_id"]] = e.plain()
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")
        if old is None:
            os.environ.pop("NBGRADER_EXECUTION", None)
        else:
            os.environ["NBGRADER_EXECUTION"] = old
    return results, ns


@pytest.mark.parametrize("assignment", sorted(RECIPES))
def test_your_own_pieces_pass_every_check(assignment, monkeypatch):
    monkeypatch.chdir(SOLUTIONS / assignment)
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    results, ns = run_in_process(with_own_pieces(assignment, nb))
    assert results and not {k: v for k, v in results.items() if v}, results
    for _exercise, names in RECIPES[assignment]:
        for name in names:
            assert ns[name].__module__ == "__main__", f"{name} is still the workbook's, not the pasted one"
    if assignment == "08_train_a_gpt":
        model = ns["GPT"](vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=16)
        assert all(type(b) is ns["TransformerBlock"] for b in model.blocks)
        assert all(type(b.attn) is ns["MultiHeadAttention"] for b in model.blocks)


@pytest.mark.slow
def test_06_with_your_own_05_gets_full_marks(tmp_path):
    a = "06_transformer_block"
    release_nb = REPO / "exercises" / a / f"{a}.ipynb"   # equal to a fresh release (tests/test_release.py)
    path = tmp_path / "own-05.ipynb"
    nbformat.write(with_own_pieces(a, student_notebook(release_nb, a)), path)
    graded = grade_variants(a, {}, tmp_path / "course", timeout=60, files={"own-05": path})
    assert graded.total("own-05") == graded.max_total, graded.scores["own-05"]
    autograded = graded.autograded("own-05", a)
    assert any("def split_heads" in c.source for c in autograded.cells), "nbgrader dropped the pasted cell"
