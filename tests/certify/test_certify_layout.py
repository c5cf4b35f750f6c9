"""certify runs the model as the audit does (robfair.hardware's policy through audit.engine's
evaluation_model and autocast): channels_last for convolutional models with the same certificates
in fp32, bf16 / fp16 autocast only where asked (and native, or emulation allowed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from _shared import run_cli
from robfair import certifying as C
from robfair.data import Dataset
from robfair.errors import RobfairError


class Seen(nn.Module):
    """A small conv net that records each forward's memory layout and its convolution's dtype."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Sequential(nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
        self.layouts: list[bool] = []
        self.dtypes: list[torch.dtype] = []

    def forward(self, x):
        self.layouts.append(x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
        h = self.conv(x)
        self.dtypes.append(h.dtype)
        return self.head(h)


def _data(n=24):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 3, 6, 6, generator=g)
    with torch.no_grad():
        y = Seen()(x).argmax(1)
    return Dataset(x=x, y=y, classes=list("abcd"), name="t")


def _run(ds, **kw):
    model = Seen()
    rep = C.certify(model, ds, 0.25, n0=20, n=300, batch_size=64, device="cpu", **kw)
    return model, rep


def test_channels_last_by_default_for_a_conv_net_with_the_same_certificates_in_fp32():
    ds = _data()
    m_cl, cl = _run(ds)
    m_nchw, nchw = _run(ds, channels_last=False)
    assert all(m_cl.layouts) and not any(m_nchw.layouts)
    assert cl.meta["channels_last"] and not nchw.meta["channels_last"] and cl.meta["precision"] == "fp32"
    assert set(m_cl.dtypes) == {torch.float32}
    for k in ("selected", "n_top", "p_lower", "pred", "radius", "base_pred"):
        assert np.array_equal(getattr(cl, k), getattr(nchw, k)), k
    assert 0 < (cl.radius > 0).mean() < 1 and len(set(cl.n_top.tolist())) > 3  # the counts vary: a real check
    a, b = cl.to_json(bootstrap=50), nchw.to_json(bootstrap=50)
    assert {k: v for k, v in a.items() if k != "meta"} == {k: v for k, v in b.items() if k != "meta"}


def test_bf16_runs_every_forward_under_autocast_and_says_so(monkeypatch):
    monkeypatch.setenv("ROBFAIR_EMULATED_PRECISION", "1")  # the test runs on machines without native bf16 too
    model, rep = _run(_data(8), precision="bf16")
    assert set(model.dtypes) == {torch.bfloat16} and all(model.layouts)
    assert rep.meta["precision"] == "bf16" and rep.meta["forwards"] > 2


def test_a_precision_the_device_does_not_run_natively_is_refused(monkeypatch):
    monkeypatch.delenv("ROBFAIR_EMULATED_PRECISION", raising=False)
    monkeypatch.setattr("robfair.hardware.native_precisions", lambda dev: {"fp32": True, "bf16": False, "fp16": False})
    with pytest.raises(RobfairError, match="precision bf16 is not native"):
        _run(_data(4), precision="bf16")
    with pytest.raises(RobfairError, match="fp32, bf16 or fp16"):
        _run(_data(4), precision="int8")


def test_a_bf16_checkpoint_is_not_resumed_as_fp32(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBFAIR_EMULATED_PRECISION", "1")
    ds = _data(8)
    ck = tmp_path / "ck.npz"
    C.certify(Seen(), ds, 0.25, n0=10, n=50, batch_size=32, device="cpu", precision="bf16", checkpoint=ck)
    with pytest.raises(RobfairError, match="another model, data or settings"):
        C.certify(Seen(), ds, 0.25, n0=10, n=50, batch_size=32, device="cpu", checkpoint=ck)


def test_cli_certify_json_is_the_same_with_and_without_channels_last(tmp_path, capsys):
    from robfair.models import create, save_checkpoint

    torch.manual_seed(0)
    net = create("smallcnn", 10, (1, 8, 8))
    ckpt = tmp_path / "m.pt"
    save_checkpoint(ckpt, net, classes=[str(i) for i in range(10)])
    docs = []
    for flag in ("--channels-last", "--no-channels-last"):
        out = tmp_path / f"{flag.strip('-')}.json"
        code, _, err = run_cli(["certify", "--model", ckpt, "--data", "digits", "--per-class", "2", "--n0", "10",
                                "--n", "200", "--out", out, "--bootstrap", "20", flag], capsys)
        assert code == 0, err
        docs.append(json.loads(out.read_text()))
    a, b = docs
    assert a["meta"]["channels_last"] is True and b["meta"]["channels_last"] is False
    assert {k: v for k, v in a.items() if k != "meta"} == {k: v for k, v in b.items() if k != "meta"}


@pytest.mark.parametrize("precision,msg", [("int8", "--precision must be fp32, bf16 or fp16"),
                                           ("bf16", "--precision bf16 is not native")])
def test_cli_a_precision_it_cannot_run_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, precision, msg):
    monkeypatch.delenv("ROBFAIR_EMULATED_PRECISION", raising=False)
    monkeypatch.setattr("robfair.hardware.native_precisions", lambda dev: {"fp32": True, "bf16": False, "fp16": False})
    out = tmp_path / "o" / "certify.json"
    code, _, err = run_cli(["certify", "--model", "mlp", "--n", "10", "--out", out, "--precision", precision], capsys)
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not any(p.is_file() for p in tmp_path.rglob("*"))
