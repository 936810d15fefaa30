"""One warm, confined process per submission (``awb_grader/isolation/zygote.py``).

Every kernel and every replay of a grading process is a child of its zygote, confined by itself in
the isolation tier that runs here before the student's first line. These tests hold that path to
what a new process per submission gave:

* a kernel from the zygote is a process of its own (its folder, its environment, its own random
  seeds; PyTorch preloaded, nothing of the course), and interrupts work;
* a variable read when Python starts that differs from the zygote's gets a zygote started with it;
* what a submission leaves behind (files, modules, patches, threads, processes, globals,
  environment variables) never reaches the next one graded by the same worker: the honest
  student's grade, outputs and environment are those of a cold run (a new process per kernel);
* a child cannot signal, ptrace or read the memory of the zygote or of a sibling, nor ask the
  zygote for a child of its own;
* a child that crashes, hangs, fork-bombs or runs out of memory ends alone; a zygote that died is
  started again and the batch goes on; nothing is left running.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import nbformat
import pytest

from awb_grader.core.course import EXERCISES, Course
from awb_grader.devtools.variants import own_settings, student_notebook
from awb_grader.isolation import sandbox, tiers, zygote

A = "04_queries_keys_values"
RELEASE = EXERCISES / A / f"{A}.ipynb"


@pytest.fixture
def tier(tmp_path, monkeypatch):
    """This test process configured as a grading process (the tier that runs here; resource limits
    only where none can), with a private folder of its own; its zygote stopped afterwards."""
    monkeypatch.setenv("AWB_PRIVATE_RUNTIME", str(sandbox.short_socket_root()))
    monkeypatch.delenv("AWB_KERNEL_LOG", raising=False)
    (Path(os.environ["AWB_PRIVATE_RUNTIME"]) / "sock").mkdir()
    mode = tiers.configure(unprotected=not tiers.protected(), say=lambda *a: None)
    if os.geteuid() == 0:
        sandbox.own_uid()
    yield mode
    zygote.stop()


def _folder(tmp_path, name="ada") -> Path:
    """A submission's folder as nbgrader lays it out (``autograded/<student>/<exercise>``)."""
    cwd = tmp_path / "autograded" / name / A
    cwd.mkdir(parents=True)
    return cwd


def _run(code: str, cwd: Path, *args: str, plan_extra: dict | None = None, timeout: float = 60,
         prepare: bool = True):
    """Run ``code`` as a child of this process's zygote, confined as a kernel would be in ``cwd``
    (``prepare``: after what grading does first, which ends every process left of the uid);
    returns (exit status, what it printed)."""
    z = sandbox.zygote_for(cwd)
    assert z is not None, zygote.cold_reason(os.environ.get("AWB_SANDBOX_MODE", ""))
    if prepare:
        sandbox.prepare_run(str(cwd), warm=True)
    plan, env = sandbox.child_plan(str(cwd))
    plan.update(plan_extra or {})
    r, w = os.pipe()
    child = z.fork("exec", [code, *args], str(cwd), env, plan, [os.open(os.devnull, os.O_RDONLY), w, w])
    os.close(w)
    status = child.wait(timeout)
    if status is None:
        child.kill()
    out = b""
    while chunk := os.read(r, 1 << 16):
        out += chunk
    os.close(r)
    return status, out.decode(errors="replace")


# -- a kernel of the zygote, through nbclient and the course's kernel spec --------------------------
PROBE = """
import os, sys, numpy
print(os.getcwd() == {cwd!r}, sys.path[0] == {cwd!r}, os.environ.get('AWB_ZYGOTE_PROBE'))
print('seed', numpy.random.randint(1 << 30))
print('torch' in sys.modules, 'attention_workbook' in sys.modules, 'awb_grader' in sys.modules)
print(sorted(k for k in os.environ if k.startswith('AWB_ZYGOTE')))
"""


