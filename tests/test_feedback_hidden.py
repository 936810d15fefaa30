"""A mistake only the hidden checks catch (their random sizes): the student loses the points, and the
feedback says a hidden check failed, with a fixed sentence: none of the hidden check's code, seeds,
case or expected values. The check's own message is kept for the instructor, in the autograded
notebook's metadata. The hidden checks run outside the kernel, as they do for a student's upload
(``HoldOutHiddenTests``); the kernel ran only the visible checks."""

import html
import re

import pytest

from awb_grader.catalog import edit
from awb_grader.core.metadata import META
from awb_grader.core.outputs import error_text
from awb_grader.devtools.variants import grade_variants
from awb_grader.verdict import outside as verdict

import peeking

A = "04_queries_keys_values"


@pytest.mark.slow
def test_hidden_only_failure_feedback(tmp_path):
    # right on every visible case (d <= 8 there), wrong on the hidden checks' larger random widths:
    # every catalogued mistake now fails a visible check, so this one is written for the test
    src = edit(A, "scaled_dot_product_attention", ("/ math.sqrt(d)", "/ math.sqrt(min(d, 8))"))
    graded = grade_variants(A, {"student": {"scaled_dot_product_attention": src}}, tmp_path, timeout=60)
    lost = {c for c, s in graded.scores["student"].items() if s < graded.max_scores[c]}
    assert lost == {"test_sdpa_values", "test_sdpa_causal", "test_sdpa_padding"}, lost
    nb = graded.autograded("student", A)
    for c in lost:
        assert error_text(nb, c).startswith(f"{verdict.HIDDEN_FAILED}: {verdict.HIDDEN_MESSAGE}"), error_text(nb, c)
    meta = nb.metadata[META]
    assert meta["status"] == "ok" and meta["reasons"] == []       # a wrong answer, not a flag
    assert set(meta["hidden_failed"]) == lost and "hidden test:" in meta["hidden_failed"]["test_sdpa_values"]
    res = graded.course.generate_feedback(A, "student")
    assert res["success"], res
    fb = graded.course.path("feedback", "student", A) / f"{A}.html"
    text = html.unescape(re.sub(r"<[^>]+>", "", fb.read_text()))
    assert verdict.HIDDEN_MESSAGE in text  # the student is told a hidden check failed ...
    assert "hidden test:" not in text and not re.search(r"\bcase: ", text)
    assert not [s for s in peeking.hidden_text(A) if s in text]  # ... but not how it checks
