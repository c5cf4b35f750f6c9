"""Your own arrays in a ``.npz`` file (``np.savez``).

Keys: ``x`` images (N, C, H, W), (N, H, W, C) or (N, H, W), uint8 0..255 or float in [0, 1];
``y`` integer labels; optional ``g`` integer group ids; optional ``classes`` / ``groups`` string
arrays (``np.array(names, dtype=str)``). A file with ``x``/``y`` serves both splits; a file with
``x_train``, ``y_train``, ``x_test``, ``y_test`` (and ``g_train``, ``g_test``) holds both splits.
PATH may also be a folder holding ``train.npz`` and ``test.npz``. Loaded with ``allow_pickle=False``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..errors import DataError
from .base import Dataset
from .registry import register_dataset

LAYOUT = "keys x, y (optional g, classes, groups) or x_train, y_train, x_test, y_test"


def _channels_first(x: np.ndarray, path: Path) -> np.ndarray:
    if x.ndim == 3:
        return x[:, None]
    if x.ndim != 4:
        raise DataError(f"{path}: x has shape {x.shape}; store images as (N, C, H, W), (N, H, W, C) or (N, H, W)")
    if x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x


def _array(npz, key: str, path: Path, fix: str = "save numbers as a numeric array") -> np.ndarray:
    try:
        return npz[key]
    except ValueError:  # object arrays need pickle, which is refused
        raise DataError(f"{path}: '{key}' is an object array; {fix}") from None
    except (OSError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"{path}: '{key}' could not be read ({type(e).__name__}: {e}); write the file again") from None


def _names(npz, key: str, path: Path) -> list[str] | None:
    if key not in npz.files:
        return None
    a = _array(npz, key, path, fix="save it as np.array(names, dtype=str)")
    if a.dtype.kind not in "US" or a.ndim != 1:
        raise DataError(f"{path}: '{key}' is {a.dtype} {a.shape}, not a 1-D string array; "
                        "save it as np.array(names, dtype=str)")
    return [s.decode() if isinstance(s, bytes) else str(s) for s in a.tolist()]


def _ids(a: np.ndarray, key: str, path: Path) -> np.ndarray:
    if a.dtype.kind not in "iu" or a.ndim != 1:
        raise DataError(f"{path}: '{key}' is {a.dtype} {a.shape}; store a 1-D integer array")
    return a.astype(np.int64)


@register_dataset("npz", help="your arrays in a .npz file: x, y and optional group ids g",
                  location="PATH (required)", formats=".npz (np.savez)")
def load_npz(root: Path | None, split: str) -> Dataset:
    """Arrays from ``PATH`` (a .npz file, or a folder with train.npz / test.npz)."""
    if root is None:
        raise DataError(f"npz needs a path; write npz:PATH/file.npz with {LAYOUT}")
    path = root / f"{split}.npz" if root.is_dir() else root
    if not path.is_file():
        raise DataError(f"npz: {path} does not exist; pass a .npz file with {LAYOUT}")
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"{path} is not a valid .npz file ({type(e).__name__}: {e}); write it with np.savez") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise DataError(f"{path} is a single .npy array, not a .npz archive; save with np.savez(path, x=..., y=...)")
    with npz:
        keys = set(npz.files)
        if {"x", "y"} <= keys:
            kx, ky, kg = "x", "y", "g"
        elif {f"x_{split}", f"y_{split}"} <= keys:
            kx, ky, kg = f"x_{split}", f"y_{split}", f"g_{split}"
        else:
            raise DataError(f"{path} has keys {sorted(keys)}; expected {LAYOUT}")
        x = _channels_first(_array(npz, kx, path), path)
        y = _ids(_array(npz, ky, path), ky, path)
        g = _ids(_array(npz, kg, path), kg, path) if kg in keys else None
        classes = _names(npz, "classes", path)
        groups = _names(npz, "groups", path)
    if x.dtype.kind == "f":
        x = x.astype(np.float32, copy=False)
    elif x.dtype != np.uint8:
        raise DataError(f"{path}: '{kx}' has dtype {x.dtype}; store uint8 (0..255) or float in [0, 1]")
    if classes is None:
        classes = [str(i) for i in range(int(y.max()) + 1 if y.size else 0)]
    return Dataset(x=x, y=y, classes=classes, g=g, groups=groups,
                   name=path.stem if path == root else root.resolve().name)
