"""One source of truth for what is graded: attention_workbook/checks/graded.py is generated from
the release notebooks' nbgrader metadata (awb_grader/devtools/graded_facts.py, run by `make release`),
and the battery, the own-work rules and the tests read it instead of repeating it by hand.

* the committed module is what the committed release says (else: run `make release`);
* the battery's ITEMS/POINTS and own.EXERCISES are that module, nothing added by hand;
* it ships inside the package: a learner who installed only the package (Colab) has the items.
"""

import subprocess
import sys

import pytest

from attention_workbook.checks import battery, graded, own
from awb_grader.devtools import graded_facts
from awb_grader.core.course import REPO, assignments


def test_generated_module_matches_the_release():
    problems = graded_facts.diff()
    assert not problems, "\n".join(problems)


def test_every_exercise_is_there():
    assert list(graded.ANSWERS) == list(graded.TESTS) == list(graded.PROVIDED) == assignments()


def test_battery_and_own_work_read_the_generated_facts():
    assert {ex: [(it.cell, it.points, it.check, it.args) for it in items] for ex, items in battery.ITEMS.items()} \
        == graded.TESTS
    assert battery.POINTS == {ex: {t[0]: t[1] for t in tests} for ex, tests in graded.TESTS.items()}
    assert own.EXERCISES == {ex[:2]: {"graded": graded.ANSWERS[ex], "provided": graded.PROVIDED[ex]}
                             for ex in graded.ANSWERS}


def test_a_test_cell_that_breaks_the_convention_is_refused(tmp_path):
    """The generator reads the check from the cell's first line: anything else is an error, not a guess."""
    import json

    src = REPO / "exercises" / "02_attention_as_lookup" / "02_attention_as_lookup.ipynb"
    nb = json.loads(src.read_text())
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade"))
    cell["source"] = "x = 1\n" + "".join(cell["source"])
    (tmp_path / "02_attention_as_lookup").mkdir()
    (tmp_path / "02_attention_as_lookup" / "02_attention_as_lookup.ipynb").write_text(json.dumps(nb))
    with pytest.raises(ValueError, match="first line must be `checks.<check>"):
        graded_facts.facts(tmp_path)


@pytest.mark.slow
def test_an_installed_package_has_the_graded_items(tmp_path):
    """Built and installed like on Colab (no repository, no exercises/ on the path)."""
    target = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--target", str(target), str(REPO)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    code = ("import sys; sys.path.insert(0, sys.argv[1]); sys.modules['awb_grader'] = None\n"
            "import attention_workbook\n"
            "assert attention_workbook.__file__.startswith(sys.argv[1]), attention_workbook.__file__\n"
            "from attention_workbook.checks import battery, own\n"
            "print(sum(len(v) for v in battery.ITEMS.values()), len(own.EXERCISES))")
    res = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(sum(len(t) for t in graded.TESTS.values())), str(len(graded.ANSWERS))]


def test_a_changed_release_is_reported(tmp_path):
    """`release --check` (and the test above) notice when the notebooks and the module disagree."""
    import json
    import shutil

    shutil.copytree(REPO / "exercises", tmp_path / "exercises")
    path = tmp_path / "exercises" / "02_attention_as_lookup" / "02_attention_as_lookup.ipynb"
    nb = json.loads(path.read_text())
    first_test = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade"))
    first_test["metadata"]["nbgrader"]["points"] += 1
    path.write_text(json.dumps(nb))
    assert graded_facts.diff(tmp_path / "exercises") == [
        "attention_workbook/checks/graded.py differs from the nbgrader metadata of exercises/ (run `make release`)"]
    assert graded_facts.diff(REPO / "exercises") == []
