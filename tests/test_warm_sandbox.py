"""Warm kernels in the sandbox: every process the worker's zygote forks (a grading kernel or an
outside-verdict replay) is jailed as a new sandboxed kernel would be, and nothing one of them
does reaches the next (``warm._jailed``, ``sandbox.start_zygote``).

The jail is probed from inside: student code in a replay process writes what it sees into its
own folder, and the test reads it. Needs bubblewrap and root (what warm sandboxed kernels need;
elsewhere the grader starts a new sandboxed kernel per notebook, tested by the cohort tests)."""

import csv
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from awb_grader import sandbox, verdict
from awb_grader.course import EXERCISES, ensure_kernel_path
from awb_grader.variants import solution_cells, student_notebook

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("warm_sandbox"),    # one worker: the probes count one uid's processes
    pytest.mark.skipif(not (sandbox.bwrap_works() and os.geteuid() == 0),
                       reason="warm sandboxed kernels need bubblewrap and root"),
]
WORKER = 7          # sandbox uid 60007: no other test's kernels run under it
UID = 60000 + WORKER
A = "04_queries_keys_values"

PROBE = r'''
import json, os, resource, socket, sys
def _status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return line.split()[1]
def _read(path):
    try:
        return open(path).read()
    except OSError as e:
        return type(e).__name__
def _can(f):
    try:
        f()
        return "yes"
    except OSError as e:
        return type(e).__name__
report = {
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "pid": os.getpid(),
    "cap_eff": _status("CapEff"), "cap_prm": _status("CapPrm"), "cap_bnd": _status("CapBnd"),
    "no_new_privs": _status("NoNewPrivs"),
    "rlimit_as": resource.getrlimit(resource.RLIMIT_AS)[0], "rlimit_nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0],
    "rlimit_core": resource.getrlimit(resource.RLIMIT_CORE)[0],
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "tmp": sorted(os.listdir("/tmp")), "shm": sorted(os.listdir("/dev/shm")),
    "cwd": os.getcwd(), "students": sorted(os.listdir(WORK)),
    "zygote_folder": _can(lambda: os.listdir(ZDIR)),
    "zygote_socket": _can(lambda: socket.socket(socket.AF_UNIX).connect(ZSOCK)),
    "network": _can(lambda: socket.create_connection(("1.1.1.1", 53), timeout=2)),
    "write_repo": _can(lambda: open(REPO + "/PWNED.txt", "w")),
    "shared": _read(SHARED), "write_shared": _can(lambda: open(SHARED, "a")),
    "init": os.path.basename(open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode()),
}
json.dump(report, open("probe.json", "w"))
'''

# leaves a process behind (a new session, twice forked) and an IPython startup file in /tmp:
# both would reach the next student if anything survived the kernel
LEFTOVERS = r'''
import os, subprocess, time
subprocess.Popen(["sleep", "300"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(0.2)
    os._exit(0)
os.makedirs("/tmp/ipython/profile_default/startup", exist_ok=True)
open("/tmp/ipython/profile_default/startup/00-next.py", "w").write("GOTCHA = 1\n")
open("/tmp/left.txt", "w").write("from the previous student")
open("probe.json", "w").write("{}")
'''


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """A grading worker's environment (sandbox settings, runtime and socket folders) and its
    zygote, as ``parallel._init_worker`` makes them."""
    saved = dict(os.environ)
    root = tmp_path_factory.mktemp("jail")
    # a file the sandbox binds on its own, under /tmp (as the helper package's __init__.py is
    # when the checkout lies there): the jail must keep it where it was, read-only
    shared = root / "shared-file.txt"
    shared.write_text("read me")
    readonly = sandbox._readonly
    monkey = pytest.MonkeyPatch()
    monkey.setattr(sandbox, "_readonly", lambda *more: [*readonly(*more), shared])
    ensure_kernel_path()
    sandbox.configure(root / "course", "bwrap", say=lambda *a: None)
    sockets = sandbox.short_socket_root()
    sandbox.worker_environment(WORKER, root / "runtime", sockets / f"w{WORKER}")
    work = root / "course" / "autograded"
    zygote = sandbox.start_zygote(work, sockets / f"w{WORKER}")
    try:
        yield SimpleNamespace(work=work, zygote=zygote, zdir=Path(zygote.path).parent, shared=shared)
    finally:
        monkey.undo()
        zygote.stop()
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(sockets, ignore_errors=True)


