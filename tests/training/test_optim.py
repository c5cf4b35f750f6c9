"""training/optim.py: the optimizer, the per-iteration LR schedule and the eps warm-up."""

import pytest
import torch

from robfair.training import TrainConfig
from robfair.training.optim import eps_warmup_scale, make_optimizer, make_scheduler


def lrs(cfg, spe):
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg)
    sched = make_scheduler(opt, cfg, spe)
    out = []
    for _ in range(cfg.epochs * spe):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_piecewise_with_warmup_in_steps():
    cfg = TrainConfig(epochs=4, lr=0.1, milestones=[2], gamma=0.1, warmup_epochs=1)
    lr = lrs(cfg, spe=10)
    assert lr[0] == pytest.approx(0.001)  # warm-up starts at lr / 100
    assert lr[1] < lr[5] < lr[9] < 0.1  # a smooth ramp, step by step
    assert lr[10] == pytest.approx(0.1) and lr[19] == pytest.approx(0.1)
    assert lr[20] == pytest.approx(0.01) and lr[-1] == pytest.approx(0.01)  # the milestone at epoch 2


def test_cosine_and_constant():
    cos = lrs(TrainConfig(epochs=2, lr=0.2, schedule="cosine"), spe=5)
    assert cos[0] == pytest.approx(0.2) and all(a > b for a, b in zip(cos, cos[1:])) and cos[-1] > 0
    assert lrs(TrainConfig(epochs=2, lr=0.2, schedule="constant"), spe=3) == pytest.approx([0.2] * 6)


def test_optimizers():
    p = [torch.nn.Parameter(torch.zeros(1))]
    sgd = make_optimizer(p, TrainConfig(momentum=0.9, nesterov=True, weight_decay=5e-4))
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["nesterov"] and sgd.defaults["weight_decay"] == 5e-4
    assert not make_optimizer(p, TrainConfig(momentum=0.0, nesterov=True)).defaults["nesterov"]
    adam = make_optimizer(p, TrainConfig(optimizer="adam", lr=1e-3, momentum=0.8))
    assert isinstance(adam, torch.optim.Adam) and adam.defaults["betas"] == (0.8, 0.999)


def test_eps_warmup_ramp():
    assert eps_warmup_scale(0, TrainConfig(), 10) == 1.0
    cfg = TrainConfig(epochs=5, eps_warmup=2)
    scales = [eps_warmup_scale(s, cfg, 10) for s in range(25)]
    assert scales[0] == pytest.approx(1 / 20) and scales[9] == pytest.approx(0.5)
    assert scales[19] == 1.0 and scales[24] == 1.0
