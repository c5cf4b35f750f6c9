"""SVHN cropped digits (Format 2) from ``train_32x32.mat`` / ``test_32x32.mat``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from .dataset import Dataset
from .loading import candidate_dirs, not_found, register_dataset

FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}


def read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(x uint8 (N, 3, 32, 32), y int64 (N,)) from one .mat file; label 10 (digit 0) becomes 0."""
    import scipy.io  # lazy: import time (scipy.io, ~0.3 s; only SVHN's .mat files need it)

    try:
        mat = scipy.io.loadmat(path, variable_names=["X", "y"])
    except NotImplementedError:  # MATLAB v7.3 (HDF5) files
        raise DataError(f"{path} is a MATLAB v7.3 file, not the SVHN Format 2 .mat; download "
                        f"{path.name} from the SVHN page again") from None
    except Exception as e:  # scipy raises ValueError, MatReadError, OSError, ... for corrupt files
        raise DataError(f"{path} is not a valid SVHN .mat file ({type(e).__name__}: {e}); re-download it") from None
    x, y = mat.get("X"), mat.get("y")
    if x is None or y is None:
        raise DataError(f"{path} has no 'X' and 'y' arrays; it is not an SVHN Format 2 file, re-download it")
    if x.ndim != 4 or x.shape[2] not in (1, 3) or x.dtype != np.uint8:
        raise DataError(f"{path}: X is {x.dtype} {x.shape}, expected uint8 (32, 32, 3, N); re-download it")
    y = np.asarray(y).reshape(-1).astype(np.int64)
    if y.size != x.shape[3]:
        raise DataError(f"{path}: {x.shape[3]} images but {y.size} labels; re-download it")
    return np.ascontiguousarray(x.transpose(3, 2, 0, 1)), np.where(y == 10, 0, y)


@register_dataset("svhn", help="SVHN house-number digits, 32x32 colour, 10 classes",
                  location="~/.robfair/data/svhn", formats=".mat (train_32x32.mat, test_32x32.mat)")
def load_svhn(root: Path | None, split: str) -> Dataset:
    """SVHN from PATH or PATH/svhn."""
    searched = candidate_dirs("svhn", root, ("svhn",))
    path = next((d / FILES[split] for d in searched if (d / FILES[split]).is_file()), None)
    if path is None:
        raise not_found("svhn", root, searched, f"{FILES['train']} and {FILES['test']}")
    x, y = read_svhn_mat(path)
    return Dataset(x=x, y=y, classes=[str(i) for i in range(10)], name="svhn")
