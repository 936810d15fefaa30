"""One warm, confined process per submission: the grading process's zygote.

A submission's kernel and its outside verdict's replay each used to be a new Python that
imported PyTorch (about 2 of a notebook's 3 to 4 core-seconds). Here every grading process
(a cohort worker, ``nbgrader autograde``, formgrader's server, a platform's harness) keeps one
**zygote**: a Python started anew, in a clean environment, that imports PyTorch, NumPy,
matplotlib, IPython, ipykernel (and Triton where it is installed) and nothing of the course, then
forks one child per request: a notebook's kernel, a replay, or a short program (the tier's
probe). The zygote never runs student code, never reads a submission, ``solutions/``, the hidden
checks or the gradebook: a child's memory is a copy of the zygote's and holds nothing a student
may not see. A child is never forked from a child.

Each child confines **itself** before the student's first line (``confine.enter``, the same
steps the cold path's ``confine.py`` takes before it execs), as :func:`~.sandbox.child_plan`
says for the tier:

* a session and process group of its own (whatever it starts stays in it: the seccomp filter
  makes setsid/setpgid do nothing), which the zygote kills when the child ends, when its owner
  lets it go, or when its life limit passes;
* as root, a uid of its own (no capabilities left), then resource limits (memory, CPU, file
  size, no core, processes), Landlock (only its own folder, its private temporary folder and,
  for a kernel, its socket folder writable; only the system, Python and what the exercise
  provides readable), the seccomp filter, no_new_privs;
* in the bubblewrap tier the zygote itself runs in a bubblewrap sandbox of its grading process
  (no network, its own PID namespace, only the system, Python, the helper package, the grading
  folders and its private folder there): each child adds its own folder, uid, Landlock and
  seccomp to it, so nothing one submission leaves reaches the next.

What a child cannot do to the zygote or a sibling: signal it (another uid as root; Landlock's
signal scoping, ABI 6, otherwise), ptrace it or read its memory (the seccomp filter refuses
ptrace and process_vm_*; Landlock refuses ptrace, and so ``/proc/PID/mem``, of a process outside
its domain; as root the zygote is another uid's), connect to the zygote and ask for a weaker child
(the zygote's folder is closed to it, and a request must carry a token whose hash alone the zygote
holds).

The kernel spec's launcher (``sandbox.launch``) hands its working directory and standard streams
to the zygote over a Unix socket, then stands in for the kernel (forwards signals, exits with its
status): jupyter_client sees it as the kernel's process. The replay's pipes are handed over the
same way by the grading process itself (:class:`Child`). A zygote that died is started again on
the next request (:func:`ensure`); a child that crashes, hangs, fork-bombs or runs out of memory
ends alone, and one that stops itself (SIGSTOP) is killed at once: its requester (nbclient, through
the kernel's stand-in) finds a dead kernel within a second instead of waiting out the cell's time limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time

SOCKET_ENV = "AWB_ZYGOTE"                 # the zygote's socket, for the kernels' launchers
TOKEN_ENV = "AWB_ZYGOTE_TOKEN"            # what a request must carry (never in a child's environment)
HASH_ENV = "AWB_ZYGOTE_HASH"              # the zygote's only knowledge of it: its SHA-256
PRELOAD = ("numpy", "torch", "torch.nn", "torch.nn.functional", "matplotlib", "matplotlib.pyplot", "IPython",
           "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell",
           # what a kernel imports while it starts (its debugger support, IPython's history, ...)
           "ipykernel.debugger", "sqlite3", "pdb", "pydoc", "tornado.gen", "tornado.locks", "tornado.queues",
           "http.server", "xmlrpc.client", "xmlrpc.server", "mimetypes", "faulthandler", "IPython.extensions",
           # what the replay imports before the student's code (replay.py, replay_support.py)
           "torch.optim", "inspect", "linecache", "traceback", "contextlib", "types")
# Triton (exercises 10 and 11), imported where it is installed: in its interpreter where there is no
# GPU (``attention_workbook.tritonenv`` decides the same way, and accepts a Triton imported so)
TRITON = ("triton", "triton.language")
# PyTorch's compiler stack, which an optimizer's first step imports (about a core-second: exercises 08
# and 11 train in their checks), imported in the zygote on the first request that asks for it, once
# instead of in every kernel and every replay
TRAINING = ("torch._dynamo",)
# what ipykernel sets MPLBACKEND to when it starts, if it is not set (matplotlib reads it on import)
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
# environment variables read when Python, NumPy, PyTorch or Triton start: a child whose environment
# differs in one of them needs a zygote started with it (``ensure`` starts one)
STARTUP_PREFIXES = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "LD_", "MALLOC_", "TORCH", "PYTORCH_",
                    "CUDA_", "NUMEXPR_", "LANG", "LC_", "TRITON_", "MPLBACKEND")
PER_CHILD = ("PYTHONPATH",)              # set for each child (its sys.path is rebuilt from it)


def startup_env(env: dict) -> dict:
    """The part of an environment that must equal the zygote's for a child to honour it."""
    out = {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) and k not in PER_CHILD}
    out["MPLBACKEND"] = env.get("MPLBACKEND") or INLINE_BACKEND
    return out


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# -- framing: 4-byte length + JSON, with file descriptors alongside --------------------------------
def send(sock: socket.socket, obj, fds=()) -> None:
    data = json.dumps(obj).encode()
    frame = struct.pack(">I", len(data)) + data
    if fds:
        socket.send_fds(sock, [frame], list(fds))
    else:
        sock.sendall(frame)


