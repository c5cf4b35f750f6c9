"""docs/results.md: every section names the machine it was measured on and the command that produced it, and
no bf16 speed-up is quoted from the CPU recorded without bf16 units (issue 23 part 4)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "results.md"


def sections() -> dict[str, str]:
    parts = re.split(r"^## ", DOC.read_text(), flags=re.M)
    return {p.splitlines()[0]: p for p in parts[1:]}


def flat(text: str) -> str:
    return " ".join(text.split())


def test_every_section_names_its_machine_and_command():
    secs = sections()
    assert len(secs) >= 7
    for title, text in secs.items():
        assert "AMD EPYC" in flat(text), f"section {title!r} names no machine"
        assert re.search(r"`(OMP_NUM_THREADS=1 )?(python (benchmarks|studies)/\w+\.py|robfair \w+)[^`]*`", text), \
            f"section {title!r} names no command"


def test_speed_paragraphs_name_the_machine_each():
    speed = sections()[next(t for t in sections() if t.startswith("2. Speed"))]
    for para in re.split(r"\n\s*\n", speed):
        if para.startswith("**") and re.search(r"\d\.\d+×", para):  # a bold-titled paragraph with a speed figure
            assert any(w in flat(para) for w in ("AMD EPYC", "same benchmark", "same command")), para[:80]


def test_no_bf16_speedup_beside_emulated_bf16():
    text = DOC.read_text()
    assert "3.54×" not in text and "2.73×" not in text
    for para in re.split(r"\n\s*\n", text):
        if "emulated" in para and "bf16" in para and "removed" not in para and "(so bf16 ran" not in para:
            assert not re.search(r"bf16[^.]{0,40}\d\.\d+×", para), para[:120]
