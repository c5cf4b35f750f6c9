"""The reliability probe on real models: official AutoAttack finds what a weak attack overstates
(a model that masks its gradients), says nothing against an attack that is already optimal,
runs its cascade in two stages that equal one official run, carries AutoAttack's own verdicts,
and states the weaker attacks' overstatement exactly when the audit runs AutoAttack itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from robfair.attacks.autoattack import AutoAttack, cascade
from robfair.auditing import audit
from robfair.auditing.probe import PROGRESS_STAGE, in_audit_record, parse_budget, parse_tolerance
from robfair.data import Dataset
from robfair.errors import RobfairError

from _shared import probe_problem as problem

pytest.importorskip("pyautoattack")


def test_probe_flags_a_gradient_masking_model_with_corrected_numbers():
    model, ds = problem(masked=True)
    rep = audit(model, ds, ["pgd10"], eps=0.1, device="cpu", probe=20)
    p = rep.probe
    assert p["design"] == "sampled" and p["attack"] == "autoattack" and p["compared_with"] == ["pgd10"]
    assert p["flagged_groups"] == ["a", "b"] and not p["passed"]
    for g in ("a", "b"):
        r = p["per_group"][g]
        assert r["lower"] > 0.01 and r["corrected_lo"] <= r["corrected_robust_acc"] <= r["corrected_hi"]
        assert r["corrected_hi"] < r["robust_acc"] and r["first_fooled"] > 0
    warn = [w for w in rep.warnings if w.startswith("reliability probe")]
    assert warn == [p["verdict"]] and "pgd10 overstates" in warn[0] and "-> " in warn[0]
    assert p["cost"]["probe_units"] <= 20 * p["cost"]["audit_units"] * 1.05  # within the budget (first round's estimate)
    assert p["cost"]["ratio"] > 1


def test_probe_all_is_autoattack_per_group_and_keeps_autoattacks_own_flags():
    model, ds = problem(masked=True)
    rep = audit(model, ds, ["pgd10"], eps=0.1, device="cpu", probe="all")
    p = rep.probe
    assert p["budget"] == "all" and p["overall"]["exact"]
    ref = audit(model, ds, ["pgd10", "autoattack"], eps=0.1, device="cpu", probe=0).outcomes
    for gi, g in enumerate(("a", "b")):
        r = p["per_group"][g]
        assert r["lower"] == r["upper"] == r["overstatement"]
        sel = ref.group == gi
        aa_acc = float((ref.robust(0, ["autoattack"]) & sel).sum() / sel.sum())
        assert abs(r["corrected_robust_acc"] - aa_acc) <= 2 / sel.sum()  # AutoAttack's own, up to its random starts
    assert any("Square Attack has decreased" in f for f in p["autoattack_flags"])  # AutoAttack's verdict, kept
    assert any(w.startswith("[autoattack] autoattack: Square") for w in rep.warnings)


def test_probe_passes_where_the_audit_attack_is_optimal():
    """Two classes of a linear model: the CE gradient is the one direction that matters, so PGD
    finds every adversarial example there is and AutoAttack cannot find more."""
    model, ds = problem(masked=False, n=240, k=2, seed=1)
    rep = audit(model, ds, ["pgd10"], eps=0.02, device="cpu", probe=30)
    p = rep.probe
    assert p["passed"] and not p["flagged_groups"] and p["overall"]["first_fooled"] == 0
    assert p["verdict"].startswith("reliability probe: passed") and "at most" in p["verdict"]
    assert not [w for w in rep.warnings if w.startswith("reliability probe")]
    for r in p["per_group"].values():
        assert r["lower"] == 0 and 0 <= r["upper_first"] <= r["robust_acc"]


def test_two_calls_of_the_stages_are_one_official_run():
    """``stages=[first]`` on every sample, then ``stages=[the rest]`` on its survivors, equals the
    full cascade sample by sample (the same seed): the probe's split is AutoAttack's own cascade."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 10)).eval()
    x = torch.rand(80, 1, 4, 4)
    with torch.no_grad():
        y = net(x).argmax(1)
    steps = cascade("standard", 10)
    assert steps == ["apgd-ce", "apgd-t", "fab-t", "square"] and cascade("standard", 3) == ["apgd-ce", "fab", "square"]
    full = AutoAttack(seed=3).run(net, x, y, 0.05)
    first = AutoAttack(seed=3, stages=steps[:1]).run(net, x, y, 0.05)
    s = ~first.fooled
    rest = AutoAttack(seed=3, stages=steps[1:]).run(net, x[s], y[s], 0.05)
    split = first.fooled.clone()
    split[s] = rest.fooled
    assert torch.equal(split, full.fooled) and 0 < int(first.fooled.sum()) < int(full.fooled.sum())
    assert AutoAttack(stages=["apgd-ce"]).name == "autoattack[apgd-ce]"


