"""Certified L2 robustness per class by randomized smoothing (Cohen, Rosenfeld & Kolter, ICML 2019).

    rep = robfair.certify(model, dataset, sigma=0.25, n0=100, n=100_000, alpha=0.001)
    rep.table()                 # per class: certified accuracy at each radius [Wilson 95%], abstain rate, radii
    rep.report_at(0.25)         # a GroupReport: clean_acc = smoothed accuracy, rob_acc = certified accuracy at r
    rep.outcomes()              # per sample: prediction, p_A lower bound, certified radius

The smoothed classifier is g(x) = argmax_c P[f(x + e) = c], e ~ N(0, sigma^2 I). CERTIFY (the paper's
Algorithm, as in the official ``code/core.py`` of locuslab/smoothing, commit bdfa2280bc07):
n0 noise draws pick the top class c_A; n fresh draws count how often f returns c_A; the one-sided
Clopper-Pearson (1 - alpha) lower bound p_A of that proportion gives the radius sigma * Phi^-1(p_A),
and the sample is abstained when p_A <= 1/2. With probability >= 1 - alpha per sample, g(x') = c_A for
every ||x' - x||_2 < radius. PREDICT (hypothesis test on the top two counts) is :func:`predict`.

Noise is drawn on the model's device in batches of ``batch_size`` forwards; short draws of several
samples share one forward. Every sample's noise comes from its own generator, seeded from (seed,
dataset index, pass), so a sample's result does not depend on which other samples are certified,
and an interrupted run resumed from its checkpoint gives the same numbers as an uninterrupted one.
The noise is not clipped to [0, 1]: the certificate is for the smoothed classifier on R^d, as in the
paper; models must accept inputs outside the box (robfair models do).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from scipy.stats import binom, norm
from torch import nn

from . import __version__
from .attacks import get_attack
from .attacks.base import noise
from .audit.engine import autocast, evaluation_model
from .errors import AttackError, ConfigError, DataError, ModelError, RobfairError
from .hardware import channels_last as to_channels_last
from .hardware import check_precision, wants_channels_last
from .inert import csv_cell
from .metrics import GroupReport, wilson
from .models import load_any
from .models.validate import check_model_output, guarded, nonfinite_error
from .metrics.stats import check_alpha, cp_lower, cp_upper, mcnemar_exact  # noqa: F401 (cp_upper: part of this API)
from .seeding import make_generator, noise_seed
from .utils import atomic_path, input_file, resolve_device, to_jsonable

log = logging.getLogger(__name__)

SCHEMA = "robfair.certify/1"
CHECKPOINT_SCHEMA = "robfair.certify-partial/1"
#: the prediction of an abstained sample
ABSTAIN = -1
#: the extra "class" of a GroupReport that counts abstained / not-certified predictions
NOT_CERTIFIED = "(not certified)"
#: noise-draw passes (part of every sample's seed)
_SELECT, _ESTIMATE, _PREDICT = 0, 1, 2

Progress = Callable[[str, int, int], None]


# ============================================================================== statistics
def radius_from_p(p_lower: Any, sigma: float) -> np.ndarray | float:
    """sigma * Phi^-1(p) where p > 1/2, else 0 (abstain)."""
    p = np.asarray(p_lower, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(p > 0.5, sigma * norm.ppf(np.clip(p, 0.5, 1.0)), 0.0)
    return float(out) if out.ndim == 0 else out


def max_radius(n: int, alpha: float, sigma: float) -> float:
    """The largest radius CERTIFY can return with n draws: every draw is c_A, so p_A = alpha^(1/n)."""
    return float(radius_from_p(cp_lower(n, n, alpha), sigma))


# ============================================================================== noise sampling
#: noise draws per sample (``n0`` and ``n`` each) that certify runs at most: a billion draws of one
#: sample are already a million forwards of 1000 (Cohen et al. certify with n = 100000)
MAX_DRAWS = 10**9


def check_draws(n0: Any, n: Any, batch_size: Any, *, cli: bool = False) -> None:
    """One-line ``ConfigError`` for noise-draw counts that are not positive integers or beyond
    :data:`MAX_DRAWS`, before anything runs (``cli``: the message names the options)."""
    for what, opt, v in (("n0", "--n0", n0), ("n", "--n", n), ("batch_size", "--batch-size", batch_size)):
        name = opt if cli else what
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}")
        if what != "batch_size" and v > MAX_DRAWS:
            given, fix = (f"{opt} {v}", f"{opt} {100 if what == 'n0' else 100000}") if cli else \
                (f"{what}={v}", f"{what}={100 if what == 'n0' else 100000}")
            raise ConfigError(f"{given} is beyond what certify can run: at most {MAX_DRAWS} noise draws per sample "
                              f"(already a million forwards of 1000 draws, hours per sample); pass e.g. {fix} "
                              "(Cohen et al. use n0 100, n 100000)")


def _chunks(num: int, batch_size: int) -> Iterator[int]:
    """Sizes of the forwards one sample's ``num`` draws are split into (never a list: ``num`` may be large)."""
    q, r = divmod(num, batch_size)
    for _ in range(q):
        yield batch_size
    if r:
        yield r


