"""The command line end to end on digits: demo, audit, listings, and every bad-input case
(one line, exit code 2, no output file)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from _shared import run_cli
from robfair.cli import main


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo"
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--out", str(out), "--epochs", "2", "--probe", "0"])  # the probe: tests/audit/test_probe.py
    assert exc.value.code == 0
    return out


def test_demo_writes_run_folders(demo_dir):
    for run_name in ("st", "at"):
        assert (demo_dir / run_name / "checkpoints" / "best.pt").is_file()
        assert (demo_dir / run_name / "checkpoints" / "last.pt").is_file()
        assert (demo_dir / run_name / "metrics.jsonl").is_file()
        assert (demo_dir / run_name / "audit.json").is_file()
    import yaml

    selects = {n: yaml.safe_load((demo_dir / n / "config.yaml").read_text())["select"] for n in ("st", "at")}
    assert selects == {"st": "clean", "at": "avg+worst"}  # standard training is not picked by robust accuracy
    d = json.loads((demo_dir / "audit.json").read_text())
    assert d["schema"] == "robfair.demo/1" and set(d["runs"]) == {"standard", "pgd-at"}
    png = (demo_dir / "classwise.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    for rep in d["runs"].values():
        wc = rep["reports"]["worst-case"]
        assert wc["counts"] and rep["meta"]["attacks"] == ["fgsm", "pgd20"]


def test_audit_command_json(demo_dir, tmp_path, capsys):
    out = tmp_path / "a.json"
    code, stdout, err = run_cli(["audit", "--model", demo_dir / "at/checkpoints/best.pt", "--data", "digits",
                             "--attack", "fgsm", "--attack", "pgd20", "--eps", "0.1", "--out", out,
                             "--bootstrap", "50"], capsys)
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["schema"] == "robfair.audit/1"
    assert set(d["reports"]) == {"fgsm", "pgd20", "worst-case"}
    assert d["meta"]["eps"] == pytest.approx(0.1)
    assert "worst" in stdout and "Do the groups differ" in stdout
    from robfair.auditing import AuditReport

    rep = AuditReport.from_json(d)
    for name, r in rep.reports.items():
        o = r.overall
        assert o["rob_err"] == pytest.approx(o["std_err"] + o["bndy_err"])
        assert o["rob_acc"] <= o["clean_acc"]
    # the worst case is at least as strong as each attack
    assert rep["worst-case"].overall["rob_acc"] <= min(rep["fgsm"].overall["rob_acc"], rep["pgd20"].overall["rob_acc"])


def test_eps_fraction_parses(demo_dir, tmp_path, capsys):
    out = tmp_path / "b.json"
    code, _, err = run_cli(["audit", "-m", demo_dir / "st/checkpoints/best.pt", "--attack", "fgsm", "--eps", "8/255",
                        "--bootstrap", "0", "-o", out], capsys)
    assert code == 0, err
    assert json.loads(out.read_text())["meta"]["eps"] == pytest.approx(8 / 255)


@pytest.mark.parametrize("cmd", ["datasets", "models", "attacks"])
def test_listings(cmd, capsys):
    code, out, _ = run_cli([cmd], capsys)
    assert code == 0
    assert {"datasets": "fashion-mnist", "models": "preact-resnet18", "attacks": "pgd"}[cmd] in out


# ----------------------------------------------------------------------------------- bad input
def _npz(path: Path, x, y, **extra) -> Path:
    np.savez(path, x=x, y=y, **extra)
    return path


def bad_cases(demo_dir: Path, tmp: Path):
    ckpt = demo_dir / "st/checkpoints/best.pt"
    corrupt = tmp / "corrupt.pt"
    corrupt.write_bytes(b"this is not a checkpoint")
    evil = tmp / "evil.pt"
    with open(evil, "wb") as f:
        pickle.dump({"state_dict": ExecMe()}, f)
    bare = tmp / "bare.pt"
    torch.save({"w": torch.zeros(2)}, bare)
    rng = np.random.default_rng(0)
    three = _npz(tmp / "three.npz", rng.random((6, 1, 8, 8)).astype(np.float32), np.array([0, 1, 2, 0, 1, 2]))
    badlab = _npz(tmp / "badlab.npz", rng.random((4, 1, 8, 8)).astype(np.float32), np.array([0, 1, 2, 12]),
                  classes=np.array([str(i) for i in range(10)]))
    nan = rng.random((4, 1, 8, 8)).astype(np.float32)
    nan[0, 0, 0, 0] = np.nan
    nanf = _npz(tmp / "nan.npz", nan, np.array([0, 1, 2, 3]))
    big = _npz(tmp / "big.npz", rng.random((4, 3, 32, 32)).astype(np.float32), np.arange(4) % 10)
    a = ["audit", "--bootstrap", "0", "--attack", "fgsm", "--eps", "0.1"]
    return {
        "unknown dataset": (a + ["-m", ckpt, "--data", "nosuchdata"], "dataset"),
        "missing dataset path": (a + ["-m", ckpt, "--data", f"mnist:{tmp / 'nowhere'}"], "nowhere"),
        "missing checkpoint": (a + ["-m", tmp / "none.pt"], "does not exist"),
        "corrupt checkpoint": (a + ["-m", corrupt], "checkpoint"),
        "pickled code": (a + ["-m", evil], "pickled code"),
        "state dict without --arch": (a + ["-m", bare], "--arch"),
        "negative eps": (["audit", "-m", ckpt, "--eps", "-0.1"], ">= 0"),
        "non-numeric eps": (["audit", "-m", ckpt, "--eps", "eight"], "not a number"),
        "unknown attack": (["audit", "-m", ckpt, "--attack", "pgdx", "--eps", "0.1"], "attack"),
        "class-count mismatch": (a + ["-m", ckpt, "--data", f"npz:{three}"], "classes, dataset has 3"),
        "labels outside range": (a + ["-m", ckpt, "--data", f"npz:{badlab}"], "label"),
        "NaN inputs": (a + ["-m", ckpt, "--data", f"npz:{nanf}"], "NaN"),
        "wrong image shape": (a + ["-m", ckpt, "--data", f"npz:{big}"], "3x32x32"),
        "unknown model": (["train", "--model", "resnet9000", "--out", tmp / "run"], "model"),
        "unknown command option": (["audit", "--no-such-flag"], "no-such-flag"),
    }


class ExecMe:
    def __reduce__(self):
        return (print, ("pwned",))


def test_bad_input_one_line_exit_2_no_output(demo_dir, tmp_path, capsys):
    for name, (argv, needle) in bad_cases(demo_dir, tmp_path).items():
        out = tmp_path / f"{name.replace(' ', '_')}.json"
        argv = list(argv) + (["--out", out] if argv[0] == "audit" and "--no-such-flag" not in argv else [])
        code, stdout, err = run_cli(argv, capsys)
        assert code == 2, f"{name}: exit {code}\n{stdout}\n{err}"
        lines = [l for l in err.strip().splitlines() if l.strip()]
        assert len(lines) == 1, f"{name}: expected one line, got {lines}"
        assert needle.lower() in lines[0].lower(), f"{name}: {lines[0]!r} does not mention {needle!r}"
        assert "pwned" not in stdout + err
        assert not out.exists(), f"{name}: wrote {out}"
    assert not (tmp_path / "run").exists()


def test_bare_robfair_prints_the_help_and_no_error_line(capsys):
    code, out, err = run_cli([], capsys)
    assert code == 0
    assert "Usage" in out and "audit" in out
    assert "error" not in err


def test_pickled_code_is_one_line_on_a_real_terminal_stream(tmp_path):
    """Through a real process, with Python's own warning display (not pytest's capture): torch's
    'Detected pickle protocol' UserWarning must not precede robfair's one-line refusal."""
    import subprocess
    import sys

    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as f:
        pickle.dump({"state_dict": ExecMe()}, f)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONWARNINGS": "default"}
    r = subprocess.run([sys.executable, "-m", "robfair", "audit", "-m", str(evil), "--attack", "fgsm", "--eps", "0.1",
                        "--bootstrap", "0"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "pickled code" in lines[0] and "pwned" not in r.stdout
