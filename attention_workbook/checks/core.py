"""Machinery shared by the visible checks (this package) and the hidden ones (autograder/).

A failed check raises :class:`CheckFailed`. IPython asks an exception for
``_render_traceback_()`` before formatting it, so a failure shows the student a short
hint (what went wrong, the likely mistake, the lecture section to reread) instead of a
long traceback into this package. nbgrader still sees an error and withholds the points.

Warnings never cost points: nbgrader scores a test cell 0 as soon as anything reaches stderr,
and a Python warning (a deprecation in the student's own code, or the checks turning a tensor
that requires grad into a number) is printed to stderr. Every check function is wrapped by
:func:`guard` (each check module ends with ``guard(globals())``) and :func:`call` runs student
code under the same capture: warnings are recorded, never printed, and when a check fails the
recorded warnings that explain the failure are added to its message.

Integer answers (a parameter count, ...) follow one rule, :func:`expect_int`: a Python int, or
anything Python itself accepts as an index (a numpy integer, a one-element integer tensor);
a float is not an integer answer, even when it is a whole number.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import math
import operator
import re
import sys
import traceback
import warnings
from typing import Any, Callable, Iterable

import torch

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


# ----------------------------------------------------------------------------------------
# "Reread": links that open the lecture section (in the checkout, on GitHub, on Colab)
# ----------------------------------------------------------------------------------------
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
    # the lecture cell that holds the anchor is named after it (tools/nbsrc.py, `make links`):
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
    main = out("colab", links["label"]) if on_colab else f'<a href="{html.escape(links["local"])}">{html.escape(links["label"])}</a>'
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


class ForbiddenCall(RuntimeError):
    pass


def passed(message: str) -> None:
    print(f"{GREEN}\u2714 {message}{RESET}")


def _student_frames(tb) -> list[str]:
    """Frames of a traceback that belong to notebook cells (student code), formatted short."""
    lines = []
    for fs in traceback.extract_tb(tb):
        fn = fs.filename
        if "ipykernel_" in fn or fn.startswith("<ipython-input") or fn.startswith("<cell"):
            src = (fs.line or linecache.getline(fn, fs.lineno) or "").strip()
            lines.append(f"in {fs.name}, line {fs.lineno}: {src}")
    return lines[-4:]


def call(fn: Callable, *args, name: str | None = None, reread: str | None = None, **kwargs) -> Any:
    """Call student code; turn any exception into a short CheckFailed that names it."""
    name = name or getattr(fn, "__name__", "your function")
    with warnings.catch_warnings(record=True) as seen:   # student warnings: recorded, never printed
        warnings.simplefilter("always")
        _own_work(fn, name)
        try:
            return fn(*args, **kwargs)
        except CheckFailed as e:
            explain_warnings(e, seen)
            raise
        except ForbiddenCall as e:
            raise CheckFailed(f"{name} called a built-in that this exercise rules out",
                              hint=str(e), reread=reread) from None
        except NotImplementedError:
            raise CheckFailed(f"{name} is not implemented yet",
                              hint="replace `raise NotImplementedError()` with your code, run that cell, then this one",
                              reread=reread) from None
        except Exception as e:  # noqa: BLE001 - any student error becomes a hint
            tb = _student_frames(sys.exc_info()[2])
            err = CheckFailed(f"{name} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                              hint=_hint_for_exception(e), reread=reread, student_tb=tb)
            explain_warnings(err, seen)
            raise err from None
        finally:
            _count(seen)
            _RECENT.extend(seen)    # a later failure of the check may be explained by them


def _own_work(fn: Callable, name: str) -> None:
    """A graded item that delegates to the workbook's reference implementation fails at once
    (see ``own.py``; the grader decides the same outside the student's process)."""
    from . import own

    own.check(fn, name)


def _hint_for_exception(e: Exception) -> str | None:
    msg = str(e)
    if "must match the size" in msg or "cannot be multiplied" in msg or "mat1 and mat2" in msg:
        return "a shape mismatch: write the shape of every tensor next to each line, e.g. # (B, T, d)"
    if "expected scalar type" in msg or "dtype" in msg:
        return "a dtype mismatch: masks are bool, scores are floating point"
    if isinstance(e, (NameError,)):
        return "a name is not defined: did you run every cell above this one?"
    return None


# ----------------------------------------------------------------------------------------
# warnings: captured inside the checks, used to explain a failure, never printed
# ----------------------------------------------------------------------------------------
WARNING_HINTS = {
    "not a leaf Tensor": "you read .grad of a tensor that is not a leaf (a result of an operation): .grad is only "
                         "filled for the tensor you called requires_grad_() on; use torch.autograd.grad(loss, x)",
    "Implicit dimension choice for softmax": "a softmax without dim= picks an axis for you; name it: dim=-1",
    "on tensors of dimension other than 2": "x.T reverses ALL the axes of a tensor that is not 2-D: to swap "
                                            "the last two axes use x.mT or x.transpose(-2, -1)",
    "requires_grad=True to a scalar": "a tensor that still requires grad was turned into a number: .detach() it first",
}


CAPTURED = {"warnings": 0}   # how many warnings the checks have swallowed (the tests read it)


_RECENT: list = []   # warnings student code raised inside call() during the running guarded check


def _count(seen: list) -> None:
    CAPTURED["warnings"] += len(seen)


def explain_warnings(err: CheckFailed, seen: list) -> None:
    """Add the warnings recorded while a failing check ran to its message (once each); a
    warning known to explain a failure (WARNING_HINTS) becomes the hint when there is none."""
    for w in seen:
        text = str(w.message).splitlines()[0] if str(w.message) else type(w.message).__name__
        line = f"Python warned: {text[:200]}"
        if line in err.details or sum(d.startswith("Python warned:") for d in err.details) >= 3:
            continue
        err.details.append(line)
        known = next((h for k, h in WARNING_HINTS.items() if k in str(w.message)), None)
        if known and not err.hint:
            err.hint = known
    err.args = (err.plain(),)


def guarded(fn: Callable) -> Callable:
    """``fn`` with every warning it (or student code it calls) raises recorded instead of
    printed; when it fails, the recorded warnings are added to the CheckFailed message."""
    if getattr(fn, "__awb_guarded__", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        outer = _RECENT[:]
        _RECENT.clear()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                return fn(*args, **kwargs)
            except CheckFailed as e:
                explain_warnings(e, _RECENT + seen)
                raise
            finally:
                _count(seen)
                _RECENT[:] = outer

    wrapper.__awb_guarded__ = True
    return wrapper


def guard(namespace: dict) -> None:
    """Wrap every public function defined in a check module with :func:`guarded`. Each check
    module (visible ``checks.exNN`` and hidden ``awb_grader.hidden.exNN``) ends with
    ``guard(globals())``, so no check, and no student code a check calls, can print a warning."""
    module = namespace.get("__name__")
    for name, obj in list(namespace.items()):
        if (name.startswith("_") or not inspect.isfunction(obj) or obj.__module__ != module
                or inspect.isgeneratorfunction(obj)):
            continue
        namespace[name] = guarded(obj)


# ----------------------------------------------------------------------------------------
# integer answers
# ----------------------------------------------------------------------------------------
INT_RULE = ("return a whole number: a Python int (or anything Python accepts as an index, such as a "
            "one-element integer tensor); use // and int(...), not /")


def as_int(value: Any) -> int | None:
    """The integer an answer stands for under the workbook's one rule, or None: a Python int or
    anything ``operator.index`` accepts (numpy integers, one-element integer tensors); never a
    bool, never a float (not even 3.0)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor) and value.requires_grad:
        value = value.detach()
    try:
        return operator.index(value)
    except TypeError:
        return None


def expect_int(value: Any, what: str, reread: str | None = None) -> int:
    """``value`` as an int (see :func:`as_int`), or a CheckFailed that says why it is not one."""
    n = as_int(value)
    if n is not None:
        return n
    if isinstance(value, float) or (isinstance(value, torch.Tensor) and value.is_floating_point()):
        raise CheckFailed(f"{what} returned a float ({value!r}), not an integer", hint=INT_RULE, reread=reread)
    if value is None:
        raise CheckFailed(f"{what} returned None", hint="did you forget a `return`?", reread=reread)
    raise CheckFailed(f"{what} returned {type(value).__name__} {value!r}, not an integer", hint=INT_RULE,
                      reread=reread)


@contextlib.contextmanager
def forbid(targets: list[tuple[Any, str]], why: str):
    """Temporarily replace ``getattr(owner, attr)`` for each (owner, attr) with a function that
    raises ForbiddenCall(why). Used to say "write it yourself" when a built-in is called."""
    saved = []
    for owner, attr in targets:
        if hasattr(owner, attr):
            saved.append((owner, attr, getattr(owner, attr)))

            def _blocked(*a, _attr=attr, **k):
                raise ForbiddenCall(f"{why} (you called {_attr})")

            setattr(owner, attr, _blocked)
    try:
        yield
    finally:
        for owner, attr, orig in reversed(saved):
            setattr(owner, attr, orig)


def softmax_builtins() -> list[tuple[Any, str]]:
    import torch.nn.functional as F

    return [(torch, "softmax"), (F, "softmax"), (torch.Tensor, "softmax"), (torch.special, "softmax"),
            (torch, "log_softmax"), (F, "log_softmax"), (torch.Tensor, "log_softmax")]


def expect_tensor(out: Any, what: str, reread: str | None = None) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"{what} should return a torch.Tensor, got {type(out).__name__}",
                          hint="did you forget a `return`?" if out is None else None, reread=reread)
    return out


def expect_shape(out: torch.Tensor, shape, what: str, hint: str | None = None, reread: str | None = None,
                 inputs: str | None = None) -> None:
    if tuple(out.shape) != tuple(shape):
        details = [f"expected shape {tuple(shape)}, got {tuple(out.shape)}"]
        if inputs:
            details.insert(0, f"inputs: {inputs}")
        raise CheckFailed(f"{what} has the wrong shape", hint=hint, reread=reread, details=details)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.detach().double(), b.detach().double()
    both_inf = torch.isinf(a64) & torch.isinf(b64) & (torch.sign(a64) == torch.sign(b64))
    diff = (a64 - b64).abs()
    diff = torch.where(both_inf, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    return float(diff.max()) if diff.numel() else 0.0


def close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """allclose written out (so a notebook that patches torch.allclose changes nothing here)."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    a64, b64 = a.detach().double(), b.detach().double()
    nan_a, nan_b = torch.isnan(a64), torch.isnan(b64)
    if not torch.equal(nan_a, nan_b):  # nan in the same places counts as equal (e.g. fully masked rows)
        return False
    a64, b64 = a64.masked_fill(nan_a, 0.0), b64.masked_fill(nan_b, 0.0)
    return max_abs_diff(a64, b64) <= atol + rtol * float(b64.abs().nan_to_num(0, 0, 0).max() if b64.numel() else 0)


def expect_close(out: torch.Tensor, ref: torch.Tensor, what: str, hint: str | None = None,
                 reread: str | None = None, atol: float = 1e-5, rtol: float = 1e-4,
                 inputs: str | None = None) -> None:
    if not close(out, ref, atol, rtol):
        details = [f"max |yours - expected| = {max_abs_diff(out, ref):.3g} (tolerance {atol:g} + {rtol:g}*|expected|)"]
        if inputs:
            details.insert(0, f"inputs: {inputs}")
        raise CheckFailed(f"{what} has the wrong values", hint=hint, reread=reread, details=details)


def first_match(out: torch.Tensor, candidates: dict[str, torch.Tensor], atol: float = 1e-5) -> str | None:
    """Name of the first known-wrong result ``out`` equals (used to name the student's mistake)."""
    for name, cand in candidates.items():
        if tuple(cand.shape) == tuple(out.shape) and close(out, cand, atol=atol):
            return name
    return None

