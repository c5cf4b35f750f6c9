"""robfair.utils.to_jsonable: the one JSON sanitizer (strict: NaN -> null) and write_json's hook (non-strict)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from robfair.utils import to_jsonable, write_json


def test_to_jsonable_strict():
    obj = {1: np.int64(3), "a": (np.float32(0.5), float("nan"), np.inf), "b": np.array([[1, 2]]), "c": np.bool_(True),
           "p": Path("x/y"), "t": torch.tensor([1.5, 2.0], requires_grad=True), "s": "s", "n": None}
    out = to_jsonable(obj)
    assert out == {"1": 3, "a": [0.5, None, None], "b": [[1, 2]], "c": True, "p": "x/y", "t": [1.5, 2.0], "s": "s", "n": None}
    json.dumps(out, allow_nan=False)  # strict JSON
    assert type(out["1"]) is int and type(out["c"]) is bool


def test_to_jsonable_non_strict_keeps_nan_and_write_json(tmp_path):
    out = to_jsonable([np.float64("nan"), 1.0], strict=False)
    assert math.isnan(out[0]) and out[1] == 1.0
    write_json(tmp_path / "a.json", {"x": np.arange(3), "y": np.float32(2.5), "p": tmp_path})
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": [0, 1, 2], "y": 2.5, "p": str(tmp_path)}
    try:
        write_json(tmp_path / "b.json", {"x": object()})
    except TypeError as e:
        assert "not JSON serializable" in str(e)
    else:
        raise AssertionError("an object json cannot write must raise")
    assert not (tmp_path / "b.json").exists()
