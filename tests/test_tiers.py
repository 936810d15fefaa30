"""The hostile set in every isolation tier, graded by the real ``cohort`` command in a real Docker
daemon (``docker_daemon.py``) as each kind of grading machine runs it:

* **bwrap**: a container that lets bubblewrap make namespaces (Docker's seccomp profile off,
  CAP_SYS_ADMIN and CAP_NET_ADMIN added: a privileged pod, a Slurm node, a workstation);
* **landlock, root**: Docker's defaults (its seccomp profile and capabilities, no network),
  as Gradescope and PrairieLearn start their graders: bubblewrap is refused there;
* **landlock, non-root**: a restricted Kubernetes pod (``--user 1000``, ``--cap-drop ALL``,
  ``no-new-privileges``, Docker's seccomp profile).

One zip of eleven students of exercise 04, graded with two workers in each: honest work, a
catalogued mistake, delegation to the workbook's reference, encoded tampering, a kernel that
freezes itself, a forger (writes the platforms' results.json, the gradebook and the grader's own
hidden checks), a detached process that outlives its kernel and keeps rewriting the autograded
notebook and results.json, reading solutions/ and another student's upload, network access, a
fork bomb and a memory hog. Every tier gives the same scores, flags and reasons; nothing of a
sandbox is left running once the command ends; the autograded notebooks are nbgrader's.

All the while two neighbours grade on the same machine (other containers, as a platform or a
cluster runs several at once), one as root and one as a restricted pod: the ``cohort`` command over
one student whose kernel holds as many processes as its sandbox may start. The kernel counts a
uid's processes across every container, so a sandbox uid shared with the root neighbour (before:
60000 + worker, in every run) would leave the tiers graded as root no process to start (CI saw
every student but one get 0, "nbgrader could not grade it"), and a process limit counted only
over the processes a pod can see (before) would leave the restricted pod's sandbox none.
``python tests/test_tiers.py`` prints the README's table.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from awb_grader import catalog
from awb_grader.catalog.shortcuts import shortcuts
from awb_grader.core.course import EXERCISES, REPO
from awb_grader.devtools.synth import FORKER, HOG, STUB
from awb_grader.devtools.variants import solution_cells, student_notebook
from awb_grader.isolation import tiers

A = "04_queries_keys_values"
RELEASE = EXERCISES / A / f"{A}.ipynb"
MISTAKE = next(m for m in catalog.mistakes(A) if m.id == "sdpa_no_scaling")
DELEGATION = next(s for s in shortcuts(A) if s.id == "sdpa_wraps_reference")
TAMPERING = next(s for s in shortcuts(A) if s.kind == "tampering: encoded")
FULL = 30.0
TIERS = {
    "bwrap": ["--security-opt", "seccomp=unconfined", "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN"],
    "landlock as root": [],
    "landlock as non-root": ["--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"],
}
KINDS = ["honest", "mistake", "delegation", "tampering", "frozen", "forger", "detached", "reader", "netty",
         "forker", "hog"]
FORGED = {"score": 30, "output": "forged", "tests": []}
FORGER = STUB + f'''
import json, os
for _path, _text in [("/autograder/results/results.json", {json.dumps(FORGED)!r}),
                     ("/grade/results/results.json", {json.dumps(FORGED)!r}),
                     ("{REPO / "autograder" / "awb_grader" / "hidden" / "ex04.py"}",
                      "def test_softmax_values(*a, **k):\\n    pass\\n")]:
    try:
        os.makedirs(os.path.dirname(_path), exist_ok=True)
        open(_path, "w").write(_text)
    except OSError as _e:
        print(_e)
try:
    import sqlite3
    _db = sqlite3.connect("../../../gradebook.db")
    _db.execute("UPDATE grade SET manual_score = 99")
    _db.commit()
except Exception as _e:
    print(_e)
'''
DETACHED = STUB + f'''
import subprocess, sys
_loop = """
import os, time
for _ in range(600):
    for _path, _text in [("/autograder/results/results.json", {json.dumps(FORGED)!r}),
                         ("{A}.ipynb", "forged by a process that outlived its kernel")]:
        try:
            open(_path, "w").write(_text)
        except OSError:
            pass
    time.sleep(0.1)
