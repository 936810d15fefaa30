"""The Landlock ruleset of the Landlock tier (PyPI's ``landlockpy``, the kernel's Landlock ABI
1 and later, best effort: rights a kernel lacks are dropped, and said in the tier's name).

What sandboxed code may do with files, once :func:`restrict` ran (inherited by every process
it starts, and irrevocable):

* **read and execute**: the system (``/usr`` and the ``/bin``, ``/lib*`` folders), a few files
  of ``/etc`` (the list bubblewrap binds, ``sandbox._ETC``), Python (the environment and its base
  interpreter), ``/proc`` (what Landlock lets it read of other processes: not their memory, not
  their environment), and of the course only what the exercise provides (``provided.py``), seen
  through a **view**: a folder of symbolic links to exactly those files, put first on the
  sandbox's ``PYTHONPATH``, so a module the exercise does not provide is not found (the same
  ``ModuleNotFoundError`` as under bubblewrap) and its file cannot be opened anyway;
* **write**: the submission's own folder, its private temporary folder and its socket folder;
  ``/dev/null``, ``/dev/zero``, ``/dev/full``;
* nothing else: ``solutions/``, the gradebook, the course root, other students' folders, the
  platform's results file and the grader's own files are denied (``PermissionError``).

With ABI 4 and later no TCP port may be bound or connected to (the seccomp filter already
refuses every socket but Unix ones); with ABI 6 and later the sandbox may neither signal nor
reach the abstract Unix sockets of any process outside it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

DEVICES_RW = ("/dev/null", "/dev/zero", "/dev/full")
DEVICES_RO = ("/dev/urandom", "/dev/random")


def abi() -> int:
    """The kernel's Landlock ABI version (0: no Landlock, or no binding installed)."""
    try:
        import landlockpy
    except ImportError:
        return 0
    return landlockpy.abi_version()


