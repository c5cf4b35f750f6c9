"""A targeted attack means something on every path: audit, eps sweep, distances and training.

Before target rules, ``pgd20-t`` received the true labels as targets and reported clean accuracy as
robust accuracy. The exact answer of a multi-class affine model on interior data decides here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robfair.auditing import audit
from robfair.auditing.distances import affine_params, exact_linear_distance, minimal_eps
from robfair.auditing.eps_sweep import eps_sweep
from robfair.errors import ConfigError



def _exact_robust(model, ds, eps):
    W, b = affine_params(model, ds.in_shape)
    x = ds.x.flatten(1).double()
    z = x @ W.T + b
    y = ds.y
    margin = z.gather(1, y[:, None]) - z
    dual = (W[y][:, None, :] - W[None, :, :]).abs().sum(-1)
    ok = margin > eps * dual
    ok.scatter_(1, y[:, None], True)
    return ok.all(1).numpy()


@pytest.fixture
def linear5(linear_factory):
    return linear_factory(5, d=6, n=200, seed=3)


def test_audit_and_sweep_with_a_targeted_attack_equal_the_exact_answer(linear5):
    model, ds = linear5
    n = len(ds)
    clean = (model(ds.x).argmax(1) == ds.y).double().mean().item()
    for eps in (0.01, 0.03):
        want = _exact_robust(model, ds, eps).mean()
        rep = audit(model, ds, attacks=["pgd20-cw-t"], eps=eps, device="cpu")
        got = rep.main.overall["rob_acc"]
        assert abs(got - want) <= 1 / n + 1e-12, (eps, got, want)
        assert got < clean - 0.1  # not clean accuracy in disguise
    sweep = eps_sweep(model, ds, "pgd20-cw-t", [0.0, 0.01, 0.03], device="cpu")
    accs = [r.overall["rob_acc"] for r in sweep.reports]
    assert accs[0] == pytest.approx(clean) and accs[0] > accs[1] > accs[2]
    assert abs(accs[2] - _exact_robust(model, ds, 0.03).mean()) <= 1 / n + 1e-12


def test_targeted_bisection_finds_the_nearest_facet_exactly(linear5):
    """Untargeted PGD may head for another facet than the nearest; the worst case over all targets
    does not."""
    model, ds = linear5
    W, b = affine_params(model, ds.in_shape)
    x = ds.images()
    d, pred = exact_linear_distance(W, b, x, "linf")
    tol = 1e-3
    lo, hi, pb = minimal_eps(model, x, "pgd50-cw-t", eps_max=0.3, tol=tol)
    assert torch.equal(pb, pred)
    assert (hi.numpy() >= d.numpy() - 1e-6).all()
    assert np.all(hi.numpy() - d.numpy() <= tol + 1e-6)  # every sample, not just most
    assert np.isfinite(hi.numpy()).all()  # none censored


def test_training_attacks_need_a_target_rule_and_use_it(linear5):
    from robfair.training.config import TrainConfig
    from robfair.training.methods.method import build_attack

    for bad in ("pgd10-t", "fgsm-cw-t"):
        with pytest.raises(ConfigError, match="without a target rule; name one: .*-trand") as e:
            TrainConfig(method="pgd-at", attack=bad)
        assert "\n" not in str(e.value)
        with pytest.raises(ConfigError, match="target rule"):
            build_attack(bad, {}, train=True)
    assert TrainConfig(method="pgd-at", attack="pgd10-trand").attack == "pgd10-trand"
    build_attack("pgd10-t", {}, train=False)  # evaluation: the default rule is a rule
    model, ds = linear5
    clean_err = (model(ds.x).argmax(1) != ds.y).double().mean()
    atk = build_attack("pgd10-trand", {}, train=True)
    x_adv = atk(model, ds.x, ds.y, 0.05, generator=torch.Generator().manual_seed(0))
    assert (model(x_adv).argmax(1) != ds.y).double().mean() > clean_err + 0.2
