"""The attacks' passes through the model, counted where every attack calls it (``Attack.logits``):
the audit's cost unit and the reliability probe's budget (robfair.attacks.attack.count_passes)."""

from __future__ import annotations

import torch
from torch import nn

from robfair.attacks import get_attack
from robfair.attacks.attack import GRADIENT_PASS_UNITS, count_passes
from robfair.auditing import evaluate
from robfair.data import Dataset


def _model_and_data(n=40):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 4)).eval()
    x = torch.rand(n, 1, 4, 4)
    with torch.no_grad():
        y = net(x).argmax(1)
    return net, x, y


def test_pgd_without_early_exit_costs_k_gradient_passes_and_one_forward_per_sample():
    net, x, y = _model_and_data()
    with count_passes() as c:
        get_attack("pgd7").run(net, x, y, 0.01, early_exit=False)
    assert (c.gradient, c.forward) == (7 * 40, 40)
    assert c.units == 40 * (7 * GRADIENT_PASS_UNITS + 1) == 40 * 15


def test_blocks_nest_and_the_engine_records_each_attacks_passes():
    net, x, y = _model_and_data()
    ds = Dataset(x=x, y=y, classes=list("abcd"), name="t")
    seen = []
    with count_passes(on_pass=lambda c: seen.append(c.units)) as outer:
        out = evaluate(net, ds, ["fgsm", "pgd5"], 0.01, device="cpu", batch_size=16, early_exit=False)
        with count_passes() as inner:
            get_attack("fgsm").run(net, x, y, 0.01)
    units = out.meta["attack_units"]
    assert units == {"fgsm": 40 * (GRADIENT_PASS_UNITS + 1), "pgd5": 40 * (5 * GRADIENT_PASS_UNITS + 1)}
    assert inner.units == 40 * (GRADIENT_PASS_UNITS + 1)
    assert outer.units == sum(units.values()) + inner.units and seen[-1] == outer.units
    with torch.no_grad():
        net(x)  # the model called directly (the engine's clean pass): not an attack's pass
    assert outer.units == seen[-1]
