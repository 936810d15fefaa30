"""nbgrader's metadata validation with the schema checked once (``course._SchemaCheckedOnce``)
accepts and rejects exactly what ``jsonschema.validate`` does, with the same errors."""

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
