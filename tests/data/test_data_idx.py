"""MNIST / Fashion-MNIST idx files written by hand (struct + numpy), raw and gzipped."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from robfair.data import load_dataset
from robfair.data.idx import FASHION_CLASSES, read_idx
from robfair.errors import DataError

RNG = np.random.default_rng(0)
TRAIN_X = RNG.integers(0, 256, (6, 5, 4), dtype=np.uint8)  # non-square: catches H/W swaps
TRAIN_Y = np.array([3, 0, 9, 1, 1, 7], dtype=np.uint8)
TEST_X = RNG.integers(0, 256, (4, 5, 4), dtype=np.uint8)
TEST_Y = np.array([2, 2, 0, 8], dtype=np.uint8)


def idx_bytes(arr: np.ndarray, type_code: int = 0x08) -> bytes:
    header = bytes([0, 0, type_code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write(path: Path, data: bytes, gz: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def write_mnist(d: Path, gz: bool = False, sep: str = "-") -> Path:
    for prefix, x, y in (("train", TRAIN_X, TRAIN_Y), ("t10k", TEST_X, TEST_Y)):
        write(d / f"{prefix}-images{sep}idx3-ubyte", idx_bytes(x), gz)
        write(d / f"{prefix}-labels{sep}idx1-ubyte", idx_bytes(y), gz)
    return d


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_raw_and_gz(tmp_path, gz):
    write_mnist(tmp_path, gz)
    tr = load_dataset(f"mnist:{tmp_path}", split="train")
    te = load_dataset(f"mnist:{tmp_path}", split="test")
    assert tr.x.dtype == torch.uint8 and tr.x.shape == (6, 1, 5, 4)
    assert np.array_equal(tr.x[:, 0].numpy(), TRAIN_X) and tr.y.tolist() == TRAIN_Y.tolist()
    assert np.array_equal(te.x[:, 0].numpy(), TEST_X) and te.y.tolist() == TEST_Y.tolist()
    assert tr.y.dtype == torch.int64 and tr.classes == [str(i) for i in range(10)] and tr.name == "mnist"
    assert torch.allclose(te.images()[1, 0], torch.from_numpy(TEST_X[1]).float() / 255)


def test_fashion_names_and_alternate_layouts(tmp_path):
    write_mnist(tmp_path / "FashionMNIST" / "raw", gz=True)
    ds = load_dataset("fmnist", split="test", root=tmp_path)
    assert ds.classes == FASHION_CLASSES and ds.classes[0] == "T-shirt/top" and ds.classes[9] == "Ankle boot"
    assert ds.name == "fashion-mnist"
    write_mnist(tmp_path / "kaggle", sep=".")  # train-images.idx3-ubyte spelling
    assert len(load_dataset(f"mnist:{tmp_path / 'kaggle'}", split="train")) == 6
    write_mnist(tmp_path / "all" / "mnist" / "raw")  # PATH/<name>/raw
    assert len(load_dataset(f"mnist:{tmp_path / 'all'}")) == 4


def test_read_idx_other_dtypes(tmp_path):
    a = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    (tmp_path / "a").write_bytes(idx_bytes(a, 0x0C))
    out = read_idx(tmp_path / "a")
    assert out.dtype == np.int32 and np.array_equal(out, a)


def test_default_location_under_robfair_data(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBFAIR_DATA", str(tmp_path))
    write_mnist(tmp_path / "mnist")
    assert len(load_dataset("mnist")) == 4


# ------------------------------------------------------------------ bad input
def test_missing_path_names_it_and_the_files(tmp_path):
    with pytest.raises(DataError, match=r"nowhere does not exist.*t10k-images-idx3-ubyte"):
        load_dataset(f"mnist:{tmp_path / 'nowhere'}")
    with pytest.raises(DataError, match=r"no files found in .*train-labels-idx1-ubyte"):
        load_dataset(f"mnist:{tmp_path}")


def test_truncated_file(tmp_path):
    write_mnist(tmp_path)
    p = tmp_path / "t10k-images-idx3-ubyte"
    p.write_bytes(p.read_bytes()[:-7])
    with pytest.raises(DataError, match="truncated or corrupt, re-download"):
        load_dataset(f"mnist:{tmp_path}")
    p.write_bytes(p.read_bytes()[:9])
    with pytest.raises(DataError, match="truncated inside its header"):
        load_dataset(f"mnist:{tmp_path}")


def test_wrong_magic(tmp_path):
    write_mnist(tmp_path)
    p = tmp_path / "t10k-images-idx3-ubyte"
    p.write_bytes(b"\x1f\x8b\x08\x03" + p.read_bytes()[4:])
    with pytest.raises(DataError, match="is not an idx file"):
        load_dataset(f"mnist:{tmp_path}")


def test_swapped_image_and_label_files(tmp_path):
    write_mnist(tmp_path)
    imgs, lbls = tmp_path / "t10k-images-idx3-ubyte", tmp_path / "t10k-labels-idx1-ubyte"
    a, b = imgs.read_bytes(), lbls.read_bytes()
    imgs.write_bytes(b)
    lbls.write_bytes(a)
    with pytest.raises(DataError, match="not \\(N, H, W\\) uint8 images.*swapped"):
        load_dataset(f"mnist:{tmp_path}")


def test_corrupt_gzip(tmp_path):
    write_mnist(tmp_path, gz=True)
    p = tmp_path / "t10k-labels-idx1-ubyte.gz"
    p.write_bytes(p.read_bytes()[:-12])  # cut the stream
    with pytest.raises(DataError, match="could not be read.*re-download"):
        load_dataset(f"mnist:{tmp_path}")
    p.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="could not be read"):
        load_dataset(f"mnist:{tmp_path}")


def test_count_mismatch_and_label_out_of_range(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(TEST_Y[:3]))
    with pytest.raises(DataError, match="4 images but .* 3 labels"):
        load_dataset(f"mnist:{tmp_path}")
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.array([1, 2, 12, 0], np.uint8)))
    with pytest.raises(DataError, match=r"label 12 at sample 2 is outside \[0, 10\)"):
        load_dataset(f"mnist:{tmp_path}")


# ------------------------------------------------------------------ the real thing, when installed
REAL = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(not (REAL / "t10k-images-idx3-ubyte.gz").exists(), reason="dataset-fashion-mnist not installed")
def test_real_fashion_mnist_test_split(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBFAIR_DATA", str(tmp_path))  # empty: the Debian folder must be found by default
    ds = load_dataset("fashion-mnist", split="test")
    assert len(ds) == 10000 and ds.x.shape == (10000, 1, 28, 28) and ds.x.dtype == torch.uint8
    assert ds.class_counts().tolist() == [1000] * 10
    assert int(ds.y[0]) == 9  # the first test image is an ankle boot
    assert int(ds.x.max()) == 255 and int(ds.x.min()) == 0
