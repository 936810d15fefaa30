"""Lecture widgets build the same under ipywidgets 8 (local JupyterLab) and 7.7 (what Colab ships).

Every widget a lecture builds is found in its code cells: a constructor (``widgets.IntSlider(...)``,
``Dropdown(...)``) or an ``interact`` abbreviation (``(0.0, 1.0, 0.05)``, a list, a bool). Each is
built here, outside the lecture; an argument that names something the lecture defines itself
(``cfg.lr``, ``table.roles``) is left out (options become ``["a", "b"]``). A keyword that is not
a trait of the widget, a positional argument too many, a deprecation warning or a value the
widget refuses is a failure.

Colab's stack (ipywidgets 7.7.1, ipykernel 6.17.1, IPython 7.34.0, traitlets 5.7.1,
jupyter_client 6.1.12) is installed on demand into ``build/colab-widgets`` (pip --target, no
dependencies; nothing in .venv changes) and put first on PYTHONPATH. Under it the same widgets
must build with the same trait values, and in a kernel of that stack an ``interact`` draws its
figure into the output widget and the workbook's progress bar stores its finished text.

``python tests/test_widgets.py`` prints what it built as JSON (the test runs it under 7.7).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LECTURES = sorted((REPO / "lectures").glob("*.ipynb"))
OVERLAY = REPO / "build" / "colab-widgets"
COLAB_STACK = ["ipywidgets==7.7.1", "ipykernel==6.17.1", "ipython==7.34.0", "traitlets==5.7.1",
               "jupyter_client==6.1.12", "backcall", "pickleshare", "ipython_genutils", "decorator"]
UNRESOLVED = object()


def _code_cells(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            src = "".join(cell["source"])
            yield i, re.sub(r"^\s*[%!].*$", "", src, flags=re.M)  # magics are not Python


def widget_calls(path):
    """(where, kind, name, call node) for every ipywidgets call in the lecture's code."""
    trees = [(i, ast.parse(src)) for i, src in _code_cells(path)]
    modules, names = set(), set()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules |= {a.asname or a.name for a in node.names if a.name == "ipywidgets"}
            elif isinstance(node, ast.ImportFrom) and node.module == "ipywidgets":
                names |= {a.asname or a.name for a in node.names}
    calls = []
    for i, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules:
                name = f.attr
            elif isinstance(f, ast.Name) and f.id in names:
                name = f.id
            else:
                continue
            kind = "interact" if name in ("interact", "interactive", "interact_manual") else "widget"
            calls.append((f"{path.stem}[{i}]:{node.lineno}:{name}", kind, name, node))
    return calls, modules, names


def _evaluator(modules, names):
    import ipywidgets

    ns = {m: ipywidgets for m in modules} | {n: getattr(ipywidgets, n, None) for n in names}

    def value(node):
        try:
            return eval(compile(ast.Expression(node), "<lecture>", "eval"), dict(ns))
        except Exception:  # noqa: BLE001 - a name the lecture defines (cfg, table, ...): left out
            return UNRESOLVED
    return value


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float):
        return round(v, 9)
    return v if isinstance(v, (int, str, bool, type(None))) else repr(v)


def _fingerprint(w, keys):
    keys = sorted(set(keys) | {"value"})
    return {"class": type(w).__name__, **{k: _plain(getattr(w, k)) for k in keys if w.has_trait(k)}}


