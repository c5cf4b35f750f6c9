"""Robust accuracy as a function of the radius, per group, in one pass over the data.

    sweep = eps_sweep(model, dataset, attack="pgd20", eps_values=parse_eps_range("0:16/255:9"))
    sweep.curve()                 # eps x group table of robust accuracy (plus "all")
    sweep.frame()                 # long format: eps, group, n, rates with Wilson 95% _lo/_hi
    sweep.to_json()               # counts per eps: every GroupReport rebuilds exactly
    eps_sweep(model, dataset, ["fgsm", "pgd20"], ...).audits   # several attacks: an AuditReport per radius
    sweep.outcomes.min_eps["sweep:pgd20"]    # per sample, the smallest radius that fooled it

This is the one eps-sweep implementation (the CLI's ``--eps-sweep`` and a study's
``audit.eps_sweep`` both run it); the loop is :func:`robfair.auditing.engine.evaluate` with a list of
radii. How it saves work (each point is still an ordinary :class:`~robfair.metrics.GroupReport`):

- the clean forward pass is done once per batch and shared by every radius;
- clean mistakes are never attacked (they are robust errors at every radius: delta = 0 is in
  every ball);
- radii are processed in increasing order and, with ``monotone=True`` (the default), a sample
  fooled at a smaller radius is not attacked again: the perturbation that fooled it lies in every
  larger ball (||delta|| <= eps_1 <= eps_2), so it *is* an adversarial example at eps_2. This is
  sound for the worst case (robust error), and makes the curve monotone. It is not the same as
  independent audits at each radius: PGD at eps_2 run from scratch can miss a sample that PGD at
  eps_1 fooled (PGD is not monotone in eps), so the sweep's robust accuracy is never higher, and
  can be lower, than an independent audit's. ``monotone=False`` attacks every clean-correct sample
  at every radius (the independent audits, minus the shared clean pass);
- within one radius the attack uses ``early_exit`` (fooled samples leave the batch), and a batch
  whose samples are all fooled skips the remaining radii.

``adv_acc`` (accuracy on adversarial inputs regardless of clean correctness) counts clean mistakes
at delta = 0, since they are not attacked; robust accuracy, boundary and robust error are exact.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pandas as pd
import torch

from .. import __version__
from ..errors import AttackError, DataError
from ..attacks.radius import Sweep, parse_range
from ..metrics import GroupReport
from .checks import WORST_CASE
from .distributed import evaluate_sharded
from .audit_report import REPORTED, AuditReport

log = logging.getLogger(__name__)

SCHEMA = "robfair.eps-sweep/2"
_SCHEMA_V1 = "robfair.eps-sweep/1"
Progress = Callable[[str, int, int], None]


#: ``"0:16/255:9"`` -> 9 radii from 0 to 16/255 (:func:`robfair.attacks.radius.parse_range`, where every
#: sweep's radii are checked)
parse_eps_range = parse_range


@dataclass
class EpsSweep:
    """One :class:`GroupReport` per radius (``eps`` increasing) for the headline attack (the only
    attack, or the worst case over several); ``audits`` holds every attack's report per radius as an
    :class:`~robfair.auditing.AuditReport`, ``outcomes`` the per-sample outcomes (when computed here)."""

    attack: str
    eps: list[float]
    reports: list[GroupReport]
    monotone: bool = True
    meta: dict[str, Any] = field(default_factory=dict)
    audits: list[Any] = field(default_factory=list)
    outcomes: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.audits:
            self.audits = [AuditReport({r.attack or self.attack: r}) for r in self.reports]

    @property
    def attacks(self) -> list[str]:
        return self.audits[0].attacks if self.audits else [self.attack]

    def view(self, attack: str) -> "EpsSweep":
        """The sweep of one of its attacks (or ``"worst-case"``)."""
        reps = [a[attack] for a in self.audits]
        return EpsSweep(attack=attack, eps=list(self.eps), reports=reps, monotone=self.monotone, meta=dict(self.meta))

    def __getitem__(self, eps: float) -> GroupReport:
        for e, r in zip(self.eps, self.reports):
            if math.isclose(e, float(eps), rel_tol=1e-9, abs_tol=1e-12):
                return r
        raise DataError(f"this sweep has no radius {eps}; it has {[round(e, 6) for e in self.eps]}")

    def frame(self, by: str = "group") -> pd.DataFrame:
        """Long format: one row per (eps, group) (``by="class"`` / ``"cell"`` for classes or cells)
        with n and every rate with its Wilson 95% ``_lo``/``_hi``."""
        if by not in ("group", "class", "cell"):
            raise DataError(f"by={by!r} is not valid; use 'group', 'class' or 'cell'")
        frames = []
        for e, rep in zip(self.eps, self.reports):
            f = getattr(rep, f"by_{by}").reset_index()
            f.insert(0, "eps", e)
            frames.append(f)
        return pd.concat(frames, ignore_index=True)

    def curve(self, metric: str = "rob_acc", by: str = "group") -> pd.DataFrame:
        """``metric`` as an eps x group table, with an ``all`` column (every sample)."""
        f = self.frame(by)
        key = "group" if by == "group" else ("class" if by == "class" else ["group", "class"])
        table = f.pivot_table(index="eps", columns=key, values=metric, sort=False)
        table["all"] = [rep.overall[metric] for rep in self.reports]
        return table

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "attack": self.attack,
            "attacks": self.attacks,
            "eps": list(self.eps),
            "monotone": self.monotone,
            "meta": self.meta,
            "curve": {str(k): v for k, v in self.curve().to_dict(orient="list").items()},
            "reports": [r.to_json() for r in self.reports],
            "audits": [a.to_json(bootstrap=0) for a in self.audits] if len(self.attacks) > 1 else [],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "EpsSweep":
        """Reads this schema and version 1 (a single attack's reports, or the former sweep worker's
        list of audits)."""
        if not isinstance(d, dict) or d.get("schema") not in (SCHEMA, _SCHEMA_V1):
            raise DataError(f"not an eps sweep (schema {SCHEMA} expected); pass the dict written by EpsSweep.to_json()")
        reps = d["reports"]
        if reps and isinstance(reps[0], dict) and reps[0].get("schema") == "robfair.audit/1":  # former worker file
            audits = [AuditReport.from_json(r) for r in reps]
            return cls(attack=audits[0].main.attack, eps=[float(e) for e in d["eps"]], reports=[a.main for a in audits],
                       monotone=False, audits=audits)
        audits = [AuditReport.from_json(a) for a in d.get("audits") or []]
        return cls(attack=d["attack"], eps=[float(e) for e in d["eps"]],
                   reports=[GroupReport.from_json(r) for r in reps], monotone=bool(d.get("monotone", True)),
                   meta=dict(d.get("meta", {})), audits=audits)


def eps_sweep(
    model: torch.nn.Module,
    dataset: Any,
    attack: str | Any | Sequence[str | Any] = "pgd20",
    eps_values: Sequence[Any] = (0.0, 2 / 255, 4 / 255, 8 / 255, 16 / 255),
    *,
    batch_size: int = 256,
    device: str | torch.device | None = "auto",
    seed: int = 0,
    monotone: bool = True,
    precision: str = "fp32",
    channels_last: bool | None = None,
    early_exit: bool = True,
    progress: Progress | None = None,
    dist: Any = None,
) -> EpsSweep:
    """Audit ``model`` on ``dataset`` under ``attack`` (one, or a list: then the headline is the
    worst case over them) at every radius of ``eps_values`` (increasing; a ``"START:STOP:N"``
    string works too).

    Returns an :class:`EpsSweep`: per radius a GroupReport (per group, class and cell, Wilson
    intervals). See the module docstring for what is shared and why skipping samples already fooled
    at a smaller radius is sound (``monotone=True``). ``dist``: a joined process group's
    :class:`~robfair.distributed.DistInfo` (torchrun): the batches are spread over the
    ranks and every rank returns one process's sweep (:mod:`robfair.auditing.distributed`)."""
    values = Sweep.parse(eps_values)  # parsed once here (a Sweep from the CLI: taken as it is)
    if len(dataset) == 0:
        raise DataError("the dataset is empty; check the path and the split")
    dataset.validate()
    if isinstance(batch_size, bool) or int(batch_size) < 1:
        raise DataError(f"batch size must be >= 1, got {batch_size}")
    attacks = list(attack) if isinstance(attack, (list, tuple)) else [attack]
    if not attacks:
        raise AttackError("no attack given; pass e.g. attack='pgd20'")
    out = evaluate_sharded(model, dataset, attacks, values, dist=dist, batch_size=int(batch_size), device=device,
                           seed=seed, precision=precision, channels_last=channels_last, early_exit=early_exit,
                           monotone=monotone, progress=progress, stage=f"eps sweep ({', '.join(str(getattr(a, 'name', a)) for a in attacks)})")
    names = out.attacks
    audits = [AuditReport(out.reports(j), meta={"eps": e}) for j, e in enumerate(values)]
    headline = WORST_CASE if len(names) > 1 else names[0]
    meta = {"robfair_version": __version__, "dataset": getattr(dataset, "name", ""), "n": out.n, "attacks": names,
            "seed": seed, "batch_size": int(batch_size), "precision": precision,
            "channels_last": out.meta["channels_last"], "device": out.meta["device"],
            "attacked_samples": out.meta["attacked_samples"][names[0]] if len(names) == 1
            else out.meta["attacked_samples"], "seconds": out.meta["seconds"], "warnings": list(out.warnings)}
    for w in out.warnings:
        log.warning("%s", w, extra={REPORTED: True})
    return EpsSweep(attack=headline, eps=list(values), reports=[a[headline] for a in audits], monotone=monotone,
                    meta=meta, audits=audits, outcomes=out)
