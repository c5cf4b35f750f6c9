"""eps_warmup: the training radius ramps linearly per step, reaches every method's attack (class radii
too), is logged in metrics.jsonl and never touches the validation radius."""

import pytest
import torch

from robfair.data import Dataset
from robfair.training import TrainConfig, Trainer, build_model, split_train_val
from robfair.seeding import seed_everything


class Spy:
    """Wraps an attack, recording the radii it receives (mean per call)."""

    def __init__(self, attack):
        self.attack, self.eps = attack, []

    def __call__(self, model, x, y, eps, **kw):
        e = eps if isinstance(eps, float) else eps.flatten()
        self.eps.append(float(torch.as_tensor(e).float().mean()))
        return self.attack(model, x, y, eps, **kw)


def run(cfg, data):
    seed_everything(cfg.seed)
    tr, va = split_train_val(data, cfg)
    t = Trainer(build_model(cfg, data.num_classes, data.in_shape), tr, va, None, cfg)
    train_spy, val_spy = Spy(t.train_attack.attack), Spy(t.val_attack.attack)
    t.train_attack.attack, t.val_attack.attack = train_spy, val_spy
    return t.fit(), train_spy, val_spy, t


@pytest.fixture(scope="module")
def small(digits):
    idx = torch.arange(400)
    return Dataset(x=digits.x[idx], y=digits.y[idx], classes=digits.classes, name="digits400")


BASE = dict(data="digits", model="mlp", model_kwargs={"hidden": [16]}, eps=0.1, attack_options={"steps": 1},
            epochs=3, batch_size=180, val_per_class=4, val_attack="pgd1", device="cpu", lr=0.05)


def test_the_ramp_is_linear_per_step_and_logged(small):
    cfg = TrainConfig(**BASE, method="pgd-at", eps_warmup=1.5)
    result, train_spy, val_spy, t = run(cfg, small)
    assert t.steps_per_epoch == 2  # 360 training samples, batch 180
    # steps 0..5 with 3 warm-up steps: eps * 1/3, 2/3, 1, 1, 1, 1
    assert train_spy.eps == pytest.approx([0.1 / 3, 0.2 / 3, 0.1, 0.1, 0.1, 0.1], rel=1e-5)
    assert all(e == pytest.approx(0.1) for e in val_spy.eps)  # validation always at the full radius
    logged = [v for r in result.history for v in r["train"]["eps"]]
    assert logged == pytest.approx([0.1 / 3, 0.2 / 3, 0.1, 0.1, 0.1, 0.1], rel=1e-5)  # first / last step


def test_without_warmup_nothing_changes(small):
    result, train_spy, _, _ = run(TrainConfig(**BASE, method="pgd-at"), small)
    assert train_spy.eps == pytest.approx([0.1] * 6) and "eps" not in result.history[0]["train"]


def test_class_radii_ramp_with_the_global_one(small):
    """A method's per-class radii (here at-class-eps, 2x for one class) are scaled by the same factor."""
    mult = [1.0] * 10
    mult[3] = 2.0
    cfg = TrainConfig(**{**BASE, "epochs": 2}, method="at-class-eps", method_options={"multipliers": mult},
                      eps_warmup=2)
    _, train_spy, _, t = run(cfg, small)
    # the mean radius per call is scale * eps * (1 + share of class 3 in the batch); the ramp is 1/4 .. 1
    assert train_spy.eps[0] < train_spy.eps[1] < train_spy.eps[2] < train_spy.eps[3]
    assert train_spy.eps[3] > 0.1  # the 2x class is above the global radius once the ramp ends
