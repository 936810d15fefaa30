"""The full battery for a learner: what grading will run, on new random shapes, before grading.

Each graded test cell of an exercise runs two parts at grading: its visible check (in the
notebook) and a hidden randomized check against an independent oracle (in ``autograder/``,
which a learner on Colab does not have). The battery runs, for every test cell, the same
visible check and then a randomized check of its own (``battery.exNN``): new random sizes and
values, the batch axes, masks, Tq != Tk, d != dv and edge cases the exercise text promises,
compared with PyTorch built-ins (``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``,
``nn.TransformerEncoderLayer`` ...) or loops written independently of the solution. Its seeds
are not grading's, so it is a forecast of the grade, not the grade.

In the last cell of an exercise::

    from attention_workbook.checks import battery
    battery.check_all("05", globals())        # or check_all("05", split_heads=split_heads, ...)

prints one row per graded item: "passes" or the mistake named the way the visible hints name
it, and the points that item would earn. ``battery.run(...)`` returns the same as a
:class:`Report` (the tests read it). No warning reaches stderr: warnings are recorded and a
failing item's message lists them.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import time
import warnings
import zlib
from dataclasses import dataclass, field

import torch

from .. import graded
from ..core import CheckFailed, call as _call  # noqa: F401 - re-exported for the exNN modules

__all__ = ["ITEMS", "POINTS", "Item", "Report", "Row", "check_all", "exercise_key", "run", "DEFAULT_SEED"]

DEFAULT_SEED = 2027        # grading's hidden checks seed their generators with small numbers (< 1000)


@dataclass(frozen=True)
class Item:
    """One graded test cell: its grade id, its points, the check it runs and the names it is given."""
    cell: str
    points: int
    check: str
    args: tuple[str, ...]


# The graded test cells of every exercise, generated from the release notebooks' nbgrader
# metadata (checks/graded.py): grade ids, points, and the visible check each cell's first line calls.
ITEMS: dict[str, list[Item]] = {ex: [Item(*t) for t in tests] for ex, tests in graded.TESTS.items()}

POINTS: dict[str, dict[str, int]] = {ex: {it.cell: it.points for it in items} for ex, items in ITEMS.items()}


def exercise_key(exercise) -> str:
    """``5``, ``"05"``, ``"ex05"`` or ``"05_multi_head_attention"`` -> ``"05_multi_head_attention"``."""
    text = str(exercise).strip()
    if text.startswith("ex"):
        text = text[2:]
    num = text.split("_")[0]
    if num.isdigit():
        for key in ITEMS:
            if int(key[:2]) == int(num):
                return key
    raise ValueError(f"no exercise {exercise!r}: use its number, 0 to {len(ITEMS) - 1}")


@dataclass
class Row:
    cell: str
    points: int
    earned: int
    verdict: str                 # "passes", or the failure (title and hint)
    part: str = ""               # "visible" or "randomized": which part failed
    seconds: float = 0.0


@dataclass
class Report:
    exercise: str
    seed: int
    rows: list[Row] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)     # what Python warned while the battery ran

    @property
    def earned(self) -> int:
        return sum(r.earned for r in self.rows)

    @property
    def total(self) -> int:
        return sum(r.points for r in self.rows)

    def failed(self) -> list[Row]:
        return [r for r in self.rows if not r.earned]

    def table(self) -> str:
        width = max(len(r.cell) for r in self.rows) if self.rows else 10
        out = [f"Battery for {self.exercise} (seed {self.seed}): the randomized checks grading runs, on new "
               f"random shapes; a forecast, not your grade.",
               f"{'graded item':<{width}}  points  result"]
        for r in self.rows:
            mark = "\u2714 passes" if r.earned else "\u2718 " + _indent(r.verdict, width + 12)
            out.append(f"{r.cell:<{width}}  {r.earned:>2} / {r.points:<2} {mark}")
        out.append(f"{'total':<{width}}  {self.earned:>2} / {self.total:<2}"
                   + ("  every item passes" if self.earned == self.total else
                      f"  {len(self.failed())} item(s) would lose points"))
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def _indent(text: str, n: int) -> str:
    return ("\n" + " " * n).join(text.splitlines())


def _verdict(e: CheckFailed) -> str:
    text = e.title
    if "is not implemented yet" in text:     # one line is enough: nothing to diagnose yet
        return text
    if e.details:
        text += "\n  " + "\n  ".join(e.details[:3])
    if e.hint:
        text += f"\nHint: {e.hint}"
    if e.reread:
        text += f"\nReread: {e.reread}"
    return text


def _seed(seed: int, exercise: str, cell: str) -> int:
    """A generator seed per item, far from grading's (which are below 1000)."""
    return 1_000_003 * (seed + 1) + zlib.crc32(f"{exercise}/{cell}".encode()) % 1_000_000


