"""The last steps before the student's program: :func:`enter` confines the calling process.

Two ways in, the same steps:

* a child of the grading process's zygote (``zygote.py``) calls :func:`enter` on itself, after the
  fork and before the student's first line: as root its uid (no capabilities left), then its
  resource limits, Landlock, the seccomp filter;
* the cold path (where no zygote can serve): ``python -m awb_grader.isolation.confine SPEC --
  PROGRAM...`` runs as the sandbox's user (``setpriv`` and ``prlimit`` came before it), then
  restricts itself with Landlock, loads the seccomp filter and replaces itself with PROGRAM
  (``os.execve``) in the environment SPEC gives. SPEC is JSON: ``{"rules": landlock.spec(...),
  "env": {...}}``.

Any failure ends the process before the program starts (exit status 126, the reason on stderr):
nothing runs half-confined.

A plan (``sandbox.child_plan``) is plain data: ``uid`` (as root: the sandbox's own), ``rlimits``
({"AS": bytes, "CPU": s, "FSIZE": bytes, "CORE": 0, "NPROC": n}), ``landlock`` (``landlock.spec``
rules, or None), ``seccomp`` (bool).
"""

from __future__ import annotations

import json
import os
import stat
import sys

PROC_FD = "/proc/self/fd"


def _may_pass(st: os.stat_result, uid: int) -> bool:
    """May ``uid`` (its gid the same, no other group) pass through a folder with this status?"""
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == uid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def unreachable(path: str, uid: int) -> str | None:
    """The folder just below the deepest folder above ``path`` that ``uid`` may not pass through
    (e.g. ``/root/.pyenv`` for ``/root/.pyenv/versions/3.11/lib/python3.11``: ``/root`` is 0700),
    or None where it may reach ``path``."""
    parts = os.path.abspath(path).split("/")[1:]
    cur, below = "/", None
    for part in parts:
        try:
            st = os.stat(cur)
        except OSError:
            return None
        nxt = os.path.join(cur, part)
        if not _may_pass(st, uid):
            below = nxt
        cur = nxt
    return below


def _python_folders() -> set[str]:
    """Where this Python finds its modules and their files: ``sys.path``, the loaded packages'
    ``__path__``, the loaded modules' folders."""
    out = {p for p in sys.path if p and os.path.isabs(p)}
    for mod in list(sys.modules.values()):
        try:
            paths = list(mod.__path__) if isinstance(getattr(mod, "__path__", None), list) else []
        except Exception:  # noqa: BLE001 - a module whose __path__ is something else (torch.classes)
            paths = []
        out.update(p for p in paths if isinstance(p, str) and os.path.isabs(p))
        f = getattr(mod, "__file__", None)
        if isinstance(f, str) and os.path.isabs(f):
            out.add(os.path.dirname(f))
    return out


