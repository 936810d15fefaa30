"""Comparing what two gradings wrote (the tests and the benchmarks: sequential against parallel,
one course root against a cluster's merged shards)."""

from __future__ import annotations


def gradebook_dump(db_url: str) -> list[tuple]:
    """Every grade and comment of every submission, sorted: to compare two gradebooks."""
    from nbgrader.api import Gradebook

    out = []
    with Gradebook(db_url) as gb:
        for a in gb.assignments:
            for sub in gb.assignment_submissions(a.name):
                out.append((a.name, sub.student.id, "timestamp", str(sub.timestamp)))
                for nb in sub.notebooks:
                    out.append((a.name, sub.student.id, nb.name, "flagged", nb.flagged))
                    for g in nb.grades:
                        out.append((a.name, sub.student.id, g.name, g.auto_score, g.manual_score,
                                    g.extra_credit, g.needs_manual_grade))
                    for c in nb.comments:
                        out.append((a.name, sub.student.id, c.name, c.auto_comment, c.manual_comment))
    return sorted(out, key=repr)