class NoiseCounter:
    """Counts of the base classifier's predictions under Gaussian noise, batched on the model's device.

    ``counts(x, keys, num, stage)`` returns an (m, K) int64 tensor: for each of the m inputs, how often
    ``model(x_i + sigma * e).argmax()`` returned each class over ``num`` draws. Draws of one sample are
    split into forwards of ``batch_size``; the short remainders of several samples share a forward.

    ``precision`` is the forwards' autocast (the audit's :func:`~robfair.audit.engine.autocast`);
    ``channels_last``: the noisy batch is laid out channels_last (the noise is drawn as before, so
    its values are the same; the scaling writes it in the new layout)."""

    def __init__(self, model: nn.Module, sigma: float, num_classes: int, *, batch_size: int, seed: int,
                 device: torch.device, precision: str = "fp32", channels_last: bool = False) -> None:
        self.model, self.sigma, self.K = model, float(sigma), int(num_classes)
        self.batch_size, self.seed, self.device = int(batch_size), int(seed), device
        self.precision, self.channels_last = precision, bool(channels_last)
        self.forwards = 0
        self.draws = 0
        #: inputs since the last :meth:`refuse_nonfinite` whose logits were not all finite (a device
        #: counter: no synchronization per forward), and the inputs seen since then
        self.nonfinite: Any = 0
        self.seen = 0

    @torch.no_grad()
    def counts(self, x: torch.Tensor, keys: Sequence[int], num: int, stage: int) -> torch.Tensor:
        m, K, bs = x.shape[0], self.K, self.batch_size
        gens = [make_generator(self.device, noise_seed(self.seed, k, stage)) for k in keys]
        out = torch.zeros(m * K, dtype=torch.long, device=self.device)
        pending: list[tuple[int, int]] = []
        filled = 0
        for j in range(m):
            for size in _chunks(num, bs):
                if filled + size > bs:
                    self._forward(x, gens, pending, out)
                    pending, filled = [], 0
                pending.append((j, size))
                filled += size
        if pending:
            self._forward(x, gens, pending, out)
        return out.view(m, K)

    def _forward(self, x: torch.Tensor, gens: list[torch.Generator], batch: list[tuple[int, int]],
                 out: torch.Tensor) -> None:
        shape = tuple(x.shape[1:])
        if len(batch) == 1:
            j, size = batch[0]
            xin = torch.randn((size,) + shape, generator=gens[j], device=self.device, dtype=x.dtype)
            xin = self._scaled(xin).add_(x[j])
            owner = None
        else:
            xin = torch.cat([torch.randn((s,) + shape, generator=gens[j], device=self.device, dtype=x.dtype)
                             for j, s in batch])
            idx = torch.cat([torch.full((s,), j, dtype=torch.long) for j, s in batch]).to(self.device)
            xin = self._scaled(xin).add_(x[idx])
            owner = idx
        with autocast(xin.device, self.precision):
            z = self.model(xin)
        pred = self.note(z).argmax(1)
        flat = pred + batch[0][0] * self.K if owner is None else owner * self.K + pred
        out.index_add_(0, flat, torch.ones_like(flat))
        self.forwards += 1
        self.draws += int(xin.shape[0])

    def _scaled(self, e: torch.Tensor) -> torch.Tensor:
        """``sigma * e``, in place, or written channels_last (the same values: one multiply either way)."""
        if not self.channels_last or e.dim() != 4:
            return e.mul_(self.sigma)
        return torch.mul(e, self.sigma, out=torch.empty_like(e, memory_format=torch.channels_last))

    def note(self, z: torch.Tensor) -> torch.Tensor:
        """Count the rows of logits ``z`` that are not all finite; returns ``z``."""
        self.nonfinite = self.nonfinite + (~torch.isfinite(z).all(1)).sum()
        self.seen += int(z.shape[0])
        return z

    def refuse_nonfinite(self, where: str) -> None:
        """One :class:`~robfair.models.validate.NonFiniteLogits` line when a forward since the last
        call returned NaN / Inf logits (their argmax would count as a vote), with the count."""
        bad = int(self.nonfinite)
        if bad:
            raise nonfinite_error(self.model, bad, self.seen, f"inputs {where} (clean images and their Gaussian "
                                  f"noise at sigma {self.sigma:g}, which certify never clips to [0, 1]: the model "
                                  "must take inputs outside the box)")
        self.nonfinite, self.seen = 0, 0


def predict(model: nn.Module, x: torch.Tensor, sigma: float, *, n: int = 1000, alpha: float = 0.001,
            batch_size: int = 1000, seed: int = 0, keys: Sequence[int] | None = None,
            device: str | torch.device | None = "auto") -> np.ndarray:
    """PREDICT: the smoothed prediction of each input in ``x`` (N, C, H, W), or ``ABSTAIN`` (-1) where a
    two-sided binomial test of the top two counts does not reject equality at level ``alpha``; with
    probability >= 1 - alpha a returned class is g(x). ``keys`` seed each input's noise (default 0..N-1)."""
    check_alpha(alpha)
    check_draws(1, n, batch_size)
    dev = resolve_device(device)
    keys = list(range(x.shape[0])) if keys is None else [int(k) for k in keys]
    was = model.training
    model.eval()
    try:
        net = guarded(model.to(dev))
        out = _check_model(net, x[:batch_size].to(dev), None)
        counter = NoiseCounter(net, sigma, out, batch_size=batch_size, seed=seed, device=dev)
        c = counter.counts(x.to(dev), keys, n, _PREDICT).cpu().numpy()
        counter.refuse_nonfinite("of PREDICT")
    finally:
        model.train(was)
    top = np.argsort(-c, axis=1, kind="stable")[:, :2]
    res = np.full(x.shape[0], ABSTAIN, dtype=np.int64)
    for i in range(x.shape[0]):
        c1, c2 = int(c[i, top[i, 0]]), int(c[i, top[i, 1]])
        if c1 + c2 > 0 and mcnemar_exact(c1, c2) <= alpha:  # the two-sided exact binomial test at 1/2
            res[i] = top[i, 0]
    return res


