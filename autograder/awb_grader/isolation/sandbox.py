"""Run student code in a sandbox while nbgrader grades it.

nbgrader starts one Jupyter kernel per submission. Here that kernel is a *kernel spec* of
ours (``awb-sandbox``) whose command is this module's launcher: it wraps ``ipykernel`` in

* **bubblewrap** (``bwrap``, Debian package ``bubblewrap``): no network (own network
  namespace), own PID/IPC/UTS namespaces, a file system made only of read-only system and
  Python directories, what the exercise provides of the workbook's helper package
  (``provided.py``), and for the outside verdict's replay process its own two files (never the
  hidden checks, which run only in the grader's process); the student's own
  working directory is the only writable place (plus a private ``/tmp``). ``solutions/``, the
  gradebook, the course root and other students' files are simply not there;
* an **unprivileged user** (when the grader runs as root: a uid of its own per grading worker,
  drawn at random for each grading run, :func:`draw_uids`), so that
* **resource limits** (``prlimit``) hold: address space (memory), processes (fork bombs),
  CPU seconds, file size, no core dumps; and ``timeout -s KILL`` bounds the kernel's whole
  life (a notebook that ignores interrupts still ends).

The kernel talks to nbgrader over Unix sockets (``KernelManager.transport = "ipc"``) in a
short folder private to the grading worker (a socket path may not exceed 107 bytes, see
:data:`SUN_PATH_MAX`), since it has no network, not even loopback.
nbgrader's own per-cell time limit (``Execute.timeout``) interrupts a cell that runs too long,
and :class:`LimitOutputBytes` truncates huge outputs before they reach the autograded
notebook, the feedback and the gradebook.

Where ``bwrap`` is missing (or cannot create namespaces), the Landlock tier confines the kernel
instead (``isolation/tiers.py``, ``landlock.py``); where no tier can run, grading is refused unless
the grader says the grades may be unprotected (``tiers.sandbox_mode``); then it runs with the resource
limits only, and ``tiers.configure`` prints a loud warning: student code can then read files and
reach the network with the grader's permissions. The kernel spec, the transport and the autograde
steps are nbgrader settings, in the course's config (``core/config.py``: ``configure``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.course import AUTOGRADER, REPO

KERNEL_NAME = "awb-sandbox"
WARNING = ("WARNING: no isolation tier can run here (neither bubblewrap nor Landlock + seccomp): student "
           "code runs WITHOUT a sandbox (it can read files, e.g. solutions/ and the gradebook, and reach the "
           "network with the grader's permissions). Only memory/CPU/time limits apply. Install bubblewrap "
           "where namespaces are allowed, or landlockpy and pyseccomp on Linux 5.13+")


@dataclass
class Limits:
    memory_mb: int = 4096          # address space of the kernel (torch needs ~2 GB of it just to import)
    notebook_s: int = 900          # whole-kernel wall-clock limit (killed past it)
    nproc: int = 256               # processes + threads of the sandbox user
    fsize_mb: int = 256            # largest file the kernel may write
    cell_timeout: int = 60         # per cell, enforced by nbgrader (Execute.timeout)
    output_bytes: int = 100_000    # per cell output kept in the autograded notebook


# -- detection -------------------------------------------------------------------------------
_BWRAP_OK: bool | None = None


def bwrap_works() -> bool:
    """Is bubblewrap installed and able to create the namespaces we need here?"""
    global _BWRAP_OK
    if _BWRAP_OK is None:
        exe = shutil.which("bwrap")
        if not exe:
            _BWRAP_OK = False
        else:
            cmd = [exe, "--unshare-net", "--unshare-pid", "--die-with-parent", *_system_binds(),
                   "--proc", "/proc", "--dev", "/dev", "true"]
            if os.geteuid() != 0:
                cmd.insert(1, "--unshare-user")
            try:
                _BWRAP_OK = subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                _BWRAP_OK = False
    return _BWRAP_OK


# -- the refusal rule: a sandbox of some isolation tier, or only grades said to be unprotected ----
UNPROTECTED_ENV = "AWB_UNPROTECTED"
REFUSAL = ("refusing to grade: no isolation tier can run here ({why}), so student code would run with the "
           "grader's permissions (it could read solutions/ and the gradebook, and change its own grade). "
           "Install bubblewrap (apt-get install bubblewrap) where namespaces are allowed, or landlockpy and "
           "pyseccomp on Linux 5.13+ (the Landlock tier), or grade anyway with grades that are NOT protected: "
           "`cohort --unprotected`, `nbgrader autograde ... --SandboxGuard.unprotected=True`, or AWB_UNPROTECTED=1.")
UNPROTECTED_NOTE = ("UNPROTECTED: graded without the sandbox (no isolation tier could run): "
                    "this grade is not protected")


class Refused(RuntimeError):
    """Grading refused: no sandbox can run and nobody said the grades may be unprotected."""


# -- configuration of a grading run: ``tiers.configure`` (the tier, then these limits) -------------
# A Unix socket's path must fit in sockaddr_un.sun_path (108 bytes with the final NUL); zmq refuses
# longer ipc paths. The kernel's sockets therefore never live under the course root, whose path
# is the instructor's choice (a pytest-xdist tmp_path was enough to pass the limit: nbclient
# failed at once, nbgrader deleted the half-made autograded folder, and the starting kernel then
# found its working directory gone).
SUN_PATH_MAX = 107


def short_socket_root(base: str | None = None) -> Path:
    """A new private folder for kernel sockets, in a short temporary directory."""
    import tempfile

    base = base or tempfile.gettempdir()
    if len(base) > 40 or not os.path.isdir(base):
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="awb-", dir=base))


def worker_environment(worker: int, runtime_dir: Path, sockets: Path | None = None) -> dict:
    """Per grading worker: its own Jupyter runtime directory (connection files, the kernels'
    log) and its own folder for the kernel's Unix sockets (``sockets``, short: see
    SUN_PATH_MAX; a kernel sees only its own), and its own sandbox uid, the run's base plus
    ``worker`` (so one submission's fork bomb does not eat another worker's process quota)."""
    runtime_dir = Path(runtime_dir)
    runtime_dir.mkdir(parents=True, exist_ok=True)
    sockets = Path(sockets) if sockets is not None else runtime_dir
    sockets.mkdir(parents=True, exist_ok=True)
    os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime_dir)
    os.environ[UID_ENV] = str(claim_uid(run_uid_base() + worker))
    os.environ["AWB_PRIVATE_RUNTIME"] = str(sockets.resolve())
    os.environ["AWB_KERNEL_LOG"] = str(runtime_dir.resolve() / "kernel.log")
    # the kernel's sockets: a folder of this worker's that the sandbox binds (kernels of one
    # worker run one after the other); returned as nbgrader settings for Course.extra
    ip = sockets.resolve() / "sock" / "kernel-ipc"
    if len(str(ip)) + 4 > SUN_PATH_MAX:      # jupyter_client appends "-<port>"
        raise RuntimeError(f"kernel socket path {ip} is longer than a Unix socket allows ({SUN_PATH_MAX} bytes): "
                           "use a shorter folder for the sockets")
    return {"KernelManager.ip": str(ip)}


# -- the kernel launcher ------------------------------------------------------------------------
_ETC = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group", "nsswitch.conf",
        "alternatives", "fonts", "ssl/certs", "mime.types", "matplotlibrc"]


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), top]
        elif p.is_dir():
            args += ["--ro-bind", top, top]
    for name in _ETC:
        p = Path("/etc") / name
        if p.exists():
            args += ["--ro-bind", str(p), str(p)]
    return args


def _ancestors(paths: list[Path]) -> list[str]:
    """Parent directories to create world-traversable (bwrap creates them 0700 otherwise)."""
    out: list[str] = []
    for p in paths:
        for parent in reversed(p.parents):
            s = str(parent)
            if s not in ("/", "/tmp") and not s.startswith(("/usr", "/proc", "/dev")) and s not in out:
                out.append(s)
    return out


def kernel_command(connection_file: str, cwd: str, env: dict | None = None) -> list[str]:
    """The full command line that starts one sandboxed kernel (documented, and tested)."""
    return sandbox_command([sys.executable, "-m", "ipykernel_launcher", "-f", connection_file], cwd,
                           rw=[Path(connection_file).parent], env=env)


def kernel_env(env: dict | None = None) -> dict:
    """The whole environment of sandboxed code: a few variables of the grader's, nothing else."""
    env = dict(os.environ if env is None else env)
    kenv = {k: v for k, v in env.items()
            if k in ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "MPLBACKEND", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                     "NBGRADER_EXECUTION", "PYTHONHASHSEED", "AWB_SMOKE", "TORCH_NUM_THREADS")
            or (k.startswith("AWB_") and not k.startswith(("AWB_DB", "AWB_SANDBOX", "AWB_COURSE", "AWB_PROVIDED",
                                                            "AWB_ZYGOTE")))}
    kenv.update({"HOME": "/tmp", "MPLCONFIGDIR": "/tmp/mpl", "IPYTHONDIR": "/tmp/ipython",
                 "PYTHONDONTWRITEBYTECODE": "1"})
    return kenv


