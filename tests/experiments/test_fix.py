"""``robfair fix`` (issue 22, part 2): audit a user's model, fine-tune it with a fair method, audit the
selected checkpoint on the same samples, and one paired report.

The model is :class:`FixNet` below: defined in this file, registered nowhere, handed to robfair as a
state dict with ``--arch tests/experiments/test_fix.py:FixNet`` as a user would. The paired tests in
the report are checked against scipy's binomial test on the outcomes read back from the two audits'
files, not against robfair's own numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import binomtest
from torch import nn

from _shared import run_cli
from robfair.auditing.audit_report import AuditReport
from robfair.errors import ConfigError

HERE = Path(__file__).resolve()
ARCH = f"{HERE}:FixNet"


class FixNet(nn.Module):
    def __init__(self, width: int = 12) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(3), nn.Flatten())
        self.fc = nn.Linear(9 * width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


OPTIONS = dict(arch=ARCH, epochs=2, lr=2e-3, optimizer="adam", eps=0.1, batch_size=128, val_per_class=15,
               attack_options={"steps": 3}, val_attack="pgd3", device="cpu", seed=1, probe=0)


@pytest.fixture(scope="module")
def user_model(tmp_path_factory):
    """A clean-trained FixNet (not robust: its weakest class has room to gain) as a state dict."""
    from robfair.data import load_dataset

    root = tmp_path_factory.mktemp("user")
    ds = load_dataset("digits", "train")
    torch.manual_seed(0)
    net = FixNet()
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(15):
        for i in range(0, len(ds), 128):
            loss = nn.functional.cross_entropy(net(ds.x[i:i + 128].float()), ds.y[i:i + 128])
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(net.state_dict(), root / "weights.pt")
    return root / "weights.pt"


@pytest.fixture(scope="module")
def fixed(user_model, tmp_path_factory):
    from robfair.experiments.fix import fix

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("fix") / "run"
    return fix(user_model, "digits", out, method="frl-rwrm", attacks=["fgsm", "pgd5"], bootstrap=300, **OPTIONS)


def test_the_fix_folder_holds_both_audits_the_run_and_one_report(fixed):
    out = fixed.out
    assert (out / "before" / "audit.json").is_file() and (out / "before" / "outcomes.npz").is_file()
    assert (out / "train" / "audit.json").is_file() and (out / "train" / "checkpoints" / "best.pt").is_file()
    d = json.loads((out / "fix.json").read_text())
    assert d["schema"] == "robfair.fix/1" and d["settings"]["method"] == "frl-rwrm"
    assert d["settings"]["source"]["sha256"] and d["settings"]["source"]["arch"] == ARCH
    md = (out / "fix.md").read_text()
    assert "What the fix changed" in md and "Per class, before and after" in md and fixed.summary["verdict"] in md
    # the same samples, attacks, eps and probe before and after
    before, after = AuditReport.load(out / "before"), AuditReport.load(out / "train")
    assert before.meta["fingerprint"] == after.meta["fingerprint"]
    for key in ("attacks", "eps", "seed", "batch_size", "precision", "n"):
        assert before.meta[key] == after.meta[key], key
    assert before.probe == after.probe == {"skipped": "disabled (probe=0)"}


def test_the_paired_tests_match_scipy_on_the_recorded_outcomes(fixed):
    """Per class and on average: the exact McNemar p is scipy's two-sided binomial test at 1/2 on the
    samples whose robust outcome flipped, read from the two outcomes.npz files."""
    before, after = AuditReport.load(fixed.out / "before"), AuditReport.load(fixed.out / "train")
    rb, ra = before.outcomes.robust(), after.outcomes.robust()
    groups = before.outcomes.group
    assert np.array_equal(before.outcomes.y, after.outcomes.y)
    pc = fixed.comparison.per_class
    rob = pc[pc["metric"] == "rob_acc"].reset_index(drop=True)
    ps = []
    for gi, name in enumerate(before.main.group_names):
        m = groups == gi
        b, c = int((rb[m] & ~ra[m]).sum()), int((~rb[m] & ra[m]).sum())
        want = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5).pvalue
        row = rob[rob["class"] == name].iloc[0]
        assert row["p"] == pytest.approx(want, rel=1e-9, abs=1e-12), name
        assert row["value"] == pytest.approx(ra[m].mean()) and row["ref_value"] == pytest.approx(rb[m].mean())
        ps.append(want)
    # Holm by hand
    order = np.argsort(ps)
    holm = np.empty(len(ps))
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        holm[i] = running
    assert rob["p_holm"].to_numpy() == pytest.approx(holm)
    # the headline's class is the weakest before, with its own paired test
    s = fixed.summary
    weakest = min(rob["ref_value"])
    assert s["class"]["before"] == weakest and s["class"]["class"] in set(rob[rob["ref_value"] == weakest]["class"])
    focus = rob[rob["class"] == s["class"]["class"]].iloc[0]
    assert s["class"]["p"] == focus["p"] and s["class"]["p_holm"] == focus["p_holm"]
    b, c = int((rb & ~ra).sum()), int((~rb & ra).sum())
    assert s["robust_avg"]["p"] == pytest.approx(binomtest(b, b + c, 0.5).pvalue if b + c else 1.0)


def test_the_cost_is_what_the_averages_and_the_worst_class_say(fixed):
    s = fixed.summary
    before, after = AuditReport.load(fixed.out / "before"), AuditReport.load(fixed.out / "train")
    ab, aa = before.main.aggregates(), after.main.aggregates()
    assert s["cost"]["clean_points"] == pytest.approx(100 * (ab["clean_acc"]["avg"] - aa["clean_acc"]["avg"]))
    assert s["cost"]["robust_avg_points"] == pytest.approx(100 * (ab["rob_acc"]["avg"] - aa["rob_acc"]["avg"]))
    gain = 100 * (aa["rob_acc"]["worst"] - ab["rob_acc"]["worst"])
    assert s["cost"]["worst_gain_points"] == pytest.approx(gain)
    pp = s["cost"]["per_worst_point"]
    if gain > 0:
        assert pp["clean"] == pytest.approx(s["cost"]["clean_points"] / gain)
    else:
        assert pp is None and "bought nothing" in s["verdict"]


def test_the_weights_load_back_into_the_users_own_class(fixed):
    state = torch.load(fixed.out / "train" / "checkpoints" / "best.weights.pt", weights_only=True)
    net = FixNet()
    net.load_state_dict(state, strict=True)
    assert set(state) == set(FixNet().state_dict())


def test_a_second_fix_into_the_folder_is_refused_and_nothing_changes(fixed, user_model):
    from robfair.experiments.fix import fix

    before = {p: p.stat().st_mtime_ns for p in fixed.out.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="already holds results; pass --resume"):
        fix(user_model, "digits", fixed.out, method="frl-rwrm", attacks=["fgsm", "pgd5"], **OPTIONS)
    assert {p: p.stat().st_mtime_ns for p in fixed.out.rglob("*") if p.is_file()} == before


def test_resume_reuses_the_before_audit_and_refuses_other_settings(fixed, user_model, tmp_path):
    """A fix cut short after its before-audit resumes: the audit is read back, not run again; the
    training and the after-audit run; the report equals an uncut run's. Other settings are refused."""
    import shutil

    from robfair.experiments.fix import fix

    out = tmp_path / "cut"
    shutil.copytree(fixed.out / "before", out / "before")
    stamp = (out / "before" / "audit.json").stat().st_mtime_ns
    with pytest.raises(ConfigError, match="other settings.*eps"):
        fix(user_model, "digits", out, method="frl-rwrm", attacks=["fgsm", "pgd5"], resume=True, bootstrap=300,
            **{**OPTIONS, "eps": 0.2})
    res = fix(user_model, "digits", out, method="frl-rwrm", attacks=["fgsm", "pgd5"], resume=True, bootstrap=300,
              **OPTIONS)
    assert (out / "before" / "audit.json").stat().st_mtime_ns == stamp
    assert res.summary["verdict"] == fixed.summary["verdict"]  # the same training and audits, bit for bit
    assert res.comparison.per_class.equals(fixed.comparison.per_class)


