"""TRADES inner maximization: per-sample step (reference bug: max(eps)/4), ball, KL ascent."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from robfair.attacks import TradesKL


def kl(model, x, x_adv):
    return F.kl_div(F.log_softmax(model(x_adv), 1), F.softmax(model(x), 1), reduction="none").sum(1)


def test_step_is_per_sample_not_max_eps_over_the_batch(mlp_factory):
    """With one step a small-eps sample moves about eps_i/4 (plus the 0.001 noise). The reference
    code's max(eps)/4 step would push it to its ball's edge (0.1 here, the large eps being 0.8)."""
    model = mlp_factory()
    n = 40
    x = 0.3 + 0.4 * torch.rand(n, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    eps = torch.tensor([0.1, 0.8], dtype=torch.float64).repeat(n // 2)
    x_adv = TradesKL(steps=1)(model, x, torch.zeros(n, dtype=torch.long), eps,
                              generator=torch.Generator().manual_seed(0))
    moved = (x_adv - x).abs().amax(1)
    small = eps == 0.1
    assert torch.all(moved[small] <= 0.1 / 4 + 0.006)  # 0.006 = six standard deviations of the noise
    assert torch.all(moved[small] >= 0.1 / 4 - 0.006)  # it did take its own step
    assert torch.all(moved[~small] >= 0.8 / 4 - 0.006)


def test_ball_kl_ascent_and_zero_eps(mlp_factory):
    model = mlp_factory()
    n = 60
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 20, generator=g, dtype=torch.float64)
    eps = torch.rand(n, generator=g, dtype=torch.float64) * 0.1
    eps[::10] = 0.0
    y = torch.zeros(n, dtype=torch.long)  # ignored: TRADES is label-free
    start = TradesKL(steps=0)(model, x, y, eps, generator=torch.Generator().manual_seed(2))
    x_adv = TradesKL(steps=10)(model, x, y, eps, generator=torch.Generator().manual_seed(2))
    for xa in (start, x_adv):
        assert torch.all((xa - x).abs().amax(1) <= eps + 1e-12)
        assert xa.min() >= 0 and xa.max() <= 1
        assert torch.equal(xa[eps == 0], x[eps == 0])
    moving = eps > 0
    assert torch.all((start - x).abs()[moving].amax(1) < 0.006)  # the start is x + 0.001 N(0, I)
    # ten steps increase the KL far beyond the random start's (the quantity TRADES maximizes)
    assert torch.all(kl(model, x, x_adv)[moving] > kl(model, x, start)[moving])
    # labels do not matter
    other = TradesKL(steps=10)(model, x, torch.ones(n, dtype=torch.long), eps, generator=torch.Generator().manual_seed(2))
    assert torch.equal(other, x_adv)


def test_no_parameter_grads_and_train_mode_restored(mlp_factory):
    model = mlp_factory()
    model.train()
    x = torch.rand(8, 20, dtype=torch.float64)
    TradesKL()(model, x, torch.zeros(8, dtype=torch.long), 0.03)
    assert model.training and all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