def limits_of(env: dict | None = None) -> dict:
    """The sandbox's limits, as configure() left them in the environment."""
    env = os.environ if env is None else env
    return {"memory_mb": int(env.get("AWB_SANDBOX_MEM_MB", "4096")),
            "life_s": int(env.get("AWB_SANDBOX_NOTEBOOK_S", "900")),
            "nproc": int(env.get("AWB_SANDBOX_NPROC", "256")),
            "fsize_mb": int(env.get("AWB_SANDBOX_FSIZE_MB", "256")),
            "uid": int(env.get(UID_ENV) or own_uid())}


# -- the sandbox's uid (grading as root) ----------------------------------------------------------
# The kernel counts a uid's processes and threads (RLIMIT_NPROC) across the whole machine, every
# container of it included (Docker gives no container a user namespace of its own). With one fixed
# uid, a fork bomb or a busy kernel of another grading run (another container of the platform, a
# second array task on the node, a second instructor's command, another worker of the test suite)
# used up this run's process limit: its kernels could not start, and every student it graded got 0
# and "nbgrader could not grade it". Each run therefore draws its uids at random from a range no
# account uses, so that runs on one machine practically never share one (2**30 uids to draw from).
# An instructor with a reserved range sets its first uid in AWB_SANDBOX_UID_BASE.
UID_ENV, UID_BASE_ENV = "AWB_SANDBOX_UID", "AWB_SANDBOX_UID_BASE"
UID_RANGE = (2**30, 2**31 - 2**16)       # where the uid map allows (Docker's default: all 2**32)
UID_RANGE_SMALL = (20_000, 65_534)       # inside a user namespace of 65,536 ids (rootless, k8s)