"""
subprocess.Popen([sys.executable, "-c", _loop], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''
READER = STUB + f'''
for _path in ["{REPO / "solutions" / A / (A + ".ipynb")}", "../../../submitted/honest/{A}/{A}.ipynb"]:
    try:
        print(len(open(_path).read()))
    except OSError as _e:
        print(_e)
'''
NETTY = '''
import socket, urllib.request
for _try in (lambda: urllib.request.urlopen("http://example.com", timeout=5).read(),
             lambda: socket.create_connection(("1.1.1.1", 80), timeout=5)):
    try:
        _try()
    except OSError as _e:
        print(_e)
'''
FREEZE = "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)   # the kernel stops itself\n"
HOLDER = """
import os, time
for _ in range(400):          # as many processes as the sandbox's limit lets it start, held
    try:
        _pid = os.fork()
    except OSError:
        break
    if _pid == 0:
        time.sleep(1200)
        os._exit(0)
time.sleep(1100)
"""
HELD = 250          # tasks (processes and threads) the neighbour's sandbox uid holds at least


def cases() -> dict[str, nbformat.NotebookNode]:
    sol = solution_cells(A)
    answers = list(sol)
    first = answers[0]

    def nothing_but(cells):
        return tuple(a for a in answers if a not in cells)

    def others(sc):
        return tuple(c for c in answers if c not in sc.cells) if sc.unanswered else ()

    net = student_notebook(RELEASE, A)
    net.cells.insert(4, nbformat.v4.new_code_cell(NETTY))
    return {
        "honest": student_notebook(RELEASE, A),
        "mistake": student_notebook(RELEASE, A, {MISTAKE.cell: MISTAKE.source, **MISTAKE.extra_cells}),
        "delegation": student_notebook(RELEASE, A, dict(DELEGATION.cells), unanswered=others(DELEGATION)),
        "tampering": student_notebook(RELEASE, A, dict(TAMPERING.cells), unanswered=others(TAMPERING)),
        "frozen": student_notebook(RELEASE, A, {first: FREEZE}),
        "forger": student_notebook(RELEASE, A, {first: FORGER}, unanswered=nothing_but([first])),
        "detached": student_notebook(RELEASE, A, {first: DETACHED}, unanswered=nothing_but([first])),
        "reader": student_notebook(RELEASE, A, {first: READER}),
        "netty": net,
        "forker": student_notebook(RELEASE, A, {"causal_mask": sol["causal_mask"] + FORKER}),
        "hog": student_notebook(RELEASE, A, {"softmax": sol["softmax"] + HOG}),
    }


# In each tier's container, after the cohort: a zygote of this tier forks a sleeping child, then a
# child that tries to signal, ptrace and read the memory of the zygote and of that sibling, and to ask
# the zygote for a child of its own (tests/test_zygote.py's attempts): "PROBE <tier> <what it printed>"
ZYGOTE_PROBE = """
import json, os, sys
from pathlib import Path
from awb_grader.isolation import sandbox, tiers, zygote
sys.path.insert(0, {tests!r})
from test_zygote import ASK, ATTEMPTS
os.environ["AWB_PRIVATE_RUNTIME"] = str(sandbox.short_socket_root())
(Path(os.environ["AWB_PRIVATE_RUNTIME"]) / "sock").mkdir()
mode = tiers.configure(say=lambda *a: None)
if os.geteuid() == 0:
    sandbox.own_uid()
a, b = (Path("/out/probe/autograded") / s / "04_queries_keys_values" for s in ("ada", "ben"))
for d in (a, b):
    d.mkdir(parents=True)
z = sandbox.zygote_for(a)
sandbox.prepare_run(str(a), warm=True)
plan, env = sandbox.child_plan(str(a))
sibling = z.fork("exec", ["import time; time.sleep(120)"], str(a), env, plan, [0, 1, 2])
if plan.get("uid") is not None:
    sandbox.chown_tree(b, plan["uid"])
