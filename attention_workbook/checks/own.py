"""Is a graded function or class the student's own work, or the workbook's reference?

Every student installs this package, and it holds the reference implementation of nearly
every graded item (``qkv``, ``mha``, ``blocks``, ``gpt``, ...). Delegating a graded item to
one (subclassing it, calling it, importing it under another name, ``getattr`` on its module,
fetching its module by name with importlib, ``__import__`` or ``sys.modules``) earns no points.
What an exercise *provides* on purpose (the earlier exercises' answers its import cell loads,
e.g. 06's ``MultiHeadAttention``) stays allowed: :data:`EXERCISES` says, per exercise, which
names are graded and which package objects are provided.

:func:`reference_uses` looks at the objects themselves (base classes, and the bytecode of every
function and method: the globals and attribute chains it loads, defaults, closures), following
the student's own helpers but not the other graded items (each is judged on its own). The
visible checks call it through ``core.call`` and say so at once; the grader decides from its
own static reading of the submitted cells plus this evidence (``awb_grader/verdict/delegation.py``).
"""

from __future__ import annotations

import contextlib
import dis
import sys
import types

from . import graded

PACKAGE = "attention_workbook"
# modules with no graded content: plotting helpers, configuration, data download
NEUTRAL = ("attention_workbook.plotting", "attention_workbook.config", "attention_workbook.data")

# Per exercise ("05"): the graded names (its answer cells) and the package objects it provides
# (what its read-only cells before the first answer import: an earlier exercise's answer, toy
# data), generated from the release notebooks (checks/graded.py).
EXERCISES: dict[str, dict] = {
    ex[:2]: {"graded": list(graded.ANSWERS[ex]), "provided": list(graded.PROVIDED[ex])} for ex in graded.ANSWERS
}


def kernel_function(obj):
    """The Python function behind a Triton kernel (``@triton.jit``: a ``JITFunction``, or under the
    interpreter an ``InterpretedFunction``, each holding it as ``.fn``), else None. Read without
    importing Triton: a kernel's class lives in ``triton.runtime``."""
    fn = getattr(obj, "fn", None) if type(obj).__module__.startswith("triton.") else None
    return fn if isinstance(fn, types.FunctionType) else None


def unwrap(obj):
    """A Triton kernel's function, anything else as it is: a kernel is judged by the code it runs."""
    return kernel_function(obj) or obj


def qualified(obj) -> str:
    obj = unwrap(obj)
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"