def recv(sock: socket.socket, want_fds: int = 0, limit: int = 1 << 22):
    """One frame (and the file descriptors sent with it); None at end of stream."""
    fds: list[int] = []
    if want_fds:
        head, fds, _flags, _addr = socket.recv_fds(sock, 4, want_fds)
    else:
        head = sock.recv(4)
    while head and len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            break
        head += more
    if len(head) < 4:
        return None, fds
    (n,) = struct.unpack(">I", head)
    if n > limit:
        return None, fds
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


# -- the zygote -----------------------------------------------------------------------------------
PLOTTING = ("matplotlib", "matplotlib.pyplot")
# False in a platform's grading process whose exercise draws nothing while graded (set before the
# zygote is forked from it): a zygote serving one upload then imports no matplotlib, which a kernel
# that does plot imports itself (``platforms.harness.warm_start``)
PRELOAD_PLOTTING = True


def preload(plotting: bool | None = None) -> dict:
    """Import what every kernel and replay imports (stderr silenced: debugpy warns when imported,
    as it does in every new kernel's log); returns what the children's environment must add.
    ``plotting``: matplotlib too (default :data:`PRELOAD_PLOTTING`)."""
    import importlib

    added = {}
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = INLINE_BACKEND
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        plotting = PRELOAD_PLOTTING if plotting is None else plotting
        for name in PRELOAD:
            if plotting or name not in PLOTTING:
                importlib.import_module(name)
        if importlib.util.find_spec("triton") is not None and (
                os.environ.get("TRITON_INTERPRET") or not os.path.exists("/dev/nvidiactl")):
            # no GPU: Triton's interpreter, as tritonenv would choose (never a CUDA call before a fork);
            # Triton itself is imported on the first request that asks for it (:func:`warm_up`)
            os.environ.setdefault("TRITON_INTERPRET", "1")
            added["TRITON_INTERPRET"] = os.environ["TRITON_INTERPRET"]
        # the machine's network addresses, which a kernel looks up when it starts
        from jupyter_client import localinterfaces

        localinterfaces.public_ips()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
    return added


