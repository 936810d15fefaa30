"""What every benchmark prints beside its figures: the CPU, its vector/bf16 support, the load."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> str:
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    return ", ".join(f"{f}: {'yes' if f in flags else 'no'}" for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16"))


def load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average n/a"
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def describe() -> str:
    """One line: the CPU, its flags, the number of cores, the load now."""
    return f"CPU {cpu_model()} ({cpu_flags()}), {os.cpu_count()} logical CPUs; {load()}"