def _own(fn, name: str) -> None:
    from .. import own

    mod = getattr(own.unwrap(fn), "__module__", "") or ""     # a Triton kernel: its function's module
    if mod.startswith(("attention_workbook", "awb_grader", "torch")):
        raise CheckFailed(f"{name} is imported from {mod}, not written in this notebook",
                          hint="grading scores your own implementation: an imported reference earns 0")


def _run_item(exercise: str, item: Item, answers: dict, seed: int) -> Row:
    num = exercise[:2]
    visible = importlib.import_module(f"attention_workbook.checks.ex{num}")
    randomized = importlib.import_module(f"attention_workbook.checks.battery.ex{num}")
    t0 = time.perf_counter()
    missing = [a for a in item.args if a not in answers]
    if missing:
        return Row(item.cell, item.points, 0, f"{', '.join(missing)} is not defined: run the cell that defines it "
                   "(and every cell above it), then this one", "visible")
    args = [answers[a] for a in item.args]
    part = "visible"
    try:
        for a, name in zip(args, item.args):
            _own(a, name)
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):  # green line; stray output
            getattr(visible, item.check)(*args)
            part = "randomized"
            g = torch.Generator().manual_seed(_seed(seed, exercise, item.cell))
            getattr(randomized, item.check)(*args, g=g)
        if err.getvalue().strip():
            raise CheckFailed("your code wrote to stderr while it ran",
                              details=[err.getvalue().strip().splitlines()[0][:160]],
                              hint="nbgrader scores a test cell 0 when anything reaches stderr: remove that output")
    except CheckFailed as e:
        label = "" if part == "visible" else "randomized test: "
        return Row(item.cell, item.points, 0, label + _verdict(e), part, time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - the battery must report, never crash the notebook
        return Row(item.cell, item.points, 0, f"{part} part raised {type(e).__name__}: {e}", part,
                   time.perf_counter() - t0)
    return Row(item.cell, item.points, item.points, "passes", "", time.perf_counter() - t0)


def run(exercise, namespace: dict | None = None, *, seed: int = DEFAULT_SEED, progress: bool = True,
        **answers) -> Report:
    """Run the battery of one exercise on the learner's answers (looked up by name in
    ``namespace``, usually ``globals()``, or given as keywords) and return the :class:`Report`."""
    key = exercise_key(exercise)
    found = dict(namespace or {})
    found.update(answers)
    report = Report(key, seed)
    items = ITEMS[key]
    bar = None
    if progress:
        from ...progress import tqdm
        bar = tqdm(total=len(items), desc=f"battery {key[:2]}", delay=2, file=sys.stdout, leave=False)
    torch_threads = torch.get_num_threads()
    rng_state = torch.random.get_rng_state()
    try:
        with warnings.catch_warnings(record=True) as seen:   # never printed: listed in the report
            warnings.simplefilter("always")
            for item in items:
                report.rows.append(_run_item(key, item, found, seed))
                if bar is not None:
                    bar.update(1)
        report.warnings = list(dict.fromkeys(f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}"
                                             for w in seen if str(w.message)))
    finally:
        if bar is not None:
            bar.close()
        torch.set_num_threads(torch_threads)
        torch.random.set_rng_state(rng_state)     # the learner's own random stream is left as it was
    return report


def check_all(exercise, namespace: dict | None = None, *, seed: int = DEFAULT_SEED, **answers) -> None:
    """Print the battery's table for one exercise (see the module's docstring).

    Skipped while nbgrader validates or grades the notebook (``NBGRADER_EXECUTION`` set): the
    grade comes from the test cells, and grading time stays short."""
    if os.environ.get("NBGRADER_EXECUTION"):
        print("The battery is skipped while the notebook is graded.")
        return
    report = run(exercise, namespace, seed=seed, **answers)
    print(report.table())
    if report.warnings:
        print("Python warned while your code ran (no points are lost for warnings):")
        for w in report.warnings[:5]:
            print(f"  {w}")
