"""PrairieLearn: ``python -m awb_grader prairielearn NN`` writes what an externally graded
question needs (PrairieLearn's "External Grading" documentation).

PrairieLearn runs the question's ``externalGradingOptions.entrypoint`` in the grading image with
``/grade/serverFilesCourse`` (the course files the options list), ``/grade/tests`` (the
question's ``tests/``), ``/grade/student`` (the submitted files) and reads
``/grade/results/results.json``: ``gradable``, ``score`` (0..1), ``message``, ``tests[]`` with
``name``, ``points``, ``max_points``, ``message``. Written under ``--out`` (default
``build/prairielearn/``), to copy into the PrairieLearn course repository:

* ``serverFilesCourse/awb/``: the grading core (as in the Gradescope zip) and ``run_prairielearn``,
  the entrypoint;
* ``questions/awb/NN_topic/``: ``info.json`` (``externalGradingOptions``), ``question.html``
  (a ``pl-file-upload`` for ``NN_topic.ipynb``) and ``tests/harness.json`` (this build's settings);
* ``graders/awb/Dockerfile``: the grading image (bubblewrap, PyTorch's CPU build, nbgrader,
  landlockpy and pyseccomp for the Landlock tier that PrairieLearn's containers get).

The grade is the cohort command's, read back per graded cell (``harness.grade_upload``). A file
that is not a readable notebook scores 0 with a clear message, as the rules give;
``gradable: false`` is kept for a failure of the grader itself, so the student is not charged
for it. Flags, their reasons and misconceptions go to the job's output (stdout), which
PrairieLearn shows to course staff.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from . import harness

ENTRYPOINT = r"""#!/usr/bin/env bash
# PrairieLearn's external-grading entrypoint: grades /grade/student, writes /grade/results/results.json.
# AWB_PYTHON picks the Python that has the grader's packages (the image's python3 by default).
# In a clean environment (env -i): the grader's zygote, from which the student's kernel is forked,
# is forked from this process, and holds nothing of the container's environment.
exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  PYTHONPATH=/grade/serverFilesCourse/awb/autograder:/grade/serverFilesCourse/awb MPLBACKEND=Agg \
  ${AWB_PRAIRIELEARN_BASE:+AWB_PRAIRIELEARN_BASE="$AWB_PRAIRIELEARN_BASE"} \
  "$(command -v "${AWB_PYTHON:-python3}")" -m awb_grader.platforms.prairielearn run
"""

DOCKERFILE = """# The grading image: build and push it, then put its name in each question's info.json ("image").
#   docker build -t YOUR_DOCKERHUB_USER/awb-grader graders/awb && docker push YOUR_DOCKERHUB_USER/awb-grader
# PrairieLearn starts it with Docker's defaults, where bubblewrap cannot make namespaces: student code
# is confined by the Landlock tier (landlockpy + pyseccomp below); each job's output names the tier.
FROM python:3.12-slim
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu "torch>=2.1,<3" \\
 && pip install --no-cache-dir "numpy>=1.24,<3" "matplotlib>=3.7,<4" "ipywidgets>=7.7,<9" "tqdm>=4.60" \\
      "nbgrader>=0.9.5,<0.10" "nbclient>=0.10,<1" "nbformat>=5.9,<6" "ipykernel>=6.25" \\
      "landlockpy>=0.2,<0.3" "pyseccomp>=0.1.2,<0.2" \\
 && pip uninstall -y rfc3987-syntax
# (rfc3987-syntax, an optional part of jsonschema that nbformat pulls in, compiles its IRI grammars
# whenever jsonschema is imported: a core-second of every job; nothing here checks IRIs. jsonschema
# issue 1428)
"""

QUESTION_HTML = """<pl-question-panel>
  <p>Upload your notebook <code>{a}.ipynb</code> (on Colab: <i>File &gt; Download &gt; Download .ipynb</i>).
  It is graded by the same checks as the notebook's hidden tests; each check's result and hint appear below.</p>
</pl-question-panel>
<pl-file-upload file-names="{a}.ipynb"></pl-file-upload>
<pl-submission-panel>
  <pl-external-grader-results></pl-external-grader-results>
  <pl-file-preview></pl-file-preview>