def test_a_robfair_checkpoint_is_fixed_from_its_own_split(tmp_path):
    """A robfair checkpoint of a registered architecture: fine-tuned with init (its validation split
    reused, never a sample it trained on); the report says so."""
    from robfair.experiments.fix import fix
    from robfair.training import TrainConfig, train

    torch.set_num_threads(1)
    start = tmp_path / "at"
    train(TrainConfig(data="digits", model="mlp", method="pgd-at", eps=0.1, epochs=1, val_per_class=15,
                      attack_options={"steps": 2}, val_attack="pgd3", out=str(start), device="cpu"))
    res = fix(start / "checkpoints" / "best.pt", "digits", tmp_path / "fix", method="trades", attacks=["pgd5"],
              epochs=1, eps=0.1, val_per_class=15, attack_options={"steps": 2}, val_attack="pgd3", device="cpu",
              probe=0, bootstrap=100)
    cfg = json.loads((tmp_path / "fix" / "fix.json").read_text())["settings"]
    assert cfg["init"] == str(start / "checkpoints" / "best.pt") and cfg["model"] == "mlp"
    assert "recorded in" in res.summary["split"]


def test_the_cli_writes_the_report_and_refuses_bad_input_in_one_line(user_model, tmp_path, capsys):
    out = tmp_path / "cli"
    code, _, err = run_cli(["fix", "--model", user_model, "--arch", ARCH, "--data", "digits", "--attack", "pgdx9",
                            "--out", out], capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "pgdx9" in err and not out.exists()
    code, stdout, err = run_cli(["fix", "--model", user_model, "--arch", ARCH, "--data", "digits", "--method", "trades",
                                 "--epochs", "1", "--lr", "0.002", "--eps", "0.1", "--set", "optimizer=adam",
                                 "--set", "val_per_class=15", "--set", "attack_options={steps: 2}", "--set",
                                 "val_attack=pgd3", "--attack", "pgd5", "--probe", "0", "--bootstrap", "100",
                                 "--device", "cpu", "--out", out], capsys)
    assert code == 0, err
    assert "verdict:" in stdout and "Per class, before and after" in stdout
    assert (out / "fix.md").is_file() and (out / "fix.json").is_file()
    s = json.loads((out / "fix.json").read_text())["summary"]
    assert s["verdict"].replace(" ", "") in stdout.replace("\n", "").replace(" ", "")
    assert math.isfinite(s["cost"]["clean_points"])


def test_robfair_fix_is_the_function_and_its_module_keeps_its_name():
    import importlib
    import types

    import robfair

    module = importlib.import_module("robfair.experiments.fix")
    assert isinstance(module, types.ModuleType) and robfair.fix is module.fix and callable(robfair.fix)
    import robfair.experiments.fix as m  # noqa: E402  (no function of that name shadows the module)

    assert m is module
