"""Warnings never cost points: captured inside the checks, used to explain a failure, never printed.

nbgrader scores a test cell 0 as soon as anything reaches stderr, and a Python warning (a
deprecation in the student's own code, or the checks turning a tensor that requires grad into a
number) is printed to stderr. Every check function is wrapped by :func:`guarded` (each check
module ends with ``guard(globals())``) and ``core.call`` runs student code under the same
capture: warnings are recorded, never printed, and when a check fails the recorded warnings
that explain the failure are added to its message.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Callable

from .failure import CheckFailed

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
