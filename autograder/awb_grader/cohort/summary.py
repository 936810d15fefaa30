"""The cohort's summary: the score distribution per exercise (and ``summary/scores.png``), the
flagged submissions with their reasons, and the checks the cohort failed most, each with the
catalogued misconception that most likely explains it."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from ..core.records import FLAGGED, UNGRADABLE, Record, points_text


def misconceptions(records: list[Record], assignment: str, top: int = 5) -> list[dict]:
    """The checks the cohort failed most, each with the catalogued mistakes that explain it.

    A mistake *explains* a student's failure when the student lost every cell in its
    ``must_fail`` and, where the mistake has a visible ``hint``, that hint appears in the
    student's error output. Returns [{cell, n, share, mistakes: [(description, n_students)]}]."""
    from .. import catalog

    graded = [r for r in records if r.assignment == assignment and r.status != UNGRADABLE]
    if not graded:
        return []
    fails = Counter(c for r in graded for c in r.failed_cells)
    cat = catalog.mistakes(assignment)
    out = []
    for cell, n in fails.most_common(top):
        expl = Counter()
        for m in cat:
            if cell not in m.must_fail:
                continue
            for r in graded:
                if catalog.explains(m, r.failed_cells, r.errors):
                    expl[m.description] += 1
        # a check that only hidden tests catch: fall back to every mistake that names it
        ranked = expl.most_common(2) or [(m.description, 0) for m in cat if cell in m.must_fail][:2]
        out.append({"cell": cell, "n": n, "share": n / len(graded), "mistakes": ranked})
    return out


def histogram(records: list[Record], dest: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r.assignment for r in records})
    cols = min(3, len(names)) or 1
    rows = (len(names) + cols - 1) // cols or 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax, a in zip(axes.flat, names):
        rs = [r for r in records if r.assignment == a]
        pct = [100 * r.score / r.max_score if r.max_score else 0 for r in rs]
        ax.hist(pct, bins=[0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100.001], color="#4c72b0", edgecolor="white")
        ax.set_title(f"{a[:22]} (n={len(rs)})", fontsize=8)
        ax.set_xlabel("score (%)", fontsize=7)
        ax.set_ylabel("students", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(dest, dpi=90)
    plt.close(fig)
    return dest


def summarize(res) -> str:
    """The summary of a cohort run (a ``run.CohortResult``), as printed and kept in ``summary/summary.txt``."""
    recs = res.records
    from ..isolation.sandbox import WARNING

    lines = [WARNING, ""] if res.sandbox == "limits" else []
    lines += [f"cohort: {len({r.student for r in recs})} student(s), {len(recs)} submission(s); "
             f"graded now {len(res.graded_now)}, kept {res.skipped}; {res.seconds:.0f} s; sandbox {res.sandbox}", ""]
    lines.append("score distribution per exercise (points):")
    lines.append(f"  {'exercise':<30} {'n':>4} {'mean':>6} {'median':>6} {'max':>5}  full  zero  flagged")
    for a in sorted({r.assignment for r in recs}):
        rs = [r for r in recs if r.assignment == a]
        sc = [r.score for r in rs]
        mx = rs[0].max_score
        lines.append(f"  {a:<30} {len(rs):>4} {statistics.mean(sc):>6.1f} {statistics.median(sc):>6.1f} "
                     f"{points_text(mx):>5}  {sum(s == mx for s in sc):>4}  {sum(s == 0 for s in sc):>4}  "
                     f"{sum(r.status in (FLAGGED, UNGRADABLE) for r in rs):>7}")
    if recs:
        (res.root / "summary").mkdir(exist_ok=True)
        lines.append(f"  histogram: {histogram(recs, res.root / 'summary' / 'scores.png')}")
    flagged = [r for r in recs if r.status in (FLAGGED, UNGRADABLE)]
    lines += ["", f"flagged submissions ({len(flagged)}; all reasons in flags.csv):"]
    for r in flagged[:40]:
        lines.append(f"  {r.student:<14} {r.assignment[:2]}  {r.status:<10} {'; '.join(r.reasons)[:150]}")
    if len(flagged) > 40:
        lines.append(f"  ... and {len(flagged) - 40} more")
    for f in res.unmatched[:20]:
        lines.append(f"  {'?':<14} ??  unmatched  file {f!r} names no exercise")
    for f, why in getattr(res, "unread", [])[:20]:
        lines.append(f"  {'?':<14} ??  not read   {f!r}: {why}"[:200])
    lines += ["", "what the cohort got wrong (most failed checks -> the misconception they most often mean):"]
    for a in sorted({r.assignment for r in recs}):
        ms = misconceptions(recs, a)
        if not ms:
            continue
        lines.append(f"  {a}")
        for m in ms:
            lines.append(f"    {m['cell']:<28} failed by {m['n']:>3} ({100 * m['share']:.0f}%)")
            for desc, n in m["mistakes"]:
                lines.append(f"        {'~' if not n else str(n):>3} x {desc}")
    lines += ["", f"grades:   {res.root / 'grades.csv'}", f"flags:    {res.root / 'flags.csv'}",
              f"feedback: {res.root / 'feedback'}/<student>/<exercise>/", f"summary:  {res.root / 'summary'}"]
    return "\n".join(lines)
