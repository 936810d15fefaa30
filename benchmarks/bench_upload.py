"""One upload on Gradescope, phase by phase: what a student waits for after pressing "Submit".

    PYTHONPATH=autograder:. .venv/bin/python benchmarks/bench_upload.py [--exercises 04 08] [--runs 3]

For each exercise: builds its Gradescope zip (``python -m awb_grader gradescope NN``), runs its
``setup.sh`` in a container of a real Docker daemon started here (``tests/docker_daemon.py``: no
image pulled, the system and this virtual environment bound read-only), then ``run_autograder``
on the honest upload (the reference solution in the released notebook) ``--runs`` times in one
container at Gradescope's default half a CPU and 768 MB, as Gradescope runs it: a fresh
``/autograder/submission`` and ``results`` each time, nothing warm kept between uploads except the
page cache. Prints, for each run, the wall time of ``run_autograder`` measured around it in the
container and the phases the grader's own report gives (``harness.Outcome.phases``: the Python
start, the warm start (the isolation tier, PyTorch and the zygote), checking and copying the upload,
the kernel running the cells, the outside verdict, the rest of nbgrader, reading back), and what
is left to the exit; then the median of each. The machine and its load are printed before and
after. Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from machine_info import describe, load  # noqa: E402

CPUS, MEMORY_MB = "0.5", 768          # Gradescope's defaults: half a CPU, 768 MB

RUN = """
set -u
for i in $(seq 1 {runs}); do
  rm -rf /autograder/submission /autograder/results && mkdir -p /autograder/submission
  cp /uploads/honest.ipynb /autograder/submission/{assignment}.ipynb
  t0=$EPOCHREALTIME
  /autograder/run_autograder > /uploads/out/$i.log 2>&1
  echo "rc $? seconds $(awk "BEGIN {{print $EPOCHREALTIME - $t0}}")" >> /uploads/out/$i.log
done
"""


def phases(log: str) -> tuple[dict[str, float], float, int]:
    """({phase: seconds} from the report's "time:" line, the wall seconds, the exit status)."""
    got: dict[str, float] = {}
    wall, rc = float("nan"), -1
    for line in log.splitlines():
        line = line.strip()
        if line.startswith("time: "):
            got.update((name, float(sec)) for name, sec in re.findall(r"\s*(.+?) (\d+(?:\.\d+)?) s(?:,|$)", line[6:]))
        elif line.startswith("rc ") and " seconds " in line:
            w = line.split()
            rc, wall = int(w[1]), float(w[3])
    return got, wall, rc


def bench(docker, exercise: str, runs: int, tmp: Path) -> list[tuple[dict, float, int, str]]:
    from awb_grader.core.course import EXERCISES, resolve
    from awb_grader.devtools.variants import student_notebook
    from awb_grader.platforms import gradescope

    a = resolve([exercise])[0]
    z = gradescope.build(exercise, tmp / f"{a}.zip")
    root = tmp / a / "root"
    setup = docker.gradescope_setup(z, root)         # as Gradescope's image build does
    if setup["rc"] != 0:
        raise SystemExit(f"setup.sh of {a} failed:\n{setup['stdout'][-3000:]}")
    up = tmp / a / "uploads"
    (up / "out").mkdir(parents=True)
    release = EXERCISES / a / f"{a}.ipynb"
    (up / "honest.ipynb").write_text(nbformat.writes(student_notebook(release, a, None)))
    docker.run(["-v", f"{root}:/autograder", "-v", f"{up}:/uploads", "--memory", f"{MEMORY_MB}m", "--cpus", CPUS],
               ["bash", "-c", RUN.format(runs=runs, assignment=a)], timeout=600 * runs)
    out = []
    for i in range(1, runs + 1):
        log = (up / "out" / f"{i}.log").read_text() if (up / "out" / f"{i}.log").exists() else ""
        got, wall, rc = phases(log)
        head = next((ln for ln in log.splitlines() if ln.startswith("awb grader:")), "(no report)")
        out.append((got, wall, rc, head))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exercises", nargs="+", default=["04", "08"])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    from docker_daemon import Daemon

    print(describe())
    print(f"load before: {load()}")
    docker = Daemon()
    tmp = Path(tempfile.mkdtemp(prefix="awb-bench-upload-"))
    try:
        for ex in a.exercises:
            results = bench(docker, ex, a.runs, tmp)
            print(f"\nexercise {ex}: run_autograder on the honest upload, --cpus {CPUS}, --memory {MEMORY_MB}m "
                  f"(load now {load()})")
            for i, (got, wall, rc, head) in enumerate(results, 1):
                print(f"  run {i}: {wall:5.1f} s (rc {rc})  {head[len('awb grader: '):]}")
            names = list(dict.fromkeys(k for got, *_ in results for k in got))
            print(f"  {'phase':<38} " + " ".join(f"run {i:<3}" for i in range(1, len(results) + 1)) + "  median")
            rows = [(n, [got.get(n, float('nan')) for got, *_ in results]) for n in names]
            rows.append(("exit (after the report)", [w - sum(got.values()) for got, w, *_ in results]))
            rows.append(("run_autograder, wall", [w for _, w, *_ in results]))
            for n, vals in rows:
                print(f"  {n:<38} " + " ".join(f"{v:7.2f}" for v in vals) + f"  {statistics.median(vals):6.2f}")
    finally:
        docker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
