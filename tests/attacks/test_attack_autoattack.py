"""AutoAttack wrapper: a clear error when the official package is missing; per-sample eps groups."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from robfair.attacks import get_attack
from robfair.errors import AttackError

HAVE_AA = any(importlib.util.find_spec(m) is not None for m in ("pyautoattack", "autoattack"))


def test_missing_package_gives_install_hint(monkeypatch, linear_factory):
    for mod in ("pyautoattack", "autoattack"):
        monkeypatch.setitem(sys.modules, mod, None)  # makes `import mod` raise ImportError
    lin = linear_factory(n=4)
    with pytest.raises(AttackError) as info:
        get_attack("autoattack")(lin.model, lin.x, lin.y, 0.03)
    assert str(info.value) == ("autoattack needs the official implementation, a dependency of robfair missing from "
                               "this environment: pip install pyautoattack (or reinstall robfair)")


@pytest.mark.skipif(not HAVE_AA, reason="the official AutoAttack (pip install pyautoattack) is not installed")
def test_per_sample_eps_groups_match_the_linear_closed_form(linear_factory):
    lin = linear_factory(n=90, seed=4, shape=(1, 4, 5))
    eps = torch.tensor([0.0, 0.03, 0.06], dtype=torch.float64).repeat(30)
    m = lin.margin(lin.x)
    wrong = (m > 0).long() != lin.y
    want = wrong | (m.abs() <= eps * lin.w.abs().sum())
    decided = (m.abs() - eps * lin.w.abs().sum()).abs() > 1e-6
    # APGD-CE then FAB (FAB calls backward(): parameter grads must come back untouched)
    p0 = next(lin.model.parameters())
    p0.grad = sentinel = torch.full_like(p0, 7.0)
    rng = torch.get_rng_state()
    atk = get_attack("autoattack", attacks=["apgd-ce", "fab"])
    x_adv = atk(lin.model, lin.x, lin.y, eps, generator=torch.Generator().manual_seed(0))
    got = (lin.margin(x_adv) > 0).long() != lin.y
    assert 0.2 < want.double().mean() < 0.9
    assert torch.equal(got[decided], want[decided])
    assert torch.all((x_adv - lin.x).flatten(1).abs().amax(1) <= eps + 1e-9)
    assert torch.equal(x_adv[eps == 0], lin.x[eps == 0])
    assert p0.grad is sentinel and torch.all(sentinel == 7.0)
    assert all(p.grad is None for p in list(lin.model.parameters())[1:])
    assert torch.equal(torch.get_rng_state(), rng)  # AutoAttack's reseeding did not leak out


@pytest.mark.skipif(not HAVE_AA, reason="the official AutoAttack (pip install pyautoattack) is not installed")
def test_square_needs_images(linear_factory):
    lin = linear_factory(n=4)  # flat (N, 20) inputs
    with pytest.raises(AttackError, match="Square"):
        get_attack("autoattack")(lin.model, lin.x, lin.y, 0.03)
