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
    assert config.repository() == (config.REPOSITORY, config.RELEASE)


def test_release_is_the_package_version():
    """Colab installs the tag `release`: the package it gets must be the version pyproject names."""
    import re

    import attention_workbook

    version = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert config.RELEASE == f"v{version}"
    assert attention_workbook.__version__ == version


def test_colab_gets_the_release_not_a_branch():
    url, release = config.repository()
    source = config.setup_cell_source()
    assert f'release="{release}"' in source and f'repo="{url}"' in source
    assert 'f"git+{repo}@{release}"' in source
    assert "@main" not in source and "check=True" not in source, "a failed install must not raise CalledProcessError"
    assert f"/blob/{release}/" in config.colab_badge("lectures/00_tensor_shapes.ipynb")
    compile(source, "setup cell", "exec")


def test_sync_links_is_idempotent(tmp_path, monkeypatch):
    """`make links` twice changes nothing the second time (the lead re-runs it after merges)."""
    import shutil

    monkeypatch.setattr(nbsrc, "ROOT", tmp_path)
    for rel in ("lectures/00_tensor_shapes.ipynb", "solutions/04_queries_keys_values/04_queries_keys_values.ipynb"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        nb = nbformat.read(REPO / rel, as_version=4)
        for cell in nb.cells:  # an old notebook: badge and setup cell from another release
            if {"awb-badge", "awb-setup"} & set(cell.metadata.get("tags", [])):
                cell.source = "stale"
        nbformat.write(nb, tmp_path / rel)
    copies = sorted(tmp_path.rglob("*.ipynb"))
    assert nbsrc.sync_links(copies) == copies
    first = [p.read_bytes() for p in copies]
    assert nbsrc.sync_links(copies) == []
    assert [p.read_bytes() for p in copies] == first


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