def _build(make):
    """Call make() recording warnings; return (widget or exception, [warning texts])."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            w = make()
        except Exception as e:  # noqa: BLE001 - a value the widget refuses, an unknown argument
            w = e
    noisy = [f"{c.category.__name__}: {c.message}" for c in caught
             if issubclass(c.category, (DeprecationWarning, FutureWarning))
             or re.search(r"ipywidgets|traitlets", c.filename + str(c.message))]
    return w, noisy


def _positional_params(cls):
    """Names positional arguments bind to: the first __init__ up the MRO without *args."""
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            sig = inspect.signature(klass.__init__)
            if not any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
                return [p.name for p in list(sig.parameters.values())[1:]
                        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return []


def build_all():
    """Build every lecture widget under the ipywidgets importable here.

    Returns {"version", "built": {where: fingerprint}, "problems": [...], "left_out": [...]}.
    """
    import ipywidgets

    built, problems, left_out = {}, [], []
    with contextlib.redirect_stdout(io.StringIO()):  # interactive() clears its output widget: text here
        _build_lectures(built, problems, left_out)
    return {"version": ipywidgets.__version__, "built": built, "problems": problems, "left_out": left_out}


def _build_lectures(built, problems, left_out):
    import ipywidgets
    from ipywidgets import Widget, fixed, interactive

    for path in LECTURES:
        calls, modules, names = widget_calls(path)
        value = _evaluator(modules, names)
        for where, kind, name, node in calls:
            if kind == "widget":
                cls = getattr(ipywidgets, name, None)
                if name == "fixed":
                    continue
                if not (isinstance(cls, type) and issubclass(cls, Widget)):
                    problems.append(f"{where}: ipywidgets {ipywidgets.__version__} has no widget {name}")
                    continue
                params = _positional_params(cls)
                if len(node.args) > len(params):
                    problems.append(f"{where}: {len(node.args)} positional arguments, {name}() takes {params}")
                    continue
                given = [(params[k], a) for k, a in enumerate(node.args)] + [(k.arg, k.value) for k in node.keywords]
                kwargs = {}
                for key, arg in given:
                    if key not in cls.class_trait_names():
                        problems.append(
                            f"{where}: {key}= is not a trait of {name} in ipywidgets {ipywidgets.__version__}"
                        )
                    kwargs[key] = value(arg)
                if kwargs.get("options") is UNRESOLVED:
                    kwargs["options"] = ["a", "b"]
                    kwargs.pop("value", None), kwargs.pop("index", None)
                left_out += [f"{where}: {k}" for k, v in kwargs.items() if v is UNRESOLVED]
                kwargs = {k: v for k, v in kwargs.items() if v is not UNRESOLVED}
                w, noisy = _build(lambda: cls(**kwargs))
            else:  # interact(f, x=(0, 1, 0.1), ...): abbreviations; widget arguments are built above
                abbrevs = {}
                for kw in node.keywords:
                    if isinstance(kw.value, ast.Call) and any(kw.value is c[3] for c in calls):
                        continue
                    v = value(kw.value)
                    if v is UNRESOLVED:
                        left_out.append(f"{where}: {kw.arg}")
                    elif not isinstance(v, fixed):
                        abbrevs[kw.arg] = v
                if not abbrevs:
                    continue
                w, noisy = _build(lambda: interactive(lambda **kw: None, **abbrevs))
                if not isinstance(w, Exception):
                    for key, child in zip(abbrevs, w.children):
                        built[f"{where}:{key}"] = _fingerprint(child, ["min", "max", "step", "options"])
                    w.close()
                    w = None
                kwargs = abbrevs
            if isinstance(w, Exception):
                problems.append(f"{where}: {name}(**{kwargs!r}) raised {type(w).__name__}: {w}")
                continue
            problems += [f"{where}: {n}" for n in noisy]
            if w is not None:
                built[where] = _fingerprint(w, kwargs)
                w.close()


# ---------------------------------------------------------------------------------------------
# the tests

import pytest  # noqa: E402

pytestmark = pytest.mark.xdist_group("colab_widgets")  # one worker builds build/colab-widgets


def test_every_lecture_with_widgets_is_seen():
    for path in LECTURES:
        calls, modules, names = widget_calls(path)
        if modules or names:
            assert calls, f"{path.name} imports ipywidgets but no widget call was found: is the scan still right?"


def test_lecture_widgets_build_under_installed_ipywidgets():
    result = build_all()
    assert not result["problems"], "\n".join(result["problems"])
    assert len(result["built"]) >= 20, result
    print(
        f"ipywidgets {result['version']}: built {len(result['built'])}, "
        f"left out {len(result['left_out'])} lecture-defined arguments"
    )


@pytest.fixture(scope="module")
def colab_stack():
    """build/colab-widgets with Colab's widget stack (downloaded once; skipped when offline)."""
    marker = OVERLAY / ".complete"
    if marker.exists() and marker.read_text() == " ".join(COLAB_STACK):
        return OVERLAY
    fresh = OVERLAY.with_name(f"{OVERLAY.name}.{os.getpid()}")  # built aside, then moved in place
    shutil.rmtree(fresh, ignore_errors=True)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(fresh), *COLAB_STACK],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        shutil.rmtree(fresh, ignore_errors=True)
        pytest.skip(
            "cannot install Colab's ipywidgets 7.7.1 stack here (no package index?): "
            + (r.stderr.strip().splitlines() or ["pip failed"])[-1]
        )
    (fresh / ".complete").write_text(" ".join(COLAB_STACK))
    shutil.rmtree(OVERLAY, ignore_errors=True)
    fresh.rename(OVERLAY)
    return OVERLAY