def _check_model(model: nn.Module, x: torch.Tensor, num_classes: int | None, precision: str = "fp32") -> int:
    """The model takes these images and returns one finite logit per class of the dataset (any
    K >= 2 for ``num_classes`` None), under ``precision``; returns K (one-line ModelError otherwise)."""
    with autocast(x.device, precision):
        z = check_model_output(model, x, num_classes, where="clean images, the first to certify", precision=precision)
    return int(z.shape[1])


# ============================================================================== the report
@dataclass
class CertifyReport:
    """Per-sample CERTIFY outcomes and everything derived from them (tables, GroupReports, curves).

    Per sample (arrays of equal length): ``index`` (dataset index), ``y`` (label), ``g`` (group id;
    the label when the data has no groups), ``base_pred`` (the base model on the clean input),
    ``selected`` (c_A from the n0 draws), ``n_top`` (draws of c_A among the n), ``p_lower``,
    ``pred`` (c_A, or ``ABSTAIN``) and ``radius`` (0 when abstained)."""

    index: np.ndarray
    y: np.ndarray
    g: np.ndarray
    base_pred: np.ndarray
    selected: np.ndarray
    n_top: np.ndarray
    p_lower: np.ndarray
    pred: np.ndarray
    radius: np.ndarray
    class_names: tuple[str, ...]
    group_names: tuple[str, ...] | None = None  # None: the groups are the classes
    sigma: float = 0.25
    n0: int = 100
    n: int = 100_000
    alpha: float = 0.001
    radii: tuple[float, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        ints = ("index", "y", "g", "base_pred", "selected", "n_top", "pred")
        for name in ints:
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        self.p_lower = np.asarray(self.p_lower, dtype=np.float64)
        self.radius = np.asarray(self.radius, dtype=np.float64)
        self.class_names = tuple(str(c) for c in self.class_names)
        if self.group_names is not None:
            self.group_names = tuple(str(c) for c in self.group_names)
        if not self.radii:
            self.radii = default_radii(self.sigma)
        self.radii = tuple(float(r) for r in self.radii)

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def abstain(self) -> np.ndarray:
        return self.pred == ABSTAIN

    @property
    def correct(self) -> np.ndarray:
        """The smoothed prediction is the label (never for abstained samples)."""
        return self.pred == self.y

    @property
    def certified_radius(self) -> np.ndarray:
        """The radius at which each sample is certified *correct*: its radius when correct, else -inf."""
        return np.where(self.correct, self.radius, -np.inf)

    def certified(self, r: float) -> np.ndarray:
        """Certified correct at radius r: correct and radius >= r (Cohen et al.'s certified accuracy)."""
        return self.correct & (self.radius >= r)

    @property
    def has_groups(self) -> bool:
        return self.group_names is not None

    def _axis(self, by: str) -> tuple[np.ndarray, tuple[str, ...]]:
        if by == "class":
            return self.y, self.class_names
        if by == "group":
            return (self.g, self.group_names) if self.has_groups else (self.y, self.class_names)
        raise ConfigError(f"by must be 'class' or 'group', got {by!r}")

    # ------------------------------------------------------------------ GroupReport bridge
    def report_at(self, r: float, by: str = "group") -> GroupReport:
        """The certified outcome at radius ``r`` as a :class:`~robfair.metrics.GroupReport`, so every
        per-group statistic of an audit (Wilson intervals, aggregates, bootstrap, chi-square, merge)
        applies: ``clean_acc`` = accuracy of the smoothed classifier (abstentions are errors),
        ``rob_acc`` = certified accuracy at r, ``bndy_err`` = correct but not certified at r.

        The report's last class is ``"(not certified)"``: the prediction of abstained samples (clean
        side) and of samples whose radius is below r (certified side); it has no samples of its own."""
        K = len(self.class_names)
        extra = NOT_CERTIFIED if NOT_CERTIFIED not in self.class_names else NOT_CERTIFIED + "*"
        clean = np.where(self.abstain, K, self.pred)
        cert = np.where(~self.abstain & (self.radius >= r), self.pred, K)
        names = list(self.class_names) + [extra]
        if by == "group" and self.has_groups:
            return GroupReport.from_outcomes(y=self.y, clean_pred=clean, adv_pred=cert, groups=self.g,
                                             group_names=list(self.group_names), class_names=names,
                                             attack=f"certified (sigma={self.sigma:g})", eps=float(r))
        self._axis(by)
        return GroupReport.from_outcomes(y=self.y, clean_pred=clean, adv_pred=cert, groups=self.y,
                                         group_names=list(self.class_names), class_names=names,
                                         attack=f"certified (sigma={self.sigma:g})", eps=float(r))

    # ------------------------------------------------------------------ tables
    def table(self, by: str = "class", radii: Sequence[float] | None = None) -> pd.DataFrame:
        """One row per class (or group) and an ``all`` row: n, smoothed accuracy, abstain rate,
        certified accuracy at each radius (``cert@r`` with Wilson 95% ``_lo``/``_hi``), the median
        and the average certified radius (ACR) of the correct class (0 for wrong or abstained
        samples; the median is where the group's certified-accuracy curve crosses 50%)."""
        ids, names = self._axis(by)
        radii = tuple(self.radii if radii is None else radii)
        rows = []
        for gi, name in list(enumerate(names)) + [(-1, "all")]:
            m = np.ones(len(self), bool) if gi < 0 else ids == gi
            k = int(m.sum())
            row: dict[str, Any] = {"n": k}
            for col, hits in (("smoothed_acc", self.correct[m]), ("abstain", self.abstain[m])):
                lo, hi = wilson(int(hits.sum()), k)
                row.update({col: hits.mean() if k else math.nan, f"{col}_lo": lo, f"{col}_hi": hi})
            for r in radii:
                hits = self.certified(r)[m]
                lo, hi = wilson(int(hits.sum()), k)
                row.update({f"cert@{r:g}": hits.mean() if k else math.nan, f"cert@{r:g}_lo": lo, f"cert@{r:g}_hi": hi})
            cr = np.where(self.correct[m], self.radius[m], 0.0)
            row["median_radius"] = float(np.median(cr)) if k else math.nan
            row["acr"] = float(cr.mean()) if k else math.nan
            rows.append((name, row))
        return pd.DataFrame([r for _, r in rows], index=pd.Index([n for n, _ in rows], name=by))

    def gaps(self, radii: Sequence[float] | None = None, *, by: str = "group", n_boot: int = 1000,
             seed: int = 0) -> pd.DataFrame:
        """Per radius: average, worst group and gap (best - worst) of certified accuracy, each with
        its stratified-bootstrap 95% interval (``GroupReport.bootstrap``), and the worst group's name."""
        rows = []
        for r in (self.radii if radii is None else radii):
            rep = self.report_at(r, by=by)
            agg = rep.aggregates()["rob_acc"]
            row = {"radius": float(r), "avg": agg["avg"], "worst": agg["worst"], "worst_group": agg["worst_group"],
                   "best_group": agg["best_group"], "gap": agg["gap"]}
            if n_boot:
                b = rep.bootstrap(n=n_boot, seed=seed)["metrics"].get("rob_acc", {})
                for stat in ("worst", "gap"):
                    if stat in b:
                        row[f"{stat}_lo"], row[f"{stat}_hi"] = b[stat]["lo"], b[stat]["hi"]
                row["worst_group_stability"] = b.get("worst_group_stability", math.nan)
            rows.append(row)
        return pd.DataFrame(rows)

    def curves(self, by: str = "class", grid: Sequence[float] | None = None) -> pd.DataFrame:
        """Certified accuracy against radius: one row per radius of ``grid`` (default: 0 to the largest
        certified radius, 101 points), one column per class (or group) and ``all``."""
        if grid is None:
            top = float(self.radius.max()) if len(self) and self.radius.max() > 0 else self.sigma
            grid = np.linspace(0.0, top * 1.02, 101)
        ids, names = self._axis(by)
        cols: dict[str, Any] = {}
        for gi, name in enumerate(names):
            m = ids == gi
            cr = self.certified_radius[m]
            cols[name] = [float((cr >= r).mean()) if m.any() else math.nan for r in grid]
        cols["all"] = [float((self.certified_radius >= r).mean()) for r in grid]
        return pd.DataFrame(cols, index=pd.Index(np.asarray(grid, float), name="radius"))

    def outcomes(self) -> pd.DataFrame:
        """One row per certified sample: the per-sample outcome file (see :meth:`write_outcomes`)."""
        names = np.asarray(self.class_names, dtype=object)
        df = pd.DataFrame({
            "index": self.index, "label": self.y, "class": names[self.y], "group": self.g,
            "base_pred": self.base_pred, "selected": self.selected, "n_top": self.n_top, "n": self.n,
            "p_lower": self.p_lower, "pred": self.pred, "abstain": self.abstain, "correct": self.correct,
            "radius": self.radius,
        })
        if self.has_groups:
            df.insert(4, "group_name", np.asarray(self.group_names, dtype=object)[self.g])
        return df

    def _csv_frame(self) -> pd.DataFrame:
        """:meth:`outcomes` with name cells neutralized for spreadsheets (ids are what is read back)."""
        df = self.outcomes()
        for col in ("class", "group_name"):
            if col in df:
                df[col] = df[col].map(csv_cell)
        return df

    def summary_lines(self) -> list[str]:
        """Plain sentences from the measured numbers (overall and the worst class at sigma)."""
        t = self.table("class")
        a = t.loc["all"]
        per = t.drop(index="all")
        per = per[per["n"] > 0]
        lines = [f"smoothed accuracy {100 * a['smoothed_acc']:.1f}%, abstained {100 * a['abstain']:.1f}%, "
                 f"median certified radius {a['median_radius']:.3f}, ACR {a['acr']:.3f} "
                 f"(sigma {self.sigma:g}, n0 {self.n0}, n {self.n}, alpha {self.alpha:g}; "
                 f"largest certifiable radius {max_radius(self.n, self.alpha, self.sigma):.3f})"]
        for r in self.radii:
            col = f"cert@{r:g}"
            if per.empty or r == 0:
                continue
            worst = per[col].idxmin()
            lines.append(f"certified accuracy at radius {r:g}: {100 * a[col]:.1f}% overall, worst class {worst} "
                         f"{100 * per.loc[worst, col]:.1f}%, best {per[col].idxmax()} {100 * per[col].max():.1f}%")
        return lines

    # ------------------------------------------------------------------ export
    def to_json(self, bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
        """Plain JSON (schema ``robfair.certify/1``): settings, per-radius GroupReports (rebuildable),
        per-class and per-group tables, gaps with bootstrap intervals, curves and warnings. The
        per-sample outcomes go to a separate file (:meth:`write_outcomes`)."""
        frame = lambda df: {str(i): row for i, row in df.to_dict(orient="index").items()}  # noqa: E731
        by_list = ["class"] + (["group"] if self.has_groups else [])
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "meta": self.meta,
            "settings": {"sigma": self.sigma, "n0": self.n0, "n": self.n, "alpha": self.alpha,
                         "radii": list(self.radii), "max_radius": max_radius(self.n, self.alpha, self.sigma)},
            "warnings": list(self.warnings),
            "class_names": list(self.class_names),
            "group_names": None if self.group_names is None else list(self.group_names),
            "tables": {by: frame(self.table(by)) for by in by_list},
            "gaps": {by: self.gaps(by=by, n_boot=bootstrap, seed=seed).to_dict(orient="records") for by in by_list},
            "reports": {f"{r:g}": self.report_at(r, by="group").to_json() for r in self.radii},
            "curves": {by: (lambda c: {"radius": c.index.tolist(), **{k: c[k].tolist() for k in c.columns}})(self.curves(by))
                       for by in by_list},
        }
        return to_jsonable(d)

    def write_outcomes(self, path: str | Path) -> Path:
        """The per-sample outcomes as CSV (atomic write); :func:`read_outcomes` rebuilds the report."""
        path = Path(path)
        df = self._csv_frame()
        header = {"schema": SCHEMA, "class_names": list(self.class_names),
                  "group_names": None if self.group_names is None else list(self.group_names),
                  "sigma": self.sigma, "n0": self.n0, "n": self.n, "alpha": self.alpha, "radii": list(self.radii)}
        with atomic_path(path) as tmp:
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                f.write("# " + json.dumps(header) + "\n")
                df.to_csv(f, index=False, float_format="%.17g")
        return path

    @classmethod
    def read_outcomes(cls, path: str | Path, meta: dict[str, Any] | None = None) -> "CertifyReport":
        """Rebuild a report from :meth:`write_outcomes`' file (bit for bit)."""
        path = Path(path)
        try:
            with open(input_file(path, "certify outcomes", error=DataError), encoding="utf-8") as f:
                first = f.readline()
                header = json.loads(first[2:]) if first.startswith("# ") else None
                df = pd.read_csv(f)
        except (OSError, ValueError, pd.errors.ParserError):
            raise DataError(f"{path} is not a robfair certify outcomes file; write one with `robfair certify`") from None
        if not isinstance(header, dict) or header.get("schema") != SCHEMA:
            raise DataError(f"{path} is not a robfair certify outcomes file; write one with `robfair certify`")
        return cls(index=df["index"], y=df["label"], g=df["group"], base_pred=df["base_pred"], selected=df["selected"],
                   n_top=df["n_top"], p_lower=df["p_lower"], pred=df["pred"], radius=df["radius"],
                   class_names=header["class_names"], group_names=header["group_names"], sigma=header["sigma"],
                   n0=header["n0"], n=header["n"], alpha=header["alpha"], radii=header["radii"], meta=meta or {})


def default_radii(sigma: float) -> tuple[float, ...]:
    """0, sigma/2, sigma, 1.5 sigma, 2 sigma."""
    return tuple(float(f"{f * sigma:.6g}") for f in (0.0, 0.5, 1.0, 1.5, 2.0))


# ============================================================================== resumable state
def _fingerprint(model: nn.Module, dataset, settings: dict[str, Any], positions: np.ndarray) -> str:
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


def _save_state(path: Path, fingerprint: str, done: np.ndarray, state: dict[str, np.ndarray]) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, schema=np.array(CHECKPOINT_SCHEMA), fingerprint=np.array(fingerprint), done=done, **state)


