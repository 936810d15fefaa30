"""Verdicts reached outside the student's process: patched checks, shortcuts and hidden code earn nothing.

nbgrader decides a test cell's points inside the student's kernel: a submission that redefines
``torch.allclose``, ``torch.testing``, numpy, the check helpers, or IPython's error display can
make failing checks look green there. After nbgrader has executed a submission, :func:`decide`
(run by nbgrader itself, as the autograde step ``OutsideVerdict``) decides every test
cell that earned points, in the grader's own process:

1. the student's code cells (setup and answers, the test cells left out) are run again in a
   fresh sandboxed process (``replay.py``), which then only answers requests;
2. the cell's hidden block (``hidden.mha_self(MultiHeadAttention)``, which the kernel never ran:
   ``HoldOutHiddenTests`` took it out of the test cell) runs in the **grader's**
   process, with each student function, class and object replaced by a proxy
   (``hidden/_adapter.py``): the checker constructs the student's classes,
   loads weights into them, chooses the inputs, reads outputs, parameters and gradients; the
   student's code computes in its own process; everything comes back as plain data
   (``torch.load(weights_only=True)``) and is compared here, with an unpatched torch;
3. the graded items must be the student's own work: :mod:`delegation` reads the submitted
   cells here (subclassing, calling, aliasing or ``getattr`` of the workbook's reference), and
   the student's process reports what each graded object reaches (``own.reference_uses``),
   which can only add findings;
4. answer cells must not hide what they run (:func:`obfuscation`: dynamic imports, encoded
   names, ``exec``/``eval``/``compile``): where they do, nothing above can be trusted, and
   every point is withheld for review by hand.

A cell whose hidden check fails loses its points like any wrong answer: an error output with a
fixed sentence (:data:`HIDDEN_MESSAGE`; the check's own message, with its case, goes to the
instructor only), so nbgrader's ``SaveAutoGrades`` scores it 0. A cell that fails the other
rules, or whose hidden check fails in a submission that touches the checking machinery, loses
its points with an error output that says why, and the submission is flagged with the reason.
Every hidden check of exercises 00-09 runs this way; a cell that could not be replayed
(``Unsupported``, e.g. the replay process did not start) is withheld too, with a reason that
says so (for the instructor; the student reads :data:`UNCHECKED_MESSAGE`).
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import signal
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..core.metadata import cell_meta
from ..replay import dumps
from .delegation import const_str, parse

_HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
# what a student reads where a hidden check failed (the check's own message, with its case and
# tolerance, goes to the instructor only: the autograded notebook's metadata, ``hidden_failed``)
HIDDEN_FAILED = "HiddenCheckFailed"
HIDDEN_MESSAGE = ("failed a hidden check (random shapes and values against an independent oracle). "
                  "Your code passes what the visible check tried, but not every input the text promises: "
                  "run check_all() in the last cell of the exercise, and reread the function's section.")
PATCHED_MESSAGE = ("failed its hidden check, and this submission's code touches the checking machinery: "
                   "points withheld, flagged for review by your instructor")
UNCHECKED_MESSAGE = ("could not be checked outside your notebook's process: points withheld, "
                     "flagged for review by your instructor")
MACHINERY = {"torch", "np", "numpy", "F", "nn", "math", "checks", "core", "hidden", "builtins", "sys",
             "IPython", "get_ipython", "unittest", "testing", "awb_grader", "attention_workbook", "_base"}


PATCHED_ATTRS = {"showtraceback", "excepthook", "allclose", "assert_close", "isclose", "array_equal",
                 "expect_close", "expect_shape", "CheckFailed", "run_cell", "set_custom_exc"}


class Unsupported(Exception):
    """The check cannot be replayed outside the kernel (its points are withheld, for review)."""


# -- static scan ------------------------------------------------------------------------------
def suspicious_code(source: str) -> list[str]:
    """Lines that rebind attributes of torch/numpy/the checks, touch sys.modules, builtins,
    excepthooks or IPython's error display: what patching the machinery looks like."""
    hits = []
    tree = parse(source)
    if tree is None:
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


