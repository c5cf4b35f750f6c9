"""Loss wiring of the built-in methods, checked against formulas written out independently."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robfair.attacks import get_attack
from robfair.training import METHODS, TrainConfig, TrainContext, build_method
from robfair.training.methods import PGDAT, TRADES
from _shared import Recorder

K = 4


def batch(n=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 3, 4, generator=g), torch.arange(n) % K


def ctx_for(method, attack, eps):
    cfg = TrainConfig(eps=eps)
    ctx = TrainContext(cfg=cfg, device=torch.device("cpu"), num_classes=K, class_names=[str(i) for i in range(K)],
                       eps=eps, attack=attack, generator=torch.Generator().manual_seed(3))
    method.ctx = ctx
    return ctx


def test_registry_has_the_builtins():
    assert {"standard", "pgd-at", "trades"} <= set(METHODS.names())
    assert isinstance(build_method("madry"), PGDAT)


def test_pgd_at_with_eps_zero_equals_standard_loss_exactly():
    x, y = batch()
    model = Recorder(K).train()
    std = build_method("standard")
    l_std = std.loss(model, x, y, y, ctx_for(std, None, 0.0))
    at = build_method("pgd-at")
    l_at = at.loss(model, x, y, y, ctx_for(at, get_attack("pgd10", keep="last"), 0.0))
    assert torch.equal(l_std, l_at)
    assert torch.equal(l_std, F.cross_entropy(model.net(x), y))
    # and with eps > 0 it trains on perturbed inputs, so the loss grows
    l_adv = at.loss(model, x, y, y, ctx_for(at, get_attack("pgd10", keep="last"), 0.1))
    assert l_adv > l_std


class ClassEpsAT(PGDAT):
    name = "class-eps-test"

    def class_eps(self):
        return torch.tensor([0.0, 0.1, 0.1, 0.3])

    def class_weights(self):
        return torch.tensor([1.0, 2.0, 3.0, 4.0])


def test_per_class_eps_reaches_the_attack_and_weights_scale_the_loss():
    x, y = batch()
    model = Recorder(K).train()
    m = ClassEpsAT()
    loss = m.loss(model, x, y, y, ctx_for(m, get_attack("pgd10", keep="last"), 0.1))
    x_adv = model.seen[-1]
    dist = (x_adv - x).flatten(1).abs().amax(1)
    assert torch.equal(x_adv[y == 0], x[y == 0])  # class with eps 0 is trained on clean inputs
    assert bool((dist[y == 1] <= 0.1 + 1e-6).all()) and bool((dist[y == 3] > 0.1 + 1e-3).all())
    assert bool((dist[y == 3] <= 0.3 + 1e-6).all())
    w = torch.tensor([1.0, 2.0, 3.0, 4.0])[y]
    ce = F.cross_entropy(model.net(x_adv), y, reduction="none")
    assert torch.allclose(loss, (w * ce).sum() / w.sum(), atol=1e-6)
    assert m.epoch_state() == {"class_weights": [1.0, 2.0, 3.0, 4.0], "class_eps": pytest.approx([0.0, 0.1, 0.1, 0.3])}


def test_trades_beta_zero_is_clean_cross_entropy():
    x, y = batch()
    model = Recorder(K).train()
    m = build_method("trades", {"beta": 0})
    loss = m.loss(model, x, y, y, ctx_for(m, get_attack("trades-kl"), 0.1))
    assert torch.allclose(loss, F.cross_entropy(model.net(x), y), rtol=0, atol=1e-7)


def _official_trades(model, x, x_adv, y, beta):
    # TRADES reference form: CE + beta * KLDivLoss(sum)(log_softmax(f(x')), softmax(f(x))) / batch
    nat, adv = model.net(x), model.net(x_adv)
    kl = nn.KLDivLoss(reduction="sum")(F.log_softmax(adv, 1), F.softmax(nat, 1)) / len(x)
    return F.cross_entropy(nat, y) + beta * kl


def test_trades_matches_the_reference_formula():
    x, y = batch()
    model = Recorder(K).train()
    m = build_method("trades", {"beta": 6})
    loss = m.loss(model, x, y, y, ctx_for(m, get_attack("trades-kl"), 0.1))
    x_adv = model.seen[-1]
    assert not torch.equal(x_adv, x)
    assert torch.allclose(loss, _official_trades(model, x, x_adv, y, 6.0), atol=1e-5)


class WeightedTrades(TRADES):
    name = "weighted-trades-test"

    def class_weights(self):
        return torch.tensor([4.0, 1.0, 1.0, 2.0])

    def boundary_weights(self):
        return torch.tensor([1.0, 1.0, 3.0, 1.0])


def test_trades_per_class_weights_follow_frl_normalization():
    x, y = batch()
    model = Recorder(K).train()
    m = WeightedTrades({"beta": 2})
    loss = m.loss(model, x, y, y, ctx_for(m, get_attack("trades-kl"), 0.1))
    x_adv = model.seen[-1]
    nat, adv = model.net(x), model.net(x_adv)
    ce = F.cross_entropy(nat, y, reduction="none")
    kl = F.kl_div(F.log_softmax(adv, 1), F.softmax(nat, 1), reduction="none").sum(1)
    wn, wb = torch.tensor([4.0, 1.0, 1.0, 2.0])[y], torch.tensor([1.0, 1.0, 3.0, 1.0])[y]
    expected = (wn * ce).sum() / wn.sum() + 2 * (wb * kl).sum() / wb.sum()
    assert torch.allclose(loss, expected, atol=1e-5)
    assert m.epoch_state()["boundary_weights"] == [1.0, 1.0, 3.0, 1.0]
