"""The sandbox's uid when grading as root (``isolation/sandbox.py``: ``draw_uids``): drawn for each
grading run, never an account's, a group's or a running process's, inside what the user namespace
maps; the instructor's ``AWB_SANDBOX_UID_BASE`` wins; worker ``k`` gets the base plus ``k``.
(``tests/test_tiers.py`` grades in Docker beside a neighbour that holds its uid's process limit.)"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
import sys

import psutil
import pytest

from awb_grader.isolation import sandbox


def test_a_drawn_block_is_free_and_mapped():
    base = sandbox.draw_uids(4)
    block = set(range(base, base + 4))
    assert not block & {p.pw_uid for p in pwd.getpwall()}
    assert not block & {g.gr_gid for g in grp.getgrall()}
    assert not block & {u for p in psutil.process_iter(["uids"]) if p.info["uids"] for u in p.info["uids"]}
    low, high = sandbox.UID_RANGE if sandbox._mapped("uid")[-1][1] >= sandbox.UID_RANGE[1] else sandbox.UID_RANGE_SMALL
    assert low <= base and base + 3 <= high


def test_two_runs_draw_different_uids():
    draws = [sandbox.draw_uids(2) for _ in range(20)]
    assert len(set(draws)) == 20, draws            # 2**30 ids: a repeat is a 1-in-millions event


def test_a_user_namespace_of_65536_ids_draws_below_65536(monkeypatch):
    monkeypatch.setattr(sandbox, "_mapped", lambda kind: [(0, 65535)])
    for _ in range(20):
        base = sandbox.draw_uids(3)
        assert sandbox.UID_RANGE_SMALL[0] <= base and base + 2 <= 65533


def test_only_the_free_ids_are_drawn(monkeypatch):
    monkeypatch.setattr(sandbox, "UID_RANGE", (2000, 2010))
    monkeypatch.setattr(sandbox, "_taken", lambda: set(range(2000, 2008)) | {2009})
    assert {sandbox.draw_uids(1) for _ in range(30)} == {2008, 2010}
    monkeypatch.setattr(sandbox, "_taken", lambda: set(range(2000, 2011)))
    try:
        sandbox.draw_uids(1)
    except RuntimeError as e:
        assert "no free uids" in str(e)
    else:
        raise AssertionError("a range with every id taken gave a uid")


def test_the_instructors_base_and_the_workers(monkeypatch, tmp_path):
    monkeypatch.setenv(sandbox.UID_BASE_ENV, "123400")
    monkeypatch.delenv(sandbox.UID_ENV, raising=False)
    for var in ("JUPYTER_RUNTIME_DIR", "AWB_PRIVATE_RUNTIME", "AWB_KERNEL_LOG"):   # put back after the test
        monkeypatch.setenv(var, os.environ.get(var, ""))
    assert sandbox.run_uid_base(4) == 123400 and sandbox.own_uid() == 123400
    sandbox.worker_environment(3, tmp_path / "runtime")
    assert os.environ[sandbox.UID_ENV] == "123403" and sandbox.limits_of()["uid"] == 123403


def test_a_run_draws_once(monkeypatch):
    monkeypatch.delenv(sandbox.UID_BASE_ENV, raising=False)
    monkeypatch.delenv(sandbox.UID_ENV, raising=False)
    first = sandbox.own_uid()
    assert sandbox.own_uid() == first == sandbox.limits_of()["uid"] == int(os.environ[sandbox.UID_BASE_ENV])


CLAIM = """
import os, sys, time
from awb_grader.isolation import sandbox
print(sandbox.own_uid(), flush=True)
time.sleep(float(sys.argv[1]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid of its own is given only when grading as root")
def test_two_graders_inheriting_one_base_never_share_a_uid(tmp_path):
    """Two grading processes started from one environment (two Slurm array tasks on one node, two
    runs from one shell) inherit one AWB_SANDBOX_UID_BASE: each kills what runs under its uid before
    a sandbox starts, so the second must take another uid while the first lives, and may take the
    base again once it has ended."""
    base = sandbox.draw_uids(1)
    env = {**os.environ, sandbox.UID_BASE_ENV: str(base), "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop(sandbox.UID_ENV, None)
    first = subprocess.Popen([sys.executable, "-c", CLAIM, "30"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert int(first.stdout.readline()) == base
        second = subprocess.run([sys.executable, "-c", CLAIM, "0"], env=env, capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 0, second.stderr
        other = int(second.stdout)
        assert other != base and not {other} & sandbox._taken()
        # an inherited AWB_SANDBOX_UID (a grader's, exported to another) is not shared either
        held = subprocess.run([sys.executable, "-c", CLAIM, "0"], env={**env, sandbox.UID_ENV: str(base)},
                              capture_output=True, text=True, timeout=60)
        assert int(held.stdout) != base, held.stderr
    finally:
        first.kill()
        first.wait()
    again = subprocess.run([sys.executable, "-c", CLAIM, "0"], env=env, capture_output=True, text=True, timeout=60)
    assert int(again.stdout) == base, again.stderr
