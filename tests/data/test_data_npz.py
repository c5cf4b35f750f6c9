"""User arrays in .npz files (np.savez)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robfair.data import load_dataset
from robfair.errors import DataError

RNG = np.random.default_rng(0)


def test_channels_last_uint8_with_groups_and_names(tmp_path):
    x = RNG.integers(0, 256, (4, 6, 5, 3), dtype=np.uint8)  # (N, H, W, C)
    y = np.array([0, 2, 1, 2])
    g = np.array([1, 0, 0, 1], dtype=np.int32)
    np.savez(tmp_path / "faces.npz", x=x, y=y, g=g, classes=np.array(["a", "b", "c"]),
             groups=np.array(["female", "male"]))
    ds = load_dataset(f"npz:{tmp_path / 'faces.npz'}")
    assert ds.x.shape == (4, 3, 6, 5) and ds.x.dtype == torch.uint8
    assert int(ds.x[1, 2, 3, 4]) == x[1, 3, 4, 2]
    assert ds.y.tolist() == [0, 2, 1, 2] and ds.g.tolist() == [1, 0, 0, 1] and ds.g.dtype == torch.int64
    assert ds.classes == ["a", "b", "c"] and ds.group_names == ["female", "male"] and ds.name == "faces"
    assert len(load_dataset(f"npz:{tmp_path / 'faces.npz'}", split="train")) == 4  # x/y serve both splits


def test_channels_first_float_and_grayscale(tmp_path):
    x = RNG.random((3, 3, 4, 4))  # float64 (N, C, H, W)
    np.savez(tmp_path / "f.npz", x=x, y=np.array([1, 0, 1]))
    ds = load_dataset(f"npz:{tmp_path / 'f.npz'}")
    assert ds.x.dtype == torch.float32 and ds.x.shape == (3, 3, 4, 4)
    assert torch.allclose(ds.x, torch.from_numpy(x).float())
    assert ds.classes == ["0", "1"] and ds.g is None
    np.savez(tmp_path / "gray.npz", x=RNG.random((2, 7, 7)).astype(np.float32), y=np.array([0, 0]))
    assert load_dataset(f"npz:{tmp_path / 'gray.npz'}").x.shape == (2, 1, 7, 7)
    # (N, H, W, 1) is channels-last; (N, 3, H, 3) is ambiguous and stays channels-first
    np.savez(tmp_path / "c1.npz", x=np.zeros((2, 5, 5, 1), np.uint8), y=np.array([0, 1]))
    assert load_dataset(f"npz:{tmp_path / 'c1.npz'}").x.shape == (2, 1, 5, 5)
    np.savez(tmp_path / "c3.npz", x=np.zeros((2, 3, 5, 3), np.uint8), y=np.array([0, 1]))
    assert load_dataset(f"npz:{tmp_path / 'c3.npz'}").x.shape == (2, 3, 5, 3)


def test_split_keys_and_folder(tmp_path):
    np.savez(tmp_path / "both.npz", x_train=np.zeros((5, 1, 2, 2), np.uint8), y_train=np.arange(5) % 2,
             g_train=np.zeros(5, np.int64), x_test=np.ones((2, 1, 2, 2), np.uint8), y_test=np.array([1, 0]))
    tr = load_dataset(f"npz:{tmp_path / 'both.npz'}", split="train")
    te = load_dataset(f"npz:{tmp_path / 'both.npz'}", split="test")
    assert len(tr) == 5 and tr.g is not None and len(te) == 2 and te.g is None
    assert int(te.x.sum()) == 8
    d = tmp_path / "folder"
    d.mkdir()
    np.savez(d / "train.npz", x=np.zeros((3, 1, 2, 2), np.uint8), y=np.array([0, 1, 2]))
    np.savez(d / "test.npz", x=np.zeros((1, 1, 2, 2), np.uint8), y=np.array([2]))
    assert len(load_dataset(f"npz:{d}", split="train")) == 3
    assert len(load_dataset(f"npz:{d}", split="test")) == 1 and load_dataset(f"npz:{d}").name == "folder"


@pytest.mark.parametrize("arrays, match", [
    (dict(x=np.full((2, 1, 2, 2), np.nan, np.float32), y=np.array([0, 1])), "NaN or inf"),
    (dict(x=np.full((2, 1, 2, 2), 255.0), y=np.array([0, 1])), r"outside \[0, 1\].*divide by 255"),
    (dict(x=np.zeros((2, 1, 2, 2), np.int64), y=np.array([0, 1])), "has dtype int64; store uint8"),
    (dict(x=np.zeros((2, 1, 2, 2), np.uint8), y=np.array([0.0, 1.0])), "1-D integer array"),
    (dict(x=np.zeros((2, 1, 2, 2), np.uint8), y=np.array([0, 3]), classes=np.array(["a", "b"])),
     r"label 3 at sample 1 is outside \[0, 2\)"),
    (dict(x=np.zeros((2, 1, 2, 2), np.uint8), y=np.array([0, 1]), g=np.array([0, 2]),
          groups=np.array(["p", "q"])), r"group id 2 at sample 1"),
    (dict(x=np.zeros((2, 1, 2, 2), np.uint8), y=np.array([0, 1, 1])), "2 images but 3 labels"),
    (dict(x=np.zeros((2, 4), np.uint8), y=np.array([0, 1])), r"store images as \(N, C, H, W\)"),
    (dict(x=np.zeros((2, 1, 2, 2), np.uint8), y=np.array([0, 1]), classes=np.array(["a", None], dtype=object)),
     "object array; save it as np.array"),
    (dict(images=np.zeros((2, 1, 2, 2), np.uint8), labels=np.array([0, 1])), r"has keys \['images', 'labels'\]"),
])
def test_bad_arrays(tmp_path, arrays, match):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=match):
        load_dataset(f"npz:{tmp_path / 'bad.npz'}")


def test_bad_files(tmp_path):
    with pytest.raises(DataError, match="npz needs a path"):
        load_dataset("npz")
    with pytest.raises(DataError, match="nope.npz does not exist"):
        load_dataset(f"npz:{tmp_path / 'nope.npz'}")
    (tmp_path / "junk.npz").write_bytes(b"this is not a zip archive")
    with pytest.raises(DataError, match="is not a valid .npz file"):
        load_dataset(f"npz:{tmp_path / 'junk.npz'}")
    np.save(tmp_path / "single.npy", np.zeros(3))
    with pytest.raises(DataError, match="single .npy array"):
        load_dataset(f"npz:{tmp_path / 'single.npy'}")