def _load_state(path: Path, fingerprint: str, total: int) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
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


# ============================================================================== CERTIFY over a dataset
def select_indices(dataset, *, per_class: int | None = None, skip: int = 1,
                   indices: Sequence[int] | None = None) -> np.ndarray:
    """The dataset indices to certify: ``indices`` as given, else every ``skip``-th sample, keeping the
    first ``per_class`` of each class (in dataset order) when set."""
    n = len(dataset)
    if indices is not None:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size == 0 or idx.min() < 0 or idx.max() >= n or np.unique(idx).size != idx.size:
            raise DataError(f"indices must be distinct sample numbers in [0, {n}); pass e.g. range(0, {n}, 10)")
        return idx
    if skip < 1:
        raise ConfigError(f"skip must be >= 1, got {skip}")
    idx = np.arange(0, n, skip, dtype=np.int64)
    if per_class is not None:
        if per_class < 1:
            raise ConfigError(f"per_class must be >= 1, got {per_class}")
        y = dataset.y.cpu().numpy()[idx]
        keep = np.zeros(idx.size, bool)
        for c in np.unique(y):
            keep[np.flatnonzero(y == c)[:per_class]] = True
        idx = idx[keep]
    return idx


def certify(
    model: nn.Module,
    dataset,
    sigma: float = 0.25,
    *,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int = 1000,
    radii: Sequence[float] | None = None,
    seed: int = 0,
    device: str | torch.device | None = "auto",
    indices: Sequence[int] | None = None,
    per_class: int | None = None,
    skip: int = 1,
    checkpoint: str | Path | None = None,
    checkpoint_every: float = 30.0,
    progress: Progress | None = None,
    precision: str = "fp32",
    channels_last: bool | None = None,
) -> CertifyReport:
    """CERTIFY every selected sample of ``dataset`` (see the module docstring).

    Parameters
    ----------
    model: maps images in [0, 1] (and their noisy versions) to logits.
    sigma: the noise level of the smoothed classifier (L2, in [0, 1] pixel units).
    n0, n: noise draws for selecting the top class and for estimating its probability.
    alpha: failure probability of each certificate.
    batch_size: noise draws per forward pass.
    radii: radii for the tables (default 0, sigma/2, sigma, 1.5 sigma, 2 sigma).
    indices / per_class / skip: which samples (see :func:`select_indices`); default all.
    checkpoint: a file holding per-sample progress (written atomically every ``checkpoint_every``
        seconds and on interruption); an existing one for the same model, data and settings is
        resumed, one for anything else is refused. It is left in place; delete it when done.
    progress: ``(stage, done, total)`` callback, called after each block of samples.
    precision / channels_last: as the audit runs the model (:func:`robfair.audit.engine.evaluate`):
        bf16 / fp16 autocast only where the device runs it natively (the certificate is then the
        smoothed classifier's of the model at that precision, and ``meta["precision"]`` says so);
        channels_last None: on for models with 2-D convolutions (the noise and the counts are the
        same in fp32).
    """
    sigma = _positive(sigma, "sigma")
    check_draws(n0, n, batch_size)
    check_alpha(alpha)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    radii_t = tuple(float(r) for r in radii) if radii else default_radii(sigma)
    if any(not math.isfinite(r) or r < 0 for r in radii_t):
        raise ConfigError(f"radii must be finite and >= 0, got {list(radii_t)}")
    if len(dataset) == 0:
        raise DataError("the dataset is empty; check the path and the split")
    dataset.validate()
    positions = select_indices(dataset, per_class=per_class, skip=skip, indices=indices)
    dev = resolve_device(device)
    precision = check_precision(precision, dev, what="precision")
    layout = wants_channels_last(model, channels_last)
    images = (lambda pos: to_channels_last(dataset.images(pos).to(dev))) if layout else \
        (lambda pos: dataset.images(pos).to(dev))  # noqa: E731
    K = dataset.num_classes

    # run as the audit runs it: eval mode on the device, channels_last where the policy says, its own dtype,
    # its forward's faults named as its own; its training mode restored afterwards
    with evaluation_model(model, dev, layout) as net:
        _check_model(net, images(positions[:batch_size]), K, precision)  # before the first noise draw
        total = positions.size
        settings = {"sigma": sigma, "n0": int(n0), "n": int(n), "alpha": float(alpha), "batch_size": int(batch_size),
                    "seed": int(seed), "schema": CHECKPOINT_SCHEMA}
        if precision != "fp32":  # other counts: never resumed from an fp32 checkpoint (fp32's keys as before)
            settings["precision"] = precision
        ck_path = Path(checkpoint).expanduser() if checkpoint is not None else None
        fp = _fingerprint(model, dataset, settings, positions) if ck_path is not None else ""
        state = {"base_pred": np.zeros(total, np.int64), "selected": np.zeros(total, np.int64),
                 "n_top": np.zeros(total, np.int64), "p_lower": np.zeros(total, np.float64),
                 "pred": np.full(total, ABSTAIN, np.int64), "radius": np.zeros(total, np.float64)}
        done = np.zeros(total, bool)
        resumed = 0
        if ck_path is not None:
            loaded = _load_state(ck_path, fp, total)
            if loaded is not None:
                done, state = loaded
                resumed = int(done.sum())
                log.info("resuming %s: %d of %d samples already certified", ck_path, resumed, total)

        counter = NoiseCounter(net, sigma, K, batch_size=batch_size, seed=seed, device=dev, precision=precision,
                               channels_last=layout)
        block = max(1, batch_size // min(n0, n))  # samples per block: fixed by the settings, so resume is exact
        t0 = time.perf_counter()
        last_save = t0
        if progress is not None:
            progress("certify", resumed, total)
        try:
            for start in range(0, total, block):
                sl = slice(start, min(start + block, total))
                if done[sl].all():
                    continue
                pos = positions[sl]
                x = images(pos)
                with torch.no_grad(), autocast(dev, precision):
                    base = counter.note(net(x)).argmax(1)
                c0 = counter.counts(x, pos.tolist(), int(n0), _SELECT)
                c_a = c0.argmax(1)
                c1 = counter.counts(x, pos.tolist(), int(n), _ESTIMATE)
                n_a = c1.gather(1, c_a[:, None]).squeeze(1)
                n_a_np = n_a.cpu().numpy()
                counter.refuse_nonfinite(f"of dataset items {int(pos[0])}..{int(pos[-1])}")
                p_low = np.asarray(cp_lower(n_a_np, int(n), alpha), dtype=np.float64).reshape(-1)
                ok = p_low > 0.5
                state["base_pred"][sl] = base.cpu().numpy()
                state["selected"][sl] = c_a.cpu().numpy()
                state["n_top"][sl] = n_a_np
                state["p_lower"][sl] = p_low
                state["pred"][sl] = np.where(ok, state["selected"][sl], ABSTAIN)
                state["radius"][sl] = np.where(ok, np.asarray(radius_from_p(p_low, sigma)).reshape(-1), 0.0)
                done[sl] = True
                if ck_path is not None and (time.perf_counter() - last_save >= checkpoint_every):
                    _save_state(ck_path, fp, done, state)
                    last_save = time.perf_counter()
                if progress is not None:
                    progress("certify", int(done.sum()), total)
        except BaseException as e:
            if ck_path is not None and done.any() and not isinstance(e, ModelError):  # the model's fault: no resume
                _save_state(ck_path, fp, done, state)
                log.info("certify interrupted: %d of %d samples saved in %s; rerun to resume",
                            int(done.sum()), total, ck_path)
            raise
        if ck_path is not None:
            _save_state(ck_path, fp, done, state)
        seconds = time.perf_counter() - t0

    y = dataset.y.cpu().numpy()[positions]
    g = dataset.g.cpu().numpy()[positions] if dataset.g is not None else y
    meta = {
        "robfair_version": __version__, "torch_version": torch.__version__, "dataset": getattr(dataset, "name", ""),
        "n_samples": int(total), "dataset_size": len(dataset), "num_classes": K,
        "model": getattr(model, "robfair_spec", {"name": type(model).__name__}),
        "batch_size": int(batch_size), "seed": int(seed), "device": str(dev), "precision": precision,
        "channels_last": bool(layout),
        "resumed_samples": resumed, "seconds": round(seconds, 3),
        "noise_draws": counter.draws, "forwards": counter.forwards,
        "draws_per_second": round(counter.draws / seconds, 1) if seconds > 0 else None,
        "reference": "Cohen, Rosenfeld & Kolter, ICML 2019; official code locuslab/smoothing code/core.py @ bdfa2280bc07",
    }
    rep = CertifyReport(index=positions, y=y, g=g, base_pred=state["base_pred"], selected=state["selected"],
                        n_top=state["n_top"], p_lower=state["p_lower"], pred=state["pred"], radius=state["radius"],
                        class_names=list(dataset.classes),
                        group_names=list(dataset.groups) if dataset.g is not None else None,
                        sigma=sigma, n0=int(n0), n=int(n), alpha=float(alpha), radii=radii_t, meta=meta)
    rep.warnings = sanity_warnings(rep)
    for w in rep.warnings:
        log.warning(w)
    return rep


def _positive(v: Any, what: str) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number > 0, got {v!r}; pass e.g. 0.25") from None
    if not math.isfinite(f) or f <= 0:
        raise ConfigError(f"{what} must be a finite number > 0, got {v!r}; pass e.g. 0.25")
    return f


def sanity_warnings(rep: CertifyReport) -> list[str]:
    """Checks a certificate run should pass: the smoothed classifier is not near chance, abstention is
    not the rule, and nothing is certified beyond the largest radius n draws allow."""
    out: list[str] = []
    if len(rep) == 0:
        return out
    K = len(rep.class_names)
    acc = float(rep.correct.mean())
    if rep.abstain.mean() > 0.5:
        out.append(f"the smoothed classifier abstains on {100 * rep.abstain.mean():.0f}% of samples at sigma "
                   f"{rep.sigma:g}: the base model is not robust to this noise; train with gaussian-aug at this sigma")
    elif acc <= 1.5 / K:
        out.append(f"the smoothed classifier is near chance ({100 * acc:.1f}% for {K} classes) at sigma {rep.sigma:g}; "
                   "the certified numbers say little: use a model trained with noise (gaussian-aug) or a smaller sigma")
    rmax = max_radius(rep.n, rep.alpha, rep.sigma)
    if (rep.radius > rmax * (1 + 1e-9)).any():
        out.append(f"radii above the largest certifiable radius {rmax:.4f} (bug)")
    return out


# ============================================================================== consistency with an attack
class SoftSmoothed(nn.Module):
    """log E_e[softmax(f(x + sigma e))], estimated with ``m`` fresh draws per call: a differentiable
    surrogate of the smoothed classifier to attack (Salman et al. 2019's SmoothAdv objective)."""

    def __init__(self, model: nn.Module, sigma: float, m: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.model, self.sigma, self.m, self.generator = model, float(sigma), int(m), generator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        e = noise("normal", (self.m,) + tuple(x.shape), x, self.generator)
        z = self.model((x.unsqueeze(0) + self.sigma * e).reshape((self.m * b,) + tuple(x.shape[1:])))
        p = torch.softmax(z.float(), dim=1).reshape(self.m, b, -1).mean(0)
        return p.clamp_min(1e-20).log()


def attack_check(model: nn.Module, dataset, rep: CertifyReport, radius: float, *, attack: str = "pgd20-l2",
                 per_class: int = 20, noise_samples: int = 32, n_predict: int = 1000, alpha: float | None = None,
                 batch_size: int = 1000, seed: int = 0, device: str | torch.device | None = "auto",
                 level: float = 0.001) -> dict[str, Any]:
    """Sanity check of the certificates against an L2 attack on the *smoothed* classifier at ``radius``.

    On up to ``per_class`` certified samples of each class (the first in order): L2 PGD on
    :class:`SoftSmoothed` (``noise_samples`` draws per step), then PREDICT (``n_predict`` draws) at the
    adversarial point. A sample certified at ``radius`` whose attacked smoothed prediction is a definite
    wrong class contradicts its certificate; a few are expected (each certificate and each PREDICT fails
    with probability alpha). Warnings (appended to ``rep.warnings``) when the contradictions exceed
    what that allows (binomial tail below ``level``), or when a class's certified accuracy is above
    its empirical robust accuracy beyond their Wilson intervals. Returns the numbers per class."""
    radius = _positive(radius, "check radius")
    atk = get_attack(attack)
    if getattr(atk, "norm", None) != "l2":
        raise AttackError(f"the certificate check needs an L2 attack, got '{attack}'; pass e.g. pgd20-l2")
    alpha = rep.alpha if alpha is None else float(alpha)
    dev = resolve_device(device)
    pos_of = {int(k): i for i, k in enumerate(rep.index)}
    chosen: list[int] = []
    for c in range(len(rep.class_names)):
        members = np.flatnonzero(rep.y == c)
        chosen.extend(members[:per_class].tolist())
    chosen_a = np.asarray(sorted(chosen), dtype=np.int64)
    if chosen_a.size == 0:
        raise DataError("no certified samples to check; run certify first")
    ds_idx = rep.index[chosen_a]
    assert all(int(k) in pos_of for k in ds_idx)
    was = model.training
    model.eval()
    model = model.to(dev)
    gen = make_generator(dev, noise_seed(seed, 0, 3))
    soft = SoftSmoothed(model, rep.sigma, noise_samples, gen)
    adv_pred = np.empty(chosen_a.size, dtype=np.int64)
    step = max(1, batch_size // noise_samples)
    t0 = time.perf_counter()
    try:
        for s in range(0, chosen_a.size, step):
            idx = ds_idx[s:s + step]
            x = dataset.images(idx).to(dev)
            y = torch.as_tensor(rep.y[chosen_a[s:s + step]], device=dev)
            x_adv = atk(soft, x, y, radius, generator=gen, early_exit=False)
            adv_pred[s:s + step] = predict(model, x_adv, rep.sigma, n=n_predict, alpha=alpha, batch_size=batch_size,
                                           seed=seed + 1, keys=idx.tolist(), device=dev)
    finally:
        model.train(was)
    y_c = rep.y[chosen_a]
    cert = rep.certified(radius)[chosen_a]
    robust = adv_pred == y_c
    contra = cert & (adv_pred != ABSTAIN) & (adv_pred != y_c)
    p_fail = min(1.0, 2 * alpha)
    warnings: list[str] = []
    n_cert, n_contra = int(cert.sum()), int(contra.sum())
    tail = float(binom.sf(n_contra - 1, n_cert, p_fail)) if n_contra else 1.0
    if n_contra and tail < level:
        warnings.append(f"certificate check at radius {radius:g}: {attack} on the smoothed classifier found a wrong "
                        f"prediction for {n_contra} of {n_cert} samples certified at that radius (expected at most "
                        f"about {n_cert * p_fail:.1f}); the certificates or the model's noise handling are suspect")
    rows = []
    for c, name in enumerate(rep.class_names):
        m = y_c == c
        k = int(m.sum())
        lo_c, _ = wilson(int(cert[m].sum()), k)
        _, hi_r = wilson(int(robust[m].sum()), k)
        row = {"class": name, "n": k, "certified": float(cert[m].mean()) if k else math.nan,
               "empirical_robust": float(robust[m].mean()) if k else math.nan, "contradictions": int(contra[m].sum())}
        rows.append(row)
        if k and lo_c > hi_r:
            warnings.append(f"certificate check at radius {radius:g}: class {name} certified accuracy "
                            f"{100 * row['certified']:.1f}% exceeds its robust accuracy under {attack} on the smoothed "
                            f"classifier ({100 * row['empirical_robust']:.1f}%) beyond sampling error")
    result = {"radius": radius, "attack": attack, "noise_samples": int(noise_samples), "n_predict": int(n_predict),
              "n": int(chosen_a.size), "certified": float(cert.mean()), "empirical_robust": float(robust.mean()),
              "n_certified": n_cert, "n_robust": int(robust.sum()), "contradictions": n_contra,
              "certified_abstained": int((cert & (adv_pred == ABSTAIN)).sum()),
              "contradiction_tail_p": tail, "per_class": rows, "warnings": warnings,
              "seconds": round(time.perf_counter() - t0, 3)}
    rep.warnings.extend(warnings)
    rep.meta.setdefault("attack_check", []).append({k: v for k, v in result.items() if k != "warnings"})
    for w in warnings:
        log.warning(w)
    return result


def check_line(chk: dict[str, Any]) -> str:
    """One sentence on an :func:`attack_check` result: certified against empirical robust accuracy on
    the same samples, the relation that holds (<, = or >) and what it means.

    Certified accuracy is a lower bound on the smoothed classifier's robust accuracy (each certificate
    fails with probability alpha) and the attack's is an upper bound (an attack can miss), so
    certified <= empirical is the expected order. Certified above empirical means more certified
    samples were called not robust at the attacked point than uncertified ones robust: PREDICT there
    returned a definite wrong class (a contradicted certificate) or abstained, its ``n_predict``
    fresh draws unable to separate the top two classes. The certificate does not rule an abstention
    out (near the edge of the certified ball the top class may be barely ahead), so abstentions are a
    limit of PREDICT's draws, not evidence against the certificate; contradictions are, beyond the
    rate the failure probabilities allow (the check's warning)."""
    n, k_cert, k_rob = int(chk["n"]), int(chk["n_certified"]), int(chk["n_robust"])
    contra, abst = int(chk["contradictions"]), int(chk["certified_abstained"])
    rel, meaning = ("<", "the expected order: a certificate is a lower bound on robust accuracy, an attack an upper "
                    "one") if k_cert < k_rob else ("=", "the lower and the upper bound meet") if k_cert == k_rob else \
        (">", "more certified samples were not robust at the attacked point than uncertified ones were robust: "
              "contradicted certificates (a definite wrong class) or PREDICT abstaining there (its "
              f"{chk['n_predict']} draws could not separate the top two classes: a limit of PREDICT's draws, "
              "not a contradiction)")
    return (f"check at radius {chk['radius']:g} ({chk['attack']} on the smoothed classifier, {n} samples): "
            f"certified {100 * k_cert / n:.1f}% ({k_cert}) {rel} empirical robust {100 * k_rob / n:.1f}% ({k_rob}), "
            f"{meaning}; {contra} contradicted certificates, {abst} certified samples where PREDICT abstained")


# ============================================================================== the model source
def load_model(source: str | Path, **kwargs: Any) -> tuple[nn.Module, dict[str, Any]]:
    """The model behind ``--model``: (module in eval mode, meta), from any source ``robfair audit``
    accepts (:func:`robfair.models.load_any`: robfair checkpoints, TorchScript, torch.export, state
    dicts / safetensors with ``arch=``, ``robustbench:NAME``)."""
    return load_any(source, **kwargs)


class _CallableModule(types.ModuleType):
    """``robfair.certify`` is both this module and the function (as ``robfair.audit``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> CertifyReport:
        return certify(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
