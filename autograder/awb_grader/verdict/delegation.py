"""Graded items handed to the workbook's reference implementation, read from the submitted cells.

Every student installs ``attention_workbook``, which holds the reference implementation of
nearly every graded item. Delegating to it (subclassing the package's class, calling or
wrapping the package's function, importing it under another name, ``getattr`` on its module,
``importlib.import_module`` with a constant name) earns no points for that item. What the
exercise provides on purpose (``attention_workbook.checks.own.EXERCISES[...]["provided"]``,
the earlier exercises' answers its import cell loads) stays allowed.

This runs in the grader's process on the notebook's source, so nothing the student's code
does at run time can switch it off. It is flow-insensitive and scope-aware: every module-level
binding of a name to a package object (imports, aliases, ``getattr``, ``sys.modules[...]``)
is collected over all the student's cells, then each graded item's definition is read
together with the student's own helpers it uses (not the other graded items: each is judged
on its own). Names bound inside functions (parameters, locals) never resolve to the package.
Code that builds names at run time (``exec``, encoded strings, dynamic imports) is not read
here: :func:`verdict.obfuscation` flags it, and the student's process reports what each graded
object really reaches (``own.reference_uses``), which the grader adds to what it reads here.
"""

from __future__ import annotations

import ast
import importlib
import types
from dataclasses import dataclass, field

PACKAGE = "attention_workbook"


def parse(source: str):
    """The cell's syntax tree without IPython's magics and shell lines (``%``, ``!``); None when
    the rest is not Python."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def const_str(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _in_package(path: str | None) -> bool:
    return bool(path) and (path == PACKAGE or path.startswith(PACKAGE + "."))


# -- scopes ------------------------------------------------------------------------------------
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _own_nodes(body):
    """Nodes of a scope's body, not descending into nested scopes' bodies."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack += node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d]
            continue
        if isinstance(node, ast.ClassDef):
            stack += node.decorator_list + node.bases + [k.value for k in node.keywords]
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        stack += list(ast.iter_child_nodes(node))


def _local_names(node) -> set[str]:
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    a = node.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    names |= {x.arg for x in (a.vararg, a.kwarg) if x}
    if isinstance(node, ast.Lambda):
        return names
    declared_global = set()
    for n in _own_nodes(node.body):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(al.asname or al.name).split(".")[0] for al in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, ast.Global):
            declared_global |= set(n.names)
    return names - declared_global


# -- bindings of module-level names to package objects ----------------------------------------
class Env:
    def __init__(self):
        self.aw: dict[str, str] = {}          # name -> dotted path in the package
        self.defs: dict[str, list] = {}       # name -> module-level statements that bind it
        self.last: dict[str, bool] = {}       # name -> its last binding (in cell order) is a package object

    def resolve(self, node, local=None) -> str | None:
        """The package path an expression denotes, when it is known without running it.
        ``local``: {name: package path or None} of the enclosing function scopes."""
        local = local or {}
        if isinstance(node, ast.Name):
            return local[node.id] if node.id in local else self.aw.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value, local)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Subscript):
            key = const_str(node.slice)
            if key and ast.unparse(node.value) in ("sys.modules",) and _in_package(key):
                return key
            base = self.resolve(node.value, local) if isinstance(node.value, ast.Call) else None
            return f"{base}.{key}" if base and key else None
        if isinstance(node, ast.Call):
            fn = ast.unparse(node.func)
            if fn == "getattr" and len(node.args) >= 2:
                base = self.resolve(node.args[0], local)
                if base:
                    key = const_str(node.args[1])
                    return f"{base}.{key}" if key else f"{base}.<computed name>"
            if fn in ("importlib.import_module", "import_module", "__import__") and node.args:
                name = const_str(node.args[0])
                if _in_package(name):
                    return name
            if fn in ("vars",) and node.args:
                return self.resolve(node.args[0], local)
        return None

    def bind_statement(self, stmt, order: int) -> None:
        before = dict(self.aw)
        self._bind(stmt)
        names = _bound_names(stmt)
        if isinstance(stmt, ast.ImportFrom) and any(al.name == "*" for al in stmt.names):
            names = [n for n in self.aw if self.aw[n] != before.get(n)]
        for name in names:
            self.last[name] = name in self.aw and self.aw[name] != before.get(name) or (
                isinstance(stmt, (ast.Import, ast.ImportFrom)) and name in self.aw)
            self.defs.setdefault(name, []).append(stmt)

    def _bind(self, stmt) -> None:
        if isinstance(stmt, ast.Import):
            for al in stmt.names:
                if _in_package(al.name):
                    if al.asname:
                        self.aw[al.asname] = al.name
                    else:
                        self.aw[al.name.split(".")[0]] = PACKAGE
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and _in_package(stmt.module):
            for al in stmt.names:
                if al.name == "*":
                    for name in _public_names(stmt.module):
                        self.aw[name] = f"{stmt.module}.{name}"
                else:
                    self.aw[al.asname or al.name] = f"{stmt.module}.{al.name}"
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            path = self.resolve(stmt.value)
            for t in targets:
                if isinstance(t, ast.Name) and path:
                    self.aw[t.id] = path


