"""CertifyReport: per-sample CERTIFY outcomes and everything derived from them (tables, GroupReports
per radius, curves), and its certify.json."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError
from ..inert import csv_cell
from ..metrics import GroupReport, wilson
from ..utils import atomic_path, input_file, to_jsonable
from .smoothing import ABSTAIN, max_radius

log = logging.getLogger(__name__)

SCHEMA = "robfair.certify/1"
#: the extra "class" of a GroupReport that counts abstained / not-certified predictions
NOT_CERTIFIED = "(not certified)"


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
