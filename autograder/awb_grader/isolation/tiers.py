"""Which isolation tier grades here, chosen once per process and named on every grade.

1. ``bwrap``: bubblewrap builds its namespaces (a machine or a pod that allows them);
2. ``landlock``: it cannot (Docker's and Kubernetes' defaults refuse new namespaces), but the
   kernel has Landlock, seccomp filters can be loaded, and a sandboxed program really is
   confined: :func:`probe_landlock` runs a real sandbox once and checks that it cannot read a
   file outside its folder, open a network socket or start with another uid's rights;
3. otherwise grading is refused with the real reasons (bubblewrap's own error, Landlock's), unless
   the grader said the grades may be unprotected: ``limits`` (resource limits only).

``AWB_ISOLATION=bwrap|landlock`` considers only that tier (the test suite and the benchmark
measure each tier on one machine). ``python -m awb_grader.isolation.tiers`` prints what this
machine gets (the platforms' setup runs it while building the image).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .sandbox import REFUSAL, UNPROTECTED_ENV, WARNING, Limits, Refused

FORCE_ENV = "AWB_ISOLATION"
_BWRAP_WHY: str | None = None
_LANDLOCK: tuple[str | None, str] | None = None


@dataclass
class Tier:
    name: str                                        # bwrap | landlock | none
    detail: str = ""                                 # what it is made of, here
    why_not: list[str] = field(default_factory=list)  # why the better tiers cannot run

    def describe(self) -> str:
        if self.name == "none":
            return "no isolation tier can run here: " + "; ".join(self.why_not)
        return f"isolation tier: {self.name} ({self.detail})" + (
            f"; not {'; not '.join(self.why_not)}" if self.why_not else "")


NOT_INSTALLED = "bubblewrap: not installed (apt-get install bubblewrap)"


def bwrap_error() -> str | None:
    """None where bubblewrap works; else why not (its own words)."""
    import shutil

    from .sandbox import _system_binds

    exe = shutil.which("bwrap")
    if not exe:
        return NOT_INSTALLED
    cmd = [exe, "--unshare-net", "--unshare-pid", "--die-with-parent", *_system_binds(),
           "--proc", "/proc", "--dev", "/dev", "true"]
    if os.geteuid() != 0:
        cmd.insert(1, "--unshare-user")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap: {e}"
    if r.returncode == 0:
        return None
    words = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[0]
    return f"bubblewrap: {words.removeprefix('bwrap: ')}"


PROBE = """
import os, socket, sys
outside = sys.argv[1]
try:
    open(outside).read()
    sys.exit("read a file outside its folder")
except PermissionError:
    pass
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sys.exit("opened a network socket")
except OSError:
    pass
