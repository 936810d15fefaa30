"""Two submissions that go after the hidden checks themselves (issue 31), for the door tests.

* **peeking**: a full-marks submission whose first answer cell also defines ``_peek()``: it walks
  ``sys.modules`` for an imported module whose name contains "hidden" and ends in "exNN" and
  returns that module's source; an extra ungraded cell at the end prints it. When the hidden
  checks ran in the student's kernel, that printed their code, seeds and oracles into the
  feedback.
* **known answers**: one graded function answers right only on the inputs the *published* checks
  send it (visible and hidden: their seeds are in the repository) and is wrong everywhere else
  (a catalogued mistake). Graded with the published seeds it gets full marks; graded by a build
  with new seeds (``--seeds``: ``harness.reseed_text``) its hidden checks send other inputs and
  it loses those cells.

:func:`hidden_text` lists what of ``awb_grader/hidden/`` must never reach a student.
"""

from __future__ import annotations

import ast
import re

import nbformat
import nbrun
from awb_grader import catalog
from awb_grader.core.course import AUTOGRADER, SOLUTIONS, solution_cells
from awb_grader.devtools.variants import student_notebook

PEEK = '''


def _peek():
    import sys
    for name, mod in list(sys.modules.items()):
        if "hidden" in name and name.endswith("ex{nn}"):
            with open(mod.__file__) as fh:
                return fh.read()
    return "no hidden module in this process"
'''

KEY = '''import hashlib
import torch


def _known_key(*args):
    h = hashlib.sha256()
    for a in args:
        if isinstance(a, torch.Tensor):
            t = a.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(bytes(t.reshape(-1).view(torch.uint8).tolist()))
        else:
            h.update(repr(a).encode())
    return h.hexdigest()[:20]
'''


# the key the submission computes, from the very code it runs (``KEY``)
_KEY_NS: dict = {}
exec(KEY, _KEY_NS)  # noqa: S102 - the test's own source text
_known_key = _KEY_NS["_known_key"]


def _params(source: str, name: str) -> tuple[str, list[str]]:
    """(the parameter list as written, the parameter names) of function ``name`` in ``source``."""
    fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.unparse(fn.args), [a.arg for a in fn.args.args]


def published_inputs(assignment: str, name: str) -> set[str]:
    """The keys of every input the published checks (visible and hidden) hand to ``name`` when
    they check the reference solution, in this process (``tests/nbrun.py``)."""
    ns = nbrun.namespace(assignment)
    real = ns[name]
    _, names = _params(solution_cells(assignment)[name], name)
    seen: set[str] = set()

    def recording(*args, **kwargs):
        bound = dict(zip(names, args), **kwargs)
        seen.add(_known_key(*[bound.get(n) for n in names]))
        return real(*args, **kwargs)

    recording.__name__ = recording.__qualname__ = name
    recording.__module__ = "__main__"
    ns[name] = recording
    nbrun.run_tests(assignment, ns, list(nbrun.tests(assignment)), "both")
    return seen


def known_answers_cell(assignment: str, name: str, mistake_id: str) -> str:
    """The answer cell of ``name``: the reference on the published checks' inputs, the
    catalogued mistake ``mistake_id`` on any other."""
    right = solution_cells(assignment)[name]
    wrong = next(m for m in catalog.mistakes(assignment) if m.id == mistake_id)
    assert wrong.cell == name and not wrong.extra_cells
    signature, names = _params(right, name)
    known = sorted(published_inputs(assignment, name))
    rename = re.compile(rf"\bdef {name}\(")
    return "\n\n".join([
        KEY,
        rename.sub(f"def _right_{name}(", right),
        rename.sub(f"def _wrong_{name}(", wrong.source),
        f"_KNOWN = {set(known)!r}",
        f"def {name}({signature}):\n"
        f"    args = ({', '.join(names)},)\n"
        f"    if _known_key(*args) in _KNOWN:          # an input the published checks send\n"
        f"        return _right_{name}(*args)\n"
        f"    return _wrong_{name}(*args)\n",
    ])


def peeking_notebook(release, assignment: str, known: tuple[str, str] | None = None) -> nbformat.NotebookNode:
    """The peeking submission (full marks, plus ``_peek`` and a last cell that prints it); with
    ``known`` = (function, catalogued mistake), that function answers from the published inputs."""
    first = next(iter(solution_cells(assignment)))
    cells = {first: solution_cells(assignment)[first] + PEEK.replace("{nn}", assignment[:2])}
    if known:
        cells[known[0]] = known_answers_cell(assignment, *known) + (PEEK.replace("{nn}", assignment[:2])
                                                                   if known[0] == first else "")
    nb = student_notebook(release, assignment, cells)
    nb.cells.append(nbformat.v4.new_code_cell("print(_peek())"))
    return nb


def hidden_text(assignment: str) -> list[str]:
    """What of ``awb_grader/hidden/`` must not reach a student: every line of code of the
    exercise's hidden checks and their shared modules (longer than 25 characters), their
    docstrings' lines, and every seed they use (``rng(N)``)."""
    notebook = (SOLUTIONS / assignment / f"{assignment}.ipynb").read_text()   # (lines it shares: not secret)
    out = []
    for f in (f"ex{assignment[:2]}.py", "_base.py", "_adapter.py"):
        src = (AUTOGRADER / "awb_grader" / "hidden" / f).read_text()
        out += [ln.strip() for ln in src.splitlines()
                if len(ln.strip()) > 25 and not ln.strip().startswith("#") and ln.strip() not in notebook]
        out += re.findall(r"\brng\(\d+\)", src)
    return sorted(set(out))