def _mapped(kind: str) -> list[tuple[int, int]]:
    """The ids this process's user namespace maps ([first, last] pairs, /proc/self/uid_map)."""
    try:
        rows = Path(f"/proc/self/{kind}_map").read_text().split("\n")
    except OSError:
        return [(0, 2**32 - 2)]
    return [(int(r.split()[0]), int(r.split()[0]) + int(r.split()[2]) - 1) for r in rows if r.strip()]


def _taken() -> set[int]:
    """Ids an account, a group or a process here has: never a sandbox's."""
    import grp
    import pwd

    import psutil

    ids = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()} | {65534, 65535}
    for p in psutil.process_iter(["uids"]):
        if p.info["uids"]:
            ids.update(p.info["uids"])
    return ids


def draw_uids(n: int = 1) -> int:
    """The first of ``n`` consecutive ids, drawn at random, that this machine's user namespace
    maps (as uid and gid) and that no account, group or running process has."""
    import random

    pick = random.SystemRandom()
    maps = [(max(a, c), min(b, d)) for a, b in _mapped("uid") for c, d in _mapped("gid")]
    for low, high in (UID_RANGE, UID_RANGE_SMALL):
        spans = [(max(a, low), min(b, high) - n + 1) for a, b in maps if min(b, high) - max(a, low) + 1 >= n]
        if spans:
            break
    else:
        raise RuntimeError(f"no {n} consecutive uids are mapped here for the sandbox (/proc/self/uid_map)")
    taken = _taken()
    for _ in range(1000):
        first, last = pick.choice(spans)
        base = pick.randint(first, last)
        if not taken.intersection(range(base, base + n)):
            return base
    raise RuntimeError("no free uids for the sandbox: every draw was taken")


