"""The reliability probe: official AutoAttack on a stratified sample warns when the audit's attacks
overstate robustness (a model that masks its gradients) and stays quiet on a smooth model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from robfair.audit import audit
from robfair.audit.probe import compare_probe, stratified_sample
from robfair.data import Dataset

pytest.importorskip("pyautoattack")


class Quantize(nn.Module):
    """Rounds every pixel to ``levels`` steps: the forward pass is piecewise constant, so every input
    gradient is zero and gradient attacks get nowhere, while the decision still moves with the input."""

    def __init__(self, levels: int = 4):
        super().__init__()
        self.levels = levels

    def forward(self, x):
        return torch.round(x * self.levels) / self.levels


def problem(masked: bool, n=150, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    lin = nn.Linear(16, k)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(k, 16, generator=g))
        lin.bias.copy_(-lin.weight @ torch.full((16,), 0.5))
    layers = ([Quantize()] if masked else []) + [nn.Flatten(), lin]
    model = nn.Sequential(*layers).eval()
    x = 0.25 + 0.5 * torch.rand(n, 1, 4, 4, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    gid = (torch.arange(n) % 2).long()
    return model, Dataset(x=x, y=y, classes=[f"c{i}" for i in range(k)], g=gid, groups=["a", "b"], name="probe")


def test_probe_warns_on_a_gradient_masking_model():
    model, ds = problem(masked=True)
    rep = audit(model, ds, ["pgd10"], eps=0.1, device="cpu", probe=20)
    p = rep.probe
    assert p["attack"] == "autoattack" and p["overall"]["n"] == 40
    assert p["overall"]["autoattack_robust_acc"] < p["overall"]["robust_acc"]
    warn = [w for w in rep.warnings if w.startswith("reliability probe")]
    assert len(warn) == 1 and "pgd10" in warn[0] and "overstated by" in warn[0]
    assert p["flagged_groups"] and all(f"{g} " in warn[0] for g in p["flagged_groups"])
    assert rep.to_json()["probe"]["overall"]["p"] < 0.05


def test_probe_is_quiet_on_a_smooth_model():
    model, ds = problem(masked=False)
    rep = audit(model, ds, ["pgd10"], eps=0.1, device="cpu", probe=20)
    assert rep.probe["overall"]["n"] == 40 and not rep.probe["flagged_groups"]
    assert not [w for w in rep.warnings if w.startswith("reliability probe")]


def test_probe_zero_disables_and_autoattack_audit_skips():
    model, ds = problem(masked=False)
    assert "disabled" in audit(model, ds, ["fgsm"], eps=0.1, device="cpu", probe=0).probe["skipped"]
    assert "autoattack" in audit(model, ds, ["autoattack"], eps=0.1, device="cpu", probe=5).probe["skipped"]
    assert "no untargeted" in audit(model, ds, ["trades-kl"], eps=0.1, device="cpu", probe=5).probe["skipped"]


def test_stratified_sample_and_the_exact_paired_test():
    groups = np.array([0] * 50 + [1] * 7 + [2] * 30)
    pos = stratified_sample(groups, 20, seed=0)
    assert np.bincount(groups[pos]).tolist() == [20, 7, 20] and np.all(np.diff(pos) > 0)
    assert np.array_equal(pos, stratified_sample(groups, 20, seed=0))
    from scipy.stats import binomtest

    from robfair.metrics.stats import mcnemar_exact  # the probe's test

    assert mcnemar_exact(9, 1, "greater") == pytest.approx(binomtest(9, 10, 0.5, alternative="greater").pvalue)
    assert mcnemar_exact(0, 0, "greater") == 1.0
