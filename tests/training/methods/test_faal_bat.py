"""FAAL and BAT: their defining behaviour on hand-made cases."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from robfair.training import TrainConfig, TrainContext, build_method
from robfair.training.methods.faal import kl_ball_weights, softmax_margin


def brute_force(c, rho, step=0.001):
    """max c.q over a grid of the 3-simplex with KL(u || q) <= rho."""
    g = np.arange(step, 1.0, step)
    q0, q1 = np.meshgrid(g, g, indexing="ij")
    q2 = 1.0 - q0 - q1
    ok = q2 > 1e-9
    q = np.stack([q0[ok], q1[ok], q2[ok]], 1)
    kl = (np.log((1 / 3) / q) / 3).sum(1)
    q = q[kl <= rho]
    obj = q @ np.asarray(c)
    return q[obj.argmax()], obj.max()


@pytest.mark.parametrize("c,rho", [([0.3, -0.1, 0.05], 0.5), ([2.0, 1.0, 0.0], 0.1), ([0.0, 0.0, 1.0], 0.02),
                                   ([-0.4, 0.2, 0.2], 1.0)])
def test_faal_weights_solve_the_kl_ball_problem(c, rho):
    q = kl_ball_weights(torch.tensor(c), rho)
    qb, best = brute_force(c, rho)
    assert float(q.sum()) == pytest.approx(1.0) and bool((q > 0).all())
    kl = float((torch.log((1 / 3) / q) / 3).sum())
    assert kl <= rho + 1e-9 and kl == pytest.approx(rho, abs=1e-6)  # the constraint binds
    value = float(q @ torch.tensor(c, dtype=torch.float64))
    assert best - 1e-9 <= value <= best + 2e-3  # no feasible grid point does better, the best one nearly as well
    if len(set(c)) == len(c):  # a unique largest loss: the grid's best point is close to the solution
        assert q.tolist() == pytest.approx(qb.tolist(), abs=0.03)
    for i in range(3):  # tied losses get tied weights (the KL ball is symmetric)
        for j in range(i + 1, 3):
            if c[i] == c[j]:
                assert float(q[i]) == pytest.approx(float(q[j]))
    # the worst-case distribution puts more mass on the classes with the larger loss
    order = np.argsort(c)
    assert q[order[-1]] >= q[order[0]]


def test_faal_weights_degenerate_cases():
    assert kl_ball_weights(torch.tensor([0.2, 0.2, 0.2]), 0.5).tolist() == pytest.approx([1 / 3] * 3)
    assert kl_ball_weights(torch.tensor([1.0, 0.0, 0.0]), 0.0).tolist() == pytest.approx([1 / 3] * 3)
    q = kl_ball_weights(torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0]), 3.0)  # large ball: nearly one-hot
    assert float(q[0]) > 0.9


class Spy:
    def __call__(self, model, x, y, eps, *, generator=None):
        return (x + 0.05).clamp(0, 1)


def test_faal_loss_is_the_k_over_n_weighted_sum_by_hand():
    k = 3
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, k))
    x = torch.rand(7, 1, 3, 4)
    y = torch.tensor([0, 0, 0, 1, 1, 2, 0])
    for base in ("pgd-at", "trades"):
        m = build_method("faal", {"base": base, "rho": 0.3})
        ctx = TrainContext(cfg=TrainConfig(eps=0.1, init="x.pt"), device=torch.device("cpu"), num_classes=k,
                           class_names=list("abc"), eps=0.1, attack=Spy())
        m.ctx = ctx
        loss = m.loss(net, x, y, y, ctx)
        xa = (x + 0.05).clamp(0, 1)
        za, zn = net(xa), net(x)
        marg = softmax_margin(za, y).double()
        n = torch.bincount(y, minlength=k).double()
        mean = torch.stack([marg[y == c].mean() for c in range(k)])
        q = kl_ball_weights(n * mean, 0.3)
        if base == "pgd-at":
            per = F.cross_entropy(za, y, reduction="none")
        else:
            per = F.cross_entropy(zn, y, reduction="none") + 6.0 * F.kl_div(
                F.log_softmax(za, 1), F.softmax(zn, 1), reduction="none").sum(1)
        want = (per * (k * q.float())[y]).sum() / len(y)
        assert torch.allclose(loss, want, atol=1e-6), base
        assert m.epoch_state()["class_distribution_last_batch"] == pytest.approx(q.tolist())


# ================================================================================ BAT
from robfair.attacks import get_attack  # noqa: E402
from robfair.training.methods.bat import boundary_points  # noqa: E402


class Linear2(torch.nn.Module):
    """Two classes split by the sign of the mean pixel minus 0.5: distance to the boundary is readable."""

    def forward(self, x):
        s = (x.flatten(1).mean(1) - 0.5) * 40
        return torch.stack([s, -s], 1)


def test_bat_points_stop_at_each_samples_boundary():
    model = Linear2()
    # class 0 needs mean > 0.5: sample a is just inside (0.52), sample b deep inside (0.7)
    x = torch.stack([torch.full((1, 3, 4), 0.52), torch.full((1, 3, 4), 0.7)])
    y = torch.tensor([0, 0])
    g = torch.Generator().manual_seed(0)
    lc, fa, lc_step, fa_step = boundary_points(model, x, y, 0.3, steps=10, rel_step=0.05, tau=1, generator=g)
    pred = lambda t: model(t).argmax(1)  # noqa: E731
    # a crosses the boundary after a couple of steps of 0.015; b (0.2 away) needs ~14 and never does
    assert int(lc_step[0]) < 10 and int(lc_step[1]) == 10
    assert pred(lc)[0] == 0 and pred(fa)[0] == 1  # the last clean point is right, the first adversarial wrong
    assert int(fa_step[0]) == int(lc_step[0]) + 1  # tau = 1: one step past the first misclassification
    assert ((lc - x).abs().amax() <= 0.3 + 1e-6) and ((fa - x).abs().amax() <= 0.3 + 1e-6)
    # the easy sample is perturbed less than the hard one: attack strength follows the sample
    assert float((fa[0] - x[0]).abs().amax()) < float((fa[1] - x[1]).abs().amax())
    # tau = 0: the first misclassified iterate itself
    _, fa0, lc0, fs0 = boundary_points(model, x, y, 0.3, steps=10, rel_step=0.05, tau=0,
                                       generator=torch.Generator().manual_seed(0))
    assert int(fs0[0]) == int(lc0[0]) and pred(fa0)[0] == 1


def test_bat_loss_matches_the_official_formula():
    k = 3
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, k))
    x = torch.rand(9, 1, 3, 4)
    y = torch.arange(9) % k
    attack = get_attack("trades-kl", steps=5)
    for gamma in (1.0, 0.0):
        m = build_method("bat", {"gamma": gamma})
        ctx = TrainContext(cfg=TrainConfig(eps=0.2, method="bat"), device=torch.device("cpu"), num_classes=k,
                           class_names=list("abc"), eps=0.2, attack=attack,
                           generator=torch.Generator().manual_seed(5))
        m.ctx = ctx
        m.on_train_start(ctx)
        loss = m.loss(net, x, y, y, ctx)
        lc, fa, _, _ = boundary_points(net, x, y, 0.2, steps=5, rel_step=0.25, tau=1,
                                       generator=torch.Generator().manual_seed(5))
        zn, zl, zf = net(x), net(lc), net(fa)
        kl = lambda p, q: F.kl_div(F.log_softmax(q, 1), F.softmax(p, 1), reduction="none").sum(1)  # KL(p||q)  # noqa: E731
        u = torch.zeros_like(zl)
        want = F.cross_entropy(zl, y) + 6.0 * kl(zn, zf).mean() + gamma * (kl(zl, u) + kl(zf, u)).mean()
        assert torch.allclose(loss, want, atol=1e-6), gamma
        # KL(p || u) = log K - H(p): the uniformity term is the entropy deficit
        pl = F.softmax(zl, 1)
        assert torch.allclose(kl(zl, u), math.log(k) + (pl * pl.log()).sum(1), atol=1e-6)
    st = m.epoch_state()
    assert len(st["last_clean_step"]) == k and all(0 <= v <= 5 for v in st["first_adv_step"])


def test_bat_needs_the_trades_kl_attack():
    from robfair.errors import ConfigError

    m = build_method("bat")
    ctx = TrainContext(cfg=TrainConfig(eps=0.1), device=torch.device("cpu"), num_classes=3, class_names=list("abc"),
                       eps=0.1, attack=get_attack("pgd10"))
    with pytest.raises(ConfigError, match="attack: trades-kl"):
        m.on_train_start(ctx)


@pytest.mark.parametrize("method,key", [("faal", "class_distribution_mean"), ("bat", "first_adv_step")])
def test_end_to_end_on_digits(method, key, tmp_path, digits):
    from robfair.training import load_config, train

    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[3] / "configs" / f"{method}.yaml", model="mlp", epochs=1, batch_size=256, val_per_class=5,
                      val_attack="pgd2", attack_options={"steps": 2}, out=str(tmp_path / method), device="cpu")
    res = train(cfg, train_data=digits)
    rec = res.history[-1]
    assert math.isfinite(rec["train"]["loss"]) and len(rec["method"][key]) == 10
