"""load_dataset specs, the registry listing, and the embedded digits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robfair.data import DATASETS, describe_datasets, load_dataset
from robfair.data.loading import parse_spec
from robfair.errors import DataError


def test_unknown_name_lists_the_names():
    with pytest.raises(DataError, match=r"unknown dataset 'cifar1O'.*did you mean 'cifar10'.*choose one of: .*digits"):
        load_dataset("cifar1O")


def test_bad_split_and_specs(tmp_path):
    with pytest.raises(DataError, match="split 'val' is not valid; use 'train' or 'test'"):
        load_dataset("digits", split="val")
    with pytest.raises(DataError, match="empty path"):
        load_dataset("mnist:")
    with pytest.raises(DataError, match="is empty"):
        load_dataset("  ")
    with pytest.raises(DataError, match="takes no path"):
        load_dataset(f"digits:{tmp_path}")
    with pytest.raises(DataError, match="path given twice"):
        load_dataset(f"npz:{tmp_path / 'a.npz'}", root=tmp_path / "b.npz")


def test_spec_parsing_expands_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_spec("CIFAR10:~/data") == ("CIFAR10", tmp_path / "data")
    assert parse_spec("digits") == ("digits", None)
    np.savez(tmp_path / "mine.npz", x=np.zeros((2, 1, 3, 3), np.uint8), y=np.array([0, 1]))
    ds = load_dataset("NPZ:~/mine.npz")
    assert len(ds) == 2 and ds.name == "mine"
    assert len(load_dataset("npz", root="~/mine.npz")) == 2


def test_describe_datasets_rows():
    rows = describe_datasets()
    names = [r.name for r in rows]
    assert names == sorted(names) == DATASETS.names()
    assert {"digits", "mnist", "fashion-mnist", "cifar10", "cifar100", "svhn", "imagefolder", "npz"} <= set(names)
    for r in rows:
        name, description, location, formats = r
        assert description and location and formats
    fm = next(r for r in rows if r.name == "fashion-mnist")
    assert "/usr/share/datasets/fashion-mnist" in fm.location


def test_aliases_resolve():
    assert DATASETS.canonical("FMNIST") == "fashion-mnist"
    assert DATASETS.canonical("cifar-10") == "cifar10"


# ------------------------------------------------------------------ digits (embedded)
SK_COUNTS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]  # sklearn digits per class


def test_digits_fixed_stratified_split():
    from sklearn.datasets import load_digits

    tr, te = load_dataset("digits", "train"), load_dataset("digits")
    assert tr.x.dtype == torch.float32 and tr.x.shape[1:] == (1, 8, 8) and tr.classes == [str(i) for i in range(10)]
    assert len(tr) + len(te) == 1797
    # 25% of each class, rounded half up: 44.5 -> 45, 45.5 -> 46, 44.25 -> 44, ...
    assert te.class_counts().tolist() == [int(np.floor(0.25 * n + 0.5)) for n in SK_COUNTS]
    assert (tr.class_counts() + te.class_counts()).tolist() == SK_COUNTS
    assert float(te.x.max()) == 1.0 and float(te.x.min()) == 0.0
    assert torch.equal(te.x * 16, torch.round(te.x * 16))  # pixel / 16
    # train + test is exactly sklearn's data (as a multiset of (image, label) rows)
    sk = load_digits()
    ref = np.concatenate([sk.images.reshape(-1, 64) / 16, sk.target[:, None]], 1)
    ours = np.concatenate([torch.cat([tr.x, te.x]).reshape(-1, 64).numpy(),
                           torch.cat([tr.y, te.y]).numpy()[:, None]], 1)
    assert np.allclose(ref[np.lexsort(ref.T[::-1])], ours[np.lexsort(ours.T[::-1])])
    # the same every time
    assert torch.equal(load_dataset("digits").x, te.x)


def test_digits_split_is_pinned():
    """Regression pin: the digits test split must never change between robfair versions."""
    from sklearn.datasets import load_digits

    from robfair.data import stratified_split

    sk = load_digits()
    _, test_idx = stratified_split(sk.target, 0.25, 0)
    assert test_idx[:8].tolist() == [3, 7, 13, 16, 19, 22, 26, 36] and int(test_idx.sum()) == 387855
    te = load_dataset("digits")
    assert np.array_equal(te.x[:, 0].numpy() * 16, sk.images[test_idx.numpy()])
