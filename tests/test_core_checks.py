"""The machinery every check shares (attention_workbook.checks.core): warnings are recorded,
never printed, and explain a failure; one rule for integer answers; every check is guarded."""

import importlib
import re
import warnings

import numpy as np
import pytest
import torch

from attention_workbook.checks import core
from attention_workbook.checks.core import CheckFailed
from awb_grader.core.course import assignments
from awb_grader.devtools.variants import notebook_cells


# ----------------------------------------------------------------------------------------
# integer answers
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [12, np.int64(12), torch.tensor(12), torch.tensor([12]), torch.tensor([[12]])])
def test_integer_answers_that_count(value):
    assert core.as_int(value) == 12
    assert core.expect_int(value, "f()") == 12


@pytest.mark.parametrize("value,says", [(12.0, "float"), (torch.tensor(12.0), "float"), (True, "bool"),
                                        (torch.tensor([1, 2]), "Tensor"), (None, "None"), ("12", "str")])
def test_integer_answers_that_do_not(value, says):
    assert core.as_int(value) is None
    with pytest.raises(CheckFailed, match=says):
        core.expect_int(value, "f()")


def test_a_float_count_is_refused_by_visible_and_hidden_checks_alike():
    from attention_workbook.checks import ex05, ex06
    from awb_grader.hidden import ex05 as h05
    from awb_grader.hidden import ex06 as h06

    def mha_param_count(d_model, bias=True):
        return 4.0 * d_model * d_model + (4 * d_model if bias else 0)

    def block_param_count(d_model, d_ff, bias=True):
        return float(4 * d_model * d_model + 2 * d_model * d_ff + ((5 * d_model + d_ff) if bias else 0) + 4 * d_model)

    for check, fn in ((ex05.mha_param_count, mha_param_count), (h05.mha_param_count, mha_param_count),
                      (ex06.block_param_count, block_param_count), (h06.block_param_count, block_param_count)):
        mha_param_count.__module__ = block_param_count.__module__ = "__main__"
        with pytest.raises(CheckFailed):
            check(fn)

    def as_tensor(d_model, bias=True):    # a one-element integer tensor is an integer answer
        return torch.tensor([4 * d_model * d_model + (4 * d_model if bias else 0)])

    as_tensor.__module__ = "__main__"
    ex05.mha_param_count(as_tensor)
    h05.mha_param_count(as_tensor)


# ----------------------------------------------------------------------------------------
# warnings
# ----------------------------------------------------------------------------------------
def _noisy(x):
    warnings.warn("deprecated in the student's own code", DeprecationWarning)
    return x