said = []
for code, arg in ((ATTEMPTS, str(sibling.pid)), (ASK, z.path)):
    r, w = os.pipe()
    child = z.fork("exec", [code, arg], str(b), env, plan, [os.open(os.devnull, os.O_RDONLY), w, w])
    os.close(w)
    child.wait(60)
    out = b""
    while chunk := os.read(r, 65536):
        out += chunk
    said += out.decode(errors="replace").strip().splitlines()
print("PROBE", json.dumps({{"mode": mode, "said": said, "sibling": sibling.poll() is None, "zygote": z.alive()}}))
sibling.kill()
zygote.stop()
"""
LEFT = ("import psutil, os\n"
        "me = os.getpid()\n"
        "print('LEFT', [' '.join(p.cmdline())[:80] for p in psutil.process_iter() if p.pid not in (1, me)])\n")


def cohort_container(tier: str, notebooks: dict, inbox: Path, out: Path, workers: int,
                     timeout: int) -> tuple[list[str], str]:
    """(docker run arguments, bash script) of a container of ``tier`` that runs the cohort command
    over ``notebooks`` ({student: notebook}, zipped into ``inbox`` once) with its course in
    ``out``/course (``out`` made here, the tier's user's)."""
    lms = inbox / "lms.zip"
    if not lms.exists():
        inbox.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(lms, "w") as zf:
            for student, nb in notebooks.items():
                zf.writestr(f"{student}_{A}.ipynb", nbformat.writes(nb))
    out.mkdir(parents=True)
    if "--user" in TIERS[tier]:
        os.chown(out, 1000, 1000)
    script = (f"cd {REPO} && {sys.executable} -m awb_grader cohort /in/lms.zip --exercises 04 --workers {workers} "
              f"--course /out/course --timeout {timeout} --no-feedback")
    return ([*TIERS[tier], "-v", f"{REPO}:{REPO}:ro", "-v", f"{inbox}:/in:ro", "-v", f"{out}:/out",
             "-e", "HOME=/tmp", "-e", f"PYTHONPATH={REPO / 'autograder'}:{REPO}"], script)


def grade_in_tier(daemon, tmp: Path, tier: str, timeout: int = 20) -> dict:
    """The cohort command over the zip, in a container of ``tier``: {student: row of flags.csv},
    plus what was left running after it, the autograded notebooks and the container's output.
    ``timeout`` s a cell (tests/test_adversarial.py's and the demo's; an honest cell of exercise 04
    takes under 2 s there). The frozen kernel (SIGSTOP) does not wait for it: its zygote ends a child
    that stops itself at once (each tier's run: 42-51 s before, 26-29 s since)."""
    out = tmp / tier.replace(" ", "-")
    args, script = cohort_container(tier, cases(), tmp / "in", out, workers=2, timeout=timeout)
    (out / "zygote_probe.py").write_text(ZYGOTE_PROBE.format(tests=str(REPO / "tests")))
    run = daemon.run(args, ["bash", "-c", f"{script}; rc=$?; sleep 3; {sys.executable} -c \"{LEFT}\"; "
                                          f"{sys.executable} /out/zygote_probe.py; exit $rc"])
    rows = {}
    if (out / "course" / "flags.csv").exists():
        with open(out / "course" / "flags.csv") as fh:
            rows = {r["student"]: r for r in csv.DictReader(fh)}
    left = next((line for line in run["stdout"].splitlines() if line.startswith("LEFT ")), "LEFT ?")
    probe = next((json.loads(line[6:]) for line in run["stdout"].splitlines() if line.startswith("PROBE ")), None)
    return {"rows": rows, "run": run, "left": left, "course": out / "course", "probe": probe}


NEIGHBOURS = ("landlock as root", "landlock as non-root")
# the containers bind this machine's system: without bubblewrap here, none of them has it
NO_BWRAP = None if shutil.which("bwrap") else tiers.NOT_INSTALLED


def runnable() -> list[str]:
    """The tiers a container can run here: the bwrap tier only where this machine has bubblewrap."""
    return [t for t in TIERS if t != "bwrap" or not NO_BWRAP]


def of(graded: dict, tier: str) -> dict:
    """What ``tier`` graded; skipped, with the reason, where it cannot run here."""
    if tier not in graded:
        pytest.skip(f"the {tier} tier, in containers that bind this machine's system: {NO_BWRAP}")
    return graded[tier]


def neighbour(daemon, tmp: Path, tier: str) -> str:
    """Another grading run on this machine, in a container of its own in ``tier``: ``cohort``
    over one student whose first answer cell starts processes until its sandbox's limit refuses
    more, then holds them (the cell sleeps; cell timeout 1200 s). The container's id."""
    folder = tmp / f"neighbour {tier}".replace(" ", "-")
    nb = student_notebook(RELEASE, A, {next(iter(solution_cells(A))): HOLDER})
    args, script = cohort_container(tier, {"neighbour": nb}, folder / "in", folder / "out", workers=1, timeout=1200)
    return daemon.start(args, ["bash", "-c", script])


def held(daemon, container: str, wait: float = 240) -> tuple[int, int]:
    """(uid, tasks): the most tasks one uid other than root runs in ``container``, once that is
    at least HELD (or what it is after ``wait`` seconds)."""
    import time

    import psutil

    pid = int(daemon.docker("inspect", "-f", "{{.State.Pid}}", container).stdout.strip() or 0)
    best, deadline = (0, 0), time.time() + wait
    while True:
        count: dict[int, int] = {}
        try:
            for p in psutil.Process(pid).children(recursive=True):
                try:
                    uid = p.uids().real
                    count[uid] = count.get(uid, 0) + p.num_threads()
                except psutil.Error:
                    pass
        except psutil.Error:
            break
        best = max(((u, n) for u, n in count.items() if u != 0), key=lambda x: x[1], default=(0, 0))
        if best[1] >= HELD or time.time() > deadline:
            break
        time.sleep(1)
    return best


@pytest.fixture(scope="module")
def graded(docker, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiers")
    others = {tier: neighbour(docker, tmp, tier) for tier in NEIGHBOURS}
    try:
        hold = {tier: held(docker, c) for tier, c in others.items()}
        got = {tier: grade_in_tier(docker, tmp, tier) for tier in runnable()}
        hold = {tier: (hold[tier], held(docker, c, wait=0)) for tier, c in others.items()}
    finally:
        for c in others.values():
            docker.remove(c)
    for g in got.values():
        g["neighbours"] = hold
    print("\nthe cohort command in each tier (Docker), 11 notebooks, 2 workers:")
    for tier, g in got.items():
        print(f"  {tier:<22} {g['run']['seconds']:6.1f} s  rc {g['run']['rc']}")
    return got


def _reasons(row) -> list[str]:
    return [x for x in row["reasons"].split(" | ") if x]


pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.xdist_group("docker")]


@pytest.mark.parametrize("tier", list(TIERS))
def test_every_tier_grades_the_hostile_set(graded, tier):
    g = of(graded, tier)
    run, rows = g["run"], g["rows"]
    assert run["rc"] == 0 and set(rows) == set(KINDS), run["stdout"][-4000:]
    assert f"sandbox: {tier.split()[0]}" in run["stdout"], run["stdout"][:2000]
    score = {s: float(r["score"]) for s, r in rows.items()}
    why = {s: " ".join(_reasons(r)) for s, r in rows.items()}
    flagged = {s for s, r in rows.items() if r["status"] == "flagged"}
    assert score["honest"] == FULL and "honest" not in flagged and not why["honest"], why
    assert 0 < score["mistake"] < FULL and "mistake" not in flagged
    assert "delegation" in flagged and "not the student's own work" in why["delegation"]
    assert score["tampering"] == 0 and "tampering:" in why["tampering"]
    assert score["frozen"] == 0 and "kernel stopped answering" in why["frozen"]
    assert score["forger"] == 0 and "outside its folder" in why["forger"]
    assert score["detached"] == 0
    assert "reader" in flagged and "outside its folder" in why["reader"] and score["reader"] < FULL
    assert "netty" in flagged and "network" in why["netty"] and score["netty"] == FULL
    assert "forker" in flagged and "too many processes" in why["forker"] and score["forker"] >= FULL - 1
    assert "hog" in flagged and "memory" in why["hog"]


@pytest.mark.parametrize("tier", NEIGHBOURS)
def test_the_neighbours_held_their_processes_all_along(graded, tier):
    """Each neighbour really held its uid's process limit from before the first tier to after
    the last: the tiers above were graded beside them (not after they gave up)."""
    before, after = next(iter(graded.values()))["neighbours"][tier]
    assert before[1] >= HELD and after[1] >= HELD and before[0] == after[0], (before, after)
    assert (before[0] == 1000) == ("--user" in TIERS[tier]), before


@pytest.mark.parametrize("tier", list(TIERS))
def test_nothing_outlives_its_kernel_and_nothing_was_forged(graded, tier):
    g = of(graded, tier)
    assert g["left"] == "LEFT []", g["left"]          # the detached rewriter, the fork bomb: all gone
    for student in KINDS:
        nb = nbformat.read(g["course"] / "autograded" / student / A / f"{A}.ipynb", as_version=4)
        assert "awb_grader" in nb.metadata, student      # nbgrader's notebook, not the rewriter's text
    hidden = (REPO / "autograder" / "awb_grader" / "hidden" / "ex04.py").read_text()
    assert "def test_softmax_values(*a, **k):\n    pass" not in hidden
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{g['course'] / 'gradebook.db'}") as gb:
        for sub in gb.assignment_submissions(A):
            for nb in sub.notebooks:
                assert all(gr.score <= gr.max_score for gr in nb.grades), sub.student.id


@pytest.mark.parametrize("tier", list(TIERS))
def test_a_child_cannot_touch_its_zygote_or_a_sibling(graded, tier):
    """In each tier, a zygote's child can neither signal, ptrace nor read the memory (or the start-up
    environment) of its zygote or of a sibling, nor get a child of its own from the zygote."""
    probe = of(graded, tier)["probe"]
    assert probe is not None, graded[tier]["run"]["stdout"][-3000:]
    said = probe["said"]
    assert probe["mode"] == tier.split()[0] and probe["sibling"] and probe["zygote"], probe
    attempts = [ln for ln in said if ln.startswith(("zygote ", "sibling ")) and not ln.startswith("zygote socket")]
    assert len(attempts) == 10 and all(" denied " in ln for ln in attempts), said
    asked = [ln for ln in said if ln.startswith(("answer", "zygote socket"))]
    assert asked and all("denied" in ln or '"refused"' in ln for ln in asked), said


def _kind(reason: str) -> str:
    """What a reason says, without where (the cell) or the details: "tried to reach the network"."""
    return re.split(r": | in | \(", reason, maxsplit=1)[0]


def test_every_tier_gives_the_same_scores_flags_and_reasons(graded):
    first = None
    for tier, g in graded.items():
        got = {s: (r["score"], r["status"], sorted({_kind(x) for x in _reasons(r)})) for s, r in g["rows"].items()}
        first = first or got
        assert got == first, (tier, {s: (got[s], first[s]) for s in got if got[s] != first[s]})


def table(graded) -> str:
    cols = ["honest", "mistake", "delegation", "tampering", "frozen", "forger", "detached"]
    lines = ["| tier | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for tier, g in graded.items():
        cells = []
        for s in cols:
            r = g["rows"][s]
            cells.append(f"{float(r['score']):g}/{FULL:g}" + (", flagged" if r["status"] == "flagged" else ""))
        lines.append(f"| {tier} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":       # python tests/test_tiers.py: the README's table
    import tempfile

    from docker_daemon import Daemon

    d = Daemon()
    try:
        with tempfile.TemporaryDirectory() as t:
            res = {tier: grade_in_tier(d, Path(t), tier) for tier in runnable()}
            print(table(res))
            for tier, g in res.items():
                print(tier, f"{g['run']['seconds']:.0f} s", g["left"])
                print(json.dumps({s: (r["score"], r["status"], r["reasons"][:200]) for s, r in g["rows"].items()},
                                 indent=1))
    finally:
        d.stop()