def _public_names(module: str) -> list[str]:
    try:
        mod = importlib.import_module(module)
    except Exception:  # noqa: BLE001
        return []
    return list(getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")]))


def _bound_names(stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(al.asname or al.name).split(".")[0] for al in stmt.names if al.name != "*"]
    out = []
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            out += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
    return out


def _module_statements(tree):
    """Module-level statements, compound statements (if/for/with/try) flattened."""
    stack = list(reversed(tree.body))
    while stack:
        s = stack.pop()
        if isinstance(s, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.AsyncFor, ast.AsyncWith)):
            inner = list(s.body) + list(getattr(s, "orelse", [])) + list(getattr(s, "finalbody", []))
            for h in getattr(s, "handlers", []):
                inner += h.body
            stack += reversed(inner)
            yield s
            continue
        yield s


# -- what one statement uses -------------------------------------------------------------------
@dataclass
class Uses:
    refs: list = field(default_factory=list)      # (how, path)
    names: set = field(default_factory=set)       # module-level names it loads


def _scope(node, env: Env, outer: dict) -> dict:
    """{local name: package path or None} of a function/lambda/comprehension scope: imports of
    the package inside the function (and plain aliases of them) resolve, other locals do not."""
    inner = dict(outer)
    inner.update({n: None for n in _local_names(node)})
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for n in _own_nodes(node.body):
            if isinstance(n, ast.Import):
                for al in n.names:
                    if _in_package(al.name):
                        inner[al.asname or al.name.split(".")[0]] = al.name if al.asname else PACKAGE
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and _in_package(n.module):
                for al in n.names:
                    if al.name != "*":
                        inner[al.asname or al.name] = f"{n.module}.{al.name}"
        for n in _own_nodes(node.body):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                path = env.resolve(n.value, inner)
                if path:
                    inner[n.targets[0].id] = path
    return inner


def _uses(stmt, env: Env) -> Uses:
    out = Uses()
    compound = isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.AsyncFor, ast.AsyncWith))

    def visit(node, local, how="uses"):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d]:
                visit(d, local)
            inner = _scope(node, env, local)
            for s in node.body:
                visit(s, inner)
            return
        if isinstance(node, ast.Lambda):
            for d in node.args.defaults + [d for d in node.args.kw_defaults if d]:
                visit(d, local)
            visit(node.body, _scope(node, env, local))
            return
        if isinstance(node, ast.ClassDef):
            for b in node.bases:
                visit(b, local, "subclasses")
            for n in node.decorator_list + [k.value for k in node.keywords]:
                visit(n, local)
            for s in node.body:
                visit(s, local)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner = _scope(node, env, local)
            for g in node.generators:
                visit(g.iter, local)
                for cond in g.ifs:
                    visit(cond, inner)
            for part in ("elt", "key", "value"):
                if hasattr(node, part):
                    visit(getattr(node, part), inner)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return          # a binding (see _scope): what counts is using the name
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            path = env.resolve(node, local)
            if path:
                if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)):
                    out.refs.append((how, path))
                if isinstance(node, ast.Call):
                    for a in list(node.args)[1:] + [k.value for k in node.keywords]:
                        visit(a, local)
                return
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load) and node.id not in local:
                    out.names.add(node.id)
                return
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    if compound:
        for part in ("test", "iter", "items"):
            val = getattr(stmt, part, None)
            for v in (val if isinstance(val, list) else [val] if val is not None else []):
                visit(v, {})
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        pass            # a module-level import binds a name; using it is what counts
    else:
        visit(stmt, {})
    return out