def test_in_audit_autoattack_states_each_weaker_attack_exactly():
    model, ds = problem(masked=True)
    rep = audit(model, ds, ["pgd10", "autoattack"], eps=0.1, device="cpu")
    p = rep.probe
    assert p["design"] == "in-audit" and p["attack"] == "autoattack" and p["compared_with"] == ["pgd10"]
    out = rep.outcomes
    over = out.robust(0, ["pgd10"]) & ~out.robust(0, ["autoattack"])
    rows = p["per_attack"]["pgd10"]["per_group"]
    for gi, g in enumerate(("a", "b")):
        sel = out.group == gi
        assert rows[g]["overstatement"] == rows[g]["lower"] == rows[g]["upper"] == pytest.approx(over[sel].sum() / sel.sum())
    assert "pgd10 alone overstates" in p["verdict"] and "exact" in p["verdict"]
    assert p["verdict"] in rep.warnings


class _Outcomes:
    """Per-sample outcomes as in_audit_record reads them: one group of 100, robust under each attack."""

    def __init__(self, robust: dict[str, np.ndarray]):
        self.group, self.group_names, self._robust = np.zeros(100, dtype=np.int64), ["g"], robust

    def robust(self, _eps: int, names):
        return np.logical_and.reduce([self._robust[n] for n in names])


@pytest.mark.parametrize("only_autoattack,tolerance,flagged", [(1, 0.01, False), (2, 0.01, True), (2, 0.02, False),
                                                               (3, 0.02, True)])
def test_in_audit_flags_beyond_the_tolerance_only(only_autoattack, tolerance, flagged):
    """With AutoAttack in the audit, a weaker attack's group is flagged when the share robust under it
    alone but fooled by AutoAttack exceeds the tolerance, strictly (1 of 100 is 1 point)."""
    aa = np.zeros(100, dtype=bool)
    aa[:50] = True
    pgd = aa.copy()
    pgd[50:50 + only_autoattack] = True
    rec = in_audit_record(_Outcomes({"autoattack": aa, "pgd10": pgd}), "autoattack", ["pgd10"], tolerance)
    row = rec["per_attack"]["pgd10"]["per_group"]["g"]
    assert row["overstatement"] == only_autoattack / 100 and row["flagged"] is flagged
    assert rec["per_attack"]["pgd10"]["flagged_groups"] == (["g"] if flagged else [])


