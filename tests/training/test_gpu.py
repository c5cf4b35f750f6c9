"""The accelerator paths (skipped without CUDA): data on the device, bf16 / fp16 autocast,
channels_last, on-device augmentation, EMA, and a resume that continues the run."""

import json

import pytest
import torch

from robfair.data import Dataset
from robfair.training import TrainConfig, train

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def cifar_like(n=2048, k=10, seed=0):
    """Random colour images whose class shifts one channel's brightness (learnable in a few epochs)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % k
    x = torch.randint(0, 128, (n, 3, 32, 32), generator=g, dtype=torch.uint8)
    x[:, 0] += (y * 12).to(torch.uint8)[:, None, None]
    return Dataset(x=x, y=y, classes=[f"c{i}" for i in range(k)], name="cifar-like")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cuda_fast_paths(tmp_path, precision):
    data = cifar_like()
    cfg = TrainConfig(model="preact-resnet18", method="trades", method_options={"beta": 1}, attack_options={"steps": 2},
                      eps="8/255", epochs=3, batch_size=256, lr=0.05, precision=precision, channels_last=True,
                      augment="crop-flip", ema=0.9, val_per_class=20, val_attack="pgd5", device="cuda",
                      out=str(tmp_path / "run"))
    result = train(cfg, train_data=data)
    assert next(result.model.parameters()).is_cuda
    recs = [json.loads(s) for s in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(recs) == 3 and all(r["val"]["summary"]["n"] == 200 for r in recs)
    assert recs[-1]["train"]["loss"] < recs[0]["train"]["loss"]
    assert all(torch.isfinite(v).all() for v in result.model.state_dict().values())
    more = train(cfg.model_copy(update={"epochs": 3, "resume": True}), train_data=data)  # nothing left to do
    assert len(more.history) == 3
