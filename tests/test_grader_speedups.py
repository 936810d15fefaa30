"""What the grader does faster than stock nbgrader / jupyter_client does exactly what they do.

nbgrader's metadata validation with the schema checked once (``course._SchemaCheckedOnce``)
accepts and rejects exactly what ``jsonschema.validate`` does, with the same errors; a new
gradebook gets the migration head ``alembic heads`` names, read once in-process
(``course.nbgrader_alembic_head_once``); jsonschema's IRI checks, whose grammar is built on
first use (``course._defer_iri_grammar``), answer as the real module does; the kernel manager
looks for a stopped kernel every 5 ms (``kernelmanager.PromptKernelManager``). The feedback's
cached templates give the stock exporter's HTML: ``tests/test_feedback_hidden.py``."""

import copy

import jsonschema
import pytest
from nbformat.v4 import new_code_cell

from awb_grader.course import _SchemaCheckedOnce


def _validator():
    from nbgrader.nbgraderformat.v3 import MetadataValidatorV3

    return MetadataValidatorV3()


GOOD = {"grade": True, "grade_id": "test_softmax", "locked": True, "points": 2, "schema_version": 3,
        "solution": False, "task": False}
BAD = [
    {**GOOD, "points": "two"},                 # wrong type
    {**GOOD, "solution": "yes"},
    {**GOOD, "grade_id": 7},
    {**GOOD, "surprise": 1},                   # a key the schema does not allow
]


@pytest.mark.parametrize("metadata", [GOOD, *BAD], ids=["good", "points-str", "solution-str", "int-id", "extra-key"])
def test_same_verdict_and_error_as_jsonschema(metadata):
    schema = _validator().schema
    once = _SchemaCheckedOnce(jsonschema)

    def outcome(validate):
        try:
            validate(copy.deepcopy(metadata), schema)
            return None
        except jsonschema.ValidationError as e:
            return (type(e), e.message, list(e.absolute_path), e.validator)

    expected = outcome(jsonschema.validate)
    assert (expected is None) == (metadata is GOOD)
    assert outcome(once.validate) == expected
    assert outcome(once.validate) == expected       # and again, from its cache


def test_nbgrader_rejects_corrupt_metadata_as_before(monkeypatch):
    from nbgrader.nbgraderformat import ValidationError, common

    cell = new_code_cell("x = 1", metadata={"nbgrader": {**GOOD, "points": "two"}})
    with pytest.raises(ValidationError):
        _validator().validate_cell(cell)
    monkeypatch.setattr(common, "jsonschema", _SchemaCheckedOnce(jsonschema))
    with pytest.raises(ValidationError):
        _validator().validate_cell(cell)
    _validator().validate_cell(new_code_cell("x = 1", metadata={"nbgrader": GOOD}))


def test_alembic_head_read_in_process_is_what_the_alembic_command_says(tmp_path):
    from nbgrader import api

    from awb_grader.course import Course, alembic_head, ensure_kernel_path

    ensure_kernel_path()                               # nbgrader runs `alembic` from PATH
    original = getattr(api.get_alembic_version, "original", api.get_alembic_version)
    assert alembic_head() == original()                # nbgrader's way: `alembic heads` in a new Python
    Course(tmp_path).api()                             # installs the in-process answer
    assert api.get_alembic_version() == original()
    from sqlalchemy import text

    with api.Gradebook(f"sqlite:///{tmp_path / 'new.db'}") as gb:   # a new gradebook records it
        assert gb.db.execute(text("SELECT version_num FROM alembic_version")).scalar() == original()


def test_iri_checks_answer_as_the_real_grammar():
    import subprocess
    import sys

    code = """
import sys, json
if sys.argv[1] == "deferred":
    import awb_grader.course                            # installs the stand-in first
import jsonschema
print(json.dumps("rfc3987_syntax.syntax_helpers" in sys.modules))   # the grammar's module
fc = jsonschema.FormatChecker()
cases = ["http://example.com/\u00e4", "http://exa mple.com", "urn:isbn:0451450523", "//x/y", "a:b:c", ":nope"]
print(json.dumps([[fc.conforms(c, f) for f in ("iri", "iri-reference")] for c in cases]))
"""
    out = {how: subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True, check=True)
           .stdout.splitlines() for how in ("deferred", "plain")}
    assert out["plain"][0] == "true" and out["deferred"][0] == "false", "the grammar was built on import"
    assert out["deferred"][1] == out["plain"][1]
    assert "true" in out["plain"][1] and "false" in out["plain"][1]   # the cases tell the two apart


def test_a_stopped_kernel_is_noticed_within_5_ms_steps(monkeypatch, tmp_path):
    """nbgrader's kernel manager (``kernelmanager.PromptKernelManager``, selected for every
    course) looks for a killed kernel's process every 5 ms, not every 100 ms."""
    import asyncio

    from awb_grader import kernelmanager
    from awb_grader.course import Course

    cfg = Course(tmp_path).config()
    assert cfg.Execute.kernel_manager_class == "awb_grader.kernelmanager.PromptKernelManager"
    km = kernelmanager.PromptKernelManager()
    alive = iter([True, True, True, False])
    slept = []

    async def is_alive():
        return next(alive)

    async def sleep(s):
        slept.append(s)

    monkeypatch.setattr(km, "_async_is_alive", is_alive)
    monkeypatch.setattr(asyncio, "sleep", sleep)
    asyncio.run(km._async_wait())
    assert slept == [0.005] * 3
