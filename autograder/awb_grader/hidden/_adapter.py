"""The thin layer between the hidden checks and the student's objects.

A hidden check runs in two places: inside the student's kernel (nbgrader's verdict) and in the
grader's own process (``verdict.py``'s outside verdict), where every student function, class
and object is a *proxy* to a separate sandboxed process running the student's code
(``replay.py``). The checks are written once, against this small API, and work on both:

=========================  =================================================================
``new(cls, ..., seed=)``   construct the student's class (``torch.manual_seed(seed)`` first)
``obj(x)``, ``fn(x)``      call it (plain ``call(...)`` from ``_base``): inputs chosen here
``params(obj)``            {name: tensor} copies of ``named_parameters()`` (read only)
``load(obj, {path: t})``   copy tensors *into* the object's own parameters, in place
``describe(obj, prefix)``  the sub-modules: path, kind (Linear, LayerNorm, ...), sizes
``get(obj, path)``         a plain attribute (tensor, number, None); ``has(obj, path)``
``train(obj, mode)``       train / eval mode
``grads(obj, ...)``        forward + backward of the object's own loss: (loss, {name: grad})
``standin(obj, path, k)``  make a sub-module compute the reference function of its kind from
                           its own (loaded) parameters, object kept in place
``make(kind, ...)``        a checker-side object (scripted model, stub: ``replay_support``)
                           built where the student's code runs
``forbid(targets, why)``   built-ins the student's code may not call (applied where it runs)
``vjp(fn, *args,           ``fn(*args)`` where the student's code runs, with autograd on for
  grad_output=, wrt=)``    ``args[i]`` (i in wrt) and the output's backward: (output, [gradients])
``launch(kernel, grid,     a Triton kernel of the student's launched where their code runs,
  *args, **meta)``         ``kernel[grid](*args, **meta)``: what it writes into its tensor
                           arguments comes back into the checker's tensors (in place)
``call_rebound(fn,         ``fn(*args, **kwargs)`` with top-level names of the student's
  rebind, *args)``         namespace bound to checker objects (``make``) during the call
=========================  =================================================================

Locally every operation is the obvious one on the real object. Remotely each is one message
of the replay protocol (``replay.py``); only plain data crosses (tensors, numbers, strings,
and references to objects that stay in the student's process). The comparison with the
oracle always happens in the process that runs the check.

The student-process side of those operations (``replay_support.py``: what the replay server
runs beside the student's code, and what the local path runs here) holds no check: this
package is never bound into a sandbox nor imported in the student's process.
"""

from __future__ import annotations

import contextlib
import types

import torch
import torch.nn as nn

from attention_workbook.checks import core

from ..replay_support import (  # noqa: F401 - LoadError and torch_spec: part of this API
    LoadError,
    call_with_grads,
    describe_module,
    get_plain,
    grads_of,
    launch_kernel,
    load_into,
    rebound_in,
    maker,
    params_of,
    standin_into,
    torch_from_spec,
    torch_spec,
)

_CLIENT = None            # the replay client while the grader runs a check outside the kernel
_FORBID: list = []        # active (targets, why) of forbid() blocks
MISSING = object()


# ---------------------------------------------------------------------------------------------
# proxies (grader side): stand-ins for the student's functions, classes and objects
# ---------------------------------------------------------------------------------------------
class Remote:
    __module__ = "__main__"        # own_code(): the graded object is the student's


class RemoteFunction(Remote):
    def __init__(self, client, name: str):
        self._client, self.__name__, self.__qualname__ = client, name, name
        self.__module__ = "__main__"

    def __call__(self, *args, **kwargs):
        return self._client.request("call", target=self.__name__, args=args, kwargs=kwargs)

    def __repr__(self):
        return f"<student function {self.__name__} (outside the kernel)>"


class RemoteClass(RemoteFunction):
    def construct(self, args, kwargs, seed=None):
        return self._client.request("call", target=self.__name__, args=args, kwargs=kwargs, seed=seed)

    def __call__(self, *args, **kwargs):
        return self.construct(args, kwargs)

    def __instancecheck__(self, obj):
        return isinstance(obj, RemoteObject) and self.__name__ in obj._info.get("is", ())

    def __repr__(self):
        return f"<student class {self.__name__} (outside the kernel)>"


class RemoteObject(Remote):
    """An object that lives in the student's process (a module instance, a returned object)."""

    def __init__(self, client, ref: int, info: dict):
        self._client, self._ref, self._info = client, ref, dict(info)
        self.__name__, self.__module__ = info.get("type", "object"), "__main__"

    def __call__(self, *args, **kwargs):
        return self._client.request("call", target=self, args=args, kwargs=kwargs)

    def eval(self):
        return train(self, False)

    def train(self, mode: bool = True):
        return train(self, mode)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"{name}: read attributes of an object outside the kernel with _adapter.get()")

    def __repr__(self):
        return f"<{self.__name__} object (outside the kernel)>"


def is_module(x) -> bool:
    return isinstance(x, nn.Module) or (isinstance(x, RemoteObject) and bool(x._info.get("module")))


def instance_of(obj, cls) -> bool:
    if isinstance(cls, RemoteClass):
        return isinstance(obj, RemoteObject) and cls.__name__ in obj._info.get("is", ())
    return isinstance(obj, cls)


# ---------------------------------------------------------------------------------------------
# the API the checks use
# ---------------------------------------------------------------------------------------------
def new(cls, *args, name: str, seed: int | None = None, **kwargs):
    """``cls(*args, **kwargs)`` after ``torch.manual_seed(seed)`` (in the student's process)."""
    from ._base import call

    if isinstance(cls, RemoteClass):
        return call(lambda *a, **k: cls.construct(a, k, seed), *args, name=name, **kwargs)
    if seed is not None:
        torch.manual_seed(seed)
    return call(cls, *args, name=name, **kwargs)


