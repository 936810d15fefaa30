"""Own work vs the workbook's reference, and code that hides what it runs (no kernel needed).

* ``own.EXERCISES`` matches the notebooks: graded names = answer cells, provided objects = what
  the read-only cells before the first answer import from the package;
* the grader's static reading (``delegation.scan``) and the run-time evidence
  (``own.reference_uses``) find each form of delegation, and nothing in honest code: the
  solutions, every catalogued mistake and alternative;
* ``verdict.obfuscation`` flags dynamic imports, encoded names and code built at run time;
* the check adapter's PyTorch layer specs rebuild the same layer in another process.
"""

import ast

import nbformat
import pytest
import torch
import torch.nn as nn

from attention_workbook.checks import own
from awb_grader import catalog
from awb_grader.verdict import delegation, outside as verdict
from awb_grader.catalog.shortcuts import shortcuts
from awb_grader.core.course import SOLUTIONS, assignments
from awb_grader.hidden import _adapter as A
from awb_grader.devtools.variants import solution_cells

RO = [
    "import attention_workbook",
    "import torch\nimport torch.nn as nn\nfrom attention_workbook.checks import ex05 as checks",
]


def _cells(assignment, overrides=None):
    """(student cells, every code cell) of the solution notebook with ``overrides``."""
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    sol = solution_cells(assignment)
    mine, every = [], []
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if c.cell_type != "code" or (meta.get("grade") and not meta.get("solution")):
            continue
        src = (
            (overrides or {}).get(meta.get("grade_id"), sol.get(meta.get("grade_id")))
            if meta.get("solution")
            else c.source
        )
        every.append(src)
        if meta.get("solution"):
            mine.append(src)
    return mine, every


