"""Collection: an LMS download (one zip or a folder, every exercise, every student) sorted by
nbgrader's ``zip_collect`` (``ZipCollectApp``) with a file-name collector plugin
(:class:`ExerciseCollector`, a ``FileNameCollectorPlugin``) into ``inbox/submitted/<student>/<exercise>/``.
Files that name no exercise are listed, never dropped silently. The download is the one archive
opened, under limits; a student's upload is never unpacked (``uploads.py``)."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..core.course import Course

# <student>_<anything_>NN_topic[ (1)|-2].ipynb  or  <student>/<anything_>NN_topic.ipynb
DEFAULT_PATTERN = (r"^(?:.*/)?(?P<student_id>[A-Za-z0-9][A-Za-z0-9.@-]*)(?:_|/)(?:[^/]*?_)?"
                   r"(?P<file_id>\d\d_[A-Za-z0-9_]*?)(?:[ _-]*\(?\d+\)?)?\.ipynb$")


# -- collection (nbgrader zip_collect + a file-name collector) --------------------------------
def _collector_class():
    from nbgrader.plugins import FileNameCollectorPlugin
    from traitlets import Unicode

    class ExerciseCollector(FileNameCollectorPlugin):
        """FileNameCollectorPlugin that keeps only the files of the exercise being collected
        (the first two digits of ``file_id``) and gives them the release's notebook name."""

        assignment = Unicode("").tag(config=True)
        notes: dict = {}         # (student, assignment) -> original file name, when renamed
        matched: set = set()     # every file any exercise claimed

        losers: dict = {}        # path of a duplicate that was not kept -> the file kept instead
        sources: dict = {}       # (student, assignment) -> the file's name as downloaded (an LMS id may be in it)

        def collect(self, submitted_file):
            from .uploads import as_notebook_name

            # any upload belongs to the student its name names: a zip or a PDF too (never unpacked)
            upload = as_notebook_name(submitted_file)
            info = super().collect(upload or submitted_file)
            if not info:
                return None
            stem = os.path.splitext(info["file_id"])[0]
            if stem[:2] != self.assignment[:2]:
                return None
            ExerciseCollector.matched.add(os.path.realpath(submitted_file))
            kept = ExerciseCollector.losers.get(os.path.realpath(submitted_file))
            if kept:
                ExerciseCollector.notes[(info["student_id"], self.assignment, "dup")] = (
                    f"{len([v for v in ExerciseCollector.losers.values() if v == kept]) + 1} files for this exercise: "
                    f"graded {os.path.basename(kept)!r} (the latest), ignored the others")
                return None
            ExerciseCollector.sources[(info["student_id"], self.assignment)] = os.path.basename(submitted_file)
            if upload:
                ExerciseCollector.notes[(info["student_id"], self.assignment, "upload")] = (
                    f"uploaded {os.path.basename(submitted_file)!r}")
            elif not os.path.basename(submitted_file).endswith(self.assignment + ".ipynb"):
                ExerciseCollector.notes[(info["student_id"], self.assignment)] = os.path.basename(submitted_file)
            info["file_id"] = self.assignment + ".ipynb"
            return info

    return ExerciseCollector


_COLLECTOR = None


def collector():
    global _COLLECTOR
    if _COLLECTOR is None:
        _COLLECTOR = _collector_class()
    return _COLLECTOR


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _duplicates(extracted: Path, pattern: str, assignment: str) -> dict[str, str]:
    """{path of an older duplicate: path kept} for students with several files for one
    exercise: the newest by timestamp (when the pattern has one), then by the LMS's copy
    number (``-2`` after ``-1``), then by name."""
    from .uploads import as_notebook_name

    per: dict = {}
    for p in sorted(extracted.rglob("*")):
        if not p.is_file() or p.is_symlink():
            continue
        name = as_notebook_name(str(p)) or str(p)
        m = re.match(pattern, name)
        if not m or m["file_id"][:2] != assignment[:2]:
            continue
        tail = os.path.basename(name)[len(os.path.basename(name).rsplit(m["file_id"], 1)[0]) + len(m["file_id"]):]
        copy = int("".join(ch for ch in tail if ch.isdigit()) or 0)
        ts = m.groupdict().get("timestamp") or ""
        # one file per student and kind (a notebook, a zip, ...): nbgrader stops on two of a kind
        per.setdefault((m["student_id"], p.suffix), []).append(((ts, copy, str(p)), os.path.realpath(p)))
    out = {}
    for files in per.values():
        if len(files) > 1:
            files.sort()
            kept = files[-1][1]
            out.update({path: kept for _, path in files[:-1]})
    return out


