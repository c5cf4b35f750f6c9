"""Hardware decisions: reduced precision only where measured faster, channels_last by default for conv nets
(where measured faster; tests/conftest.py pins the probe's record: bf16 and channels_last faster, fp16 slower)."""

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


def pin_speedups(monkeypatch, **speedup):
    """The probe's record as if measured: ``speedup`` (ratios ÷ fp32) on the CPU."""
    rec = {"speedup": {"bf16": 1.5, "fp16": 0.5, "channels_last": 1.2, **speedup}, "cache_file": "/pinned.json",
           "threads": 1}
    monkeypatch.setattr(hardware, "measure_speedups", lambda device="cpu", **kw: rec)
    return rec


def test_precision_refused_where_measured_slower_and_allowed_where_faster(monkeypatch):
    monkeypatch.delenv(hardware.EMULATION_ENV, raising=False)
    pin_speedups(monkeypatch, bf16=0.43, fp16=None)
    assert hardware.check_precision("fp32", "cpu") == "fp32"
    for p in ("bf16", "fp16"):
        with pytest.raises(RobfairError, match=f"--precision {p} is not native here \\(measured.* use --precision fp32") as e:
            hardware.check_precision(p, "cpu")
        assert "\n" not in str(e.value) and hardware.EMULATION_ENV in str(e.value)
        assert ("measured 0.43x fp32's speed" if p == "bf16" else "measured: it does not run") in str(e.value)
    with pytest.raises(RobfairError, match="fp32, bf16 or fp16"):
        hardware.check_precision("fp8", "cpu")
    monkeypatch.setenv(hardware.EMULATION_ENV, "1")
    assert hardware.check_precision("bf16", "cpu") == "bf16"
    monkeypatch.delenv(hardware.EMULATION_ENV)
    pin_speedups(monkeypatch, bf16=1.01, fp16=2.0)
    assert hardware.check_precision("bf16", "cpu") == "bf16" and hardware.check_precision("fp16", "cpu") == "fp16"
    pin_speedups(monkeypatch, bf16=1.0)  # as fast is not faster
    with pytest.raises(RobfairError, match="measured 1.00x"):
        hardware.check_precision("bf16", "cpu")


def test_flags_are_reported_not_decisive(monkeypatch):
    pin_speedups(monkeypatch)
    monkeypatch.setattr(hardware.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert hardware.flag_precisions("cpu") == {"bf16": False, "fp16": False}
    # the pinned record says bf16 faster: the decision follows the measurement, not the missing flag
    assert hardware.native_precisions("cpu") == {"fp32": True, "bf16": True, "fp16": False}
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx512f", "avx512_fp16", "amx_fp16"}))
    assert hardware.flag_precisions("cpu")["fp16"]
    assert not hardware.native_precisions("cpu")["fp16"]  # avx512_fp16 alone no longer makes fp16 "native"
    line = hardware.describe("cpu")
    assert "torch CPU capability" in line and "flags: avx512f avx512_fp16 amx_fp16" in line
    assert "bf16 1.50x, fp16 0.50x, channels_last 1.20x" in line
    monkeypatch.undo()
    assert isinstance(hardware.cpu_flags(), frozenset)  # the real reader works here


def test_trainer_refuses_emulated_bf16(monkeypatch, digits):
    from robfair.training import TrainConfig, train

    monkeypatch.delenv(hardware.EMULATION_ENV, raising=False)
    pin_speedups(monkeypatch, bf16=0.07)
    cfg = TrainConfig(data="digits", model="mlp", model_kwargs={"hidden": [8]}, epochs=1, precision="bf16",
                      device="cpu", val_per_class=0, select="last")
    with pytest.raises(RobfairError, match="precision bf16 is not native here \\(measured 0.07x"):
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


def test_channels_last_default_follows_the_measurement(monkeypatch, caplog):
    from robfair.models import create

    conv = create("smallcnn", 10, (1, 8, 8), width=4, hidden=16)
    pin_speedups(monkeypatch, channels_last=0.8)
    monkeypatch.setattr(hardware, "_WARNED", set())
    assert not hardware.wants_channels_last(conv)  # slower here: NCHW by default
    with caplog.at_level("WARNING", logger="robfair.hardware"):
        assert hardware.wants_channels_last(conv, True) and hardware.wants_channels_last(conv, True)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "channels_last measured 0.80x NCHW's speed" in lines[0] and "\n" not in lines[0]
    assert not hardware.wants_channels_last(conv, False)
    pin_speedups(monkeypatch, channels_last=1.3)
    assert hardware.wants_channels_last(conv)


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
