"""Mutation testing of the checks: mutate the graded solution code of an exercise, run the
visible checks and the battery, count the mutants they kill.

The graded code lives in notebook cells, so this tool first writes an exercise's answer cells
into one Python file (one ``# --- cell: NAME ---`` line before each), which a mutation tool can
mutate; then, for each mutant, ``check`` rebuilds the learner's namespace from the notebook's
plain cells with the (mutated) answer cells in place of the solution's, runs the visible part
of every test cell and the battery, and exits 1 when anything fails (the mutant is killed).
Everything runs in one process per mutant, without nbgrader (a few seconds each); ``run`` stops a
mutant's check at its first failure, trying the mutated cell's own test cells first. ``check
--part hidden`` (or ``both``) runs the hidden blocks instead (or too): how a new check is tried on
the hidden side. Scores and the triage of every survivor: ``results/mutation.md``.

A mutant that runs longer than ``--timeout`` seconds counts as killed: on a loaded machine a slow
survivor can pass for killed, so measure at a low load.

In-process, with mutmut 2's mutation operators (``pip install "mutmut<3"``, best into a folder
of its own: ``--target DIR``, then ``PYTHONPATH=DIR``)::

    python tools/mutation.py run 04_queries_keys_values --out mutants_04.txt

or with mutmut's own runner, one process per mutant (slower), from a scratch folder::

    python tools/mutation.py extract 04_queries_keys_values work/solution.py
    cd work && python -m mutmut run --paths-to-mutate solution.py --tests-dir . \\
        --runner "python /path/to/repo/tools/mutation.py check 04_queries_keys_values solution.py"
    python -m mutmut results          # then: python -m mutmut show ID

mutmut edits ``solution.py`` in place while it runs: keep the scratch folder out of the
repository. ``check`` needs ``PYTHONPATH`` to hold the repository's ``autograder/`` and root.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARK = "# --- cell: "
BOUNDARY = "pass  # cell boundary"
_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)
_HIDDEN = "### BEGIN HIDDEN TESTS"


def _cells(assignment: str):
    """(kind, grade_id, source) of the notebook's code cells: 'answer', 'test' or 'plain'."""
    import nbformat

    nb = nbformat.read(REPO / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if (cell.cell_type != "code" or "awb-setup" in cell.metadata.get("tags", [])
                or "check_all(" in cell.source):
            continue
        if meta.get("solution"):
            yield "answer", meta["grade_id"], _MARKERS.sub("", cell.source)
        elif meta.get("grade"):
            yield "test", meta["grade_id"], cell.source
        else:
            yield "plain", None, cell.source


def extract(assignment: str, out: Path) -> None:
    # the `pass` keeps the marker out of the next statement's prefix (mutmut's decorator mutation
    # removes a decorator with the comments before it)
    parts = [
        f"{MARK}{gid} ---\n{BOUNDARY}\n{src.rstrip()}\n" for kind, gid, src in _cells(assignment) if kind == "answer"
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n\n".join(parts))
    print(f"wrote {len(parts)} answer cells of {assignment} to {out}")


def split(text: str) -> dict[str, str]:
    cells, name, lines = {}, None, []
    for line in text.splitlines(keepends=True):
        if line.startswith(MARK):
            if name:
                cells[name] = "".join(lines)
            name, lines = line[len(MARK):].split(" ---")[0].strip(), []
        elif line.rstrip("\n") != BOUNDARY:
            lines.append(line)
    if name:
        cells[name] = "".join(lines)
    return cells


def check(assignment: str, path: Path, verbose: bool = False, part: str = "visible", first: bool = False,
          prefer: str | None = None) -> int:
    """0 when every visible check and every battery item passes with the answers in ``path``
    (``part="hidden"``: the test cells' hidden blocks instead, in this process, no battery;
    ``"both"``: whole test cells as nbgrader runs them, and the battery). ``first``: stop at the first
    failure (the verdict is the same; ``run`` uses it, a killed mutant then costs one failing check);
    ``prefer``: an answer cell whose test cells run first."""
    for p in (REPO / "autograder", REPO):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ["NBGRADER_EXECUTION"] = "autograde"          # long demo cells skip, as under grading
    from attention_workbook.checks import battery
    from attention_workbook.checks.core import CheckFailed

    answers = split(path.read_text())
    ns: dict = {"__name__": "__main__"}
    failures = []
    cwd = os.getcwd()
    os.chdir(REPO / "solutions" / assignment)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            cells = list(_cells(assignment))
            for kind, gid, src in cells:
                if kind == "test":
                    continue
                try:
                    exec(compile(answers.get(gid, src) if kind == "answer" else src, f"<cell {gid}>", "exec"), ns)  # noqa: S102
                except Exception as e:  # noqa: BLE001 - a mutant may break its cell: its checks then fail
                    failures.append(f"cell {gid}: {type(e).__name__}: {e}")
            owner, own = None, []                   # the test cells that follow answer cell `prefer`
            for kind, gid, src in cells:
                owner = gid if kind == "answer" else owner
                own += [(kind, gid, src)] if kind == "test" and owner == prefer else []
            for kind, gid, src in own + [c for c in cells if c not in own]:
                if first and failures:
                    break
                if kind == "test":
                    try:
                        code = {"visible": src.split(_HIDDEN)[0], "both": src}.get(part) or src.split(_HIDDEN)[-1]
                        exec(compile(code, f"<test {gid}>", "exec"), ns)  # noqa: S102
                    except CheckFailed as e:
                        failures.append(f"{gid}: {e.title}")
                    except Exception as e:  # noqa: BLE001
                        failures.append(f"{gid}: {type(e).__name__}: {e}")
            if part != "hidden" and not (first and failures):
                report = battery.run(assignment, ns, progress=False)
                failures += [f"battery {r.cell}: {r.verdict.splitlines()[0]}" for r in report.rows if not r.earned]
    finally:
        os.chdir(cwd)
    if verbose or failures:
        print("\n".join(failures) or "every visible check and battery item passes")
    return 1 if failures else 0


def run(assignment: str, out: Path | None = None, timeout: int = 120, start: int = 1) -> tuple[int, list]:
    """Every mutant mutmut's operators make of the answer cells, checked in this process (torch and
    the checks are imported once; a mutant that hangs is stopped by an alarm after ``timeout`` s).
    Returns (number of mutants, [(mutant id, cell, diff line) of each survivor]); ``start``: skip the
    mutants before that number (to resume a run; the score line then counts only those checked)."""
    import difflib
    import signal
    import tempfile

    from mutmut import ALL, Context, list_mutations, mutate

    with tempfile.TemporaryDirectory() as tmp:
        src_path = Path(tmp) / "solution.py"
        with contextlib.redirect_stdout(io.StringIO()):
            extract(assignment, src_path)
        source = src_path.read_text()
        ids = list_mutations(Context(source=source, mutation_id=ALL, filename=str(src_path)))
        survivors = []
        with contextlib.redirect_stdout(io.StringIO()) as said:
            if check(assignment, src_path) != 0:      # every mutant would count as killed
                raise SystemExit(f"the unmutated solution fails its own checks:\n{said.getvalue()}")

        def _alarm(*_):
            raise TimeoutError("mutant timed out")

        signal.signal(signal.SIGALRM, _alarm)
        before = split(source)
        for n, mid in enumerate(ids, 1):
            if n < start:
                continue
            ctx = Context(source=source, mutation_id=mid, filename=str(src_path))
            mutated, _ = mutate(ctx)
            src_path.write_text(mutated)
            after = split(mutated)
            cell = next((c for c in before if before[c] != after.get(c)), None)
            signal.alarm(timeout)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    killed = check(assignment, src_path, first=True, prefer=cell) != 0
            except TimeoutError:
                killed = True
            finally:
                signal.alarm(0)
            if not killed:
                diff = [
                    d
                    for d in difflib.unified_diff(before[cell].splitlines(), after[cell].splitlines(), lineterm="", n=0)
                    if d[:1] in "+-" and not d.startswith(("+++", "---"))
                ]
                survivors.append((n, cell, diff))
            print(f"[{n}/{len(ids)}] {'killed' if killed else 'SURVIVED'}", file=sys.stderr, flush=True)
    total = len(ids) - (start - 1)
    n_killed = total - len(survivors)
    lines = [
        f"{assignment}: {n_killed}/{total} mutants killed ({100 * n_killed / max(total, 1):.1f}%)"
        + (f", mutants {start}-{len(ids)}" if start > 1 else "")
    ]
    for n, cell, diff in survivors:
        lines.append(f"  mutant {n} in {cell}: " + " | ".join(diff))
    text = "\n".join(lines)
    print(text)
    if out:
        out.write_text(text + "\n")
    return len(ids), survivors


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="write an exercise's answer cells into one file")
    e.add_argument("assignment")
    e.add_argument("out", type=Path)
    c = sub.add_parser("check", help="run the visible checks and the battery on the answers in a file")
    c.add_argument("assignment")
    c.add_argument("path", type=Path)
    c.add_argument("-v", "--verbose", action="store_true")
    c.add_argument("--part", choices=("visible", "hidden", "both"), default="visible",
                   help="which part of the test cells runs (the battery runs with visible and both)")
    r = sub.add_parser("run", help="mutate the answer cells with mutmut's operators and check each mutant "
                                   "in this process (needs mutmut < 3 importable)")
    r.add_argument("assignment")
    r.add_argument("--out", type=Path)
    r.add_argument("--timeout", type=int, default=120)
    r.add_argument("--start", type=int, default=1, help="resume: skip the mutants before this number")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        run(a.assignment, a.out, a.timeout, a.start)
        return 0
    if a.cmd == "extract":
        extract(a.assignment, a.out)
        return 0
    return check(a.assignment, a.path, a.verbose, a.part)


if __name__ == "__main__":
    sys.exit(main())
