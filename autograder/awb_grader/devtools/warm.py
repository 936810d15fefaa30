"""Warm grading kernels: each kernel is forked from a process that has already imported PyTorch.

A grading kernel spends most of its life starting: a new Python, ipykernel and IPython, then
``import torch`` in the notebook's first cell, on every one of a few hundred notebooks, before
the cells that are graded run. This module keeps one *zygote* per grading process: a Python
that has imported PyTorch, NumPy, IPython and ipykernel once, and forks a fresh kernel for
every notebook. Each kernel is still its own process (a copy-on-write copy of the zygote, with
its own memory from then on): one submission cannot see or change another's, and nbgrader
drives it exactly as it drives its default kernel.

What a forked kernel has that a new one would not: those modules already in ``sys.modules``
(the workbook's own package is *not* preloaded: a cell that imports it runs that import, and
the checks that look at what a student imported see what they would in a new kernel).

The pieces:

* :func:`warm_kernels` (a context manager, used by the grader): starts the zygote, installs
  the ``awb-warm`` kernel spec, and returns the nbgrader settings that select it;
* the kernel spec's command, ``python -m awb_grader.devtools.warm launch -f CONNECTION_FILE``: a small
  launcher that hands its working directory, environment and standard streams to the zygote
  (over a Unix socket, the streams as file descriptors), stays alive as long as the kernel
  does, forwards signals to it and exits with its status: the kernel manager sees the launcher
  as the kernel's process;
* ``python -m awb_grader.devtools.warm serve SOCKET``: the zygote.

The zygote refuses (and the launcher starts an ordinary kernel instead, the same command
nbgrader's default kernel runs) when the kernel's environment differs from the zygote's in a
variable read when Python or PyTorch start (``PYTHON*``, ``OMP_*``, ``MKL_*``, ``LD_*``, ...),
since a forked kernel could not honour it. If the launcher loses the zygote, or the zygote its
owner, the kernels go too (nothing is left running).

**Trusted code only.** A forked kernel shares the zygote's memory image and is not a security
boundary: this is for the test suite's own catalog grading. Student code is graded in a new
bubblewrap sandbox per kernel (``isolation/sandbox.py``), never in a forked one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

KERNEL_NAME = "awb-warm"
SOCKET_ENV = "AWB_WARM_SOCKET"
PRELOAD = ("numpy", "torch", "torch.nn", "torch.nn.functional", "matplotlib", "matplotlib.pyplot", "IPython",
           "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell",
           # what a kernel imports while it starts (its debugger support, IPython's history, ...):
           # a third of a second per kernel here
           "ipykernel.debugger", "sqlite3", "pdb", "pydoc", "tornado.gen", "tornado.locks", "tornado.queues",
           "http.server", "xmlrpc.client", "xmlrpc.server", "mimetypes", "faulthandler", "IPython.extensions")
# what ipykernel sets MPLBACKEND to when it starts, if it is not set (matplotlib reads it on import)
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
# environment variables whose value is read when Python, NumPy or PyTorch start: a kernel whose
# environment differs in one of them is started new
STARTUP_PREFIXES = ("PYTHON", "IPYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "LD_", "MALLOC_", "TORCH",
                    "PYTORCH_", "CUDA_", "NUMEXPR_", "LANG", "LC_", "MPL", "HOME", "XDG_")


# nbclient's "graceful" shutdown asks the kernel to exit and polls until it has; every output
# is in by then, so the grader stops it at once
QUICK_SHUTDOWN = {"Execute.shutdown_kernel": "immediate"}


def startup_env(env: dict) -> dict:
    """The part of a kernel's environment that must equal the zygote's."""
    out = {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}
    out["MPLBACKEND"] = env.get("MPLBACKEND") or INLINE_BACKEND
    return out


def _send(sock: socket.socket, obj, fds: list[int] = ()) -> None:
    data = json.dumps(obj).encode()
    frame = struct.pack(">I", len(data)) + data
    if fds:
        socket.send_fds(sock, [frame], list(fds))
    else:
        sock.sendall(frame)


def _recv(sock: socket.socket, want_fds: int = 0):
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
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


# -- the launcher (the kernel spec's command) ------------------------------------------------
def _cold(argv: list[str], why: str | None) -> None:
    """Start an ordinary kernel in this process: what nbgrader's default kernel spec runs."""
    if why:
        print(f"awb warm kernel: {why}; starting a new kernel instead", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])


