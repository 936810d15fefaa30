"""What a student uploaded, collected safely (``awb_grader/cohort/uploads.py``; issue 37).

nbgrader's ``zip_collect`` with our ``SafeExtractor``: the LMS download is the one archive
opened, each member under limits; an uploaded archive is never unpacked and belongs to the
student the LMS named it for; an unsafe member is skipped with its reason and the rest is
collected; nothing lands outside the course folder. Collection only (no kernel): the graded
version of the same downloads is in the adversarial cohort (``tests/test_adversarial.py``).
"""

import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import nbformat
import pytest

from awb_grader.cohort import collect as cohort
from awb_grader.cohort import uploads
from awb_grader.cohort.submissions import UNGRADABLE, inspect_notebook
from awb_grader.core.course import EXERCISES, Course
from awb_grader.devtools.variants import student_notebook
from awb_grader.platforms import harness

A = "04_queries_keys_values"
RELEASE = EXERCISES / A / f"{A}.ipynb"
MB = 1 << 20


@pytest.fixture(scope="module")
def honest():
    return nbformat.writes(student_notebook(RELEASE, A))


def _zip(members, **kw) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED, **kw) as z:
        for name, data in members:
            if isinstance(name, zipfile.ZipInfo):
                z.writestr(name, data)
            else:
                z.writestr(name, data)
    return b.getvalue()


def _zeros_member(z: zipfile.ZipFile, name: str, mb: int) -> None:
    with z.open(name, "w", force_zip64=True) as f:
        for _ in range(mb):
            f.write(b"\0" * MB)


def _collect(tmp_path, source, **extra):
    course = Course(tmp_path / "course", release_dir=EXERCISES, extra=extra)    # read-only use of the release
    return cohort.collect(source, tmp_path / "course" / "inbox", course, [A])


def _size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*"))


def test_uploads_belong_to_the_student_the_download_names(tmp_path, honest):
    """The issue's downloads in one: alice's notebook stays alice's; mallet's zip holding a notebook
    named like alice's, eve's zip with a '../' member and zed's zip inflating to 256 MB (1 GiB in the
    adversarial cohort) are theirs and never unpacked; a '../' member of the download itself is
    skipped with its reason."""
    broken = nbformat.writes(student_notebook(RELEASE, A, {"softmax": "def softmax(x, dim=-1):\n    1/0\n"}))
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        _zeros_member(z, f"bomb_{A}.ipynb", 256)
    lms = tmp_path / "lms.zip"
    with zipfile.ZipFile(lms, "w") as z:
        z.writestr(f"alice_{A}.ipynb", honest)
        z.writestr(f"mallet_{A}.zip", _zip([(f"alice_{A}.ipynb", broken)]))
        z.writestr(f"eve_{A}.zip", _zip([(f"../../../../../tmp/awb_x_{A}.ipynb", honest)]))
        z.writestr(f"zed_{A}.zip", bomb.getvalue())
        z.writestr(f"../../../../../tmp/awb_y_{A}.ipynb", honest)
    got = _collect(tmp_path, lms)
    subs = got.subs[A]
    assert set(subs) == {"alice", "mallet", "eve", "zed"}
    assert subs["alice"][0].read_text() == honest
    for s in ("mallet", "eve", "zed"):
        assert uploads.not_a_notebook(subs[s][0]) == "a zip archive", s
        assert got.renamed[(s, A)] == f"uploaded '{s}_{A}.zip'"
    assert [(n, why) for n, why in got.unread if "awb_y" in n and "outside the download" in why], got.unread
    assert not list(Path("/tmp").glob("awb_[xy]_*")) and not list(tmp_path.rglob("bomb_*"))
    # bounded by what was uploaded (the download, linked, its members once, the collected copies), never inflated
    assert _size(tmp_path / "course") < 4 * lms.stat().st_size + MB, (_size(tmp_path / "course"), lms.stat())


