"""The student side of an outside-the-kernel verdict (see ``verdict.py``); runs in the sandbox.

Reads the student's code cells, executes them, then answers requests: the grader sends inputs
it chose, this process runs the student's code on them and sends back what it returned. The
*comparison* happens in the grader's own process, so nothing the student's code patches here
can change a verdict.

Frames on stdin/stdout: 4-byte big-endian length + a ``torch.save`` payload, loaded with
``weights_only=True`` on both sides (plain data only). The student's prints go to stderr.

What runs here is the student's code and ``replay_support.py`` (the operations below, and the
checker-side objects ``make`` builds): no hidden check, seed or oracle is imported here nor bound
into this sandbox. Whatever the student's code prints stays in this process's stderr, which the
grader reads only for its own log.

The protocol (each request a dict with ``op``; each answer ``{"ok": value}`` or
``{"error": text, "type": exception name}``). Objects that are not plain data stay here, in a
table, and cross as ``{"__ref__": id, "info": {...}}`` (info: type name, whether it is an
``nn.Module``, which of the student's classes it is an instance of):

``call``      target (a top-level name or a reference), args, kwargs; optional ``seed``
              (``torch.manual_seed`` first), ``forbid`` (built-ins blocked during the call) and
              ``rebind`` ({top-level name: value}, e.g. a checker object from ``make``, in the
              student's namespace during the call only: exercise 10's launcher is called with a
              stand-in for its kernel); what it did in place to its tensor arguments comes back
              as ``effects``; with ``wrt`` (positions of tensor arguments) and ``grad_output``,
              autograd on for those arguments and the output's backward: (output, [their
              gradients]) (``replay_support.call_with_grads``)
``train``     target, mode: ``target.train(mode)``
``params``    target, prefix: [(name, tensor)] of ``named_parameters()``
``load``      target, values {dotted path: tensor}: copied into the object's own tensors
``describe``  target, prefix: its sub-modules (path, kind, sizes)
``get``       target, path: a plain attribute value (no dunder names)
``grads``     target, args, kwargs: forward + backward of its own loss -> (loss, [(name, grad)])
``standin``   target, path, kind, options: the sub-module computes the reference of its kind
``make``      kind, args, kwargs: a checker object (``replay_support.maker``)
``launch``    target (a Triton kernel's name), grid, args, kwargs: ``target[grid](*args, **kwargs)``;
              its writes into its tensor arguments come back as ``effects``, as with ``call``
``reset``     forget every reference
``facts``     {graded name: what it reaches in attention_workbook} (``attention_workbook.checks.own``)

Argument markers: ``{"__ref__": id}`` (an object of the table), ``{"__gen__": state}`` (a
``torch.Generator`` with that state), ``replay_support.torch_spec`` dicts (a PyTorch layer rebuilt
from its constructor arguments and state).
"""

from __future__ import annotations

import io
import linecache
import os
import struct
import traceback


def _read(fh):
    head = fh.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">I", head)
    return fh.read(n)


