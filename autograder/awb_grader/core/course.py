"""The nbgrader course, driven through nbgrader's own Python API.

A :class:`Course` is one nbgrader course root (``submitted/``, ``autograded/``, ``feedback/``,
the gradebook) whose source directory is the repository's ``solutions/``. Every action goes
through nbgrader (``generate_assignment``, ``autograde``, ``generate_feedback``, its CSV export
plugin); this module only points nbgrader at the right directories and collects verdicts.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .gradebook import name_students, nbgrader_quirks_silenced
from .metadata import cell_meta

REPO = Path(__file__).resolve().parents[3]
AUTOGRADER = REPO / "autograder"
CONFIG_FILE = AUTOGRADER / "nbgrader_config.py"
SOLUTIONS = REPO / "solutions"
EXERCISES = REPO / "exercises"
COHORT_ROOT = REPO / "build" / "cohort"      # the cohort command's course root unless --course says


def assignments() -> list[str]:
    """The exercise notebooks the course has (one nbgrader assignment each)."""
    return sorted(p.name for p in SOLUTIONS.iterdir() if (p / f"{p.name}.ipynb").exists())


def resolve(exercises: list[str] | None) -> list[str]:
    """The assignments ``exercises`` name (``"04"`` or ``"04_queries_keys_values"``), in the
    order given; every assignment when None or empty. An unknown name ends the command."""
    allnames = assignments()
    if not exercises:
        return allnames
    out = []
    for e in exercises:
        hit = [a for a in allnames if a == e or a[:2] == e.zfill(2)[:2]]
        if not hit:
            raise SystemExit(f"unknown exercise {e!r} (known: {', '.join(allnames)})")
        out += [h for h in hit if h not in out]
    return out


_SOLUTION_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)


def solution_cells(assignment: str) -> dict[str, str]:
    """{grade_id: code} of the solution cells, markers removed (what a correct student wrote)."""
    import nbformat

    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    out = {}
    for cell in nb.cells:
        meta = cell_meta(cell)
        if meta.get("solution"):
            out[meta["grade_id"]] = _SOLUTION_MARKERS.sub("", cell.source)
    return out


def ensure_kernel_path() -> None:
    """Grading kernels and the replay process inherit PYTHONPATH: the workbook's package, and
    ``awb_grader`` (the replay's own modules; the trusted notebooks' hidden blocks)."""
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
        (self.root / "exchange").mkdir(exist_ok=True)   # nbgrader's exchange (unused: formgrader wants it)
        ensure_kernel_path()
        # So an instructor can also run plain `nbgrader ...` commands inside the course root.
        local = self.root / "nbgrader_config.py"
        text = self._local_config_text()
        if not local.exists() or local.read_text() != text:
            local.write_text(text)

    def _local_config_text(self) -> str:
        lines = ["# Written by awb_grader: the course config plus this course root's paths.",
                 f"load_subconfig({str(CONFIG_FILE)!r})",
                 "c = get_config()",
                 f"c.CourseDirectory.root = {str(self.root)!r}",
                 # the course config derived it from its own default root: formgrader's exchange is this root's
                 f"c.Exchange.root = {str(self.root / 'exchange')!r}"]
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
        for key, value in self.extra.items():
            cls, trait = key.split(".")
            setattr(getattr(cfg, cls), trait, value)
        cfg.NbGraderAPI.log_level = "WARN"
        return cfg

    def api(self):
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

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
        self.name_student(student)
        return dest

    def name_student(self, student: str) -> None:
        """Give the student a readable name in the gradebook before nbgrader's autograde creates
        one with none (formgrader would show "None, None"): ``gradebook.name_students``."""
        if not self.db_url and not (self.root / "gradebook.db").exists():
            return
        from nbgrader.api import Gradebook

        with Gradebook(self.db) as gb:
            name_students(gb, [student])
            gb.db.commit()

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