# -- the scan -----------------------------------------------------------------------------------
def canonical(path: str):
    """(the object a dotted package path names, its canonical name), or (None, path)."""
    from attention_workbook.checks import own

    parts = path.split(".")
    obj = None
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # noqa: BLE001
            continue
        for p in parts[i:]:
            obj = getattr(obj, p, None)
            if obj is None:
                return None, path
        break
    if obj is None:
        return None, path
    return obj, own.qualified(obj)


def is_reference(path: str, exercise: str) -> tuple[bool, str]:
    from attention_workbook.checks import own

    root = path.split(".<")[0]
    provided = own.EXERCISES.get(exercise, {}).get("provided", [])
    neutral = any(root == n or root.startswith(n + ".") for n in own.NEUTRAL)
    if "<computed name>" in path:
        return not neutral and root not in provided, f"{root} (a name computed at run time)"
    obj, name = canonical(path)
    if obj is not None and (isinstance(obj, (types.ModuleType, type, types.FunctionType))
                            or own.kernel_function(obj) is not None):     # (a Triton kernel: @triton.jit)
        return own.is_reference(obj, exercise), name
    if obj is not None:                   # a constant or an instance in the package
        return own.is_reference(type(obj), exercise) if _in_package(type(obj).__module__) else False, name
    return (_in_package(root) and root != PACKAGE and not neutral
            and not any(root == p or root.startswith(p + ".") for p in provided)), path


def scan(student_cells: list[str], all_cells: list[str], exercise: str) -> dict[str, list[str]]:
    """{graded name: ["subclasses attention_workbook.mha.MultiHeadAttention", ...]} for the
    graded items whose code (with the student's own helpers it uses) reaches a package object
    the exercise does not provide. ``all_cells``: every code cell in order (the restored
    read-only cells bind the provided names); ``student_cells``: the answer cells and any cell
    the student added (where graded items and helpers are defined)."""
    from attention_workbook.checks import own

    graded = own.EXERCISES.get(exercise, {}).get("graded", [])
    env = Env()
    trees = []
    for src in all_cells:
        tree = parse(src)
        if tree is None:
            continue
        for i, stmt in enumerate(_module_statements(tree)):
            env.bind_statement(stmt, i)
    student_defs: dict[str, list] = {}
    for src in student_cells:
        tree = parse(src)
        if tree is None:
            continue
        trees.append(tree)
        for stmt in _module_statements(tree):
            for name in _bound_names(stmt):
                student_defs.setdefault(name, []).append(stmt)
    found: dict[str, list[str]] = {}
    for item in graded:
        notes: list[str] = []
        if env.last.get(item):                          # the graded name is the package's object itself
            ok, name = is_reference(env.aw[item], exercise)
            if ok:
                notes.append(f"is {name}")
        seen, todo = set(), [item]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for stmt in student_defs.get(name, []):
                u = _uses(stmt, env)
                for how, path in u.refs:
                    ok, canon = is_reference(path, exercise)
                    if ok:
                        text = f"{how} {canon}"
                        if text not in notes:
                            notes.append(text)
                todo += [n for n in u.names if n in student_defs and n not in graded and n not in seen]
        if notes:
            found[item] = notes
    return found
