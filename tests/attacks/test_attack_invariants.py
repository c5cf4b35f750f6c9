"""Invariants of the built-in attacks beyond the contract every registered attack keeps
(test_attack_contract.py: ball, box, input gradients only, modes, determinism): the random start,
other seeds, precision, and the evaluation semantics of PGD (first success, early exit)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robfair.attacks import PGD, TradesKL, get_attack
from robfair.errors import AttackError


def dist(x_adv: torch.Tensor, x: torch.Tensor, norm: str) -> torch.Tensor:
    d = (x_adv - x).flatten(1)
    return d.abs().amax(1) if norm == "linf" else d.norm(dim=1)


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_random_start_uses_each_samples_own_eps(norm):
    """Reference bug: the start drawn with one global eps. steps=0 returns the start itself."""
    n, d = 64, 48
    x = 0.3 + 0.4 * torch.rand(n, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    eps = torch.tensor([0.0, 0.01, 0.2, 0.05]).repeat(n // 4)
    model = nn.Sequential(nn.Flatten(), nn.Linear(d, 3))
    start = PGD(0, norm=norm)(model, x, torch.zeros(n, dtype=torch.long), eps,
                              generator=torch.Generator().manual_seed(1))
    r = dist(start, x, norm)
    assert torch.all(r <= eps + 1e-6)
    assert torch.equal(start[eps == 0], x[eps == 0])
    if norm == "linf":  # U(-eps, eps) per pixel: the largest of 48 draws is close to eps
        assert torch.all(r[eps > 0] > 0.8 * eps[eps > 0])
    else:  # uniform in the ball in 48 dims: the radius eps * U^(1/48) is close to eps
        assert torch.all(r[eps > 0] > 0.85 * eps[eps > 0])
        # and the direction is isotropic: the mean direction over many samples is small
        dirs = (start - x).flatten(1)[eps > 0]
        assert (dirs / dirs.norm(dim=1, keepdim=True)).mean(0).norm() < 0.35


@pytest.mark.parametrize("name", ["rs-fgsm", "pgd3", "pgd3-l2", "trades-kl"])
def test_same_seed_same_result_other_seed_differs(name, mixed_model, images):
    x, y, eps = images
    atk = get_attack(name)
    a = atk(mixed_model, x, y, eps, generator=torch.Generator().manual_seed(7))
    b = atk(mixed_model, x, y, eps, generator=torch.Generator().manual_seed(7))
    c = atk(mixed_model, x, y, eps, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_first_success_is_the_first_fooling_iterate(mlp_factory):
    """Independent reference: PGD-j with keep='last' is iterate j. The first-success result must be
    iterate j* (the first that fools) for fooled samples, and iterate K otherwise."""
    model = mlp_factory()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(200, 20, generator=g, dtype=torch.float64)
    y = model(x).argmax(1)  # all clean-correct, so the start usually does not fool
    eps, K = 0.15, 8  # rel_step 1: large steps, so some samples are fooled and then un-fooled
    iterates = [PGD(j, rel_step=1.0, keep="last")(model, x, y, eps, generator=torch.Generator().manual_seed(3))
                for j in range(K + 1)]
    fooled = torch.stack([model(it).argmax(1) != y for it in iterates])  # (K+1, N)
    first = torch.where(fooled.any(0), fooled.double().argmax(0), torch.full_like(y, K))
    want = torch.stack(iterates)[first, torch.arange(len(y))]
    got = PGD(K, rel_step=1.0)(model, x, y, eps, generator=torch.Generator().manual_seed(3))
    assert 0.2 < fooled.any(0).double().mean() < 0.9
    assert (first[fooled.any(0)] > 0).any()  # some samples are fooled only after a few steps
    assert torch.allclose(got, want, atol=1e-12, rtol=0)
    # the last iterate does not always fool: freezing changes the verdict, not only the point
    assert (fooled.any(0) & ~fooled[-1]).any()
    assert torch.equal(model(got).argmax(1) != y, fooled.any(0))


@pytest.mark.parametrize("name", ["pgd10", "pgd6-l2-r3", "pgd6-cw-r2", "pgd6-t"])
def test_early_exit_same_outcome_less_work(mlp_factory, name):
    model = mlp_factory()
    g = torch.Generator().manual_seed(0)
    n = 300
    x = torch.rand(n, 20, generator=g, dtype=torch.float64)
    y = model(x).argmax(1)
    eps = torch.rand(n, generator=g, dtype=torch.float64) * (0.8 if "l2" in name else 0.25)
    seen = []
    model[1].register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0]))
    atk = get_attack(name)
    runs = {}
    for early in (False, True):
        seen.clear()
        gen = torch.Generator().manual_seed(5)
        runs[early] = (atk(model, x, y, eps, generator=gen, early_exit=early), sum(seen), gen.get_state())
    (full, work_full, st_full), (early, work_early, st_early) = runs[False], runs[True]
    success = lambda xa: model(xa).argmax(1) != y  # targeted too: y is the true label  # noqa: E731
    assert 0.1 < success(full).double().mean() < 0.95
    assert torch.equal(success(full), success(early))
    assert torch.allclose(full, early, atol=1e-12, rtol=0)  # the same iterates, not just the same verdict
    assert work_early < 0.8 * work_full
    assert torch.equal(st_full, st_early)  # the generator advanced the same way


def test_early_exit_draws_every_restart_even_when_all_are_fooled(mlp_factory):
    """An audit reuses one generator across batches: early exit must leave it in the same state."""
    model = mlp_factory()
    x = torch.rand(20, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = model(x).argmax(1)
    states = []
    for early in (False, True):
        gen = torch.Generator().manual_seed(1)
        x_adv = PGD(3, restarts=3)(model, x, y, 1.0, generator=gen, early_exit=early)
        assert torch.all(model(x_adv).argmax(1) != y)  # everything fooled in the first restart
        states.append(gen.get_state())
    assert torch.equal(states[0], states[1])


def test_forward_count_no_wasted_passes(mlp_factory):
    model = mlp_factory(dtype=torch.float32)
    calls = []
    model.register_forward_hook(lambda m, i, o: calls.append(torch.is_grad_enabled()))
    x, y = torch.rand(8, 20), torch.zeros(8, dtype=torch.long)
    PGD(10)(model, x, y, 0.1)
    assert calls == [True] * 10 + [False]  # 10 forward+grad, 1 final check
    calls.clear()
    PGD(10, keep="last")(model, x, y, 0.1)
    assert calls == [True] * 10  # training: no success checks at all
    calls.clear()
    TradesKL(steps=10)(model, x, y, 0.1)
    assert calls == [False] + [True] * 10  # clean probabilities once, under no_grad


def test_keep_last_returns_the_last_iterate_and_refuses_early_exit(mlp_factory):
    model = mlp_factory()
    x = torch.rand(50, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = model(x).argmax(1)
    last = PGD(6, keep="last")(model, x, y, 0.3, generator=torch.Generator().manual_seed(0))
    manual = PGD(5, keep="last")(model, x, y, 0.3, generator=torch.Generator().manual_seed(0))
    # one more step by hand from the 5-step result
    xa = manual.clone().requires_grad_(True)
    g, = torch.autograd.grad(nn.functional.cross_entropy(model(xa), y, reduction="sum"), xa)
    step = (manual + 0.3 / 4 * g.sign() - x).clamp(-0.3, 0.3)
    assert torch.allclose(last, (x + step).clamp(0, 1), atol=1e-12)
    with pytest.raises(AttackError, match="early_exit"):
        PGD(3, keep="last")(model, x, y, 0.1, early_exit=True)


def test_restarts_keep_the_highest_loss_when_nothing_fools():
    """A model no attack can fool (constant logits favour the label): each restart has its own loss,
    the kept one must be the best over restarts."""

    class Quadratic(nn.Module):  # logits [s, 10] with s <= 0: label 1 never flips, the loss grows with s
        def forward(self, x):
            s = -((x.flatten(1) - 0.5) ** 2).sum(1)
            return torch.stack([s, torch.full_like(s, 10.0)], 1)

    x = torch.full((20, 1, 2, 2), 0.5, dtype=torch.float64)
    y = torch.ones(20, dtype=torch.long)
    model = Quadratic()
    loss = lambda xa: nn.functional.cross_entropy(model(xa), y, reduction="none")  # noqa: E731
    best = PGD(0, restarts=5)(model, x, y, 0.2, generator=torch.Generator().manual_seed(0))
    singles = []
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):  # the same five starts, one restart at a time
        singles.append(loss(PGD(0)(model, x, y, 0.2, generator=gen)))
    assert torch.allclose(loss(best), torch.stack(singles).amax(0))


def test_targeted_fgsm_and_temperature_run(mlp_factory):
    model = mlp_factory()
    x = torch.rand(30, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = model(x).argmax(1)
    t = (y + 1) % 5
    x_adv = get_attack("fgsm-t")(model, x, y, 0.5, targets=t)
    assert (model(x_adv).argmax(1) == t).double().mean() > (model(x).argmax(1) == t).double().mean()
    hot = PGD(5, temperature=100.0)(model, x, model(x).argmax(1), 0.05, generator=torch.Generator().manual_seed(0))
    assert torch.all((hot - x).abs() <= 0.05 + 1e-12)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_pgd_at_half_precision_still_fools(precision, mlp_factory):
    # every registered attack's half-precision path: test_attack_contract.py
    model = mlp_factory(dtype=torch.float32)
    x = torch.rand(32, 20, generator=torch.Generator().manual_seed(0))
    y = model(x).argmax(1)
    fooled = (model(PGD(10, precision=precision)(model, x, y, 0.2, generator=torch.Generator().manual_seed(0))).argmax(1) != y)
    assert fooled.double().mean() > 0.3


def test_per_sample_step_tensor_and_absolute_step(mlp_factory):
    model = mlp_factory()
    x = 0.3 + 0.4 * torch.rand(4, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = model(x).argmax(1)
    step = torch.tensor([0.0, 0.01, 0.02, 0.04], dtype=torch.float64)
    x_adv = PGD(1, step=step, random_start=False, keep="last")(model, x, y, 0.5)
    assert torch.allclose((x_adv - x).abs().amax(1), step)
    with pytest.raises(AttackError, match="step"):
        PGD(1, step=torch.ones(3))(model, x, y, 0.5)


def test_works_inside_no_grad_and_refuses_inference_mode(mlp_factory):
    model = mlp_factory(dtype=torch.float32)
    x, y = torch.rand(4, 20), torch.zeros(4, dtype=torch.long)
    with torch.no_grad():
        assert not torch.equal(PGD(2)(model, x, y, 0.1), x)
    with torch.inference_mode(), pytest.raises(AttackError, match="inference_mode"):
        PGD(2)(model, x, y, 0.1)
