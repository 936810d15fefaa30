"""Progress bars for the lectures: ``tqdm.auto``, with a stored output that shows the finished bar.

In a notebook, ``tqdm.auto`` draws an ipywidgets bar. The notebook file keeps, next to the
widget, a plain-text copy of it for viewers that cannot draw widgets (GitHub, nbviewer, an
editor). tqdm writes that copy once, when the bar appears, so a lecture executed and saved
with nbclient shows "0%| | 0/7" for ever, although the loop ran to the end.

``tqdm`` below is a drop-in for ``tqdm.auto.tqdm`` that displays its widget with a display id
and, when the bar closes, updates that display: the live widget looks the same, and the
plain-text copy stored in the notebook now reads "100%| ... | 7/7 [...]". Outside a notebook
it *is* ``tqdm.auto.tqdm`` (a text bar). Every lecture uses it the same way::

    from attention_workbook.progress import tqdm

    for T in tqdm(lengths, desc="timing"):
        ...

A bar used without a ``for`` loop must be closed (``bar.close()`` or ``with tqdm(...) as
bar:``) to store its final state, as with any tqdm bar.
"""

from __future__ import annotations

from tqdm.auto import tqdm as _auto_tqdm

__all__ = ["tqdm"]

try:  # tqdm.auto picks the widget bar only inside a Jupyter kernel with ipywidgets
    from tqdm.notebook import tqdm_notebook as _notebook_tqdm
    _IN_NOTEBOOK = issubclass(_auto_tqdm, _notebook_tqdm)
except ImportError:  # pragma: no cover - tqdm always ships tqdm.notebook
    _IN_NOTEBOOK = False


if _IN_NOTEBOOK:
    from IPython.display import display as _display

    class tqdm(_notebook_tqdm):  # lower case: the name everyone imports
        """``tqdm.notebook.tqdm`` whose stored text fallback ends as the final bar."""

        def __init__(self, *args, **kwargs):
            kwargs["display"] = False                 # we display it ourselves, with an id
            super().__init__(*args, **kwargs)
            self._awb_handle = None
            if not self.disable and getattr(self, "delay", 0) <= 0:
                self._awb_handle = _display(self.container, display_id=True)
                self.displayed = True

        def close(self):
            if self.disable:
                return
            already_closed = getattr(self, "_awb_closed", False)
            super().close()
            if not already_closed and self._awb_handle is not None:
                self._awb_closed = True
                # re-send the same widget: its text/plain is now the finished bar
                self._awb_handle.update(self.container)
else:
    tqdm = _auto_tqdm
