"""Robust accuracy as a function of the radius, per group, in one pass over the data.

    sweep = eps_sweep(model, dataset, attack="pgd20", eps_values=parse_eps_range("0:16/255:9"))
    sweep.curve()                 # eps x group table of robust accuracy (plus "all")
    sweep.frame()                 # long format: eps, group, n, rates with Wilson 95% _lo/_hi
    sweep.to_json()               # counts per eps: every GroupReport rebuilds exactly

How it saves work (each point is still an ordinary :class:`~robfair.metrics.GroupReport`):

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
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch

from .errors import AttackError, DataError
from .metrics import GroupReport
from .utils import parse_eps, resolve_device

log = logging.getLogger(__name__)

SCHEMA = "robfair.eps-sweep/1"
Progress = Callable[[str, int, int], None]


def parse_eps_range(text: str) -> list[float]:
    """``"0:16/255:9"`` -> 9 radii evenly spaced from 0 to 16/255 (both included).

    ``START:STOP:N``: fractions allowed, ``START <= STOP``, ``N >= 2`` (``N = 1`` only when
    START == STOP). Raises a one-line ``AttackError`` naming the fix."""
    parts = str(text).split(":")
    example = "write START:STOP:N, e.g. 0:16/255:9"
    if len(parts) != 3:
        raise AttackError(f"eps sweep {text!r} is not START:STOP:N; {example}")
    start = parse_eps(parts[0], "eps sweep start")
    stop = parse_eps(parts[1], "eps sweep stop")
    try:
        n = int(parts[2].strip())
    except ValueError:
        raise AttackError(f"eps sweep {text!r}: N = {parts[2]!r} is not an integer; {example}") from None
    if stop < start:
        raise AttackError(f"eps sweep {text!r}: stop {stop:g} is below start {start:g}; "
                          "write START:STOP:N with START <= STOP, e.g. 0:16/255:9")
    if n < 1 or (n == 1 and stop != start):
        raise AttackError(f"eps sweep {text!r}: N = {n} points cannot span [{start:g}, {stop:g}]; use N >= 2")
    return [float(v) for v in np.linspace(start, stop, n)]


def _check_eps_values(eps_values: Sequence[Any]) -> list[float]:
    if isinstance(eps_values, str):
        return parse_eps_range(eps_values)
    if not hasattr(eps_values, "__iter__"):
        raise AttackError(f"eps_values must be a list of radii, got {eps_values!r}; pass e.g. [0, 4/255, 8/255] "
                          "or '0:16/255:9'")
    values = [parse_eps(v, "eps sweep radius") for v in eps_values]
    if not values:
        raise AttackError("eps_values is empty; pass at least one radius, e.g. [0, 8/255]")
    if values != sorted(values):
        raise AttackError(f"eps_values {values} must be increasing; sort them (the sweep reuses smaller radii)")
    if len(set(values)) != len(values):
        raise AttackError(f"eps_values {values} lists a radius twice; list each radius once")
    return values


@dataclass
class EpsSweep:
    """One :class:`GroupReport` per radius (same attack, same data); ``eps`` increasing."""

    attack: str
    eps: list[float]
    reports: list[GroupReport]
    monotone: bool = True
    meta: dict[str, Any] = field(default_factory=dict)

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
            "eps": list(self.eps),
            "monotone": self.monotone,
            "meta": self.meta,
            "curve": {str(k): v for k, v in self.curve().to_dict(orient="list").items()},
            "reports": [r.to_json() for r in self.reports],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "EpsSweep":
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise DataError(f"not an eps sweep (schema {SCHEMA} expected); pass the dict written by EpsSweep.to_json()")
        return cls(attack=d["attack"], eps=[float(e) for e in d["eps"]],
                   reports=[GroupReport.from_json(r) for r in d["reports"]], monotone=bool(d.get("monotone", True)),
                   meta=dict(d.get("meta", {})))


def eps_sweep(
    model: torch.nn.Module,
    dataset: Any,
    attack: str | Any = "pgd20",
    eps_values: Sequence[Any] = (0.0, 2 / 255, 4 / 255, 8 / 255, 16 / 255),
    *,
    batch_size: int = 256,
    device: str | torch.device | None = "auto",
    seed: int = 0,
    monotone: bool = True,
    progress: Progress | None = None,
) -> EpsSweep:
    """Audit ``model`` on ``dataset`` under ``attack`` at every radius of ``eps_values`` (increasing;
    a ``"START:STOP:N"`` string works too).

    Returns an :class:`EpsSweep`: per radius a GroupReport (per group, class and cell, Wilson
    intervals). See the module docstring for what is shared and why skipping samples already fooled
    at a smaller radius is sound (``monotone=True``)."""
    from .attacks import get_attack
    from .audit import _check_model_output

    values = _check_eps_values(eps_values)
    if len(dataset) == 0:
        raise DataError("the dataset is empty; check the path and the split")
    dataset.validate()
    if isinstance(batch_size, bool) or int(batch_size) < 1:
        raise DataError(f"batch size must be >= 1, got {batch_size}")
    atk = get_attack(attack) if isinstance(attack, str) else attack
    name = attack if isinstance(attack, str) else getattr(atk, "name", type(atk).__name__)
    dev = resolve_device(device)
    was_training = model.training
    model.eval()
    model = model.to(dev)
    n, E = len(dataset), len(values)
    y_all = np.empty(n, dtype=np.int64)
    clean_all = np.empty(n, dtype=np.int64)
    adv_all = np.empty((E, n), dtype=np.int64)
    gens = [torch.Generator(device=dev).manual_seed(seed * 1000 + j) for j in range(E)]
    attacked = [0] * E
    t0 = time.perf_counter()
    pos, first = 0, True
    total = math.ceil(n / batch_size)
    try:
        for b, (x, y, _g) in enumerate(dataset.batches(int(batch_size), device=dev)):
            if first:
                _check_model_output(model, x, dataset.num_classes)
                first = False
            m = x.shape[0]
            with torch.no_grad():
                clean = model(x).argmax(1)
            witness = clean.clone()  # prediction under the smallest perturbation found so far
            fooled = clean != y  # robust errors so far (clean mistakes at every radius)
            for j, e in enumerate(values):
                if monotone:
                    active = (~fooled).nonzero().squeeze(1)
                else:
                    active = (clean == y).nonzero().squeeze(1)
                pred = witness if monotone else clean.clone()
                if e > 0 and active.numel():
                    x_adv = atk(model, x[active], y[active], e, generator=gens[j], early_exit=True)
                    with torch.no_grad():
                        p = model(x_adv).argmax(1)
                    attacked[j] += int(active.numel())
                    if monotone:
                        hit = p != y[active]
                        witness[active[hit]] = p[hit]
                        fooled[active[hit]] = True
                    else:
                        pred[active] = p
                adv_all[j, pos:pos + m] = pred.cpu().numpy()
            y_all[pos:pos + m] = y.cpu().numpy()
            clean_all[pos:pos + m] = clean.cpu().numpy()
            pos += m
            if progress is not None:
                progress(f"eps sweep ({name})", b + 1, total)
    finally:
        model.train(was_training)

    groups = dataset.g.cpu().numpy() if dataset.g is not None else None
    gnames = list(dataset.groups) if dataset.g is not None and dataset.groups is not None else None
    reports = [GroupReport.from_outcomes(y=y_all, clean_pred=clean_all, adv_pred=adv_all[j], groups=groups,
                                         class_names=list(dataset.classes), group_names=gnames, attack=name, eps=e)
               for j, e in enumerate(values)]
    meta = {"dataset": getattr(dataset, "name", ""), "n": n, "seed": seed, "batch_size": int(batch_size),
            "device": str(dev), "attacked_samples": attacked, "seconds": round(time.perf_counter() - t0, 3)}
    return EpsSweep(attack=name, eps=values, reports=reports, monotone=monotone, meta=meta)
