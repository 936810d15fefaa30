"""Verdicts reached outside the student's process, so patched checking machinery earns nothing.

nbgrader decides a test cell's points inside the student's kernel: a submission that redefines
``torch.allclose``, ``torch.testing``, numpy, the check helpers, or IPython's error display can
make failing checks look green there. After nbgrader has graded a submission, :func:`apply`
re-checks every test cell that earned points:

1. the student's code cells (setup and answers, the test cells left out) are run again in a
   fresh sandboxed process (``replay.py``), which then only answers calls;
2. the cell's hidden block (``hidden.softmax_values(softmax)``: the same hidden check nbgrader
   ran) runs in the **grader's** process, with each student function replaced by a proxy: the
   checker chooses the inputs, the student's code computes outputs in its own process, the
   outputs come back as plain tensors (``torch.load(weights_only=True)``) and are compared
   here, with an unpatched torch;
3. a cell that passed inside the kernel but fails outside loses its points (nbgrader
   ``manual_score = 0`` in the gradebook, so the export and feedback show it) and the
   submission is flagged with the reason.

A check that cannot be replayed this way (it needs an object rather than a function, e.g. an
``nn.Module`` instance) keeps nbgrader's verdict; if the student's code also *looks* like it
patches the machinery (:func:`suspicious_code`, an AST scan), the cell's points are withheld
for a human to review.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

from .course import Course

_HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
MACHINERY = {"torch", "np", "numpy", "F", "nn", "math", "checks", "core", "hidden", "builtins", "sys",
             "IPython", "get_ipython", "unittest", "testing", "awb_grader", "attention_workbook", "_base"}


PATCHED_ATTRS = {"showtraceback", "excepthook", "allclose", "assert_close", "isclose", "array_equal",
                 "expect_close", "expect_shape", "CheckFailed", "run_cell", "set_custom_exc"}


class Unsupported(Exception):
    """The check cannot be replayed outside the kernel (keeps nbgrader's verdict)."""


# -- static scan ------------------------------------------------------------------------------
def suspicious_code(source: str) -> list[str]:
    """Lines that rebind attributes of torch/numpy/the checks, touch sys.modules, builtins,
    excepthooks or IPython's error display: what patching the machinery looks like."""
    hits = []
    try:
        tree = ast.parse("\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            base = t
            while isinstance(base, (ast.Attribute, ast.Subscript, ast.Call)):
                base = base.func if isinstance(base, ast.Call) else base.value
            attr = t.attr if isinstance(t, ast.Attribute) else ""
            if isinstance(t, (ast.Attribute, ast.Subscript)) and (
                    (isinstance(base, ast.Name) and base.id in MACHINERY) or attr in PATCHED_ATTRS):
                hits.append(f"line {node.lineno}: assigns {ast.unparse(t)}")
        if isinstance(node, ast.Call):
            fn = ast.unparse(node.func)
            if fn in ("setattr", "delattr") and node.args and isinstance(node.args[0], (ast.Name, ast.Attribute)):
                root = ast.unparse(node.args[0]).split(".")[0]
                if root in MACHINERY:
                    hits.append(f"line {node.lineno}: {fn}({ast.unparse(node.args[0])}, ...)")
            if fn.endswith(("set_custom_exc", "showtraceback")) or "excepthook" in fn:
                hits.append(f"line {node.lineno}: calls {fn}")
        if isinstance(node, ast.Attribute) and node.attr in ("__code__", "__globals__", "__builtins__", "f_globals"):
            hits.append(f"line {node.lineno}: uses {node.attr}")
    return hits


# -- the replay -------------------------------------------------------------------------------
class Replay:
    """A sandboxed process running the student's code and answering calls."""

    def __init__(self, cells: list[str], cwd: Path, timeout: float = 60):
        from . import sandbox

        self.timeout = timeout
        self.unsupported: str | None = None
        program = [sys.executable, "-m", "awb_grader.replay"]
        mode = os.environ.get("AWB_SANDBOX_MODE", "off")
        if mode == "bwrap" and os.geteuid() == 0:
            sandbox._chown_tree(Path(cwd), int(os.environ.get("AWB_SANDBOX_UID", "60000")))
        env = dict(os.environ, NBGRADER_EXECUTION="autograde")     # as in the grading kernel
        cmd = sandbox.sandbox_command(program, str(cwd), env=env) if mode in ("bwrap", "limits") else program
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self._send_raw(json.dumps(cells).encode())
        self.timeout = max(3 * timeout, 60)      # start-up runs every code cell once
        ready = self._recv()
        self.timeout = timeout
        if not isinstance(ready, dict) or "ready" not in ready:
            raise Unsupported("the replay process did not start")
        self.names: dict = ready["ready"]

    def _send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(struct.pack(">I", len(data)) + data)
        self.proc.stdin.flush()

    def _recv(self):
        import select

        import torch

        def read(n):
            buf = b""
            while len(buf) < n:
                r, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
                if not r:
                    self.close()
                    raise TimeoutError(f"no answer within {self.timeout:g} s")
                chunk = os.read(self.proc.stdout.fileno(), n - len(buf))
                if not chunk:
                    raise EOFError("the student's process ended")
                buf += chunk
            return buf

        (n,) = struct.unpack(">I", read(4))
        if n > 512 * 2**20:
            raise ValueError("answer too large")
        return torch.load(io.BytesIO(read(n)), weights_only=True)

    def call(self, name: str, args: tuple, kwargs: dict):
        import torch

        def needs_graph(x):
            if isinstance(x, torch.Tensor):
                return x.requires_grad
            if isinstance(x, (list, tuple)):
                return any(needs_graph(y) for y in x)
            if isinstance(x, dict):
                return any(needs_graph(y) for y in x.values())
            return False

        if needs_graph(args) or needs_graph(kwargs):
            # the check differentiates through the student's code: outputs that cross processes
            # carry no autograd graph, so this check keeps nbgrader's verdict
            self.unsupported = f"{name} is called with tensors that require grad"
            raise Unsupported(self.unsupported)
        buf = io.BytesIO()
        try:
            torch.save({"name": name, "args": tuple(args), "kwargs": dict(kwargs)}, buf)
            torch.load(io.BytesIO(buf.getvalue()), weights_only=True)   # only plain data crosses over
        except Exception as e:  # noqa: BLE001
            self.unsupported = f"arguments of {name} are not plain tensors/numbers ({type(e).__name__})"
            raise Unsupported(self.unsupported) from None
        self._send_raw(buf.getvalue())
        try:
            ans = self._recv()
        except (EOFError, TimeoutError) as e:
            raise RuntimeError(f"{name}: {e}") from None
        except Exception as e:  # noqa: BLE001 - an answer that is not plain data
            raise RuntimeError(f"{name} returned something that is not tensors/numbers ({type(e).__name__})") from None
        if "error" in ans:
            # a built-in exception comes back as itself (checks may expect a ValueError)
            import builtins

            kind = getattr(builtins, str(ans.get("type")), None)
            msg = ans["error"].split(": ", 1)[-1]
            if isinstance(kind, type) and issubclass(kind, Exception):
                try:
                    err = kind(msg)
                except Exception:  # noqa: BLE001 - an exception type with another signature
                    err = RuntimeError(ans["error"])
                raise err
            raise RuntimeError(ans["error"])
        return ans["ok"]

    def proxy(self, name: str):
        replay = self

        def fn(*args, **kwargs):
            return replay.call(name, args, kwargs)

        fn.__name__ = fn.__qualname__ = name
        fn.__module__ = "__main__"
        return fn

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _cells(nb):
    """(student code cells in order, {test grade_id: hidden block})."""
    code, hidden = [], {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            m = _HIDDEN.search(cell.source)
            if m:
                hidden[meta["grade_id"]] = m.group(1)
            continue
        code.append(cell.source)
    return code, hidden


def outside_verdicts(nb, cwd: Path, cells: list[str], timeout: float = 60) -> dict[str, str]:
    """{grade_id: 'pass' | 'fail: why' | 'unsupported: why'} for the given test cells."""
    code, hidden = _cells(nb)
    out = {}
    wanted = [c for c in cells if c in hidden]
    for c in cells:
        if c not in hidden:
            out[c] = "unsupported: no hidden block"
    if not wanted:
        return out
    try:
        replay = Replay(code, cwd, timeout)
    except Exception as e:  # noqa: BLE001
        return {**out, **{c: f"unsupported: {e}" for c in wanted}}
    try:
        for c in wanted:
            block = hidden[c]
            ns: dict = {"__name__": "__awb_verdict__"}
            for name, kind in replay.names.items():
                if kind == "function" and re.search(rf"\b{re.escape(name)}\b", block):
                    ns[name] = replay.proxy(name)
            replay.unsupported = None
            try:
                exec(compile(block, f"<hidden block {c}>", "exec"), ns)  # noqa: S102 - our own code
                out[c] = "pass"
            except Unsupported as e:
                out[c] = f"unsupported: {e}"
            except NameError as e:
                out[c] = f"unsupported: {e}"
            except BaseException as e:  # noqa: BLE001
                msg = str(e).splitlines()[0] if str(e) else ""
                if replay.unsupported:          # (the check may have wrapped Unsupported in its own error)
                    out[c] = f"unsupported: {replay.unsupported}"
                else:
                    out[c] = f"fail: {type(e).__name__}: {msg[:200]}"
            if replay.proc.poll() is not None:
                replay = Replay(code, cwd, timeout)      # the student's process died: next cell, fresh one
    finally:
        replay.close()
    return out


def apply(course: Course, assignment: str, student: str, row) -> dict[str, str]:
    """Re-check the cells that earned points; withhold the ones that only pass inside the
    student's kernel. Updates the gradebook (manual_score = 0) and ``row``."""
    import nbformat
    from nbgrader.api import Gradebook

    p = course.path("autograded", student, assignment) / f"{assignment}.ipynb"
    if not p.exists():
        return {}
    nb = nbformat.read(p, as_version=4)
    scores = course.scores(assignment, student)
    earned = [c for c, s in scores.items() if s > 0]
    if not earned:
        return {}
    cell_timeout = int(course.config().Execute.timeout or 60)
    verdicts = outside_verdicts(nb, p.parent, earned, timeout=cell_timeout)
    code, _ = _cells(nb)
    suspicious = [h for src in code for h in suspicious_code(src)]
    withhold = {c: v for c, v in verdicts.items() if v.startswith("fail")}
    if suspicious:
        withhold.update({c: v for c, v in verdicts.items() if v.startswith("unsupported")})
    if withhold:
        with Gradebook(course.db) as gb:
            for c in withhold:
                g = gb.find_grade(c, assignment, assignment, student)
                g.manual_score = 0.0
                g.needs_manual_grade = False
            gb.db.commit()
        scores = course.scores(assignment, student)
        row.score = sum(scores.values())
        maxs = course.max_scores(assignment)
        row.failed_cells = [c for c, s in scores.items() if s < maxs.get(c, 0)]
        row.status = "flagged" if row.status != "ungradable" else row.status
        fails = [c for c, v in withhold.items() if v.startswith("fail")]
        if fails:
            row.reasons.append("passed in the student's kernel but failed when re-checked outside it "
                               f"(patched checking machinery?): {', '.join(fails)}: points withheld")
        rest = [c for c in withhold if c not in fails]
        if rest:
            row.reasons.append(f"code patches the checking machinery ({suspicious[0]}); "
                               f"{', '.join(rest)} could not be re-checked outside: points withheld, review by hand")
    elif suspicious:
        row.reasons.append(f"note: code touches the checking machinery ({suspicious[0]}); "
                           "verdicts confirmed outside the kernel")
    return verdicts


def check_solution(assignment: str, workdir: Path, timeout: float = 60) -> dict[str, str]:
    """Outside verdicts of every test cell for the reference solution (no nbgrader): what an
    honest, fully correct student gets from the re-check. Used by the test suite to show the
    re-check never takes points from correct work."""
    import nbformat

    from .course import SOLUTIONS, ensure_kernel_path
    from .variants import solution_cells

    ensure_kernel_path()
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    sol = solution_cells(assignment)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = sol[meta["grade_id"]]
    _, hidden = _cells(nb)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    return outside_verdicts(nb, Path(workdir), list(hidden), timeout)
