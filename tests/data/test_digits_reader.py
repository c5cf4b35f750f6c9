"""digits is read from the CSV inside scikit-learn without importing scikit-learn (start-up cost)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np


def test_embedded_reader_equals_sklearn_load_digits():
    from sklearn.datasets import load_digits

    from robfair.data.digits import _read_embedded

    images, target = _read_embedded()
    ref = load_digits()
    assert np.array_equal(images, ref.images) and np.array_equal(target, ref.target)
    assert [str(c) for c in ref.target_names] == [str(c) for c in range(10)]


def test_loading_digits_does_not_import_sklearn_or_scipy():
    code = ("import sys; from robfair.data import load_dataset; ds = load_dataset('digits', split='test'); "
            "print(len(ds), 'sklearn' in sys.modules, 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["451", "False", "False"]