def _kernel_run(cells, cwd, timeout=60):
    from nbclient import NotebookClient

    from awb_grader.core.kernel_manager import SandboxKernelManager

    sandbox.zygote_for(cwd)
    sandbox.prepare_run(str(cwd), warm=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    km = SandboxKernelManager(kernel_name=sandbox.KERNEL_NAME, transport="ipc",
                              ip=str(Path(os.environ["AWB_PRIVATE_RUNTIME"]) / "sock" / "kernel-ipc"))
    NotebookClient(nb, km=km, timeout=timeout, interrupt_on_timeout=True, allow_errors=True,
                   resources={"metadata": {"path": str(cwd)}}).execute(cwd=str(cwd))
    return nb


def _text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.sandbox
def test_a_kernel_from_the_zygote_is_a_fresh_process_of_its_own(tier, tmp_path, monkeypatch):
    a, b = _folder(tmp_path, "ada"), _folder(tmp_path, "ben")
    sandbox.zygote_for(a)
    monkeypatch.setenv("AWB_ZYGOTE_PROBE", "seen")       # (set after the zygote started; never passed on)
    monkeypatch.setenv("AWB_LATE_PROBE", "seen")          # set after the zygote started: a kernel sees it
    probe = PROBE.replace("AWB_ZYGOTE_PROBE", "AWB_LATE_PROBE")
    nb_a = _kernel_run([probe.format(cwd=str(a))], a)
    nb_b = _kernel_run([probe.format(cwd=str(b)), "import time\nwhile True: time.sleep(0.01)", "print('after')"],
                       b, timeout=3)
    lines_a, lines_b = _text(nb_a.cells[0]).splitlines(), _text(nb_b.cells[0]).splitlines()
    log = Path(os.environ["AWB_PRIVATE_RUNTIME"]) / "kernel.log"
    said = log.read_text()[-2000:] if log.exists() else "(no kernel log)"
    assert lines_a[0] == "True True seen" and lines_b[0] == "True True seen", (lines_a, lines_b, said)
    assert lines_a[1] != lines_b[1], "two kernels drew the same NumPy seed"
    assert lines_a[2] == "True False False", "torch preloaded (the zygote's); nothing of the course or the grader"
    assert lines_a[3] == "[]", "the zygote's socket and token never reach a kernel"
    # the looping cell was interrupted at its time limit, and the same kernel went on
    assert any(o.output_type == "error" and o.ename == "KeyboardInterrupt" for o in nb_b.cells[1].outputs)
    assert _text(nb_b.cells[2]) == "after\n"


@pytest.mark.sandbox
def test_a_variable_read_at_start_gets_a_zygote_started_with_it(tier, tmp_path, monkeypatch):
    import subprocess
    import sys

    cwd = _folder(tmp_path)
    first = sandbox.zygote_for(cwd)
    assert sandbox.zygote_for(cwd) is first                         # the same one while nothing changed
    monkeypatch.setenv("PYTHONHASHSEED", "123")               # read when Python starts
    second = sandbox.zygote_for(cwd)
    assert second is not first and not first.alive()
    status, out = _run("import os, sys; print(os.environ['PYTHONHASHSEED'], hash('attention'), "
                       "'torch' in sys.modules)", cwd)
    fresh = subprocess.run([sys.executable, "-c", "print(hash('attention'))"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": "123"}).stdout.strip()
    assert status == 0 and out.split() == ["123", fresh, "True"], out


# -- nothing one submission leaves reaches the next ---------------------------------------------------
LITTER = '''
import os, sys, subprocess, threading, time, types, tempfile, builtins, torch
open("litter.txt", "w").write("mine")                       # in its own folder
open(os.path.join(tempfile.gettempdir(), "litter.txt"), "w").write("mine")     # in its temporary folder
try:
    open("/tmp/awb-litter.txt", "w").write("mine")          # in the machine's /tmp (refused or private)
except OSError:
    pass
sys.modules["litter"] = types.ModuleType("litter")          # a module
torch.softmax = lambda *a, **k: "patched"                   # a monkeypatched torch function
threading.Thread(target=lambda: time.sleep(600), name="litter", daemon=True).start()     # a thread
subprocess.Popen(["sleep", "600"], start_new_session=True)  # a detached child
builtins.LITTER = "global"                                  # a changed global
os.environ["AWB_LITTER"] = "env"                            # an environment variable
'''
FINGERPRINT = '''
import os, sys, builtins, tempfile, threading, torch
mine = os.getuid()
others = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) not in (os.getpid(), os.getppid()):
        try:
            uid = int(next(ln for ln in open(f"/proc/{pid}/status") if ln.startswith("Uid:")).split()[1])
            cmd = open(f"/proc/{pid}/cmdline", errors="replace").read().split("\\0")[0]
        except (OSError, StopIteration):
            continue
        if uid == mine and "sleep" in cmd:
            others.append(cmd)
print("files here:", sorted(f for f in os.listdir(".") if not f.endswith(".ipynb")))
print("temporary folder litter:", "litter.txt" in os.listdir(tempfile.gettempdir()))
print("machine /tmp litter:", os.path.exists("/tmp/awb-litter.txt"))
print("module:", "litter" in sys.modules, "softmax:", torch.softmax is torch._C._VariableFunctions.softmax)
print("thread:", any(t.name == "litter" for t in threading.enumerate()), "global:", hasattr(builtins, "LITTER"),
      "env:", "AWB_LITTER" in os.environ)
print("sleeping processes of my uid:", others)
'''


def _with_cell(nb, code: str):
    nb.cells.append(nbformat.v4.new_code_cell(code))
    return nb


@pytest.mark.slow
@pytest.mark.sandbox
def test_what_a_submission_leaves_never_reaches_the_next(tmp_path, monkeypatch):
    """One worker grades a submission that leaves behind everything it can, then an honest one
    (with a cell that prints what it finds around it); a cold run (a new process per kernel and
    replay, AWB_COLD=1) grades the honest one alone: same grade, same outputs. Where no new
    process can start as the sandbox's uid (``sandbox.cold_blocked``: Python under a closed
    /root, Landlock tier), a new zygote that grades the honest one alone stands for the cold run."""
    from awb_grader.cohort.pipeline import grade_submissions

    monkeypatch.setenv("AWB_PRIVATE_RUNTIME", str(sandbox.short_socket_root()))
    files = {}
    for name, extra in (("litter", LITTER), ("honest", FINGERPRINT)):
        files[name] = tmp_path / "in" / f"{name}.ipynb"
        files[name].parent.mkdir(exist_ok=True)
        nbformat.write(_with_cell(student_notebook(RELEASE, A), extra), files[name])

    def grade(folder, students, cold):
        monkeypatch.setenv(zygote.COLD_ENV, "1" if cold else "0")
        course = Course(folder, release_dir=folder / "release", extra=own_settings())
        course.generate_assignment(A)
        try:
            rows = grade_submissions(course, A, {s: files[s] for s in students}, feedback=False, progress=False)
        finally:
            zygote.stop()
        nb = nbformat.read(course.path("autograded", "honest", A) / f"{A}.ipynb", as_version=4)
        return next(r for r in rows if r.student == "honest"), nb

    warm_row, warm_nb = grade(tmp_path / "warm", ["litter", "honest"], cold=False)
    cold_row, cold_nb = grade(tmp_path / "cold", ["honest"], cold=sandbox.cold_blocked() is None)
    assert (warm_row.score, warm_row.status, warm_row.reasons) == (cold_row.score, cold_row.status,
                                                                    cold_row.reasons)
    assert warm_row.score == warm_row.max_score

    def outputs(nb):
        """Per code cell: what it printed (the streams joined: how a kernel splits them into messages
        is timing) and its other outputs."""
        def one(cell):
            streams = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
            rest = [(o.output_type, o.get("ename", ""), o.get("evalue", "")) for o in cell.outputs
                    if o.output_type != "stream"]
            return re.sub(r"0x[0-9a-f]+", "0x", streams), rest

        return [one(c) for c in nb.cells if c.cell_type == "code"]

    assert outputs(warm_nb) == outputs(cold_nb)
    seen = _text(warm_nb.cells[-1])
    assert "files here: ['timestamp.txt']" in seen and "temporary folder litter: False" in seen, seen
    assert "machine /tmp litter: False" in seen
    assert "module: False softmax: True" in seen and "thread: False global: False env: False" in seen, seen
    assert "sleeping processes of my uid: []" in seen, seen


# -- what a child cannot do to the zygote or a sibling ----------------------------------------------------
ATTEMPTS = '''
import ctypes, os, signal, sys
sibling, zygote = int(sys.argv[1]), os.getppid()
libc = ctypes.CDLL(None, use_errno=True)
for name, pid in (("zygote", zygote), ("sibling", sibling)):
    for what, act in (
        ("signal", lambda: os.kill(pid, 0)),
        ("ptrace", lambda: libc.ptrace(16, pid, 0, 0) == 0 or (_ for _ in ()).throw(OSError(ctypes.get_errno(), "")) ),
        ("memory", lambda: open(f"/proc/{pid}/mem", "rb").read(1)),
        ("environ", lambda: open(f"/proc/{pid}/environ", "rb").read(1)),
        ("process_vm_readv", lambda: libc.process_vm_readv(pid, 0, 0, 0, 0, 0) == 0
                                     or (_ for _ in ()).throw(OSError(ctypes.get_errno(), ""))),
    ):
        try:
            act()
            print(name, what, "ALLOWED")
        except OSError as e:
            print(name, what, "denied", e.errno)
'''
ASK = '''
import json, os, socket, struct, sys
path = sys.argv[1]
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    data = json.dumps({"token": "guess", "kind": "exec", "argv": ["print(1)"], "cwd": "/", "env": {},
                       "plan": {}}).encode()
    socket.send_fds(s, [struct.pack(">I", len(data)) + data], [0, 1, 2])
    n = struct.unpack(">I", s.recv(4))[0]
    print("answer", s.recv(n).decode())
except OSError as e:
    print("zygote socket: denied", e.errno)
'''


@pytest.mark.sandbox
def test_a_child_cannot_signal_ptrace_or_read_the_zygote_or_a_sibling(tier, tmp_path):
    if tier == "limits":
        pytest.skip("no isolation tier here: children are not confined (grades unprotected)")
    a, b = _folder(tmp_path, "ada"), _folder(tmp_path, "ben")
    z = sandbox.zygote_for(a)
    sandbox.prepare_run(str(a), warm=True)
    plan, env = sandbox.child_plan(str(a))
    sibling = z.fork("exec", ["import time; time.sleep(120)"], str(a), env, plan, [0, 1, 2])
    try:
        # (not as grading starts a child, which first ends every process left of its uid: the sibling)
        if plan.get("uid") is not None:
            sandbox.chown_tree(b, plan["uid"])
        status, out = _run(ATTEMPTS, b, str(sibling.pid), prepare=False)
        assert status == 0, out
        lines = out.strip().splitlines()
        assert len(lines) == 10 and not [ln for ln in lines if "ALLOWED" in ln], out
        status, out = _run(ASK, b, z.path, prepare=False)
        assert "answer" not in out or '"refused"' in out, out      # the folder is closed, or the token refused
        assert status == 0 and sibling.poll() is None and z.alive()
    finally:
        sibling.kill()


@pytest.mark.sandbox
def test_a_child_that_crashes_hangs_stops_forkbombs_or_hogs_memory_ends_alone(tier, tmp_path):
    cwd = _folder(tmp_path)
    z = sandbox.zygote_for(cwd)
    crash = "import ctypes; ctypes.string_at(0)"
    status, _ = _run(crash, cwd)
    assert status == -signal.SIGSEGV and z.alive()
    t0 = time.monotonic()
    status, _ = _run("while True: pass", cwd, plan_extra={"life_s": 2})      # its life limit ends it
    assert status == -signal.SIGKILL and time.monotonic() - t0 < 30 and z.alive()
    t0 = time.monotonic()                   # one that stops itself is ended at once (not at its life limit)
    status, out = _run("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\nprint('resumed')", cwd, timeout=20)
    assert status == -signal.SIGKILL and out == "" and time.monotonic() - t0 < 10 and z.alive(), (status, out)
    if tier != "limits":
        bomb = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
                "            time.sleep(30); os._exit(0)\n        n += 1\nexcept OSError:\n    print('stopped', n)")
        status, out = _run(bomb, cwd)
        assert status == 0 and out.startswith("stopped") and int(out.split()[1]) < 300, out
    hog = ("x = []\ntry:\n    while True:\n        x.append(bytearray(1 << 26))\n"
           "except MemoryError:\n    print('stopped')")
    status, out = _run(hog, cwd, plan_extra={"rlimits": {**sandbox.child_plan(str(cwd))[0]["rlimits"],
                                                         "AS": 6 << 30}})
    assert status == 0 and out.strip() == "stopped", out
    status, out = _run("print('still here')", cwd)
    assert (status, out) == (0, "still here\n") and sandbox.zygote_for(cwd) is z


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_zygote_that_died_is_started_again_and_the_batch_goes_on(tmp_path, monkeypatch):
    from awb_grader.cohort.pipeline import grade_submissions

    monkeypatch.setenv("AWB_PRIVATE_RUNTIME", str(sandbox.short_socket_root()))
    course = Course(tmp_path / "course", release_dir=tmp_path / "course" / "release", extra=own_settings())
    course.generate_assignment(A)
    p = tmp_path / "ada.ipynb"
    nbformat.write(student_notebook(RELEASE, A), p)
    try:
        first = grade_submissions(course, A, {"ada": p}, feedback=False, progress=False)[0]
        dead = zygote._CURRENT
        dead.proc.kill()
        dead.proc.wait()
        again = grade_submissions(course, A, {"ben": p}, feedback=False, progress=False)[0]
        assert zygote._CURRENT is not dead and zygote._CURRENT.alive()
    finally:
        zygote.stop()
    assert (first.score, again.score) == (first.max_score, first.max_score), (first, again)


TEMPDIR_PROBE = "import os, tempfile; print(tempfile.gettempdir(), os.environ.get('TMPDIR'))"


@pytest.mark.sandbox
def test_a_child_asks_for_its_own_temporary_folder(tmp_path, monkeypatch):
    """A zygote forked from a platform's grading process (the Landlock tier) inherits what that process
    asked tempfile already (its /tmp, closed to a child there): each child asks again, from its own
    TMPDIR. Before, PyTorch's compiler in the honest upload of exercise 08 on Gradescope failed with
    "Permission denied: '/tmp/torchinductor_uid_...'" and the upload lost a point."""
    import tempfile

    monkeypatch.setenv(tiers.FORCE_ENV, "landlock")
    if tiers.detect().name != "landlock":
        pytest.skip("the Landlock tier cannot run here: " + tiers.detect().describe())
    monkeypatch.setenv("AWB_PRIVATE_RUNTIME", str(sandbox.short_socket_root()))
    monkeypatch.delenv("AWB_KERNEL_LOG", raising=False)
    (Path(os.environ["AWB_PRIVATE_RUNTIME"]) / "sock").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")      # what the grading process asked before the fork
    tiers.configure(say=lambda *a: None)
    if os.geteuid() == 0:
        sandbox.own_uid()
    cwd = _folder(tmp_path)
    try:
        z = sandbox.zygote_for(cwd, fork=True)
        assert isinstance(z.proc, zygote._Forked)
        sandbox.prepare_run(str(cwd), warm=True)
        plan, env = sandbox.child_plan(str(cwd))
        r, w = os.pipe()
        child = z.fork("exec", [TEMPDIR_PROBE], str(cwd), env, plan, [os.open(os.devnull, os.O_RDONLY), w, w])
        os.close(w)
        assert child.wait(60) == 0
        with os.fdopen(r) as fh:
            asked, own = fh.read().split()
    finally:
        zygote.stop()
    assert asked == own != "/tmp"


@pytest.mark.sandbox
def test_a_kernel_ends_when_its_zygote_dies(tier, tmp_path):
    """ipykernel's parent poller, given the zygote as the kernel's parent: a kernel whose zygote was
    killed (its children orphaned) ends by itself instead of waiting for a grader that is gone."""
    import psutil
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    from awb_grader.core.kernel_manager import KERNELS

    cwd = _folder(tmp_path)
    z = sandbox.zygote_for(cwd)
    sandbox.prepare_run(str(cwd), warm=True)
    specs = KernelSpecManager()
    specs.kernel_dirs = [str(KERNELS), *specs.kernel_dirs]
    km = KernelManager(kernel_name=sandbox.KERNEL_NAME, kernel_spec_manager=specs, transport="ipc",
                       ip=str(Path(os.environ["AWB_PRIVATE_RUNTIME"]) / "sock" / "kernel-ipc"))
    km.start_kernel(cwd=str(cwd))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        kids = [p.pid for p in psutil.Process(z.proc.pid).children(recursive=True)]
        assert kids and km.is_alive()
        # the zygote dies, its kernel orphaned (in bubblewrap: the zygote inside the sandbox, whose PID
        # namespace outlives it; its own process is the zygote's first ``serve`` under the sandbox)
        serving = [p for p in [z.proc.pid, *kids] if "serve" in psutil.Process(p).cmdline()]
        zygote_pid = next(p for p in serving if psutil.Process(p).ppid() not in serving)
        kids = [p for p in kids if p != zygote_pid and p in serving]
        assert kids, "no child of the zygote"
        os.kill(zygote_pid, signal.SIGKILL)
        deadline = time.time() + 15
        while time.time() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                             for p in kids):
            time.sleep(0.2)
        assert not [p for p in kids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_nothing_is_left_running(tier, tmp_path):
    """The zygote and its children end with it; its socket and token leave the environment."""
    import psutil

    cwd = _folder(tmp_path)
    z = sandbox.zygote_for(cwd)
    sandbox.prepare_run(str(cwd), warm=True)
    plan, env = sandbox.child_plan(str(cwd))
    child = z.fork("exec", ["import time; time.sleep(120)"], str(cwd), env, plan, [0, 1, 2])
    family = [z.proc.pid, *(p.pid for p in psutil.Process(z.proc.pid).children(recursive=True))]
    assert len(family) >= 2 and child.poll() is None
    zygote.stop()
    deadline = time.time() + 10
    while time.time() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                         for p in family):
        time.sleep(0.1)
    assert not [p for p in family if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert zygote.SOCKET_ENV not in os.environ and zygote.TOKEN_ENV not in os.environ