def _env(overlay):
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (overlay, REPO) if p)
    return env


@pytest.mark.slow
def test_lecture_widgets_build_the_same_under_colab_ipywidgets_7(colab_stack):
    r = subprocess.run(
        [sys.executable, __file__], env=_env(colab_stack), capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    colab = json.loads(r.stdout)
    here = build_all()
    assert colab["version"].startswith("7.7"), colab["version"]
    assert not colab["problems"], "\n".join(colab["problems"])
    assert colab["built"].keys() == here["built"].keys()
    differ = [
        f"{k}: 7.7 {colab['built'][k]} vs {here['version']} {here['built'][k]}"
        for k in here["built"]
        if colab["built"][k] != here["built"][k]
    ]
    assert not differ, "\n".join(differ)


KERNEL_CELLS = [
    "import ipywidgets, IPython, ipykernel\nprint(ipywidgets.__version__, IPython.__version__, ipykernel.__version__)",
    "import matplotlib.pyplot as plt\nfrom ipywidgets import interact, IntSlider\n\n"
    "def draw(n=3):\n    plt.plot(range(n))\n    plt.show()\n\n"
    "interact(draw, n=IntSlider(value=3, min=1, max=9));",
    "from attention_workbook.progress import tqdm\nfor _ in tqdm(range(7), desc='steps'):\n    pass",
]


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["installed", "colab"])
def test_interact_and_progress_bar_in_a_kernel(stack, request):
    """In a kernel: interact draws its figure into the output widget; the bar stores 7/7."""
    import nbformat
    from nbclient import NotebookClient

    overlay = request.getfixturevalue("colab_stack") if stack == "colab" else ""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in KERNEL_CELLS]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute(env=_env(overlay))
    versions = nb.cells[0].outputs[0].text.split()
    assert versions[0].startswith("7.7" if stack == "colab" else "8."), versions
    for cell in nb.cells[1:]:
        assert not [o for o in cell.outputs if o.output_type == "error" or o.get("name") == "stderr"], cell.outputs
    views = [o for o in nb.cells[1].outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert views, nb.cells[1].outputs
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    drawn = [
        o
        for m in state.values()
        if m["model_name"] == "OutputModel"
        for o in m["state"].get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    assert drawn, "interact's output widget holds no figure"
    sliders = [m["state"] for m in state.values() if m["model_name"] == "IntSliderModel"]
    assert [(s["value"], s["min"], s["max"]) for s in sliders] == [(3, 1, 9)]
    bar = [o["data"]["text/plain"] for o in nb.cells[2].outputs if "text/plain" in o.get("data", {})]
    assert bar and "7/7" in bar[-1] and "100%" in bar[-1], nb.cells[2].outputs
    print(
        f"{stack}: ipywidgets {versions[0]}, IPython {versions[1]}, ipykernel {versions[2]}: "
        f"figure drawn, bar stored as {bar[-1]!r}"
    )


if __name__ == "__main__":
    json.dump(build_all(), sys.stdout, indent=1)
