#!/usr/bin/env python3
"""Write notebooks as plain percent-format scripts and turn them into .ipynb (and back).

    python tools/nbsrc.py build SRC.py OUT.ipynb [--nbgrader] [--execute] [--timeout 120]
    python tools/nbsrc.py to-py NB.ipynb OUT.py
    python tools/nbsrc.py sync-links [NB.ipynb ...]      # rewrite badge/setup cells everywhere, and the
                                                          # Colab ids of lecture sections (then `make
                                                          # release` for exercises/)

Cell markers (one per cell, at the start of a line):

    # %% [markdown]                 markdown; body lines start with "# " (stripped)
    # %%                            code
    # %% [badge]                    the Colab badge (generated from pyproject's repository)
    # %% [setup]                    the setup cell (generated; see attention_workbook.config)
    # %% [solution] id=NAME         nbgrader autograded answer: ### BEGIN/END SOLUTION inside
    # %% [tests] id=NAME points=N   nbgrader autograded tests: ### BEGIN/END HIDDEN TESTS inside

With --nbgrader every other cell becomes an nbgrader read-only (locked) cell, so autograding
restores it if a student edits it. The .ipynb is what is committed; this script is a
convenience for writing them, and ``to-py`` turns a committed notebook back into a script.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from attention_workbook import config  # noqa: E402

MARK = re.compile(r"^# %%(?:\s*\[(?P<kind>[a-z ]+)\])?(?P<rest>.*)$")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _badge_path(nb_path: Path) -> str:
    """Repository path the Colab badge opens: solutions point at their student release."""
    rel = nb_path.resolve().relative_to(ROOT)
    if rel.parts[0] == "solutions":
        return str(Path("exercises", *rel.parts[1:]))
    return str(rel)


ANCHOR = re.compile(r'<a id="([A-Za-z0-9_-]+)"></a>')


def _colab_section_ids(nb, path: Path) -> None:
    """In a lecture, name each markdown cell that holds a section anchor (``<a id="scaling">``)
    after it, so a failed check's "Reread" links open the notebook at that section: the cell
    id (JupyterLab: ``NB.ipynb#cell-id=scaling``) and the Colab cell id ``metadata.id``
    (Colab: ``...#scrollTo=scaling``)."""
    if path.resolve().relative_to(ROOT).parts[0] != "lectures":
        return
    for cell in nb.cells:
        m = ANCHOR.search(cell.source) if cell.cell_type == "markdown" else None
        if m:
            cell.id = cell.metadata["id"] = m.group(1)
        elif cell.metadata.get("id") and cell.cell_type == "markdown":
            del cell.metadata["id"]


def _parse_attrs(rest: str) -> dict:
    return dict(re.findall(r"(\w+)=(\S+)", rest))


def parse_percent(text: str) -> list[dict]:
    cells: list[dict] = []
    cur = None
    for line in text.splitlines():
        m = MARK.match(line)
        if m:
            cur = {"kind": (m.group("kind") or "code").strip(), "attrs": _parse_attrs(m.group("rest")), "lines": []}
            cells.append(cur)
            continue
        if cur is None:
            if line.strip():
                raise SystemExit(f"text before the first '# %%' marker: {line!r}")
            continue
        cur["lines"].append(line)
    for c in cells:
        while c["lines"] and not c["lines"][-1].strip():
            c["lines"].pop()
        while c["lines"] and not c["lines"][0].strip():
            c["lines"].pop(0)
        if c["kind"].startswith("markdown"):
            c["lines"] = [re.sub(r"^# ?", "", ln) if ln.startswith("#") else ln for ln in c["lines"]]
    return cells


def _cell_id(seen: set, *parts: str) -> str:
    base = hashlib.sha1("\x00".join(parts).encode()).hexdigest()[:8]
    cid, n = base, 1
    while cid in seen:
        cid, n = f"{base}-{n}", n + 1
    seen.add(cid)
    return cid


def build(src: Path, out: Path, nbgrader: bool) -> nbformat.NotebookNode:
    cells = parse_percent(src.read_text())
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    seen: set = set()
    for c in cells:
        kind, attrs, body = c["kind"], c["attrs"], "\n".join(c["lines"])
        tags = []
        if kind == "badge":
            kind, body, tags = "markdown", config.colab_badge(_badge_path(out)), ["awb-badge"]
        elif kind == "setup":
            kind, body, tags = "code", config.setup_cell_source(), ["awb-setup"]
        if kind.startswith("markdown"):
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell(body)
        cell.id = _cell_id(seen, kind, attrs.get("id", ""), body)
        if tags:
            cell.metadata["tags"] = tags
        if kind in ("solution", "tests") and not nbgrader:
            raise SystemExit(f"[{kind}] cells need --nbgrader ({src})")
        if nbgrader:
            gid = attrs.get("id")
            if kind == "solution":
                meta = {"grade": False, "solution": True, "locked": False}
            elif kind == "tests":
                if "points" not in attrs:
                    raise SystemExit(f"tests cell {gid} needs points=N ({src})")
                meta = {"grade": True, "solution": False, "locked": True, "points": float(attrs["points"])}
                if float(attrs["points"]).is_integer():
                    meta["points"] = int(float(attrs["points"]))
            else:
                meta = {"grade": False, "solution": False, "locked": True}
                gid = gid or f"ro-{cell.id}"
            if not gid:
                raise SystemExit(f"[{kind}] cell needs id=NAME ({src})")
            meta.update({"grade_id": gid, "schema_version": 3, "task": False})
            cell.metadata["nbgrader"] = dict(sorted(meta.items()))
        nb.cells.append(cell)
    _colab_section_ids(nb, out)
    return nb


def execute(nb, cwd: Path, timeout: int) -> None:
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()


def to_py(nb_path: Path) -> str:
    nb = nbformat.read(nb_path, as_version=4)
    out = []
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        meta = cell.metadata.get("nbgrader", {})
        if "awb-badge" in tags:
            out.append("# %% [badge]")
            continue
        if "awb-setup" in tags:
            out.append("# %% [setup]")
            continue
        if meta.get("solution"):
            head = f"# %% [solution] id={meta['grade_id']}"
        elif meta.get("grade"):
            head = f"# %% [tests] id={meta['grade_id']} points={meta['points']}"
        elif cell.cell_type == "markdown":
            head = "# %% [markdown]"
        else:
            head = "# %%"
        if meta and not meta.get("grade_id", "").startswith("ro-") and not (meta.get("solution") or meta.get("grade")):
            head += f" id={meta['grade_id']}"
        out.append(head)
        if cell.cell_type == "markdown":
            out.extend(("# " + ln).rstrip() for ln in cell.source.splitlines())
        else:
            out.append(cell.source)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def sync_links(paths: list[Path]) -> list[Path]:
    """Rewrite badge and setup cells from the repository setting; return the notebooks changed."""
    changed = []
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        before = nbformat.writes(nb)
        for cell in nb.cells:
            tags = cell.metadata.get("tags", [])
            if "awb-badge" in tags:
                cell.source = config.colab_badge(_badge_path(p))
            elif "awb-setup" in tags:
                cell.source = config.setup_cell_source()
        _colab_section_ids(nb, p)
        if nbformat.writes(nb) != before:
            nbformat.write(nb, p)
            changed.append(p)
    return changed


def all_notebooks() -> list[Path]:
    return sorted(ROOT.glob("lectures/*.ipynb")) + sorted(ROOT.glob("solutions/*/*.ipynb"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("src", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--nbgrader", action="store_true")
    b.add_argument("--execute", action="store_true")
    b.add_argument("--timeout", type=int, default=120)
    t = sub.add_parser("to-py")
    t.add_argument("nb", type=Path)
    t.add_argument("out", type=Path)
    s = sub.add_parser("sync-links")
    s.add_argument("paths", nargs="*", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "build":
        a.out.parent.mkdir(parents=True, exist_ok=True)
        nb = build(a.src, a.out, a.nbgrader)
        if a.execute:
            import time

            t0 = time.perf_counter()
            execute(nb, a.out.parent, a.timeout)
            print(f"executed {a.out} in {time.perf_counter() - t0:.1f}s")
        nbformat.validate(nb)
        nbformat.write(nb, a.out)
    elif a.cmd == "to-py":
        a.out.write_text(to_py(a.nb))
    elif a.cmd == "sync-links":
        changed = sync_links(a.paths or all_notebooks())
        for p in changed:
            print(f"updated {p}")
        if any(p.resolve().relative_to(ROOT).parts[0] == "solutions" for p in changed):
            print("solutions/ changed: regenerate exercises/ with `make release` (`make links` does both)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
