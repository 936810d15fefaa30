"""The kernel manager nbgrader grades with: jupyter_client's, noticing a stopped kernel sooner.

nbgrader stops a grading kernel at once after its last cell (``Execute.shutdown_kernel =
"immediate"``): jupyter_client kills the kernel's process, then checks every 100 ms whether it
has gone. It goes within a few milliseconds, so each notebook waited about 0.1 s for nothing
(measured: the kill step took 0.101-0.102 s on every kernel). :class:`PromptKernelManager`
checks every 5 ms; everything else is jupyter_client's ``AsyncKernelManager``.
"""

from __future__ import annotations

from jupyter_client.manager import AsyncKernelManager

POLL_S = 0.005


class PromptKernelManager(AsyncKernelManager):
    """``AsyncKernelManager`` that polls a stopping kernel's process every 5 ms, not 100 ms."""

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        await super()._async_wait(pollinterval=min(pollinterval, POLL_S))
