"""Counts: the sufficient statistics add exactly and reject inconsistent tables."""

from __future__ import annotations

import numpy as np
import pytest

from robfair.errors import DataError
from robfair.metrics import Counts


def test_counts_add_and_categories():
    y = np.array([0, 0, 1, 1, 1])
    clean = np.array([0, 1, 1, 1, 0])
    adv = np.array([1, 0, 1, 0, 1])
    g = np.array([0, 1, 0, 1, 1])
    c = Counts.from_arrays(y, clean, adv, g, 2, 2)
    # group 0: (y0 c a-) (y1 c a) -> 10, 11 ; group 1: (y0 -c a) (y1 c -a) (y1 -c a) -> 01, 10, 01
    np.testing.assert_array_equal(c.categories(axis=1), [[1, 1, 0, 0], [0, 1, 2, 0]])
    np.testing.assert_array_equal(c.categories(axis=None), [1, 2, 2, 0])
    half = Counts.from_arrays(y[:2], clean[:2], adv[:2], g[:2], 2, 2) + Counts.from_arrays(y[2:], clean[2:], adv[2:], g[2:], 2, 2)
    assert half == c
    assert c + Counts.zeros(2, 2) == c
    with pytest.raises(DataError, match="shape"):
        c + Counts.zeros(3, 2)


def test_counts_are_read_only_and_validated():
    c = Counts.zeros(2, 3)
    with pytest.raises(ValueError):
        c.n[0, 0] = 1
    d = c.to_lists()
    d["clean"][0][0] = 1  # clean-correct without a sample
    with pytest.raises(DataError, match="inconsistent"):
        Counts.from_lists(d)
    with pytest.raises(DataError, match="lack"):
        Counts.from_lists({"n": [[0]]})