def test_call_records_student_warnings_instead_of_printing_them(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert core.call(_noisy, 3) == 3
    assert capsys.readouterr().err == ""


def test_a_guarded_check_prints_no_warning_and_explains_a_failure_with_it(capsys):
    def check(fn):
        float(torch.ones(1, requires_grad=True) * 2)      # a tensor that requires grad -> a number: torch warns
        out = core.call(fn, torch.ones(2, 3), name="f")
        if out.shape != (2, 3):
            raise CheckFailed("f has the wrong shape")

    guarded = core.guarded(check)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        guarded(lambda x: x)                                # passes: nothing printed
        with pytest.raises(CheckFailed) as info:
            guarded(lambda x: torch.softmax(x, 0).T.T[None] if _noisy(True) else x)
    assert capsys.readouterr().err == ""
    assert "Python warned: deprecated in the student's own code" in info.value.plain()


def test_a_known_warning_becomes_the_hint_of_an_error_it_explains():
    def grad_of_a_non_leaf(x):
        y = x.detach().clone().requires_grad_(True).double()
        (y ** 2).sum().backward()
        return y.grad.norm()                                # y is not a leaf: .grad is None (torch warns)

    with pytest.raises(CheckFailed) as info:
        core.call(grad_of_a_non_leaf, torch.ones(3), name="gradient")
    assert "not a leaf" in info.value.plain() and "torch.autograd.grad" in info.value.hint


CHECK_CALL = re.compile(r"^(checks|hidden)\.(\w+)\(", re.M)


@pytest.mark.parametrize("assignment", assignments())
def test_every_check_a_test_cell_calls_is_guarded(assignment):
    n = assignment[:2]
    modules = {"checks": importlib.import_module(f"attention_workbook.checks.ex{n}"),
               "hidden": importlib.import_module(f"awb_grader.hidden.ex{n}")}
    _, tests, _ = notebook_cells(assignment)
    calls = {(m, f) for src in tests.values() for m, f in CHECK_CALL.findall(src)}
    assert calls
    unguarded = [f"{m}.{f}" for m, f in sorted(calls) if not getattr(getattr(modules[m], f), "__awb_guarded__", False)]
    assert not unguarded, unguarded


# ----------------------------------------------------------------------------------------
# "Reread": a link that opens the lecture section (in the checkout, on GitHub, on Colab)
# ----------------------------------------------------------------------------------------
def _reread_texts():
    """Every lecture section a visible check can tell a student to reread."""
    texts = set()
    for assignment in assignments():
        module = importlib.import_module(f"attention_workbook.checks.ex{assignment[:2]}")
        texts |= {v for k, v in vars(module).items() if k.startswith("SEC_") and isinstance(v, str)}
    return sorted(texts)


def test_every_reread_opens_its_lecture_section_locally_on_github_and_on_colab():
    import nbformat

    from attention_workbook import config
    from awb_grader.core.course import REPO

    url, release = config.repository()
    texts = _reread_texts()
    assert len(texts) > 30
    for text in texts:
        links = core.reread_links(text)
        assert links, text
        label, anchor = links["label"], links["local"].split("#cell-id=")[1]
        assert text.startswith(label) and re.match(r"lecture \d\d, ", label), label
        lecture = (REPO / "exercises" / "04_queries_keys_values" / links["local"].split("#")[0]).resolve()
        assert lecture.is_file(), f"{links['local']} does not open a file from an exercise folder"
        rel = lecture.relative_to(REPO)
        assert links["github"] == f"{url}/blob/{release}/{rel}#{anchor}"
        assert links["colab"] == f"{config.colab_url(str(rel))}#scrollTo={anchor}"
        # the anchor is there, and Colab finds its cell: metadata.id == anchor (`make links`)
        cells = [c for c in nbformat.read(lecture, as_version=4).cells if c.get("id") == anchor]
        assert cells and cells[0].metadata.get("id") == anchor and f'<a id="{anchor}">' in cells[0].source, \
            f"{rel}: no cell named {anchor!r} holding that anchor (run `make links`)"
    html = core.reread_html(texts[0])
    assert "Reread" in html and links["github"].split("/blob/")[0] in html and ">on Colab</a>" in html
    assert core.reread_links("the lecture on shapes") is None and core.reread_html("somewhere") is None


class _FakeShell:
    """Stands in for the kernel's IPython shell (a notebook front end is there)."""

    kernel = object()

    def __init__(self):
        from IPython.core.events import EventManager, available_events

        self.events = EventManager(self, available_events)


def test_in_a_notebook_the_reread_line_becomes_links_after_the_box(monkeypatch):
    import IPython
    from IPython.core import display_functions

    shown = []
    shell = _FakeShell()
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    monkeypatch.setattr(display_functions, "display", lambda obj, **kw: shown.append(obj.data))
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj.data))
    section = "lecture 04, section 'Padding masks' (lectures/04_queries_keys_values.ipynb#padding-mask)"
    err = CheckFailed("f(x) has the wrong values", hint="pad the keys", reread=section)
    text = "\n".join(err._render_traceback_())
    assert "Check failed" in text and "pad the keys" in text and "Reread" not in text
    assert "Padding masks" in str(err) and "Reread" in str(err)   # what nbgrader records keeps it all
    assert err._render_traceback_() and not shown                   # rendered twice, shown once, after the cell
    shell.events.trigger("post_execute")
    shell.events.trigger("post_execute")
    assert len(shown) == 1 and "Padding masks" in shown[0] and 'href="../../lectures/04_queries_keys_values' in shown[0]
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")               # graded runs: plain text only
    assert any("Reread" in ln for ln in CheckFailed("t", reread=section)._render_traceback_())


def test_outside_a_notebook_the_reread_line_stays_text():
    section = "lecture 04, section 'Padding masks' (lectures/04_queries_keys_values.ipynb#padding-mask)"
    lines = CheckFailed("t", hint="h", reread=section)._render_traceback_()
    assert any("Reread" in ln and "Padding masks" in ln for ln in lines)
    assert any("Reread" in ln for ln in CheckFailed("t", reread="lecture 04 (no file)")._render_traceback_())


@pytest.mark.slow
def test_a_failing_check_in_a_kernel_shows_the_box_then_the_links_once():
    """A real kernel (nbclient): the failure box without a traceback, then one HTML line whose
    links open the section, and the next cell runs as usual."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from attention_workbook.checks import ex04\n"
            "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim=0, keepdim=True)"
        ),
        nbformat.v4.new_code_cell("ex04.softmax_values(softmax)"),
        nbformat.v4.new_code_cell("print('next')"),
    ]
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    outs = nb.cells[1].outputs
    assert [o.output_type for o in outs] == ["error", "display_data"], outs
    box = "\n".join(outs[0].traceback)
    assert "Check failed" in box and "Hint" in box and "Traceback" not in box and "Reread" not in box
    assert "A numerically stable softmax" in outs[0].evalue
    html = outs[1].data["text/html"]
    assert "Reread" in html and "A numerically stable softmax" in html and "#scrollTo=softmax" in html
    assert [o.get("text") for o in nb.cells[2].outputs] == ["next\n"]
