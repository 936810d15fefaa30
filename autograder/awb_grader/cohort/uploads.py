"""What a student uploaded, read safely: nbgrader's ``zip_collect`` with an extractor of ours.

The LMS download is the one archive that collection opens. Whatever a student uploaded belongs
to the student the LMS named it for: a notebook is theirs whatever its inner name; an archive
(zip, tar, gzip, ...), a PDF or anything else is **never unpacked**: it reaches that student's
grading as it is, and the check before grading (``submissions.inspect_notebook``) calls it
ungradable with the reason ("a zip archive, not a notebook: upload the .ipynb itself").

:class:`SafeExtractor` is nbgrader's ``ExtractorPlugin`` (``ZipCollectApp.extractor_plugin``,
set in the course's ``nbgrader_config.py`` and by the cohort command). nbgrader's own extractor
unpacks every archive it finds, archives inside archives too, with setuptools' unpacker: one
unsafe member name stops the whole batch, an upload that inflates to gigabytes is written in
full, and the files inside a student's zip are then collected under the names *they* carry.
This one:

* opens only the archives **directly in the archive directory** (the LMS downloads: a zip or a
  tar); every other file, an archive included, is copied as it is, never unpacked;
* reads each member of a download under limits (``max_member_mb`` per member,
  ``max_total_mb`` for the whole download, ``max_members``), streaming: a member that passes a
  limit is cut off and removed, never written in full;
* skips, with its reason, a member that would land outside the extraction folder (an absolute
  path, ``..``), a link, a device or other special file, a duplicate name, an unreadable member
  (encrypted, bad CRC), and a whole download that cannot be read; the batch goes on;
* skips links and special files in a folder given instead of a zip.

What it skipped is in :attr:`SafeExtractor.skipped` ((name, reason) pairs), which the cohort
command writes into ``flags.csv`` and the summary.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

from nbgrader.plugins import ExtractorPlugin
from traitlets import Integer

MB = 1 << 20
DOWNLOADS = (".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz")    # a download named so that cannot be read: said so
CHUNK = 1 << 20
NOT_UNPACKED = ("archives are never unpacked: upload the .ipynb itself "
                "(Colab or Jupyter: File > Download > Download .ipynb)")


def not_a_notebook(path: Path) -> str | None:
    """What ``path`` is when it is plainly not a notebook ('a zip archive', 'a PDF', ...), read
    from its first bytes (stdlib readers for zip and tar); None when it may be one."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return None
    if zipfile.is_zipfile(path):
        return "a zip archive"
    if head.startswith(b"%PDF"):
        return "a PDF"
    try:
        if tarfile.is_tarfile(path):
            return "a tar archive"
    except (OSError, EOFError, tarfile.TarError):
        pass
    for magic, kind in ((b"\x1f\x8b", "a gzip file"), (b"BZh", "a bzip2 file"), (b"\xfd7zXZ\x00", "an xz file"),
                        (b"7z\xbc\xaf\x27\x1c", "a 7z archive"), (b"Rar!\x1a\x07", "a rar archive")):
        if head.startswith(magic):
            return kind
    return None


def as_notebook_name(path: str) -> str | None:
    """``path`` with its extension(s) replaced by ``.ipynb`` (``ada_04_x.tar.gz`` -> ``ada_04_x.ipynb``),
    so that the collector's pattern names the student of any upload; None for a notebook."""
    head, name = os.path.split(path)
    return None if name.endswith(".ipynb") else os.path.join(head, _stem(name) + ".ipynb")


class Skip(Exception):
    """A member that is not extracted; the message is the reason."""


