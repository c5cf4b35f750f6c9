"""Per-sample outcomes of an evaluation and their files: :class:`Outcomes` (what :func:`robfair.auditing.
engine.evaluate` returns and every report is rebuilt from) and the sealed npz files it and the example
images are saved in (``outcomes.npz``, ``examples.npz``: a header with a schema and a digest of every array).

    out.report("pgd20")          # a GroupReport rebuilt from the per-sample outcomes
    out.robust()                 # per sample: robust under every attack
    out.save("outcomes.npz")     # atomic; Outcomes.load(path) restores it exactly, or refuses a changed file
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..errors import RobfairError
from ..metrics import GroupReport
from ..safeio import input_file
from ..runfolder import OUTCOMES_FILE, outcomes_path  # noqa: F401 - the audit's side files are the run folder's
from ..utils import atomic_path
from .checks import WORST_CASE

OUTCOMES_SCHEMA = "robfair.outcomes/1"
#: ``first_step`` of a sample the attack did not fool, and of a fooled sample whose step is unrecorded
NOT_FOOLED = -1


# ============================================================================ outcomes
@dataclass
class Outcomes:
    """Per-sample outcomes of one evaluation.

    ``index``: position of each sample in the dataset evaluated; ``y`` labels; ``group`` group ids
    (the labels when the dataset has no groups: ``has_groups`` False); ``clean_pred``. Per attack,
    ``adv_pred[name]`` and ``first_step[name]`` are ``(R, n)`` arrays, one row per radius of
    ``radii`` (one row for a single radius or a per-sample eps); ``first_step`` is the attack step
    at which the sample was first fooled (``-1``: not fooled, or not recorded by the attack).
    ``min_eps[key]``: per sample, the smallest radius found to fool it (``inf``: none) where an eps
    sweep (``"sweep:<attack>"``) or boundary distances (``"distance"``) ran.
    """

    index: np.ndarray
    y: np.ndarray
    group: np.ndarray
    clean_pred: np.ndarray
    adv_pred: dict[str, np.ndarray]
    first_step: dict[str, np.ndarray]
    class_names: list[str]
    group_names: list[str]
    has_groups: bool
    radii: list[float] | None = None  # None: per-sample eps
    eps: float | str | None = None  # the nominal radius (single-radius evaluations) or "per-sample"
    min_eps: dict[str, np.ndarray] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    #: per attack, the (n, C, H, W) adversarial inputs on the CPU (``evaluate(keep_adv=True)`` only; never saved)
    adv_inputs: dict[str, torch.Tensor] = field(default_factory=dict, repr=False, compare=False)

    @property
    def attacks(self) -> list[str]:
        return list(self.adv_pred)

    @property
    def n(self) -> int:
        return int(self.y.size)

    def _eps_at(self, r: int) -> float | str | None:
        if self.radii is not None and len(self.radii) > 1:
            return self.radii[r]
        return self.eps

    def worst_pred(self, r: int = 0, attacks: Sequence[str] | None = None) -> np.ndarray:
        """Worst case over ``attacks`` (default: all): a sample is robust only if no attack fooled it;
        its prediction is that of the first attack that fooled it (else the last attack's)."""
        names = list(attacks) if attacks is not None else self.attacks
        if not names:
            return self.clean_pred.copy()
        worst = self.adv_pred[names[-1]][r].copy()
        fooled = np.zeros(self.n, dtype=bool)
        for name in names:
            p = self.adv_pred[name][r]
            hit = (p != self.y) & ~fooled
            worst[hit] = p[hit]
            fooled |= hit
        return worst

    def robust(self, r: int = 0, attacks: Sequence[str] | None = None) -> np.ndarray:
        """(n,) bool: clean-correct and not fooled by any of ``attacks``."""
        return (self.clean_pred == self.y) & (self.worst_pred(r, attacks) == self.y)

    def report(self, attack: str, r: int = 0) -> GroupReport:
        """The GroupReport of ``attack`` (or ``"worst-case"``) at radius ``r``."""
        if attack == WORST_CASE:
            pred, name = self.worst_pred(r), WORST_CASE
        elif attack in self.adv_pred:
            pred, name = self.adv_pred[attack][r], attack
        else:
            raise RobfairError(f"these outcomes have no attack '{attack}'; they have: {', '.join(self.attacks)}")
        return GroupReport.from_outcomes(y=self.y, clean_pred=self.clean_pred, adv_pred=pred,
                                         groups=self.group if self.has_groups else None,
                                         class_names=self.class_names,
                                         group_names=self.group_names if self.has_groups else None,
                                         attack=name, eps=self._eps_at(r))

    def reports(self, r: int = 0) -> dict[str, GroupReport]:
        """Every attack's report at radius ``r``, plus the worst case with more than one attack."""
        out = {name: self.report(name, r) for name in self.attacks}
        if len(self.attacks) > 1:
            out[WORST_CASE] = self.report(WORST_CASE, r)
        return out

    def clean_report(self) -> GroupReport:
        """Clean accuracy only (adversarial = clean prediction)."""
        return GroupReport.from_outcomes(y=self.y, clean_pred=self.clean_pred, adv_pred=self.clean_pred,
                                         groups=self.group if self.has_groups else None,
                                         class_names=self.class_names,
                                         group_names=self.group_names if self.has_groups else None,
                                         attack="none", eps=self.eps)

    # -- combining ----------------------------------------------------------------------------
    def select(self, positions: np.ndarray) -> "Outcomes":
        """The outcomes of the samples at ``positions`` (positions in these outcomes, not dataset indices)."""
        p = np.asarray(positions, dtype=np.int64)
        return Outcomes(index=self.index[p], y=self.y[p], group=self.group[p], clean_pred=self.clean_pred[p],
                        adv_pred={k: v[:, p] for k, v in self.adv_pred.items()},
                        first_step={k: v[:, p] for k, v in self.first_step.items()},
                        class_names=self.class_names, group_names=self.group_names, has_groups=self.has_groups,
                        radii=self.radii, eps=self.eps, min_eps={k: v[p] for k, v in self.min_eps.items()},
                        meta=dict(self.meta))

    @classmethod
    def concat(cls, parts: Sequence["Outcomes"]) -> "Outcomes":
        """Outcomes of disjoint parts of the same evaluation, sorted by dataset index."""
        if not parts:
            raise RobfairError("no outcomes to concatenate")
        first = parts[0]
        for p in parts[1:]:
            if p.attacks != first.attacks or p.class_names != first.class_names or p.group_names != first.group_names:
                raise RobfairError("cannot join outcomes of different attacks or classes; evaluate every part alike")
        cat = lambda xs: np.concatenate(xs, axis=-1)  # noqa: E731
        index = cat([p.index for p in parts])
        order = np.argsort(index, kind="stable")
        if np.unique(index).size != index.size:
            raise RobfairError("the parts overlap (a dataset index appears twice); shard the data without padding")
        out = Outcomes(index=index, y=cat([p.y for p in parts]), group=cat([p.group for p in parts]),
                       clean_pred=cat([p.clean_pred for p in parts]),
                       adv_pred={k: cat([p.adv_pred[k] for p in parts]) for k in first.adv_pred},
                       first_step={k: cat([p.first_step[k] for p in parts]) for k in first.first_step},
                       class_names=first.class_names, group_names=first.group_names, has_groups=first.has_groups,
                       radii=first.radii, eps=first.eps,
                       min_eps={k: cat([p.min_eps[k] for p in parts]) for k in first.min_eps},
                       meta=dict(first.meta))
        return out.select(order)

    def data_fingerprint(self) -> dict[str, Any]:
        """What identifies the samples these outcomes are of, in their order: how many, and a hash of
        their dataset indices, labels and group ids (:func:`digest`). Two evaluations of the same
        samples have the same fingerprint; audit.json records it (``meta.fingerprint``)."""
        return {"n": self.n, "indices": digest(self.index), "labels": digest(self.y), "groups": digest(self.group)}

    def same_samples(self, other: "Outcomes") -> bool:
        """True when ``other`` covers exactly the same samples (indices, labels and groups)."""
        return (self.index.shape == other.index.shape and np.array_equal(self.index, other.index)
                and np.array_equal(self.y, other.y) and np.array_equal(self.group, other.group)
                and self.class_names == other.class_names and self.group_names == other.group_names)

    # -- file -----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write ``path`` (``.npz``, atomically: a killed write leaves the old file or none)."""
        attacks = self.attacks
        header = {"schema": OUTCOMES_SCHEMA, "attacks": attacks, "class_names": list(self.class_names),
                  "group_names": list(self.group_names), "has_groups": bool(self.has_groups),
                  "radii": self.radii, "eps": self.eps, "min_eps": list(self.min_eps), "meta": self.meta}
        arrays: dict[str, np.ndarray] = {"index": self.index, "y": self.y, "group": self.group,
                                         "clean_pred": self.clean_pred}
        for i, name in enumerate(attacks):
            arrays[f"adv_pred_{i}"] = self.adv_pred[name]
            arrays[f"first_step_{i}"] = self.first_step[name]
        for i, key in enumerate(self.min_eps):
            arrays[f"min_eps_{i}"] = self.min_eps[key]
        header["sha256"] = seal(arrays, header)  # a file changed after it was written is refused by load
        arrays["header"] = npz_header(header)
        return write_npz(path, arrays)

    @classmethod
    def load(cls, path: str | Path) -> "Outcomes":
        with read_npz(path, OUTCOMES_SCHEMA, "outcomes") as (header, z):
            attacks = header["attacks"]
            if "sha256" in header and seal({k: z[k] for k in z.files if k != "header"}, header) != header["sha256"]:
                raise RobfairError(f"{path} was changed after robfair wrote it (its arrays do not match the checksum "
                                   "it records); re-run the audit, or delete it to use audit.json alone")
            return cls(index=z["index"], y=z["y"], group=z["group"], clean_pred=z["clean_pred"],
                       adv_pred={a: z[f"adv_pred_{i}"] for i, a in enumerate(attacks)},
                       first_step={a: z[f"first_step_{i}"] for i, a in enumerate(attacks)},
                       class_names=list(header["class_names"]), group_names=list(header["group_names"]),
                       has_groups=bool(header["has_groups"]), radii=header.get("radii"), eps=header.get("eps"),
                       min_eps={k: z[f"min_eps_{i}"] for i, k in enumerate(header.get("min_eps", []))},
                       meta=dict(header.get("meta", {})))


# ============================================================================ npz files
def digest(a: np.ndarray) -> str:
    """A short hash (16 hex digits of SHA-256) of an integer array's values, in order."""
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<i8").tobytes()).hexdigest()[:16]


def seal(arrays: dict[str, np.ndarray], header: dict[str, Any]) -> str:
    """SHA-256 of a file's header (its JSON, less the seal itself) and every array (name, dtype, shape,
    bytes): recorded in the header, it tells a file edited outside robfair from the one written."""
    h = hashlib.sha256()
    plain = json.loads(json.dumps({k: v for k, v in header.items() if k != "sha256"}, default=str))
    h.update(json.dumps(plain, sort_keys=True).encode())
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def npz_header(header: dict[str, Any]) -> np.ndarray:
    """A JSON header as the uint8 array stored under ``"header"`` (no pickles in the file)."""
    return np.frombuffer(json.dumps(header, default=str).encode(), np.uint8)


def write_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` (with a ``"header"`` from :func:`npz_header`) to ``path``, compressed and
    atomically: a killed write leaves the old file or none."""
    path = Path(path)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buf.getvalue())
    return path


@contextlib.contextmanager
def read_npz(path: str | Path, schema: str, what: str = "file"):
    """``(header, arrays)`` of a file of :func:`write_npz` whose header has ``schema``; a missing,
    truncated or foreign file, one that is no regular file (a FIFO: never opened), or a missing array
    (read inside the block) is a one-line RobfairError."""
    path = Path(path)
    try:
        with np.load(input_file(path, what), allow_pickle=False) as z:
            header = json.loads(bytes(z["header"]).decode())
            if not isinstance(header, dict) or header.get("schema") != schema:
                raise ValueError("schema")
            yield header, z
    except FileNotFoundError:
        raise RobfairError(f"{path} is missing; write it with `robfair audit --out`") from None
    except IsADirectoryError:
        raise RobfairError(f"{what} {path} is a folder, not a file; remove it or re-run the audit") from None
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError, zipfile.BadZipFile):
        raise RobfairError(f"{path} is truncated or not a robfair file of schema {schema}; re-run the audit") from None
