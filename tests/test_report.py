"""The cohort report's parts that need no grading: answers that look alike (copydetect on the
catalog's code), the LMS grade imports (Canvas, Moodle) read as their importers read them, the
Canvas user id kept from the downloaded file names, and the page's escaping of student text.
The page itself is tested in Chromium on the demo and adversarial cohorts (tests/report_page.py,
called from test_demo.py and test_adversarial.py, on the cohorts they grade anyway)."""

import csv
import zipfile

import nbformat
import pytest

from awb_grader import catalog
from awb_grader.devtools.synth import disguised
from awb_grader.cohort import collect as cohort, lms_export, report, similarity
from awb_grader.core.course import EXERCISES, Course, solution_cells
from awb_grader.devtools.variants import student_notebook

A = "04_queries_keys_values"
RELEASE = EXERCISES / A / f"{A}.ipynb"
PART1 = ("softmax", "causal_mask", "scaled_dot_product_attention")


def _cohort(tmp_path):
    """Four students' notebooks for part 1 of exercise 04 (part 2 left as the stubs): ana writes
    the catalog's einsum-and-loops alternative, ben the reference solution, cleo the catalog's
    other alternatives, dan a renamed, reformatted copy of ana's."""
    alts = {a.id: a.cells for a in catalog.alternatives(A)}
    sol = solution_cells(A)
    unanswered = tuple(c for c in sol if c not in PART1)
    ana = {c: alts["einsum_and_loops"][c] for c in PART1}
    answers = {
        "ana": ana,
        "ben": {c: sol[c] for c in PART1},
        "cleo": {"softmax": alts["explicit_max_and_bmm_style"]["softmax"],
                 "scaled_dot_product_attention": alts["explicit_max_and_bmm_style"]["scaled_dot_product_attention"],
                 "causal_mask": alts["warnings_torch_range_mask"]["causal_mask"]},
        "dan": {c: disguised(code) for c, code in ana.items()},
    }
    cells = similarity.answer_cells(RELEASE)
    docs = {}
    for s, over in answers.items():
        p = tmp_path / f"{s}.ipynb"
        nbformat.write(student_notebook(RELEASE, A, over, unanswered=unanswered), p)
        docs[s] = similarity.answers(p, cells)
    return answers, docs


def test_a_renamed_reformatted_copy_is_reported_independent_alternatives_are_not(tmp_path):
    answers, docs = _cohort(tmp_path)
    assert "my_" in answers["dan"]["causal_mask"] and "my_" in answers["dan"]["scaled_dot_product_attention"]
    ref = {c: catalog.solution(A, c) for c in docs["ben"]}
    found = similarity.similar_pairs(docs, similarity.template(RELEASE), A, reference=ref)
    assert [(p.a, p.b) for p in found.pairs] == [("ana", "dan")]
    pair = found.pairs[0]
    assert pair.share_a > 0.9 and pair.share_b > 0.9
    assert {c.grade_id for c in pair.cells} == set(PART1)
    assert set(found.reference) == {"ben"}            # the reference solution itself, nobody else
    # the template alone is not a match: two students who left every answer as the stub
    stub = similarity.answers(RELEASE, similarity.answer_cells(RELEASE))
    assert similarity.similar_pairs({"x": stub, "y": dict(stub)}, similarity.template(RELEASE), A).compared == 0


def test_matching_code_is_shown_escaped(tmp_path):
    code = ('def softmax(x, dim=-1):\n    note = "</pre><script>alert(1)</script>"\n'
            "    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n    return e / e.sum(dim=dim, keepdim=True)\n")
    docs = {s: {"softmax": code, "causal_mask": catalog.solution(A, "causal_mask"),
                "scaled_dot_product_attention": catalog.solution(A, "scaled_dot_product_attention")}
            for s in ("eve", "mal")}
    found = similarity.similar_pairs(docs, similarity.template(RELEASE), A)
    left, right = found.pairs[0].cells[0].highlighted()
    assert "<script>" not in left + right and "&lt;script&gt;" in left and "<mark>" in left


def test_the_page_escapes_student_text(tmp_path):
    hostile = '<img src=x onerror="alert(1)">'
    g = lms_export.Grades([A], {A: 30.0}, [hostile], {(hostile, A): 12.0})
    flags = [{"student": hostile, "assignment": A, "score": "12", "max_score": "30", "status": "flagged",
              "reasons": f"edited test cell {hostile} | </li></ul><script>alert(2)</script>", "failed_cells": ""}]
    page = report.render(tmp_path, g, flags, {A: []}, {}, ["grades.csv"])
    assert "<script" not in page and "<img" not in page and "onerror=\"" not in page
    assert page.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") >= 2 and "&lt;script&gt;alert(2)" in page
    assert report.CSP in page