def run_uid_base(n: int = 1) -> int:
    """This grading run's first sandbox uid (worker ``k`` gets it plus ``k``): the instructor's
    AWB_SANDBOX_UID_BASE, else drawn once (:func:`draw_uids`) and kept in the environment, which
    the run's workers and kernels inherit."""
    if not os.environ.get(UID_BASE_ENV):
        os.environ[UID_BASE_ENV] = str(draw_uids(n))
    return int(os.environ[UID_BASE_ENV])


def own_uid() -> int:
    """The sandbox uid of this process's kernels (AWB_SANDBOX_UID; a grading worker sets its own:
    :func:`worker_environment`), the run's base where none is set; as root, claimed for this process
    (:func:`claim_uid`), so a uid inherited from another grader's environment is not shared."""
    uid = claim_uid(int(os.environ.get(UID_ENV) or run_uid_base()))
    os.environ[UID_ENV] = str(uid)
    return uid


# A sandbox's uid belongs to one grading process at a time: before each sandbox starts, everything
# running under its uid is killed (``landlock.reap``), so two processes sharing one kill each other's
# kernels (seen: two Slurm array tasks on one node, or two runs started from one environment,
# inheriting one AWB_SANDBOX_UID_BASE: honest students flagged with "the kernel stopped answering"
# and scored 0). Each grading process therefore holds a lock (flock) on its uid for its life, in a
# folder every grader of the machine shares; a uid another live process holds is not taken.
_CLAIMED: dict[int, int] = {}          # uid -> the open lock file that holds it (closed when the process ends)
UID_LOCKS = ("/run/lock", "/var/lock", "/tmp")


def _uid_lock_dir() -> Path | None:
    """The machine's folder of sandbox uid locks (root's own, no one else may write it)."""
    import stat

    for base in UID_LOCKS:
        folder = Path(base) / "awb-sandbox-uids"
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            st = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
            return folder
    return None


def claim_uid(uid: int) -> int:
    """``uid`` for this process's sandboxes, held by a lock for the process's life; where another live
    process holds it (its own run, or another run that inherited the same base), a newly drawn uid
    (:func:`draw_uids`), held the same way. Not as root (the sandbox then runs as the grader's own
    uid), or without a folder for the locks: ``uid`` unclaimed."""
    import fcntl

    folder = _uid_lock_dir() if os.geteuid() == 0 else None
    if folder is None:
        return uid
    for _ in range(100):
        if uid in _CLAIMED:
            return uid
        path = folder / str(uid)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            uid = draw_uids(1)
            continue
        _CLAIMED[uid] = fd
        return uid
    raise RuntimeError(f"no sandbox uid could be claimed in {folder}: every draw was held by another grader")


def _readonly(cwd: str | None = None, extra: list[Path] = ()) -> list[Path]:
    """What sandboxed code may read besides the system: Python, what the exercise graded in
    ``cwd`` provides of the workbook's package (``provided.py``: its import cell's modules, its
    checks, and what they import; the whole package where the exercise is not known), and
    ``extra`` (the replay's own files: :data:`REPLAY_FILES`). Never solutions/, the gradebook,
    other students' files, nor anything of the hidden checks (``awb_grader/hidden/``: they run
    only in the grader's process)."""
    from .provided import assignment_of, provided_files

    assignment = assignment_of(cwd) if cwd else None
    package = provided_files(assignment) if assignment else [REPO / "attention_workbook"]
    ro = [Path(sys.prefix), Path(sys.base_prefix), *package, *extra]
    return [p for p in ro if p.exists() and not str(p).startswith("/usr")]


