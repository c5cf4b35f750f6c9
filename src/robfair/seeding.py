"""Every seed robfair derives, and the generators built from them, in one place.

    seed_everything(0)                                   # python, numpy, torch: the global RNGs
    make_generator(device, derive_seed(0, "order", epoch, rank))   # one training stream
    batch_generator(device, 0, "pgd20", first_index)     # one audit batch of one attack

Three key schemes, each kept as it is because changing one changes every recorded result that
used it (and would break resuming a run started before the change):

- training (:func:`derive_seed`): ``SeedSequence([seed, purpose tag, epoch, rank])`` for the
  trainer's per-epoch streams (data order, augmentation, attack random starts, validation);
- audit (:func:`attack_seed`): SHA-256 of ``(seed, attack name, *extra)``, so an attack's stream
  never depends on its position in a list (:func:`batch_generator`: per batch, from the dataset
  index of its first sample; also sharded audits and sweeps);
- certification (:func:`noise_seed`): ``SeedSequence([seed, dataset index, pass])`` for the
  Gaussian noise draws of one sample.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np
import torch

#: the trainer's streams, one tag each (never renumber: the tag is part of the seed)
TRAIN_STREAMS = {"order": 1, "augment": 2, "attack": 3, "val": 4, "val-initial": 5}


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices): the global RNGs, e.g. a model's initial weights."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def make_generator(device: torch.device | str, seed: int) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed``."""
    return torch.Generator(device=device).manual_seed(int(seed))


# ----------------------------------------------------------------------------- training
def derive_seed(seed: int, purpose: str, epoch: int, rank: int = 0) -> int:
    """A 63-bit seed for one training stream (:data:`TRAIN_STREAMS`) of one epoch on one rank."""
    ss = np.random.SeedSequence([int(seed), TRAIN_STREAMS[purpose], int(epoch), int(rank)])
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


# ----------------------------------------------------------------------------- audit
def attack_seed(seed: int, name: str, *extra: Any) -> int:
    """A 63-bit seed from ``(seed, attack name, *extra)``: stable across runs, Python versions and
    the attack's position in a list."""
    key = "\x1f".join([str(int(seed)), str(name), *(repr(e) for e in extra)])
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & (2**63 - 1)


def attack_generator(device: torch.device, seed: int, name: str, *extra: Any) -> torch.Generator:
    return make_generator(device, attack_seed(seed, name, *extra))


def batch_generator(device: torch.device, seed: int, name: str, first_index: int,
                    radius: float | None = None, *, stage: str | None = None) -> torch.Generator:
    """The generator of one batch of one attack: seeded from ``(seed, name, [stage,] [radius,]
    first_index)``, ``first_index`` being the dataset index of the batch's first sample
    (``radius``: sweeps only; ``stage``: a stream of its own for a use other than the audit's
    attack, e.g. ``"bisection"`` for boundary distances)."""
    extra = (int(first_index),) if radius is None else (float(radius), int(first_index))
    return attack_generator(device, seed, name, *(() if stage is None else (str(stage),)), *extra)


# ----------------------------------------------------------------------------- certification
def noise_seed(seed: int, index: int, stage: int) -> int:
    """A well-mixed 63-bit generator seed for one (seed, dataset index, pass) of certification."""
    a, b = np.random.SeedSequence([int(seed), int(index), int(stage)]).generate_state(2, np.uint32)
    return (int(a) << 31) ^ int(b)
