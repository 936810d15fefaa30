"""The nbgrader course, driven through nbgrader's own Python API.

A :class:`Course` is one nbgrader course root (``submitted/``, ``autograded/``, ``feedback/``,
the gradebook) whose source directory is the repository's ``solutions/``. Every action goes
through nbgrader (``generate_assignment``, ``autograde``, ``generate_feedback``, its CSV export
plugin); this module only points nbgrader at the right directories and collects verdicts.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def _defer_iri_grammar() -> None:
    """Put off building the IRI grammar of ``rfc3987_syntax`` until an IRI is checked.

    ``import jsonschema`` (which nbformat, and so nbgrader, import) imports ``rfc3987_syntax``
    when it is installed (JupyterLab's dependencies install it), and that module compiles an
    Earley parser for RFC 3987 while it is imported: 1.1 s of CPU here, in every grading worker
    and command, for a format (``iri``) that no notebook or nbgrader schema uses. Here
    jsonschema gets a stand-in whose ``is_valid_syntax`` imports the real module on its first
    call and hands every call to it: the same checks, built only if one is ever made."""
    import importlib
    import importlib.util
    import types

    name = "rfc3987_syntax"
    if name in sys.modules or "jsonschema" in sys.modules:
        return
    try:
        if importlib.util.find_spec(name) is None:
            return
    except (ImportError, ValueError):
        return
    stand_in = types.ModuleType(name, "stand-in: the real module is imported on the first check")
    real = []

    def load():
        if not real:
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
            real.append(importlib.import_module(name))
            sys.modules[name] = real[0]
        return real[0]

    def is_valid_syntax(term, value):
        return load().is_valid_syntax(term, value)

    def missing(attr):              # anything else the module has: from the real one
        if attr.startswith("__"):   # (the import system probes __path__, __spec__, ...)
            raise AttributeError(attr)
        return getattr(load(), attr)

    stand_in.is_valid_syntax = is_valid_syntax
    stand_in.__getattr__ = missing
    sys.modules[name] = stand_in


_defer_iri_grammar()

REPO = Path(__file__).resolve().parents[2]
AUTOGRADER = REPO / "autograder"
CONFIG_FILE = AUTOGRADER / "nbgrader_config.py"
SOLUTIONS = REPO / "solutions"
EXERCISES = REPO / "exercises"


def assignments() -> list[str]:
    """The exercise notebooks the course has (one nbgrader assignment each)."""
    return sorted(p.name for p in SOLUTIONS.iterdir() if (p / f"{p.name}.ipynb").exists())


def ensure_kernel_path() -> None:
    """Hidden test cells import ``awb_grader.hidden``: grading kernels inherit PYTHONPATH."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for needed in (str(AUTOGRADER), str(REPO)):
        if needed not in parts:
            parts.insert(0, needed)
    os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    # nbgrader shells out to `alembic` (gradebook migrations): it must be on PATH even when the
    # virtual environment's python is called directly without activating it.
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "").split(os.pathsep)
    if bindir not in path:
        os.environ["PATH"] = os.pathsep.join([bindir, *path])


class _SchemaCheckedOnce:
    """``jsonschema`` as nbgrader's metadata validator sees it (``nbgraderformat/common.py``), with
    one change: ``validate`` checks a schema and builds its validator once, not once per cell.
    nbgrader validates every cell's nbgrader metadata twice per autograde (and on feedback), and
    ``jsonschema.validate`` checks the schema itself first each time: a fifth of a second per
    notebook here. The validation is the same: the same validator class, the same errors."""

    def __init__(self, module):
        self._module = module
        self._validators: dict = {}

    def __getattr__(self, name):
        return getattr(self._module, name)

    def validate(self, instance, schema, cls=None, *args, **kwargs):
        import json

        if cls is not None or args or kwargs:
            return self._module.validate(instance, schema, cls, *args, **kwargs)
        key = json.dumps(schema, sort_keys=True)
        validator = self._validators.get(key)
        if validator is None:
            cls = self._module.validators.validator_for(schema)
            cls.check_schema(schema)
            validator = self._validators[key] = cls(schema)
        error = self._module.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            raise error


def nbgrader_schema_checked_once() -> None:
    """Install :class:`_SchemaCheckedOnce` in nbgrader (once per process)."""
    from nbgrader.nbgraderformat import common

    if not isinstance(common.jsonschema, _SchemaCheckedOnce):
        common.jsonschema = _SchemaCheckedOnce(common.jsonschema)


def alembic_head() -> str:
    """The revision nbgrader writes into a new gradebook, as ``alembic heads`` prints it (the
    first head), read in this process from nbgrader's own migration scripts."""
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    heads = ScriptDirectory(ALEMBIC_DIR).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"nbgrader's migrations have {len(heads)} heads: {heads}")
    return heads[0]


def nbgrader_alembic_head_once() -> None:
    """A new gradebook records nbgrader's migration head: ``Gradebook()`` asks for it each time
    by running the ``alembic heads`` command in a new Python (2.6 s here, on every course
    root, test course and cohort run). Here it is read once per process, in this process,
    from the same migration scripts (:func:`alembic_head`; ``tests/test_grader_speedups.py``
    compares it with the command's answer); where that fails, nbgrader asks as before."""
    import functools

    from nbgrader import api

    if getattr(api.get_alembic_version, "awb_once", False):
        return
    original = api.get_alembic_version

    @functools.cache
    def get_alembic_version() -> str:
        try:
            return alembic_head()
        except Exception:  # noqa: BLE001 - nbgrader's own way, unchanged
            return original()

    get_alembic_version.awb_once = True
    get_alembic_version.original = original
    api.get_alembic_version = get_alembic_version


