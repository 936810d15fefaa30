"""Project a MOOC cohort on a cluster from figures measured here.

Measures, on a synthetic cohort (``synth.make_cohort``: correct work, alternatives, catalogued
mistakes, unanswered functions, syntax errors, stripped metadata, corrupt files) of every
exercise, with the real commands:

1. ``cohort`` on one machine (2 workers): each notebook's busy time in its worker (Record.seconds),
   and the collection time per file (every shard collects the whole zip);
2. the same zip as 2 shards (``cohort --shard I/2``, one after the other) and ``merge``: a
   shard's fixed start-up and the merge time per submission; the merged course must equal the
   one-machine course (gradebook cell by cell, grades.csv).

Then projects ``--students`` (default 10,000) x every exercise on ``--cores`` (default 200) for a
few splits of the cores into shards x workers, with a simple model:
  shard time = start-up + collection of the whole zip + (its notebooks / workers) x busy time per notebook,
  (start-up and collection per file from a shard with an empty slice on a small and a large zip),
  total     = the slowest shard + the merge (one process: per submission folded, plus its
              fixed course build and export, measured on the small cohort only).
Writes ``results/cluster_projection.json`` and ``results/cluster_projection.png``.

    PYTHONPATH=autograder .venv/bin/python benchmarks/project_cluster.py [--students 2]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "autograder"), str(REPO)]


LAST = {}


def _run(args, env):
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "awb_grader", *args], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    LAST["stdout"] = r.stdout + r.stderr
    return time.perf_counter() - t0


def _merge_parts(text: str) -> dict:
    import re

    m = re.search(r"fold ([\d.]+) s, course build ([\d.]+) s, export ([\d.]+) s", text)
    return {"fold_s": float(m[1]), "build_s": float(m[2]), "export_s": float(m[3])} if m else {}


def _rows(p):
    with open(p) as fh:
        return sorted(tuple(r.items()) for r in csv.DictReader(fh))


def n_files_zip(z: Path) -> int:
    import zipfile

    with zipfile.ZipFile(z) as zf:
        return len([n for n in zf.namelist() if n.endswith(".ipynb")])


def measure(students: int, tmp: Path, big_students: int = 100) -> dict:
    from awb_grader.devtools import synth
    from awb_grader.core.course import EXERCISES, assignments
    from awb_grader.devtools.compare import gradebook_dump

    names = assignments()
    lms = tmp / "lms.zip"
    synth.make_cohort(lms, EXERCISES, names, students, seed=5)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'autograder'}:{REPO}", "MPLBACKEND": "Agg"}
    one, multi = tmp / "one", tmp / "multi"
    t_one = _run(["cohort", str(lms), "--course", str(one), "--workers", "2", "--no-feedback"], env)
    state = json.loads((one / "cohort_state.json").read_text())
    busy = {a: [r["seconds"] for r in per.values() if r["status"] != "ungradable"] for a, per in state.items()}
    n_files = sum(len(per) for per in state.values())
    t_shards = [_run(["cohort", str(lms), "--course", str(multi), "--workers", "2", "--no-feedback",
                      "--shard", f"{i}/2"], env) for i in range(2)]
    t_merge = _run(["merge", "--course", str(multi)], env)
    parts = _merge_parts(LAST["stdout"])
    t_merge_again = _run(["merge", "--course", str(multi)], env)
    same = (gradebook_dump(f"sqlite:///{one / 'gradebook.db'}") == gradebook_dump(f"sqlite:///{multi / 'gradebook.db'}")
            and _rows(one / "grades.csv") == _rows(multi / "grades.csv"))
    # a shard that grades nothing (an empty slice) still starts and collects the whole zip: its
    # time on a small and a large zip gives the fixed start-up and the collection time per file
    big = tmp / "big.zip"
    synth.make_cohort(big, EXERCISES, names, big_students, seed=6)
    empty = {}
    for z, n in ((lms, n_files_zip(lms)), (big, n_files_zip(big))):
        empty[n] = _run(["cohort", str(z), "--course", str(tmp / f"empty-{n}"), "--workers", "1", "--no-feedback",
                         "--shard", "999999/1000000"], env)
    (n1, e1), (n2, e2) = sorted(empty.items())
    collect_per_file = max(0.0, (e2 - e1) / (n2 - n1))
    startup = max(0.0, e1 - collect_per_file * n1)
    graded_busy = [s for v in busy.values() for s in v]
    # a shard's time beyond its notebooks' busy time over its workers: start-up + collection
    shard_states = [
        json.loads((p / "cohort_state.json").read_text()) for p in sorted((multi / "cluster").glob("shard-*"))
    ]
    overheads = []
    for t, st in zip(t_shards, shard_states):
        work = sum(r["seconds"] for per in st.values() for r in per.values())
        overheads.append(max(0.0, t - work / 2))
    return {
        "students": students, "exercises": names, "notebooks": n_files,
        "one_machine_s": round(t_one, 1), "shard_s": [round(t, 1) for t in t_shards],
        "merge_s": round(t_merge, 1), "merge_again_s": round(t_merge_again, 1),
        "merged_equals_one_machine": same,
        "busy_s_per_notebook": {a: round(statistics.mean(v), 2) for a, v in busy.items() if v},
        "busy_s_per_notebook_mean": round(statistics.mean(graded_busy), 2),
        "shard_overhead_s": [round(o, 1) for o in overheads],
        "empty_shard_s": {str(k): round(v, 1) for k, v in sorted(empty.items())},
        "shard_startup_s": round(startup, 1), "collect_s_per_file": round(collect_per_file, 4),
        "merge_parts_s": parts,
        # folding a submission (gradebook writes through nbgrader's API + its folders); the merge's
        # course build and export are fixed costs here (their growth with 100,000 records is not measured)
        "merge_s_per_submission": round(parts.get("fold_s", t_merge) / max(1, n_files), 4),
        "merge_fixed_s": round(parts.get("build_s", 0) + parts.get("export_s", 0), 1),
        "cpus_here": os.cpu_count(), "machine": platform.processor() or platform.machine(),
    }


def project(m: dict, students: int, cores: int) -> list[dict]:
    notebooks = students * len(m["exercises"])
    busy = m["busy_s_per_notebook_mean"]
    fixed, collect_s_per_file = m["shard_startup_s"], m["collect_s_per_file"]
    out = []
    for workers in (1, 2, 4, 8, 16):
        shards = cores // workers
        per_shard = math.ceil(notebooks / shards)
        shard_s = max(fixed, 0) + collect_s_per_file * notebooks + math.ceil(per_shard / workers) * busy
        merge_s = m["merge_s_per_submission"] * notebooks + m["merge_fixed_s"]
        out.append({"workers_per_shard": workers, "shards": shards, "notebooks_per_shard": per_shard,
                    "shard_s": round(shard_s), "merge_s": round(merge_s), "total_s": round(shard_s + merge_s),
                    "core_hours": round(notebooks * busy / 3600, 1)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=2, help="students in the measured cohort (x every exercise)")
    ap.add_argument("--big-students", type=int, default=100, help="students of the zip that times collection")
    ap.add_argument("--project-students", type=int, default=10_000)
    ap.add_argument("--cores", type=int, default=200)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="awb-proj-") as tmp:
        m = measure(a.students, Path(tmp), a.big_students)
    rows = project(m, a.project_students, a.cores)
    best = min(rows, key=lambda r: r["total_s"])
    res = {"measured": m,
           "projection": {"students": a.project_students, "cores": a.cores, "rows": rows, "best": best}}
    out = REPO / "results"
    out.mkdir(exist_ok=True)
    (out / "cluster_projection.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(m, indent=1))
    print(f"\n{a.project_students} students x {len(m['exercises'])} exercises on {a.cores} cores:")
    for r in rows:
        print(f"  {r['shards']:>4} shards x {r['workers_per_shard']:>2} workers: shard {r['shard_s'] / 60:6.1f} min, "
              f"merge {r['merge_s'] / 60:5.1f} min, total {r['total_s'] / 60:6.1f} min")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.2))
        labels = [f"{r['shards']}x{r['workers_per_shard']}" for r in rows]
        ax.bar(labels, [r["shard_s"] / 60 for r in rows], label="slowest shard")
        ax.bar(labels, [r["merge_s"] / 60 for r in rows], bottom=[r["shard_s"] / 60 for r in rows], label="merge")
        ax.set_xlabel("shards x workers per shard (200 cores)")
        ax.set_ylabel("minutes")
        ax.set_title(f"{a.project_students:,} students x {len(m['exercises'])} exercises, projected from "
                     f"{m['busy_s_per_notebook_mean']} s/notebook", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "cluster_projection.png", dpi=100)
    except Exception as e:  # noqa: BLE001 - the JSON is the result; the figure is a convenience
        print(f"(no figure: {e})")
    return 0 if m["merged_equals_one_machine"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
