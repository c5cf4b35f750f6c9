"""scikit-learn's handwritten digits (8x8, 1797 images), embedded: no download, no path."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from .base import Dataset, stratified_split
from .registry import register_dataset

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
    from sklearn.datasets import load_digits as _sk_load

    bunch = _sk_load()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None]
    y = bunch.target.astype(np.int64)
    train_idx, test_idx = stratified_split(y, TEST_FRACTION, SPLIT_SEED)
    idx = (train_idx if split == "train" else test_idx).numpy()
    return Dataset(x=x[idx], y=y[idx], classes=[str(c) for c in bunch.target_names], name="digits")