def _bwrap(cwd: str, ro: list[Path], rw: list[Path]) -> list[str]:
    """bubblewrap's part of a sandbox command: namespaces, the system read-only, ``ro``
    read-only, ``rw`` writable, a private /tmp, working directory ``cwd``."""
    cmd = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", *_system_binds()]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    for d in _ancestors(ro + rw):
        cmd += ["--perms", "0755", "--dir", d]
    for p in ro:
        cmd += ["--ro-bind", str(p), str(p)]
    for p in rw:
        cmd += ["--bind", str(p), str(p)]
    cmd += ["--chdir", str(cwd)]
    if os.geteuid() != 0:
        cmd.insert(1, "--unshare-user")
    return cmd


def sandbox_command(program: list[str], cwd: str, rw: list[Path] = (), env: dict | None = None,
                    ro: list[Path] = ()) -> list[str]:
    """``program`` run in the sandbox with ``cwd`` (and ``rw``) as the only writable folders;
    ``ro``: files it may read besides what :func:`_readonly` gives every sandbox."""
    env = dict(os.environ if env is None else env)
    mode = env.get("AWB_SANDBOX_MODE", "bwrap")
    lim = limits_of(env)
    kenv = kernel_env(env)
    limits = ["prlimit", f"--as={lim['memory_mb'] * 2**20}", f"--cpu={lim['life_s']}",
              f"--fsize={lim['fsize_mb'] * 2**20}", "--core=0"]
    if mode == "bwrap":
        # counts every process of the (sandbox) user: only meaningful with a uid of its own
        limits.insert(2, f"--nproc={lim['nproc']}")
    if mode == "landlock":
        from . import landlock

        private = Path(env.get("AWB_PRIVATE_RUNTIME") or _private_runtime())
        return landlock.command(program, cwd, list(map(Path, rw)), env, kenv, lim, limits,
                                _readonly(cwd, list(ro)), private, system=landlock.system_paths(_ETC))
    inner = [*limits, "env", "-i", *(f"{k}={v}" for k, v in sorted(kenv.items())),
             *program]
    if mode != "bwrap":
        return ["timeout", "-s", "KILL", str(lim["life_s"]), *inner]

    cmd = ["timeout", "-s", "KILL", str(lim["life_s"]),
           *_bwrap(cwd, _readonly(cwd, list(ro)), [Path(cwd), *map(Path, rw)])]
    if os.geteuid() == 0:
        # bwrap as root (it needs root to bind /root/...); the kernel then drops to an
        # unprivileged uid with no capabilities, so that the process limit is enforced
        uid = lim["uid"]
        cmd += ["--cap-add", "CAP_SETUID,CAP_SETGID",
                "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all"]
    return cmd + inner


def _private_runtime() -> Path:
    """This process's private folder (``AWB_PRIVATE_RUNTIME``; ``core.config.private_runtime``
    makes it in a grading process): made here, short, where a sandbox starts without one."""
    folder = short_socket_root()
    (folder / "sock").mkdir(parents=True, exist_ok=True)
    os.environ["AWB_PRIVATE_RUNTIME"] = str(folder)
    return folder


def prepare_run(cwd: str, rw: list[Path] = (), env: dict | None = None, warm: bool = False) -> None:
    """Before a sandbox starts as root: nothing of an earlier one of this uid is left running,
    and its folders (``cwd``, ``rw`` and its private temporary folder, emptied) belong to its uid.
    Bubblewrap's cold path: ``cwd`` only (the rest is its own); a zygote's child (``warm``) in either
    tier: all of it, as the Landlock tier's. Not as root: the private temporary folder is emptied."""
    env = os.environ if env is None else env
    mode = env.get("AWB_SANDBOX_MODE", "bwrap")
    if mode in ("bwrap", "landlock") and (warm or mode == "landlock"):
        private = Path(env.get("AWB_PRIVATE_RUNTIME") or _private_runtime())
        _empty_folder(private / "sock" / "tmp")       # nothing one submission left there reaches the next
    if os.geteuid() != 0:
        return
    uid = limits_of(env)["uid"]
    if mode == "bwrap" and not warm:
        chown_tree(Path(cwd), uid)
    elif mode in ("bwrap", "landlock"):
        from . import landlock

        private = Path(env.get("AWB_PRIVATE_RUNTIME") or _private_runtime())
        (private / "sock" / "tmp").mkdir(parents=True, exist_ok=True)
        landlock.reap(uid)
        for folder in (Path(cwd), *map(Path, rw), private / "sock"):      # sock/tmp: its private /tmp
            chown_tree(folder, uid)
            landlock.passable(folder)
        landlock.unreadable(Path(cwd), private / "sock")


