"""What the machine is, for the line printed beside every timing: one function, :func:`describe_cpu`.

Lectures 03 and 05 print the CPU's caches next to their timings, lecture 09 and the benchmarks
print the model, the cores, the load and the vector/bf16 support; all of them read it here.
Everything comes from Linux's ``/proc`` and ``/sys``; elsewhere the fields are what ``platform``
and ``os`` know (no caches, no flags). :func:`page_faults` counts the pages the operating system
handed this process, for timings whose cost is fresh memory rather than arithmetic.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")   # the vector / bf16 support timings depend on


def size_text(nbytes: float) -> str:
    """``1.5 MiB``, ``48 KiB``, ``512 B``: binary units, as the kernel reports cache sizes."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


@dataclass(frozen=True)
class CPUInfo:
    name: str                                   # "AMD EPYC 7B13", or platform's guess
    cores: int | None                           # logical CPUs (os.cpu_count())
    caches: dict[str, int] = field(default_factory=dict)   # {"L1": bytes, "L2": ..., "L3": ...}: cpu0's data caches
    load: tuple[float, float, float] | None = None         # load average over 1, 5, 15 minutes
    flags: dict[str, bool] | None = None                   # FLAGS -> present; None where unknown

    def caches_text(self) -> str:
        return ", ".join(f"{level} {size_text(n)}" for level, n in self.caches.items()) or "caches unknown"

    def flags_text(self) -> str:
        if self.flags is None:
            return "unknown"
        return ", ".join(f"{f}: {'yes' if ok else 'no'}" for f, ok in self.flags.items())

    def load_text(self, all_three: bool = False) -> str:
        if self.load is None:
            return "load average n/a"
        shown = self.load if all_three else self.load[:1]
        return "load average " + " ".join(f"{x:.2f}" if all_three else f"{x:.1f}" for x in shown)

    def smallest_cache_holding(self, nbytes: float) -> str | None:
        """The smallest cache level at least ``nbytes`` large (None: larger than every cache, or unknown)."""
        fits = [level for level, n in self.caches.items() if n >= nbytes]
        return min(fits, key=self.caches.get) if fits else None

    def summary(self) -> str:
        """One line: name, caches, cores, load (what lecture 05 prints above its timing table)."""
        return f"{self.name}, {self.caches_text()}, {self.cores} cores, {self.load_text()}"


def _cpuinfo() -> str | None:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return None


def _caches() -> dict[str, int]:
    sizes: dict[str, int] = {}
    try:
        for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
            if (idx / "type").read_text().strip() == "Instruction":
                continue
            text = (idx / "size").read_text().strip()
            scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            sizes[f"L{(idx / 'level').read_text().strip()}"] = int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        return {}
    return sizes


def cpu_flags(cpuinfo: str) -> dict[str, bool]:
    """Which of FLAGS appear as whole words in the text of /proc/cpuinfo (``devices`` asks for bf16)."""
    words = set(cpuinfo.split())
    return {f: f in words for f in FLAGS}


def describe_cpu() -> CPUInfo:
    """The CPU as Linux reports it (model name, data caches of cpu0, flags), the cores and the load now."""
    info = _cpuinfo()
    name = platform.processor() or platform.machine()
    flags = None
    if info is not None:
        name = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), name)
        flags = cpu_flags(info)
    try:
        load = os.getloadavg()
    except (OSError, AttributeError):
        load = None
    return CPUInfo(name=name, cores=os.cpu_count(), caches=_caches(), load=load, flags=flags)


def page_faults() -> int | None:
    """Minor page faults of this process so far: each is a 4 KiB page of memory the operating system
    mapped (and zeroed) for it. None where the ``resource`` module does not exist (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
