"""Verdicts the student's code cannot influence: the outside re-check of earned test cells, the static
scans of the answer cells (obfuscation, delegation to the workbook's reference)."""
