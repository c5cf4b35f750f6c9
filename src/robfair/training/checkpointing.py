"""Training state that survives a crash: weights_only-loadable RNG states and state dicts.

``last.pt`` is a robfair checkpoint (``robfair.models.save_checkpoint``) whose ``extra["trainer"]``
holds the optimizer, scheduler, grad scaler, EMA and method state, the epoch and step counters, the
config, the best-epoch bookkeeping and every rank's RNG states. Everything is a tensor, number,
string, list or plain dict, so ``torch.load(weights_only=True)`` reads it.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def plain(obj: Any) -> Any:
    """Make a state dict weights_only-loadable: dict subclasses (Counter...) become dicts."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(v) for v in obj) if type(obj) in (list, tuple) else [plain(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    return obj


def rng_state() -> dict[str, Any]:
    """Global RNG states of torch (CPU and CUDA), numpy and python, as weights_only-loadable values."""
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, internal, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_initialized() else [],
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                  "cached": float(cached)},
        "python": {"version": int(version), "state": list(internal), "gauss": gauss},
    }


def set_rng_state(s: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (CUDA states only where CUDA is available)."""
    torch.set_rng_state(s["torch"])
    if s["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])
    n = s["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    p = s["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
