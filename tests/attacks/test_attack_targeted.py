"""Targeted attacks take their targets from a stated rule, never from the true label.

The exact test: a multi-class linear model z = W x + b with data inside the box (the [0, 1] clip never
binds). Sample (x, y) is L-inf robust at eps iff every pairwise margin
(w_y - w_j).x + (b_y - b_j) exceeds eps * ||w_y - w_j||_1. The worst case over all K - 1 targets of
a targeted attack must reproduce that exact robust error: with the targeted margin loss z_t - z_y
within 1/n, with targeted CE within 1 point.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robfair.attacks import PGD, Chunk, get_attack, parse_attack_name, target_rule
from robfair.errors import AttackError


def linear_problem(n=500, d=12, k=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    # logits as confident as a trained model's (scale 10): scaling W and b changes no margin's sign
    # at a given eps, but with flat softmax (scale 1) targeted CE misses 3.2 points of the exact answer
    W = 10 * torch.randn(k, d, generator=g, dtype=torch.float64)
    b = 5 * torch.randn(k, generator=g, dtype=torch.float64)
    lin = nn.Linear(d, k, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(W)
        lin.bias.copy_(b - W.sum(1) / 2)  # boundaries through the centre of the box
    x = 0.35 + 0.3 * torch.rand(n, d, generator=g, dtype=torch.float64)
    with torch.no_grad():
        z = lin(x)
    y = z.argmax(1)
    flip = torch.rand(n, generator=g) < 0.1  # a few clean mistakes
    y[flip] = (y[flip] + 1) % k
    return lin, x, y


def exact_robust_error(lin, x, y, eps):
    """1 where some pairwise margin is <= eps * ||w_y - w_j||_1 (or the sample is misclassified)."""
    W, b = lin.weight.detach(), lin.bias.detach()
    z = x @ W.T + b
    margin = z.gather(1, y[:, None]) - z  # (n, K): (w_y - w_j).x + (b_y - b_j)
    dual = (W[y][:, None, :] - W[None, :, :]).abs().sum(-1)  # (n, K): ||w_y - w_j||_1
    robust_j = margin > eps * dual
    robust_j.scatter_(1, y[:, None], True)
    return ~robust_j.all(1)


@pytest.mark.parametrize("loss,tol", [("cw", "1/n"), ("ce", "1pt")])
def test_worst_case_over_targets_equals_the_exact_linear_robust_error(loss, tol):
    lin, x, y = linear_problem()
    n = len(y)
    eps = 0.015
    want = exact_robust_error(lin, x, y, eps)
    assert 0.2 < want.double().mean() < 0.8  # both outcomes present
    atk = get_attack(f"pgd20{'-cw' if loss == 'cw' else ''}-t4")  # K - 1 = 4 targets: all of them
    res = atk.run(lin, x, y, eps, generator=torch.Generator().manual_seed(0), early_exit=True)
    assert torch.all((res.x_adv - x).abs() <= eps + 1e-12) and res.x_adv.min() > 0 and res.x_adv.max() < 1
    err_attack = res.fooled.double().mean().item()
    err_exact = want.double().mean().item()
    if tol == "1/n":
        assert abs(err_attack - err_exact) <= 1 / n + 1e-12
    else:
        assert abs(err_attack - err_exact) <= 0.01
    assert not (res.fooled & ~want).any()  # never fooled where the exact answer is robust
    # the bare -t rule takes min(9, K - 1) = 4 targets here: the same answer
    same = get_attack(f"pgd20{'-cw' if loss == 'cw' else ''}-t").run(lin, x, y, eps, generator=torch.Generator().manual_seed(0))
    assert torch.equal(same.fooled, res.fooled)


def test_one_target_is_weaker_than_the_worst_case_and_the_true_label_is_never_a_target():
    lin, x, y = linear_problem(seed=1)
    eps = 0.015
    want = exact_robust_error(lin, x, y, eps)
    one = get_attack("pgd20-cw-t1").run(lin, x, y, eps, generator=torch.Generator().manual_seed(0))
    allt = get_attack("pgd20-cw-t4").run(lin, x, y, eps, generator=torch.Generator().manual_seed(0))
    assert one.fooled.sum() <= allt.fooled.sum() == want.sum()
    # a targeted attack whose target were the true label would report clean accuracy: it must not
    clean_err = (lin(x).argmax(1) != y).double().mean()
    for name in ("pgd20-t", "pgd20-trand", "pgd20-t1", "fgsm-t"):
        res = get_attack(name).run(lin, x, y, eps, generator=torch.Generator().manual_seed(0))
        assert res.fooled.double().mean() > clean_err + 0.05, name
    # the targets themselves: top-k by clean logit excluding y, random never y
    atk = get_attack("pgd5-t3")
    z = lin(x).detach()
    t = atk._targets(lin, x, y, z, None, None)
    assert t.shape == (len(y), 3) and not (t == y[:, None]).any()
    ref = z.scatter(1, y[:, None], float("-inf")).topk(3, 1).indices
    assert torch.equal(t, ref)
    r = get_attack("pgd5-trand")._targets(lin, x, y, z, None, torch.Generator().manual_seed(0))
    assert r.shape == (len(y), 1) and not (r[:, 0] == y).any() and len(r.unique()) == 5


def test_random_target_is_seeded():
    lin, x, y = linear_problem(n=200, seed=2)
    atk = get_attack("pgd5-trand")
    a = atk.run(lin, x, y, 0.03, generator=torch.Generator().manual_seed(3))
    b = atk.run(lin, x, y, 0.03, generator=torch.Generator().manual_seed(3))
    c = atk.run(lin, x, y, 0.03, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.x_adv, b.x_adv) and not torch.equal(a.x_adv, c.x_adv)


def test_name_grammar_for_target_rules():
    assert parse_attack_name("pgd20-t") == ("pgd", {"steps": 20, "targeted": True})
    assert parse_attack_name("pgd20-t3") == ("pgd", {"steps": 20, "n_targets": 3, "targeted": True})
    assert parse_attack_name("pgd20-cw-trand") == ("pgd", {"steps": 20, "loss": "cw", "targets": "random",
                                                           "targeted": True})
    assert [target_rule(n) for n in ("pgd20", "pgd20-t", "pgd20-t3", "fgsm-trand")] == [None, "default", "top3",
                                                                                        "random"]
    assert PGD(10, targeted=True, n_targets=2).name == "pgd10-t2"
    assert PGD(10, targeted=True, targets="random").name == "pgd10-trand"
    for bad, msg in [("pgd20-t0", "no target"), ("pgd20-t3-trand", "two target rules"), ("pgd20-tx", "suffix")]:
        with pytest.raises(AttackError, match=msg):
            parse_attack_name(bad)
    with pytest.raises(AttackError, match="untargeted"):
        get_attack("pgd5")(nn.Linear(3, 3), torch.rand(2, 3), torch.zeros(2, dtype=torch.long), 0.1,
                           targets=torch.ones(2, dtype=torch.long))
