"""``FlagActiveHTML``: a submission whose outputs (or markdown cells) carry active HTML is flagged.

The instructor's pages render every output inert (the course's ``nbgrader_config.py``:
nbconvert's ``HTMLExporter.sanitize_html`` and its ``SanitizeHTML`` preprocessor, for formgrader's
manual grading and nbgrader's feedback). A student whose notebook carries script, an event
handler, a ``javascript:`` link, a frame or an embedded object still means something: it tried
to run in the browser of whoever opens it. :class:`FlagActiveHTML` is an autograde step
(``core.config.PREPROCESSORS``): it reads every output and markdown cell with the standard library's
HTML parser and flags the submission, with what it found and where. It takes no points.
"""

from __future__ import annotations

from html.parser import HTMLParser

from nbgrader.preprocessors import NbGraderPreprocessor

from ..metadata import META

ACTIVE_TAGS = {"script", "iframe", "frame", "frameset", "object", "embed", "applet", "base", "meta"}
URL_ATTRS = {"href", "src", "action", "formaction", "xlink:href", "data", "srcdoc", "background", "poster"}
RUNS = ("application/javascript", "text/javascript", "application/vnd.jupyter.widget-view+json")
HTML_KEYS = ("text/html", "text/markdown", "image/svg+xml")


class _Finder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ACTIVE_TAGS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            name = (name or "").lower()
            if name.startswith("on"):
                self.found.append(f"an event handler ({name}=)")
            elif name in URL_ATTRS and "".join((value or "").split()).lower().startswith(("javascript:", "vbscript:")):
                self.found.append(f"a javascript: link ({name}=)")
            elif name == "srcdoc":
                self.found.append("an inline document (srcdoc=)")

    handle_startendtag = handle_starttag


def active_parts(html: str) -> list[str]:
    """What in ``html`` would run in a browser: script/frame/object tags, event handlers,
    ``javascript:`` links (each once, in order)."""
    f = _Finder()
    try:
        f.feed(html)
        f.close()
    except Exception:  # noqa: BLE001 - a parser failure is a reason to look, not a crash
        f.found.append("HTML the parser could not read")
    return list(dict.fromkeys(f.found))


def active_html(nb) -> list[str]:
    """One line per cell whose outputs (or markdown) carry active HTML: where and what."""
    out = []
    for i, cell in enumerate(nb.cells):
        where = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {i + 1}"
        found = []
        if cell.cell_type == "markdown":
            found += active_parts(cell.source)
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            found += [f"a {k} output" for k in RUNS if k in data]
            for k in HTML_KEYS:
                if k in data:
                    text = data[k] if isinstance(data[k], str) else "".join(data[k])
                    found += active_parts(text)
        if found:
            out.append(f"{where}: {', '.join(dict.fromkeys(found))}")
    return out


class FlagActiveHTML(NbGraderPreprocessor):
    """Autograde step: a notebook whose outputs or markdown carry active HTML is flagged for review
    (status and reason in the notebook's ``awb_grader`` metadata, where every door reads them)."""

    def preprocess(self, nb, resources):
        found = active_html(nb)
        if found:
            meta = nb.metadata.setdefault(META, {"status": "ok", "reasons": [], "withheld": {}})
            shown = "; ".join(found[:5]) + ("; ..." if len(found) > 5 else "")
            meta["reasons"] = [*meta.get("reasons", []),
                               f"active HTML in its outputs (would run in the browser of whoever opens it; "
                               f"shown inert to the instructor): {shown}"]
            meta["status"] = "flagged"
        return nb, resources
