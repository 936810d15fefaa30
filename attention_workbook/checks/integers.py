"""Integer answers (a parameter count, ...) follow one rule, :func:`expect_int`: a Python int, or
anything Python itself accepts as an index (a numpy integer, a one-element integer tensor); a
float is not an integer answer, even when it is a whole number."""

from __future__ import annotations

import operator
from typing import Any

import torch

from .failure import CheckFailed

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
