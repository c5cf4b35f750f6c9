"""The resumable state of a certify run: a fingerprint of the model, data and settings, and the partial
results saved atomically as the run goes (a resumed run gives the same numbers)."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import DataError, RobfairError
from ..utils import atomic_path, input_file

log = logging.getLogger(__name__)

CHECKPOINT_SCHEMA = "robfair.certify-partial/1"


# ============================================================================== resumable state
def fingerprint(model: nn.Module, dataset, settings: dict[str, Any], positions: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(settings, sort_keys=True).encode())
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes() if v.dtype != torch.bfloat16
                 else v.detach().float().cpu().numpy().tobytes())
    h.update(dataset.y.cpu().numpy().tobytes())
    h.update(np.ascontiguousarray(dataset.x[:64].cpu().numpy()).tobytes())
    h.update(positions.tobytes())
    return h.hexdigest()


_STATE_KEYS = ("base_pred", "selected", "n_top", "p_lower", "pred", "radius")


def save_state(path: Path, fingerprint: str, done: np.ndarray, state: dict[str, np.ndarray]) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, schema=np.array(CHECKPOINT_SCHEMA), fingerprint=np.array(fingerprint), done=done, **state)


def load_state(path: Path, fingerprint: str, total: int) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    if not path.exists():
        return None
    try:
        with np.load(input_file(path, "certify checkpoint", error=DataError), allow_pickle=False) as z:
            if str(z["schema"]) != CHECKPOINT_SCHEMA:
                raise ValueError
            fp = str(z["fingerprint"])
            done = z["done"].astype(bool)
            state = {k: z[k].copy() for k in _STATE_KEYS}
    except (OSError, ValueError, KeyError):
        raise RobfairError(f"{path} is not a readable certify checkpoint; delete it to start over") from None
    if fp != fingerprint or done.shape != (total,):
        raise RobfairError(f"the checkpoint {path} was written for another model, data or settings; delete it "
                           "(or pass --restart) to start over, or rerun with the settings it was made with")
    return done, state
