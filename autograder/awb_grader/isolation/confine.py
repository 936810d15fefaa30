"""``python -m awb_grader.isolation.confine SPEC -- PROGRAM...``: the last step of a Landlock
tier sandbox before the student's program. It runs as the sandbox's user (``setpriv`` and
``prlimit`` came before it), then

1. restricts itself with Landlock (``landlock.restrict``, which sets no_new_privs first),
2. loads the seccomp filter (``syscalls.load``),
3. replaces itself with PROGRAM (``os.execve``) in the environment SPEC gives.

SPEC is JSON: ``{"rules": landlock.spec(...), "env": {...}}``. Any failure ends it before
PROGRAM starts (exit status 126, the reason on stderr): nothing runs half-confined.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m awb_grader.isolation.confine SPEC -- PROGRAM...")
    spec, program = json.loads(argv[0]), argv[2:]
    try:
        from . import landlock, syscalls

        syscalls.bindings()                 # loaded (libseccomp found) before the files are closed
        landlock.restrict(spec["rules"])
        syscalls.load()
    except Exception as e:  # noqa: BLE001 - say why, start nothing
        print(f"awb sandbox: could not confine the program: {type(e).__name__}: {e}", file=sys.stderr)
        os._exit(126)
    os.execvpe(program[0], program, spec["env"])


if __name__ == "__main__":
    main(sys.argv[1:])
