"""torch.compile, guarded: the training step's forward compiled where torch can, eager (one warning) where not."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from robfair import hardware
from robfair.models.factory import unwrap_model


def small():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 10))


def test_compiled_forward_and_input_gradient_match_eager():
    if not hasattr(torch, "compile"):
        pytest.skip("this torch has no torch.compile")
    model = small()
    g = hardware.GuardedCompile(model, "aot_eager")
    x = torch.rand(6, 1, 8, 8, requires_grad=True)
    ref = model(x)
    (gx_ref,) = torch.autograd.grad(ref.sum(), x)
    out = g(x)
    (gx,) = torch.autograd.grad(out.sum(), x)
    assert g.compiled and torch.allclose(out, ref, atol=1e-6) and torch.allclose(gx, gx_ref, atol=1e-6)
    assert unwrap_model(g) is model and list(g.state_dict()) == [f"_orig_mod.{k}" for k in model.state_dict()]


def test_a_failing_compile_falls_back_to_eager_with_one_warning(caplog, monkeypatch):
    model = small()
    with caplog.at_level(logging.WARNING, logger="robfair.hardware"):
        bad = hardware.GuardedCompile(model, "no-such-backend")
    x = torch.rand(3, 1, 8, 8)
    assert torch.equal(bad(x), model(x)) and not bad.compiled
    assert len(caplog.records) == 1 and "running eager" in caplog.records[0].getMessage()

    class Boom:
        def __call__(self, *a, **k):
            raise RuntimeError("inductor: no C++ compiler")

    g = hardware.GuardedCompile(model, "aot_eager")
    object.__setattr__(g, "_compiled", Boom())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="robfair.hardware"):
        assert torch.equal(g(x), model(x)) and torch.equal(g(x), model(x))
    assert not g.compiled and len(caplog.records) == 1 and "no C++ compiler" in caplog.records[0].getMessage()


def test_trainer_step_runs_compiled_with_the_eager_losses():
    if not hasattr(torch, "compile"):
        pytest.skip("this torch has no torch.compile")
    from robfair.data import load_dataset
    from robfair.training import TrainConfig, train

    data = load_dataset("digits", "train").subset(torch.arange(96))
    base = dict(data="digits", model="smallcnn", model_kwargs={"width": 4, "hidden": 16}, method="pgd-at", eps=0.1,
                attack="pgd2", epochs=1, batch_size=32, device="cpu", val_per_class=0, select="last", seed=0)
    eager = train(TrainConfig(**base), train_data=data)
    comp = train(TrainConfig(**base, compile="aot_eager"), train_data=data)
    assert comp.history[0]["train"]["loss"] == pytest.approx(eager.history[0]["train"]["loss"], rel=1e-4)
    for a, b in zip(eager.model.state_dict().values(), comp.model.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=1e-4)
