"""The TensorBoard callback: what it writes per epoch, and the error when tensorboard is missing."""

from __future__ import annotations

import sys

import pytest

from robfair.errors import ConfigError
from robfair.experiments.tracking import TensorBoardCallback, require_tensorboard


class Recorder:
    def __init__(self):
        self.scalars, self.flushed, self.closed = [], 0, False

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def flush(self):
        self.flushed += 1

    def close(self):
        self.closed = True


RECORD = {"epoch": 3, "lr": 0.05, "train": {"loss": 1.25, "acc": 0.5, "n": 100},
          "val": {"summary": {"n": 20, "clean_acc": 0.9, "rob_acc": 0.4, "worst_rob_acc": 0.1, "worst_group": "cat"},
                  "per_group": {"cat": {"n": 10, "clean_acc": 0.8, "rob_acc": 0.1},
                                "a dog/b": {"n": 10, "clean_acc": 1.0, "rob_acc": None}}}}


def test_scalars_per_epoch(tmp_path):
    rec = Recorder()
    cb = TensorBoardCallback(tmp_path, writer=rec)
    cb.on_epoch_end(2, RECORD)
    got = {t: (v, s) for t, v, s in rec.scalars}
    assert got["train/loss"] == (1.25, 3) and got["lr"] == (0.05, 3)
    assert got["val/rob_acc"] == (0.4, 3) and got["val/worst_rob_acc"] == (0.1, 3)
    assert got["val_class/rob_acc/cat"] == (0.1, 3) and got["val_class/clean_acc/a_dog_b"] == (1.0, 3)
    assert "val_class/rob_acc/a_dog_b" not in got and "val/worst_group" not in got  # None / text skipped
    assert rec.flushed == 1
    cb.on_train_end(None)
    assert rec.closed


def test_missing_tensorboard_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(ConfigError, match="tensorboard is not installed; pip install tensorboard") as e:
        require_tensorboard()
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError):
        TensorBoardCallback(tmp_path)
