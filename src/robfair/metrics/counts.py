"""Sufficient statistics of a robustness evaluation: integer counts per (group, class) cell.

Every metric robfair reports is a function of these counts, and counts add, so shards (batches,
DDP ranks, several seeds of the same model) merge exactly with ``+``.

Per cell, with ``c`` = clean prediction correct and ``a`` = prediction under attack correct:

- ``n``         samples
- ``clean``     c
- ``robust``    c and a
- ``repaired``  (not c) and a: the attack "fixed" a clean mistake. Kept only so that the FRL
                code's (clean acc - adv acc) boundary error can be reproduced on request.

plus the K x K confusion matrices (true class -> predicted class) for clean and adversarial inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError

__all__ = ["Counts", "CATEGORIES", "as_numpy"]

#: outcome categories of one sample, as (clean correct, adversarial correct)
CATEGORIES = ("11", "10", "01", "00")

_CELL_FIELDS = ("n", "clean", "robust", "repaired")
_CONF_FIELDS = ("confusion_clean", "confusion_adv")


def as_numpy(x: Any) -> np.ndarray:
    """A numpy view of a numpy array, torch tensor (any device) or sequence; torch is never imported."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
    return np.asarray(x)


@dataclass(frozen=True, eq=False)
class Counts:
    """Integer counts of one evaluation. Cell arrays have shape (G, K) (groups x classes)."""

    n: np.ndarray
    clean: np.ndarray
    robust: np.ndarray
    repaired: np.ndarray
    confusion_clean: np.ndarray
    confusion_adv: np.ndarray

    def __post_init__(self) -> None:
        for name in _CELL_FIELDS + _CONF_FIELDS:
            arr = np.array(getattr(self, name), dtype=np.int64)  # a private copy
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        self.validate()

    # ------------------------------------------------------------------ construction
    @classmethod
    def zeros(cls, num_groups: int, num_classes: int) -> Counts:
        cell = np.zeros((num_groups, num_classes), np.int64)
        conf = np.zeros((num_classes, num_classes), np.int64)
        return cls(cell, cell, cell, cell, conf, conf)

    @classmethod
    def from_arrays(
        cls, y: np.ndarray, clean_pred: np.ndarray, adv_pred: np.ndarray, groups: np.ndarray,
        num_groups: int, num_classes: int,
    ) -> Counts:
        """Count already-validated int arrays (labels in [0, K), groups in [0, G))."""
        G, K = num_groups, num_classes
        cell = groups.astype(np.int64) * K + y
        c = clean_pred == y
        a = adv_pred == y

        def per_cell(mask: np.ndarray | None) -> np.ndarray:
            idx = cell if mask is None else cell[mask]
            return np.bincount(idx, minlength=G * K).reshape(G, K)

        def confusion(pred: np.ndarray) -> np.ndarray:
            return np.bincount(y * K + pred, minlength=K * K).reshape(K, K)

        return cls(
            n=per_cell(None), clean=per_cell(c), robust=per_cell(c & a), repaired=per_cell(~c & a),
            confusion_clean=confusion(clean_pred), confusion_adv=confusion(adv_pred),
        )

    # ------------------------------------------------------------------ checks and algebra
    @property
    def shape(self) -> tuple[int, int]:
        """(G, K): number of groups and of classes."""
        return self.n.shape  # type: ignore[return-value]

    def validate(self) -> Counts:
        """Raise ``DataError`` unless the counts are consistent (shapes, signs, nesting, confusion sums)."""
        if self.n.ndim != 2:
            raise DataError(f"counts 'n' must be a (groups, classes) table, got shape {self.n.shape}; rebuild the report from outcomes")
        G, K = self.n.shape
        for name in _CELL_FIELDS:
            if getattr(self, name).shape != (G, K):
                raise DataError(f"counts '{name}' has shape {getattr(self, name).shape}, expected {(G, K)}; rebuild the report from outcomes")
        for name in _CONF_FIELDS:
            if getattr(self, name).shape != (K, K):
                raise DataError(f"counts '{name}' has shape {getattr(self, name).shape}, expected {(K, K)}; rebuild the report from outcomes")
        problems = [
            ("negative counts", any((getattr(self, f) < 0).any() for f in _CELL_FIELDS + _CONF_FIELDS)),
            ("clean > n", (self.clean > self.n).any()),
            ("robust > clean", (self.robust > self.clean).any()),
            ("repaired > n - clean", (self.repaired > self.n - self.clean).any()),
            ("confusion rows do not sum to the class counts",
             any((getattr(self, f).sum(1) != self.n.sum(0)).any() for f in _CONF_FIELDS)),
            ("confusion diagonal does not match the correct counts",
             (np.diag(self.confusion_clean) != self.clean.sum(0)).any()
             or (np.diag(self.confusion_adv) != (self.robust + self.repaired).sum(0)).any()),
        ]
        for what, bad in problems:
            if bad:
                raise DataError(f"inconsistent counts ({what}); rebuild the report from per-sample outcomes")
        return self

    def __add__(self, other: Counts) -> Counts:
        if not isinstance(other, Counts):
            return NotImplemented
        if self.shape != other.shape:
            raise DataError(f"cannot add counts of shape {self.shape} and {other.shape}; merge reports over the same groups and classes")
        return Counts(*(getattr(self, f) + getattr(other, f) for f in _CELL_FIELDS + _CONF_FIELDS))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Counts):
            return NotImplemented
        return all(np.array_equal(getattr(self, f), getattr(other, f)) for f in _CELL_FIELDS + _CONF_FIELDS)

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ views
    def summed(self, axis: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(n, clean, robust, repaired) summed over ``axis``: 1 -> per group, 0 -> per class,
        None -> overall scalars (as 0-d arrays)."""
        return tuple(getattr(self, f).sum(axis=axis) for f in _CELL_FIELDS)  # type: ignore[return-value]

    def categories(self, axis: int | None = 1) -> np.ndarray:
        """Counts of the outcome categories (clean, adv) = 11, 10, 01, 00 along a new last axis;
        summed over ``axis`` as in :meth:`summed` (default: per group, shape (G, 4))."""
        n, c, ca, ra = self.summed(axis)
        return np.stack([ca, c - ca, ra, n - c - ra], axis=-1)

    def to_lists(self) -> dict[str, list]:
        return {f: getattr(self, f).tolist() for f in _CELL_FIELDS + _CONF_FIELDS}

    @classmethod
    def from_lists(cls, d: dict[str, Any]) -> Counts:
        missing = [f for f in _CELL_FIELDS + _CONF_FIELDS if f not in d]
        if missing:
            raise DataError(f"report counts lack {', '.join(missing)}; pass a dict written by GroupReport.to_json()")
        try:
            arrays = [np.asarray(d[f], dtype=np.int64) for f in _CELL_FIELDS + _CONF_FIELDS]
        except (TypeError, ValueError):
            raise DataError("report counts are not integer tables; pass a dict written by GroupReport.to_json()") from None
        return cls(*arrays)
