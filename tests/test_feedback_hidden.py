"""A mistake only the hidden checks catch (their random sizes): the student loses the points, and the feedback
shows the failing call and message but none of the hidden check's code. The feedback HTML is the same whether
its templates come from the grader's in-process cache (``htmlexport``) or are compiled anew by nbconvert."""

import html
import re

import pytest

from awb_grader.catalog import edit
from awb_grader.course import AUTOGRADER, Course
from awb_grader.variants import error_text, grade_variants

A = "04_queries_keys_values"


@pytest.mark.slow
def test_hidden_only_failure_feedback(tmp_path):
    # right on every visible case (d <= 8 there), wrong on the hidden checks' larger random widths:
    # every catalogued mistake now fails a visible check, so this one is written for the test
    src = edit(A, "scaled_dot_product_attention", ("/ math.sqrt(d)", "/ math.sqrt(min(d, 8))"))
    graded = grade_variants(A, {"student": {"scaled_dot_product_attention": src}}, tmp_path, timeout=60)
    nb = graded.autograded("student", A)
    msg = error_text(nb, "test_sdpa_values")
    assert "hidden test" in msg, msg
    assert "Traceback" not in msg and "awb_grader/hidden" not in msg
    res = graded.course.generate_feedback(A, "student")
    assert res["success"], res
    fb = graded.course.path("feedback", "student", A) / f"{A}.html"
    text = html.unescape(re.sub(r"<[^>]+>", "", fb.read_text()))
    assert "hidden test" in text  # the student is told a hidden test failed ...
    src = (AUTOGRADER / "awb_grader" / "hidden" / "ex04.py").read_text()
    body = [ln.strip() for ln in src.splitlines() if len(ln.strip()) > 30 and not ln.strip().startswith(("#", "def "))]
    assert not [ln for ln in body if ln in text]  # ... but not how it checks

    # the same page from the cached templates (compiled earlier in this process, or just now) as
    # from nbconvert's stock exporter, which compiles them anew
    from awb_grader import htmlexport

    pages = [fb.read_text()]
    res = graded.course.generate_feedback(A, "student")                     # from the cache for sure
    assert res["success"], res
    pages.append(fb.read_text())
    assert any(htmlexport._CACHES.values()) and all(c._code for c in htmlexport._CACHES.values())
    stock = Course(graded.course.root, release_dir=graded.course.release_dir,
                   extra={"GenerateFeedback.exporter_class": "nbconvert.exporters.HTMLExporter"})
    res = stock.generate_feedback(A, "student")
    assert res["success"], res
    pages.append(fb.read_text())
    assert pages[0] == pages[1] == pages[2]
