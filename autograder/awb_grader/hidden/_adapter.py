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
``make(kind, ...)``        a checker-side object (scripted model, stub) built where the
                           student's code runs
``forbid(targets, why)``   built-ins the student's code may not call (applied where it runs)
``launch(kernel, grid,     a Triton kernel of the student's launched where their code runs,
  *args, **meta)``         ``kernel[grid](*args, **meta)``: what it writes into its tensor
                           arguments comes back into the checker's tensors (in place)
=========================  =================================================================

Locally every operation is the obvious one on the real object. Remotely each is one message
of the replay protocol (``replay.py``); only plain data crosses (tensors, numbers, strings,
and references to objects that stay in the student's process). The comparison with the
oracle always happens in the process that runs the check.

The second half of this module is the student-process side of those operations (the replay
server and the local path share it).
"""

from __future__ import annotations

import contextlib
import importlib
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

from attention_workbook.checks import core

_CLIENT = None            # the replay client while the grader runs a check outside the kernel
_FORBID: list = []        # active (targets, why) of forbid() blocks
MISSING = object()


class LoadError(Exception):
    """Weights could not be copied into the student's object (missing attribute, shape)."""


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


def launch_kernel(kernel, grid, args, kwargs) -> None:
    """The student-process side of :func:`launch` (the visible checks' own launcher)."""
    from attention_workbook.checks.ex10 import launch_kernel as run

    run(kernel, grid, args, kwargs)


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


# ---------------------------------------------------------------------------------------------
# the student-process side (shared by the local path and the replay server)
# ---------------------------------------------------------------------------------------------
def _walk(obj, path: str):
    for part in [p for p in path.split(".") if p]:
        if part.startswith("__"):
            raise AttributeError(f"{path}: special attributes are not read")
        obj = getattr(obj, part)
    return obj


def params_of(obj, prefix: str = ""):
    root = _walk(obj, prefix)
    if not isinstance(root, nn.Module):
        raise AttributeError(f"{prefix or 'the object'} is not an nn.Module")
    return [(n, p.detach().clone()) for n, p in root.named_parameters()]


def load_into(obj, values: dict) -> None:
    for path, value in values.items():
        try:
            target = _walk(obj, path)
        except AttributeError as e:
            raise LoadError(f"{path}: no such attribute ({e})") from None
        if not isinstance(target, torch.Tensor):
            raise LoadError(f"{path} is {type(target).__name__}, not a tensor")
        if tuple(target.shape) != tuple(value.shape):
            raise LoadError(f"{path} has shape {tuple(target.shape)}, expected {tuple(value.shape)}")
        with torch.no_grad():
            target.copy_(value)


KINDS = [(nn.Linear, "Linear"), (nn.LayerNorm, "LayerNorm"), (nn.Dropout, "Dropout"), (nn.Embedding, "Embedding"),
         (nn.MultiheadAttention, "MultiheadAttention"), (nn.ReLU, "ReLU")]


def _kind(m) -> str:
    return next((name for cls, name in KINDS if isinstance(m, cls)), "Module")


def describe_module(obj, prefix: str = "") -> list[dict]:
    root = _walk(obj, prefix)
    if not isinstance(root, nn.Module):
        return []
    out = []
    for path, m in root.named_modules():
        d = {"path": ".".join(p for p in (prefix, path) if p), "kind": _kind(m), "type": type(m).__name__}
        if isinstance(m, nn.Linear):
            d.update(in_features=m.in_features, out_features=m.out_features, bias=m.bias is not None)
        elif isinstance(m, nn.LayerNorm):
            d.update(normalized_shape=list(m.normalized_shape), eps=float(m.eps))
        elif isinstance(m, nn.Dropout):
            d.update(p=float(m.p))
        elif isinstance(m, nn.Embedding):
            d.update(num_embeddings=m.num_embeddings, embedding_dim=m.embedding_dim)
        out.append(d)
    return out


def plain(value):
    """A value as plain data: tensors (detached copies), numbers, strings, None, containers;
    a module becomes {"module": kind}; anything else {"object": type name}."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, nn.Module):
        return {"module": _kind(value), "type": type(value).__name__}
    return {"object": type(value).__name__}


def get_plain(obj, path: str):
    return plain(_walk(obj, path))


def grads_of(obj, args, kwargs):
    for p in obj.parameters():
        p.grad = None
    with torch.enable_grad():
        out = obj(*args, **kwargs)
        loss = out[1] if isinstance(out, tuple) else out
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError("the loss is not a one-element tensor")
        loss.backward()
    g = [(n, (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)))
         for n, p in obj.named_parameters()]
    return float(loss.detach()), g


# reference computations a sub-module can be made to perform from its own parameters
def _ref_layer_norm(mod, eps):
    def forward(x):
        return F.layer_norm(x, mod.weight.shape, mod.weight, mod.bias, eps)
    return forward


def _ref_feed_forward(mod):
    lins = [m for m in mod.modules() if isinstance(m, nn.Linear)]
    if len(lins) != 2:
        raise LoadError(f"expected two nn.Linear layers, found {len(lins)}")
    l1, l2 = lins

    def forward(x):
        return F.linear(F.relu(F.linear(x, l1.weight, l1.bias)), l2.weight, l2.bias)
    return forward


def _ref_mha(mod, n_heads):
    """The workbook's MultiHeadAttention interface: forward(x, kv=None, mask=None, is_causal=False),
    mask True = may attend, broadcast to (B, H, T, S); weights W_qkv ([q; k; v] rows) and W_o."""
    def forward(x, kv=None, mask=None, is_causal=False):
        kv = x if kv is None else kv
        D = mod.W_o.weight.shape[0]
        Wq, Wk, Wv = mod.W_qkv.weight.split(D)
        bq, bk, bv = mod.W_qkv.bias.split(D) if mod.W_qkv.bias is not None else (None, None, None)
        B, T, S, Dh = x.size(0), x.size(1), kv.size(1), D // n_heads

        def heads(t, n):
            return t.reshape(B, n, n_heads, Dh).transpose(1, 2)             # (B, H, n, Dh)
        q, k, v = heads(F.linear(x, Wq, bq), T), heads(F.linear(kv, Wk, bk), S), heads(F.linear(kv, Wv, bv), S)
        scores = q @ k.transpose(-2, -1) / Dh ** 0.5                        # (B, H, T, S)
        if is_causal:
            causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril()
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(-1) @ v                                         # (B, H, T, Dh)
        return F.linear(out.transpose(1, 2).reshape(B, T, D), mod.W_o.weight, mod.W_o.bias)
    return forward


STANDINS = {"layer_norm": _ref_layer_norm, "feed_forward": _ref_feed_forward, "mha": _ref_mha}


def standin_into(obj, path: str, kind: str, options) -> None:
    try:
        mod = _walk(obj, path)
    except AttributeError as e:
        raise LoadError(f"{path}: no such attribute ({e})") from None
    if not isinstance(mod, nn.Module):
        raise LoadError(f"{path} is {type(mod).__name__}, not an nn.Module")
    try:
        fn = STANDINS[kind](mod, *options)
    except AttributeError as e:
        raise LoadError(f"{path}: {e}") from None
    object.__setattr__(mod, "forward", fn)      # the same object: every holder of it sees this


def maker(kind: str):
    """Checker-side objects the grader may have built in the student's process."""
    if kind == "ex01.reference_forward":
        from .ex01 import _reference_forward

        return lambda: _reference_forward
    if kind == "ex01.doubled_forward":
        from .ex01 import _doubled_forward

        return lambda: _doubled_forward
    if kind == "ex07.scripted":
        from attention_workbook.checks.ex07 import ScriptedModel

        return ScriptedModel
    if kind == "ex08.stub":
        from .ex08 import _Stub

        return _Stub
    if kind == "ex09.gpt":
        from .ex09 import _recording_gpt

        return _recording_gpt
    if kind == "ex09.watch":
        from attention_workbook.checks.ex09 import Watch

        return Watch
    raise KeyError(f"unknown checker object {kind!r}")


# torch layers the checks hand to the student's functions (from_torch...): rebuilt from plain data
def torch_spec(m: nn.Module) -> dict:
    if isinstance(m, nn.MultiheadAttention):
        init = dict(embed_dim=m.embed_dim, num_heads=m.num_heads, dropout=float(m.dropout),
                    bias=m.in_proj_bias is not None, add_bias_kv=m.bias_k is not None,
                    batch_first=m.batch_first)
        kind = "MultiheadAttention"
    elif isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        kind = type(m).__name__
        act = m.activation
        init = dict(d_model=m.self_attn.embed_dim, nhead=m.self_attn.num_heads,
                    dim_feedforward=m.linear1.out_features, dropout=float(m.dropout.p),
                    activation="gelu" if act in (F.gelu,) or isinstance(act, nn.GELU) else "relu",
                    layer_norm_eps=float(m.norm1.eps), batch_first=m.self_attn.batch_first,
                    norm_first=m.norm_first, bias=m.linear1.bias is not None)
    else:
        raise TypeError(f"{type(m).__name__} cannot be sent to the student's process")
    state = {k: v.detach().clone() for k, v in m.state_dict().items()}
    return {"__torch__": kind, "init": init, "state": state, "training": m.training}


def torch_from_spec(spec: dict) -> nn.Module:
    cls = {"MultiheadAttention": nn.MultiheadAttention, "TransformerEncoderLayer": nn.TransformerEncoderLayer,
           "TransformerDecoderLayer": nn.TransformerDecoderLayer}[spec["__torch__"]]
    m = cls(**spec["init"])
    m.load_state_dict(spec["state"])
    return m.train(bool(spec["training"]))


def resolve_owner(path: str):
    """A forbid() owner named by path; only torch's modules and classes."""
    if path != "torch" and not path.startswith("torch."):
        raise ValueError(f"not a torch object: {path}")
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ValueError(path)
