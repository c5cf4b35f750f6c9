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


def test_readme_and_attacks_listing_are_true_to_the_dependencies(capsys):
    """pyautoattack is a core dependency (README and `robfair attacks` say it comes with robfair,
    never 'optional'); each extra the README names is one of pyproject's, and .safetensors names
    its reader's install line."""
    import tomllib

    from _shared import run_cli

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=\[ ]", d)[0] for d in project["dependencies"]}
    extras = project["optional-dependencies"]
    assert "pyautoattack" in core
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "the official AutoAttack (`pyautoattack`) included" in readme
    named = re.search(r"Extras, each for one feature: (.*?); a feature used", readme).group(1)
    assert set(re.findall(r"`([a-z]+)` \(", named)) == set(extras) - {"autoattack"}  # autoattack: core, kept
    assert "`pip install safetensors` (or the extra, `pip install 'robfair[safetensors]'`)" in readme
    assert extras["safetensors"] == ["safetensors"]
    from robfair.attacks import describe_attacks

    row = next(r for r in describe_attacks() if r["name"].startswith("autoattack"))
    assert row["help"].endswith("the official implementation (pyautoattack, installed with robfair)")
    code, out, _ = run_cli(["attacks"], capsys)
    flat = " ".join(re.sub(r"[│┃]", " ", out).split())
    assert code == 0 and "installed with robfair" in flat and "optional" not in out


def test_every_package_a_test_skips_without_is_core_or_in_the_test_extra():
    """`pip install -e ".[test]"` (what CI runs) brings every Python package a test would skip
    without: no test is skipped in CI for a missing package."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = lambda d: re.split(r"[<>=\[ ;]", d)[0].lower()  # noqa: E731
    have = {name(d) for d in project["dependencies"]} | {name(d) for d in project["optional-dependencies"]["test"]}
    skipped = set()
    for f in (ROOT / "tests").rglob("*.py"):
        text = f.read_text()
        skipped |= set(re.findall(r"importorskip\(\"([A-Za-z0-9_]+)\"", text))
        skipped |= {m for group in re.findall(r"find_spec\(m\) is not None for m in \(([^)]*)\)", text)
                    for m in re.findall(r"\"([A-Za-z0-9_]+)\"", group)[:1]}  # any one of: the first is the PyPI one
    assert {"fairlearn", "pyautoattack", "torch"} <= skipped
    assert skipped - have == set()