class SafeExtractor(ExtractorPlugin):
    """nbgrader's ``ExtractorPlugin`` that opens only the LMS download, under limits (see the module)."""

    max_member_mb = Integer(100, help="a member of the download (or a file of a folder) larger than this, "
                                      "inflated, is skipped").tag(config=True)
    max_total_mb = Integer(8192, help="a download that inflates past this in all: the members past it are "
                                      "skipped").tag(config=True)
    max_members = Integer(50_000, help="members read from one download; the rest are skipped").tag(config=True)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.skipped: list[tuple[str, str]] = []     # (member as named in the download, reason)

    # -- nbgrader's entry point --------------------------------------------------------------
    def extract(self, archive_path: str, extracted_path: str) -> None:
        archive_path, extracted_path = Path(archive_path), Path(extracted_path)
        for root, dirs, files in os.walk(archive_path):          # never follows links
            root = Path(root)
            rel = root.relative_to(archive_path)
            dirs[:] = [d for d in dirs if not (root / d).is_symlink() or self._skip(rel / d, "a link")]
            for name in sorted(files):
                src = root / name
                try:
                    if rel == Path(".") and (self._is_download(src) or name.lower().endswith(DOWNLOADS)):
                        self._open_download(src, extracted_path / _stem(name))
                    else:
                        self._copy(src, extracted_path / rel / name, rel / name)
                except Skip as e:
                    self._skip(rel / name, str(e))

    # -- one download --------------------------------------------------------------------------
    @staticmethod
    def _is_download(src: Path) -> bool:
        if src.is_symlink() or not src.is_file():
            return False
        if zipfile.is_zipfile(src):
            return True
        try:
            return tarfile.is_tarfile(src)
        except (OSError, EOFError, tarfile.TarError):
            return False

    def _open_download(self, src: Path, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        self.log.info("Extracting (with limits) from: %s", src)
        try:
            if zipfile.is_zipfile(src):
                with zipfile.ZipFile(src) as zf:
                    self._members(src.name, dest, ((i.filename, _zip_kind(i), i, zf.open) for i in zf.infolist()))
            else:
                with tarfile.open(src) as tf:
                    self._members(src.name, dest, ((m.name, _tar_kind(m), m, tf.extractfile) for m in tf))
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as e:
            raise Skip(f"the download could not be read to the end ({type(e).__name__}: {str(e)[:120]}); "
                       f"what was read before is collected") from None

    def _members(self, download: str, dest: Path, members) -> None:
        total, count = 0, 0
        for name, kind, info, opener in members:
            shown = f"{download}: {name}"
            if kind == "dir":
                continue
            count += 1
            if count > self.max_members:
                self._skip(f"{download}: member {count} and after",
                           f"the download has more than {self.max_members} members "
                           f"(SafeExtractor.max_members): the rest were not read")
                return
            try:
                if kind != "file":
                    raise Skip(f"{kind}: not extracted")
                target = _inside(dest, name)
                budget = min(self.max_member_mb * MB, self.max_total_mb * MB - total)
                if budget <= 0:
                    raise Skip(f"the download inflates past {self.max_total_mb} MB (SafeExtractor.max_total_mb): "
                               f"not extracted")
                with opener(info) as fh:
                    total += self._write(fh, target, budget)
            except Skip as e:
                self._skip(shown, str(e))
            except (zipfile.BadZipFile, RuntimeError, NotImplementedError, tarfile.TarError, EOFError, OSError,
                    ValueError) as e:     # encrypted, bad CRC, unknown compression, truncated, name too long
                self._skip(shown, f"unreadable ({type(e).__name__}: {str(e)[:120]})")

    def _write(self, fh, target: Path, budget: int) -> int:
        """Stream ``fh`` into ``target`` (a new file); past ``budget`` bytes it is removed."""
        target.parent.mkdir(parents=True, exist_ok=True)
        n = 0
        try:
            with open(target, "xb") as out:
                while chunk := fh.read(CHUNK):
                    n += len(chunk)
                    if n > budget:
                        raise Skip(self._too_big())
                    out.write(chunk)
        except FileExistsError:
            raise Skip("a second member with the same name: not extracted (the first is kept)") from None
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        return n

    def _too_big(self) -> str:
        return (f"inflates past {self.max_member_mb} MB (SafeExtractor.max_member_mb) or past the download's "
                f"{self.max_total_mb} MB in all (SafeExtractor.max_total_mb): not extracted")

    # -- a file as it is ----------------------------------------------------------------------
    def _copy(self, src: Path, dest: Path, shown) -> None:
        st = os.lstat(src)
        if stat.S_ISLNK(st.st_mode):
            raise Skip("a link: not followed")
        if not stat.S_ISREG(st.st_mode):
            raise Skip("not a regular file")
        if st.st_size > self.max_member_mb * MB:
            raise Skip(f"larger than {self.max_member_mb} MB (SafeExtractor.max_member_mb): not copied")
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.log.info("Copying from: %s", src)
        shutil.copyfile(src, dest, follow_symlinks=False)

    def _skip(self, name, reason: str) -> bool:
        self.log.warning("Skipped %s: %s", name, reason)
        self.skipped.append((str(name), reason))
        return False


def _stem(name: str) -> str:
    """``name`` without its extension (``.tar.gz`` and the like count as one)."""
    for ext in (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz"):
        if name.lower().endswith(ext):
            return name[: -len(ext)]
    return os.path.splitext(name)[0]


def _inside(dest: Path, name: str) -> Path:
    """Where member ``name`` goes under ``dest``; :class:`Skip` when that is not inside ``dest``."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts:
        raise Skip("a path outside the download (absolute, or with '..'): not extracted")
    parts = [p for p in parts if p not in ("", ".")]
    if not parts or any("\0" in p for p in parts):
        raise Skip("an empty or invalid name: not extracted")
    target = dest.joinpath(*parts)
    real = os.path.realpath(target)
    if os.path.commonpath([real, os.path.realpath(dest)]) != os.path.realpath(dest):
        raise Skip("a path outside the download: not extracted")
    return target


def _zip_kind(info: zipfile.ZipInfo) -> str:
    mode = info.external_attr >> 16
    if info.is_dir():
        return "dir"
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):      # many zips carry permission bits only
        return "not a regular file"
    return "file"


def _tar_kind(m: tarfile.TarInfo) -> str:
    if m.isdir():
        return "dir"
    if m.issym() or m.islnk():
        return "a link"
    return "file" if m.isreg() else "not a regular file"
