"""Colab badges and setup cells come from the one repository setting in pyproject.toml."""

import sys
from pathlib import Path

import nbformat
import pytest

from attention_workbook import config

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import nbsrc  # noqa: E402

NOTEBOOKS = nbsrc.all_notebooks() + sorted(REPO.glob("exercises/*/*.ipynb"))


def test_fallback_constants_match_pyproject():
    assert config.repository() == (config.REPOSITORY, config.BRANCH)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(REPO)))
def test_badge_and_setup_cells_in_sync(path):
    nb = nbformat.read(path, as_version=4)
    tags = [t for c in nb.cells for t in c.metadata.get("tags", [])]
    assert "awb-badge" in tags and "awb-setup" in tags, "every notebook opens with a Colab badge and setup cell"
    rel = path.relative_to(REPO)
    target = str(Path("exercises", *rel.parts[1:])) if rel.parts[0] in ("solutions", "exercises") else str(rel)
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if "awb-badge" in tags:
            assert cell.source == config.colab_badge(target), "run `make links`"
        if "awb-setup" in tags:
            assert cell.source == config.setup_cell_source(), "run `make links`"
            assert "--no-deps" in cell.source


def test_reread_links_point_at_existing_lecture_sections():
    """Hints and exercises cite `lectures/NN_topic.ipynb#anchor`: every one must exist."""
    import re

    anchors = {}
    for p in sorted((REPO / "lectures").glob("*.ipynb")):
        nb = nbformat.read(p, as_version=4)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        anchors[p.name] = set(re.findall(r'<a id="([^"]+)"', text))
    sources = sorted((REPO / "attention_workbook" / "checks").glob("ex*.py")) + sorted(REPO.glob("solutions/*/*.ipynb"))
    broken, seen = [], 0
    for f in sources:
        for lecture, anchor in re.findall(r"lectures/(\d\d_[a-z_]+\.ipynb)#([A-Za-z0-9_-]+)", f.read_text()):
            seen += 1
            if anchor not in anchors.get(lecture, set()):
                broken.append(f"{f.relative_to(REPO)} -> {lecture}#{anchor}")
    assert seen > 20, "the citation pattern found almost nothing: is the regex still right?"
    assert not broken, "\n".join(sorted(set(broken)))
