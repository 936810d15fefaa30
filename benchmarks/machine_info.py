"""What every benchmark prints beside its figures: the CPU, its vector/bf16 support, the load."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attention_workbook.machine import describe_cpu  # the one CPU description


def cpu_model() -> str:
    return describe_cpu().name


def cpu_flags() -> str:
    return describe_cpu().flags_text()


def load() -> str:
    cpu = describe_cpu()
    if cpu.load is None:
        return cpu.load_text()
    return f"{cpu.load_text(all_three=True)} on {cpu.cores} cores"


def describe() -> str:
    """One line: the CPU, its flags, the number of cores, the load now."""
    return f"CPU {cpu_model()} ({cpu_flags()}), {os.cpu_count()} logical CPUs; {load()}"
