"""What a sandboxed process pays to compile the helper package it is given, measured alone.

    PYTHONPATH=autograder .venv/bin/python benchmarks/bench_bytecode.py [--rounds 5]

Every kernel and every outside-verdict replay is a new Python in the sandbox, which binds the
provided modules of ``attention_workbook`` file by file (``isolation/provided.py``). Until the
grader compiled them (``provided.compile_bytecode``) the sandbox saw only the ``.py`` files and
compiled each module again in every process. Here, for each exercise, the same sandboxed
command (what the replay imports before any student code, plus the exercise's checks and hidden
checks) runs with the bytecode bound and without, alternating, and the CPU seconds of the
process tree (``RUSAGE_CHILDREN``) are compared. Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "autograder"), str(REPO), str(REPO / "benchmarks")]

from compare_trees import become_subreaper, children_cpu  # noqa: E402
from machine_info import describe, load  # noqa: E402
from phase_profile import configure_isolation  # noqa: E402


def cpu_of(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(CPU seconds of ``cmd`` and every process under it: bubblewrap's namespace included, this
    process adopts and reaps them, ``compare_trees.become_subreaper``; the CPU seconds the
    sandboxed Python says its imports after ``import torch`` took)."""
    c0 = children_cpu()
    out = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout
    return children_cpu() - c0, float(out.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--exercises", nargs="*", default=["00", "01", "02", "03", "04", "05", "06", "07", "08"])
    a = ap.parse_args()

    from awb_grader.core.course import assignments
    from awb_grader.isolation import provided, sandbox

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "autograder"), str(REPO)])   # as the sandbox sees it
    configure_isolation()
    if not become_subreaper():
        sys.exit("bench_bytecode: cannot count the sandboxed processes (no PR_SET_CHILD_SUBREAPER)")
    print(f"bench_bytecode: {a.rounds} rounds; sandbox={os.environ.get('AWB_SANDBOX_MODE')}")
    print(describe())
    folder = Path(tempfile.mkdtemp(prefix="awb-pyc-"))
    both: dict[str, list[float]] = {"source": [], "bytecode": []}
    mods: dict[str, list[float]] = {"source": [], "bytecode": []}
    for name in [n for n in assignments() if n[:2] in set(a.exercises)]:
        nn = name[:2]
        work = folder / name            # (the sandbox reads the exercise from its folder's name)
        work.mkdir()
        provided.announce(name)         # compiles the bytecode (once), lists it
        files = os.environ[provided.PROVIDED_ENV].split(os.pathsep)
        env_with = os.pathsep.join(files)
        env_without = os.pathsep.join(f for f in files if not f.endswith(".pyc"))
        code = ("import time\nimport torch\nt = time.process_time()\n"
                "from attention_workbook.checks import core, ex07, own\n"   # what the replay imports first
                f"from attention_workbook.checks import ex{nn}\n"     # the import cell's checks and what they import
                "print(time.process_time() - t)\n")
        prog = [sys.executable, "-c", code]
        got: dict[str, list[float]] = {"source": [], "bytecode": []}
        imp: dict[str, list[float]] = {"source": [], "bytecode": []}
        for r in range(a.rounds):
            for tag in (("source", "bytecode") if r % 2 == 0 else ("bytecode", "source")):
                os.environ[provided.PROVIDED_ENV] = env_with if tag == "bytecode" else env_without
                tree, mine = cpu_of(sandbox.sandbox_command(prog, str(work)), work)
                got[tag].append(tree)
                imp[tag].append(mine)
        s, b = statistics.median(got["source"]), statistics.median(got["bytecode"])
        ms, mb = statistics.median(imp["source"]), statistics.median(imp["bytecode"])
        both["source"].append(s)
        both["bytecode"].append(b)
        mods["source"].append(ms)
        mods["bytecode"].append(mb)
        print(f"  {nn}: {sum(f.endswith('.pyc') for f in files)} modules compiled; CPU seconds, median of {a.rounds}: "
              f"the workbook's and grader's imports {ms:.3f} from sources, {mb:.3f} from bytecode; the whole "
              f"sandboxed process {s:.2f} vs {b:.2f}  [{load()}]")
    s, b = statistics.mean(both["source"]), statistics.mean(both["bytecode"])
    ms, mb = statistics.mean(mods["source"]), statistics.mean(mods["bytecode"])
    print(f"mean over the exercises: the imports {ms:.3f} s from sources, {mb:.3f} s from bytecode: {ms - mb:.3f} "
          f"core-seconds saved per sandboxed process, two per notebook (the kernel, the replay): {2 * (ms - mb):.2f}; "
          f"the whole process {s:.2f} vs {b:.2f} s (PyTorch's import, and the load, in it)")
    print(f"done; {load()}")


if __name__ == "__main__":
    main()
