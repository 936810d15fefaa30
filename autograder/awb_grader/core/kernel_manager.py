"""The kernel manager nbgrader's ``Execute`` uses (``Execute.kernel_manager_class``), and its client."""

from __future__ import annotations

import time
from queue import Empty

from jupyter_client import protocol_version_info
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type, default

from .course import AUTOGRADER

KERNELS = AUTOGRADER / "kernels"


class ReadyKernelClient(AsyncKernelClient):
    """jupyter_client's asynchronous client, ready as soon as the kernel has answered ``kernel_info``
    on the shell channel and its IOPub channel is seen connected, as jupyter_client's own
    ``wait_for_ready`` decides. That one then reads IOPub until it has been silent for 0.2 s, a
    fixed wait on every kernel (a notebook's grading waits it once; a 300-student exercise 300
    times). Here the messages already there are dropped and no more are waited for: nbclient reads
    only the IOPub messages whose parent is a request of its own, so a late status message of the
    ``kernel_info`` request is ignored there as it would have been here."""

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:                    # IOPub connected: the request's status messages reach us
                    await self.iopub_channel.get_msg(timeout=0.2)
                except Empty:
                    pass                # not yet (a slow joiner): ask again
                else:
                    major = int(reply["content"]["protocol_version"].split(".")[0])
                    if major != protocol_version_info[0]:
                        self.session.adapt_version = major
                    break
            if not await self.is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")
        while await self.iopub_channel.msg_ready():     # what is there already, not what may come
            await self.iopub_channel.get_msg(timeout=0)


class SandboxKernelManager(AsyncKernelManager):
    """jupyter_client's ``AsyncKernelManager`` whose kernel specs include the course's own
    (``autograder/kernels/awb-sandbox``) before the usual Jupyter paths, and whose clients are
    :class:`ReadyKernelClient`."""

    client_class = DottedObjectName("awb_grader.core.kernel_manager.ReadyKernelClient", config=True)
    client_factory = Type(ReadyKernelClient, klass=AsyncKernelClient, config=True)

    @default("kernel_spec_manager")
    def _sandbox_kernel_specs(self):
        ksm = KernelSpecManager(data_dir=self.data_dir)
        ksm.kernel_dirs = [str(KERNELS), *ksm.kernel_dirs]
        return ksm
