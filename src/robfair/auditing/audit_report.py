"""``audit()``: per-group clean and robust accuracy of a model under attacks, with per-sample outcomes.

    report = robfair.audit(model, dataset, attacks=["fgsm", "pgd20"], eps=8/255)
    report.by_group            # the worst case over all attacks, one row per group
    report["pgd20"].by_class   # one attack
    report.to_frame()          # every attack, long format
    report.warnings            # sanity checks and the reliability probe
    report.outcomes            # per-sample outcomes (robfair.auditing.Outcomes)
    report.examples            # a few of the weakest class's clean / adversarial images (robfair.auditing.examples)
    report.save("runs/x/audit.json")   # audit.json + outcomes.npz + examples.npz beside it, one atomic set

The evaluation itself is :func:`robfair.auditing.engine.evaluate` (one clean pass per batch shared by
every attack; ``early_exit`` stops spending steps on samples already fooled, same outcome). Every
audit then runs the reliability probe (:mod:`robfair.auditing.probe`: official AutoAttack on the
samples the audit left robust, within ``probe`` times the audit's compute) unless ``probe=0``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

import numpy as np
import pandas as pd
import torch

from .. import __version__
from ..attacks.radius import Radius
from ..errors import AttackError, RobfairError
from ..metrics import GroupReport
from ..metrics.views import ReportViews
from .inputs import audit_class_order, audit_inputs
from ..runfolder import audit_file, audit_target
from ..safeio import ResultSet, matches_digest, read_json
from ..utils import to_jsonable, write_json
from . import probe as _probe
from .checks import WORST_CASE, sanity_warnings
from .distributed import evaluate_sharded
from .outcomes import Outcomes, outcomes_path
from .examples import DEFAULT_EXAMPLES, Examples, examples_path, weakest_examples
from .probe import reliability_probe

if TYPE_CHECKING:
    from ..data import Dataset  # lazy: typing only (annotations)

log = logging.getLogger(__name__)

SCHEMA = "robfair.audit/1"
#: the sample fields of ``meta.fingerprint`` (``dataset`` and ``split`` come from ``meta``)
FINGERPRINT_KEYS = ("n", "indices", "labels", "groups")


#: Progress callback: (stage, done, total). The CLI passes one that drives a rich progress bar.
Progress = Callable[[str, int, int], None]

#: the log record of each warning a result also carries (``report.warnings``, an eps sweep's
#: ``meta["warnings"]``) has this attribute set (``extra=``): a caller that prints those warnings
#: itself (the CLI) can keep the log's copy of exactly those lines off its terminal
REPORTED = "robfair_reported"


@dataclass
class AuditReport(ReportViews):
    """Per-attack :class:`~robfair.metrics.GroupReport` objects plus the worst case over attacks.

    ``reports`` maps an attack name to its report; with more than one attack it also holds
    ``"worst-case"`` (a sample counts as robust only if every attack failed on it)."""

    reports: dict[str, GroupReport]
    warnings: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    #: the reliability probe's record (``{"skipped": reason}`` when none ran); see robfair.auditing.probe
    probe: dict[str, Any] | None = None
    #: per-sample outcomes (not in audit.json; ``save`` writes them to outcomes.npz beside it)
    outcomes: Outcomes | None = field(default=None, repr=False, compare=False)
    #: the weakest class's example images (not in audit.json; ``save`` writes them to examples.npz)
    examples: Examples | None = field(default=None, repr=False, compare=False)

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
        out = {
            "schema": SCHEMA,
            "meta": self.meta,
            "warnings": list(self.warnings),
            "reports": {name: rep.to_json(bootstrap=bootstrap, seed=seed) for name, rep in self.reports.items()},
        }
        if self.probe is not None:
            out["probe"] = self.probe
        return out

    @classmethod
    def from_json(cls, d: dict) -> "AuditReport":
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise RobfairError(f"not a robfair audit (schema {SCHEMA} expected); write one with `robfair audit --out`")
        return cls(
            reports={k: GroupReport.from_json(v) for k, v in d["reports"].items()},
            warnings=list(d.get("warnings", [])),
            meta=dict(d.get("meta", {})),
            probe=d.get("probe"),
        )

    # -- files ----------------------------------------------------------------------------------
    def save(self, path: str | Path, *, bootstrap: int = 1000, seed: int = 0,
             extras: dict[str, Any] | None = None, into: ResultSet | None = None) -> Path:
        """Write ``path`` (audit.json; a folder gets ``audit.json`` inside) and, when the report has
        per-sample outcomes, ``outcomes.npz`` beside it (``<stem>.outcomes.npz`` for another name), and
        with examples ``examples.npz`` (``<stem>.examples.npz``); a sidecar left there by an earlier
        audit is removed when this report has none. The files are one :class:`~robfair.safeio.ResultSet`
        (``into``: the caller's, committed by the caller): written whole or not at all, audit.json
        last, with the digests of its sidecars (``files``) that :meth:`load` checks."""
        path = audit_target(path)
        self.meta.setdefault("audit_id", self.content_id())
        if self.outcomes is not None:
            self.meta["fingerprint"] = self.fingerprint()
            self.outcomes.meta.update(audit_id=self.meta["audit_id"], fingerprint=self.meta["fingerprint"])
        with contextlib.nullcontext(into) if into is not None else ResultSet() as rs:
            files = {}
            for side, data in ((outcomes_path(path), self.outcomes), (examples_path(path), self.examples)):
                if data is not None:
                    with rs.file(side) as tmp:
                        data.save(tmp)
                    files[side.name] = rs.digest(side)
                elif side.is_file():
                    rs.remove(side)  # another audit's outcomes or images would not match these numbers
            payload = {**self.to_json(bootstrap=bootstrap, seed=seed), **(extras or {}), "files": files}
            with rs.file(path, last=True) as tmp:
                write_json(tmp, to_jsonable(payload))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "AuditReport":
        """Read audit.json (and outcomes.npz and examples.npz beside it, when present; examples
        whose predictions differ from the outcomes are dropped with a warning in the log)."""
        path = audit_file(path)
        try:
            d = read_json(path, "audit")
        except FileNotFoundError:
            raise RobfairError(f"{path} is missing") from None
        except RobfairError as e:
            raise RobfairError(f"{path} is truncated or not JSON ({e})" if "truncated" not in str(e) else
                               f"{path} is truncated or not JSON") from None
        try:
            rep = cls.from_json(d)
        except (RobfairError, KeyError, TypeError, ValueError) as e:
            raise RobfairError(f"{path} is not a robfair audit ({e})") from None
        side, ex = outcomes_path(path), examples_path(path)
        if side.exists():
            rep.outcomes = Outcomes.load(side)
            rep.check_outcomes(path, side)
            _check_written_with(path, d, side)
        if ex.is_file() and _written_with(path, d, ex):
            try:
                rep.examples = Examples.load(ex)
            except RobfairError as e:
                log.warning("%s", e)
            if rep.examples is not None and rep.outcomes is not None and not rep.examples.matches(rep.outcomes):
                log.warning("%s does not match %s (written by another audit); the example images are not shown", ex, side)
                rep.examples = None
        return rep

    def fingerprint(self) -> dict[str, Any] | None:
        """What this audit was run on: the dataset's name and split (as recorded in ``meta``; None when
        unknown) and its samples' fingerprint (:meth:`Outcomes.data_fingerprint`: their number and a
        hash of their indices, labels and group ids, in order). None for an older audit without
        outcomes or a recorded fingerprint. ``compare`` pairs two runs only when these agree."""
        data = self.outcomes.data_fingerprint() if self.outcomes is not None else self.meta.get("fingerprint")
        if not isinstance(data, dict):
            return None
        keep = {k: data.get(k) for k in FINGERPRINT_KEYS}
        return {"dataset": self.meta.get("dataset") or None, "split": self.meta.get("split"), **keep}

    def content_id(self) -> str:
        """The audit's id, written in both audit.json and its outcomes.npz (``meta.audit_id``): a hash of
        its reports (every count, class and group name, attack and eps) and of the samples they are
        of, so an outcomes file of another audit is told from its own, and the same audit run again
        (on one process or sharded) gets the same id."""
        fp = self.fingerprint() or {}
        body = {"reports": {k: r.to_json(bootstrap=0) for k, r in self.reports.items()},
                "samples": {k: fp.get(k) for k in FINGERPRINT_KEYS}}
        return hashlib.sha256(json.dumps(to_jsonable(body), sort_keys=True).encode()).hexdigest()[:32]

    def check_outcomes(self, path: str | Path = "audit.json", side: str | Path = "outcomes.npz") -> None:
        """One-line ``RobfairError`` naming both files when the per-sample outcomes contradict the
        reports: another audit's (audit id), other samples (fingerprint), or other counts (every report
        of audit.json must be rebuilt from them exactly; an edited or stale outcomes.npz is never
        silently trusted)."""
        o = self.outcomes
        if o is None:
            return
        fix = f"re-run the audit, or delete {side} to use {path} alone"
        ids = self.meta.get("audit_id"), o.meta.get("audit_id")
        if ids[0] != ids[1] and any(ids):
            raise RobfairError(f"{side} does not belong to {path}: it was written by another audit (audit id "
                               f"{ids[1] or 'none'}, {path} records {ids[0] or 'none'}); {fix}")
        fp = self.meta.get("fingerprint")
        if isinstance(fp, dict):
            mine = o.data_fingerprint()
            diff = [k for k in FINGERPRINT_KEYS if k in fp and fp[k] != mine[k]]
            if diff:
                raise RobfairError(f"{side} holds other samples than {path} records ({', '.join(diff)} differ: "
                                   f"n {mine['n']} vs {fp.get('n')}); {fix}")
        if set(self.reports) - set(o.attacks) - {WORST_CASE}:
            raise RobfairError(f"{side} has the attacks {o.attacks} but {path} reports {list(self.reports)}; {fix}")
        for name, rep in self.reports.items():
            mine = o.report(name)
            if (mine.counts != rep.counts or mine.class_names != rep.class_names
                    or mine.group_names != rep.group_names):
                a, b = rep.overall_counts(), mine.overall_counts()
                raise RobfairError(f"{side} contradicts {path}: its per-sample outcomes give other counts for "
                                   f"'{name}' (robust {b['rob_acc']} of {b['n']}, clean {b['clean_acc']}; {path}: "
                                   f"robust {a['rob_acc']} of {a['n']}, clean {a['clean_acc']}); {fix}")

    def merge(self, other: "AuditReport") -> "AuditReport":
        """Merge audits of disjoint shards of the same data (same attacks, same eps) exactly."""
        if set(self.reports) != set(other.reports):
            raise RobfairError("cannot merge audits with different attacks; audit every shard with the same --attack list")
        merged = {k: self.reports[k].merge(other.reports[k]) for k in self.reports}
        meta = {k: v for k, v in self.meta.items() if k not in ("audit_id", "fingerprint")}  # a shard's, not the whole's
        out = AuditReport(merged, meta={**meta, "n": self.meta.get("n", 0) + other.meta.get("n", 0)})
        out.warnings = sanity_warnings(out.reports)
        if self.outcomes is not None and other.outcomes is not None:
            a, b = self.outcomes, other.outcomes
            if not np.intersect1d(a.index, b.index).size:  # shards of one dataset (global indices)
                out.outcomes = Outcomes.concat([a, b])
                out.meta["fingerprint"] = out.fingerprint()
                out.meta["audit_id"] = out.outcomes.meta["audit_id"] = out.content_id()
        return out


def _check_written_with(path: Path, d: dict, side: Path) -> None:
    """outcomes.npz is the file ``path`` was written with (its digest in ``files``; an older audit.json
    without ``files`` takes any whose contents agree): else a one-line RobfairError naming both."""
    files = d.get("files")
    if isinstance(files, dict) and not matches_digest(side, files.get(side.name)):
        why = "was not written with it (another audit's)" if side.name not in files else \
            "is not the file it was written with (changed since, or a write cut short by a hard kill)"
        raise RobfairError(f"{side} {why} of {path}; re-run the audit, or delete {side} to use {path} alone")


def _written_with(path: Path, d: dict, side: Path) -> bool:
    """``side`` is the sidecar ``path`` was written with: audit.json lists its digest (``files``) and
    the file matches it; an older audit.json (no ``files``) takes any. Else a warning, and False."""
    files = d.get("files")
    if not isinstance(files, dict):
        return True
    if side.name not in files:
        log.warning("%s was not written with %s (another audit's); it is not used", side, path)
        return False
    if not matches_digest(side, files[side.name]):
        log.warning("%s is not the file %s was written with (changed since, or a write cut short by a hard "
                    "kill); it is not used - run the audit again to have both", side, path)
        return False
    return True


#: what ``audit()`` takes as data (see :func:`robfair.data.as_dataset`)
DataLike = Union["Dataset", tuple, list, "torch.utils.data.Dataset", "torch.utils.data.DataLoader"]


def audit(
    model: torch.nn.Module,
    dataset: DataLike,
    attacks: Sequence[str | Any] = ("pgd20",),
    eps: float | str | torch.Tensor | Radius = 8 / 255,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = "auto",
    early_exit: bool = True,
    seed: int = 0,
    precision: str = "fp32",
    channels_last: bool | None = None,
    probe: float | str | None = None,
    probe_tolerance: float | None = None,
    progress: Progress | None = None,
    mean: Sequence[float] | float | str | None = None,
    std: Sequence[float] | float | str | None = None,
    classes: Sequence[str] | None = None,
    examples: int = DEFAULT_EXAMPLES,
    dist: Any = None,
) -> AuditReport:
    """Audit ``model`` on ``dataset`` under each attack, per group (the classes unless the dataset has groups).

    Parameters
    ----------
    model: a module mapping images in [0, 1] to logits.
    dataset: a :class:`robfair.data.Dataset` (on any device), ``(x, y)`` / ``(x, y, g)`` tensors or
        numpy arrays, a ``TensorDataset`` or a ``DataLoader`` (:func:`robfair.data.as_dataset`).
    attacks: names understood by :func:`robfair.attacks.get_attack` (``"fgsm"``, ``"pgd20"``,
        ``"pgd20-l2"``, ``"pgd50-r5"``, ``"autoattack"`` ...) or attack objects.
    eps: a radius (``0.1``, ``"8/255"``), a per-sample tensor with one value per dataset item, or a
        :class:`~robfair.attacks.radius.Radius` already parsed (the CLI's: not checked again).
    early_exit: stop attacking samples already fooled (same outcome, less work).
    seed: seeds the attacks' random starts, each from (seed, attack name); the audit is
        deterministic for a fixed batch size.
    precision: ``"fp32"`` (default), ``"bf16"`` or ``"fp16"`` autocast inside the attack and forward.
    channels_last: run the model in channels-last memory format (faster convolutions, same
        predictions); None (default): on for models with 2-D convolutions.
    probe: the reliability probe's budget (:mod:`robfair.auditing.probe`): official AutoAttack on the
        samples ``attacks`` left robust, stratified per group, at most ``probe`` times the compute
        the audit's attacks took (None: 1; ``"all"``: every robust sample through the whole
        cascade, which is exactly AutoAttack per group; 0: off). It states per group how much the
        audit may overstate robust accuracy and flags a group overstated beyond ``probe_tolerance``
        (95%, every statement at once): ``report.probe``, its ``verdict`` line, a warning when it fails.
    probe_tolerance: the overstatement a group may have before it is flagged, a fraction (None: 0.01,
        1 point).
    mean, std: the model expects normalized inputs: it is wrapped as ``Normalized(model, mean, std)``
        (per-channel values, or a preset ``"cifar10"``, ``"cifar100"``, ``"imagenet"``).
    classes: the model's class names in output order; the dataset's labels are re-indexed to it by
        name. Without it, class names stored with the model (``load_any``) must equal the dataset's.
    examples: how many of the weakest class's samples to keep as clean / adversarial images for the
        report (``report.examples``, saved as examples.npz; :mod:`robfair.auditing.examples`): the one or
        two batches holding them are attacked again with the audit's seed (the strongest attack only)
        and must reproduce the recorded predictions; 0: none.
    dist: a :class:`robfair.distributed.DistInfo` of a joined process group (torchrun): each
        rank evaluates its whole batches (the probe included) and every rank returns the same
        report, equal to one process's (:mod:`robfair.auditing.distributed`); None: this process alone.
    """
    model, dataset = audit_inputs(model, dataset, mean=mean, std=std, classes=classes)
    order = audit_class_order(model, dataset, classes)
    if order.get("note"):
        log.info("%s", order["note"])
    if batch_size < 1:
        raise RobfairError(f"batch size must be >= 1, got {batch_size}")
    if not attacks:
        raise AttackError("no attack given; pass e.g. attacks=['pgd20'] (CLI: --attack pgd20)")
    budget = _probe.parse_budget(_probe.DEFAULT_BUDGET if probe is None else probe)
    tolerance = _probe.parse_tolerance(probe_tolerance)
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise RobfairError(f"examples must be a sample count >= 0, got {examples!r}; 0 keeps no example images")
    eps_v = Radius.parse(eps, len(dataset))  # parsed here once (a Radius from the CLI: taken as it is)
    out = evaluate_sharded(model, dataset, attacks, eps_v, dist=dist, batch_size=batch_size, device=device, seed=seed,
                           precision=precision, channels_last=channels_last, early_exit=early_exit, progress=progress)
    names = out.attacks
    reports = out.reports()
    eps_meta: float | str = eps_v.label
    meta = {
        "robfair_version": __version__,
        "torch_version": torch.__version__,
        "dataset": getattr(dataset, "name", ""),
        "n": out.n,
        "num_classes": dataset.num_classes,
        "classes": list(dataset.classes),
        "class_order": order,
        "groups": list(dataset.group_names),
        "model": getattr(model, "robfair_spec", {"name": type(model).__name__}),
        "attacks": names,
        "eps": eps_meta,
        "seed": seed,
        "batch_size": batch_size,
        "early_exit": early_exit,
        "precision": precision,
        "channels_last": out.meta["channels_last"],
        "device": out.meta["device"],
        "seconds": out.meta["seconds"],
        "attack_seconds": out.meta["attack_seconds"],
        "attack_units": out.meta.get("attack_units", {}),
    }
    if "distributed" in out.meta:
        meta["distributed"] = out.meta["distributed"]
    report = AuditReport(reports, meta=meta, outcomes=out)
    meta["fingerprint"] = report.fingerprint()
    meta["audit_id"] = out.meta["audit_id"] = report.content_id()
    report.warnings = list(out.warnings)
    if examples:
        report.examples = weakest_examples(model, dataset, out, eps_v, n=examples, attacks=list(attacks),
                                           batch_size=batch_size, device=device, seed=seed, precision=precision,
                                           channels_last=out.meta["channels_last"], early_exit=early_exit)
        if report.examples is not None:
            meta["seconds"] = round(meta["seconds"] + (report.examples.meta.get("seconds") or 0.0), 3)
    rec = reliability_probe(model, dataset, out, names, eps_v, budget=budget, tolerance=tolerance, seed=seed,
                            batch_size=batch_size, device=device, precision=precision, dist=dist, progress=progress)
    report.probe = {k: v for k, v in rec.items() if k != "warnings"}
    report.warnings += rec.get("warnings", [])
    meta["seconds"] = round(meta["seconds"] + rec.get("seconds", 0.0), 3)
    for w in dict.fromkeys(report.warnings):  # each once; the CLI prints them itself (REPORTED)
        log.warning("%s", w, extra={REPORTED: True})
    return report