def _gradebook(root, scores, max_score=10.0):
    """A gradebook with one graded cell per exercise and ``scores`` {(student, exercise): points}."""
    from nbgrader.api import Gradebook

    db = f"sqlite:///{root / 'gradebook.db'}"
    with Gradebook(db) as gb:
        for a in sorted({a for _, a in scores}):
            gb.add_assignment(a)
            gb.add_notebook(a, a)
            gb.add_grade_cell("test_all", a, a, max_score=max_score, cell_type="code")
        for s in sorted({s for s, _ in scores}):
            gb.add_student(s)
        for (s, a), pts in scores.items():
            if pts is not None:
                gb.update_or_create_submission(a, s)
                gb.find_grade("test_all", a, a, s).auto_score = pts
        gb.db.commit()
    return db


def test_canvas_user_id_is_kept_from_the_downloaded_file_names(tmp_path):
    """Canvas names a download lastfirst[_late]_USERID_SUBMISSIONID_file: the collector reads the
    name part as the student and keeps the file name, the export reads the user id from it."""
    z = tmp_path / "canvas.zip"
    text = nbformat.writes(student_notebook(RELEASE, A))
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr(f"lovelaceada_1234567_890123_{A}.ipynb", text)
        zf.writestr(f"babbagecharles_late_7654321_321098_{A}-1.ipynb", text)
        zf.writestr(f"hopper_{A}.ipynb", text)                   # not Canvas's naming: no id
    course = Course(tmp_path / "course", release_dir=EXERCISES)
    got = cohort.collect(z, tmp_path / "course" / "inbox", course, [A])
    assert set(got.subs[A]) == {"lovelaceada", "babbagecharles", "hopper"}
    ids = lms_export.remember(tmp_path / "course", got.sources)
    assert {s: v["canvas_user_id"] for s, v in ids.items()} == {"lovelaceada": "1234567", "babbagecharles": "7654321"}
    assert lms_export.remember(tmp_path / "course", {}) == ids          # kept over a later run's other files


def test_lms_exports_parse_as_their_importers_read_them(tmp_path):
    """Canvas (canvas-lms GradebookImporter): header Student, ID[, SIS User ID, SIS Login ID],
    Section, then the assignments; a Points Possible row; a row per student matched by ID.
    Moodle (grade/import/csv): a header, a user column, a column per grade item, '' = no grade."""
    B = "05_multi_head_attention"
    db = _gradebook(tmp_path, {("lovelaceada", A): 7.5, ("lovelaceada", B): 0.0,
                               ("hopper", A): 10.0, ("hopper", B): None})          # hopper submitted no 05
    (tmp_path / lms_export.IDS).write_text('{"lovelaceada": {"canvas_user_id": "1234567", "file": "x"}}')
    lines = lms_export.export(tmp_path, db)
    assert any("canvas_grades.csv" in ln for ln in lines) and any("moodle_grades.csv" in ln for ln in lines)

    with open(tmp_path / "lms" / "canvas_grades.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    head, pp, *students = rows
    assert head[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and head[5:] == [A, B]
    assert "Student" in head[0] and "ID" in head[1] and "Section" in head[4]      # the importer's header test
    assert pp[0] == "Points Possible" and [float(x) for x in pp[5:]] == [10.0, 10.0]
    by = {r[0]: r for r in students}
    assert len(students) == 2 and all(len(r) == len(head) for r in rows)
    assert by["lovelaceada"][1] == "1234567" and by["hopper"][1] == ""           # id from the file names
    assert [float(x) for x in by["lovelaceada"][5:]] == [7.5, 0.0]                # a 0 is a 0
    assert by["hopper"][5:] == ["10", ""]                                          # nothing submitted: blank

    with open(tmp_path / "lms" / "moodle_grades.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["Username", A, B] and [r["Username"] for r in rows] == ["hopper", "lovelaceada"]
    assert rows[0][B] == "" and float(rows[1][A]) == 7.5


@pytest.mark.parametrize("name,student", [
    (f"lovelaceada_1234567_890123_{A}.ipynb", "lovelaceada"),
    (f"babbagecharles_late_7654321_321098_{A}-1.ipynb", "babbagecharles"),
])
def test_default_pattern_reads_canvas_names(name, student):
    import re

    m = re.match(cohort.DEFAULT_PATTERN, "/tmp/x/extracted/" + name)
    assert m and m["student_id"] == student and m["file_id"] == A
    assert lms_export.canvas_id(name, student)
