"""The loss library (robfair.training.losses) on hand-computed numbers, and the modes each method
offers pinned to the formula of that mode (paper / official HEAD / older official versions)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from robfair.attacks import get_attack
from robfair.training import TrainConfig, TrainContext, build_method
from robfair.training import losses as L
from _shared import Recorder

# two samples, two classes: logits chosen so that softmax values are simple
NAT = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])   # p = (1/2, 1/2), (3/4, 1/4)
ADV = torch.tensor([[math.log(3.0), 0.0], [0.0, 0.0]])   # q = (3/4, 1/4), (1/2, 1/2)
Y = torch.tensor([0, 1])


def kl(p, q):
    return sum(a * math.log(a / b) for a, b in zip(p, q))


KL0 = kl([0.5, 0.5], [0.75, 0.25])
KL1 = kl([0.75, 0.25], [0.5, 0.5])
CE0, CE1 = math.log(2.0), math.log(4.0)   # -log 1/2, -log 1/4


def test_trades_kl_and_the_normalizations_by_hand():
    assert L.trades_kl(NAT, ADV).tolist() == pytest.approx([KL0, KL1], rel=1e-6)
    ce = F.cross_entropy(NAT, Y, reduction="none")
    assert ce.tolist() == pytest.approx([CE0, CE1], rel=1e-6)
    k = L.trades_kl(NAT, ADV)
    wn, wb = torch.tensor([0.25, 0.75]), torch.tensor([0.6, 0.4])
    beta = 2.0
    ratio = (0.25 * CE0 + 0.75 * CE1) / 1.0 + beta * (0.6 * KL0 + 0.4 * KL1) / 1.0
    meank = (2 * 0.25 * CE0 + 2 * 0.75 * CE1) / 2 + beta * (2 * 0.6 * KL0 + 2 * 0.4 * KL1) / 2
    joint = (0.25 * CE0 + 0.75 * CE1 + beta * (0.6 * KL0 + 0.4 * KL1)) / (0.25 + 0.75 + 0.6 + 0.4)
    for norm, want in (("ratio", ratio), ("mean-k", meank), ("joint", joint)):
        got = L.trades_loss(ce, k, beta, w_nat=wn, w_bndy=wb, normalization=norm, num_classes=2)
        assert float(got) == pytest.approx(want, rel=1e-6), norm
    # without weights: ratio and mean-k are TRADES, joint is half of it
    plain = (CE0 + CE1) / 2 + beta * (KL0 + KL1) / 2
    assert float(L.trades_loss(ce, k, beta)) == pytest.approx(plain, rel=1e-6)
    assert float(L.trades_loss(ce, k, beta, normalization="mean-k", num_classes=2)) == pytest.approx(plain, rel=1e-6)
    assert float(L.trades_loss(ce, k, beta, normalization="joint", num_classes=2)) == pytest.approx(plain / 2, rel=1e-6)


def test_weighted_mean_reductions_and_the_all_zero_batch():
    v = torch.tensor([1.0, 3.0, 5.0])
    w = torch.tensor([1.0, 0.0, 3.0])
    assert float(L.weighted_mean(v, w)) == pytest.approx(16 / 4)
    assert float(L.weighted_mean(v, w, "mean")) == pytest.approx(16 / 3)
    assert float(L.weighted_mean(v, None)) == pytest.approx(3.0)
    z = L.weighted_mean(v.requires_grad_(), torch.zeros(3))
    assert z.item() == 0.0 and z.requires_grad


def test_focal_ldam_logit_adjust_and_mart_by_hand():
    # focal: (1 - p_y)^2 CE; sample 0 p_y = 1/2, sample 1 p_y = 1/4
    assert L.focal_loss(NAT, Y, 2.0).tolist() == pytest.approx([0.25 * CE0, 0.5625 * CE1], rel=1e-6)
    # LDAM with margins (1, 0): sample 0's true logit drops by 1 -> p_0 = 1/(1 + e)
    got = L.ldam_loss(NAT, Y, torch.tensor([1.0, 0.0]))
    assert got.tolist() == pytest.approx([math.log(1 + math.e), CE1], rel=1e-6)
    assert L.logit_adjusted_ce(NAT, Y, torch.tensor([0.0, math.log(3.0)])).tolist() == pytest.approx(
        [-math.log(1 / 4), -math.log(1 / 2)], rel=1e-6)
    # MART: BCE = CE(x') - log(1.0001 - max_{k != y} q_k); reg = KL (1.0000001 - p_y)
    bce = [-math.log(0.75) - math.log(1.0001 - 0.25 + 1e-12), -math.log(0.5) - math.log(1.0001 - 0.5 + 1e-12)]
    reg = [KL0 * (1.0000001 - 0.5), KL1 * (1.0000001 - 0.25)]
    assert float(L.mart_loss(NAT, ADV, Y, 6.0)) == pytest.approx(np.mean(bce) + 6 * np.mean(reg), rel=1e-6)


def test_no_method_redefines_the_trades_kl():
    """One loss library: the methods import the KL, none computes log_softmax differences itself."""
    from pathlib import Path

    import robfair.training.methods as pkg

    for f in Path(pkg.__file__).parent.glob("*.py"):
        src = f.read_text()
        assert "log_p_nat - " not in src and "(log_p - log_q)" not in src, f.name
        assert "from ..trainer" not in src and "from ..distributed" not in src, f.name


def test_the_training_attack_follows_the_base_through_one_helper():
    """Methods with a TRADES / PGD-AT base declare ``base_option``; the attack comes from base_attack."""
    import typing
    from pathlib import Path

    import robfair.training.methods as pkg
    from robfair.training.methods import METHODS
    from robfair.training.methods.method import base_attack

    for f in Path(pkg.__file__).parent.glob("*.py"):
        if f.name != "method.py":
            assert '"trades-kl" if' not in f.read_text(), f.name
    seen = set()
    for name in METHODS.names():
        cls = METHODS.get(name)
        if cls.base_option is None:
            continue
        seen.add(cls.name)
        choices = typing.get_args(cls.Options.model_fields[cls.base_option].annotation)
        assert "trades" in choices and len(choices) == 2, (name, choices)
        assert cls.default_attack == base_attack(cls.Options.model_fields[cls.base_option].default), name
        for choice in choices:
            m = cls({cls.base_option: choice})
            assert m.default_attack == ("trades-kl" if choice == "trades" else "pgd10"), (name, choice)
    assert {"cfa", "dafa", "faal", "fair-adversarial", "at-ldam", "at-focal"} <= seen, seen


# ================================================================================ modes
def ctx_for(method, k, attack, eps=0.1, **kw):
    ctx = TrainContext(cfg=TrainConfig(eps=eps), device=torch.device("cpu"), num_classes=k,
                       class_names=[f"c{i}" for i in range(k)], eps=eps, attack=attack,
                       generator=torch.Generator().manual_seed(3), **kw)
    method.ctx = ctx
    return ctx


class ModeSpy:
    """Training-attack double that records the keyword ``model_mode`` and the model's training flag."""

    def __init__(self):
        self.calls = []

    def __call__(self, model, x, y, eps, *, generator=None, **kw):
        self.calls.append((kw.get("model_mode", "eval"), model.training))
        return x


