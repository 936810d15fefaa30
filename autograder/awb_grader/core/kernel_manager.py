"""The kernel manager nbgrader's ``Execute`` uses (``Execute.kernel_manager_class``)."""

from __future__ import annotations

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from traitlets import default

from .course import AUTOGRADER

KERNELS = AUTOGRADER / "kernels"


class SandboxKernelManager(AsyncKernelManager):
    """jupyter_client's ``AsyncKernelManager`` whose kernel specs include the course's own
    (``autograder/kernels/awb-sandbox``) before the usual Jupyter paths."""

    @default("kernel_spec_manager")
    def _sandbox_kernel_specs(self):
        ksm = KernelSpecManager(data_dir=self.data_dir)
        ksm.kernel_dirs = [str(KERNELS), *ksm.kernel_dirs]
        return ksm
