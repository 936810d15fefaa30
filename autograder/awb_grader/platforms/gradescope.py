"""Gradescope: ``python -m awb_grader gradescope NN`` writes exercise NN's autograder zip.

Gradescope's autograder specification (gradescope-autograders.readthedocs.io, "Autograder
Specifications"): the zip holds ``setup.sh`` and ``run_autograder`` at its root; Gradescope
unpacks it to ``/autograder/source`` and runs ``setup.sh`` once, as root, while it builds the
autograder's image (Ubuntu); for every submission it puts the student's upload in
``/autograder/submission``, runs ``/autograder/run_autograder`` from ``/autograder``, and reads
``/autograder/results/results.json``; ``run_autograder``'s stdout is shown to the instructor only.

``run_autograder`` grades the upload as one upload (``harness.grade_upload``: the cohort command's
repair, sandbox, outside verdicts and rules, for one submission, in one process) and writes one test
per graded cell: ``name`` (the cell's grade id), ``score``, ``max_score``, ``status``,
``output`` (the visible check's hint, or the student's own exception; a hidden check's failure
as a fixed sentence, never its code or values) and ``visibility``: a failure the visible check
explains is ``visible`` (the student saw it in the notebook already); every other result, whose
outcome depends on the hidden checks, gets the visibility chosen at build time
(``after_published`` or ``hidden``). Flags, their reasons and the misconceptions the failures
name go to stdout (``stdout_visibility: hidden``). A file that is not a readable notebook, or a
tampered one, gets a clear ``output`` and the score the rules give (0 for the tampered cells,
0 for an unreadable file); a failure of the grader itself still writes a results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
import zipfile
from pathlib import Path

from . import harness

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image (Ubuntu). It installs
# the grader: bubblewrap (the sandbox where namespaces are allowed), a Python environment with
# PyTorch (CPU build), nbgrader, and landlockpy + pyseccomp (the Landlock tier: Gradescope's
# containers refuse new namespaces), builds the course (nbgrader generate_assignment) once, and
# says which isolation tier a grading run gets here (every run checks again and names its tier).
# AWB_SETUP_VENV=/path/to/venv uses an existing environment that already has all of it instead
# (the test suite does, to keep CI short); nothing else differs.
set -euo pipefail
SRC=/autograder/source
cd "$SRC"
if ! command -v bwrap >/dev/null 2>&1 || ! command -v python3 >/dev/null 2>&1; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      bubblewrap libseccomp2 python3 python3-venv python3-pip; } \
    || echo "WARNING: apt-get could not install bubblewrap/python3 (the Landlock tier needs neither bubblewrap)"
fi
if [ -n "${AWB_SETUP_VENV:-}" ]; then
  ln -sfn "$AWB_SETUP_VENV" /autograder/venv
else
  python3 -m venv /autograder/venv
  /autograder/venv/bin/python -m pip install -q --upgrade pip
  /autograder/venv/bin/python tools/install_torch.py --index auto
  /autograder/venv/bin/python -m pip install -q "numpy>=1.24,<3" "matplotlib>=3.7,<4" "ipywidgets>=7.7,<9" \
      "tqdm>=4.60" "nbgrader>=0.9.5,<0.10" "nbclient>=0.10,<1" "nbformat>=5.9,<6" "ipykernel>=6.25" \
      "landlockpy>=0.2,<0.3" "pyseccomp>=0.1.2,<0.2"
  # rfc3987-syntax, an optional part of jsonschema that nbformat pulls in, compiles its IRI grammars
  # whenever jsonschema is imported: a core-second of every run, two seconds of the student's wait at
  # half a CPU; nothing here checks IRIs (jsonschema issue 1428)
  /autograder/venv/bin/python -m pip uninstall -y -q rfc3987-syntax
fi
export PYTHONPATH="$SRC/autograder:$SRC" MPLBACKEND=Agg
/autograder/venv/bin/python -m awb_grader.platforms.gradescope prepare
/autograder/venv/bin/python -m awb_grader.isolation.tiers \
  || echo "WARNING: grading will report a grader error for every upload (the reasons above), unless built --unprotected"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for every submission (upload in /autograder/submission); it writes
# /autograder/results/results.json and prints the instructor-only report.
# In a clean environment (env -i): the grader's zygote, from which the student's kernel is forked,
# is forked from this process, and holds nothing of the container's environment.
cd /autograder/source
exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  PYTHONPATH=/autograder/source/autograder:/autograder/source MPLBACKEND=Agg \
  ${AWB_GRADESCOPE_BASE:+AWB_GRADESCOPE_BASE="$AWB_GRADESCOPE_BASE"} \
  /autograder/venv/bin/python -m awb_grader.platforms.gradescope run
"""