def test_cfa_attack_model_mode_and_fixed_step():
    k = 3
    x = torch.rand(6, 1, 3, 4, generator=torch.Generator().manual_seed(0)) * 0.5 + 0.25
    y = torch.arange(6) % k
    spy = ModeSpy()
    m = build_method("cfa", {"base": "pgd-at", "fawa": False, "attack_model_mode": "train"})
    ctx_for(m, k, spy)
    m.loss(Recorder(k).train(), x, y, y, m.ctx)
    assert spy.calls == [("train", True)]
    # the real attack keeps batch statistics in train mode: a BN model's running mean moves during the attack
    bn = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, k))
    bn.train()
    before = bn[2].running_mean.clone()
    get_attack("pgd3", keep="last")(bn, x, y, 0.1, model_mode="train")
    assert not torch.equal(before, bn[2].running_mean) and bn.training
    before = bn[2].running_mean.clone()
    get_attack("pgd3", keep="last")(bn, x, y, 0.1)
    assert torch.equal(before, bn[2].running_mean) and bn.training
    # attack_step: one absolute step for every class radius (official 2/255); '2/255' is accepted
    f = build_method("cfa", {"base": "pgd-at", "fawa": False, "attack_step": "2/255"})
    assert f.options.attack_step == pytest.approx(2 / 255)
    ctx = ctx_for(f, k, spy)
    ctx.cfg = TrainConfig(eps=0.1, method="cfa", method_options={"base": "pgd-at", "fawa": False},
                          attack="pgd10")
    f.on_train_start(ctx)
    assert float(f._attack.step) == pytest.approx(2 / 255)


