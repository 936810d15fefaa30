"""A mistake only the hidden checks catch (their random sizes): the student loses the points, and the feedback
shows the failing call and message but none of the hidden check's code."""

import html
import re

import pytest

from awb_grader.catalog import edit
from awb_grader.core.course import AUTOGRADER
from awb_grader.core.outputs import error_text
from awb_grader.devtools.variants import grade_variants

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
