"""scikit-learn's handwritten digits (8x8, 1797 images), embedded: no download, no path."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

from ..errors import DataError
from .dataset import Dataset, stratified_split
from .loading import register_dataset

TEST_FRACTION = 0.25
SPLIT_SEED = 0


@register_dataset("digits", help="scikit-learn handwritten digits, 8x8 grayscale, 10 classes (embedded)",
                  location="embedded in scikit-learn", formats="none (no files)", aliases=("sklearn-digits",))
def load_digits(root: Path | None, split: str) -> Dataset:
    """Digits as float32 (N, 1, 8, 8) in [0, 1] (pixel / 16). The split is fixed: 25% of every class
    is test, drawn with ``stratified_split(y, 0.25, seed=0)`` (numpy's frozen legacy RNG), so the
    train and test samples never change between versions."""
    if root is not None:
        raise DataError(f"digits is embedded in scikit-learn and takes no path (got {root}); use 'digits'")
    images, target = _read_embedded()
    x = (images.astype(np.float32) / 16.0)[:, None]
    y = target.astype(np.int64)
    train_idx, test_idx = stratified_split(y, TEST_FRACTION, SPLIT_SEED)
    idx = (train_idx if split == "train" else test_idx).numpy()
    return Dataset(x=x[idx], y=y[idx], classes=[str(c) for c in range(10)], name="digits")


def _read_embedded() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8), targets) from the CSV that ships inside scikit-learn, read without
    importing scikit-learn (its import, which pulls in scipy.stats, cost seconds of every CLI run);
    the same arrays as ``sklearn.datasets.load_digits()``, which is the fallback."""
    spec = importlib.util.find_spec("sklearn")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, "rt", encoding="ascii") as f:
                data = np.loadtxt(f, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    from sklearn.datasets import load_digits as _sk_load  # lazy: fallback only (import time: seconds)

    bunch = _sk_load()
    return bunch.images, bunch.target
