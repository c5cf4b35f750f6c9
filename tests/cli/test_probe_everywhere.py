"""``--probe`` / ``probe=`` mean one thing wherever an audit runs (issue 20 part 6): ``robfair audit``,
``train`` (its final audit: recorded in config.yaml, kept on ``--resume``, its progress shown),
``demo``, ``leaderboard``, a study's audit block and the Python API take the probe's budget (a
multiple of the audit's attacks' compute, ``all``, ``0``) and a tolerance (the CLI in points); the
budget reaches the audit (``audit.json``'s ``probe.budget``). A bad value is one line, exit code 2,
and nothing written."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import shutil

import pytest
import yaml

from _shared import StopAfterEpoch, Stop, run_cli
from robfair.auditing.probe import PROGRESS_STAGE

pytest.importorskip("pyautoattack")

TINY = ["--model", "mlp", "--set", "model_kwargs={hidden: [8]}"]
#: one epoch of an 8-unit MLP on digits, audited with FGSM at a radius most test samples survive,
#: so the final audit's probe has robust samples to attack
TRAIN = ["train", *TINY, "--epochs", "1", "--device", "cpu", "--method", "standard", "--eps", "0.02",
         "--set", "val_per_class=10", "--set", "val_attack=fgsm", "--audit-attack", "fgsm"]


def _record(path) -> dict:
    return json.loads(path.read_text())["probe"]


def _one_line(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """An untrained 8-unit MLP checkpoint for digits (no training: the audit's plumbing is tested)."""
    import torch

    from robfair.data import load_dataset
    from robfair.models import create, save_checkpoint

    ds = load_dataset("digits", "test")
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "mlp.pt"
    save_checkpoint(path, create("mlp", ds.num_classes, ds.in_shape, hidden=[8]), classes=list(ds.classes))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One ``robfair train --probe 2x --probe-tolerance 2`` run, its plain progress lines captured
    (no terminal; every 10% of a stage printed: the 5 s gap between lines is set to 0)."""
    from robfair.cli import main

    cli_app = importlib.import_module("robfair.cli.app")  # (robfair.cli.app is the typer app)
    run = tmp_path_factory.mktemp("train") / "run"
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(importlib.import_module("robfair.auditing.probe"), "DEFAULT_BUDGET", 0.0)  # as the test set-up
        mp.setattr(cli_app._Bars.__init__, "__kwdefaults__", {**cli_app._Bars.__init__.__kwdefaults__, "min_gap": 0.0})
        # capsys is per test: this module-wide run captures its own output (rich writes to sys.stderr)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
                pytest.raises(SystemExit) as exc:
            main([str(a) for a in [*TRAIN, "--probe", "2x", "--probe-tolerance", "2", "--out", run]])
    assert exc.value.code == 0, err.getvalue()
    return run, err.getvalue()


# ------------------------------------------------------------------------------------ robfair audit
@pytest.mark.parametrize("given, budget", [("2x", "2x"), ("all", "all"), ("0.5", "0.5x"), ("0", None)])
def test_audit_passes_the_budget_and_the_tolerance_in_points(given, budget, model_path, tmp_path, capsys):
    out = tmp_path / "a.json"
    code, _, err = run_cli(["audit", "-m", model_path, "--data", "digits,limit=100", "--attack", "fgsm", "--eps", "0.3",
                            "--bootstrap", "0", "--examples", "0", "--device", "cpu", "--probe", given,
                            "--probe-tolerance", "2.5", "--out", out], capsys)
    assert code == 0, err
    rec = _record(out)
    if budget is None:
        assert rec == {"skipped": "disabled (probe=0)"}
    else:
        assert rec["budget"] == budget and rec["tolerance"] == pytest.approx(0.025)


# ------------------------------------------------------------------------------------ bad values
BAD = [("abc", "--probe"), ("-1", "--probe"), ("2y", "--probe")]


@pytest.mark.parametrize("bad, named", BAD + [(None, "--probe-tolerance")])
@pytest.mark.parametrize("command", ["audit", "train", "demo", "leaderboard"])
def test_a_bad_probe_is_one_line_exit_2_nothing_written(command, bad, named, model_path, tmp_path, capsys):
    target = tmp_path / {"audit": "a.json", "train": "run", "demo": "demo", "leaderboard": "lb.html"}[command]
    argv = {"audit": ["audit", "-m", model_path, "--data", "digits,limit=50", "--attack", "fgsm", "--eps", "0.1"],
            "train": ["train", *TINY, "--epochs", "1", "--device", "cpu"],
            "demo": ["demo", "--epochs", "1"],
            "leaderboard": ["leaderboard", model_path, model_path, "--data", "digits,limit=50", "--eps", "0.1"]}[command]
    opts = ["--probe", bad] if bad is not None else ["--probe-tolerance", "100"]
    code, _, err = run_cli([*argv, *opts, "--out", target], capsys)
    _one_line(code, err, named)
    assert not target.exists()
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------ robfair train
def test_train_records_the_probe_and_its_final_audit_uses_it_with_progress_lines(trained):
    run, err = trained
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["probe"] == 2.0 and cfg["probe_tolerance"] == pytest.approx(0.02)
    rec = _record(run / "audit.json")
    assert rec["budget"] == "2x" and rec["tolerance"] == pytest.approx(0.02)
    assert rec["overall"]["first_attacked"] > 0  # the probe attacked something, so its progress is real
    lines = [line for line in err.splitlines() if f"final audit: {PROGRESS_STAGE}" in line]
    assert lines and lines[-1].rstrip().endswith("done"), err
    assert any("] final audit  " in line for line in err.splitlines()), err  # its attacks' batches


def test_resume_keeps_the_recorded_budget_and_refuses_another(trained, tmp_path, capsys):
    """A run killed during its final audit resumes with the budget it was started with (no
    --probe needed); another --probe on resume is refused in one line, nothing written."""
    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    for name in ("audit.json", "outcomes.npz"):  # killed while its final audit ran
        (run / name).unlink(missing_ok=True)
    code, _, err = run_cli([*TRAIN, "--out", run, "--resume"], capsys)
    assert code == 0, err
    rec = _record(run / "audit.json")  # the test set-up's default is 0 (off): these are the recorded ones
    assert rec["budget"] == "2x" and rec["tolerance"] == pytest.approx(0.02)
    (run / "audit.json").unlink()
    code, _, err = run_cli([*TRAIN, "--probe", "all", "--out", run, "--resume"], capsys)
    _one_line(code, err, "probe", "2.0 -> 'all'")
    assert not (run / "audit.json").exists()


@pytest.mark.parametrize("given, recorded, budget", [("all", "all", "all"), ("0", 0.0, None), ("off", 0.0, None)])
def test_train_takes_all_and_off(given, recorded, budget, tmp_path, capsys):
    run = tmp_path / "run"
    train = [a if a != "0.02" else "0.3" for a in TRAIN]  # at this radius FGSM leaves (almost) nothing robust: 'all' is cheap
    code, _, err = run_cli([*train, "--probe", given, "--out", run], capsys)
    assert code == 0, err
    assert yaml.safe_load((run / "config.yaml").read_text())["probe"] == recorded
    rec = _record(run / "audit.json")
    if budget is None:
        assert rec == {"skipped": "disabled (probe=0)"}
    else:
        assert rec["budget"] == budget


def test_the_python_api_train_takes_the_probe_from_its_config(tmp_path):
    """``robfair.training.train(TrainConfig(probe=...), final_audit=[attacks])``: the final audit
    with the config's probe, its progress to the callbacks; a resumed run keeps the recorded one."""
    from robfair.training import Callback, TrainConfig, train

    class Seen(Callback):
        def __init__(self):
            self.stages = []

        def on_audit_progress(self, stage, done, total):
            self.stages.append(stage)

    cfg = dict(data="digits", model="mlp", model_kwargs={"hidden": [8]}, epochs=2, eps=0.02, val_per_class=10,
               val_attack="fgsm", device="cpu", out=str(tmp_path / "run"))
    with pytest.raises(Stop):
        train(TrainConfig(**cfg, probe="3x", probe_tolerance=0.05), callbacks=[StopAfterEpoch(0)], final_audit=["fgsm"])
    seen = Seen()
    result = train(TrainConfig(**cfg, resume=True), callbacks=[seen], final_audit="fgsm")
    p = result.audit.probe
    assert p["budget"] == "3x" and p["tolerance"] == pytest.approx(0.05)
    assert p["cost"]["probe_units"] <= 3 * p["cost"]["audit_units"] * 1.05
    assert seen.stages[0] == "audit" and seen.stages[-1] == PROGRESS_STAGE  # the attacks' batches, then the probe
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["probe"] == 3.0
    assert TrainConfig(probe="all").probe == "all" and TrainConfig(probe="2x").probe == 2.0
    assert math.isinf(importlib.import_module("robfair.auditing.probe").parse_budget(TrainConfig(probe="all").probe))


# ------------------------------------------------------------------------------------ demo, leaderboard
@pytest.mark.slow
def test_demo_passes_the_budget_to_both_models(tmp_path, capsys):
    out = tmp_path / "demo"
    code, _, err = run_cli(["demo", "--out", out, "--epochs", "1", "--probe", "2x", "--probe-tolerance", "3"], capsys)
    assert code == 0, err
    for run in ("st", "at"):
        assert _record(out / run / "audit.json")["budget"] == "2x"
        assert yaml.safe_load((out / run / "config.yaml").read_text())["probe"] == 2.0
    runs = json.loads((out / "audit.json").read_text())["runs"]
    assert {label: r["probe"]["tolerance"] for label, r in runs.items()} == {"standard": 0.03, "pgd-at": 0.03}


@pytest.mark.parametrize("given, budget", [("all", math.inf), ("2x", 2.0), ("0", 0.0)])
def test_leaderboard_passes_the_budget_to_each_models_audit(given, budget, model_path, tmp_path, capsys, monkeypatch):
    report = importlib.import_module("robfair.auditing.audit_report")
    real, seen = report.audit, []

    def spy(*args, **kwargs):
        seen.append((kwargs.get("probe"), kwargs.get("probe_tolerance")))
        rep = real(*args, **kwargs)
        seen[-1] += (rep.probe.get("budget", rep.probe.get("skipped")),)
        return rep

    monkeypatch.setattr(report, "audit", spy)
    out = tmp_path / "lb.html"
    code, _, err = run_cli(["leaderboard", model_path, model_path, "--data", "digits,limit=60", "--eps", "0.3",
                            "--attack", "fgsm", "--bootstrap", "0", "--no-figures", "--device", "cpu",
                            "--probe", given, "--probe-tolerance", "0.5", "--out", out], capsys)
    assert code == 0, err
    shown = {math.inf: "all", 2.0: "2x", 0.0: "disabled (probe=0)"}[budget]
    assert seen == [(budget, 0.005, shown)] * 2
