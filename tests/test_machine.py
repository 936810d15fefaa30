"""attention_workbook.machine: the one CPU description that lectures 03 and 05, lecture 09's
``inference.machine()`` and the benchmarks' ``machine_info`` print beside their timings."""

import os
import sys
from pathlib import Path

import pytest

from attention_workbook import devices, inference, machine
from attention_workbook.machine import CPUInfo, cpu_flags, describe_cpu, page_faults, size_text

ROOT = Path(__file__).resolve().parents[1]


def test_size_text_uses_binary_units():
    assert size_text(48 * 2**10) == "48 KiB"
    assert size_text(2**20) == "1 MiB"
    assert size_text(0.25 * 2**20) == "256 KiB"
    assert size_text(32 * 2**20) == "32 MiB"
    assert size_text(3 * 2**30) == "3 GiB"
    assert size_text(100) == "100 B"


def test_cpu_flags_are_whole_words_and_devices_reads_them_here(monkeypatch):
    text = "processor : 0\nflags : fpu avx2 avx512_bf16_extra amx_bf16\n"
    assert cpu_flags(text) == {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": True}
    monkeypatch.setattr(machine, "_cpuinfo", lambda: text)          # devices asks describe_cpu
    assert describe_cpu().flags == cpu_flags(text) and devices.cpu_has_fast_bf16() is True
    monkeypatch.setattr(machine, "_cpuinfo", lambda: None)          # no /proc/cpuinfo: no flags
    assert describe_cpu().flags is None and devices.cpu_has_fast_bf16() is False


def test_smallest_cache_holding_and_texts():
    cpu = CPUInfo(name="test cpu", cores=4, caches={"L1": 48 * 2**10, "L2": 2**20, "L3": 32 * 2**20},
                  load=(1.5, 2.0, 3.0), flags={"avx2": True, "avx512f": False})
    assert cpu.smallest_cache_holding(2**20) == "L2"
    assert cpu.smallest_cache_holding(2**20 + 1) == "L3"
    assert cpu.smallest_cache_holding(1000) == "L1"
    assert cpu.smallest_cache_holding(64 * 2**20) is None
    assert cpu.caches_text() == "L1 48 KiB, L2 1 MiB, L3 32 MiB"
    assert cpu.flags_text() == "avx2: yes, avx512f: no"
    assert cpu.load_text() == "load average 1.5"
    assert cpu.load_text(all_three=True) == "load average 1.50 2.00 3.00"
    assert cpu.summary() == f"test cpu, L1 48 KiB, L2 1 MiB, L3 32 MiB, 4 cores, {cpu.load_text()}"
    bare = CPUInfo(name="elsewhere", cores=None)
    assert bare.caches_text() == "caches unknown" and bare.flags_text() == "unknown"
    assert bare.load_text() == "load average n/a" and bare.smallest_cache_holding(1) is None


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="Linux only")
def test_describe_cpu_reads_linux():
    cpu = describe_cpu()
    assert cpu.name and cpu.cores == os.cpu_count()
    model = [l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
             if l.startswith("model name")]
    if model:
        assert cpu.name == model[0]
    assert cpu.flags is not None and set(cpu.flags) == {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    assert all(level.startswith("L") and n > 0 for level, n in cpu.caches.items())
    sizes = list(cpu.caches.values())
    assert sizes == sorted(sizes)  # L1 <= L2 <= L3 as the kernel lists them
    assert cpu.load is not None and len(cpu.load) == 3


def test_the_three_users_print_the_same_cpu():
    cpu = describe_cpu()
    assert inference.cpu_model() == cpu.name
    assert inference.machine().startswith(f"{cpu.name}, {cpu.cores} logical CPUs, ")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import machine_info
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert machine_info.cpu_model() == cpu.name
    assert machine_info.cpu_flags() == cpu.flags_text()
    assert machine_info.describe().startswith(f"CPU {cpu.name} ({cpu.flags_text()}), ")


@pytest.mark.skipif(page_faults() is None, reason="no resource module")
def test_page_faults_count_fresh_memory():
    import torch

    before = page_faults()
    x = torch.ones(64 * 2**20 // 4)  # 64 MiB, above glibc's mmap threshold: fresh pages, written
    after = page_faults()
    assert x.sum() > 0 and after - before >= 64 * 2**20 // 4096 // 2
