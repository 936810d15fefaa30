"""Every lecture runs top to bottom (nbclient) and has what every lecture promises."""

import os
import re
import time
import warnings
from pathlib import Path

import nbformat
import pytest
from conftest import small_corpus
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
LECTURES = sorted((REPO / "lectures").glob("*.ipynb"))
SHARED_DATA = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.stem)
def test_lecture_structure(path):
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "lectures are stored with outputs"
    assert "ipywidgets" in code, "at least one widget where exploring beats reading"
    assert "What you should now be able to do" in text
    assert f"exercises/{path.stem}/{path.stem}.ipynb" in text, "ends with a pointer to its exercise"
    assert os.path.getsize(path) < 3_000_000, "keep stored outputs small"


# a cell that draws with matplotlib: what must leave a picture in the stored notebook
PLOTS = re.compile(r"plt\.(show|subplots|figure|plot|imshow|bar|barh|scatter)\b|"
                   r"\.(plot|imshow|bar|barh|hist|scatter|matshow|pcolormesh)\(|attention_heatmap\(|heatmap_grid\(")
PICTURES = {"image/png", "image/svg+xml", "application/vnd.jupyter.widget-view+json"}


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.stem)
def test_every_plotting_cell_is_stored_with_its_picture(path):
    """A lecture is read on GitHub from its stored outputs: every cell that draws holds an image (or, for a
    widget, its view). Executing with MPLBACKEND=Agg (the Makefile's) stores none: execute lectures with
    matplotlib's inline backend (`env -u MPLBACKEND jupytext --execute ...`, CONTRIBUTING.md)."""
    nb = nbformat.read(path, as_version=4)
    missing = []
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code" or not PLOTS.search(c.source):
            continue
        kinds = {k for o in c.get("outputs", []) for k in o.get("data", {})}
        if not kinds & PICTURES:
            missing.append(f"cell {i} ({c.source.splitlines()[0][:50]})")
    assert not missing, f"{path.name}: plotting cells stored without a picture: {missing}"


def _slowest_cells(nb, n=3) -> str:
    """The ``n`` slowest cells (index, seconds, first line), from the timing nbclient records."""
    from datetime import datetime

    times = []
    for i, c in enumerate(nb.cells):
        ex = c.get("metadata", {}).get("execution", {})
        start, end = ex.get("iopub.status.busy"), ex.get("iopub.status.idle")
        if start and end:
            dt = (datetime.fromisoformat(end.replace("Z", "+00:00"))
                  - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()
            times.append((dt, i, c.source.splitlines()[0][:60] if c.source else ""))
    return "; ".join(f"cell {i} {dt:.1f} s ({line})" for dt, i, line in sorted(times, reverse=True)[:n])


@pytest.mark.slow
@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.stem)
def test_lecture_executes(path, record_property, tmp_path):
    nb = nbformat.read(path, as_version=4)
    env_before = dict(os.environ)
    os.environ["AWB_SMOKE"] = "1"  # notebooks that train pick their tiny test configuration
    # the corpus: the real one where ../shared has it, else a small one made here, read through the
    # same loading code (attention_workbook.data.load_text, $AWB_CORPUS): a fresh clone offline passes
    if SHARED_DATA.exists():
        os.environ.setdefault("AWB_TINYSHAKESPEARE", str(SHARED_DATA))
    elif not os.environ.get("AWB_TINYSHAKESPEARE"):
        os.environ.setdefault("AWB_CORPUS", str(small_corpus(tmp_path)))
    try:
        t0 = time.perf_counter()
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        seconds = time.perf_counter() - t0
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    record_property("seconds", round(seconds, 1))
    print(f"\n{path.stem}: executed in {seconds:.1f} s")
    if seconds > 120:   # (no lecture takes this long here: say which cells did, from nbclient's timing)
        warnings.warn(f"{path.stem} took {seconds:.0f} s; slowest cells: {_slowest_cells(nb)}")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
