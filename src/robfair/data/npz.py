"""Your own arrays in a ``.npz`` file (``np.savez``).

Keys: ``x`` images (N, C, H, W), (N, H, W, C) or (N, H, W), uint8 0..255 or float in [0, 1];
``y`` integer labels; optional ``g`` integer group ids; optional ``classes`` / ``groups`` string
arrays (``np.array(names, dtype=str)``). A file with ``x``/``y`` serves both splits (``robfair train``
holds a stratified 20% of it out as the test split, see ``holdout``); a file with ``x_train``, ``y_train``, ``x_test``, ``y_test`` (and ``g_train``, ``g_test``) holds both splits.
PATH may also be a folder holding ``train.npz`` and ``test.npz``. Loaded with ``allow_pickle=False``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from .dataset import Dataset, channels_first as _channels_first, stratified_split
from .loading import DATASETS, option_float, option_int, parse_spec, register_dataset, split_options, with_options

LAYOUT = "keys x, y (optional g, classes, groups) or x_train, y_train, x_test, y_test"


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
def load_npz(root: Path | None, split: str, *, holdout: Any = None, split_seed: Any = 0) -> Dataset:
    """Arrays from ``PATH`` (a .npz file, or a folder with train.npz / test.npz).

    ``holdout``: for a file with a single ``x``/``y`` set, hold out that share (a fraction such as 0.2,
    or an integer count per class) as the test split, stratified and drawn with ``split_seed``; the
    train split is the rest. ``robfair train`` sets it (0.2) for such files so the test audit never
    runs on training data."""
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
        single = {"x", "y"} <= keys
        if single:
            kx, ky, kg = "x", "y", "g"
        elif {f"x_{split}", f"y_{split}"} <= keys:
            kx, ky, kg = f"x_{split}", f"y_{split}", f"g_{split}"
        else:
            raise DataError(f"{path} has keys {sorted(keys)}; expected {LAYOUT}")
        x = _channels_first(_array(npz, kx, path), path)
        y = _ids(_array(npz, ky, path), ky, path)
        if y.size == 0:
            raise DataError(f"{path}: '{ky}' holds no samples (0 labels); save the arrays of a non-empty split")
        g = _ids(_array(npz, kg, path), kg, path) if kg in keys else None
        classes = _names(npz, "classes", path)
        groups = _names(npz, "groups", path)
    if x.dtype.kind == "f":
        x = x.astype(np.float32, copy=False)
    elif x.dtype != np.uint8:
        raise DataError(f"{path}: '{kx}' has dtype {x.dtype}; store uint8 (0..255) or float in [0, 1]")
    if classes is None:
        classes = [str(i) for i in range(int(y.max()) + 1 if y.size else 0)]
    ds = Dataset(x=x, y=y, classes=classes, g=g, groups=groups,
                 name=path.stem if path == root else root.resolve().name)
    if holdout is None:
        return ds
    if not single:
        raise DataError(f"{path} already holds train and test arrays ({kx}); drop the holdout option")
    share = _holdout_value(holdout)
    seed = option_int(split_seed, "split_seed")
    tr, te = stratified_split(ds.y, share, seed, classes=ds.classes)
    return ds.subset(tr if split == "train" else te)


def _holdout_value(value: Any) -> int | float:
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        pass
    return option_float(text, "holdout", low=0.0, high=1.0)


def is_single_set(path: Path) -> bool:
    """True for a .npz file holding one ``x``/``y`` set (no train/test keys)."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {"x", "y"} <= set(npz.files)
    except Exception:
        return False


HOLDOUT = 0.2


def training_spec(spec: str) -> tuple[str, str | None]:
    """For ``robfair train``: a single-file npz spec gets ``holdout=0.2`` (seed ``split_seed``, default 0)
    so train and test differ; returns (spec, notice or None). Other specs come back unchanged."""
    try:
        name, path = parse_spec(spec)
        canonical = DATASETS.canonical(name)
    except Exception:
        return spec, None
    _, opts = split_options(spec)
    if canonical != "npz" or path is None or "holdout" in opts or not path.is_file() or not is_single_set(path):
        return spec, None
    seed = opts.get("split_seed", 0)
    notice = (f"{path} holds one set of arrays: training on a stratified {1 - HOLDOUT:.0%} of it and testing on the "
              f"held-out {HOLDOUT:.0%} (split_seed={seed}); set holdout=F,split_seed=S in --data, or store "
              "x_train/x_test, to choose")
    return with_options(spec, holdout=HOLDOUT, split_seed=seed), notice