@pytest.mark.parametrize("assignment", assignments())
def test_exercise_table_matches_the_notebook(assignment):
    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    graded, provided, seen_answer = [], set(), False
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if c.cell_type != "code":
            continue
        if meta.get("solution"):
            graded.append(meta["grade_id"])
            seen_answer = True
        elif not meta.get("grade") and not seen_answer:
            tree = ast.parse("\n".join(ln for ln in c.source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
            for n in ast.walk(tree):
                if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("attention_workbook") \
                        and not n.module.startswith("attention_workbook.checks"):
                    for al in n.names:
                        obj, name = delegation.canonical(f"{n.module}.{al.name}")
                        provided.add(name)
    entry = own.EXERCISES[assignment[:2]]
    assert entry["graded"] == graded
    assert set(entry["provided"]) == provided


FORMS = {
    "subclass": (
        "MultiHeadAttention",
        "import attention_workbook.mha\n\n"
        "class MultiHeadAttention(attention_workbook.mha.MultiHeadAttention):\n    pass\n",
        "subclasses attention_workbook.mha.MultiHeadAttention",
    ),
    "alias": (
        "MultiHeadAttention",
        "from attention_workbook.mha import MultiHeadAttention as _R\n\nclass MultiHeadAttention(_R):\n    pass\n",
        "subclasses attention_workbook.mha.MultiHeadAttention",
    ),
    "wrapper": (
        "split_heads",
        "def split_heads(x, n_heads):\n    return attention_workbook.mha.split_heads(x, n_heads)\n",
        "uses attention_workbook.mha.split_heads",
    ),
    "getattr": (
        "merge_heads",
        "import attention_workbook.mha as m\n\ndef merge_heads(x):\n    return getattr(m, 'merge_heads')(x)\n",
        "uses attention_workbook.mha.merge_heads",
    ),
    "helper": (
        "split_heads",
        "def _h(x, n):\n    from attention_workbook import mha\n    return mha.split_heads(x, n)\n\n"
        "def split_heads(x, n_heads):\n    return _h(x, n_heads)\n",
        "uses attention_workbook.mha.split_heads",
    ),
    "import_as_graded_name": (
        "mha_param_count",
        "from attention_workbook.mha import mha_param_count\n",
        "is attention_workbook.mha.mha_param_count",
    ),
    "importlib": (
        "merge_heads",
        "import importlib\n\ndef merge_heads(x):\n"
        "    return importlib.import_module('attention_workbook.mha').merge_heads(x)\n",
        "uses attention_workbook.mha.merge_heads",
    ),
    "sys_modules": (
        "split_heads",
        "import sys\n\ndef split_heads(x, n_heads):\n"
        "    return sys.modules['attention_workbook.mha'].split_heads(x, n_heads)\n",
        "uses attention_workbook.mha.split_heads",
    ),
    "dunder_import": (
        "mha_param_count",
        "def mha_param_count(d_model, bias=True):\n"
        "    return __import__('attention_workbook.mha', fromlist=['x']).mha_param_count(d_model, bias)\n",
        "uses attention_workbook.mha.mha_param_count",
    ),
    "attention_core": (
        "MultiHeadAttention",
        "class MultiHeadAttention(nn.Module):\n    def forward(self, x):\n"
        "        from attention_workbook.mha import attention\n        return attention(x, x, x)[0]\n",
        "uses attention_workbook.mha.attention",
    ),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_static_scan_and_runtime_evidence_find_each_form(form):
    name, src, expected = FORMS[form]
    assert delegation.scan([src], RO + [src], "05") == {name: [expected]}
    ns = {"__name__": "__main__"}
    for cell in RO + [src]:
        exec(compile(cell, "<cell>", "exec"), ns)  # noqa: S102 - the notebook's cells
    found = " ".join(own.reference_uses(ns[name], "05", ns))     # the run-time evidence: at least the module
    assert expected.split(" ")[-1].rsplit(".", 1)[0] in found, found


def test_what_an_exercise_provides_is_allowed_and_locals_never_resolve():
    block = "class TransformerBlock(nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
            "        self.attn = MultiHeadAttention(4, 2)\n"
    ro = RO + ["from attention_workbook.mha import MultiHeadAttention"]
    assert delegation.scan([block], ro + [block], "06") == {}
    assert delegation.scan([block], ro + [block], "05") == {          # in 05 it is graded
        "MultiHeadAttention": ["is attention_workbook.mha.MultiHeadAttention"]}
    get_batch = "def get_batch(data, block_size, batch_size, generator=None):\n    return data[:block_size]\n"
    later = "from attention_workbook import data, gpt"                  # a read-only cell after the answers
    assert delegation.scan([get_batch], [get_batch, later], "08") == {}
    overridden = "from attention_workbook.gpt import lr_at\n\ndef lr_at(step, w, m, hi, lo):\n    return hi\n"
    assert delegation.scan([overridden], [overridden], "08") == {}


@pytest.mark.parametrize("assignment", assignments())
def test_no_honest_code_is_taken_for_delegation_or_obfuscation(assignment):
    variants = [{}] + [{m.cell: m.source, **m.extra_cells} for m in catalog.mistakes(assignment)]
    variants += [dict(a.cells) for a in catalog.alternatives(assignment)]
    for over in variants:
        mine, every = _cells(assignment, over)
        assert delegation.scan(mine, every, assignment[:2]) == {}, over
        assert not [h for src in mine for h in verdict.obfuscation(src)], over


@pytest.mark.parametrize("sc", [s for s in shortcuts() if s.kind.startswith("delegation")], ids=lambda s: s.id)
def test_every_catalogued_delegation_is_read_from_the_source(sc):
    mine, every = _cells(sc.assignment, sc.cells)
    found = delegation.scan(mine, every, sc.assignment[:2])
    assert set(found) == set(sc.cells), found


@pytest.mark.parametrize("sc", [s for s in shortcuts() if s.kind.startswith("tampering")], ids=lambda s: s.id)
def test_encoded_tampering_is_flagged_with_its_reason(sc):
    hits = [h for src in sc.cells.values() for h in verdict.obfuscation(src)]
    assert any("computed name" in h for h in hits) and any("decodes" in h for h in hits), hits
    assert not any(delegation.scan([src], RO + [src], sc.assignment[:2]) for src in sc.cells.values())


def test_obfuscation_reasons():
    hits = verdict.obfuscation("x = ''.join(map(chr, [97]))\ny = eval('1')\nz = __import__('os')\n"
                               "exec(compile('1', 'f', 'eval'))\nclass M(type): pass\nclass K(metaclass=M): pass\n")
    text = " ".join(hits)
    for phrase in ("chr", "eval", "__import__", "exec", "compile", "metaclass"):
        assert phrase in text, (phrase, hits)


@pytest.mark.parametrize("layer", [
    nn.MultiheadAttention(8, 2, batch_first=True, bias=False),
    nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True),
    nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
], ids=["mha", "encoder", "decoder"])
def test_torch_layers_cross_to_the_student_process_unchanged(layer):
    import io

    torch.manual_seed(0)
    for p in layer.parameters():
        torch.nn.init.normal_(p)
    layer.eval()
    buf = io.BytesIO()
    torch.save(A.torch_spec(layer), buf)
    copy = A.torch_from_spec(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        if isinstance(layer, nn.MultiheadAttention):
            assert torch.equal(copy(x, x, x)[0], layer(x, x, x)[0])
        elif isinstance(layer, nn.TransformerDecoderLayer):
            assert torch.equal(copy(x, x), layer(x, x))
        else:
            assert torch.equal(copy(x), layer(x))


def test_visible_check_says_so_at_once():
    from attention_workbook.checks import ex05 as checks
    from attention_workbook.checks.core import CheckFailed

    ns = {"__name__": "__main__"}
    exec(FORMS["subclass"][1], ns)  # noqa: S102 - a submission form under test
    with pytest.raises(
        CheckFailed, match="workbook's reference `attention_workbook.mha.MultiHeadAttention`; write your own"
    ):
        checks.mha_init(ns["MultiHeadAttention"])


def test_hidden_block_check_loads_weights_into_the_blocks_own_submodules():
    """Weights go INTO the block's sub-modules (any holder of them sees them): private names
    inside the feed-forward and residual wrappers around the named attributes both work."""
    import torch.nn.functional as F

    from attention_workbook.mha import MultiHeadAttention
    from awb_grader.hidden import ex06 as hidden

    src = '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self._up, self._down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self._down(F.relu(self._up(x)))


class Sub(nn.Module):
    def __init__(self, norm, fn, dropout):
        super().__init__()
        self.norm, self.fn, self.drop = norm, fn, nn.Dropout(dropout)

    def forward(self, x, **kw):
        return x + self.drop(self.fn(self.norm(x), **kw))


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, pre_ln=True):
        super().__init__()
        self.attn, self.ff = MultiHeadAttention(d_model, n_heads), FeedForward(d_model, d_ff)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.steps = nn.ModuleList([Sub(self.ln1, self.attn, dropout), Sub(self.ln2, self.ff, dropout)])

    def forward(self, x, mask=None):
        return self.steps[1](self.steps[0](x, mask=mask))
'''
    ns = {"__name__": "__main__", "nn": nn, "F": F, "torch": torch, "MultiHeadAttention": MultiHeadAttention}
    exec(compile(src, "<cell>", "exec"), ns)  # noqa: S102 - the cell under test
    hidden.block_pre_ln(ns["TransformerBlock"])