@contextmanager
def nbgrader_quirks_silenced():
    """Silence two warnings that nbgrader's own code raises while autograding and that say
    nothing about the submission or the course (each filtered by its message and module):

    * SQLAlchemy 2's ``SAWarning: Object of type <SubmittedAssignment> not in session``:
      ``Gradebook.add_submission`` builds the submission's rows, reads a relationship (an
      autoflush) and only then ``session.add``s them, which it does: nothing is lost;
    * nbformat's ``MissingIDFieldWarning``: the test cell nbgrader adds back when a student
      deleted it (``OverwriteCells.add_missing_cells``) is built without a cell id, which
      nbformat then gives it.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Object of type <Submitted\w+> not in session",
                                module=r"nbgrader\.api")
        warnings.filterwarnings("ignore", message="Cell is missing an id field", module=r"nbformat\.validator")
        yield


@dataclass
class Course:
    root: Path
    release_dir: Path | None = None        # default: the committed exercises/
    db_url: str | None = None              # default: sqlite gradebook.db in root
    timeout: int | None = None             # cell timeout (s); default from the config file
    extra: dict = field(default_factory=dict)  # more traitlets settings {"Class.trait": value}

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        ensure_kernel_path()
        # So an instructor can also run plain `nbgrader ...` commands inside the course root.
        local = self.root / "nbgrader_config.py"
        text = self._local_config_text()
        if not local.exists() or local.read_text() != text:
            local.write_text(text)

    def _local_config_text(self) -> str:
        lines = [f"# Written by awb_grader: the course config plus this course root's paths.",
                 f"load_subconfig({str(CONFIG_FILE)!r})",
                 "c = get_config()",
                 f"c.CourseDirectory.root = {str(self.root)!r}"]
        if self.release_dir:
            lines.append(f"c.CourseDirectory.release_directory = {str(Path(self.release_dir).resolve())!r}")
        if self.db_url:
            lines.append(f"c.CourseDirectory.db_url = {self.db_url!r}")
        return "\n".join(lines) + "\n"

    # -- configuration -------------------------------------------------------------------
    def config(self):
        from traitlets.config.loader import PyFileConfigLoader

        cfg = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()
        cfg.CourseDirectory.root = str(self.root)
        cfg.Exchange.root = str(self.root / "exchange")
        if self.release_dir:
            cfg.CourseDirectory.release_directory = str(Path(self.release_dir).resolve())
        if self.db_url:
            cfg.CourseDirectory.db_url = self.db_url
        if self.timeout:
            cfg.Execute.timeout = int(self.timeout)
        # the same HTML, its templates compiled once per process instead of once per feedback;
        # jupyter_client's kernel manager, noticing a stopped kernel within 5 ms, not 100 ms
        cfg.GenerateFeedback.exporter_class = "awb_grader.htmlexport.CachedTemplatesHTMLExporter"
        cfg.Execute.kernel_manager_class = "awb_grader.kernelmanager.PromptKernelManager"
        for key, value in self.extra.items():
            cls, trait = key.split(".")
            setattr(getattr(cfg, cls), trait, value)
        cfg.NbGraderAPI.log_level = "WARN"
        return cfg

    def api(self):
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        nbgrader_schema_checked_once()
        nbgrader_alembic_head_once()
        cfg = self.config()
        return NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)

    @property
    def db(self) -> str:
        return self.db_url or f"sqlite:///{self.root / 'gradebook.db'}"

    def path(self, step: str, student: str, assignment: str) -> Path:
        return self.root / step / student / assignment

    @property
    def release_root(self) -> Path:
        return Path(self.release_dir).resolve() if self.release_dir else EXERCISES

    # -- nbgrader steps ------------------------------------------------------------------
    def generate_assignment(self, assignment: str) -> None:
        res = self.api().generate_assignment(assignment, force=True, create=True)
        if not res["success"]:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed:\n{res['error']}\n{res['log']}")

    def submit(self, student: str, assignment: str, notebook: Path | str, timestamp: str | None = None) -> Path:
        """Place a notebook file as ``submitted/<student>/<assignment>/<assignment>.ipynb``."""
        dest = self.path("submitted", student, assignment)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        shutil.copyfile(notebook, dest / f"{assignment}.ipynb")
        (dest / "timestamp.txt").write_text(timestamp or "2026-01-01 00:00:00.000000 UTC")
        return dest

    def autograde(self, assignment: str, student: str) -> dict:
        with nbgrader_quirks_silenced():
            return self.api().autograde(assignment, student, force=True, create=True)

    def generate_feedback(self, assignment: str, student: str) -> dict:
        return self.api().generate_feedback(assignment, student, force=True)

    def export_csv(self, dest: Path) -> Path:
        """nbgrader's own CSV export plugin over the gradebook."""
        from nbgrader.api import Gradebook
        from nbgrader.plugins import CsvExportPlugin

        dest = Path(dest)
        with Gradebook(self.db) as gb:
            CsvExportPlugin(to=str(dest)).export(gb)
        return dest

    # -- reading verdicts ----------------------------------------------------------------
    def scores(self, assignment: str, student: str) -> dict[str, float]:
        """{grade_id: autograded score} for one submission's graded cells."""
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.db) as gb:
            try:
                sub = gb.find_submission_notebook(assignment, assignment, student)
            except MissingEntry:
                return {}
            return {g.name: float(g.score) for g in sub.grades}

    def max_scores(self, assignment: str) -> dict[str, float]:
        from nbgrader.api import Gradebook

        with Gradebook(self.db) as gb:
            nb = gb.find_notebook(assignment, assignment)
            return {g.name: float(g.max_score) for g in nb.grade_cells}
