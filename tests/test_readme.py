"""The README's commands are the ones CI runs and the CLI accepts."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command_exactly():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    test_lines = [l for b in blocks for l in b.splitlines() if "python -m pytest" in l]
    assert len(test_lines) == 1, test_lines
    assert test_lines[0] in ci.splitlines()


def test_readme_names_the_cpu_wheel_index_and_real_screenshots():
    readme = (ROOT / "README.md").read_text()
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in readme
    for shot in re.findall(r"\((docs/screenshots/[^)]+\.png)\)", readme):
        assert (ROOT / shot).is_file(), shot
