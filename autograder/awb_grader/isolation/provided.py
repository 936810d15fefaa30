"""What an exercise provides on purpose: the helper modules its grading sandbox binds.

Every learner installs the whole helper package ``attention_workbook``, which holds the
reference implementation of nearly every graded item. The grading sandbox binds only the part
of it that an exercise provides on purpose: the modules its release notebook imports (its
import cell, e.g. 06's ``attention_workbook.mha`` for a learner who did not carry their own
``MultiHeadAttention`` forward), its visible checks and battery, and what the outside verdict's
replay process imports beside the student's code; then everything those modules import in turn.
The hidden checks run only in the grader's process: nothing of theirs is bound. Anything else (04's
``attention_workbook.qkv``, 08's ``attention_workbook.gpt`` ...) is simply not there: a
submission that delegates a graded item to it fails to import it, in the kernel and in the
outside verdict's replay alike.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
from pathlib import Path

from ..core.course import AUTOGRADER, EXERCISES, REPO
from ..core.metadata import cell_meta

PACKAGE = "attention_workbook"
ROOT = REPO / PACKAGE


def _module_file(name: str) -> Path | None:
    """The file of module ``name`` of the package (a package's ``__init__.py``), if any."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = REPO.joinpath(*parts)
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    return None


def _imports(source: str, module: str | None = None, is_package: bool = False, top_level: bool = False) -> set[str]:
    """Every module of the package that ``source`` imports (anywhere, functions included; only
    at module level with ``top_level``)."""
    out: set[str] = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    here = (module.split(".") if module else []) + ([] if not is_package or not module else ["__init__"])
    for node in (tree.body if top_level else ast.walk(tree)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level and module:
                anchor = here[:-node.level]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}   # ``from pkg import submodule``
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.add(node.args[0].value)                       # importlib.import_module("attention_workbook.x")
    return {m for m in out if m == PACKAGE or m.startswith(PACKAGE + ".")}


def _replay_imports() -> set[str]:
    """What the outside verdict's replay process imports of the package at module level: its
    own imports and ``replay_support``'s (the operations and checker objects it runs beside the
    student's code). The hidden checks themselves run only in the grader's process and are
    never bound into a sandbox, so nothing they import is provided for them."""
    grader = AUTOGRADER / "awb_grader"
    out = _imports((grader / "replay.py").read_text())       # (its start-up imports are in main())
    out |= _imports((grader / "replay_support.py").read_text(), top_level=True)
    # a checker object of the exercise (``replay_support.maker``) imports its exercise's own
    # checks or battery module, which every exercise provides already (``provided_modules``)
    return out


@functools.lru_cache(maxsize=None)
def provided_modules(assignment: str, release: str | None = None) -> frozenset[str]:
    """The package's modules exercise ``assignment`` provides, closed under their imports:
    what the exercise itself uses (its notebook's imports, its visible checks and battery) with
    every import they make, functions included; what the outside verdict's replay process loads
    for every exercise with the imports those make at module level only (their functions serve
    other exercises)."""
    nn = assignment[:2]
    nb_path = Path(release) if release else EXERCISES / assignment / f"{assignment}.ipynb"
    full = {PACKAGE, f"{PACKAGE}.checks", f"{PACKAGE}.checks.core", f"{PACKAGE}.checks.own",
            f"{PACKAGE}.checks.ex{nn}", f"{PACKAGE}.checks.battery", f"{PACKAGE}.checks.battery.ex{nn}"}
    # the notebook read as plain JSON: nbformat would bring jsonschema's start-up into every caller
    for cell in json.loads(nb_path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code" and not cell_meta(cell).get("solution"):
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            full |= _imports("\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    shared = _replay_imports()
    walked: dict[str, bool] = {}               # module -> walked whole (True) or at module level
    todo = [(m, True) for m in full] + [(m, False) for m in shared]
    while todo:
        m, whole = todo.pop()
        f = _module_file(m)
        if f is None or walked.get(m) is True or (m in walked and not whole):
            continue
        walked[m] = whole
        parts = m.split(".")
        todo += [(".".join(parts[:i]), False) for i in range(1, len(parts))]     # every parent package
        todo += [(dep, whole) for dep in _imports(f.read_text(), m, f.name == "__init__.py", top_level=not whole)]
    return frozenset(walked)


PROVIDED_ENV = "AWB_PROVIDED"    # "<assignment>:<file>:<file>..." set by the grading process


def provided_files(assignment: str, release: str | None = None) -> list[Path]:
    """The files of :func:`provided_modules` (what the sandbox binds of the helper package), each
    with its bytecode (``__pycache__/*.pyc``) where the grader compiled it (:func:`compile_bytecode`).
    A kernel's launcher (a new process per kernel) reads them from ``$AWB_PROVIDED``, which the
    grading process sets once per submission (``SandboxGuard``: :func:`announce`)."""
    given = os.environ.get(PROVIDED_ENV, "")
    if given.split(os.pathsep, 1)[0] == assignment and not release:
        return [Path(p) for p in given.split(os.pathsep)[1:]]
    files = sorted({_module_file(m) for m in provided_modules(assignment, release)})
    if not release:
        compile_bytecode(assignment)
    return files + [pyc for f in files if (pyc := _bytecode(f)).exists()]


def _bytecode(source: Path) -> Path:
    import importlib.util

    return Path(importlib.util.cache_from_source(str(source)))


@functools.lru_cache(maxsize=None)
def compile_bytecode(assignment: str) -> None:
    """Compile (in the grading process, once per exercise) what the sandbox binds for
    ``assignment`` (its provided modules) to bytecode beside the sources,
    where it is missing or older than the source (``compileall``). Sandboxed processes may not
    write (``PYTHONDONTWRITEBYTECODE``) and saw only the ``.py`` files: every kernel and every
    replay compiled each module again. The bytecode is the grader's, of the grader's own files,
    bound read-only like them; Python checks it against the source's time and size and compiles
    the source instead where they differ. Where the checkout is read-only nothing is written,
    and the sandbox compiles as before."""
    import compileall

    for f in (_module_file(m) for m in provided_modules(assignment)):
        if f is not None:
            try:
                compileall.compile_file(str(f), quiet=2)
            except OSError:
                pass


def announce(assignment: str) -> None:
    """Put :func:`provided_files` of ``assignment`` in this process's environment, for the
    kernels it starts (computed once per grading process and exercise)."""
    if assignment_of_name(assignment) and os.environ.get(PROVIDED_ENV, "").split(os.pathsep, 1)[0] != assignment:
        os.environ[PROVIDED_ENV] = os.pathsep.join([assignment, *map(str, provided_files(assignment))])


_EXERCISE = re.compile(r"^\d\d_[A-Za-z0-9_]+$")


def assignment_of_name(name: str) -> str | None:
    """``name`` if it is one of the course's exercises."""
    return name if _EXERCISE.match(name) and (EXERCISES / name / f"{name}.ipynb").exists() else None


def assignment_of(cwd: str | Path) -> str | None:
    """The exercise a grading folder belongs to (``autograded/<student>/<assignment>``), if known."""
    return assignment_of_name(Path(cwd).name)
