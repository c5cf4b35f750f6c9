"""SVHN Format 2 .mat files written with scipy.io.savemat."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import torch

from robfair.data import load_dataset
from robfair.errors import DataError

RNG = np.random.default_rng(0)


def write_svhn(d, n=3, labels=(10, 1, 5), name="test_32x32.mat"):
    d.mkdir(parents=True, exist_ok=True)
    X = RNG.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
    scipy.io.savemat(d / name, {"X": X, "y": np.array(labels, dtype=np.uint8).reshape(-1, 1)})
    return X


def test_svhn_layout_and_label_ten_is_zero(tmp_path):
    X = write_svhn(tmp_path / "svhn")
    ds = load_dataset(f"svhn:{tmp_path}")  # PATH/svhn is searched too
    assert ds.x.shape == (3, 3, 32, 32) and ds.x.dtype == torch.uint8 and ds.name == "svhn"
    assert ds.y.tolist() == [0, 1, 5] and ds.classes == [str(i) for i in range(10)]
    # x[n, c, h, w] == X[h, w, c, n]
    assert int(ds.x[2, 1, 4, 7]) == X[4, 7, 1, 2]
    assert np.array_equal(ds.x.numpy(), X.transpose(3, 2, 0, 1))
    write_svhn(tmp_path, n=2, labels=(3, 10), name="train_32x32.mat")
    assert load_dataset(f"svhn:{tmp_path}", split="train").y.tolist() == [3, 0]


def test_svhn_bad_files(tmp_path):
    with pytest.raises(DataError, match=r"does not exist; it should hold train_32x32.mat and test_32x32.mat"):
        load_dataset(f"svhn:{tmp_path / 'nope'}")
    with pytest.raises(DataError, match="no files found"):
        load_dataset(f"svhn:{tmp_path}")
    (tmp_path / "test_32x32.mat").write_bytes(b"MATLAB 5.0 MAT-file" + bytes(50))
    with pytest.raises(DataError, match="not a valid SVHN .mat file.*re-download"):
        load_dataset(f"svhn:{tmp_path}")
    scipy.io.savemat(tmp_path / "test_32x32.mat", {"images": np.zeros((2, 2))})
    with pytest.raises(DataError, match="no 'X' and 'y'"):
        load_dataset(f"svhn:{tmp_path}")
    write_svhn(tmp_path, n=3, labels=(1, 2))
    with pytest.raises(DataError, match="3 images but 2 labels"):
        load_dataset(f"svhn:{tmp_path}")
    write_svhn(tmp_path, n=2, labels=(1, 11))
    with pytest.raises(DataError, match=r"label 11 at sample 1 is outside \[0, 10\)"):
        load_dataset(f"svhn:{tmp_path}")
