import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for p in (REPO / "autograder", REPO):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from awb_grader.course import ensure_kernel_path  # noqa: E402

ensure_kernel_path()  # grading kernels started by the tests find awb_grader and our package
os.environ.setdefault("MPLBACKEND", "Agg")
# Two pytest workers on two cores each start notebook kernels: one torch thread per process
# avoids oversubscription (small tensors gain nothing from more). Kernels inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")


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


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` are skipped where PyTorch sees no CUDA device (``-m gpu`` selects them)."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if not torch.cuda.is_available():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