def _run(worker, student, cells):
    """Run ``cells`` as a student's code in a replay process forked from the zygote; return
    what the probe wrote into the student's folder."""
    cwd = worker.work / student / A
    cwd.mkdir(parents=True)
    consts = (f"WORK = {str(worker.work)!r}\nZDIR = {str(worker.zdir)!r}\nZSOCK = {worker.zygote.path!r}\n"
              f"REPO = {str(EXERCISES.parent)!r}\nSHARED = {str(worker.shared)!r}\n")
    replay = verdict.Replay([consts, *cells], cwd, timeout=30)
    try:
        assert isinstance(replay.names, dict)
        assert replay.proc.args[1:] == ["-m", "awb_grader.sandbox", "--replay"], "not handed to the zygote"
    finally:
        replay.close()
    return json.loads((cwd / "probe.json").read_text())


def _bound_under_tmp():
    """/tmp's entries a new sandboxed kernel has too: the first folders of what the sandbox binds
    there (the kernel's own folder and socket folder; Python, where it lies under /tmp)."""
    paths = [os.environ["AWB_PRIVATE_RUNTIME"], os.environ[sandbox.ZYGOTE_ROOT_ENV],
             *map(str, sandbox._readonly())]
    return {Path(p).parts[2] for p in paths if Path(p).parts[1:2] == ("tmp",)}


def _processes_of(uid):
    pids = []
    for p in Path("/proc").iterdir():
        try:
            status = (p / "status").read_text()
        except OSError:
            continue
        if any(line.split()[1:2] == [str(uid)] for line in status.splitlines() if line.startswith("Uid:")):
            pids.append(int(p.name))
    return pids


def test_a_forked_process_is_jailed_like_a_new_sandboxed_kernel(worker):
    got = _run(worker, "ada", [PROBE])
    limits = sandbox.limits_of()
    # the sandbox's unprivileged uid, no capability at all, no way to gain one
    assert (got["uid"], got["gid"], got["groups"]) == (UID, UID, [])
    assert got["cap_eff"] == got["cap_prm"] == got["cap_bnd"] == "0000000000000000"
    assert got["no_new_privs"] == "1"
    assert got["rlimit_as"] == limits["memory_mb"] * 2**20 and got["rlimit_nproc"] == limits["nproc"]
    assert got["rlimit_core"] == 0
    # its own PID namespace: pid 1 (the jail's init) and itself; nothing of the zygote's
    assert got["pid"] == 2 and got["processes"] == [1, 2]
    assert got["init"].startswith("python"), got["init"]       # forked by the zygote (bwrap's, if new)
    # its own folder, nothing of other students', of the zygote, of the repository's files
    assert got["cwd"] == str(worker.work / "ada" / A)
    assert got["students"] == ["ada"]
    assert got["zygote_folder"] != "yes" and got["zygote_socket"] != "yes"
    assert set(got["tmp"]) - {"mpl"} <= _bound_under_tmp(), got["tmp"]     # (the folders holding its binds)
    assert got["shm"] == []
    assert got["network"] != "yes" and got["write_repo"] != "yes"
    assert got["shared"] == "read me" and got["write_shared"] != "yes"    # kept where it was, read-only


def test_nothing_a_student_leaves_reaches_the_next(worker):
    _run(worker, "mallory", [LEFTOVERS])
    deadline = time.monotonic() + 10
    while _processes_of(UID) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_of(UID) == [], "a process of the sandboxed student outlived its kernel"
    got = _run(worker, "bob", [PROBE])
    assert "ipython" not in got["tmp"] and "left.txt" not in got["tmp"], "the next student's /tmp is not new"
    assert set(got["tmp"]) - {"mpl"} <= _bound_under_tmp(), got["tmp"]
    assert got["students"] == ["bob"]            # mallory's folder is still on disk, not in bob's view
    assert (worker.work / "mallory" / A / "probe.json").exists()


