"""MNIST and Fashion-MNIST from their idx files (raw or gzipped), parsed with numpy."""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from ..errors import DataError
from .dataset import Dataset
from .loading import candidate_dirs, not_found, register_dataset

# idx type codes -> big-endian numpy dtypes
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_PREFIX = {"train": "train", "test": "t10k"}

FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
EXPECTED = ("train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
            "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]")


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path} could not be read ({type(e).__name__}: {e}); re-download it") from None


def read_idx(path: Path) -> np.ndarray:
    """Parse one idx file: magic ``00 00 <type> <ndim>``, ``ndim`` big-endian uint32 sizes, data.

    Raises ``DataError`` when the magic is wrong or the data size does not match the header."""
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES or raw[3] == 0:
        raise DataError(f"{path} is not an idx file (magic {raw[:4].hex() or 'missing'}); re-download it")
    ndim, header = raw[3], 4 + 4 * raw[3]
    if len(raw) < header:
        raise DataError(f"{path} is truncated inside its header; re-download it")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    need = math.prod(dims) * dtype.itemsize
    if len(raw) - header != need:
        raise DataError(f"{path} holds {len(raw) - header} data bytes but its header {dims} needs {need}; "
                        "the file is truncated or corrupt, re-download it")
    return np.frombuffer(raw, dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def _find(d: Path, stem: str) -> Path | None:
    """``train-images-idx3-ubyte`` or the ``train-images.idx3-ubyte`` spelling, raw or gzipped."""
    for base in (stem, stem.replace("-idx", ".idx")):
        for name in (base, base + ".gz"):
            if (d / name).is_file():
                return d / name
    return None


def load_idx_split(name: str, root: Path | None, split: str, classes: list[str],
                   subdirs: tuple[str, ...] = (), system: tuple[str, ...] = ()) -> Dataset:
    """Read ``<prefix>-images-idx3-ubyte`` / ``<prefix>-labels-idx1-ubyte`` from the first folder
    that has both; images stay uint8 (N, 1, H, W)."""
    prefix = _PREFIX[split]
    searched = candidate_dirs(name, root, ("raw", name, f"{name}/raw", *subdirs), system)
    for d in searched:
        img_path = _find(d, f"{prefix}-images-idx3-ubyte")
        lbl_path = _find(d, f"{prefix}-labels-idx1-ubyte")
        if img_path and lbl_path:
            break
    else:
        raise not_found(name, root, searched, EXPECTED)
    images, labels = read_idx(img_path), read_idx(lbl_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise DataError(f"{img_path} holds {images.dtype} data of shape {images.shape}, not (N, H, W) uint8 images; "
                        "check that image and label files are not swapped, or re-download it")
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise DataError(f"{lbl_path} holds {labels.dtype} data of shape {labels.shape}, not (N,) uint8 labels; "
                        "check that image and label files are not swapped, or re-download it")
    if len(images) != len(labels):
        raise DataError(f"{img_path.name} has {len(images)} images but {lbl_path.name} has {len(labels)} labels; "
                        "re-download the pair")
    return Dataset(x=images[:, None], y=labels.astype(np.int64), classes=classes, name=name)


@register_dataset("mnist", help="MNIST handwritten digits, 28x28 grayscale, 10 classes",
                  location="~/.robfair/data/mnist", formats="idx (raw or .gz)")
def load_mnist(root: Path | None, split: str) -> Dataset:
    """MNIST from idx files in PATH (also PATH/raw, PATH/mnist, PATH/MNIST/raw)."""
    return load_idx_split("mnist", root, split, [str(i) for i in range(10)], subdirs=("MNIST/raw",))


@register_dataset("fashion-mnist", help="Fashion-MNIST clothing, 28x28 grayscale, 10 classes",
                  location="~/.robfair/data/fashion-mnist, /usr/share/datasets/fashion-mnist",
                  formats="idx (raw or .gz)", aliases=("fmnist", "fashion_mnist", "fashionmnist"))
def load_fashion_mnist(root: Path | None, split: str) -> Dataset:
    """Fashion-MNIST from idx files in PATH (also PATH/raw, PATH/fashion-mnist, PATH/FashionMNIST/raw); without PATH,
    also Debian's dataset-fashion-mnist package folder."""
    return load_idx_split("fashion-mnist", root, split, list(FASHION_CLASSES), subdirs=("FashionMNIST/raw",),
                          system=("/usr/share/datasets/fashion-mnist",))