def handoff(path: str, request: dict) -> str:
    """Ask the zygote at ``path`` to fork the process ``request`` describes (``argv``, ``cwd``,
    ``env``), handing it this process's standard streams.
    On success this process stands in for it (forwards signals, exits with its status) and
    never returns; otherwise returns why the zygote could not."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        _send(sock, request, [0, 1, 2])
        answer, _ = _recv(sock)
    except OSError as e:
        sock.close()
        return f"the zygote at {path} cannot be reached ({e})"
    if not answer or "pid" not in answer:
        sock.close()
        return (answer or {}).get("refused", "the zygote closed the connection")

    def forward(signum, _frame):
        try:
            _send(sock, {"signal": int(signum)})
        except OSError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    while True:
        try:
            done, _ = _recv(sock)
            break
        except InterruptedError:
            continue
    status = (done or {}).get("exit", 1)
    os._exit(status if 0 <= status < 256 else 1)


def launch(argv: list[str]) -> None:
    path = os.environ.get(SOCKET_ENV)
    if not path:
        _cold(argv, f"{SOCKET_ENV} is not set")
    why = handoff(path, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)})
    _cold(argv, why)


# -- the zygote -------------------------------------------------------------------------------
def _forget_zygote(sel, conn: socket.socket) -> None:
    """In a forked process: close the zygote's listener and every launcher's connection."""
    for c in [conn, *(k.fileobj for k in sel.get_map().values() if isinstance(k.fileobj, socket.socket))]:
        c.close()
    sel.close()


def _become(req: dict, fds: list[int]) -> int:
    """In the forked process: take the launcher's streams, directory and environment, and run
    the kernel ``req`` asks for; returns its exit status."""
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    # `python -m ...` starts with its working directory first on sys.path
    sys.path[0] = os.getcwd()
    # what a new process would draw anew
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    # the grader's own modules are not the kernel's (a new kernel would not have them)
    for name in [m for m in sys.modules if m == "awb_grader" or m.startswith("awb_grader.")]:
        del sys.modules[name]
    import importlib.util

    sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *req["argv"]]
    from ipykernel import kernelapp

    argv = list(req["argv"])
    if os.environ.get("JPY_PARENT_PID"):
        # a trait whose default ipykernel read from the environment when it was imported
        # (here: in the zygote, where it was not set)
        argv.append(f"--IPKernelApp.parent_handle={int(os.environ['JPY_PARENT_PID'])}")
    kernelapp.launch_new_instance(argv=argv)
    return 0


def _run_and_exit(req: dict, fds: list[int]) -> None:
    """Run ``_become`` and leave the process with its status (never returns)."""
    code = 1
    try:
        code = _become(req, fds)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - the kernel died: say why where a kernel's stderr goes
        import traceback

        traceback.print_exc()
    finally:
        import atexit

        atexit._run_exitfuncs()
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _child(sel, conn: socket.socket, req: dict, fds: list[int]) -> None:
    """In the forked process (zygote outside a sandbox): become the kernel, then exit."""
    try:
        os.setsid()
        _forget_zygote(sel, conn)
    except BaseException:  # noqa: BLE001
        os._exit(1)
    _run_and_exit(req, fds)


def serve(path: str) -> None:
    """The zygote: preload, say ``ready`` on stdout, fork a kernel per launcher; exit when the
    owner closes our stdin (killing the kernels still running)."""
    import importlib
    import selectors

    # as ipykernel does when it starts, before matplotlib is imported (it reads the variable then)
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = INLINE_BACKEND
    # (debugpy warns on stderr when imported, as it does in every new kernel's log; here it would
    # reach the grader's terminal)
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        for name in PRELOAD:
            importlib.import_module(name)
        # the machine's network addresses, which a kernel looks up when it starts (a sixth of a
        # second here; the kernel's network namespace is the zygote's)
        from jupyter_client import localinterfaces

        localinterfaces.public_ips()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
    mine = startup_env(os.environ)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)             # a previous zygote's socket
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(16)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "owner")
    kids: dict[int, socket.socket] = {}          # kernel pid -> its launcher's connection
    print("ready", flush=True)
    try:
        while True:
            for key, _ in sel.select(timeout=0.05):
                if key.data == "owner":
                    if not os.read(sys.stdin.fileno(), 4096):
                        return
                elif key.data == "accept":
                    conn, _ = listener.accept()
                    sel.register(conn, selectors.EVENT_READ, "request")
                elif key.data == "request":
                    conn = key.fileobj
                    sel.unregister(conn)
                    try:
                        req, fds = _recv(conn, want_fds=3)
                    except (OSError, ValueError):
                        req, fds = None, []
                    if not req:
                        conn.close()
                        continue
                    theirs = startup_env(req["env"])
                    refused = None
                    if theirs != mine:
                        keys = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
                        refused = "its environment differs from the zygote's in " + ", ".join(keys)
                    elif len(fds) != 3:
                        refused = "it did not send its standard streams"
                    if refused:
                        _send(conn, {"refused": refused})
                        conn.close()
                        for fd in fds:
                            os.close(fd)
                        continue
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        _child(sel, conn, req, fds)
                    for fd in fds:
                        os.close(fd)
                    kids[pid] = conn
                    sel.register(conn, selectors.EVENT_READ, pid)
                    _send(conn, {"pid": pid})
                else:  # a launcher's connection: a signal to forward, or it went away
                    pid, conn = key.data, key.fileobj
                    try:
                        msg, _ = _recv(conn)
                    except (OSError, ValueError):
                        msg = None
                    if msg and "signal" in msg:
                        try:
                            os.killpg(pid, int(msg["signal"]))
                        except OSError:
                            pass
                        continue
                    sel.unregister(conn)
                    conn.close()
                    if kids.pop(pid, None) is not None:
                        _kill(pid)
            while kids:   # reap the kernels that ended; tell their launchers how
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = kids.pop(pid, None)
                if conn is not None:
                    sel.unregister(conn)
                    try:
                        _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                    except OSError:
                        pass
                    conn.close()
    finally:
        for pid in kids:
            _kill(pid)


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# -- the owner's side -------------------------------------------------------------------------
class Zygote:
    """A running zygote owned by this process (stopped with :meth:`stop`, or when we exit)."""

    def __init__(self, folder, meanwhile=None):
        """``meanwhile()``: run while it starts."""
        import subprocess
        from pathlib import Path

        self.folder = Path(folder)
        self.path = str(self.folder / "zygote.sock")
        program = [sys.executable, "-m", "awb_grader.devtools.warm", "serve", self.path]
        self.proc = subprocess.Popen(program, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, cwd=self.folder)
        if meanwhile:
            try:
                meanwhile()
            except BaseException:
                self.stop()
                raise
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"the warm-kernel zygote did not start (exit {self.proc.poll()})")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait()


def install_kernel_spec(spec_root) -> None:
    """``awb-warm``: the default ``python3`` kernel spec (its metadata, so the same transport
    encryption and debugger support) with the launcher as its command."""
    from pathlib import Path

    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3").to_dict()
    spec.update(argv=[sys.executable, "-m", "awb_grader.devtools.warm", "launch", "-f", "{connection_file}"],
                display_name="Python 3 (awb warm)", interrupt_mode="message")
    kdir = Path(spec_root) / "kernels" / KERNEL_NAME
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "kernel.json").write_text(json.dumps(spec, indent=1))


def warm_kernels():
    """Context manager: a zygote for this process's grading of trusted notebooks (the course's
    own: the test suite's catalog, the demo); yields the nbgrader settings (``Course.extra``)
    that make nbgrader start its kernels from it, unsandboxed."""
    import contextlib
    import shutil
    import tempfile

    from ..core.course import ensure_kernel_path

    @contextlib.contextmanager
    def manager():
        ensure_kernel_path()            # the kernels' PYTHONPATH, before the zygote starts
        folder = tempfile.mkdtemp(prefix="awb-warm-", dir="/tmp" if os.path.isdir("/tmp") else None)
        saved = {k: os.environ.get(k) for k in (SOCKET_ENV, "JUPYTER_PATH")}
        zygote = None
        try:
            install_kernel_spec(os.path.join(folder, "spec"))
            paths = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
            os.environ["JUPYTER_PATH"] = os.pathsep.join([os.path.join(folder, "spec"), *paths])
            zygote = Zygote(folder)
            os.environ[SOCKET_ENV] = zygote.path
            # the course's own notebooks (trusted code): unsandboxed, and no outside verdict
            yield {"Execute.kernel_name": KERNEL_NAME, "SandboxGuard.trusted_code": True, **QUICK_SHUTDOWN}
        finally:
            if zygote is not None:
                zygote.stop()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            shutil.rmtree(folder, ignore_errors=True)

    return manager()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ["launch"]:
        launch(sys.argv[2:])
    else:
        sys.exit("usage: python -m awb_grader.devtools.warm serve SOCKET | launch -f CONNECTION_FILE")
