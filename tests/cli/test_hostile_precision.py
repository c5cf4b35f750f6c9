"""Hostile inputs around the speed probe (issue 23 part 2): a precision measured slower than fp32 is one line
naming the measured ratio and fp32 (exit 2, nothing written); a damaged or unwritable probe cache costs a
re-measurement, never a failure; ``robfair doctor`` refuses what it does not take in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from _shared import run_cli
from robfair import hardware

CLI = [sys.executable, "-c", "from robfair.cli import main; main()"]


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def demo_model(tmp_path):
    from robfair.models import create, save_checkpoint

    path = tmp_path / "m.pt"
    save_checkpoint(path, create("smallcnn", 10, (1, 8, 8), width=4, hidden=16), classes=[str(i) for i in range(10)])
    return path


def test_fp16_measured_slower_is_refused_in_one_line(tmp_path, capsys, monkeypatch, demo_model):
    monkeypatch.delenv(hardware.EMULATION_ENV, raising=False)
    out = tmp_path / "a.json"
    code, _, err = run_cli(["audit", "--model", demo_model, "--data", "digits", "--attack", "fgsm", "--eps", "0.1",
                            "--bootstrap", "0", "--device", "cpu", "--precision", "fp16", "--out", out], capsys)
    line = one_line(err)
    assert code == 2 and "fp16 is not native here (measured 0.50x fp32's speed, not faster)" in line and "fp32" in line.split(";")[-1]
    assert line.startswith("error: --precision fp16") and "use --precision fp32" in line  # the CLI's option names
    assert hardware.EMULATION_ENV in line and not out.exists() and sorted(os.listdir(tmp_path)) == ["m.pt"]


@pytest.mark.parametrize("damage", ["not json {", '{"probe": 1, "key": "x"}', "", "[1, 2]", '{"speedup": "fast"}'])
def test_a_damaged_cache_is_measured_again_by_doctor(tmp_path, damage):
    env = dict(os.environ, **{hardware.CACHE_ENV: str(tmp_path)})
    (tmp_path / hardware.cache_file("cpu").name).write_text(damage)
    r = subprocess.run(CLI + ["doctor"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stderr == "" and "measured now in" in r.stdout
    assert '"speedup"' in (tmp_path / hardware.cache_file("cpu").name).read_text()


def test_unwritable_cache_is_said_not_fatal(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    env = dict(os.environ, **{hardware.CACHE_ENV: str(blocker / "sub")})
    r = subprocess.run(CLI + ["doctor"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "could not be written there" in r.stdout and hardware.CACHE_ENV in r.stdout
    assert blocker.read_text() == "x"


@pytest.mark.parametrize("argv", [["doctor", "--remeasure=yes"], ["doctor", "extra"], ["doctor", "--device", "cuda"]])
def test_doctor_refuses_what_it_does_not_take(argv, capsys):
    code, out, err = run_cli(argv, capsys)
    line = one_line(err)
    assert code == 2 and line.startswith("error: ") and "--help" in line and out == ""