def test_a_jail_that_cannot_be_built_gives_a_new_sandboxed_process(worker, monkeypatch):
    """If the zygote cannot jail a process (here: a uid the system cannot have), the launcher
    hears it before any student code runs and starts a new sandboxed process instead: the
    student is graded as before, only slower."""
    real = sandbox.limits_of
    monkeypatch.setattr(sandbox, "limits_of", lambda env=None: {**real(env), "uid": 2**40})
    for var in (sandbox.ZYGOTE_ENV, sandbox.ZYGOTE_ROOT_ENV):
        monkeypatch.setenv(var, os.environ[var])        # (start_zygote points them at the new one)
    sockets = sandbox.short_socket_root()
    broken = sandbox.start_zygote(worker.work, sockets / f"w{WORKER}")
    try:
        # what the zygote answers a launcher
        cwd = worker.work / "dora" / A
        cwd.mkdir(parents=True)
        ask = ("import json, sys\nfrom awb_grader import warm\n"
               "print(warm.handoff(sys.argv[1], json.loads(sys.argv[2])), file=sys.stderr)")
        answer = subprocess.run([sys.executable, "-c", ask, broken.path,
                                 json.dumps(sandbox.warm_request("replay", [], str(cwd)))],
                                input="", capture_output=True, text=True, timeout=120)
        assert "the jail could not be built (OverflowError" in answer.stderr, answer.stderr[-2000:]
        got = _run(worker, "carl", [PROBE])
    finally:
        broken.stop()
        shutil.rmtree(sockets, ignore_errors=True)
    assert got["init"] == "bwrap"                       # a new sandbox, as without a zygote
    assert (got["uid"], got["cap_eff"], got["students"]) == (UID, "0000000000000000", ["carl"])


def test_a_symlink_left_in_the_socket_folder_is_removed_not_followed(worker, tmp_path):
    """The kernel's socket folder is writable to the kernel; the next launcher (root) must not
    copy the connection file through what the previous kernel left there."""
    sock = Path(os.environ["AWB_PRIVATE_RUNTIME"]) / "sock"
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (sock / "connection.json").unlink(missing_ok=True)
    (sock / "connection.json").symlink_to(target)
    (sock / "junk").mkdir(exist_ok=True)
    sandbox._empty_folder(sock)
    assert sock.is_dir() and list(sock.iterdir()) == []
    assert target.read_text() == "keep me"


def _quiet(*args):
    pass


def _cohort_in_fresh_process(source, root, **kw):
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from awb_grader import cohort

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(cohort.run_cohort, source, root, **kw).result()


# (the outside verdict runs the cell again, where nbgrader has made the file read-only)
KERNEL_PROBE = r'''
import json, os, sys
if not os.path.exists("kernel_probe.json"):
    json.dump({"torch_preloaded": "torch" in sys.modules, "uid": os.getuid(), "pid": os.getpid(),
               "grader_modules": sorted(m for m in sys.modules if m.startswith("awb_grader")),
               "students": sorted(os.listdir(os.path.dirname(os.getcwd()) + "/.."))},
              open("kernel_probe.json", "w"))
'''


def test_cohort_kernels_are_warm_and_jailed(tmp_path):
    """The cohort command's grading kernels: forked from the worker's zygote (PyTorch is in
    sys.modules before the notebook imports it), jailed, without the grader's modules; the
    grades are those of the reference."""
    release = EXERCISES / A / f"{A}.ipynb"
    first = next(iter(solution_cells(A)))
    probe = student_notebook(release, A, {first: KERNEL_PROBE + solution_cells(A)[first]})
    # the grader takes the largest notebook first: ada's (padded) before pia's
    padded = student_notebook(release, A, {first: "#" * 20000 + "\n" + solution_cells(A)[first]})
    src = tmp_path / "in.zip"
    with zipfile.ZipFile(src, "w") as zf:
        zf.writestr(f"ada_{A}.ipynb", nbformat.writes(padded))
        zf.writestr(f"pia_{A}.ipynb", nbformat.writes(probe))
    res = _cohort_in_fresh_process(src, tmp_path / "course", workers=1, timeout=30, progress=False,
                                   say=_quiet, exercises=["04"], feedback=False)
    got = json.loads((tmp_path / "course" / "autograded" / "pia" / A / "kernel_probe.json").read_text())
    assert got["torch_preloaded"] and got["grader_modules"] == []
    assert got["uid"] == 60000 and got["pid"] == 2
    assert got["students"] == ["pia"]                      # ada was graded first, by the same worker
    scores = {r.student: r.score for r in res.records}
    assert scores["pia"] == scores["ada"] == res.records[0].max_score
    with open(tmp_path / "course" / "grades.csv") as fh:
        assert {r["student_id"] for r in csv.DictReader(fh)} == {"ada", "pia"}
    # nothing of the run is left: the grading worker ends at once after its last notebook
    # (parallel._end_now) and its zygote's sandbox (bubblewrap, whose command line names the
    # course's folders) goes with it
    import subprocess
    import time

    for _ in range(50):
        left = [a for a in subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout.splitlines()
                if str(tmp_path) in a]
        if not left:
            break
        time.sleep(0.1)
    assert not left, left
