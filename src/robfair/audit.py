"""Run attacks over a dataset and turn the per-sample outcomes into per-group reports.

    report = robfair.audit(model, dataset, attacks=["fgsm", "pgd20"], eps=8/255)
    report.by_group            # the worst case over all attacks, one row per group
    report["pgd20"].by_class   # one attack
    report.to_frame()          # every attack, long format
    report.warnings            # sanity checks (gradient masking, broken attacks)

The clean forward pass is done once per batch and shared by every attack. With ``early_exit`` (the
default) an attack stops spending steps on samples it has already fooled; the outcome is the same.
"""

from __future__ import annotations

import logging
import math
import re
import sys
import time
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

import numpy as np
import pandas as pd
import torch

from . import __version__
from .errors import AttackError, DataError, ModelError, RobfairError
from .metrics import GroupReport
from .metrics.views import ReportViews
from .utils import parse_eps, resolve_device

if TYPE_CHECKING:
    from .data import Dataset

log = logging.getLogger(__name__)

WORST_CASE = "worst-case"
SCHEMA = "robfair.audit/1"

#: Progress callback: (stage, done, total). The CLI passes one that drives a rich progress bar.
Progress = Callable[[str, int, int], None]


@dataclass
class AuditReport(ReportViews):
    """Per-attack :class:`~robfair.metrics.GroupReport` objects plus the worst case over attacks.

    ``reports`` maps an attack name to its report; with more than one attack it also holds
    ``"worst-case"`` (a sample counts as robust only if every attack failed on it)."""

    reports: dict[str, GroupReport]
    warnings: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    # -- access -------------------------------------------------------------------------------
    @property
    def attacks(self) -> list[str]:
        return [a for a in self.reports if a != WORST_CASE]

    @property
    def main(self) -> GroupReport:
        """The headline report: the worst case over attacks (or the only attack)."""
        return self.reports.get(WORST_CASE) or self.reports[self.attacks[-1]]

    def __getitem__(self, attack: str) -> GroupReport:
        try:
            return self.reports[attack]
        except KeyError:
            raise RobfairError(f"this audit has no attack '{attack}'; it has: {', '.join(self.reports)}") from None

    @property
    def by_group(self) -> pd.DataFrame:
        return self.main.by_group

    @property
    def by_class(self) -> pd.DataFrame:
        return self.main.by_class

    def aggregates(self, k: int = 3) -> dict:
        return self.main.aggregates(k=k)

    # -- export -------------------------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        """One row per (attack, group): n, clean/robust accuracy, std/bndy/rob error with intervals."""
        return pd.concat([rep.to_frame() for rep in self.reports.values()])

    def to_json(self, bootstrap: int = 1000, seed: int = 0) -> dict:
        """Plain JSON (schema ``robfair.audit/1``, see docs/audit-json.md). ``bootstrap`` resamples give
        intervals for worst and gap in each report (0: none); :meth:`from_json` needs only the counts."""
        return {
            "schema": SCHEMA,
            "meta": self.meta,
            "warnings": list(self.warnings),
            "reports": {name: rep.to_json(bootstrap=bootstrap, seed=seed) for name, rep in self.reports.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> "AuditReport":
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise RobfairError(f"not a robfair audit (schema {SCHEMA} expected); write one with `robfair audit --out`")
        return cls(
            reports={k: GroupReport.from_json(v) for k, v in d["reports"].items()},
            warnings=list(d.get("warnings", [])),
            meta=dict(d.get("meta", {})),
        )

    def merge(self, other: "AuditReport") -> "AuditReport":
        """Merge audits of disjoint shards of the same data (same attacks, same eps) exactly."""
        if set(self.reports) != set(other.reports):
            raise RobfairError("cannot merge audits with different attacks; audit every shard with the same --attack list")
        merged = {k: self.reports[k].merge(other.reports[k]) for k in self.reports}
        out = AuditReport(merged, meta={**self.meta, "n": self.meta.get("n", 0) + other.meta.get("n", 0)})
        out.warnings = sanity_warnings(out.reports)
        return out


# ---------------------------------------------------------------------------------------------
def _attack_strength(name: str) -> tuple[int, int, str] | None:
    """A partial order on attack names: (family, budget, loss); ``None`` if not comparable
    (another threat model such as L2, or a targeted attack)."""
    n = name.lower()
    if n.startswith("autoattack"):
        return (3, 0, "*")
    if n in ("fgsm", "rs-fgsm"):
        return (1, 1, "*")
    m = re.fullmatch(r"pgd(\d+)((?:-[a-z0-9]+)*)", n)
    if not m:
        return None
    tokens = [t for t in m.group(2).split("-") if t]
    if "l2" in tokens or "t" in tokens:
        return None
    restarts = next((int(t[1:]) for t in tokens if re.fullmatch(r"r\d+", t)), 1)
    return (2, int(m.group(1)) * restarts, "cw" if "cw" in tokens else "ce")


def _stronger(strong: tuple[int, int, str], weak: tuple[int, int, str]) -> bool:
    if strong[0] != weak[0]:
        return strong[0] > weak[0]
    return strong[2] == weak[2] and strong[1] > weak[1]


def sanity_warnings(reports: dict[str, GroupReport]) -> list[str]:
    """Checks an audit should pass; each failure is a warning a person must read.

    - robust accuracy <= clean accuracy for every group (a clean mistake is always a robust error);
    - adversarial accuracy above clean accuracy: the attack repairs more than it breaks;
    - a stronger attack (more PGD steps/restarts, AutoAttack) finding fewer errors than a weaker one,
      or FGSM beating PGD: typical of gradient masking/obfuscation."""
    out: list[str] = []
    for name, rep in reports.items():
        bg = rep.by_group
        bad = bg.index[bg["rob_acc"] > bg["clean_acc"] + 1e-12].tolist()
        if bad:
            out.append(f"[{name}] robust accuracy exceeds clean accuracy for {bad}: the report is inconsistent (bug)")
        if name == WORST_CASE:
            continue
        adv = rep.overall.get("adv_acc")
        clean = rep.overall.get("clean_acc")
        if adv is not None and clean is not None and adv > clean + 1e-12:
            out.append(
                f"[{name}] accuracy on adversarial inputs ({adv:.4f}) is above clean accuracy ({clean:.4f}): "
                "the attack repairs more mistakes than it makes; check the attack and the epsilon"
            )
    names = [n for n in reports if n != WORST_CASE]
    for weak in names:
        for strong in names:
            sw, ss = _attack_strength(weak), _attack_strength(strong)
            if sw is None or ss is None or not _stronger(ss, sw):
                continue
            ew = reports[weak].overall["rob_err"]
            es = reports[strong].overall["rob_err"]
            if es < ew - 1e-12:
                kind = "FGSM beats PGD" if weak in ("fgsm", "rs-fgsm") else "a stronger attack finds fewer errors"
                out.append(
                    f"possible gradient masking: {kind} ({weak}: robust error {ew:.4f} > {strong}: {es:.4f}); "
                    "evaluate with autoattack and more restarts before trusting these numbers"
                )
    return out


# ---------------------------------------------------------------------------------------------
def _as_eps(eps: Any, n: int) -> float | torch.Tensor:
    if isinstance(eps, torch.Tensor):
        if eps.ndim == 0:
            return parse_eps(float(eps))
        if eps.ndim != 1 or eps.numel() != n:
            raise AttackError(f"a per-sample epsilon needs one value per sample ({n}), got shape {tuple(eps.shape)}")
        if not torch.isfinite(eps).all() or (eps < 0).any():
            raise AttackError("per-sample epsilon has negative or non-finite values; pass values >= 0")
        return eps.detach().float().cpu()
    if isinstance(eps, np.ndarray):
        return _as_eps(torch.as_tensor(eps), n)
    return parse_eps(eps)


def _check_model_output(model: torch.nn.Module, x: torch.Tensor, num_classes: int) -> None:
    spec = getattr(model, "robfair_spec", None)
    if spec:
        from .models import check_model_data

        check_model_data(model, tuple(x.shape[1:]), num_classes)
        return
    try:
        with torch.no_grad():
            out = model(x[:2])
    except RuntimeError as e:
        raise ModelError(
            f"the model failed on images of shape {tuple(x.shape[1:])} ({str(e).splitlines()[0][:120]}); "
            "pick the dataset the model was trained for"
        ) from None
    if out.ndim != 2 or out.shape[1] != num_classes:
        raise ModelError(
            f"the model outputs {tuple(out.shape[1:])} logits but the dataset has {num_classes} classes; "
            "pick the matching dataset or model"
        )


#: what ``audit()`` takes as data (see :func:`robfair.data.as_dataset`)
DataLike = Union["Dataset", tuple, list, "torch.utils.data.Dataset", "torch.utils.data.DataLoader"]


def audit(
    model: torch.nn.Module,
    dataset: DataLike,
    attacks: Sequence[str | Any] = ("pgd20",),
    eps: float | str | torch.Tensor = 8 / 255,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = "auto",
    early_exit: bool = True,
    seed: int = 0,
    precision: str = "fp32",
    channels_last: bool = False,
    progress: Progress | None = None,
    mean: Sequence[float] | float | str | None = None,
    std: Sequence[float] | float | str | None = None,
    classes: Sequence[str] | None = None,
) -> AuditReport:
    """Audit ``model`` on ``dataset`` under each attack, per group (the classes unless the dataset has groups).

    Parameters
    ----------
    model: a module mapping images in [0, 1] to logits.
    dataset: a :class:`robfair.data.Dataset`, ``(x, y)`` / ``(x, y, g)`` tensors or numpy arrays, a
        ``TensorDataset`` or a ``DataLoader`` (:func:`robfair.data.as_dataset`).
    attacks: names understood by :func:`robfair.attacks.get_attack` (``"fgsm"``, ``"pgd20"``,
        ``"pgd20-l2"``, ``"pgd50-r5"``, ``"autoattack"`` ...) or attack objects.
    eps: a radius (``0.1``, ``"8/255"``) or a per-sample tensor with one value per dataset item.
    early_exit: stop attacking samples already fooled (same outcome, less work).
    seed: seeds the attacks' random starts; the audit is deterministic for a fixed batch size.
    precision: ``"fp32"`` (default), ``"bf16"`` or ``"fp16"`` autocast inside the attack and forward.
    channels_last: run the model in channels-last memory format (faster convolutions).
    mean, std: the model expects normalized inputs: it is wrapped as ``Normalized(model, mean, std)``
        (per-channel values, or a preset ``"cifar10"``, ``"cifar100"``, ``"imagenet"``).
    classes: the model's class names in output order; the dataset's labels are re-indexed to it by
        name. Without it, class names stored with the model (``load_any``) must equal the dataset's.
    """
    from .attacks import get_attack
    from .data.coerce import audit_inputs

    model, dataset = audit_inputs(model, dataset, mean=mean, std=std, classes=classes)
    if batch_size < 1:
        raise RobfairError(f"batch size must be >= 1, got {batch_size}")
    if not attacks:
        raise AttackError("no attack given; pass e.g. attacks=['pgd20'] (CLI: --attack pgd20)")
    dev = resolve_device(device)
    eps_v = _as_eps(eps, len(dataset))
    atk_objs = []
    names: list[str] = []
    for a in attacks:
        obj = get_attack(a) if isinstance(a, str) else a
        name = a if isinstance(a, str) else getattr(obj, "name", type(obj).__name__)
        if name in names or name == WORST_CASE:
            raise AttackError(f"attack '{name}' is listed twice; list each attack once")
        if precision != "fp32" and hasattr(obj, "precision"):
            obj.precision = precision
        atk_objs.append(obj)
        names.append(name)

    was_training = model.training
    model.eval()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model = model.to(dev)

    K = dataset.num_classes
    n = len(dataset)
    y_all = np.empty(n, dtype=np.int64)
    clean_all = np.empty(n, dtype=np.int64)
    adv_all = {name: np.empty(n, dtype=np.int64) for name in names}
    gens = [torch.Generator(device=dev).manual_seed(seed * 1000 + i) for i in range(len(names))]
    _autocast(dev, precision)  # validate early

    t0 = time.perf_counter()
    timings = {name: 0.0 for name in names}
    first = True
    pos = 0
    total_batches = math.ceil(n / batch_size)
    for b, (x, y, _g) in enumerate(dataset.batches(batch_size, device=dev)):
        if channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        if first:
            if not torch.isfinite(x).all():
                raise DataError("the dataset holds NaN or infinite pixels; clean the data first")
            _check_model_output(model, x, K)
            first = False
        m = x.shape[0]
        with torch.no_grad(), _autocast(dev, precision):
            clean_pred = model(x).argmax(1)
        eps_b = eps_v if isinstance(eps_v, float) else eps_v[pos : pos + m].to(dev)
        y_all[pos : pos + m] = y.cpu().numpy()
        clean_all[pos : pos + m] = clean_pred.cpu().numpy()
        for i, (name, atk) in enumerate(zip(names, atk_objs)):
            ta = time.perf_counter()
            x_adv = atk(model, x, y, eps_b, generator=gens[i], early_exit=early_exit)
            with torch.no_grad(), _autocast(dev, precision):
                adv_pred = model(x_adv).argmax(1)
            adv_all[name][pos : pos + m] = adv_pred.cpu().numpy()
            timings[name] += time.perf_counter() - ta
        pos += m
        if progress is not None:
            progress("audit", b + 1, total_batches)
    model.train(was_training)

    groups = dataset.g.numpy() if dataset.g is not None else None
    eps_meta: float | str = eps_v if isinstance(eps_v, float) else "per-sample"
    common = dict(y=y_all, clean_pred=clean_all, groups=groups, class_names=list(dataset.classes),
                  group_names=list(dataset.groups) if dataset.groups is not None else None, eps=eps_meta)
    reports: dict[str, GroupReport] = {}
    for name in names:
        reports[name] = GroupReport.from_outcomes(adv_pred=adv_all[name], attack=name, **common)
    if len(names) > 1:
        # A sample is robust only if no attack fooled it; its adversarial prediction is that of the
        # first attack that fooled it (else the last attack's).
        worst = adv_all[names[-1]].copy()
        fooled = np.zeros(n, dtype=bool)
        for name in names:
            hit = (adv_all[name] != y_all) & ~fooled
            worst[hit] = adv_all[name][hit]
            fooled |= hit
        reports[WORST_CASE] = GroupReport.from_outcomes(adv_pred=worst, attack=WORST_CASE, **common)

    meta = {
        "robfair_version": __version__,
        "torch_version": torch.__version__,
        "dataset": getattr(dataset, "name", ""),
        "n": n,
        "num_classes": K,
        "classes": list(dataset.classes),
        "groups": list(dataset.group_names),
        "model": getattr(model, "robfair_spec", {"name": type(model).__name__}),
        "attacks": names,
        "eps": eps_meta,
        "seed": seed,
        "batch_size": batch_size,
        "early_exit": early_exit,
        "precision": precision,
        "device": str(dev),
        "seconds": round(time.perf_counter() - t0, 3),
        "attack_seconds": {k: round(v, 3) for k, v in timings.items()},
    }
    report = AuditReport(reports, meta=meta)
    report.warnings = sanity_warnings(reports)
    for w in report.warnings:
        log.warning(w)
    return report


def _autocast(dev: torch.device, precision: str):
    if precision == "fp32":
        import contextlib

        return contextlib.nullcontext()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        raise RobfairError(f"precision must be fp32, bf16 or fp16, got {precision!r}")
    return torch.autocast(device_type=dev.type, dtype=dtype)


class _CallableModule(types.ModuleType):
    """``robfair.audit`` is both this module and the function: importing the submodule makes the
    package attribute the module, so the module itself forwards calls to :func:`audit`."""

    def __call__(self, *args: Any, **kwargs: Any) -> AuditReport:
        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