def open_unreachable(uid: int) -> dict[str, str]:
    """As root, before becoming ``uid``: for every folder of this Python that ``uid`` cannot reach
    (an interpreter under a 0700 home: pyenv or conda in /root), open the folder that blocks it
    (``O_PATH``: a handle, not a read) and return {its path: ``/proc/self/fd/N``}. Through that
    handle the process keeps reaching what lies below, and only that, after its uid changed
    (Landlock still decides what it may read there); nothing on the machine changes."""
    out: dict[str, str] = {}
    for folder in sorted(_python_folders()):
        top = unreachable(folder, uid)
        if top is None or top in out or any(top.startswith(k + "/") for k in out):
            continue
        try:
            fd = os.open(top, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        out[top] = f"{PROC_FD}/{fd}"
    return out


def _moved(p, routes: dict[str, str]):
    if not isinstance(p, str):
        return p
    for top, handle in routes.items():
        if p == top or p.startswith(top + "/"):
            return handle + p[len(top):]
    return p


def reroute(routes: dict[str, str]) -> None:
    """Where this Python looks for modules and their files, through the handles of
    :func:`open_unreachable`: ``sys.path``, every package's ``__path__``, every module's
    ``__file__`` (data files found beside a module), and matplotlib's fonts."""
    if not routes:
        return
    sys.path[:] = [_moved(p, routes) for p in sys.path]
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__path__", None)
        if isinstance(path, list):
            path[:] = [_moved(p, routes) for p in path]
        try:
            if isinstance(getattr(mod, "__file__", None), str):
                mod.__file__ = _moved(mod.__file__, routes)
            spec = getattr(mod, "__spec__", None)
            if spec is not None and isinstance(spec.submodule_search_locations, list):
                spec.submodule_search_locations[:] = [_moved(p, routes) for p in spec.submodule_search_locations]
        except (AttributeError, TypeError):
            pass
    fm = sys.modules.get("matplotlib.font_manager")
    if fm is not None and getattr(fm, "fontManager", None) is not None:
        import dataclasses

        for name in ("ttflist", "afmlist"):
            fonts = getattr(fm.fontManager, name, [])
            setattr(fm.fontManager, name, [dataclasses.replace(e, fname=_moved(e.fname, routes))
                                           if dataclasses.is_dataclass(e) else e for e in fonts])
    mpl = sys.modules.get("matplotlib")
    if mpl is not None:
        try:
            mpl.get_data_path.cache_clear()
        except AttributeError:
            pass
    import importlib

    importlib.invalidate_caches()


def enter(plan: dict) -> None:
    """Confine this process as ``plan`` says (see the module's docstring); raises if a step fails."""
    import resource

    from . import landlock, syscalls

    if plan.get("seccomp"):
        syscalls.bindings()                 # loaded (libseccomp found) before anything is closed
    # the Landlock ruleset is built first, its paths opened as the grader (which may reach what the
    # sandbox's uid cannot); it is enforced after the uid and the limits
    rules = landlock.ruleset(plan["landlock"]) if plan.get("landlock") else None
    try:
        uid = plan.get("uid")
        if uid is not None and os.geteuid() == 0:
            routes = open_unreachable(int(uid))
            os.setgroups([])
            os.setresgid(int(uid), int(uid), int(uid))
            os.setresuid(int(uid), int(uid), int(uid))      # from root: every capability goes with it
            reroute(routes)
        for name, value in (plan.get("rlimits") or {}).items():
            which = getattr(resource, f"RLIMIT_{name}")
            _soft, hard = resource.getrlimit(which)
            value = int(value)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))
        if rules is not None:
            rules.restrict()                    # sets no_new_privs (so does the seccomp filter's load)
    finally:
        if rules is not None:
            rules.close()
    if plan.get("seccomp"):
        syscalls.load()


def main(argv: list[str]) -> None:
    if argv[:1] == ["--plan"] and len(argv) >= 5 and argv[2:4] == ["--", "-c"]:
        # a Python program confined as a zygote's child is (the tier's probe): this process started
        # as the grader, enters the plan, then runs the program in itself, as the child would
        spec = json.loads(argv[1])
        try:
            enter(spec["plan"])
        except Exception as e:  # noqa: BLE001 - say why, run nothing
            print(f"awb sandbox: could not confine the program: {type(e).__name__}: {e}", file=sys.stderr)
            os._exit(126)
        os.environ.clear()
        os.environ.update(spec["env"])
        sys.argv = ["-c", *argv[5:]]
        exec(compile(argv[4], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the grader's own code
        return
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m awb_grader.isolation.confine SPEC -- PROGRAM...  |  --plan SPEC -- -c CODE ARGS...")
    spec, program = json.loads(argv[0]), argv[2:]
    try:
        enter({"landlock": spec["rules"], "seccomp": True})
    except Exception as e:  # noqa: BLE001 - say why, start nothing
        print(f"awb sandbox: could not confine the program: {type(e).__name__}: {e}", file=sys.stderr)
        os._exit(126)
    os.execvpe(program[0], program, spec["env"])


if __name__ == "__main__":
    main(sys.argv[1:])
