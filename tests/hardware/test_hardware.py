"""Hardware decisions: reduced precision only where native, channels_last by default for conv nets."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from robfair import hardware
from robfair.attacks import PGD
from robfair.errors import RobfairError


@pytest.fixture(scope="module")
def digits():
    from robfair.data import load_dataset

    return load_dataset("digits", "train")


def test_precision_refused_where_not_native_and_allowed_where_native(monkeypatch):
    monkeypatch.delenv(hardware.EMULATION_ENV, raising=False)
    monkeypatch.setattr(hardware, "native_precisions", lambda d: {"fp32": True, "bf16": False, "fp16": False})
    assert hardware.check_precision("fp32", "cpu") == "fp32"
    for p in ("bf16", "fp16"):
        with pytest.raises(RobfairError, match=f"--precision {p} is not native .* use --precision fp32") as e:
            hardware.check_precision(p, "cpu")
        assert "\n" not in str(e.value) and hardware.EMULATION_ENV in str(e.value)
    with pytest.raises(RobfairError, match="fp32, bf16 or fp16"):
        hardware.check_precision("fp8", "cpu")
    monkeypatch.setenv(hardware.EMULATION_ENV, "1")
    assert hardware.check_precision("bf16", "cpu") == "bf16"
    monkeypatch.delenv(hardware.EMULATION_ENV)
    monkeypatch.setattr(hardware, "native_precisions", lambda d: {"fp32": True, "bf16": True, "fp16": True})
    assert hardware.check_precision("bf16", "cpu") == "bf16"


def test_cpu_detection_reads_the_flags(monkeypatch):
    monkeypatch.setattr(hardware.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert hardware.native_precisions("cpu") == {"fp32": True, "bf16": False, "fp16": False}
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16", "amx_bf16"}))
    assert hardware.native_precisions("cpu")["bf16"] and not hardware.native_precisions("cpu")["fp16"]
    line = hardware.describe("cpu")
    assert "torch CPU capability" in line and "bf16 native" in line and "fp16 emulated" in line
    monkeypatch.undo()
    assert isinstance(hardware.cpu_flags(), frozenset)  # the real reader works here


def test_trainer_refuses_emulated_bf16(monkeypatch, digits):
    from robfair.training import TrainConfig, train

    monkeypatch.delenv(hardware.EMULATION_ENV, raising=False)
    monkeypatch.setattr(hardware, "native_precisions", lambda d: {"fp32": True, "bf16": False, "fp16": False})
    cfg = TrainConfig(data="digits", model="mlp", model_kwargs={"hidden": [8]}, epochs=1, precision="bf16",
                      device="cpu", val_per_class=0, select="last")
    with pytest.raises(RobfairError, match="precision bf16 is not native"):
        train(cfg, train_data=digits.subset(torch.arange(64)))


def test_channels_last_default_is_on_for_conv_nets_only(digits):
    from robfair.models import create
    from robfair.training import TrainConfig
    from robfair.training.trainer import Trainer

    conv = create("smallcnn", 10, (1, 8, 8), width=4, hidden=16)
    mlp = create("mlp", 10, (1, 8, 8), hidden=[8])
    assert hardware.wants_channels_last(conv) and not hardware.wants_channels_last(mlp)
    assert not hardware.wants_channels_last(conv, False) and hardware.wants_channels_last(mlp, True)
    small = digits.subset(torch.arange(64))
    cfg = TrainConfig(data="digits", epochs=1, device="cpu", val_per_class=0, select="last")
    assert cfg.channels_last is None
    t = Trainer(conv, small, cfg=cfg)
    assert t.channels_last
    w = next(p for p in t.raw_model.parameters() if p.dim() == 4)
    assert w.is_contiguous(memory_format=torch.channels_last) and w.stride()[1] == 1  # exact, 1 input channel
    assert not Trainer(mlp, small, cfg=cfg).channels_last


@pytest.mark.parametrize("channels", [1, 3])
def test_channels_last_changes_no_prediction(channels):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 7 * 7, 10)).eval()
    x = torch.rand(300, channels, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = model(x).argmax(1)
    cl_model = copy.deepcopy(model).to(memory_format=torch.channels_last)
    xc = hardware.channels_last(x)
    assert xc.stride()[1] == 1 and torch.equal(xc, x)
    a = PGD(10).run(model, x, y, 0.03, generator=torch.Generator().manual_seed(0), early_exit=True)
    b = PGD(10).run(cl_model, xc, y, 0.03, generator=torch.Generator().manual_seed(0), early_exit=True)
    assert 0.1 < a.fooled.double().mean() < 0.95
    assert torch.equal(a.adv_pred, b.adv_pred) and torch.equal(a.fooled_step, b.fooled_step)