open("written", "w").write("ok")
print("confined", os.getuid())
"""


def probe_landlock() -> tuple[str | None, str]:
    """(None, detail) where a Landlock tier sandbox runs and holds here; else (why not, "")."""
    from . import landlock

    try:
        import landlockpy  # noqa: F401

        from .syscalls import bindings

        bindings()
    except (ImportError, RuntimeError) as e:
        return f"Landlock tier: its bindings are missing ({e}): pip install landlockpy pyseccomp", ""
    abi = landlock.abi()
    if abi < 1:
        return "Landlock: this kernel has none (Linux 5.13 or later, with landlock in its LSM list)", ""
    if os.geteuid() != 0 and abi < 6:
        return (f"Landlock ABI {abi} (< 6) cannot keep a sandbox that shares the grader's uid from "
                "signalling it: grade as root (the sandbox then gets a uid of its own) or on Linux 6.12+"), ""
    from . import sandbox

    with tempfile.TemporaryDirectory(prefix="awb-probe-") as tmp:
        base = Path(tmp)
        work, private = base / "work", base / "private"
        work.mkdir()
        (private / "sock").mkdir(parents=True)
        outside = base / "outside.txt"
        outside.write_text("the sandbox must not read this")
        outside.chmod(0o644)
        uid = sandbox.draw_uids(1)
        env = dict(os.environ, AWB_SANDBOX_MODE="landlock", AWB_PRIVATE_RUNTIME=str(private),
                   AWB_SANDBOX_UID=str(uid))
        if os.geteuid() == 0:
            for folder in (work, private / "sock"):
                sandbox.chown_tree(folder, uid)
            base.chmod(0o711)
        from .zygote import cold_reason

        run_env = None
        if cold_reason("landlock"):         # every child new: the cold path's command, as it grades
            cmd = sandbox.sandbox_command([sys.executable, "-c", PROBE, str(outside)], str(work), env=env)
        else:                               # the zygote's children: the same steps, in a process of its own
            import json

            from ..core.course import AUTOGRADER

            plan, penv = sandbox.child_plan(str(work), env=env)
            spec = json.dumps({"plan": plan, "env": penv}, separators=(",", ":"))
            cmd = ["timeout", "-s", "KILL", "60", sys.executable, "-m", "awb_grader.isolation.confine", "--plan",
                   spec, "--", "-c", PROBE, str(outside)]
            run_env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": str(AUTOGRADER), "LANG": "C.UTF-8"}
        try:
            r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=60, env=run_env)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"Landlock tier: the probe sandbox did not run ({e})", ""
        said = (r.stdout + r.stderr).strip()
        if r.returncode != 0 or not said.startswith("confined") or not (work / "written").exists():
            last = said.splitlines()[-1] if said else f"exit status {r.returncode}"
            return f"Landlock tier: the probe sandbox failed ({last[:300]})", ""
        who = said.split()[1]
    if os.geteuid() == 0 and who != str(uid):
        return f"Landlock tier: the probe ran as uid {who}, not the sandbox's", ""
    scopes = "signals and abstract sockets scoped" if abi >= 6 else "no signal scoping before ABI 6"
    user = "a uid of its own per worker" if os.geteuid() == 0 else f"the grader's uid {os.getuid()}"
    return None, f"Landlock ABI {abi}, seccomp, rlimits, {user}; {scopes}"


def detect() -> Tier:
    """The best tier this machine can run (each probe runs once per process)."""
    global _BWRAP_WHY, _LANDLOCK
    from .sandbox import bwrap_works

    force = os.environ.get(FORCE_ENV, "")
    why: list[str] = []
    if force in ("", "bwrap"):
        if bwrap_works():
            return Tier("bwrap", "namespaces, a uid of its own per worker" if os.geteuid() == 0 else "namespaces")
        if _BWRAP_WHY is None:
            _BWRAP_WHY = bwrap_error() or "bubblewrap: its probe failed"
        why.append(_BWRAP_WHY)
    if force in ("", "landlock"):
        if _LANDLOCK is None:
            _LANDLOCK = probe_landlock()
        err, detail = _LANDLOCK
        if err is None:
            return Tier("landlock", detail, why)
        why.append(err)
    return Tier("none", "", why)


def protected() -> bool:
    """Can a tier grade here (whatever it is)?"""
    return detect().name != "none"


def sandbox_mode(unprotected: bool = False) -> str:
    """The isolation tier : 'bwrap' where bubblewrap works, else 'landlock' where
    Landlock + seccomp hold; else 'limits' (resource limits only) if the grader said the grades
    need not be protected; else :class:`Refused`, with the real reasons."""
    tier = detect()
    if tier.name != "none":
        return tier.name
    if unprotected or os.environ.get(UNPROTECTED_ENV) == "1":
        return "limits"
    raise Refused(REFUSAL.format(why="; ".join(tier.why_not)))



def configure(unprotected: bool = False, limits: Limits | None = None, say=print) -> str:
    """Decide the sandbox for this grading run (:func:`sandbox_mode`: the isolation tier,
    ``isolation/tiers.py``: bubblewrap, else Landlock + seccomp; or, only when the grader said
    so, resource limits alone; otherwise :class:`Refused`) and put it and the limits in this
    process's environment, which the grading workers, the kernels' launcher and the replay
    inherit. The nbgrader settings themselves (kernel spec, transport, preprocessors) come from
    the course's config file (``core.config.configure``)."""
    limits = limits or Limits()
    mode = sandbox_mode(unprotected)
    if mode == "limits":
        say(WARNING)
        os.environ[UNPROTECTED_ENV] = "1"
    os.environ.update({
        "AWB_SANDBOX_MODE": mode,
        "AWB_SANDBOX_MEM_MB": str(limits.memory_mb),
        "AWB_SANDBOX_NOTEBOOK_S": str(limits.notebook_s),
        "AWB_SANDBOX_NPROC": str(limits.nproc),
        "AWB_SANDBOX_FSIZE_MB": str(limits.fsize_mb),
    })
    return mode


def main() -> int:
    from .zygote import cold_reason

    tier = detect()
    print(f"awb grader: {tier.describe()}")
    if tier.name != "none":
        cold = cold_reason(tier.name)
        print("awb grader: " + (f"each kernel and replay a new process ({cold})" if cold else
                                "each kernel and replay a confined child of the grading process's zygote"))
    return 0 if tier.name != "none" else 1


if __name__ == "__main__":
    raise SystemExit(main())
