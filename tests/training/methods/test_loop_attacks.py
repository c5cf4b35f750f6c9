"""The attacks the training loop uses (training/methods/base.build_attack, DeviceAttack)."""

import pytest
import torch

from robfair.errors import ConfigError
from robfair.training import TrainConfig
from robfair.training.methods import TrainContext
from robfair.training.methods.method import DeviceAttack, build_attack


class Spy:
    """An attack that records what it was called with."""

    name = "spy"
    steps = 7

    def __init__(self):
        self.calls = []

    def __call__(self, model, x, y, eps, **kw):
        self.calls.append((model, eps, kw))
        return x


def test_no_name_builds_no_attack():
    assert build_attack(None, {}, train=True) is None and build_attack("None", {}, train=False) is None


def test_training_attacks_keep_the_last_iterate_and_evaluation_attacks_the_first_success():
    train = build_attack("pgd3", {}, train=True)
    val = build_attack("pgd3", {}, train=False)
    assert isinstance(train, DeviceAttack) and train.attack.keep == "last" and val.attack.keep == "first-success"
    assert build_attack("pgd3", {"keep": "first-success"}, train=True).attack.keep == "first-success"  # asked
    assert train.steps == 3 and train.name == "pgd3"  # settings read through the wrapper
    assert build_attack("fgsm", {}, train=True).attack.name == "fgsm"  # no keep option: none given


def test_a_training_attack_aimed_at_the_label_is_a_config_error():
    with pytest.raises(ConfigError, match="target"):
        build_attack("pgd3-t", {}, train=True)


def test_the_wrapper_unwraps_the_model_and_scales_every_radius():
    spy, outer, inner = Spy(), object(), object()
    scale = [0.5]
    atk = DeviceAttack(spy, scale=lambda: scale[0], unwrap=lambda m: inner if m is outer else m)
    atk(outer, torch.zeros(1), torch.zeros(1), torch.tensor([0.2, 0.4]), generator="g")
    model, eps, kw = spy.calls[-1]
    assert model is inner and torch.allclose(eps, torch.tensor([0.1, 0.2])) and kw == {"generator": "g"}
    scale[0] = 1.0
    atk(outer, torch.zeros(1), torch.zeros(1), 0.3)
    assert spy.calls[-1][1] == 0.3  # full radius: passed through untouched
    assert atk.steps == 7 and atk.name == "spy"


def test_the_context_builds_as_the_trainer_does_without_a_factory():
    ctx = TrainContext(cfg=TrainConfig(), device=torch.device("cpu"), num_classes=2, class_names=["a", "b"], eps=0.1)
    atk = ctx.build_attack("pgd2")
    assert isinstance(atk, DeviceAttack) and atk.attack.keep == "last"
    with pytest.raises(ConfigError, match="target"):
        ctx.build_attack("pgd2-t")
