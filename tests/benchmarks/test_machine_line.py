"""Every benchmark names the machine it measured on: one line from robfair.hardware.describe (CPU model, the
flags that matter, cores, torch and the measured speed-ups), printed before its numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from robfair import hardware

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_each_benchmark_prints_the_machine_line(script):
    text = (BENCH / script).read_text()
    assert re.search(r"print\(f\"# machine: \{(hardware\.)?describe\(|print\(f\"# machine: \{info\['(hardware|machine)'\]\}", text) \
        or "machine_line()" in text, f"{script} does not print '# machine: ' + hardware.describe(...)"
    if "machine_line()" in text:  # bench_probe: its own line, built on describe
        assert "hardware.describe('cpu')" in text


def test_the_machine_line_names_cpu_flags_cores_and_speedups():
    line = hardware.describe("cpu")
    assert hardware.cpu_model() in line and "flags: " in line and "logical cores" in line
    assert re.search(r"bf16 (\d+\.\d\dx|-), fp16 (\d+\.\d\dx|-), channels_last (\d+\.\d\dx|-)", line)
    assert f"torch {hardware.torch.__version__}" in line
