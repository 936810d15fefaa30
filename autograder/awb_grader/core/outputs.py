"""Cell outputs: the error output the grader writes (as the kernel would have), and the error text it reads back."""

from __future__ import annotations

import re

from .metadata import cell_meta

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(text: str) -> str:
    """``text`` without the terminal colour codes IPython puts in tracebacks."""
    return _ANSI.sub("", text)


def error_output(ename: str, why: str):
    """An error output, as the kernel would have written it (nbgrader scores its cell 0)."""
    from nbformat.v4 import new_output

    return new_output("error", ename=ename, evalue=why, traceback=[f"{ename}: {why}"])


def error_text(nb, grade_id: str) -> str:
    """The error output of one graded cell (ANSI codes removed), '' if it passed."""
    for cell in nb.cells:
        if cell_meta(cell).get("grade_id") == grade_id and cell.cell_type == "code":
            parts = []
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    parts.append(out.get("ename", "") + ": " + out.get("evalue", ""))
                    parts.extend(out.get("traceback", []))
            return strip_ansi("\n".join(parts))
    return ""