def test_budget_and_tolerance_parse_and_refuse_in_one_line(monkeypatch):
    monkeypatch.undo()  # the test set-up switches the default probe off; this test reads the shipped default
    assert parse_budget(None) == 1.0 and parse_budget("2x") == 2.0 and parse_budget("0.5") == 0.5
    assert parse_budget("all") == math.inf and parse_budget(0) == 0.0 and parse_budget("off") == 0.0
    assert parse_tolerance(None) == 0.01 and parse_tolerance(0.05) == 0.05
    for bad in (-1, "many", float("nan"), True):
        with pytest.raises(RobfairError, match="probe must be") as e:
            parse_budget(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(RobfairError, match="tolerance"):
        parse_tolerance(1.5)
    model, ds = problem(masked=False)
    assert "disabled" in audit(model, ds, ["fgsm"], eps=0.1, device="cpu", probe=0).probe["skipped"]
    assert "no untargeted" in audit(model, ds, ["trades-kl"], eps=0.1, device="cpu", probe=5).probe["skipped"]
    with pytest.raises(RobfairError, match="probe"):
        audit(model, ds, ["fgsm"], eps=0.1, device="cpu", probe=-2)


def test_probe_reports_progress_in_units():
    model, ds = problem(masked=True)
    seen = []
    audit(model, ds, ["pgd10"], eps=0.1, device="cpu", probe=5, progress=lambda s, d, t: seen.append((s, d, t)))
    mine = [(d, t) for s, d, t in seen if s == PROGRESS_STAGE]
    assert mine and mine[-1][0] == mine[-1][1] and all(0 <= d <= t for d, t in mine)


def test_the_probe_is_seeded_and_deterministic():
    model, ds = problem(masked=True)
    a = audit(model, ds, ["pgd10"], eps=0.1, device="cpu", probe=5, seed=3).probe
    b = audit(model, ds, ["pgd10"], eps=0.1, device="cpu", probe=5, seed=3).probe
    drop = ("seconds", "cost")
    assert {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}
    assert np.isclose(a["cost"]["probe_units"], b["cost"]["probe_units"])


def test_what_the_probe_compares():
    from robfair.auditing.probe import probe_attack

    assert probe_attack(["fgsm", "pgd20"]) == {"mode": "sampled", "reference": "autoattack",
                                               "compared": ["fgsm", "pgd20"], "why": ""}
    assert probe_attack(["pgd20", "autoattack"])["mode"] == "in-audit"
    # an L2 AutoAttack says nothing about L-inf attacks: those are still probed with L-inf AutoAttack
    assert probe_attack(["pgd20", "autoattack-l2"])["compared"] == ["pgd20"]
    assert probe_attack(["pgd20-l2"])["reference"] == "autoattack-l2"
    assert probe_attack(["pgd20-t", "trades-kl"])["mode"] is None


def test_the_screen_is_autoattacks_dlr_attack_and_the_rest_its_cascade():
    from robfair.auditing.probe import probe_stages

    assert probe_stages(10) == {"first": ["apgd-dlr"], "rest": ["apgd-ce", "apgd-t", "fab-t", "square"]}
    assert probe_stages(3) == {"first": ["apgd-ce"], "rest": ["fab", "square"]}  # AutoAttack's own < 4-class cascade
    assert AutoAttack(stages=["apgd-dlr"]).name == "autoattack[apgd-dlr]"


class Scaled(nn.Module):
    """Logits times 10^4: the softmax saturates, so the cross-entropy's input gradient underflows to
    exactly 0 on every sample with a margin and a CE attack gets nowhere; the decision is unchanged,
    and a scale-free loss (DLR) still finds it (the classic gradient masking by logit scale)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        return 1e4 * self.net(x)


def test_the_default_probe_catches_a_cross_entropy_masked_model():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    lin = nn.Linear(16, 10)
    x = torch.rand(400, 1, 4, 4, generator=g)
    with torch.no_grad():
        y = lin(x.flatten(1)).argmax(1)
    model = Scaled(nn.Sequential(nn.Flatten(), lin)).eval()
    ds = Dataset(x=x, y=y, classes=[f"c{i}" for i in range(10)], name="scaled")
    rep = audit(model, ds, ["pgd10"], eps=0.05, device="cpu", probe=1)
    p = rep.probe
    assert p["stages"]["first"] == ["apgd-dlr"] and p["cost"]["ratio"] <= 1.0
    assert p["overall"]["first_fooled"] > 0 and p["flagged_groups"]
    for g in p["flagged_groups"]:
        r = p["per_group"][g]
        assert r["corrected_hi"] < r["robust_acc"]  # the corrected number is below what PGD claimed
    assert not p["passed"] and p["verdict"] in rep.warnings