def params(obj, prefix: str = "") -> dict:
    if isinstance(obj, RemoteObject):
        return dict(obj._client.request("params", target=obj, prefix=prefix))
    return dict(params_of(obj, prefix))


def load(obj, values: dict) -> None:
    if isinstance(obj, RemoteObject):
        obj._client.request("load", target=obj, values=dict(values))
    else:
        load_into(obj, values)


def describe(obj, prefix: str = "") -> list[dict]:
    if isinstance(obj, RemoteObject):
        return list(obj._client.request("describe", target=obj, prefix=prefix))
    return describe_module(obj, prefix)


def submodule(obj, path: str) -> dict | None:
    """describe()'s entry for the sub-module at ``path`` (None: no such sub-module)."""
    try:
        found = describe(obj, path)
    except (AttributeError, LoadError):
        return None
    return found[0] if found else None


def get(obj, path: str, default=MISSING):
    try:
        if isinstance(obj, RemoteObject):
            return obj._client.request("get", target=obj, path=path)
        return get_plain(obj, path)
    except AttributeError:
        if default is MISSING:
            raise
        return default


def has(obj, path: str) -> bool:
    return get(obj, path, MISSING_DEFAULT) is not MISSING_DEFAULT


MISSING_DEFAULT = object()


def train(obj, mode: bool = True):
    if isinstance(obj, RemoteObject):
        obj._client.request("train", target=obj, mode=bool(mode))
    else:
        obj.train(mode)
    return obj


def grads(obj, *args, **kwargs):
    """Forward with autograd on, backward of the object's own loss (the second output when it
    returns a tuple, else the output): (loss as a float, {parameter name: gradient})."""
    if isinstance(obj, RemoteObject):
        loss, g = obj._client.request("grads", target=obj, args=args, kwargs=kwargs)
        return loss, dict(g)
    loss, g = grads_of(obj, args, kwargs)
    return loss, dict(g)


def standin(obj, path: str, kind: str, *options) -> None:
    if isinstance(obj, RemoteObject):
        obj._client.request("standin", target=obj, path=path, kind=kind, options=list(options))
    else:
        standin_into(obj, path, kind, options)


def make(kind: str, *args, **kwargs):
    """A checker-side object (``MAKERS``) built where the student's code runs."""
    if _CLIENT is not None:
        return _CLIENT.request("make", kind=kind, args=args, kwargs=kwargs)
    return maker(kind)(*args, **kwargs)


def launch(kernel, grid, *args, name: str, **meta) -> None:
    """``kernel[grid](*args, **meta)`` where the student's code runs (a Triton kernel: tensors in,
    written in place; the writes come back onto ``args``' tensors)."""
    from ._base import call

    grid = [int(n) for n in grid]
    if isinstance(kernel, RemoteFunction):
        def remote(*a, **k):
            kernel._client.request("launch", target=kernel.__name__, grid=grid, args=a, kwargs=k)
        call(remote, *args, name=name, **meta)
    else:
        call(lambda *a, **k: launch_kernel(kernel, grid, a, k), *args, name=name, **meta)


def call_rebound(fn, rebind: dict, *args, name: str, **kwargs):
    """``fn(*args, **kwargs)`` with ``rebind`` ({top-level name: checker object from ``make``}) in the
    student's namespace for the duration of the call (exercise 10: the launcher with a stand-in kernel)."""
    from ._base import call

    if isinstance(fn, RemoteFunction):
        return call(lambda *a, **k: fn._client.request("call", target=fn.__name__, args=a, kwargs=k,
                                                       rebind=dict(rebind)), *args, name=name, **kwargs)
    glb = getattr(fn, "__globals__", None)
    with contextlib.ExitStack() as stack:
        for key, value in rebind.items():
            if glb is not None:
                stack.enter_context(rebound_in(glb, key, value))
        return call(lambda *a, **k: fn(*a, **k), *args, name=name, **kwargs)


def vjp(fn, *args, grad_output, wrt=(0, 1, 2), name: str, **kwargs):
    """``fn(*args, **kwargs)`` where the student's code runs, with autograd on for ``args[i]`` (``i`` in ``wrt``)
    and ``output.backward(grad_output)`` there: (output, [the gradients of those arguments, None where none
    reached them]). Exercise 11's autograd Function: its backward runs only beside its forward."""
    from ._base import call

    wrt = [int(i) for i in wrt]
    if isinstance(fn, RemoteFunction):
        def remote(*a, **k):
            return fn._client.request("call", target=fn.__name__, args=a, kwargs=k, wrt=wrt, grad_output=grad_output)
        return call(remote, *args, name=name, **kwargs)
    return call(lambda *a, **k: call_with_grads(fn, a, k, wrt, grad_output), *args, name=name, **kwargs)


@contextlib.contextmanager
def forbid(targets, why: str):
    """``core.forbid`` where the student's code runs (here, or in the replay process)."""
    targets = list(targets)
    _FORBID.append((targets, why))
    try:
        if _CLIENT is None:
            with core.forbid(targets, why):
                yield
        else:
            yield
    finally:
        _FORBID.pop()


def forbid_spec() -> list:
    """The active forbid() blocks as plain data: [[[owner path, attr], ...], why]."""
    return [[[[_owner_path(o), a] for o, a in t], w] for t, w in _FORBID]


def _owner_path(owner) -> str:
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    return f"{owner.__module__}.{owner.__qualname__}"
