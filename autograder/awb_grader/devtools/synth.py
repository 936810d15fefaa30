"""A synthetic cohort: N students' submissions as one LMS-style zip (drives the benchmark).

Each student submits every chosen exercise. Most submissions are built from the release like
the catalog tests do (``variants.student_notebook``): correct work, a correct alternative, one
or two catalogued mistakes, an unanswered function; a few are broken files (syntax error,
corrupt JSON, stripped nbgrader metadata). File names follow the usual LMS download
(``<student>_<exercise>.ipynb``, sometimes ``<student>_late_<id>_<exercise>-1.ipynb``).
Deterministic for a given seed.
"""

from __future__ import annotations

import random
import zipfile
from pathlib import Path

import nbformat

from .. import catalog
from ..core.metadata import cell_meta
from .variants import solution_cells, student_notebook

KINDS = ["correct", "correct", "alternative", "mistake", "mistake", "two_mistakes", "unanswered",
         "syntax_error", "stripped_metadata", "corrupt"]


def submission(release_nb: Path, assignment: str, kind: str, rnd: random.Random) -> str:
    """The text of one synthetic submission of ``kind``."""
    mistakes = catalog.mistakes(assignment)
    alts = catalog.alternatives(assignment)
    if kind == "alternative" and alts:
        nb = student_notebook(release_nb, assignment, dict(rnd.choice(alts).cells))
    elif kind in ("mistake", "two_mistakes") and mistakes:
        picks = rnd.sample(mistakes, min(len(mistakes), 1 if kind == "mistake" else 2))
        over: dict = {}
        for m in picks:
            over.update({m.cell: m.source, **m.extra_cells})
        nb = student_notebook(release_nb, assignment, over)
    elif kind == "unanswered":
        cells = sorted(solution_cells(assignment))
        nb = student_notebook(release_nb, assignment, unanswered=(rnd.choice(cells),))
    elif kind == "syntax_error":
        cell = rnd.choice(sorted(solution_cells(assignment)))
        nb = student_notebook(release_nb, assignment, {cell: f"def {cell}(:\n    return (\n"})
    else:
        nb = student_notebook(release_nb, assignment)
    if kind == "stripped_metadata":
        for c in nb.cells:
            c.metadata.pop("nbgrader", None)
    text = nbformat.writes(nb)
    if kind == "corrupt":
        text = text[: len(text) // 3]
    return text


def make_cohort(dest_zip: Path, release_root: Path, assignments: list[str], n_students: int, seed: int = 0,
                kinds: list[str] | None = None) -> dict[tuple[str, str], str]:
    """Write the zip; returns {(student, assignment): kind}."""
    rnd = random.Random(seed)
    kinds = kinds or KINDS
    plan = {}
    dest_zip = Path(dest_zip)
    dest_zip.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest_zip, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(n_students):
            student = f"s{i:04d}"
            for a in assignments:
                kind = kinds[(i + rnd.randrange(len(kinds))) % len(kinds)]
                plan[(student, a)] = kind
                rel = Path(release_root) / a / f"{a}.ipynb"
                name = (f"{student}_late_{rnd.randrange(10**5)}_{a}-1.ipynb" if rnd.random() < 0.1
                        else f"{student}_{a}.ipynb")
                zf.writestr(name, submission(rel, a, kind, rnd))
    return plan


# -- the adversarial cohort (tests/test_adversarial.py) ----------------------------------------
ADV_ASSIGNMENT = "04_queries_keys_values"

_PATCHER = """
# --- tampering: make every check pass whatever the code does ---
import sys, numpy
import torch, torch.testing
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
numpy.allclose = lambda *a, **k: True
import attention_workbook.checks.core as _core
_core.close = lambda *a, **k: True
_core.expect_close = lambda *a, **k: None
import attention_workbook.checks.ex04 as _visible
_mods = [_visible]
try:
    import awb_grader.hidden.ex04 as _hidden
    _mods.append(_hidden)
except ImportError:
    pass
for _m in _mods:
    for _f in dir(_m):
        if _f.startswith("_"):
            continue
        _o = getattr(_m, _f)
        if callable(_o) and getattr(_o, "__module__", "") == _m.__name__:
            setattr(_m, _f, lambda *a, **k: None)
get_ipython().showtraceback = lambda *a, **k: None
"""


SANDBOX_ONLY = ("forker", "reader", "writer", "writer2", "netty")
COPIER_FILE = f"copier_1234567_890123_{ADV_ASSIGNMENT}.ipynb"     # Canvas's name: user id 1234567
# answer-cell code of the hostile kinds, shared with tests/test_tiers.py's hostile set
STUB = "def softmax(x, dim=-1):\n    raise NotImplementedError()\n"
HOG = "\n_hog = [bytearray(2**28) for _ in range(64)]\n"
FORKER = '''
import os, time
_kids = []
for _ in range(400):
    _pid = os.fork()
    if _pid == 0:
        time.sleep(2)
        os._exit(0)
    _kids.append(_pid)
'''


def disguised(code: str, keep: set = frozenset()) -> str:
    """A copier's disguise of someone's answer cell: every variable the cell assigns renamed
    (not the arguments, which the stub fixes and the checks may pass by name, nor ``keep``, nor
    what it only reads: modules, builtins, other cells' functions), the code
    laid out anew by ``ast.unparse`` (quotes, spacing, line breaks; comments gone), indented
    by two, a comment of its own on top."""
    import ast
    import builtins

    tree = ast.parse(code)
    args = {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local = assigned - args - set(keep) - set(dir(builtins))
    names: dict = {}

    class Rename(ast.NodeTransformer):
        def _new(self, name):
            return names.setdefault(name, f"my_{name}_{len(names)}") if name in local else name

        def visit_Name(self, node):
            node.id = self._new(node.id)
            return node

    return "# my own work\n\n" + ast.unparse(Rename().visit(tree)).replace("    ", "  ") + "\n\n\n"


def adversarial_cohort(dest: Path, release_nb: Path, repo: Path, sandboxed: bool = True) -> dict[str, dict]:
    """Write one file per hostile or broken kind (plus honest students) into ``dest``.
    Returns {file name: {"student", "kind", "expect"}} where expect says what must happen.
    ``sandboxed=False`` (no isolation tier) leaves out the kinds only a sandbox can stop
    (``SANDBOX_ONLY``: they would really read solutions/, write the gradebook and the
    repository, reach the network, fork without limit as root)."""
    from ..catalog import alternatives, mistakes

    a = ADV_ASSIGNMENT
    sol = solution_cells(a)
    mk = {m.id: m for m in mistakes(a)}
    alt = next(x for x in alternatives(a) if x.id == "einsum_and_loops")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict] = {}

    def put(student, kind, nb_or_text, expect, name=None):
        if not sandboxed and student in SANDBOX_ONLY:
            return
        name = name or f"{student}_{a}.ipynb"
        text = nb_or_text if isinstance(nb_or_text, str) else nbformat.writes(nb_or_text)
        (dest / name).write_text(text)
        files[name] = {"student": student, "kind": kind, "expect": expect}

    def nb(over=None, **kw):
        return student_notebook(release_nb, a, over or {}, **kw)

    # honest students (their grades must not move)
    put("ada", "honest: correct", nb(), "full")
    put("ben", "honest: correct alternative", nb(dict(alt.cells)), "full")
    put("copier", "a renamed, reformatted copy of ben's answers (a Canvas file name)",
        nb({c: disguised(code) for c, code in alt.cells.items()}), "full; alike: ben", name=COPIER_FILE)
    m = mk["sdpa_no_scaling"]
    put("dev", "honest: a catalogued mistake", nb({m.cell: m.source}), "mistake:sdpa_no_scaling")

    put("loop", "infinite loop", nb({"padding_mask": "def padding_mask(lengths, T):\n    while True:\n        pass\n"}),
        "flag:time limit")
    put("hog", "memory hog", nb({"softmax": sol["softmax"] + HOG}),
        "flag:memory")
    put("forker", "fork attempt", nb({"causal_mask": sol["causal_mask"] + FORKER}), "flag:processes")
    put("farid", "syntax error", nb({"causal_mask": "def causal_mask(T):\n    return torch.ones(T, T).tril(\n"}),
        "flag:SyntaxError")
    put("jules", "corrupt JSON", nbformat.writes(nb())[:1500], "ungradable:invalid JSON")
    put("emptyed", "empty notebook", '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}',
        "ungradable:empty")
    put("mallory", "wrong file name (names no exercise)", nb(), "unmatched", name="mallory_homework.ipynb")
    put("nina", "wrong file name (a copy suffix)", nb(), "full", name=f"nina_{a} (1).ipynb")
    stripped = nb()
    for c in stripped.cells:
        c.metadata.pop("nbgrader", None)
    put("hana", "stripped nbgrader metadata", stripped, "full")
    m = mk["sdpa_mask_after_softmax"]
    deleted = nb({m.cell: m.source})
    deleted.cells = [c for c in deleted.cells if cell_meta(c).get("grade_id") != "test_sdpa_causal"]
    put("ivan", "deleted test cells", deleted, "mistake:sdpa_mask_after_softmax")
    m = mk["causal_mask_upper"]
    edited = nb({m.cell: m.source})
    for c in edited.cells:
        gid = cell_meta(c).get("grade_id", "")
        if gid.startswith("test_"):
            c.source = "print('all good')"
        elif gid.startswith("ro-") and "import" in c.source and "checks" in c.source:
            c.source = ("import math\nimport torch\nclass checks:\n    def __getattr__(self, n):\n"
                        "        return lambda *a: None\nchecks = checks()\n")
    put("edwin", "edited locked cells (tests and setup)", edited, "mistake:causal_mask_upper")
    m = mk["softmax_wrong_axis"]
    put("patch", "patched checking machinery", nb({m.cell: m.source + _PATCHER}), "tamper:softmax_wrong_axis")
    reader = STUB + f'''
import json
_sol = json.load(open({str(repo / "solutions" / a / (a + ".ipynb"))!r}))
for _c in _sol["cells"]:
    if _c["cell_type"] == "code" and "def softmax" in "".join(_c["source"]):
        exec("".join(_c["source"]))
'''
    put("reader", "reads solutions/", nb({"softmax": reader}), "flag:files")
    put("writer", "writes the gradebook and outside its folder", nb({"causal_mask": sol["causal_mask"] + '''
import sqlite3
_db = sqlite3.connect("../../../gradebook.db")
_db.execute("UPDATE grade SET manual_score = 99")
_db.commit()
'''}), "flag:files")
    put("writer2", "writes into the repository", nb({"causal_mask": sol["causal_mask"] + f'''
open({str(repo / "exercises" / "PWNED.txt")!r}, "w").write("pwned")
'''}), "flag:files")
    net = nb()
    net.cells.insert(4, nbformat.v4.new_code_cell(
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=5).read()"))
    put("netty", "network access", net, "flag:network")
    put("shout", "50 MB of output", nb({"softmax": sol["softmax"] + "\nprint('x' * 50_000_000)\n"}), "flag:output")
    return files


def adversarial_download(folder: Path, dest_zip: Path, release_nb: Path) -> dict[str, dict]:
    """The LMS download of the adversarial cohort: every file of ``folder`` (``adversarial_cohort``)
    in one zip, with uploads that are archives and an unsafe member of the download itself (issue 37).
    Returns their entries as ``adversarial_cohort`` does ("?": a member no student gets)."""
    import io

    a = ADV_ASSIGNMENT
    honest = nbformat.writes(student_notebook(release_nb, a))
    broken = nbformat.writes(student_notebook(release_nb, a, {"softmax": "def softmax(x, dim=-1):\n    1 / 0\n"}))

    def archive(members, level=6):
        b = io.BytesIO()
        with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as z:
            for name, text in members:
                if text is None:          # 1 GiB of zeros, deflated (level 1: a few MB, made in seconds)
                    with z.open(name, "w", force_zip64=True) as f:
                        for _ in range(1024):
                            f.write(bytes(1 << 20))
                else:
                    z.writestr(name, text)
        return b.getvalue()

    extra = {
        f"alice_{a}.ipynb": ("alice", "honest, beside an archive that names her file", honest, "full"),
        f"mallet_{a}.zip": ("mallet", "an archive holding a notebook named like alice's",
                            archive([(f"alice_{a}.ipynb", broken)]), "ungradable:a zip archive"),
        f"eve_{a}.zip": ("eve", "an archive with a member outside it ('../')",
                         archive([(f"../../../../../tmp/awb_eve_{a}.ipynb", honest)]), "ungradable:a zip archive"),
        f"zed_{a}.zip": ("zed", "an archive inflating to 1 GiB", archive([(f"bomb_{a}.ipynb", None)], 1),
                         "ungradable:a zip archive"),
        f"../../../../../tmp/awb_x_{a}.ipynb": ("?", "a member of the download outside it ('../')", honest,
                                                 "unread:outside the download"),
    }
    with zipfile.ZipFile(dest_zip, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(Path(folder).iterdir()):
            z.write(p, f"adversarial/{p.name}")
        for name, (_, _, data, _) in extra.items():
            z.writestr(name if name.startswith("..") else f"adversarial/{name}", data)
    return {name: {"student": st, "kind": kind, "expect": expect} for name, (st, kind, _, expect) in extra.items()}


SHORTCUT_EXERCISES = ["04", "05", "06", "07", "08", "09"]


def shortcut_cohort(inbox: Path, contract: list | None = None, which: list | None = None,
                    with_honest: bool = True) -> dict[tuple[str, str], str]:
    """The cohort of ``tests/test_shortcuts.py`` written into ``inbox``: the catalogued shortcuts ``which``
    (default: every one; delegation to the workbook's reference in each form, encoded tampering), the
    contract-breaking mistakes ``contract`` ([(assignment, mistake)]; default: every one), and, with
    ``with_honest``, an honest student of each of exercises 04-09 (the correct alternatives are graded the same
    way by the catalog test). Returns {(assignment, student): what they did} of the honest students."""
    from ..catalog.shortcuts import contract_breaking, shortcuts
    from ..core.course import EXERCISES

    def student(name: str) -> str:
        return name.replace("_", "-")

    inbox = Path(inbox)
    inbox.mkdir(parents=True, exist_ok=True)
    honest = {}
    for sc in shortcuts() if which is None else which:
        a = sc.assignment
        others = tuple(c for c in solution_cells(a) if c not in sc.cells) if sc.unanswered else ()
        nb = student_notebook(EXERCISES / a / f"{a}.ipynb", a, dict(sc.cells), unanswered=others)
        nbformat.write(nb, inbox / f"{student(sc.id)}_{a}.ipynb")
    for a, m in (contract_breaking() if contract is None else contract):
        nb = student_notebook(EXERCISES / a / f"{a}.ipynb", a, {m.cell: m.source, **m.extra_cells})
        nbformat.write(nb, inbox / f"{student('contract-' + m.id)}_{a}.ipynb")
    for a in sorted({sc.assignment for sc in shortcuts()}) if with_honest else ():
        nbformat.write(student_notebook(EXERCISES / a / f"{a}.ipynb", a), inbox / f"honest_{a}.ipynb")
        honest[(a, "honest")] = "the reference solution"
    return honest
