"""Cell outputs the grader writes (an error output, as the kernel would have written it)."""

from __future__ import annotations


def error_output(ename: str, why: str):
    """An error output, as the kernel would have written it (nbgrader scores its cell 0)."""
    from nbformat.v4 import new_output

    return new_output("error", ename=ename, evalue=why, traceback=[f"{ename}: {why}"])