def chown_tree(path: Path, uid: int) -> None:
    os.chown(path, uid, uid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)
            except OSError:
                pass


def _empty_folder(folder: Path) -> None:
    """Empty ``folder`` (made if missing), keeping the folder itself.
    What a previous kernel left there (it was writable to it: a symlink in place of the
    connection file, say) is removed, never followed."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)


def launch(argv: list[str], decided: str | None = None) -> None:
    """Start the kernel ``argv`` (``-f CONNECTION_FILE``) names, in the sandbox of the tier this
    process's environment says (``isolation/launcher.py``, the kernel spec's command, decides it
    first where no grading run did: ``decided``)."""
    conn = argv[argv.index("-f") + 1]
    try:
        cwd = os.getcwd()
    except FileNotFoundError:  # started from a folder that no longer exists: say so, clearly
        sys.exit("awb sandbox: the kernel's working directory no longer exists")
    private = os.environ.get("AWB_PRIVATE_RUNTIME")
    if private:
        # the sandbox sees only this folder: the kernel's own sockets and connection file
        sock = Path(private) / "sock"
        _empty_folder(sock)
        copy = sock / "connection.json"
        shutil.copyfile(conn, copy)
        conn = str(copy)
    else:
        print("awb sandbox: AWB_PRIVATE_RUNTIME not set; binding the connection file's folder", file=sys.stderr)
    if os.geteuid() == 0 and os.environ.get("AWB_SANDBOX_MODE", "bwrap") in ("bwrap", "landlock"):
        uid = limits_of()["uid"]
        prepare_run(cwd, [Path(conn).parent], warm=bool(os.environ.get(zygote_env())))   # its folder: writable
        os.chown(conn, uid, uid)                     # the kernel must read its connection file
        os.chown(Path(conn).parent, uid, uid)        # and create its sockets next to it
    if private:
        # the kernel's own chatter ("NOTE: When using the `ipython kernel` entry point...") goes
        # to a log in the worker's runtime folder instead of the grader's terminal
        log = os.open(os.environ.get("AWB_KERNEL_LOG") or Path(private) / "kernel.log",
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
    if decided:
        print(f"awb sandbox: a kernel started outside a grading run: the {decided} tier", file=sys.stderr, flush=True)
    if os.environ.get(zygote_env()):
        why = _warm_kernel(conn, cwd)          # returns only when the zygote could not start it
        print(f"awb sandbox: a new kernel instead of the zygote's: {why}", file=sys.stderr, flush=True)
    blocked = cold_blocked()
    if blocked:
        # no grading process's zygote (a kernel started outside a grading run), or it would not start
        # this kernel, and a new process cannot start as the sandbox's uid: this launcher forks a
        # zygote of its own, whose child opens what that uid cannot reach before its uid changes
        try:
            from . import zygote

            zygote.preload()
            if zygote_for(cwd, fork=True) is not None:
                why = _warm_kernel(conn, cwd)
                blocked = f"{blocked}; a zygote of the launcher's own could not start it either ({why})"
        except Exception as e:  # noqa: BLE001 - the reason below says why no kernel starts
            blocked = f"{blocked}; a zygote of the launcher's own could not start ({type(e).__name__}: {e})"
    if blocked:
        sys.exit(f"awb sandbox: no kernel can start: {blocked}")
    cmd = kernel_command(conn, cwd)
    os.execvp(cmd[0], cmd)


def zygote_env() -> str:
    from .zygote import SOCKET_ENV

    return SOCKET_ENV


def _warm_kernel(conn: str, cwd: str) -> str:
    """Ask this grading process's zygote for the kernel (its plan: :func:`child_plan`); on success
    this launcher stands in for it and never returns; otherwise returns why not."""
    from . import zygote

    path, token = os.environ.get(zygote.SOCKET_ENV, ""), os.environ.get(zygote.TOKEN_ENV, "")
    try:
        plan, env = child_plan(cwd, rw=[Path(conn).parent])
        child = zygote.Child.start(path, token, "kernel", ["-f", conn], cwd, _with_added(env), plan, [0, 1, 2],
                                   preload_for())
    except (zygote.Refused, OSError, RuntimeError, ValueError) as e:
        return str(e)
    zygote.stand_in(child)
    return "the kernel's stand-in returned"


def preload_for() -> list[str]:
    """What the zygote imports before forking a child of the exercise being graded, beyond what it
    always has: Triton, where the exercise provides ``attention_workbook.tritonenv`` (10, 11); PyTorch's
    compiler stack, where the exercise's checks step an optimizer (08, 11: its first step imports it)."""
    from .provided import PROVIDED_ENV
    from .zygote import TRAINING, TRITON

    given = os.environ.get(PROVIDED_ENV, "")
    return [*(TRITON if "tritonenv.py" in given else ()), *(TRAINING if _trains(given) else ())]


