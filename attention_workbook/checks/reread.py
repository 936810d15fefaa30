"""The "Reread" line of a failed check as links that open the lecture section: in this
checkout (JupyterLab), on GitHub and on Colab, at the release the package belongs to."""

from __future__ import annotations

import re
import sys

_REREAD = re.compile(r"^(?P<label>.*?)\s*\((?P<path>lectures/[\w.-]+\.ipynb)(?:#(?P<anchor>[\w-]+))?\)\s*$")


def reread_links(reread: str) -> dict[str, str] | None:
    """For "lecture 04, section 'Padding masks' (lectures/04_queries_keys_values.ipynb#padding-mask)":
    the label and the section's address from an exercise notebook (``local``, relative to
    ``exercises/NN_topic/``), on GitHub and on Colab, both at the release the package belongs
    to (``config.repository()``); None for a text without a lecture path."""
    m = _REREAD.match(reread)
    if not m:
        return None
    from .. import config

    url, release = config.repository()
    path, anchor = m["path"], m["anchor"]
    fragment = f"#{anchor}" if anchor else ""
    # the lecture cell that holds the anchor is named after it (tools/nbcells.py, `make links`):
    # JupyterLab scrolls to it by cell id, Colab by its metadata id
    return {"label": m["label"], "local": f"../../{path}" + (f"#cell-id={anchor}" if anchor else ""),
            "github": f"{url}/blob/{release}/{path}{fragment}",
            "colab": config.colab_url(path) + (f"#scrollTo={anchor}" if anchor else "")}


def reread_html(reread: str, on_colab: bool = False) -> str | None:
    """One HTML line: "Reread <the section, linked>" (opened in this checkout, or on Colab when
    running there) "(GitHub, Colab)"; None when ``reread`` names no lecture file."""
    import html

    links = reread_links(reread)
    if links is None:
        return None
    out = lambda key, text: (f'<a href="{html.escape(links[key])}" target="_blank" rel="noopener">'
                             f"{html.escape(text)}</a>")
    main = (
        out("colab", links["label"])
        if on_colab
        else f'<a href="{html.escape(links["local"])}">{html.escape(links["label"])}</a>'
    )
    return (f'<div style="margin: 0.2em 0 0.4em 0"><b>Reread:</b> {main} '
            f'<span style="opacity: 0.75">({out("github", "on GitHub")}, {out("colab", "on Colab")})</span></div>')


def _notebook_shell():
    """The IPython shell of a kernel that a notebook front end talks to (Jupyter, Colab), or
    None: plain Python, a terminal, or nbgrader grading (its outputs stay plain text)."""
    import os

    if os.environ.get("NBGRADER_EXECUTION") or "IPython" not in sys.modules:
        return None
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:  # noqa: BLE001 - no shell, no links
        return None
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


def show_reread_links(reread: str) -> bool:
    """Display the "Reread" line as links right after the failure box (once the cell has
    finished, so it comes below the box). False, and nothing shown, where that cannot be done."""
    shell = _notebook_shell()
    content = reread_html(reread, on_colab="google.colab" in sys.modules) if shell is not None else None
    if content is None:
        return False
    try:
        from IPython.display import HTML, display
    except ImportError:
        return False

    def show():
        try:
            shell.events.unregister("post_execute", show)
        except ValueError:
            pass
        display(HTML(content), metadata={"awb": "reread"})

    shell.events.register("post_execute", show)
    return True
