"""The autograde step that flags active HTML in a submission's outputs
(``awb_grader/core/preprocessors/active_html.py``; issue 38). The browser end of it (formgrader
and the feedback rendering nothing of it) is ``tests/test_formgrader.py``."""

import nbformat
import pytest

from awb_grader.core.preprocessors.active_html import FlagActiveHTML, active_html, active_parts
from awb_grader.core.course import EXERCISES, SOLUTIONS
from awb_grader.core.metadata import META


@pytest.mark.parametrize("html,found", [
    ("<script>alert(1)</script>", ["<script>"]),
    ("<img src=x onerror=\"alert(1)\">", ["an event handler (onerror=)"]),
    ("<a href=' java\nscript:alert(1)'>x</a>", ["a javascript: link (href=)"]),   # browsers drop the newline
    ("<a href='JavaScript:alert(1)'>x</a>", ["a javascript: link (href=)"]),
    ("<iframe src='/api/contents'></iframe>", ["<iframe>"]),
    ("<svg><g onload='x()'/></svg>", ["an event handler (onload=)"]),
    ("<table><tr><td>1</td></tr></table><b>bold</b> <a href='https://example.org'>ok</a>", []),
    ("x < y and y > z", []),
])
def test_active_parts(html, found):
    assert active_parts(html) == found


def test_a_notebook_with_active_outputs_is_flagged_and_scores_nothing_less():
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("display(...)")
    code.outputs = [nbformat.v4.new_output("display_data", {"text/html": "<script>x()</script>", "text/plain": "x"}),
                    nbformat.v4.new_output("display_data", {"application/javascript": "x()", "text/plain": "x"}),
                    nbformat.v4.new_output("stream", text="<script> as text in a stream is inert\n")]
    code.metadata["nbgrader"] = {"grade_id": "answer_1"}
    nb.cells = [nbformat.v4.new_markdown_cell("notes <img src=x onerror=y()>"), code]
    assert active_html(nb) == ["cell 1: an event handler (onerror=)",
                               "answer_1: <script>, a application/javascript output"]
    nb.metadata[META] = {"status": "ok", "reasons": ["earlier"], "withheld": {}}
    nb, _ = FlagActiveHTML().preprocess(nb, {})
    meta = nb.metadata[META]
    assert meta["status"] == "flagged" and meta["reasons"][0] == "earlier"
    assert meta["reasons"][1].startswith("active HTML in its outputs") and "answer_1: <script>" in meta["reasons"][1]


def test_the_course_own_notebooks_are_never_flagged():
    """No false alarm on what the course itself writes: every solution and release notebook."""
    paths = sorted(SOLUTIONS.glob("*/*.ipynb")) + sorted(EXERCISES.glob("*/*.ipynb"))
    assert len(paths) >= 18
    for p in paths:
        assert active_html(nbformat.read(p, as_version=4)) == [], p