def warm_up(names: list[str]) -> None:
    """Import ``names`` in the zygote before a fork (what only some exercises import: Triton, PyTorch's
    compiler stack), once; only those (:data:`TRITON`, :data:`TRAINING`); a module that cannot be
    imported is left to the child (which then says why)."""
    import importlib

    for name in names:
        wanted = name in TRAINING or (name in TRITON and os.environ.get("TRITON_INTERPRET"))
        if wanted and name not in sys.modules:
            saved = os.dup(2)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001
                pass
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                os.close(null)


_WAKE: list[int] = []           # the zygote's SIGCHLD pipe (read end, write end)


def serve(path: str) -> None:
    """The zygote: preload, say ``ready <env JSON>`` on stdout, fork a child per request; exit when
    the owner closes our stdin (killing the children still running)."""
    import selectors

    # the token's hash, never the token: a child may read what the zygote started with (its own
    # /proc/self/environ is the zygote's), and a hash lets nobody make a request
    want = os.environ.pop(HASH_ENV, "")
    added = preload()
    from . import confine, landlock, syscalls  # noqa: F401 - what each child confines itself with

    try:
        import landlockpy  # noqa: F401

        syscalls.bindings()
    except (ImportError, RuntimeError):     # (a child whose plan needs them says so)
        pass
    zygote_path = list(sys.path)
    mine = startup_env(os.environ)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "owner")
    # a child's end wakes the loop at once (its requester, a kernel's launcher or a replay, waits for
    # it), not at the loop's next 50 ms tick: SIGCHLD writes to a pipe the selector watches
    _WAKE[:] = os.pipe()
    for fd in _WAKE:
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(_WAKE[1])
    sel.register(_WAKE[0], selectors.EVENT_READ, "sigchld")
    kids: dict[int, tuple[socket.socket, float]] = {}      # child pid -> (its requester's connection, deadline)
    pending: dict[socket.socket, float] = {}                # connections that have not sent a request yet
    print("ready " + json.dumps(added), flush=True)
    try:
        _loop(sel, listener, kids, pending, mine, want, zygote_path)
    finally:
        for pid in kids:
            _signal(pid, signal.SIGKILL)
        sys.stdout.flush()
        os._exit(0)          # nothing to tear down one object at a time (a Python with PyTorch takes a while)


