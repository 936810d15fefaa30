"""A cohort on a cluster: ``cohort --shard I/N`` slices, ``merge`` folds, and (slow) a real
one-node Slurm cluster started inside the test: Debian's ``munged``, ``slurmctld`` and ``slurmd``
on the loopback interface, ``autograder/cluster/grade.sbatch`` submitting the job array over an
LMS zip and the dependent merge job. The merged course must equal a one-machine ``cohort`` run
of the same zip (gradebook cell by cell, grades.csv, flags.csv, every record); merging again,
and re-running one shard alone (``ONLY=1``) and merging, change nothing.

Skipped, with the reason, where Slurm is not installed (``.ci/run`` installs it) or cannot start.
"""

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from awb_grader.cohort import shards
from awb_grader.devtools import synth
from awb_grader.core.course import EXERCISES, REPO
from awb_grader.devtools.compare import gradebook_dump

A = "04_queries_keys_values"


# -- fast ----------------------------------------------------------------------------------------
def test_parse_takes_the_index_from_the_cluster():
    assert shards.parse("3/10", env={}) == (3, 10)
    assert shards.parse("10", env={"SLURM_ARRAY_TASK_ID": "7"}) == (7, 10)
    assert shards.parse("/4", env={"JOB_COMPLETION_INDEX": "2"}) == (2, 4)
    for bad, env in (("10", {}), ("10/10", {}), ("-1/3", {}), ("a/b", {})):
        with pytest.raises(SystemExit):
            shards.parse(bad, env=env)


def test_slices_are_deterministic_and_cover_the_cohort_once():
    subs = {a: {f"s{i:03d}": i for i in range(k)} for a, k in (("04_x", 17), ("05_y", 9), ("06_z", 1))}
    for n in (1, 2, 3, 7, 40):
        seen = []
        for i in range(n):
            part = shards.select(subs, i, n)
            assert part == shards.select(dict(reversed(list(subs.items()))), i, n)   # order of the input
            seen += [(a, s) for a, per in part.items() for s in per]
        assert sorted(seen) == sorted((a, s) for a, per in subs.items() for s in per)
        sizes = [sum(len(p) for p in shards.select(subs, i, n).values()) for i in range(n)]
        assert max(sizes) - min(sizes) <= 1


def test_cohort_shard_flag_sets_the_shard_root(monkeypatch):
    from types import SimpleNamespace

    from awb_grader import __main__ as cli
    from awb_grader.cohort import run as cohort
    from awb_grader.core.course import COHORT_ROOT

    seen, graded = {}, [["a record"]]

    def fake_run_cohort(source, root, exercises=None, **kw):
        seen.clear()
        seen.update(source=source, root=root, exercises=exercises, **kw)
        return SimpleNamespace(records=graded[0], unmatched=[])

    monkeypatch.setattr(cohort, "run_cohort", fake_run_cohort)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    assert cli.main(["cohort", "lms.zip", "--course", "/x/c", "--shard", "3", "--workers", "2"]) == 0
    assert seen["root"] == Path("/x/c/cluster/shard-0001-of-0003") and seen["shard"] == (1, 3)
    assert seen["source"] == Path("lms.zip") and seen["workers"] == 2
    assert cli.main(["cohort", "lms.zip"]) == 0                     # no --shard: the whole cohort, unchanged
    assert seen["root"] == COHORT_ROOT and seen["shard"] is None
    # an empty slice (more shards than submissions) is not a failed array task; nothing to grade otherwise is
    graded[0] = []
    assert cli.main(["cohort", "lms.zip", "--shard", "0/9"]) == 0
    assert cli.main(["cohort", "lms.zip"]) == 2


# -- slow: a real Slurm cluster ------------------------------------------------------------------
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _why_no_slurm() -> str | None:
    missing = [d for d in DAEMONS if not shutil.which(d)]
    if missing:
        return f"Slurm is not installed here ({', '.join(missing)} missing: apt-get install slurmctld slurmd munge)"
    if os.geteuid() != 0:
        return "a one-node Slurm cluster needs root here (slurmd runs jobs as their user)"
    from awb_grader.isolation.tiers import detect

    if detect().name == "none":
        return "no isolation tier can run here: the cohort command refuses to grade"
    return None