def _in_package(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def is_reference(obj, exercise: str) -> bool:
    """A package object (module, function, class, Triton kernel) that is neither neutral nor provided."""
    obj = unwrap(obj)
    if isinstance(obj, types.ModuleType):
        name = obj.__name__
    elif isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        name = qualified(obj)
    else:
        return False
    if not _in_package(name) or name == PACKAGE:
        return False
    if any(name == n or name.startswith(n + ".") for n in NEUTRAL):
        return False
    provided = EXERCISES.get(exercise, {}).get("provided", [])
    return not any(name == p or name.startswith(p + ".") for p in provided)


def is_provided(obj, exercise: str) -> bool:
    """A package class or function the exercise provides on purpose (``EXERCISES[...]["provided"]``)."""
    name = qualified(obj)
    provided = EXERCISES.get(exercise, {}).get("provided", [])
    return _in_package(name) and any(name == p or name.startswith(p + ".") for p in provided)


def _code_objects(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _code_objects(c)


def _named_modules(code):
    """Package modules a code object names in a constant string ("attention_workbook.mha" for
    importlib.import_module, __import__ or sys.modules[...]): fetched by name at run time."""
    for c in code.co_consts:
        if isinstance(c, str) and _in_package(c) and c != PACKAGE and c in sys.modules:
            yield sys.modules[c]


_LOADS = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF"}
_ATTRS = {"LOAD_ATTR", "LOAD_METHOD"}


def _chains(code):
    """(first name, [attribute names]) for every `name.attr.attr` a code object loads, with a
    constant string right after a module chain read as one more attribute (getattr(m, "x"))."""
    ins = list(dis.get_instructions(code))
    i = 0
    while i < len(ins):
        op = ins[i]
        if op.opname == "IMPORT_NAME" and isinstance(op.argval, str) and _in_package(op.argval):
            j = i + 1  # from <package module> import name, ... inside a function
            while j < len(ins) and ins[j].opname in (
                "IMPORT_FROM",
                "STORE_FAST",
                "STORE_NAME",
                "STORE_DEREF",
                "STORE_GLOBAL",
                "POP_TOP",
            ):
                if ins[j].opname == "IMPORT_FROM":
                    yield "IMPORT", op.argval, [ins[j].argval], None
                j += 1
            i = j
            continue
        if op.opname in _LOADS:
            attrs = []
            j = i + 1
            while j < len(ins) and ins[j].opname in _ATTRS:
                attrs.append(ins[j].argval)
                j += 1
            const = (
                ins[j].argval
                if j < len(ins) and ins[j].opname == "LOAD_CONST" and isinstance(ins[j].argval, str)
                else None
            )
            yield op.opname, op.argval, attrs, const
            i = j
        else:
            i += 1


class _Finder:
    def __init__(self, exercise: str, namespace: dict | None):
        self.exercise = exercise
        self.graded = set(EXERCISES.get(exercise, {}).get("graded", []))
        self.namespace = namespace
        self.seen: set[int] = set()
        self.found: list[str] = []

    def note(self, how: str, obj) -> None:
        text = f"{how} {qualified(obj)}"
        if text not in self.found:
            self.found.append(text)

    def value(self, v, attrs=(), const=None, how="uses") -> None:
        """A value the student's code loads (then reads ``attrs`` of)."""
        kernel = kernel_function(v)
        if kernel is not None:                      # a Triton kernel: the package's, or the student's
            if is_reference(kernel, self.exercise):
                self.note(how, kernel)
            elif self.is_student(kernel):
                self.visit(v)
            return
        if isinstance(v, types.ModuleType):
            if not _in_package(v.__name__):
                return
            for a in list(attrs) + ([const] if const else []):
                nxt = getattr(v, a, None)
                if nxt is None:
                    break
                if not isinstance(nxt, types.ModuleType):
                    if is_reference(nxt, self.exercise):      # (a Triton kernel too: is_reference unwraps it)
                        self.note(how, nxt)
                    return
                v = nxt
            if is_reference(v, self.exercise):
                self.note(how, v)
            return
        if isinstance(v, (type, types.FunctionType)):
            if is_reference(v, self.exercise):
                self.note(how, v)
            elif self.is_student(v):
                self.visit(v)
            return
        if isinstance(v, (staticmethod, classmethod)):
            self.value(v.__func__)
            return
        if isinstance(v, property):
            for f in (v.fget, v.fset, v.fdel):
                if f is not None:
                    self.value(f)
            return
        if isinstance(v, types.MethodType):
            self.value(v.__func__)
            return
        if isinstance(v, (list, tuple)) and len(v) < 50:
            for x in v:
                self.value(x)
            return
        t = type(v)
        if is_reference(t, self.exercise):  # an instance of a reference class
            self.note("uses an instance of", t)

    def is_student(self, obj) -> bool:
        mod = getattr(obj, "__module__", None)
        if mod != "__main__" and not (
            self.namespace is not None and getattr(obj, "__globals__", None) is self.namespace
        ):
            return False
        return True

    def visit(self, obj, top: bool = False) -> None:
        kernel = kernel_function(obj)
        if kernel is not None:                      # a graded kernel of the student's: its Python function
            if not top and getattr(kernel, "__name__", "") in self.graded and self.namespace is not None \
                    and self.namespace.get(kernel.__name__) is obj:
                return                              # another graded item: judged on its own
            obj = kernel
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        name = getattr(obj, "__name__", "")
        if not top and name in self.graded and self.namespace is not None and self.namespace.get(name) is obj:
            return  # another graded item: judged on its own
        if isinstance(obj, type):
            brought: set = set()          # the bases of a provided class come with it (11: gpt.CausalSelfAttention's)
            for base in obj.__mro__[1:]:
                if base in brought:
                    continue
                if is_reference(base, self.exercise):
                    self.note("subclasses", base)
                elif is_provided(base, self.exercise):
                    brought.update(base.__mro__[1:])
                elif self.is_student(base):
                    self.visit(base)
            for attr in list(vars(obj).values()):
                if isinstance(attr, (types.FunctionType, staticmethod, classmethod, property)):
                    self.function_like(attr)
            return
        if isinstance(obj, types.FunctionType):
            self.function_like(obj)

    def function_like(self, f) -> None:
        if isinstance(f, (staticmethod, classmethod)):
            f = f.__func__
        if isinstance(f, property):
            for g in (f.fget, f.fset, f.fdel):
                if g is not None:
                    self.function_like(g)
            return
        if not isinstance(f, types.FunctionType):
            return
        self.seen.add(id(f))
        glb = f.__globals__
        cells = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
        for d in (f.__defaults__ or ()) + tuple((f.__kwdefaults__ or {}).values()):
            self.value(d)
        for code in _code_objects(f.__code__):
            for mod in _named_modules(code):  # importlib.import_module("attention_workbook.mha").x
                for attr in code.co_names:
                    obj = getattr(mod, attr, None)
                    if not isinstance(obj, (types.ModuleType, type(None))) and is_reference(obj, self.exercise):
                        self.note("uses", obj)
            for opname, name, attrs, const in _chains(code):
                if opname == "IMPORT":
                    v = sys.modules.get(name)
                    if v is not None:
                        self.value(v, attrs)
                    continue
                if opname in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
                    cell = cells.get(name)
                    if cell is None:
                        continue
                    try:
                        v = cell.cell_contents
                    except ValueError:
                        continue
                elif name in glb:
                    v = glb[name]
                else:
                    continue
                self.value(v, attrs, const)


def reference_uses(obj, exercise: str, namespace: dict | None = None) -> list[str]:
    """What ``obj`` (a student's function, class or instance) reaches in the package that the
    exercise does not provide: ["subclasses attention_workbook.mha.MultiHeadAttention", ...]."""
    f = _Finder(exercise, namespace)
    if kernel_function(obj) is not None:            # a Triton kernel: the function it runs
        fn = kernel_function(obj)
        if is_reference(fn, exercise):
            return [f"is {qualified(fn)}"]
        if f.is_student(fn):
            f.seen.add(id(obj))
            f.visit(fn, top=True)
        return f.found
    if isinstance(obj, (types.FunctionType, type)):
        if is_reference(obj, exercise):
            return [f"is {qualified(obj)}"]
        if f.is_student(obj):
            f.visit(obj, top=True)
        return f.found
    t = type(obj)
    if is_reference(t, exercise):
        return [f"is an instance of {qualified(t)}"]
    if f.is_student(t):
        f.visit(t, top=True)
    return f.found


def exercise_of_caller(depth: int = 2) -> str | None:
    """The exercise whose check module is on the call stack (checks.exNN or hidden.exNN)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return None
    while frame is not None:
        mod = frame.f_globals.get("__name__", "")
        for prefix in ("attention_workbook.checks.ex", "awb_grader.hidden.ex"):
            if mod.startswith(prefix) and mod[len(prefix) : len(prefix) + 2].isdigit():
                return mod[len(prefix) : len(prefix) + 2]
        frame = frame.f_back
    return None


_TRUSTING = [False]


@contextlib.contextmanager
def trusting():
    """Tests of the checks themselves run the package's reference through them."""
    _TRUSTING.append(True)
    try:
        yield
    finally:
        _TRUSTING.pop()


def check(fn, name: str) -> None:
    """Raise CheckFailed when the student's ``fn`` delegates to the workbook's reference."""
    from .failure import CheckFailed

    if _TRUSTING[-1]:
        return
    fn = unwrap(fn)                                 # a Triton kernel: the function it runs
    if isinstance(fn, types.MethodType) or getattr(type(fn), "__module__", "").startswith("awb_grader"):
        return
    mod = getattr(fn, "__module__", None) if isinstance(fn, (type, types.FunctionType)) else type(fn).__module__
    if mod is None or (mod != "__main__" and not _in_package(mod)) or (mod or "").startswith(PACKAGE + ".checks"):
        return
    exercise = exercise_of_caller(3)
    if exercise is None:
        return
    main = sys.modules.get("__main__")
    found = reference_uses(fn, exercise, getattr(main, "__dict__", None))
    if found:
        ref = found[0].split(" ")[-1]
        raise CheckFailed(
            f"{name} {found[0]}: the workbook's reference, not your own work",
            hint=f"this calls the workbook's reference `{ref}`; write your own "
            "(graded items earn points only for your own code)",
            details=found[1:4],
        )
