"""``HoldOutHiddenTests``: the autograde step that keeps the hidden checks out of the student's kernel.

nbgrader's release already strips every ``### BEGIN HIDDEN TESTS ... ### END HIDDEN TESTS``
block from what the student gets; at autograde time nbgrader restores the test cells, blocks
included, and would run them in the student's kernel, where the student's code could read the
hidden checks' modules, their seeds and oracles, and print them into its own feedback.

:class:`HoldOutHiddenTests` (configured in ``core.config.PREPROCESSORS`` before the execution) is
nbgrader's own ``ClearHiddenTests`` applied to the test cells only: the kernel runs each test
cell's visible check and nothing else. The cells as they were, hidden blocks included, are kept
in this process's ``resources`` (never in the notebook the kernel reads, nor in its folder);
``OutsideVerdict`` (``outside_verdict.py``) puts them back into the autograded notebook after the execution and
runs the hidden blocks outside the student's process (``verdict.outside.decide``), the one place they
run. The course's own notebooks (the test suite's catalog, the demo) are graded the same way.
"""

from __future__ import annotations

from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests

HELD = "awb_held_tests"      # resources key: {test grade_id: the cell's source before the hidden block went}


def held_tests(resources) -> dict[str, str] | None:
    """What :class:`HoldOutHiddenTests` took out of this notebook's test cells (None: it did not run)."""
    return resources.get(HELD)


class HoldOutHiddenTests(ClearHiddenTests):
    """Before the execution: every test cell's hidden block is taken out (the visible check stays),
    and the cell as it was is kept in ``resources`` for the outside verdict."""

    def preprocess(self, nb, resources):
        resources[HELD] = {}
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        # only the test cells: an answer cell that holds the markers is the student's own text
        if cell.cell_type != "code" or not utils.is_grade(cell) or utils.is_solution(cell):
            return cell, resources
        before = cell.source
        cell, resources = super().preprocess_cell(cell, resources, index)
        if cell.source != before:
            resources[HELD][cell.metadata["nbgrader"]["grade_id"]] = before
        return cell, resources