def test_dafa_official_rule_is_head_and_the_old_rule_keeps_its_date():
    from robfair.training.methods.dafa import dafa_weights

    g = torch.Generator().manual_seed(1)
    sim = torch.softmax(2 * torch.randn(4, 4, generator=g, dtype=torch.float64), 1)
    assert torch.equal(dafa_weights(sim, rule="official"), dafa_weights(sim, rule="paper"))
    assert not torch.allclose(dafa_weights(sim, rule="official-2024-02"), dafa_weights(sim, rule="paper"))


class ValModel(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        torch.manual_seed(1)
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, k))

    def forward(self, x):
        return self.net(x)


def test_wat_trades_surrogate_cost_by_hand():
    """Official WAT cost: per class mean CE + beta mean KL on the re-attacked validation split; the
    pseudo-class pays the whole split's mean; Hedge then weighs the classes."""
    k, beta = 3, 6.0
    gen = torch.Generator().manual_seed(2)
    xv = torch.rand(7, 1, 3, 4, generator=gen)
    yv = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    model = ValModel(k).train()

    def attack(m, x, y, eps, *, generator=None):
        assert not m.training  # validation: eval mode
        return (x + eps).clamp(0, 1)

    m = build_method("wat", {"beta": beta})
    assert m.options.cost == "trades-surrogate"
    ctx = ctx_for(m, k, attack, val_batches=lambda bs: iter([(xv[:4], yv[:4], yv[:4]), (xv[4:], yv[4:], yv[4:])]),
                  model=model)
    ctx.cfg = TrainConfig(eps=0.1, val_per_class=2)
    m.on_epoch_end(ctx, object())  # the report is not used by this cost
    assert model.training  # restored
    with torch.no_grad():
        nat, adv = model.net(xv), model.net((xv + 0.1).clamp(0, 1))
        cost = F.cross_entropy(nat, yv, reduction="none") + beta * F.kl_div(
            F.log_softmax(adv, 1), F.softmax(nat, 1), reduction="none").sum(1)
    want = [float(cost[yv == c].mean()) for c in range(k)] + [float(cost.mean())]
    assert m.last_cost.tolist() == pytest.approx(want, rel=1e-5)
    w = k * np.exp(0.1 * np.array(want)) / np.exp(0.1 * np.array(want)).sum()
    assert m.hedge_weights().tolist() == pytest.approx(w.tolist(), rel=1e-5)
    # outside a loop that offers the validation split: a one-line error naming the fix
    from robfair.errors import ConfigError

    m2 = build_method("wat")
    ctx_for(m2, k, attack)
    with pytest.raises(ConfigError, match="cost: trades-01"):
        m2.on_epoch_end(m2.ctx, object())