_DYNAMIC_IMPORT = {"importlib.import_module", "import_module", "__import__", "importlib.__import__",
                   "importlib.util.spec_from_file_location", "runpy.run_module", "runpy.run_path"}
_DYNAMIC_CODE = {"exec", "eval", "compile", "builtins.exec", "builtins.eval", "builtins.compile", "execfile"}
_DECODERS = {"b64decode", "b32decode", "b16decode", "b85decode", "a85decode", "urlsafe_b64decode", "decodebytes",
             "unhexlify", "a2b_base64", "a2b_hex", "fromhex", "decompress", "loads"}
_ENCODING_MODULES = {"base64", "codecs", "binascii", "marshal", "zlib", "pickle", "importlib", "runpy"}


def obfuscation(source: str) -> list[str]:
    """What hides code from a reader: imports by computed names, encoded strings, code built at
    run time. None of it has a place in an answer cell of this workbook; where it appears the
    grader cannot tell what the code uses, so the submission is held for review by hand."""
    hits: list[str] = []
    tree = parse(source)
    if tree is None:
        return []

    def add(node, text):
        line = f"line {getattr(node, 'lineno', '?')}: {text}"
        if line not in hits:
            hits.append(line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for al in node.names:
                if al.name.split(".")[0] in _ENCODING_MODULES:
                    add(node, f"imports {al.name} (dynamic imports / encoded data)")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _ENCODING_MODULES:
            add(node, f"imports from {node.module} (dynamic imports / encoded data)")
        elif isinstance(node, ast.Call):
            fn = ast.unparse(node.func)
            last = fn.rsplit(".", 1)[-1]
            if fn in _DYNAMIC_IMPORT or last == "import_module":
                name = const_str(node.args[0]) if node.args else None
                add(node, f"imports a module by name at run time ({fn}({name!r}))" if name is not None
                          else f"imports a module by a computed name ({fn})")
            elif fn in _DYNAMIC_CODE:
                add(node, f"runs code built at run time ({fn})")
            elif last in _DECODERS or fn in ("codecs.decode", "bytes.fromhex", "bytearray.fromhex"):
                add(node, f"decodes an encoded string ({fn})")
            elif last == "decode" and isinstance(node.func, ast.Attribute):
                add(node, f"decodes bytes into a string ({fn})")
            elif fn in ("globals", "locals") or (fn == "vars" and not node.args):
                add(node, f"reads a namespace dictionary ({fn}())")
            elif fn == "getattr" and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
                root = ast.unparse(node.args[0]).split(".")[0]
                if root in MACHINERY or root in ("importlib", "builtins", "__builtins__"):
                    add(node, f"getattr with a computed name on {ast.unparse(node.args[0])[:60]}")
            if fn == "chr" or (
                last == "join" and any(isinstance(n, ast.Name) and n.id == "chr" for n in ast.walk(node))
            ):
                add(node, "builds a string from character codes (chr)")
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            add(node, f"uses {node.id}")
        elif isinstance(node, ast.ClassDef) and any(k.arg == "metaclass" for k in node.keywords):
            add(node, f"class {node.name} has a custom metaclass")
    return hits


# -- the replay -------------------------------------------------------------------------------
class Replay:
    """A sandboxed process running the student's code and answering calls: a child of this
    process's zygote (``isolation/zygote.py``), or a new process where none serves."""

    def __init__(self, cells: list[str], cwd: Path, timeout: float = 60):
        from ..isolation import sandbox, zygote

        self.timeout = timeout
        self.unsupported: str | None = None
        mode = os.environ.get("AWB_SANDBOX_MODE", "off")
        env = dict(os.environ, NBGRADER_EXECUTION="autograde")     # as in the grading kernel
        import tempfile

        self._stderr = tempfile.TemporaryFile()      # its last line says why, if it ends early
        z = sandbox.zygote_for(cwd, env)
        if mode in ("bwrap", "landlock"):
            sandbox.prepare_run(str(cwd), warm=z is not None)   # its uid owns its folder; nothing earlier runs
        self.proc = None
        why = None if z is not None else (zygote.cold_reason(mode) or f"no zygote serves the {mode} tier")
        for attempt in range(2):
            if z is None:
                break
            try:
                self._fork(z, cwd, env)
                break
            except zygote.Refused as e:
                why = str(e)
                self._stderr.write(f"awb sandbox: the zygote did not start the replay: {e}\n".encode())
                if attempt or sandbox.cold_blocked(env) is None:
                    break
                # no new process can start here instead: one more try from a new zygote (the running
                # one may have died, or its socket gone)
                zygote.stop()
                z = sandbox.zygote_for(cwd, env)
        if self.proc is None:
            blocked = sandbox.cold_blocked(env)
            if blocked:
                raise Unsupported(f"the replay process cannot start: {blocked}; the zygote did not start it: {why}")
            program = sandbox.REPLAY
            if mode in ("bwrap", "landlock", "limits"):
                cmd = sandbox.sandbox_command(program, str(cwd), env=env, ro=sandbox.REPLAY_FILES)
            else:
                cmd = program
            self.proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._stderr, env=env)
            self._in, self._out = self.proc.stdin, self.proc.stdout
        self._send_raw(json.dumps(cells).encode())
        self.timeout = max(3 * timeout, 60)      # start-up runs every code cell once
        ready = self._recv()
        self.timeout = timeout
        if not isinstance(ready, dict) or "ready" not in ready:
            raise Unsupported("the replay process did not start")
        self.names: dict = ready["ready"]

    def _fork(self, z, cwd: Path, env: dict) -> None:
        """The replay as a child of the zygote ``z`` (``zygote.Refused`` where it would not start it)."""
        from ..isolation import sandbox

        plan, cenv = sandbox.child_plan(str(cwd), ro=sandbox.REPLAY_FILES, env=env)
        to_child, from_grader = os.pipe()
        to_grader, from_child = os.pipe()
        try:
            self.proc = z.fork("replay", ["awb_grader.replay"], str(cwd), cenv, plan,
                               [to_child, from_child, self._stderr.fileno()], sandbox.preload_for())
        except BaseException:
            os.close(from_grader)
            os.close(to_grader)
            raise
        else:
            self._in, self._out = os.fdopen(from_grader, "wb"), os.fdopen(to_grader, "rb")
        finally:
            os.close(to_child)
            os.close(from_child)

    def _send_raw(self, data: bytes) -> None:
        try:
            self._in.write(struct.pack(">I", len(data)) + data)
            self._in.flush()
        except (BrokenPipeError, ValueError):
            raise EOFError(f"the student's process ended{self._last_words()}") from None

    def _recv(self):
        import select

        import torch

        def read(n):
            buf = b""
            while len(buf) < n:
                r, _, _ = select.select([self._out], [], [], self.timeout)
                if not r:
                    self.close()
                    raise TimeoutError(f"no answer within {self.timeout:g} s")
                chunk = os.read(self._out.fileno(), n - len(buf))
                if not chunk:
                    raise EOFError(f"the student's process ended{self._last_words()}")
                buf += chunk
            return buf

        (n,) = struct.unpack(">I", read(4))
        if n > 512 * 2**20:
            raise ValueError("answer too large")
        return torch.load(io.BytesIO(read(n)), weights_only=True)

    # -- the protocol (see replay.py) ------------------------------------------------------
    def _encode(self, x):
        import torch
        import torch.nn as nn

        from ..hidden import _adapter as A
        from ..replay_support import torch_spec

        if isinstance(x, A.RemoteObject):
            if x._client is not self:
                raise Unsupported("an object of another replay process")
            return {"__ref__": x._ref}
        if isinstance(x, A.Remote):
            raise Unsupported(f"{x!r} cannot be passed to the student's code")
        if isinstance(x, torch.Generator):
            return {"__gen__": x.get_state()}
        if isinstance(x, torch.Tensor):
            return x.detach()
        if isinstance(x, nn.Module):
            try:
                return torch_spec(x)
            except TypeError as e:
                raise Unsupported(str(e)) from None
        if isinstance(x, (list, tuple)):
            return type(x)(self._encode(v) for v in x)
        if isinstance(x, dict):
            return {k: self._encode(v) for k, v in x.items()}
        return x

    def _decode(self, x):
        from ..hidden import _adapter as A

        if isinstance(x, dict):
            if "__ref__" in x:
                return A.RemoteObject(self, int(x["__ref__"]), x.get("info", {}))
            return {k: self._decode(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(self._decode(v) for v in x)
        return x

    def request(self, op: str, **fields):
        """One request to the student's process; its answer, or its error raised here."""
        import torch

        from ..hidden import _adapter as A

        try:
            payload = {"op": op, **{k: self._encode(v) for k, v in fields.items()}}
        except Unsupported as e:
            self.unsupported = str(e)
            raise
        if op in ("call", "launch"):
            payload["forbid"] = A.forbid_spec()
        try:
            data = dumps(payload)
            if not _surely_plain(payload):      # only plain data crosses over: what the student's side can load
                torch.load(io.BytesIO(data), weights_only=True)
        except Exception as e:  # noqa: BLE001
            self.unsupported = f"{op}: arguments are not plain tensors/numbers ({type(e).__name__})"
            raise Unsupported(self.unsupported) from None
        try:
            self._send_raw(data)
            ans = self._recv()
        except (EOFError, TimeoutError) as e:
            raise RuntimeError(f"{op}: {e}") from None
        except Exception as e:  # noqa: BLE001 - an answer that is not plain data
            raise RuntimeError(f"{op}: the answer is not tensors/numbers ({type(e).__name__})") from None
        if "error" in ans:
            raise _error(ans)
        for key, eff in ans.get("effects", []):
            self._mirror(fields, key, eff)
        return self._decode(ans["ok"])

    @staticmethod
    def _mirror(fields: dict, key, eff: dict) -> None:
        """Copy what the student's code did in place to a tensor argument onto the caller's."""
        import torch

        args, kwargs = fields.get("args", ()), fields.get("kwargs", {})
        t = args[key] if isinstance(key, int) and key < len(args) else kwargs.get(key)
        if not isinstance(t, torch.Tensor):
            return
        with torch.no_grad():
            if eff.get("value") is not None and eff["value"].shape == t.shape:
                t.copy_(eff["value"])
        if eff.get("requires_grad") and t.is_leaf and not t.requires_grad and t.is_floating_point():
            t.requires_grad_(True)
        if eff.get("grad") is not None and t.is_leaf:
            t.grad = eff["grad"]

    def call(self, name: str, args: tuple, kwargs: dict):
        return self.request("call", target=name, args=tuple(args), kwargs=dict(kwargs))

    def proxies(self) -> dict:
        """{name: proxy} for the student's top-level functions and classes."""
        from ..hidden import _adapter as A

        out = {}
        for name, kind in self.names.items():
            if kind in ("function", "callable"):
                out[name] = A.RemoteFunction(self, name)
            elif kind == "class":
                out[name] = A.RemoteClass(self, name)
        return out

    def _last_words(self) -> str:
        """The last line the replay process wrote on stderr (': ModuleNotFoundError: ...'), if any."""
        try:
            self._stderr.seek(0)
            lines = [
                ln.strip() for ln in self._stderr.read()[-4000:].decode(errors="replace").splitlines() if ln.strip()
            ]
        except (OSError, ValueError):
            return ""
        return f": {lines[-1][:160]}" if lines else ""

    def close(self) -> None:
        from ..isolation.zygote import Child

        if isinstance(self.proc, Child):
            self.proc.kill()                 # the zygote ends its process group: whatever it started too
        else:
            try:       # ``timeout`` leads its own process group: whatever the student's code started too
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
        for f in (self._in, self._out):
            try:
                f.close()
            except OSError:
                pass
        self._stderr.close()


_PLAIN = (type(None), bool, int, float, str)


def _surely_plain(x) -> bool:
    """True where ``x`` holds nothing but None, numbers, strings, dense tensors and lists, tuples and
    dicts (string keys) of those: what ``torch.load(weights_only=True)`` always loads, so a request
    made of them needs no trial load here (anything else is tried: the verdict's few other requests)."""
    import torch

    kind = type(x)
    if kind in _PLAIN:
        return True
    if kind is torch.Tensor:
        return x.layout == torch.strided and not x.is_quantized and x.device.type == "cpu"
    if kind in (list, tuple):
        return all(_surely_plain(v) for v in x)
    if kind is dict:
        return all(type(k) is str and _surely_plain(v) for k, v in x.items())
    return False


def _error(ans: dict) -> BaseException:
    """The student's exception, as an exception of the grader's process: built-in types as
    themselves (checks may expect a ValueError), the checks' own kinds as theirs."""
    import builtins

    from attention_workbook.checks.core import ForbiddenCall

    from ..replay_support import LoadError

    kind_name = str(ans.get("type"))
    msg = ans["error"].split(": ", 1)[-1]
    kinds = {"ForbiddenCall": ForbiddenCall, "LoadError": LoadError}
    kind = kinds.get(kind_name) or getattr(builtins, kind_name, None)
    if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, (SystemExit, KeyboardInterrupt)):
        try:
            return kind(msg)
        except Exception:  # noqa: BLE001 - an exception type with another signature
            pass
    return RuntimeError(ans["error"])


def _cells(nb):
    """(student code cells in order, {test grade_id: hidden block})."""
    code, hidden = [], {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell_meta(cell)
        if meta.get("grade") and not meta.get("solution"):
            m = _HIDDEN.search(cell.source)
            if m:
                hidden[meta["grade_id"]] = m.group(1)
            continue
        code.append(cell.source)
    return code, hidden


def outside_verdicts(nb, cwd: Path, cells: list[str], timeout: float = 60) -> dict[str, str]:
    """{grade_id: 'pass' | 'fail: why' | 'unsupported: why'} for the given test cells."""
    return recheck(nb, cwd, cells, timeout)[0]


def recheck(nb, cwd: Path, cells: list[str], timeout: float = 60, exercise: str | None = None,
            graded: list[str] = ()) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The outside verdicts of ``cells``, and what the student's process reports each graded
    name reaches in the workbook's package (``own.reference_uses``: evidence the grader adds to
    its own reading of the source; it can only add findings, never remove one)."""
    code, hidden = _cells(nb)
    out, facts = {}, {}
    wanted = [c for c in cells if c in hidden]
    for c in cells:
        if c not in hidden:
            out[c] = "unsupported: no hidden block"
    if not wanted:
        return out, facts
    try:
        replay = Replay(code, cwd, timeout)
    except Exception as e:  # noqa: BLE001
        return {**out, **{c: f"unsupported: {e}" for c in wanted}}, facts
    from ..hidden import _adapter

    try:
        if graded and exercise:
            try:
                got = replay.request("facts", names=list(graded), exercise=exercise)
                facts = {k: [str(x) for x in v][:5] for k, v in dict(got).items() if v}
            except Exception:  # noqa: BLE001 - evidence only
                facts = {}
        for c in wanted:
            block = hidden[c]
            ns: dict = {"__name__": "__awb_verdict__"}
            ns.update({name: proxy for name, proxy in replay.proxies().items()
                       if re.search(rf"\b{re.escape(name)}\b", block)})
            replay.unsupported = None
            _adapter._CLIENT = replay
            try:
                replay.request("reset")
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
            finally:
                _adapter._CLIENT = None
                _adapter._FORBID.clear()
            if replay.proc.poll() is not None:           # the student's process died: next cell, fresh one
                replay.close()
                try:
                    replay = Replay(code, cwd, timeout)
                except Exception as e:  # noqa: BLE001
                    left = wanted[wanted.index(c) + 1:]
                    out.update({x: f"unsupported: {e}" for x in left})
                    break
    finally:
        replay.close()
    return out, facts


def student_cells(nb) -> list[str]:
    """The cells the student wrote: answer cells and cells they added (not the read-only cells
    and test cells, which nbgrader restores from the release)."""
    out = []
    for cell in nb.cells:
        meta = cell_meta(cell)
        if cell.cell_type == "code" and (meta.get("solution") or not meta):
            out.append(cell.source)
    return out


def item_cells(nb) -> dict[str, list[str]]:
    """{answer cell id (= the graded name): the test cells that follow it}."""
    out: dict[str, list[str]] = {}
    current = None
    for cell in nb.cells:
        meta = cell_meta(cell)
        if meta.get("solution"):
            current = meta.get("grade_id")
            out.setdefault(current, [])
        elif meta.get("grade") and current:
            out[current].append(meta["grade_id"])
    return out


def findings(nb, assignment: str, facts: dict | None = None) -> tuple[dict[str, list[str]], list[str]]:
    """({graded name: how it delegates to the workbook's reference}, [obfuscation hits]):
    the source read in this process (``delegation.scan``, ``obfuscation``) plus the student's
    process's report (``facts``), which can only add findings."""
    from . import delegation

    code, _ = _cells(nb)
    mine = student_cells(nb)
    found = delegation.scan(mine, code, assignment[:2])
    for name, notes in (facts or {}).items():
        for n in notes:
            if n not in found.setdefault(name, []):
                found[name].append(n)
    found = {k: v for k, v in found.items() if v}
    hidden_code = [h for src in mine for h in obfuscation(src)]
    return found, hidden_code


@dataclass
class Decision:
    """What the grader's process decided for one executed submission."""
    withheld: dict = field(default_factory=dict)    # test grade_id -> why its points are withheld (shown)
    reasons: list = field(default_factory=list)     # for the flags (every door shows the same)
    flagged: bool = False
    hidden_failed: dict = field(default_factory=dict)   # test grade_id -> its hidden check's message (instructor only)


def decide(nb, assignment: str, cwd: Path, earned: list[str], timeout: float = 60,
           scope: str = "full") -> Decision:
    """Decide, in the grader's process, the test cells whose visible check passed inside the
    student's kernel (``earned``; ``nb`` is the executed notebook, its test cells whole): each
    keeps its points only if its hidden check passes outside that process (``recheck``: the one
    place hidden checks run), its graded item is the student's own work (not the workbook's
    reference: ``findings``), and the answer cells hide nothing (``obfuscation``). A hidden check
    that fails is a wrong answer (``hidden_failed``; not a flag), unless the code touches the
    checking machinery (``suspicious_code``): then the cell is withheld and the submission
    flagged. Also reads what the execution itself says (answer cells that do not run, cells cut
    by the time limit, what the sandbox stopped: :func:`events`).

    ``scope``: "full"; "static" (no hidden check runs: ``--no-verdict``)."""
    from attention_workbook.checks import own

    d = Decision()
    broken, timeouts, stopped = events(nb)
    if broken:
        d.reasons.append("answer cell(s) do not run: " + ", ".join(broken))
    if timeouts:
        d.flagged = True
        d.reasons.append(f"cell time limit hit in: {', '.join(timeouts)} (infinite loop?)")
    delegated, hidden_code = findings(nb, assignment)
    verdicts: dict[str, str] = {}
    if earned and not hidden_code and scope == "full":   # (hidden code: every point is withheld anyway)
        graded = own.EXERCISES.get(assignment[:2], {}).get("graded", [])
        verdicts, facts = recheck(nb, cwd, earned, timeout=timeout, exercise=assignment[:2], graded=graded)
        delegated, _ = findings(nb, assignment, facts)
    code, _ = _cells(nb)
    suspicious = [h for src in code for h in suspicious_code(src)]

    withhold: dict[str, str] = {}
    items = item_cells(nb)
    if hidden_code:
        reason = (f"tampering: answer cells hide what they run ({'; '.join(hidden_code[:3])}"
                  f"{'; ...' if len(hidden_code) > 3 else ''}): every point withheld, review by hand")
        withhold.update({c: reason for c in earned})
        d.reasons.append(reason)
    for name, notes in delegated.items():
        reason = (f"not the student's own work: {name} {'; '.join(notes[:3])} (the workbook's reference): "
                  f"no points for {', '.join(items.get(name, [])) or name}")
        withhold.update({c: reason for c in items.get(name, []) if c in earned and c not in withhold})
        d.reasons.append(reason)
    # a hidden check that fails outside is a wrong answer (the student reads HIDDEN_MESSAGE); where
    # the code touches the checking machinery, a visible check that passed inside may have been
    # faked: flagged, as patching is
    fails = [c for c, v in verdicts.items() if v.startswith("fail")]
    d.hidden_failed = {c: verdicts[c][6:] for c in fails}
    if fails and suspicious:
        withhold.update({c: PATCHED_MESSAGE for c in fails if c not in withhold})
        d.reasons.append("passed in the student's kernel but failed when re-checked outside it "
                         f"(patched checking machinery?): {', '.join(fails)}: points withheld")
    rest = [c for c, v in verdicts.items() if v.startswith("unsupported") and c not in withhold]
    if rest:
        why = verdicts[rest[0]].split(": ", 1)[-1][:120]
        withhold.update({c: UNCHECKED_MESSAGE for c in rest})
        d.reasons.append(f"could not be re-checked outside the student's process ({why}): "
                         f"{', '.join(rest)}: points withheld, review by hand")
    if suspicious:
        d.reasons.append(f"{'' if withhold else 'note: '}code touches the checking machinery ({suspicious[0]})"
                         + ("" if withhold else "; verdicts confirmed outside the kernel"))
    d.reasons += stopped
    d.withheld = withhold
    d.flagged = d.flagged or bool(withhold or delegated or hidden_code or stopped)
    return d


_EVENTS = [
    ("network", ("Network is unreachable", "Temporary failure in name resolution", "Name or service not known",
                 "No address associated", "gaierror",
                 "Address family not supported"),      # the Landlock tier's seccomp filter: no such socket
     "tried to reach the network (blocked by the sandbox)"),
    ("files", ("Permission denied", "Read-only file system", "unable to open database file",
               "No such file or directory: '/", "No such file or directory: '.."),
     "tried to read or write files outside its folder (blocked by the sandbox)"),
    ("memory", ("MemoryError", "Cannot allocate memory", "DefaultCPUAllocator: can't allocate"),
     "ran out of memory (the kernel's memory limit)"),
    ("processes", ("Resource temporarily unavailable", "BlockingIOError", "can't start new thread"),
     "started too many processes (the sandbox's process limit)"),
    ("kernel", ("DeadKernelError", "Kernel died", "kernel died"),
     "the kernel died (killed by a limit)"),
    ("output", ("output truncated by the grader", "output removed by the grader"),
     "huge output truncated"),
]


def events(nb) -> tuple[list[str], list[str], list[str]]:
    """What the executed notebook's outputs say: (answer cells that raised, e.g. a SyntaxError;
    cells the time limit cut; what the sandbox and the limits stopped: network, files outside
    the folder, memory, processes, a dead kernel, huge output)."""
    broken, timeouts, stopped, seen = [], [], [], set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell_meta(cell)
        where = meta.get("grade_id")
        text = []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error" and o.get("ename") in ("KernelStopped", "PointsWithheld", HIDDEN_FAILED):
                continue                       # (the grader's own notes, not the student's execution)
            if o.get("output_type") == "error":
                ename = o.get("ename", "")
                if meta.get("solution") and ename != "NotImplementedError":
                    broken.append(f"{where} ({ename})")
                if "CellTimeoutError" in ename + "".join(o.get("traceback", [])):
                    timeouts.append(where or f"cell {i}")
                text += [ename, o.get("evalue", "")]
            elif o.get("output_type") == "stream":
                text.append(o.get("text", "")[-400:])
        blob = " ".join(text)
        for key, needles, reason in _EVENTS:
            if any(n in blob for n in needles) and key not in seen:
                seen.add(key)
                stopped.append(reason + (f" in {where}" if where else ""))
    return broken, list(dict.fromkeys(timeouts)), stopped


def hidden_blocks(nb) -> dict[str, str]:
    """{test grade_id: its hidden block} of a notebook."""
    return _cells(nb)[1]