</pl-submission-panel>
"""


def build(exercise: str, out: Path | None = None, image: str = "YOUR_DOCKERHUB_USER/awb-grader",
          seed_salt: str | None = None, timeout: int = 60, memory_mb: int | None = None,
          job_timeout: int = 600, unprotected: bool = False) -> Path:
    from ..core.course import REPO, assignments, resolve

    [a] = resolve([exercise])
    out = Path(out or REPO / "build" / "prairielearn").resolve()
    core = out / "serverFilesCourse" / "awb"
    if core.exists():
        shutil.rmtree(core)
    core.mkdir(parents=True)
    # one copy of the core for every question: every exercise's source and release
    harness.bundle(assignments(), core, {"platform": "prairielearn"}, seed_salt)
    (core / "harness.json").rename(core / "build.json")
    (core / "run_prairielearn").write_text(ENTRYPOINT)
    (core / "run_prairielearn").chmod(0o755)
    q = out / "questions" / "awb" / a
    (q / "tests").mkdir(parents=True, exist_ok=True)
    (q / "tests" / "harness.json").write_text(json.dumps(
        {"assignment": a, "platform": "prairielearn", "timeout": timeout, "memory_mb": memory_mb,
         "unprotected": unprotected}, indent=1) + "\n")
    import uuid

    info = {"uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"attention-workbook/{a}")),
            "title": f"Attention Workbook {a}", "topic": "Attention", "type": "v3", "singleVariant": True,
            "gradingMethod": "External",
            "externalGradingOptions": {"enabled": True, "image": image, "serverFilesCourse": ["awb/"],
                                       "entrypoint": "/grade/serverFilesCourse/awb/run_prairielearn",
                                       "timeout": job_timeout}}
    (q / "info.json").write_text(json.dumps(info, indent=1) + "\n")
    (q / "question.html").write_text(QUESTION_HTML.format(a=a))
    d = out / "graders" / "awb"
    d.mkdir(parents=True, exist_ok=True)
    (d / "Dockerfile").write_text(DOCKERFILE)
    return q


def results_json(out: harness.Outcome) -> dict:
    internal = out.status == "error"
    return {
        "gradable": not internal,
        "score": 0.0 if internal or not out.max_score else round(out.score / out.max_score, 6),
        "message": out.summary(),
        "tests": [{"name": t.name, "points": t.score, "max_points": t.max_score, "message": t.message}
                  for t in out.tests],
    }


def run(base: Path = Path("/grade")) -> int:
    """The entrypoint: grade /grade/student, write /grade/results/results.json. Always writes it."""
    settings = json.loads((base / "tests" / "harness.json").read_text())
    core = Path(__file__).resolve().parents[3]
    out = harness.grade_platform(settings, base / "student", base / "awb-work" / "course", core / "exercises")
    return harness.report(out, results_json(out), base / "results")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("exercise", help="e.g. 04 or 04_queries_keys_values")
    p.add_argument("--out", type=Path, default=None, help="folder to write (default build/prairielearn)")
    p.add_argument("--image", default="YOUR_DOCKERHUB_USER/awb-grader", help="the grading image's name")
    harness.add_build_arguments(p)


def command(a: argparse.Namespace) -> int:
    """``python -m awb_grader prairielearn NN``: write the question and the course files."""
    q = build(a.exercise, a.out, a.image, a.seeds, a.timeout, a.memory_mb, unprotected=a.unprotected)
    print(f"wrote {q} and {q.parents[2] / 'serverFilesCourse' / 'awb'}: copy both into your PrairieLearn course "
          f"(and build the image in {q.parents[2] / 'graders' / 'awb'})")
    print(harness.TIER_NOTE if not a.unprotected else harness.UNPROTECTED_BUILD)
    return 0


def main(argv=None) -> int:
    """``python -m awb_grader.platforms.prairielearn run``: the entrypoint's command."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["run"]:
        harness.leave(run(Path(os.environ.get("AWB_PRAIRIELEARN_BASE", "/grade"))))
    print("usage: python -m awb_grader.platforms.prairielearn run (the question: python -m awb_grader prairielearn NN)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
