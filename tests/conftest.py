import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for p in (REPO / "autograder", REPO):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from awb_grader.core.course import ensure_kernel_path  # noqa: E402

ensure_kernel_path()  # grading kernels started by the tests find awb_grader and our package
os.environ.setdefault("MPLBACKEND", "Agg")
# Two pytest workers on two cores each start notebook kernels: one torch thread per process
# avoids oversubscription (small tensors gain nothing from more). Kernels inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Exercise and lecture 10's and 11's kernels run in Triton's interpreter where there is no NVIDIA GPU; it must be
# on before anything imports triton (attention_workbook.tritonenv decides the same in a notebook)
if not Path("/dev/nvidia0").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_process_state():
    """Grading code edits os.environ and the cwd of the process that runs it (sandbox setup,
    kernel paths): undo that after every test so tests in one worker don't see each other's."""
    env, cwd = dict(os.environ), os.getcwd()
    yield
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)


TRITON_PARTS = ("10_flash_attention_triton", "test_checks_ex10", "test_triton", "[10-", "-10-",
                "11_flash_attention_backward", "test_checks_ex11", "[11-", "-11-")


@pytest.fixture(scope="session")
def docker():
    """A real Docker daemon of this test session (``docker_daemon.py``); the test is skipped, with
    the reason, where dockerd cannot start (not installed, not root, no cgroups ...)."""
    from docker_daemon import Daemon, Unavailable

    try:
        daemon = Daemon()
    except Unavailable as e:
        pytest.skip(str(e))
    yield daemon
    daemon.stop()


@pytest.hookimpl(trylast=True)     # after -m and -k have deselected what they deselect
def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` are skipped where PyTorch sees no CUDA device (``-m gpu`` selects them);
    exercise and lecture 10's, where Triton is not installed (macOS: no wheels; `make venv` installs
    the package's triton extra on Linux). In-process early warnings are left out where the run grades
    the same thing through nbgrader (``EARLY_WARNINGS``)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        for item in items:
            if any(part in item.nodeid for part in TRITON_PARTS):
                item.add_marker(pytest.mark.skip(reason="needs Triton (pip install -e '.[triton]'; Linux only)"))
    _leave_out_early_warnings(config, items)
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if not torch.cuda.is_available():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


# Early warnings: tests/test_checks.py's test of each mistake also applies test_catalog's grade-table
# rule (the grade table names the mistake and nothing in an earlier function) to messages computed
# in-process, minutes before test_catalog can say it (`make test-fast`, `pytest -k`);
# tests/test_visible_hints.py's alternatives test finds in-process what would cost a correct alternative
# points under nbgrader (a failing check, a word on stderr). For an entry the same run also grades
# through nbgrader (test_catalog: the samples; test_catalog_rest: the others, `make test-catalog`),
# test_catalog asserts it on the autograded notebook: the early warning is left out (the alternatives
# test deselected; the mistake test leaves out its grade-table part, ``graded_through_nbgrader``), not
# for an alternative written to raise warnings (that test also shows it really does).
EARLY_WARNINGS = {"test_visible_hints.py::test_alternative_passes_without_a_word_on_stderr": "alt"}
GRADED_BY = {"test_catalog.py::test_catalog": ("sample", "alternative_sample"),
             "test_catalog.py::test_catalog_rest": ("the_rest", "alternative_rest")}
_GRADED = pytest.StashKey[frozenset]()


@pytest.fixture
def graded_through_nbgrader(request) -> frozenset:
    """{(assignment, "Mistake" or "Alternative", id)} of the catalog entries this run also grades
    through nbgrader (test_catalog's selected items)."""
    return request.config.stash.get(_GRADED, frozenset())


def _leave_out_early_warnings(config, items):
    import catalog_parts

    def name(item):
        path, _, func = item.nodeid.partition("::")
        return f"{path.rsplit('/', 1)[-1]}::{func.split('[')[0]}"

    graded = {(i.callspec.params["assignment"], type(entry).__name__, entry.id) for i in items
              if name(i) in GRADED_BY and hasattr(i, "callspec") and not i.get_closest_marker("skip")
              for part in GRADED_BY[name(i)]
              for entry in getattr(catalog_parts, part)(i.callspec.params["assignment"])}
    config.stash[_GRADED] = frozenset(graded)

    def early(i):
        if name(i) not in EARLY_WARNINGS or not hasattr(i, "callspec"):
            return False
        entry = i.callspec.params[EARLY_WARNINGS[name(i)]]
        key = (i.callspec.params["assignment"], type(entry).__name__, entry.id)
        return key in graded and not entry.id.startswith("warnings_")

    left_out = [i for i in items if early(i)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        gone = set(map(id, left_out))
        items[:] = [i for i in items if id(i) not in gone]


def small_corpus(folder: Path) -> Path:
    """A play-like text of the workbook's own (about 60 kB, letters, punctuation, line breaks): what
    the tests that train read, through the real loader ($AWB_CORPUS), where ../shared has no corpus."""
    import random

    rng = random.Random(0)
    names = ["ADA", "BEN", "CHLOE", "DEV", "EMMA"]
    words = ("the of and to a in that is was he for it with as his on be at by i this had not are but "
             "from or have an they which one you were her all she there would their we him been has when "
             "queries keys values attention softmax head layer token weight gradient model").split()
    lines = []
    while sum(map(len, lines)) < 60_000:
        lines.append(f"{rng.choice(names)}:")
        for _ in range(rng.randint(1, 4)):
            w = [rng.choice(words) for _ in range(rng.randint(4, 10))]
            lines.append(" ".join(w).capitalize() + rng.choice([".", ",", "!", "?", ";"]))
        lines.append("")
    # every character tiny-shakespeare has, so any prompt a lecture writes can be encoded
    lines.append(" !$&',-.3:;?" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + "abcdefghijklmnopqrstuvwxyz")
    p = folder / "corpus.txt"
    p.write_text("\n".join(lines) + "\n")
    return p