CONF = """ClusterName=awbtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={d}/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""
# slurmd loads a cgroup plugin even with proctrack/linuxproc: the one this machine has
CGROUP_CONFS = ("", "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n", "CgroupPlugin=cgroup/v2\n")


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture(scope="module")
def slurm():
    why = _why_no_slurm()
    if why:
        pytest.skip(why)
    d = Path(tempfile.mkdtemp(prefix="awb-slurm-"))      # short: the munge socket's path is limited
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    (d / "munge.key").write_bytes(os.urandom(1024))
    (d / "munge.key").chmod(0o400)
    env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}
    started: list[Path] = []

    def stop():
        for pidfile in reversed(started):
            pid = _pid(pidfile)
            if pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        time.sleep(0.5)
        shutil.rmtree(d, ignore_errors=True)

    try:
        subprocess.run(["munged", f"--key-file={d / 'munge.key'}", f"--socket={d / 'munge.socket'}",
                        f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'munged.log'}",
                        f"--seed-file={d / 'munge.seed'}", "--force"], check=True, capture_output=True, timeout=30)
        started.append(d / "munged.pid")
        (d / "slurm.conf").write_text(CONF.format(d=d, ctld_port=_free_port(), d_port=_free_port(),
                                                  cpus=os.cpu_count() or 2))
        up = False
        for cg in CGROUP_CONFS:
            (d / "cgroup.conf").write_text(cg)
            if not (d / "slurmctld.pid").exists() or not _pid(d / "slurmctld.pid"):
                subprocess.run(["slurmctld", "-f", str(d / "slurm.conf")], env=env, check=True, timeout=30)
                started.append(d / "slurmctld.pid")
            subprocess.run(["slurmd", "-f", str(d / "slurm.conf")], env=env, timeout=30)
            for _ in range(40):
                time.sleep(0.5)
                state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
                if state.strip().startswith(("idle", "mix", "alloc")):
                    up = True
                    break
                if not _pid(d / "slurmd.pid") or not Path(f"/proc/{_pid(d / 'slurmd.pid')}").exists():
                    break
            if up:
                started.append(d / "slurmd.pid")
                break
        if not up:
            log = (d / "slurmd.log").read_text()[-600:] if (d / "slurmd.log").exists() else ""
            stop()
            pytest.skip(f"a one-node Slurm cluster could not start here: {log}")
    except (subprocess.SubprocessError, OSError) as e:
        stop()
        pytest.skip(f"a one-node Slurm cluster could not start here: {e}")
    yield env
    stop()


def _wait(env, jobs, timeout=900):
    t0 = time.time()
    while time.time() - t0 < timeout:
        q = subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%i %T"], env=env, capture_output=True,
                           text=True).stdout
        if not q.strip():
            return
        time.sleep(2)
    raise AssertionError(f"jobs {jobs} still queued after {timeout} s: {q}")


def _state(job, env) -> str:
    out = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
    return " ".join(sorted({w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")}))


def _submit(env, tmp, **extra):
    run = subprocess.run(["bash", str(REPO / "autograder/cluster/grade.sbatch")], cwd=tmp, capture_output=True,
                         text=True, timeout=60, env={**env, **extra})
    assert run.returncode == 0, run.stdout + run.stderr
    words = run.stdout.split()
    array, merge = words[words.index("job") + 1], words[-1]
    _wait(env, [array.split(";")[0], merge])
    return array.split(";")[0], merge


def _rows(path):
    with open(path) as fh:
        return sorted(tuple(r.items()) for r in csv.DictReader(fh))


GRADE_FIELDS = ("sha", "score", "max_score", "status", "reasons", "failed_cells", "errors")   # not timings


def _records(root):
    data = json.loads((root / "cohort_state.json").read_text())
    return {(a, s): {k: r.get(k) for k in GRADE_FIELDS} for a, per in data.items() for s, r in per.items()}


def _same(one: Path, multi: Path):
    # the records first: where the two differ, their reasons say why
    assert _records(one) == _records(multi)
    assert _rows(one / "flags.csv") == _rows(multi / "flags.csv")
    assert _rows(one / "grades.csv") == _rows(multi / "grades.csv")
    assert gradebook_dump(f"sqlite:///{one / 'gradebook.db'}") == gradebook_dump(f"sqlite:///{multi / 'gradebook.db'}")
    for (a, s), r in _records(one).items():
        if r["status"] != "ungradable":
            assert (multi / "autograded" / s / a / f"{a}.ipynb").exists(), (a, s)


@pytest.mark.slow
@pytest.mark.xdist_group("cohort")
def test_slurm_array_and_merge_equal_one_machine(slurm, tmp_path):
    env = {**slurm, "PYTHONPATH": f"{REPO / 'autograder'}:{REPO}", "MPLBACKEND": "Agg"}
    lms = tmp_path / "lms.zip"
    plan = synth.make_cohort(lms, EXERCISES, [A], 3, seed=11)
    one, multi = tmp_path / "one", tmp_path / "multi"
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "awb_grader", "cohort", str(lms), "--course", str(one), "--exercises",
                        "04", "--workers", "2", "--no-feedback"], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    t_one = time.perf_counter() - t0

    job = {"SUBMISSIONS": str(lms), "COURSE": str(multi), "SHARDS": "2", "WORKERS": "1", "EXERCISES": "04",
           "AWB_PYTHON": sys.executable, "AWB_REPO": str(REPO)}
    t0 = time.perf_counter()
    array, merge = _submit(env, tmp_path, **job)
    t_slurm = time.perf_counter() - t0
    logs = "\n".join(p.read_text()[-1500:] for p in sorted((multi / "cluster" / "logs").glob("*.out")))
    assert _state(array, env) == "COMPLETED" and _state(merge, env) == "COMPLETED", logs
    assert len(shards.shard_roots(multi)) == 2
    shard_sets = [set(_records(p)) for p in shards.shard_roots(multi)]
    assert shard_sets[0] and shard_sets[1] and not shard_sets[0] & shard_sets[1]
    assert len(_records(one)) == len(plan)
    _same(one, multi)
    print(
        f"\nSlurm: {len(plan)} notebooks; one machine (2 workers) {t_one:.0f} s; "
        f"array of 2 shards (both at once on the node's 2 CPUs) + merge job {t_slurm:.0f} s; "
        "merged course == one-machine course"
    )

    # merging again changes nothing
    r = subprocess.run([sys.executable, "-m", "awb_grader", "merge", "--course", str(multi)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    _same(one, multi)

    # a shard lost: re-run it alone (and the merge after it), the course is the same
    lost = shards.shard_root(multi, 1, 2)
    shutil.rmtree(lost)
    _submit(env, tmp_path, **job, ONLY="1")
    assert lost.exists()
    _same(one, multi)
