"""Attacks against closed forms: for a linear model the exact robust outcome is known per sample.

Binary linear model, logits [0, m] with m = w.x + b, data in [0.3, 0.7] so the [0, 1] clamp never
binds. Sample i is a robust error iff it is misclassified, or correctly classified with
|m_i| <= eps_i * ||w||_q (q = 1 for L-inf, q = 2 for L2). Samples within a hair of the boundary
(ties) are left out of the comparison.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robfair.attacks import FGSM, PGD, get_attack


def exact_outcome(lin, eps: torch.Tensor, q: float) -> tuple[torch.Tensor, torch.Tensor]:
    m = lin.margin(lin.x)
    wrong = (m > 0).long() != lin.y
    radius = eps * torch.linalg.vector_norm(lin.w, ord=q)
    fooled = wrong | (m.abs() <= radius)
    decided = ((m.abs() - radius).abs() > 1e-7 * (1 + radius)) & (m.abs() > 1e-9)
    return fooled, decided


def attack_outcome(lin, x_adv: torch.Tensor) -> torch.Tensor:
    return (lin.margin(x_adv) > 0).long() != lin.y


@pytest.mark.parametrize("name", ["pgd10", "pgd10-cw", "fgsm", "pgd10-r2"])
def test_linf_robust_error_is_exact(linear_factory, name):
    lin = linear_factory()
    order = torch.randperm(len(lin.y), generator=torch.Generator().manual_seed(3))
    eps = torch.linspace(0.0, 0.1, len(lin.y), dtype=torch.float64)[order]
    want, decided = exact_outcome(lin, eps, q=1)
    x_adv = get_attack(name)(lin.model, lin.x, lin.y, eps, generator=torch.Generator().manual_seed(0))
    got = attack_outcome(lin, x_adv)
    assert 0.2 < want.double().mean() < 0.8  # the fixture has both outcomes
    assert decided.sum() > 0.95 * len(decided)
    assert torch.equal(got[decided], want[decided])


def test_linf_exact_rate_matches_formula_at_fixed_eps(linear_factory):
    """The spec's sentence: robust error = P[wrong] + P[right and |w.x+b| <= eps ||w||_1]."""
    lin = linear_factory(n=600, seed=5)
    eps = 0.05
    m = lin.margin(lin.x)
    wrong = (m > 0).long() != lin.y
    formula = wrong.double().mean() + ((~wrong) & (m.abs() <= eps * lin.w.abs().sum())).double().mean()
    x_adv = PGD(20)(lin.model, lin.x, lin.y, eps, generator=torch.Generator().manual_seed(0))
    assert attack_outcome(lin, x_adv).double().mean().item() == pytest.approx(formula.item(), abs=1 / 600)


@pytest.mark.parametrize("random_start,steps", [(False, 10), (True, 60)])
def test_l2_robust_error_is_exact(linear_factory, random_start, steps):
    lin = linear_factory(seed=1)
    eps = torch.linspace(0.0, 0.25, len(lin.y), dtype=torch.float64)
    want, decided = exact_outcome(lin, eps, q=2)
    if random_start:  # the angle to w shrinks geometrically, not in finitely many steps: leave a band
        m, radius = lin.margin(lin.x).abs(), eps * lin.w.norm()
        decided &= (m - radius).abs() > 1e-3 * radius
    atk = PGD(steps, norm="l2", random_start=random_start)
    x_adv = atk(lin.model, lin.x, lin.y, eps, generator=torch.Generator().manual_seed(0))
    assert torch.all((x_adv - lin.x).flatten(1).norm(dim=1) <= eps + 1e-12)
    assert 0.2 < want.double().mean() < 0.8
    assert torch.equal(attack_outcome(lin, x_adv)[decided], want[decided])


def test_fgsm_l2_reaches_the_l2_optimum_in_one_step(linear_factory):
    lin = linear_factory(seed=2)
    eps = torch.full((len(lin.y),), 0.15, dtype=torch.float64)
    want, decided = exact_outcome(lin, eps, q=2)
    x_adv = FGSM(norm="l2")(lin.model, lin.x, lin.y, eps)
    assert torch.equal(attack_outcome(lin, x_adv)[decided], want[decided])


def test_targeted_ce_reaches_an_explicit_target_exactly_when_reachable():
    """z = x on 3 features, y the true label (argmax), t another class: target t is reachable in the
    L-inf ball iff x_t + eps > max_{k!=t} x_k - eps. Training semantics (keep='last') so the attack
    does not stop at the first misclassification."""
    g = torch.Generator().manual_seed(0)
    n = 300
    x = 0.3 + 0.4 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    model = nn.Linear(3, 3, bias=False, dtype=torch.float64)
    with torch.no_grad():
        model.weight.copy_(torch.eye(3, dtype=torch.float64))
    y = x.argmax(1)
    t = (y + torch.randint(1, 3, (n,), generator=g)) % 3
    eps = 0.06
    others = x.scatter(1, t[:, None], float("-inf")).amax(1)
    gap = x.gather(1, t[:, None]).squeeze(1) - others + 2 * eps
    want, decided = gap > 0, gap.abs() > 1e-9
    assert 0.2 < want.double().mean() < 0.9
    atk = PGD(20, targeted=True, keep="last")
    x_adv = atk(model, x, y, eps, generator=torch.Generator().manual_seed(1), targets=t)
    got = model(x_adv).argmax(1) == t
    assert torch.equal(got[decided], want[decided])
    with pytest.raises(Exception, match="true label"):
        atk(model, x, y, eps, targets=y)