def test_unsafe_and_unreadable_members_are_skipped_with_their_reason(tmp_path, honest):
    lms = tmp_path / "lms.zip"
    link = zipfile.ZipInfo(f"lnk_{A}.ipynb")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(lms, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr(f"ada/{A}.ipynb", honest)                             # a folder per student: collected
        z.writestr(link, "/work/main/solutions")
        z.writestr(f"/abs_{A}.ipynb", honest)
        _zeros_member(z, f"big_{A}.ipynb", 3)                           # past the limit set below
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr(f"ada/{A}.ipynb", "a second member of the same name")
    got = _collect(tmp_path, lms, **{"SafeExtractor.max_member_mb": 2})      # the course's config sets it
    assert set(got.subs[A]) == {"ada"} and got.subs[A]["ada"][0].read_text() == honest
    why = {n.split(": ", 1)[1]: r for n, r in got.unread}
    assert "a link" in why[f"lnk_{A}.ipynb"]
    assert "outside the download" in why[f"/abs_{A}.ipynb"]
    assert "past 2 MB (SafeExtractor.max_member_mb)" in why[f"big_{A}.ipynb"]
    assert "same name" in why[f"ada/{A}.ipynb"]
    assert _size(tmp_path / "course") < 4 * lms.stat().st_size + MB


def test_a_tar_download_and_a_folder_never_follow_links(tmp_path, honest):
    tar = tmp_path / "lms.tar.gz"
    data = honest.encode()
    with tarfile.open(tar, "w:gz") as t:
        info = tarfile.TarInfo(f"ada_{A}.ipynb")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
        for kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
            info = tarfile.TarInfo(f"ln{kind.decode()}_{A}.ipynb")
            info.type, info.linkname = kind, "/etc/passwd"
            t.addfile(info)
    got = _collect(tmp_path / "t", tar)
    assert set(got.subs[A]) == {"ada"} and len([r for _, r in got.unread if "a link" in r]) == 2, got.unread

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / f"ada_{A}.ipynb").write_text(honest)
    os.symlink(RELEASE, folder / f"sly_{A}.ipynb")            # a link to a file the grader can read
    (folder / f"ben_{A}.zip").write_bytes(_zip([(f"ada_{A}.ipynb", "{}")]))
    got = _collect(tmp_path / "f", folder)
    assert set(got.subs[A]) == {"ada", "ben"} and got.subs[A]["ada"][0].read_text() == honest
    assert [n for n, r in got.unread if n.endswith(f"sly_{A}.ipynb") and "link" in r], got.unread


def test_an_unreadable_download_and_duplicate_archives_do_not_stop_the_batch(tmp_path, honest):
    cut = tmp_path / "cut.zip"
    cut.write_bytes(_zip([(f"ada_{A}.ipynb", honest)])[:400])
    got = _collect(tmp_path / "c", cut)
    assert got.subs == {} and "could not be read" in got.unread[0][1]

    lms = tmp_path / "lms.zip"        # two zips of one student, no timestamps: nbgrader alone stops here
    with zipfile.ZipFile(lms, "w") as z:
        z.writestr(f"ada_{A}.zip", _zip([("x.ipynb", "{}")]))
        z.writestr(f"ada_{A} (1).zip", _zip([("y.ipynb", "{}")]))
        z.writestr(f"ben_{A}.ipynb", honest)
        z.writestr(f"ben_{A}.pdf", b"%PDF-1.4 ...")
    got = _collect(tmp_path / "d", lms)
    assert set(got.subs[A]) == {"ada", "ben"}
    assert got.subs[A]["ben"][0].read_text() == honest
    assert "also uploaded" in got.renamed[("ben", A)] and "not graded" in got.renamed[("ben", A)]


def test_an_archive_or_pdf_is_ungradable_with_what_it_is(tmp_path, honest):
    for data, kind in ((_zip([(f"{A}.ipynb", honest)]), "a zip archive"), (b"%PDF-1.7\n...", "a PDF"),
                       (b"\x1f\x8b\x08\x00" + b"\0" * 20, "a gzip file")):
        p = tmp_path / f"{A}.ipynb"
        p.write_bytes(data)
        ins = inspect_notebook(p, RELEASE)
        assert ins.status == UNGRADABLE and ins.reasons == [f"{kind}, not a notebook: {uploads.NOT_UNPACKED}"]
    assert uploads.as_notebook_name(f"x/ada_{A}.tar.gz") == f"x/ada_{A}.ipynb"
    assert uploads.as_notebook_name(f"ada_{A}.ipynb") is None


def test_harness_upload_is_never_a_link(tmp_path, honest):
    """Gradescope and PrairieLearn: the graded upload is a regular file in the submission folder."""
    sub = tmp_path / "submission"
    sub.mkdir()
    os.symlink(RELEASE, sub / f"{A}.ipynb")
    (sub / "mine.zip").write_bytes(_zip([(f"{A}.ipynb", honest)]))
    assert harness.find_upload(sub, A) == sub / "mine.zip"        # graded as ungradable: an archive
    (sub / "notes").mkdir()
    (sub / "notes" / "n.ipynb").write_text(honest)
    assert harness.find_upload(sub, A) == sub / "notes" / "n.ipynb"


def test_harness_does_not_read_an_upload_past_the_limit(tmp_path):
    big = tmp_path / "submission" / f"{A}.ipynb"
    big.parent.mkdir()
    with open(big, "wb") as fh:                         # sparse: no disk used
        fh.truncate((uploads.SafeExtractor.max_member_mb.default_value + 1) * MB)
    out = harness.grade_upload(big, A, tmp_path / "course", RELEASE)
    assert out.status == "ungradable" and "larger than" in out.reasons[0] and out.score == 0
    assert not (tmp_path / "awb-inbox").exists()       # never copied