VISIBILITIES = ("after_published", "hidden", "after_due_date", "visible")


def build(exercise: str, dest: Path | None = None, visibility: str = "after_published", seed_salt: str | None = None,
          timeout: int = 60, memory_mb: int | None = None, unprotected: bool = False) -> Path:
    """Write the autograder zip of ``exercise``; returns its path."""
    from ..core.course import REPO, resolve

    [a] = resolve([exercise])
    if visibility not in VISIBILITIES:
        raise SystemExit(f"--visibility must be one of {', '.join(VISIBILITIES)}")
    dest = Path(dest or REPO / "build" / "gradescope" / f"{a}.zip").resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp)
        harness.bundle(a, src, {"platform": "gradescope", "visibility": visibility, "timeout": timeout,
                                "memory_mb": memory_mb, "unprotected": unprotected}, seed_salt)
        (src / "setup.sh").write_text(SETUP_SH)
        (src / "run_autograder").write_text(RUN_AUTOGRADER)
        tmpzip = dest.with_suffix(".zip.tmp")
        with zipfile.ZipFile(tmpzip, "w", zipfile.ZIP_DEFLATED) as z:
            for p in sorted(src.rglob("*")):
                if p.is_file():
                    info = zipfile.ZipInfo(str(p.relative_to(src)), date_time=(2020, 1, 1, 0, 0, 0))
                    mode = 0o755 if p.name in ("setup.sh", "run_autograder") or os.access(p, os.X_OK) else 0o644
                    info.external_attr = (stat.S_IFREG | mode) << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    z.writestr(info, p.read_bytes())
        tmpzip.replace(dest)
    return dest


def results_json(out: harness.Outcome, visibility: str) -> dict:
    """Gradescope's results.json for one Outcome."""
    tests = []
    for i, t in enumerate(out.tests, 1):
        passed = t.score >= t.max_score
        tests.append({"name": t.name, "number": str(i), "score": t.score, "max_score": t.max_score,
                      "status": "passed" if passed else "failed", "output": t.message,
                      "visibility": visibility if (passed or t.hidden) else "visible"})
    return {"score": out.score, "execution_time": int(round(out.seconds)), "output": out.summary(),
            "stdout_visibility": "hidden", "tests": tests,
            "extra_data": {"status": out.status, "max_score": out.max_score}}


def run(base: Path = Path("/autograder")) -> int:
    """``run_autograder``: grade the upload, write results.json. Always writes it."""
    settings = json.loads((base / "source" / "harness.json").read_text())
    out = harness.grade_platform(settings, base / "submission", base / "course", base / "source" / "exercises")
    return harness.report(out, results_json(out, settings.get("visibility", "after_published")), base / "results")


def prepare(base: Path = Path("/autograder")) -> int:
    settings = json.loads((base / "source" / "harness.json").read_text())
    harness.prepare(settings["assignment"], base / "course", timeout=int(settings.get("timeout") or 60))
    print(f"awb grader: course for {settings['assignment']} ready in {base / 'course'}"
          + (f"; {settings['reseeded']} hidden-check seeds changed at build time" if settings.get("reseeded") else ""))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("exercise", help="e.g. 04 or 04_queries_keys_values")
    p.add_argument("--out", type=Path, default=None, help="zip to write (default build/gradescope/NN_topic.zip)")
    p.add_argument("--visibility", default="after_published", choices=VISIBILITIES[:2],
                   help="visibility of results that depend on hidden checks (default after_published)")
    harness.add_build_arguments(p)


def command(a: argparse.Namespace) -> int:
    """``python -m awb_grader gradescope NN``: build the zip."""
    z = build(a.exercise, a.out, a.visibility, a.seeds, a.timeout, a.memory_mb, a.unprotected)
    print(f"wrote {z}: upload it as the assignment's autograder (Gradescope: Configure Autograder > Zip file)")
    print(harness.TIER_NOTE if not a.unprotected else harness.UNPROTECTED_BUILD)
    return 0


def main(argv=None) -> int:
    """``python -m awb_grader.platforms.gradescope run|prepare``: what ``run_autograder`` and ``setup.sh`` call."""
    argv = sys.argv[1:] if argv is None else argv
    base = Path(os.environ.get("AWB_GRADESCOPE_BASE", "/autograder"))
    if argv == ["run"]:
        harness.leave(run(base))
    if argv == ["prepare"]:
        return prepare(base)
    print("usage: python -m awb_grader.platforms.gradescope run|prepare (the zip: python -m awb_grader gradescope NN)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