def _loop(sel, listener, kids, pending, mine, want, zygote_path) -> None:
    """Serve until the owner closes our stdin."""
    while True:
        for key, _ in sel.select(timeout=0.05):
            if key.data == "owner":
                if not os.read(sys.stdin.fileno(), 4096):
                    return
            elif key.data == "sigchld":          # reaped below
                try:
                    while os.read(_WAKE[0], 4096):
                        pass
                except BlockingIOError:
                    pass
            elif key.data == "accept":
                conn, _ = listener.accept()
                if len(pending) > 32:                # nobody keeps the zygote busy
                    conn.close()
                    continue
                conn.settimeout(5)
                pending[conn] = time.monotonic() + 5
                sel.register(conn, selectors_read(), "request")
            elif key.data == "request":
                conn = key.fileobj
                sel.unregister(conn)
                pending.pop(conn, None)
                _answer(conn, sel, kids, mine, want, zygote_path, listener)
            else:                                    # a requester's connection: a signal, or it left
                pid, conn = key.data, key.fileobj
                try:
                    msg, _ = recv(conn)
                except (OSError, ValueError):
                    msg = None
                if msg and "signal" in msg:
                    _signal(pid, int(msg["signal"]))
                    continue
                sel.unregister(conn)
                conn.close()
                if kids.pop(pid, None) is not None:
                    _signal(pid, signal.SIGKILL)
        now = time.monotonic()
        for conn, deadline in list(pending.items()):     # a connection that never asked
            if now > deadline:
                sel.unregister(conn)
                pending.pop(conn)
                conn.close()
        for pid, (conn, deadline) in list(kids.items()):  # a child past its life limit
            if now > deadline:
                _signal(pid, signal.SIGKILL)
        while True:            # reap the children that ended (and what they left), tell their requesters
            try:
                pid, status = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if os.WIFSTOPPED(status):
                # a child that stopped itself (SIGSTOP from its own code, or from what it started: nothing
                # else may signal it) never answers again: it ends now, not when its cell's time runs out
                if pid in kids:
                    _signal(pid, signal.SIGKILL)
                continue
            entry = kids.pop(pid, None)
            if entry is None:
                continue
            _signal(pid, signal.SIGKILL)              # whatever it started
            conn = entry[0]
            sel.unregister(conn)
            try:
                send(conn, {"exit": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass
            conn.close()


def _answer(conn, sel, kids, mine, want, zygote_path, listener) -> None:
    """Read one request and fork its child, or say why not."""
    try:
        req, fds = recv(conn, want_fds=3)
    except (OSError, ValueError):
        req, fds = None, []
    refused = None
    if not isinstance(req, dict):
        refused = "no request"
    elif token_hash(str(req.get("token", ""))) != want:
        refused = "not the zygote's owner"
    elif startup_env(req.get("env", {})) != mine:
        theirs = startup_env(req.get("env", {}))
        keys = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
        refused = "its environment differs from the zygote's in " + ", ".join(keys)
    elif len(fds) != 3:
        refused = "it did not send its standard streams"
    if refused:
        try:
            send(conn, {"refused": refused})
        except OSError:
            pass
        conn.close()
        for fd in fds:
            os.close(fd)
        return
    warm_up([str(m) for m in req.get("preload") or []])
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(req, fds, [listener, conn, *(k.fileobj for k in sel.get_map().values()
                                              if isinstance(k.fileobj, socket.socket))], sel, zygote_path)
    for fd in fds:
        os.close(fd)
    conn.settimeout(None)
    kids[pid] = (conn, time.monotonic() + float(req.get("plan", {}).get("life_s") or 900))
    sel.register(conn, selectors_read(), pid)
    try:
        send(conn, {"pid": pid})
    except OSError:
        pass


def selectors_read():
    import selectors

    return selectors.EVENT_READ


def _signal(pid: int, sig: int) -> None:
    """``sig`` to the child's process group (everything it started stays in it)."""
    try:
        os.killpg(pid, sig)
    except OSError:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


# -- in the child ---------------------------------------------------------------------------------
def _child(req: dict, fds: list[int], sockets: list, sel, zygote_path: list[str]) -> None:
    """Become the program ``req`` asks for, confined as its plan says; never returns."""
    code = 1
    try:
        os.setsid()                      # its own group: killed whole when it ends
        signal.set_wakeup_fd(-1)         # the zygote's wake-up pipe is not the child's
        for fd in _WAKE:
            os.close(fd)
        for s in sockets:
            try:
                s.close()
            except OSError:
                pass
        sel.close()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        code = _become(req, zygote_path)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - say why where the child's stderr goes
        import traceback

        traceback.print_exc()
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001
            pass
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


def _become(req: dict, zygote_path: list[str]) -> int:
    from . import confine

    plan = req["plan"]
    kind = req["kind"]
    os.chdir(req["cwd"])
    env = dict(req["env"])
    # sys.path as a new `python -m ...` (or -c) would build it from this child's PYTHONPATH, in place
    # of the zygote's own entries (the grader's package, which the child does not see)
    own = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = [p for p in zygote_path[1:] if p not in _ZYGOTE_ONLY]
    sys.path[:] = [os.getcwd() if kind != "exec" else "", *own, *base]
    # what a new process would draw anew
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    os.environ.clear()
    os.environ.update(env)
    # tempfile keeps its first answer for the process's life: the zygote's (or, forked from a
    # platform's grading process, that process's /tmp, closed to a child in the Landlock tier, where
    # PyTorch's compiler then failed to make /tmp/torchinductor_<user> and an honest upload lost a point)
    import tempfile

    tempfile.tempdir = None
    try:
        confine.enter(plan)              # uid, limits, Landlock, seccomp: before any student code
    except Exception as e:  # noqa: BLE001 - say why, run nothing
        print(f"awb sandbox: could not confine the program: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        os._exit(126)
    # the grader's own modules are not the child's (the replay imports its two from its own view)
    for name in [m for m in sys.modules if m == "awb_grader" or m.startswith("awb_grader.")]:
        del sys.modules[name]
    import importlib

    importlib.invalidate_caches()
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    if kind == "kernel":
        import importlib.util

        from ipykernel import kernelapp

        sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *req["argv"]]
        # ipykernel's own parent poller: the kernel ends within a second if its zygote dies (which
        # would otherwise leave it running, its requester gone)
        kernelapp.launch_new_instance(argv=[*req["argv"], f"--IPKernelApp.parent_handle={os.getppid()}"])
        return 0
    if kind == "replay":
        sys.argv = ["-m", *req["argv"]]
        from awb_grader import replay

        replay.main()
        return 0
    if kind == "exec":
        sys.argv = ["-c", *req["argv"][1:]]
        exec(compile(req["argv"][0], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the grader's own code
        return 0
    raise ValueError(f"unknown kind of child {kind!r}")


_ZYGOTE_ONLY: set[str] = set()           # sys.path entries only the zygote has (its own PYTHONPATH)


# -- the owner's side -----------------------------------------------------------------------------
class Zygote:
    """A running zygote owned by this process (stopped with :meth:`stop`, or when we exit).

    ``env``: its whole environment (the children's, less what each child sets for itself);
    ``wrapper``: the command it runs in (the bubblewrap tier's sandbox), or nothing."""

    def __init__(self, folder, env: dict, wrapper: list[str] = (), cwd=None, fork: bool = False):
        import subprocess
        import tempfile
        from pathlib import Path

        from ..core.course import AUTOGRADER

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)          # no child may reach the socket, nor replace it
        self.path = str(self.folder / "zygote.sock")
        self.token = os.urandom(24).hex()
        self.env = dict(env)
        self.startup = startup_env(self.env)
        self._err = tempfile.TemporaryFile()
        if fork:
            full = dict(self.env, **{HASH_ENV: token_hash(self.token)})
            self.proc = _Forked(self.path, full, str(cwd or self.folder), self._err.fileno())
        else:
            program = [sys.executable, "-m", "awb_grader.isolation.zygote", "serve", self.path]
            full = dict(self.env, PYTHONPATH=str(AUTOGRADER), **{HASH_ENV: token_hash(self.token)})
            self.proc = subprocess.Popen([*wrapper, *program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._err, env=full, cwd=cwd or self.folder, close_fds=True)
        line = self.proc.stdout.readline().decode(errors="replace")
        if not line.startswith("ready"):
            self.stop()
            raise RuntimeError(f"the zygote did not start (exit {self.proc.poll()}){self.last_words()}")
        self.added = json.loads(line[len("ready"):].strip() or "{}")
        self.started = time.time()

    def last_words(self) -> str:
        try:
            self._err.seek(0)
            lines = [ln for ln in self._err.read()[-4000:].decode(errors="replace").splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return f": {lines[-1][:300]}" if lines else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait()
        try:
            self._err.close()
        except OSError:
            pass

    def child_env(self, env: dict) -> dict:
        """``env`` with what the zygote's preload decided (Triton's interpreter)."""
        return {**env, **self.added}

    def fork(self, kind: str, argv: list[str], cwd: str, env: dict, plan: dict, fds: list[int],
             preload: list[str] = ()) -> Child:
        """A new child of ``kind`` (kernel, replay, exec) with standard streams ``fds``; ``preload``:
        modules the zygote imports first, once (:func:`warm_up`)."""
        return Child.start(self.path, self.token, kind, argv, cwd, self.child_env(env), plan, fds, preload)


class _Forked:
    """A zygote forked from this process rather than started anew (the platforms' grading process,
    which imports what the zygote preloads anyway, and forks before it opens anything of the course,
    in a clean environment: ``run_autograder`` starts it with ``env -i``): what ``Popen`` gives."""

    def __init__(self, path: str, env: dict, cwd: str, err: int):
        to_zygote, stdin = os.pipe()
        stdout, from_zygote = os.pipe()
        own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.dup2(to_zygote, 0)
                os.dup2(from_zygote, 1)
                os.dup2(err, 2)
                os.closerange(3, 65536)
                os.chdir(cwd)
                os.environ.clear()
                os.environ.update(env)
                _ZYGOTE_ONLY.update(own)         # the grading process's own PYTHONPATH: not a child's
                # the standard streams are the new 0, 1 and 2, whatever this process had made of them
                sys.stdin = open(0, closefd=False)
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                serve(path)
            except BaseException:  # noqa: BLE001 - its owner reads why from our stderr (last_words)
                import traceback

                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(1)
        os.close(to_zygote)
        os.close(from_zygote)
        self.stdin, self.stdout = os.fdopen(stdin, "wb"), os.fdopen(stdout, "rb")
        self.returncode = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("zygote", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


class Refused(RuntimeError):
    """The zygote would not (or could not) start this child: the reason says why."""


class Child:
    """A child of the zygote, seen from its requester: ``pid`` (in the zygote's PID namespace),
    :meth:`poll`, :meth:`wait`, :meth:`kill` (its whole process group), :meth:`signal`."""

    def __init__(self, sock: socket.socket, pid: int):
        self.sock, self.pid, self.returncode = sock, pid, None

    @classmethod
    def start(cls, path: str, token: str, kind: str, argv: list[str], cwd: str, env: dict, plan: dict,
              fds: list[int], preload: list[str] = ()) -> Child:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(60)
            sock.connect(path)
            send(sock, {"token": token, "kind": kind, "argv": list(argv), "cwd": str(cwd), "env": env,
                        "plan": plan, "preload": list(preload)}, list(fds))
            answer, _ = recv(sock)
        except OSError as e:
            sock.close()
            raise Refused(f"the zygote cannot be reached ({e})") from None
        if not answer or "pid" not in answer:
            sock.close()
            raise Refused((answer or {}).get("refused", "the zygote closed the connection"))
        sock.settimeout(None)
        return cls(sock, int(answer["pid"]))

    def _read_exit(self, timeout: float | None) -> None:
        import select

        if self.returncode is not None:
            return
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return
        try:
            msg, _ = recv(self.sock)
        except (OSError, ValueError):
            msg = None
        self.returncode = int(msg["exit"]) if msg and "exit" in msg else -9
        self.sock.close()

    def poll(self) -> int | None:
        self._read_exit(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        self._read_exit(timeout)
        return self.returncode

    def signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                send(self.sock, {"signal": int(sig)})
            except OSError:
                pass

    def kill(self) -> None:
        """End the child and everything it started (the zygote kills its group)."""
        if self.returncode is None:
            self.signal(signal.SIGKILL)
            self.wait(10)
            if self.returncode is None:            # the zygote is gone: closing says the same
                self.sock.close()
                self.returncode = -9


# -- this process's zygote -----------------------------------------------------------------------
COLD_ENV = "AWB_COLD"           # "1": no zygote, every kernel and replay a new process (the benchmark's "before")
ADDED_ENV = "AWB_ZYGOTE_ADDED"  # what the zygote's preload added to its children's environment (JSON)
_CURRENT: Zygote | None = None
_KEY: tuple | None = None
_WHY_COLD: dict[str, str] = {}
_STOP_AT_EXIT: list = []


def cold_reason(mode: str) -> str | None:
    """Why no zygote serves the tier ``mode`` here (None: one does). In the bubblewrap tier each
    child confines itself with Landlock (its own folder) and, sharing the zygote's uid when the
    grader is not root, needs Landlock's signal scoping (ABI 6): without them every kernel and
    replay starts in a new bubblewrap sandbox, as before."""
    if os.environ.get(COLD_ENV) == "1":
        return f"{COLD_ENV}=1"
    if mode != "bwrap":
        return None
    if mode not in _WHY_COLD:
        from . import landlock

        try:
            import landlockpy  # noqa: F401

            from .syscalls import bindings

            bindings()
            abi = landlock.abi()
        except (ImportError, RuntimeError) as e:
            abi, why = 0, f"no Landlock or seccomp bindings ({e})"
        else:
            why = "this kernel has no Landlock"
        if abi >= 1 and (os.geteuid() == 0 or abi >= 6):
            _WHY_COLD[mode] = ""
        else:
            _WHY_COLD[mode] = why if abi < 1 else f"Landlock ABI {abi} < 6: a child could signal its zygote"
    return _WHY_COLD[mode] or None


def current() -> Zygote | None:
    """This process's zygote, if one is running."""
    return _CURRENT if _CURRENT is not None and _CURRENT.alive() else None


def current_root() -> str | None:
    """The grading folder the running zygote's sandbox binds (bubblewrap tier), if any."""
    return _KEY[1] if current() is not None and _KEY else None


def ensure(mode: str, root: str | None, env: dict, folder, wrapper: list[str] = (), fork: bool = False) -> Zygote:
    """This process's zygote for the tier ``mode`` (bubblewrap: in ``wrapper``, binding ``root``),
    whose children's environment is ``env``: the running one, or a new one where none runs, it
    died, or the tier, the folder or a variable read at start (:func:`startup_env`) changed.
    ``folder``: its own private folder (socket, home). Its socket, token and what its preload added
    go into this process's environment, which the kernels' launchers inherit. ``fork``: a new zygote
    is forked from this process (:class:`_Forked`) instead of started anew (not in a ``wrapper``)."""
    global _CURRENT, _KEY
    from pathlib import Path

    running = current()
    key = (mode, root, str(folder),
           json.dumps(startup_env({**env, **(running.added if running else {})}), sort_keys=True))
    if running is not None and key == _KEY:
        _announce(running)
        return running
    stop()
    folder = Path(folder)
    home = folder / "home"
    home.mkdir(parents=True, exist_ok=True)
    zenv = {k: v for k, v in env.items() if k != "TMPDIR"}
    zenv.update(HOME=str(home), MPLCONFIGDIR=str(home / "mpl"), IPYTHONDIR=str(home / "ipython"))
    _CURRENT = Zygote(folder, zenv, list(wrapper), cwd=str(folder.parent), fork=fork and not wrapper)
    _KEY = (mode, root, str(folder), json.dumps(startup_env({**env, **_CURRENT.added}), sort_keys=True))
    _announce(_CURRENT)
    if not _STOP_AT_EXIT:
        import atexit

        atexit.register(stop)
        _STOP_AT_EXIT.append(True)
    return _CURRENT


def _announce(z: Zygote) -> None:
    """The zygote's socket, token and additions in this process's environment (the kernels'
    launchers inherit them)."""
    os.environ[SOCKET_ENV] = z.path
    os.environ[TOKEN_ENV] = z.token
    os.environ[ADDED_ENV] = json.dumps(z.added)


def stop() -> None:
    """Stop this process's zygote (its children end with it)."""
    global _CURRENT, _KEY
    if _CURRENT is not None:
        _CURRENT.stop()
    _CURRENT, _KEY = None, None
    for k in (SOCKET_ENV, TOKEN_ENV, ADDED_ENV):
        os.environ.pop(k, None)


def stand_in(child: Child) -> None:
    """In a kernel's launcher: be the kernel's process for jupyter_client (forward signals, exit
    with its status); never returns."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda signum, _frame: child.signal(signum))
    while child.returncode is None:
        try:
            child.wait(None)
        except InterruptedError:
            continue
    status = child.returncode
    os._exit(status if 0 <= status < 256 else 1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _ZYGOTE_ONLY.update(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
        serve(sys.argv[2])
    else:
        sys.exit("usage: python -m awb_grader.isolation.zygote serve SOCKET")