@dataclass
class Collected:
    subs: dict            # assignment -> {student: (path, timestamp or None)}
    renamed: dict         # (student, assignment) -> original file name
    unmatched: list       # files no exercise claimed
    sources: dict = field(default_factory=dict)   # (student, assignment) -> file name as downloaded
    unread: list = field(default_factory=list)    # (file or member, reason): not read (uploads.SafeExtractor)


def collect(source: Path, inbox: Path, course: Course, names: list[str], pattern: str = DEFAULT_PATTERN) -> Collected:
    """Run nbgrader's ZipCollectApp once per exercise on ``source`` (a zip or a folder), with
    :class:`~awb_grader.cohort.uploads.SafeExtractor`: the zip is the one archive opened, under limits."""
    from nbgrader.apps import ZipCollectApp

    from .uploads import SafeExtractor

    source = Path(source).resolve()
    if inbox.exists():
        shutil.rmtree(inbox)
    Coll = collector()
    Coll.notes, Coll.matched, Coll.sources = {}, set(), {}
    subs: dict = {}
    unread: list = []
    extracted_any = None
    for a in names:
        archive = inbox / "downloaded" / a / "archive"
        archive.mkdir(parents=True)
        if source.is_dir():
            # links stay links (the extractor skips them): never the file a link points to
            shutil.copytree(source, archive / "folder", symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(source, archive / source.name)
        cfg = course.config()
        cfg.CourseDirectory.root = str(inbox)
        cfg.CourseDirectory.assignment_id = a
        cfg.CourseDirectory.release_directory = str(course.release_root)
        cfg.ZipCollectApp.collector_plugin = Coll
        cfg.ZipCollectApp.extractor_plugin = SafeExtractor
        cfg.ZipCollectApp.force = True
        cfg.ExtractorPlugin.force = True
        cfg.FileNameCollectorPlugin.named_regexp = pattern
        cfg.ExerciseCollector.assignment = a
        cfg.ZipCollectApp.log_level = "ERROR"
        app = ZipCollectApp(config=cfg)
        app.initialize([])
        app.log.setLevel("ERROR")
        # ZipCollectApp.start() = extract, then collect; in between we pick one file per
        # student when an LMS kept several (nbgrader stops on duplicates without timestamps)
        app.init_plugins()
        app.extract_archive_files()
        unread = app.extractor_plugin_inst.skipped          # the same for every exercise: the last run's
        extracted_any = inbox / "downloaded" / a / "extracted"
        Coll.losers = _duplicates(extracted_any, pattern, a)
        app.process_extracted_files()
        found = {}
        for d in sorted((inbox / "submitted").glob(f"*/{a}")):
            nb = d / f"{a}.ipynb"
            others = sorted(p for p in d.iterdir() if p.is_file() and p.name not in (nb.name, "timestamp.txt"))
            if others and nb.exists():      # a notebook and something else (a zip, a PDF): the notebook
                note = Coll.notes.get((d.parent.name, a, "upload"), "uploaded another file")
                Coll.notes[(d.parent.name, a, "upload")] = f"also {note}: not graded (only the notebook is)"
            if nb.exists() or others:       # not a notebook alone: graded as ungradable, with what it is
                ts = d / "timestamp.txt"
                found[d.parent.name] = (nb if nb.exists() else others[0],
                                        ts.read_text().strip() if ts.exists() else None)
        if found:
            subs[a] = found
    unmatched = []
    if extracted_any is not None and extracted_any.exists():
        for p in sorted(extracted_any.rglob("*")):
            if p.is_file() and ".ipynb_checkpoints" not in p.parts and "__MACOSX" not in p.parts:
                twin = [inbox / "downloaded" / a / "extracted" / p.relative_to(extracted_any) for a in names]
                if not any(os.path.realpath(t) in Coll.matched for t in twin):
                    unmatched.append(str(p.relative_to(extracted_any)))
    notes: dict = {}
    for key, text in Coll.notes.items():
        k = key[:2]
        notes[k] = (notes[k] + "; " if k in notes else "") + (text if len(key) == 3 else f"file named {text!r}")
    return Collected(subs, notes, unmatched, dict(Coll.sources), list(unread))