def dumps(obj) -> bytes:
    """``obj`` as a ``torch.save`` payload in PyTorch's format before zip files (documented: "pass
    _use_new_zipfile_serialization=False"), which ``torch.load(weights_only=True)`` loads as it loads
    the zip format: for the few kilobytes of one request, saved in about half the time and loaded in
    about three quarters (a verdict makes hundreds of requests)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def _write(fh, obj) -> None:
    data = dumps(obj)
    fh.write(struct.pack(">I", len(data)) + data)
    fh.flush()


class Server:
    def __init__(self, ns: dict):
        import torch.nn as nn

        from . import replay_support

        self.ns, self.A, self.nn = ns, replay_support, nn
        self.table: dict[int, object] = {}
        self.effects: list = []

    # -- markers ------------------------------------------------------------------------------
    def decode(self, x):
        import torch

        if isinstance(x, dict):
            if "__ref__" in x:
                return self.table[int(x["__ref__"])]
            if "__gen__" in x:
                g = torch.Generator()
                g.set_state(x["__gen__"])
                return g
            if "__torch__" in x:
                return self.A.torch_from_spec(x)
            return {k: self.decode(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(self.decode(v) for v in x)
        return x

    def encode(self, x):
        import torch

        if x is None or isinstance(x, (bool, int, float, str, torch.Tensor)):
            return x.detach() if isinstance(x, torch.Tensor) else x
        if isinstance(x, (list, tuple)):
            return type(x)(self.encode(v) for v in x)
        if isinstance(x, dict) and all(isinstance(k, str) for k in x):
            return {k: self.encode(v) for k, v in x.items()}
        try:
            import numpy as np

            if isinstance(x, np.generic):
                return x.item()
        except ImportError:
            pass
        ref = len(self.table) + 1
        while ref in self.table:
            ref += 1
        self.table[ref] = x
        is_ = [k for k, v in self.ns.items() if isinstance(v, type) and not k.startswith("_") and isinstance(x, v)]
        return {"__ref__": ref, "info": {"type": type(x).__name__, "module": isinstance(x, self.nn.Module), "is": is_}}

    def target(self, t):
        if isinstance(t, dict):
            return self.decode(t)
        if t not in self.ns:
            raise NameError(f"name {t!r} is not defined")
        return self.ns[t]

    # -- operations ---------------------------------------------------------------------------
    def handle(self, req: dict):
        import contextlib

        import torch

        from attention_workbook.checks import core

        op = req["op"]
        A = self.A
        if op == "reset":
            self.table.clear()
            return None
        if op == "facts":
            from attention_workbook.checks import own

            return {name: own.reference_uses(self.ns[name], req.get("exercise", ""), self.ns)
                    for name in req["names"] if name in self.ns}
        if op == "make":
            return self.encode(A.maker(req["kind"])(*self.decode(req["args"]), **self.decode(req["kwargs"])))
        obj = self.target(req["target"])
        if op in ("call", "launch"):
            args, kwargs = self.decode(req.get("args", ())), self.decode(req.get("kwargs", {}))
            if req.get("seed") is not None:
                torch.manual_seed(int(req["seed"]))
            tensors = [(i, t) for i, t in enumerate(args) if isinstance(t, torch.Tensor)]
            tensors += [(k, t) for k, t in kwargs.items() if isinstance(t, torch.Tensor)]
            before = {key: (t.requires_grad, t.detach().clone()) for key, t in tensors}
            with contextlib.ExitStack() as stack:
                for targets, why in req.get("forbid") or []:
                    stack.enter_context(core.forbid([(A.resolve_owner(o), a) for o, a in targets], why))
                for name, value in self.decode(req.get("rebind") or {}).items():
                    stack.enter_context(A.rebound_in(self.ns, name, value))
                if op == "launch":
                    out = A.launch_kernel(obj, req["grid"], args, kwargs)
                elif req.get("wrt") is not None:
                    out = A.call_with_grads(obj, args, kwargs, req["wrt"], req.get("grad_output"))
                else:
                    out = obj(*args, **kwargs)
            # what the call did to its tensor arguments in place (copied back onto the caller's)
            for key, t in tensors:
                grad_was, value = before[key]
                changed = not torch.equal(t.detach(), value) if t.shape == value.shape else True
                if t.requires_grad != grad_was or t.grad is not None or changed:
                    self.effects.append([key, {"requires_grad": t.requires_grad,
                                               "grad": None if t.grad is None else t.grad.detach(),
                                               "value": t.detach() if changed else None}])
            return self.encode(out)
        if op == "train":
            obj.train(bool(req["mode"]))
            return None
        if op == "params":
            return A.params_of(obj, req.get("prefix", ""))
        if op == "load":
            A.load_into(obj, req["values"])
            return None
        if op == "describe":
            return A.describe_module(obj, req.get("prefix", ""))
        if op == "get":
            return A.get_plain(obj, req["path"])
        if op == "grads":
            return A.grads_of(obj, self.decode(req.get("args", ())), self.decode(req.get("kwargs", {})))
        if op == "standin":
            A.standin_into(obj, req["path"], req["kind"], req.get("options", []))
            return None
        raise ValueError(f"unknown operation {op!r}")


def main() -> None:
    channel_out = os.fdopen(os.dup(1), "wb")
    channel_in = os.fdopen(os.dup(0), "rb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(2, 1)                  # the student's prints -> stderr
    os.dup2(devnull, 0)
    import json
    import types

    import torch

    # everything the server needs is imported before any student code runs
    from attention_workbook.checks import core, ex07, own  # (ex07: a checker object's class)

    from . import replay_support  # noqa: F401

    cells = json.loads(_read(channel_in).decode())
    ns: dict = {"__name__": "__main__"}
    for i, src in enumerate(cells):
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        name = f"<student cell {i}>"    # its source kept where inspect finds it, as IPython's (@triton.jit reads it)
        linecache.cache[name] = (len(src), None, [ln + "\n" for ln in lines], name)
        try:
            exec(compile("\n".join(lines), name, "exec"), ns)  # noqa: S102 - the point
        except BaseException:  # noqa: BLE001 - a failing cell fails here as it did in the kernel
            traceback.print_exc()
    names = {k: ("function" if isinstance(v, types.FunctionType) else "class" if isinstance(v, type)
                 else "module" if isinstance(v, types.ModuleType) else "callable" if callable(v) else "other")
             for k, v in ns.items() if not k.startswith("_")}
    _write(channel_out, {"ready": names})
    server = Server(ns)
    while True:
        raw = _read(channel_in)
        if raw is None:
            return
        req = torch.load(io.BytesIO(raw), weights_only=True)
        server.effects = []
        try:
            out = server.handle(req)
            try:
                _write(channel_out, {"ok": out, **({"effects": server.effects} if server.effects else {})})
            except Exception as e:  # noqa: BLE001
                _write(channel_out, {"error": f"returned something that is not tensors/numbers ({type(e).__name__})",
                                     "type": "TypeError"})
        except BaseException as e:  # noqa: BLE001
            _write(channel_out, {"error": f"{type(e).__name__}: {str(e)[:300]}", "type": type(e).__name__})


if __name__ == "__main__":
    main()
