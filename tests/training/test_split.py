"""Validation splits cannot leak: a checkpoint records its split, a fine-tuning run (--init) reuses the
init run's split by default and refuses a split whose validation samples the init model trained on."""

import pytest
import torch

from robfair.data import stratified_split
from robfair.errors import ConfigError
from robfair.models import load_checkpoint
from robfair.training import TrainConfig, train

TINY = dict(data="digits", model="mlp", model_kwargs={"hidden": [16]}, eps=0.1, batch_size=512,
            val_per_class=10, val_attack="none", select="clean", device="cpu", lr=0.05)


def split_of(path):
    _, meta = load_checkpoint(path)
    return meta["extra"]["split"]


@pytest.fixture(scope="module")
def init_run(tmp_path_factory, digits):
    out = tmp_path_factory.mktemp("split") / "init"
    train(TrainConfig(**TINY, method="standard", epochs=1, seed=0, out=str(out)), train_data=digits)
    return out


def test_checkpoints_record_their_split(init_run, digits):
    want = stratified_split(digits.y, 10, 0)[1]
    for name in ("best.pt", "last.pt"):
        rec = split_of(init_run / "checkpoints" / name)
        assert (rec["data"], rec["n"], rec["seed"], rec["val_per_class"], rec["source"]) == \
            ("digits", len(digits), 0, 10, "seed")
        assert torch.equal(rec["val_indices"], want)


def test_fine_tuning_reuses_the_init_split_by_default(init_run, tmp_path, digits):
    init = init_run / "checkpoints" / "best.pt"
    own = stratified_split(digits.y, 10, 1)[1]
    init_val = split_of(init)["val_indices"]
    # with seed 1 a fresh split would validate on samples the init model trained on
    assert len(set(own.tolist()) - set(init_val.tolist())) > 0
    out = tmp_path / "ft"
    train(TrainConfig(**TINY, method="standard", epochs=1, seed=1, init=str(init), out=str(out)), train_data=digits)
    rec = split_of(out / "checkpoints" / "best.pt")
    assert torch.equal(rec["val_indices"], init_val) and rec["source"] == "init:seed" and rec["seed"] == 0


def test_a_leaking_split_is_refused_before_anything_is_written(init_run, tmp_path, digits):
    init = init_run / "checkpoints" / "best.pt"
    out = tmp_path / "leak"
    with pytest.raises(ConfigError, match=r"validation samples of this split .* were training samples of --init.*"
                                          r"val_split: init"):
        train(TrainConfig(**TINY, method="standard", epochs=1, seed=1, init=str(init), val_split="seed",
                          out=str(out)), train_data=digits)
    assert not out.exists()
    # the same seed and size draw the init run's own split: allowed
    ok = tmp_path / "same"
    train(TrainConfig(**TINY, method="standard", epochs=1, seed=0, init=str(init), val_split="seed", out=str(ok)),
          train_data=digits)
    assert torch.equal(split_of(ok / "checkpoints" / "last.pt")["val_indices"], split_of(init)["val_indices"])


def test_another_validation_size_is_refused_with_the_fix(init_run, tmp_path, digits):
    init = init_run / "checkpoints" / "best.pt"
    with pytest.raises(ConfigError, match="set val_per_class 10, or val_split: seed"):
        train(TrainConfig(**{**TINY, "val_per_class": 20}, method="standard", epochs=1, init=str(init),
                          out=str(tmp_path / "x")), train_data=digits)