@functools.lru_cache(maxsize=16)
def _trains(provided: str) -> bool:
    """Does a checks module among the ``provided`` files (``$AWB_PROVIDED``) use ``torch.optim``?"""
    for p in provided.split(os.pathsep)[1:]:
        if "/checks/" in p and p.endswith(".py"):
            try:
                if "torch.optim" in Path(p).read_text(errors="replace"):
                    return True
            except OSError:
                pass
    return False


def _with_added(env: dict) -> dict:
    """What the zygote's preload decided (Triton's interpreter), as its owner recorded it."""
    import json

    return {**env, **json.loads(os.environ.get("AWB_ZYGOTE_ADDED") or "{}")}


# -- the zygote's children (isolation/zygote.py) ---------------------------------------------------
def child_plan(cwd: str, rw: list[Path] = (), ro: list[Path] = (), env: dict | None = None) -> tuple[dict, dict]:
    """(plan, environment) of a zygote's child running in ``cwd``: what ``confine.enter`` applies to
    it before the student's first line, for this run's tier (``AWB_SANDBOX_MODE``):

    * ``bwrap`` (the zygote in its bubblewrap sandbox) and ``landlock``: as root a uid of its own,
      resource limits (memory, CPU, file size, no core, processes), Landlock (``cwd``, ``rw`` and
      its private temporary folder writable; the system, Python and what the exercise provides,
      plus ``ro``, readable), the seccomp filter;
    * ``limits`` (grades said to be unprotected): the resource limits only;
    * anything else (no grading run configured: a test's own replay): nothing."""
    env = dict(os.environ if env is None else env)
    mode = env.get("AWB_SANDBOX_MODE", "off")
    if mode not in ("bwrap", "landlock", "limits"):
        return {}, {k: v for k, v in env.items() if not k.startswith("AWB_ZYGOTE")}
    lim = limits_of(env)
    kenv = kernel_env(env)
    rlimits = {"AS": lim["memory_mb"] * 2**20, "CPU": lim["life_s"], "FSIZE": lim["fsize_mb"] * 2**20, "CORE": 0}
    plan: dict = {"rlimits": rlimits, "life_s": lim["life_s"]}
    if mode == "limits":
        return plan, kenv
    from . import landlock

    private = Path(env.get("AWB_PRIVATE_RUNTIME") or _private_runtime())
    rules, kenv = landlock.confinement(cwd, list(map(Path, rw)), kenv, _readonly(cwd, list(ro)), private,
                                       landlock.system_paths(_ETC))
    rlimits["NPROC"] = landlock.nproc_limit(lim)
    plan.update(landlock=rules, seccomp=True, uid=lim["uid"] if os.geteuid() == 0 else None)
    return plan, kenv


