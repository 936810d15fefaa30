"""What the student's process does for the outside verdict: the replay server's operations.

The hidden checks run only in the grader's process (``verdict.py``), where every student
function, class and object is a proxy (``hidden/_adapter.py``) to a sandboxed process running
the student's code (``replay.py``). This module is the part of that protocol that runs *there*,
beside the student's code: reading and loading parameters, describing sub-modules, gradients,
stand-ins that compute a layer's textbook function from its own weights, and the checker-side
objects a check hands to the student's code (a reference RNN step, a next-token stub, a
recording GPT). It holds no check, seed, case or oracle: the sandbox binds it (with
``replay.py``), and nothing of ``awb_grader/hidden/`` is bound there or imported there.

The grader's process uses the same functions for a check run on real objects (``_adapter``'s
local path: the in-process check tests, the course's own trusted notebooks).
"""

from __future__ import annotations

import contextlib
import importlib

import torch
import torch.nn as nn
import torch.nn.functional as F


class LoadError(Exception):
    """Weights could not be copied into the student's object (missing attribute, shape)."""


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


def _at(obj, path: str):
    """``_walk``, with a missing attribute said as a :class:`LoadError`."""
    try:
        return _walk(obj, path)
    except AttributeError as e:
        raise LoadError(f"{path}: no such attribute ({e})") from None


def load_into(obj, values: dict) -> None:
    for path, value in values.items():
        target = _at(obj, path)
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
    mod = _at(obj, path)
    if not isinstance(mod, nn.Module):
        raise LoadError(f"{path} is {type(mod).__name__}, not an nn.Module")
    try:
        fn = STANDINS[kind](mod, *options)
    except AttributeError as e:
        raise LoadError(f"{path}: {e}") from None
    object.__setattr__(mod, "forward", fn)      # the same object: every holder of it sees this


# ---------------------------------------------------------------------------------------------
# checker-side objects handed to the student's code (``_adapter.make``)
# ---------------------------------------------------------------------------------------------
def reference_rnn_forward(x, h0, W_xh, W_hh, b):
    """Passed to the student's gradient_vs_distance as `forward` (differentiable, any dtype)."""
    h, out = h0, []
    for t in range(x.shape[1]):
        h = torch.tanh(torch.einsum("bd,dh->bh", x[:, t], W_xh) + torch.einsum("bk,kh->bh", h, W_hh) + b)
        out.append(h)
    return torch.stack(out, dim=1)


def doubled_rnn_forward(x, h0, W_xh, W_hh, b):
    """A `forward` that is not rnn_forward: the RNN on 2 x (tells whether the one given is used)."""
    return reference_rnn_forward(2 * x, h0, W_xh, W_hh, b)


def recording_gpt(cfg: dict, seed: int):
    """Lecture 08's GPT (seeded), recording how many positions each pass feeds its blocks."""
    from attention_workbook.checks.ex09 import tiny_gpt

    model = tiny_gpt(seed, **cfg)                                  # sharp attention: every position matters
    model.fed, model.full_calls, model.grad_seen = [], [0], [False]

    def fed(mod, a, o):
        model.fed.append(int(a[0].shape[-2]))
        model.grad_seen[0] = model.grad_seen[0] or torch.is_grad_enabled()
    model.blocks[0].ln1.register_forward_hook(fed)
    model.register_forward_hook(lambda mod, a, o: model.full_calls.__setitem__(0, model.full_calls[0] + 1))
    return model


def flash_gpt(cfg: dict, seed: int, modules: list):
    """Lecture 08's GPT (seeded) whose blocks' attention are the student's ``modules`` (exercise 11's
    FlashCausalSelfAttention instances), each loaded with its block's weights."""
    from attention_workbook.checks.ex11 import install, tiny_gpt

    model = tiny_gpt(cfg, seed)
    install(model, modules)
    return model


def maker(kind: str):
    """The checker-side object ``kind`` (what ``_adapter.make`` asks for), built where the
    student's code runs."""
    if kind == "ex01.reference_forward":
        return lambda: reference_rnn_forward
    if kind == "ex01.doubled_forward":
        return lambda: doubled_rnn_forward
    if kind == "ex07.scripted":
        from attention_workbook.checks.ex07 import ScriptedModel

        return ScriptedModel
    if kind == "ex08.stub":
        from attention_workbook.checks.battery.ex08 import NextTokenStub

        return NextTokenStub
    if kind == "ex09.gpt":
        return recording_gpt
    if kind == "ex09.watch":
        from attention_workbook.checks.ex09 import Watch

        return Watch
    if kind == "ex10.standin":
        from attention_workbook.checks.ex10 import KernelStandIn

        return KernelStandIn
    if kind == "ex11.flash_gpt":
        return flash_gpt
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


@contextlib.contextmanager
def rebound_in(namespace: dict, name: str, value):
    """``namespace[name]`` is ``value`` for the duration (restored, or removed, after)."""
    missing = object()
    saved = namespace.get(name, missing)
    namespace[name] = value
    try:
        yield
    finally:
        if saved is missing:
            namespace.pop(name, None)
        else:
            namespace[name] = saved


def call_with_grads(fn, args, kwargs, wrt, grad_output):
    """``fn(*args, **kwargs)`` with autograd on for the tensors ``args[i]``, ``i`` in ``wrt`` (new leaves, their
    strides kept), then ``output.backward(grad_output)``: (output, [their gradients]) (``_adapter.vjp``: exercise
    11's autograd Function, whose gradients exist only where the student's code runs)."""
    args = list(args)
    for i in wrt:
        args[i] = args[i].detach().requires_grad_(True)
    with torch.enable_grad():
        out = fn(*args, **kwargs)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"it returned {type(out).__name__}, not a tensor")
        if not out.requires_grad:
            raise RuntimeError("its output does not require grad: autograd has no path back to the inputs")
        out.backward(grad_output)
    return out.detach(), [args[i].grad for i in wrt]


def launch_kernel(kernel, grid, args, kwargs) -> None:
    """``kernel[grid](*args, **kwargs)``: a Triton kernel of the student's launched here (``_adapter.launch``;
    the visible checks' own launcher)."""
    from attention_workbook.checks.ex10 import launch_kernel as run

    run(kernel, grid, args, kwargs)


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
