"""Generate the student release (exercises/) from solutions/ with nbgrader, and check sync (with
attention_workbook/checks/graded.py, the graded items read from the release: graded_facts.py)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ..core.course import EXERCISES, REPO, Course, assignments


def generate(names: list[str] | None = None, dest: Path = EXERCISES, course_root: Path | None = None) -> list[Path]:
    """nbgrader generate_assignment for each assignment, written to ``dest/<assignment>/``."""
    names = names or assignments()
    course = Course(course_root or Path(tempfile.mkdtemp(prefix="awb-release-")), release_dir=dest)
    written = []
    for name in names:
        course.generate_assignment(name)
        written += sorted((Path(dest) / name).rglob("*.ipynb"))
    return written


def _normalised(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    data.get("metadata", {}).pop("widgets", None)  # volatile: widget state, if a notebook saved any
    return data


def diff(names: list[str] | None = None) -> list[str]:
    """Differences between the committed exercises/ and a fresh release ([] = in sync)."""
    names = names or assignments()
    problems = []
    with tempfile.TemporaryDirectory(prefix="awb-release-check-") as tmp:
        fresh = Path(tmp) / "release"
        generate(names, dest=fresh, course_root=Path(tmp) / "course")
        for name in names:
            new_files = {p.relative_to(fresh / name) for p in (fresh / name).rglob("*") if p.is_file()}
            old_dir = EXERCISES / name
            old_files = (
                {p.relative_to(old_dir) for p in old_dir.rglob("*") if p.is_file()} if old_dir.exists() else set()
            )
            for rel in sorted(new_files - old_files):
                problems.append(f"exercises/{name}/{rel} is missing (run `make release`)")
            for rel in sorted(old_files - new_files):
                problems.append(f"exercises/{name}/{rel} is not produced by the release (stale file?)")
            for rel in sorted(new_files & old_files):
                a, b = fresh / name / rel, old_dir / rel
                same = (
                    (_normalised(a) == _normalised(b)) if rel.suffix == ".ipynb" else a.read_bytes() == b.read_bytes()
                )
                if not same:
                    problems.append(f"exercises/{name}/{rel} differs from solutions/{name} (run `make release`)")
    from . import graded_facts

    return problems + graded_facts.diff()      # attention_workbook/checks/graded.py vs the committed release


def relpath(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def write_release(names: list[str] | None = None) -> list[Path]:
    """Regenerate the committed exercises/ (stale files of those assignments are removed)."""
    names = names or assignments()
    for name in names:
        if (EXERCISES / name).exists():
            shutil.rmtree(EXERCISES / name)
    from . import graded_facts

    written = generate(names)
    return written + [graded_facts.write()]     # the graded items, read from the new release
