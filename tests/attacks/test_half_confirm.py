"""Reduced precision confirms each success in fp32 once: a sample already fooled (its result frozen)
is never forwarded in fp32 again, with or without early exit, and the outcomes are those of the
plain definition (bf16 iterates, every bf16 success confirmed in fp32, the last iterate judged in
fp32)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robfair.attacks import NEVER, PGD, get_attack
from robfair.attacks.attack import count_passes

EPS = 0.03


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(288, 5)).eval()


def _data(net: nn.Module, n: int = 240):
    """Clean predictions as labels, a quarter relabelled (fooled at the start): at EPS most of the
    rest are fooled at some later step, some never."""
    x = torch.rand(n, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = net(x).argmax(1)
    y[: n // 4] = (y[: n // 4] + 1) % 5
    return x, y


class Recorder(nn.Module):
    """The wrapped model, recording every forward run with autocast off (the fp32 confirmations and
    checks): which samples (the clean image each row lies within EPS of) and whether fp32
    misclassifies them there."""

    def __init__(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
        super().__init__()
        self.net, self.x, self.y = net, x, y
        self.fp32: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, xa: torch.Tensor) -> torch.Tensor:
        z = self.net(xa)
        if not torch.is_autocast_enabled("cpu"):
            d = (xa.detach()[:, None] - self.x[None]).abs().flatten(2).amax(2)
            dist, who = d.min(1)
            assert bool((dist <= EPS + 1e-6).all()) and bool((d <= EPS + 1e-6).sum(1).eq(1).all())
            self.fp32.append((who, z.detach().argmax(1) != self.y[who]))
        return z


def reference(net: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, generator: torch.Generator):
    """PGD-k (L-inf, CE, one run) by its definition: bf16 iterates; iterate t counts as fooling
    when bf16 says so and fp32 confirms it; the last iterate is judged in fp32; a fooled sample
    keeps its first fooling iterate. Returns (x_adv, prediction, first-fooled step)."""
    n = x.shape[0]
    xa = (x + (2 * torch.rand(x.shape, generator=generator) - 1) * EPS).clamp(0, 1)
    out, pred, step = x.clone(), torch.full((n,), NEVER), torch.full((n,), NEVER)
    done = torch.zeros(n, dtype=torch.bool)
    for t in range(steps + 1):
        if t < steps:
            xa.requires_grad_(True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                z = net(xa).float()
            (g,) = torch.autograd.grad(F.cross_entropy(z, y, reduction="none").sum(), xa)
            xa, z = xa.detach(), z.detach()
            cand = ((z.argmax(1) != y) & ~done).nonzero().squeeze(1)
        else:
            cand = (~done).nonzero().squeeze(1)
        with torch.no_grad():
            p32 = net(xa[cand]).argmax(1)
        new = cand[p32 != y[cand]]
        out[new], pred[new], step[new], done[new] = xa[new], p32[p32 != y[cand]], t, True
        if t == steps:
            keep = cand[p32 == y[cand]]
            out[keep], pred[keep] = xa[keep], p32[p32 == y[cand]]
        else:
            xa = (x + (xa + EPS / 4 * g.sign() - x).clamp(-EPS, EPS)).clamp(0, 1)
    return out, pred, step


@pytest.mark.parametrize("early_exit", [False, True])
def test_bf16_outcomes_are_the_definitions(early_exit):
    net = _net()
    x, y = _data(net)
    res = PGD(6, precision="bf16").run(net, x, y, EPS, generator=torch.Generator().manual_seed(2),
                                       early_exit=early_exit)
    out, pred, step = reference(net, x, y, 6, torch.Generator().manual_seed(2))
    assert res.fooled.float().mean() > 0.5 and bool((step > 0).any()) and bool((step == NEVER).any())
    assert torch.equal(res.fooled_step, step)
    assert torch.equal(res.adv_pred, pred)
    assert torch.equal(res.fooled, pred != y)
    assert torch.equal(res.x_adv, out)


@pytest.mark.parametrize("name", ["pgd8", "pgd3-r3", "pgd3-t2", "pgd4-cw"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("early_exit", [False, True])
def test_a_fooled_sample_is_confirmed_in_fp32_once_and_never_forwarded_in_fp32_again(name, precision, early_exit):
    net = _net()
    x, y = _data(net)
    rec = Recorder(net, x, y)
    res = get_attack(name, precision=precision).run(rec, x, y, EPS, generator=torch.Generator().manual_seed(3),
                                                    early_exit=early_exit)
    assert res.fooled.float().mean() > 0.5
    fooled_at = torch.zeros(len(y), dtype=torch.long)  # fp32 forwards that misclassified, per sample
    after = torch.zeros(len(y), dtype=torch.long)  # fp32 forwards of a sample after that
    for who, wrong in rec.fp32:
        after += torch.bincount(who[fooled_at[who] > 0], minlength=len(y))
        fooled_at += torch.bincount(who[wrong], minlength=len(y))
    assert torch.equal(fooled_at, res.fooled.long()), "a fooled sample was confirmed in fp32 more than once"
    assert int(after.sum()) == 0, "a sample was forwarded in fp32 after its success was confirmed"


def test_bf16_pgd_without_early_exit_costs_k_gradient_passes_and_one_fp32_forward_per_sample():
    """Every sample: k bf16 gradient passes; in fp32 one forward per confirmation (once when
    fooled, plus any bf16 success fp32 rejected) or for the last iterate, none after."""
    net = _net()
    x, y = _data(net)
    rec = Recorder(net, x, y)
    with count_passes() as c:
        res = PGD(8, precision="bf16").run(rec, x, y, EPS, generator=torch.Generator().manual_seed(3))
    fp32_rows = sum(int(who.numel()) for who, _ in rec.fp32)
    assert c.gradient == 8 * len(y) and c.forward == fp32_rows
    assert res.fooled.float().mean() > 0.5
    assert len(y) <= fp32_rows <= len(y) + len(y) // 10  # a few bf16 successes fp32 rejects, no repeats
