"""A check's verdict: :class:`CheckFailed`, shown to the student as a short hint, not a traceback.

IPython asks an exception for ``_render_traceback_()`` before formatting it, so a failure shows
the student what went wrong, the likely mistake and the lecture section to reread instead of a
long traceback into this package. nbgrader still sees an error and withholds the points.
"""

from __future__ import annotations

from typing import Iterable

from .reread import show_reread_links

RED, GREEN, BOLD, RESET = "\x1b[0;31m", "\x1b[0;32m", "\x1b[1m", "\x1b[0m"


class CheckFailed(AssertionError):
    """A check's verdict: ``title`` says what failed, ``hint`` the likely mistake,
    ``reread`` the lecture section, ``details`` extra lines (inputs, numbers)."""

    def __init__(self, title: str, hint: str | None = None, reread: str | None = None,
                 details: Iterable[str] = (), student_tb: list[str] | None = None):
        self.title, self.hint, self.reread = title, hint, reread
        self.details, self.student_tb = list(details), student_tb or []
        super().__init__(self.plain())

    def lines(self, reread: bool = True) -> list[str]:
        out = [f"{RED}{BOLD}Check failed:{RESET}{RED} {self.title}{RESET}"]
        out += [f"  {d}" for d in self.details]
        if self.student_tb:
            out.append("  Where it happened in your code:")
            out += [f"    {ln}" for ln in self.student_tb]
        if self.hint:
            out.append(f"{BOLD}Hint:{RESET} {self.hint}")
        if self.reread and reread:
            out.append(f"{BOLD}Reread:{RESET} {self.reread}")
        return out

    def plain(self) -> str:
        text = "\n".join(self.lines())
        for code in (RED, GREEN, BOLD, RESET):
            text = text.replace(code, "")
        return text

    def _render_traceback_(self) -> list[str]:  # IPython hook: show this instead of a traceback
        # In Jupyter or Colab the "Reread" line follows the box as links that open the section;
        # everywhere else (a terminal, nbgrader's graded run) it stays a line of text. The
        # exception's own text (what nbgrader records) always has all of it.
        if not hasattr(self, "_links_shown"):   # IPython may render one exception more than once
            self._links_shown = bool(self.reread) and show_reread_links(self.reread)
        return self.lines(reread=not self._links_shown)


class ForbiddenCall(RuntimeError):
    pass


def passed(message: str) -> None:
    print(f"{GREEN}\u2714 {message}{RESET}")