def cold_blocked(env: dict | None = None) -> str | None:
    """Why a new process cannot start as the sandbox's uid here (None: it can). In the Landlock tier
    as root the sandbox's uid must reach the interpreter's files, which it cannot where Python lies
    under a folder closed to other users (pyenv or conda in a 0700 ``/root``): a zygote's child
    opens that folder before its uid changes (``confine.open_unreachable``) and is not concerned; a
    new process is. (Bubblewrap binds the interpreter into a folder of its own.)"""
    env = os.environ if env is None else env
    if env.get("AWB_SANDBOX_MODE") != "landlock" or os.geteuid() != 0:
        return None
    from .confine import unreachable

    uid = limits_of(env)["uid"]
    for path in dict.fromkeys([os.path.realpath(sys.executable), sys.prefix, sys.base_prefix]):
        top = unreachable(path, uid)
        if top:
            return (f"the sandbox's uid cannot reach {path}: {Path(top).parent} is closed to other users "
                    f"(use a Python outside it, or bubblewrap)")
    return None


def zygote_for(cwd, env: dict | None = None, fork: bool = False):
    """This process's zygote (``zygote.ensure``), ready to serve a child in ``cwd``: started (again)
    where none runs, it died, or the tier, the grading folder it binds (bubblewrap tier: the folder
    above ``cwd``, ``autograded/`` for ``autograded/<student>/<exercise>``) or a variable read at
    start changed. None where no zygote serves the tier (``zygote.cold_reason``): each kernel and
    replay then starts as a new process. ``fork``: a new zygote outside bubblewrap is forked from this
    process (a platform's grading process, which has imported what it preloads: ``zygote.preload``)."""
    from . import zygote

    env = dict(os.environ if env is None else env)
    mode = env.get("AWB_SANDBOX_MODE", "off")
    if zygote.cold_reason(mode):
        return None
    _plan, child_env = child_plan(str(cwd), env=env)
    root = None
    if mode == "bwrap":
        here = Path(cwd).resolve()
        root = zygote.current_root()
        if root is None or not here.is_relative_to(root):
            root = str(next((up for up in (here.parent.parent, here.parent, here) if len(up.parts) > 2
                             and str(up) not in ("/tmp", "/var/tmp", "/home", "/root", "/work")), here))
    private = Path(env.get("AWB_PRIVATE_RUNTIME") or _private_runtime())
    return zygote.ensure(mode, root, child_env, private / "zygote",
                         zygote_wrapper(Path(root), env) if mode == "bwrap" else [], fork=fork)


def zygote_wrapper(root: Path, env: dict | None = None) -> list[str]:
    """The bubblewrap tier's sandbox for a zygote: its own network (none), PID, IPC and UTS
    namespaces; the system, Python, the helper package and the zygote's own modules read-only;
    ``root`` (the grading folders its kernels run in) and this process's private folder
    (sockets, views, temporary folders) writable; as root it keeps only what it needs to give
    each child a uid of its own (CAP_SETUID, CAP_SETGID) and to end them (CAP_KILL)."""
    env = os.environ if env is None else env
    private = Path(env.get("AWB_PRIVATE_RUNTIME") or _private_runtime())
    grader = AUTOGRADER / "awb_grader"
    ro = [Path(sys.prefix), Path(sys.base_prefix), REPO / "attention_workbook", grader / "__init__.py",
          grader / "isolation", *REPLAY_FILES]
    ro = [p for p in dict.fromkeys(ro) if p.exists() and not str(p).startswith("/usr")]
    cmd = _bwrap(str(private), ro, [Path(root), private])
    if os.geteuid() == 0:
        cmd += ["--cap-add", "CAP_SETUID,CAP_SETGID,CAP_KILL"]
    return cmd


REPLAY = [sys.executable, "-m", "awb_grader.replay"]
# what the replay process reads of the grader (the kernel reads nothing of it)
REPLAY_FILES = [AUTOGRADER / "awb_grader" / name for name in ("__init__.py", "replay.py", "replay_support.py")]


if __name__ == "__main__":          # (kernel specs written before isolation/launcher.py)
    launch(sys.argv[1:])