def system_paths(etc: list[str]) -> list[str]:
    """What every sandbox reads: the system folders and the pieces of /etc bubblewrap binds (``etc``)."""
    out = ["/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.isdir(top) and not os.path.islink(top):
            out.append(top)
    out += [f"/etc/{name}" for name in etc if os.path.exists(f"/etc/{name}")]
    return out


def view(files: list[Path], root: Path, folder: Path) -> Path:
    """A folder of symbolic links to ``files`` (files or folders under ``root``), at their paths
    relative to ``root``: made once per set of files (its name is their hash), never changed."""
    rels = sorted(str(Path(f).resolve().relative_to(root)) for f in files)
    name = "view-" + hashlib.sha256("\n".join(rels).encode()).hexdigest()[:12]
    dest = Path(folder) / name
    if dest.is_dir():
        return dest
    tmp = Path(folder) / f".{name}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for rel in rels:
        link = tmp / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(root / rel, link)
    tmp.chmod(0o755)
    try:
        os.rename(tmp, dest)
    except OSError:            # another worker made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def spec(read: list[str], read_files: list[str], write: list[str]) -> dict:
    """What :func:`restrict` allows (plain data: it crosses an ``exec`` on the command line)."""
    return {"read": sorted(set(read)), "read_files": sorted(set(read_files)), "write": sorted(set(write))}


def ruleset(rules: dict):
    """The Landlock ruleset of ``rules`` (:func:`spec`), built but not enforced: every path is
    opened now, by this process as it is (the grader's uid: it may reach an interpreter that the
    sandbox's uid will not), and enforced later by ``.restrict()``."""
    from landlockpy import AccessFS, AccessNet, Ruleset, Scope

    read_dir = AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.EXECUTE
    read_file = AccessFS.READ_FILE | AccessFS.EXECUTE
    everything = ~AccessFS(0)
    rs = Ruleset(handled_fs=everything, handled_net=AccessNet.BIND_TCP | AccessNet.CONNECT_TCP
                 | AccessNet.BIND_UDP | AccessNet.CONNECT_SEND_UDP,
                 scoped=Scope.SIGNAL | Scope.ABSTRACT_UNIX_SOCKET)
    rs.__enter__()
    try:
        for p in [*rules["read"], "/proc"]:
            if os.path.exists(p):
                rs.allow_path(p, read_dir if os.path.isdir(p) else read_file)
        for p in rules["read_files"]:
            if os.path.exists(p):
                rs.allow_path(p, read_file)
        for p in DEVICES_RO:
            if os.path.exists(p):
                rs.allow_path(p, AccessFS.READ_FILE)
        for p in DEVICES_RW:
            if os.path.exists(p):
                rs.allow_path(p, AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV)
        for p in rules["write"]:
            rs.allow_path(p, everything)
    except BaseException:
        rs.close()
        raise
    return rs


def restrict(rules: dict) -> int:
    """Enforce ``rules`` (:func:`spec`) on this process and all it will start; returns the ABI."""
    rs = ruleset(rules)
    try:
        rs.restrict()
        return rs.abi_version
    finally:
        rs.close()


# -- the command -------------------------------------------------------------------------------
# How many tasks the kernel counts for this process's uid, found with the kernel's own rule: a
# child whose RLIMIT_NPROC is L may fork only while its uid has fewer than L tasks (Linux:
# copy_process). A binary search on L, in a small Python of its own (two processes of the uid,
# itself and its child, left out of the count).
_COUNT = """
import os, resource
hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
def may_fork(limit):
    pid = os.fork()
    if pid == 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, hard))
        try:
            kid = os.fork()
        except OSError:
            os._exit(1)
        if kid == 0:
            os._exit(0)
        os.waitpid(kid, 0)
        os._exit(0)
    return os.waitpid(pid, 0)[1] == 0
low, high = 1, 1 << 22 if hard == resource.RLIM_INFINITY else hard
if not may_fork(high):
    print(-1)
else:
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if may_fork(mid) else (mid + 1, high)
    print(low - 3)
"""


def tasks_of_mine() -> int:
    """The processes and threads the kernel counts for the grader's uid now (what RLIMIT_NPROC
    counts): those of every container and pod of this machine that run as the same uid, which
    this process cannot see (a restricted pod's uid is every pod's, 1000), not only its own."""
    import subprocess
    import sys

    import psutil

    me = os.getuid()
    seen = sum(p.info["num_threads"] or 1 for p in psutil.process_iter(["uids", "num_threads"])
               if p.info["uids"] and p.info["uids"].real == me)
    try:
        r = subprocess.run([sys.executable, "-I", "-S", "-c", _COUNT], capture_output=True, text=True, timeout=30)
        counted = int(r.stdout.split()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        counted = -1
    return max(seen, counted)


def confinement(cwd: str, rw: list[Path], kenv: dict, readonly: list[Path], private: Path,
                system: list[str]) -> tuple[dict, dict]:
    """(Landlock rules, environment) of a sandboxed program: the system and ``readonly`` readable,
    the helper package through a view (a folder of links to exactly the provided files, first on
    its ``PYTHONPATH``), ``cwd``, ``rw`` and its private temporary folder writable; its HOME and
    temporary folder in that private folder."""
    from ..core.course import REPO

    tmp = private / "sock" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    course = [p for p in readonly if Path(p).resolve().is_relative_to(REPO.resolve())]
    others = [str(Path(p).resolve()) for p in readonly if p not in course]
    seen = view(course, REPO.resolve(), private / "views") if course else None
    kenv = dict(kenv, HOME=str(tmp), TMPDIR=str(tmp), MPLCONFIGDIR=str(tmp / "mpl"), IPYTHONDIR=str(tmp / "ipython"))
    if seen is not None:
        paths = []
        for entry in kenv.get("PYTHONPATH", "").split(os.pathsep):
            if entry and Path(entry).resolve().is_relative_to(REPO.resolve()):
                entry = str(seen / Path(entry).resolve().relative_to(REPO.resolve()))
            paths.append(entry)
        kenv["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    rules = spec(read=[*system, *others, *([str(seen)] if seen else []),
                       *(str(Path(p).resolve()) for p in course if Path(p).is_dir())],
                 read_files=[str(Path(p).resolve()) for p in course if not Path(p).is_dir()],
                 write=[str(Path(cwd).resolve()), *(str(Path(p).resolve()) for p in rw), str(tmp.resolve())])
    return rules, kenv


def nproc_limit(lim: dict) -> int:
    """The sandbox's process limit: its own ``nproc`` as root (its uid is its own); otherwise
    ``nproc`` more than the kernel counts for the shared uid now (:func:`tasks_of_mine`)."""
    return lim["nproc"] if os.geteuid() == 0 else tasks_of_mine() + lim["nproc"]


def command(program: list[str], cwd: str, rw: list[Path], env: dict, kenv: dict, lim: dict, limits: list[str],
            readonly: list[Path], private: Path, system: list[str]) -> list[str]:
    """The Landlock tier's command line for ``program`` (the cold path, where no zygote serves):
    ``timeout``; as root ``setpriv`` to the sandbox's uid with no capabilities; ``prlimit`` (the
    process limit: :func:`nproc_limit`); :mod:`confine` with the Landlock rules and the program's
    environment (:func:`confinement`)."""
    import json
    import sys

    from ..core.course import AUTOGRADER

    rules, kenv = confinement(cwd, rw, kenv, readonly, private, system)
    uid = lim["uid"]
    cmd = ["timeout", "-s", "KILL", str(lim["life_s"])]
    if os.geteuid() == 0:
        cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs"]
    cmd += [*limits, f"--nproc={nproc_limit(lim)}", "env", "-i", f"PATH={env.get('PATH', os.defpath)}",
            f"PYTHONPATH={AUTOGRADER}", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1",
            sys.executable, "-m", "awb_grader.isolation.confine",
            json.dumps({"rules": rules, "env": kenv}, separators=(",", ":")), "--", *program]
    return cmd


def passable(path: Path) -> None:
    """As root: every folder above ``path`` may be passed through by the sandbox's uid (o+x, never
    o+r: it still cannot list them)."""
    for parent in Path(path).resolve().parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod((mode & 0o7777) | 0o001)


def unreadable(cwd: Path, sock: Path) -> None:
    """As root, besides Landlock: what a sandbox's uid must not read is closed to other uids too:
    its socket folder (the kernel's connection file holds the key that signs its messages: another
    worker's sandbox, another uid, cannot read it) and every gradebook of the folders above ``cwd``
    (the worker's shard and the course root)."""
    sock.chmod(0o700)
    for f in sock.glob("*.json"):
        f.chmod(0o600)
    for folder in Path(cwd).resolve().parents:
        book = folder / "gradebook.db"
        if book.exists() and book.stat().st_uid == 0:
            book.chmod(0o600)


def reap(uid: int) -> None:
    """As root: end every process of the sandbox's uid (what an earlier sandbox of this worker
    left, if anything did): a child takes that uid and sends SIGKILL to all it may signal."""
    import signal

    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
