"""Run a solution notebook's code in-process, as a learner's kernel would under grading: the one
harness of the fast check tests (test_checks*, test_visible_hints, test_battery).

Plain and answer cells run in notebook order in one namespace (``__name__ == "__main__"``), with
``NBGRADER_EXECUTION`` set (long demos skip, as under grading), the notebook's folder as the
working directory and every Python warning turned on (as with PYTHONWARNINGS=always). The setup
cell and the battery's cell are left out. ``overrides`` replace answer cells (a catalogued mistake
or alternative); test cells run their visible part, their hidden part, or both.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import re
import warnings
from dataclasses import dataclass
from functools import lru_cache

import nbformat

from attention_workbook.checks import CheckFailed
from awb_grader.core.course import SOLUTIONS

_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)[ \t]*\n?", re.M)
_HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.S)


@dataclass(frozen=True)
class Cell:
    kind: str            # "plain", "answer" or "test"
    gid: str | None
    source: str          # markers removed (a test cell: visible and hidden parts)
    visible: str = ""    # a test cell's visible part
    hidden: str = ""     # a test cell's hidden part


@dataclass(frozen=True)
class Result:
    message: str | None  # the failure (CheckFailed.plain(), or "Type: text"), None if the cell passed
    stderr: str
    stdout: str


@lru_cache(maxsize=None)
def cells(assignment: str) -> tuple[Cell, ...]:
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    out = []
    for c in nb.cells:
        if c.cell_type != "code" or "awb-setup" in c.metadata.get("tags", []) or "check_all(" in c.source:
            continue
        meta = c.metadata.get("nbgrader", {})
        if meta.get("solution"):
            out.append(Cell("answer", meta["grade_id"], _MARKERS.sub("", c.source)))
        elif meta.get("grade"):
            m = _HIDDEN.search(c.source)
            out.append(Cell("test", meta["grade_id"], _MARKERS.sub("", c.source),
                            visible=_HIDDEN.sub("", c.source), hidden=m.group(1) if m else ""))
        else:
            out.append(Cell("plain", None, c.source))
    return tuple(out)


def answers(assignment: str) -> dict[str, str]:
    """{grade id: code} of the answer cells (the solution, markers removed)."""
    return {c.gid: c.source for c in cells(assignment) if c.kind == "answer"}


def tests(assignment: str) -> dict[str, Cell]:
    return {c.gid: c for c in cells(assignment) if c.kind == "test"}


@contextlib.contextmanager
def grading(assignment: str):
    """The notebook's folder as cwd, NBGRADER_EXECUTION set, every warning on; all restored after."""
    old, cwd = os.environ.get("NBGRADER_EXECUTION"), os.getcwd()
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    os.chdir(SOLUTIONS / assignment)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            yield
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")
        os.chdir(cwd)
        if old is None:
            os.environ.pop("NBGRADER_EXECUTION", None)
        else:
            os.environ["NBGRADER_EXECUTION"] = old


def _compile(src: str, filename: str):
    """compile() with the source kept where ``inspect`` finds it, as IPython keeps a cell's
    (Triton's ``@triton.jit`` reads its function's source)."""
    linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)
    return compile(src, filename, "exec")


def run_test(ns: dict, cell: Cell, part: str = "both") -> Result:
    """Run one test cell's ``part`` ("visible", "hidden" or "both") in ``ns``."""
    src = {"visible": cell.visible, "hidden": cell.hidden, "both": cell.source}[part]
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(_compile(src, f"<cell {cell.gid}>"), ns)  # noqa: S102 - our notebooks
        message = None
    except CheckFailed as e:
        message = e.plain()
    except Exception as e:  # noqa: BLE001 - what nbgrader would show
        message = f"{type(e).__name__}: {e}"
    return Result(message, err.getvalue(), out.getvalue())


def run_tests(assignment: str, ns: dict, gids, part: str = "both") -> dict[str, Result]:
    """Run the test cells ``gids`` of a namespace that ``namespace`` built, as under grading."""
    with grading(assignment):
        return {gid: run_test(ns, tests(assignment)[gid], part) for gid in gids}


def run(assignment: str, overrides: dict[str, str] | None = None, *, only=None,
        part: str = "visible") -> tuple[dict, dict]:
    """(the namespace, {test cell id: Result}) after the whole notebook ran with ``overrides``, each
    test cell in its place; ``only`` limits the test cells run (None: all; an empty set: none, answer
    and plain cells only). ``part="split"``: {test cell id: (visible part's Result, hidden part's
    Result)}, the hidden part run after the visible one even where that failed (what each part alone
    says; :func:`whole` is what the cell as a whole said)."""
    overrides = overrides or {}
    ns: dict = {"__name__": "__main__"}
    results: dict = {}
    with grading(assignment):
        for i, cell in enumerate(cells(assignment)):
            if cell.kind == "test":
                if only is None or cell.gid in only:
                    if part == "split":
                        results[cell.gid] = (run_test(ns, cell, "visible"), run_test(ns, cell, "hidden"))
                    else:
                        results[cell.gid] = run_test(ns, cell, part)
                continue
            src = overrides.get(cell.gid, cell.source) if cell.kind == "answer" else cell.source
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    exec(_compile(src, f"<cell {cell.gid or i}>"), ns)  # noqa: S102 - our notebooks
            except Exception:  # with a wrong answer, later cells may fail too, as in a notebook
                if not overrides:
                    raise
    return ns, results


def whole(visible: Result, hidden: Result) -> Result:
    """What a test cell run as a whole (its visible part, then its hidden part) says, from its two
    parts run one after the other (``run(..., part="split")``): the hidden part runs only where the
    visible one passed."""
    if visible.message is not None:
        return visible
    return Result(hidden.message, visible.stderr + hidden.stderr, visible.stdout + hidden.stdout)


def namespace(assignment: str, overrides: dict[str, str] | None = None) -> dict:
    """The notebook's globals after its plain and answer cells ran (no test cell)."""
    return run(assignment, overrides, only=set())[0]


def message(assignment: str, ns: dict, gid: str, part: str = "both") -> str | None:
    """The failure message of one test cell run in ``ns``, or None if it passes."""
    return run_tests(assignment, ns, [gid], part)[gid].message
