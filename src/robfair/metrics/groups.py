"""``GroupReport``: per-group robustness of one model under one attack at one epsilon.

    rep = GroupReport.from_outcomes(y=y, clean_pred=p, adv_pred=p_adv, class_names=names,
                                    attack="pgd20", eps=8/255)
    rep.by_group            # n, clean_acc, rob_acc, std_err, bndy_err, rob_err (+ Wilson 95% _lo/_hi)
    rep.aggregates()        # avg, class_mean, worst, best, gap, sd, nsd, ratio, tail_k, gini, ...
    rep.bootstrap()         # intervals for the worst group and the gap
    rep.chi2()              # do the groups differ at all?
    rep_all = GroupReport.merge_all([rep_rank0, rep_rank1])   # counts add: exact

Definitions (spec section 1), per group g, with c = clean prediction correct, a = prediction under
attack correct: ``std_err = P[not c]``, ``rob_err = P[not (c and a)]`` (a clean mistake is always a
robust error), ``bndy_err = P[c and not a]``, so ``rob_err = std_err + bndy_err``. Everything is
computed from integer counts (:class:`~robfair.metrics.counts.Counts`), never from differences of
rounded rates. ``compat_bndy_err`` = clean acc - adv acc is the FRL code's definition, kept only for
comparison: it goes negative when the attack "repairs" clean mistakes.

Why one module: GroupReport is one class: its constructors, rates, aggregates, bootstrap
and JSON.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError, RobfairError
from ..utils import parse_eps, to_jsonable
from .counts import Counts, as_numpy
from .stats import _HIGHER_IS_BETTER, RATES, _safe_ratio, dafa_rho, stratified_bootstrap, wilson
from .stats import chi2_contingency, chi2_sf  # noqa: F401 (re-exported: older imports name them here)
from .views import ReportViews

__all__ = ["GroupReport", "wilson", "seed_summary", "SCHEMA", "RATES"]

SCHEMA = "robfair.group-report/1"


# ---------------------------------------------------------------------------------------- helpers
def _div(k: Any, n: Any) -> np.ndarray:
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    out = np.full(np.broadcast(k, n).shape, np.nan)
    np.divide(k, n, out=out, where=n > 0)
    return out


def _rate_counts(n: np.ndarray, c: np.ndarray, ca: np.ndarray, ra: np.ndarray) -> dict[str, np.ndarray]:
    """Numerator counts of every rate (denominator: n)."""
    return {
        "clean_acc": c, "rob_acc": ca, "std_err": n - c, "bndy_err": c - ca, "rob_err": n - ca,
        "adv_acc": ca + ra,
    }


def _rates_frame(n, c, ca, ra, index: pd.Index) -> pd.DataFrame:
    cols: dict[str, Any] = {"n": np.asarray(n, dtype=np.int64)}
    for name, k in _rate_counts(n, c, ca, ra).items():
        lo, hi = wilson(k, n)
        cols[name] = _div(k, n)
        cols[f"{name}_lo"] = lo
        cols[f"{name}_hi"] = hi
    cols["compat_bndy_err"] = _div(c - ca - ra, n)  # FRL code: clean acc - adv acc
    return pd.DataFrame(cols, index=index)


def _gini(x: np.ndarray) -> float:
    """Gini coefficient: mean absolute difference / (2 * mean); NaN when the mean is 0."""
    m = x.mean()
    if x.size == 0 or m == 0:
        return math.nan
    return float(np.abs(x[:, None] - x[None, :]).mean() / (2 * m))


def _as_labels(x: Any, what: str) -> np.ndarray:
    arr = as_numpy(x)
    if arr.ndim == 2 and what != "groups":
        raise DataError(f"{what} has shape {tuple(arr.shape)}; pass one class id per sample, e.g. logits.argmax(1)")
    if arr.ndim != 1:
        raise DataError(f"{what} must be a 1-D array of ids, got shape {tuple(arr.shape)}; flatten it or pass one id per sample")
    if arr.size and arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise DataError(f"{what} must hold integer ids, got dtype {arr.dtype}; pass class/group ids, not scores or booleans")
    return arr.astype(np.int64, copy=False)


def _names(names: Iterable[Any], what: str) -> tuple[str, ...]:
    if isinstance(names, str):
        raise DataError(f"{what} must be a list of names, got the string {names!r}; pass e.g. ['cat', 'dog']")
    out = tuple(str(n) for n in names)
    if not out:
        raise DataError(f"{what} is empty; pass one name per class/group")
    dup = sorted({n for n in out if out.count(n) > 1})
    if dup:
        raise DataError(f"{what} has duplicate names {dup}; pass unique names")
    return out


def _eps(eps: Any) -> float | str | None:
    """A number (``8/255`` strings parse), None, or a non-numeric label such as ``"per-sample"``."""
    if eps is None:
        return None
    if isinstance(eps, str):
        try:
            return parse_eps(eps)
        except RobfairError:
            if not eps.strip() or any(ch.isdigit() for ch in eps):
                raise  # a mistyped number, not a label
            return eps.strip()
    if hasattr(eps, "detach") or isinstance(eps, (np.ndarray, np.generic)):
        arr = as_numpy(eps).ravel()
        if arr.size == 0 or not np.all(arr == arr[0]):
            raise DataError("eps must be one number for a report; pass the nominal radius or a label such as 'per-sample'")
        # float32 8/255 -> the shortest decimal that rounds to it, so it matches the float64 written in configs
        eps = float(str(arr[0])) if arr.dtype.kind == "f" else float(arr[0])
    return parse_eps(eps)


def _same_eps(a: float | str | None, b: float | str | None) -> bool:
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


# ---------------------------------------------------------------------------------------- report
@dataclass(frozen=True, eq=False)
class GroupReport(ReportViews):
    """Per-group (and per-class) robustness of one model under one attack at one eps.

    Built from counts only, so reports merge exactly (``merge``/``+``) and ``from_json`` restores
    them bit for bit. Rates are NaN for groups without samples; aggregates skip those groups."""

    counts: Counts
    class_names: tuple[str, ...]
    group_names: tuple[str, ...]
    attack: str = ""
    eps: float | str | None = None  # the nominal radius, or a label such as "per-sample"

    def __post_init__(self) -> None:
        object.__setattr__(self, "class_names", tuple(self.class_names))
        object.__setattr__(self, "group_names", tuple(self.group_names))
        object.__setattr__(self, "attack", str(self.attack))
        object.__setattr__(self, "eps", _eps(self.eps))
        G, K = self.counts.shape
        if (len(self.group_names), len(self.class_names)) != (G, K):
            raise DataError(
                f"counts are {G} groups x {K} classes but {len(self.group_names)} group names and "
                f"{len(self.class_names)} class names were given; pass one name per group and class"
            )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_outcomes(
        cls, *, y: Any, clean_pred: Any, adv_pred: Any, groups: Any = None, class_names: Sequence[str],
        group_names: Sequence[str] | None = None, attack: str = "", eps: Any = None,
    ) -> GroupReport:
        """Count per-sample outcomes (numpy arrays, torch tensors on any device, or lists).

        ``y``, ``clean_pred``, ``adv_pred``: class ids in [0, K) with K = len(class_names).
        ``groups``: group ids in [0, G); None -> the groups are the classes. ``group_names``
        default to the classes (groups None) or to "0".."G-1" with G = max id + 1 (pass them
        explicitly when merging shards, which may not all contain the last group)."""
        classes = _names(class_names, "class_names")
        K = len(classes)
        y_a = _as_labels(y, "y")
        clean = _as_labels(clean_pred, "clean_pred")
        adv = _as_labels(adv_pred, "adv_pred")
        N = len(y_a)
        for what, arr in (("clean_pred", clean), ("adv_pred", adv)):
            if len(arr) != N:
                raise DataError(f"{what} has {len(arr)} entries but y has {N}; pass one prediction per sample")
        for what, arr in (("y", y_a), ("clean_pred", clean), ("adv_pred", adv)):
            if N and (arr.min() < 0 or arr.max() >= K):
                bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
                raise DataError(f"{what} contains class id {bad} outside [0, {K}) for {K} class names; pass all class names or fix the labels")
        if groups is None:
            if group_names is not None and _names(group_names, "group_names") != classes:
                raise DataError("group_names given without groups; pass groups= ids too, or drop group_names to group by class")
            g_a, gnames = y_a, classes
        else:
            g_a = _as_labels(groups, "groups")
            if len(g_a) != N:
                raise DataError(f"groups has {len(g_a)} entries but y has {N}; pass one group id per sample")
            if N and g_a.min() < 0:
                raise DataError(f"groups contains id {int(g_a.min())} < 0; pass group ids in [0, number of groups)")
            if group_names is None:
                if N == 0:
                    raise DataError("no samples and no group_names; pass group_names to build an empty report")
                gnames = tuple(str(i) for i in range(int(g_a.max()) + 1))
            else:
                gnames = _names(group_names, "group_names")
                if N and g_a.max() >= len(gnames):
                    raise DataError(f"groups contains id {int(g_a.max())} but only {len(gnames)} group names were given; pass all group names")
        counts = Counts.from_arrays(y_a, clean, adv, g_a, len(gnames), K)
        return cls(counts, classes, gnames, attack=attack, eps=eps)

    def merge(self, other: GroupReport) -> GroupReport:
        """Exact merge of two shards of the same evaluation (same names, attack and eps)."""
        if not isinstance(other, GroupReport):
            raise DataError(f"can only merge GroupReport objects, got {type(other).__name__}; pass a GroupReport")
        for what in ("class_names", "group_names", "attack"):
            if getattr(self, what) != getattr(other, what):
                raise DataError(f"cannot merge reports with different {what} ({getattr(self, what)!r} vs {getattr(other, what)!r}); merge shards of the same evaluation only")
        if not _same_eps(self.eps, other.eps):
            raise DataError(f"cannot merge reports at different eps ({self.eps} vs {other.eps}); merge shards of the same evaluation only")
        return GroupReport(self.counts + other.counts, self.class_names, self.group_names, self.attack, self.eps)

    __add__ = merge

    @classmethod
    def merge_all(cls, reports: Iterable[GroupReport]) -> GroupReport:
        """Merge shards (batches, DDP ranks, seeds of the same model) into one report."""
        reports = list(reports)
        if not reports:
            raise DataError("merge_all got no reports; pass at least one GroupReport")
        out = reports[0]
        for r in reports[1:]:
            out = out.merge(r)
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupReport):
            return NotImplemented
        return (
            self.counts == other.counts and self.class_names == other.class_names
            and self.group_names == other.group_names and self.attack == other.attack
            and (self.eps == other.eps)
        )

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ tables
    @property
    def num_groups(self) -> int:
        return len(self.group_names)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def n(self) -> int:
        """Total number of samples."""
        return int(self.counts.n.sum())

    @property
    def groups_are_classes(self) -> bool:
        """True when the groups are the classes (every sample's group is its label)."""
        n = self.counts.n
        return self.group_names == self.class_names and not (n - np.diag(np.diag(n))).any()

    @property
    def by_group(self) -> pd.DataFrame:
        """One row per group: n, clean_acc, rob_acc, std_err, bndy_err, rob_err, adv_acc (each with
        Wilson 95% ``_lo``/``_hi``) and ``compat_bndy_err`` (FRL code's clean acc - adv acc)."""
        return _rates_frame(*self.counts.summed(1), index=pd.Index(self.group_names, name="group"))

    @property
    def by_class(self) -> pd.DataFrame:
        """As :attr:`by_group`, one row per class (summed over groups)."""
        return _rates_frame(*self.counts.summed(0), index=pd.Index(self.class_names, name="class"))

    @property
    def by_cell(self) -> pd.DataFrame:
        """As :attr:`by_group`, one row per non-empty (group, class) cell (long format)."""
        gi, ki = np.nonzero(self.counts.n)
        c = self.counts
        index = pd.MultiIndex.from_arrays(
            [np.asarray(self.group_names, dtype=object)[gi], np.asarray(self.class_names, dtype=object)[ki]],
            names=["group", "class"],
        )
        return _rates_frame(c.n[gi, ki], c.clean[gi, ki], c.robust[gi, ki], c.repaired[gi, ki], index=index)

    @property
    def overall(self) -> dict[str, float]:
        """Overall (all samples) values of every rate, fairlearn-style."""
        n, c, ca, ra = self.counts.summed(None)
        out: dict[str, Any] = {"n": int(n)}
        out.update({k: float(_div(v, n)) for k, v in _rate_counts(n, c, ca, ra).items()})
        out["compat_bndy_err"] = float(_div(c - ca - ra, n))
        return out

    def overall_counts(self) -> dict[str, int]:
        """Exact numerator counts of every rate over all samples, and ``n`` (the denominator)."""
        n, c, ca, ra = self.counts.summed(None)
        return {"n": int(n), **{k: int(v) for k, v in _rate_counts(n, c, ca, ra).items()}}

    @property
    def adv_acc(self) -> pd.Series:
        """P[a | g]: accuracy on adversarial inputs regardless of clean correctness (reference only)."""
        return self.by_group["adv_acc"]

    @property
    def compat_bndy_err(self) -> pd.Series:
        """FRL-code compatibility: clean acc - adv acc per group. Can be negative; prefer bndy_err."""
        return self.by_group["compat_bndy_err"]

    def _group_values(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, names) of one rate over the non-empty groups."""
        if metric not in RATES and metric != "adv_acc":
            raise ConfigError(f"unknown metric {metric!r}; choose one of: {', '.join(RATES + ('adv_acc',))}")
        n, c, ca, ra = self.counts.summed(1)
        keep = n > 0
        vals = _div(_rate_counts(n, c, ca, ra)[metric], n)[keep]
        return vals, np.asarray(self.group_names, dtype=object)[keep]

    # ------------------------------------------------------------------ aggregates
    def aggregates(self, k: int = 3) -> dict[str, dict[str, Any]]:
        """For each rate: ``avg`` (over samples), ``class_mean`` (mean of group values), ``worst``
        (min accuracy / max error), ``best``, ``gap`` = |best - worst|, ``sd`` (ddof=0), ``nsd`` =
        sd / class_mean, ``ratio`` = worst / best, ``tail_k`` (mean of the k worst groups), ``gini``,
        ``parity`` = max_g |value_g - avg| (Tran's accuracy parity), fairlearn's ``group_min``,
        ``group_max``, ``difference``, and ``worst_group`` / ``best_group`` names.
        Ratios are NaN when undefined; groups without samples are skipped."""
        if int(k) < 1:
            raise ConfigError(f"k must be >= 1, got {k}; pass the number of worst groups to average")
        overall = self.overall
        out: dict[str, dict[str, Any]] = {}
        for metric in RATES:
            vals, names = self._group_values(metric)
            hib = metric in _HIGHER_IS_BETTER
            if vals.size == 0:
                out[metric] = {"avg": math.nan, "class_mean": math.nan, "worst": math.nan, "best": math.nan,
                               "gap": math.nan, "sd": math.nan, "nsd": math.nan, "ratio": math.nan,
                               "tail_k": math.nan, "k": int(k), "gini": math.nan, "parity": math.nan,
                               "group_min": math.nan, "group_max": math.nan, "difference": math.nan,
                               "worst_group": None, "best_group": None, "num_groups": 0}
                continue
            order = np.argsort(vals if hib else -vals, kind="stable")  # worst first
            worst, best = float(vals[order[0]]), float(vals[order[-1]])
            mean = float(vals.mean())
            sd = float(vals.std(ddof=0))
            out[metric] = {
                "avg": overall[metric],
                "class_mean": mean,
                "worst": worst,
                "best": best,
                "gap": abs(best - worst),
                "sd": sd,
                "nsd": _safe_ratio(sd, mean),
                "ratio": _safe_ratio(worst, best),
                "tail_k": float(vals[order[: int(k)]].mean()),
                "k": int(k),
                "gini": _gini(vals),
                "parity": float(np.abs(vals - overall[metric]).max()),
                "group_min": float(vals.min()),
                "group_max": float(vals.max()),
                "difference": float(vals.max() - vals.min()),
                "worst_group": str(names[order[0]]),
                "best_group": str(names[order[-1]]),
                "num_groups": int(vals.size),
            }
        return out

    def summary_table(self, k: int = 3) -> pd.DataFrame:
        """:meth:`aggregates` as a frame: one row per rate, one column per statistic."""
        return pd.DataFrame(self.aggregates(k)).T

    def rho(self, baseline: GroupReport, metric: str = "rob_acc") -> float:
        """DAFA's rho = (worst - worst_base)/worst_base + (avg - avg_base)/avg_base (robust accuracy by
        default); positive means better than the baseline. NaN when a baseline value is 0."""
        a, b = self.aggregates()[metric], baseline.aggregates()[metric]
        return dafa_rho(a["worst"], b["worst"], a["avg"], b["avg"])

    def equal_opportunity(self, positive: int | str = 1) -> dict[str, Any]:
        """Per-group true-positive rate of class ``positive`` (clean and robust) and the largest
        difference between groups (Tran's equal opportunity; for binary tasks, or one-vs-rest)."""
        ki = self.class_names.index(positive) if isinstance(positive, str) and positive in self.class_names else positive
        if not isinstance(ki, (int, np.integer)) or not 0 <= ki < self.num_classes:
            raise ConfigError(f"positive class {positive!r} is not one of {list(self.class_names)}; pass a class name or id")
        c = self.counts
        n = c.n[:, ki]
        keep = n > 0
        out: dict[str, Any] = {"positive": self.class_names[ki]}
        for name, k in (("clean", c.clean[:, ki]), ("robust", c.robust[:, ki])):
            tpr = _div(k, n)
            out[f"{name}_tpr"] = dict(zip(self.group_names, tpr.tolist()))
            out[f"{name}_difference"] = float(np.ptp(tpr[keep])) if keep.any() else math.nan
        return out

    # ------------------------------------------------------------------ uncertainty
    def bootstrap(self, n: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
        """Stratified bootstrap (resample each group's samples with replacement) of the worst group,
        the gap and the average, for every rate.

        Exact from the counts: resampling the n_g samples of group g is a multinomial draw over its
        outcome categories (clean, adv) in {11, 10, 01, 00}. For each statistic: ``plug_in`` (the
        observed value), ``mean`` of the replicates, ``bias`` = mean - plug_in, ``corrected`` =
        plug_in - bias (the plug-in worst group is biased: the extreme of noisy estimates), and the
        percentile interval ``lo``/``hi``. ``worst_group_stability`` is the share of replicates whose
        worst group is the observed one."""
        return stratified_bootstrap(self.counts.categories(axis=1), n=n, seed=seed, level=level)

    def chi2(self, correction: bool = True) -> dict[str, dict[str, Any]]:
        """Chi-square tests of independence (scipy ``chi2_contingency``) that the groups differ:
        ``robust``: group x {robust, not}; ``clean``: group x {clean correct, not}; ``boundary``:
        among clean-correct samples, group x {robust, boundary error}. Each gives ``statistic``,
        ``dof``, ``p_value`` and a ``note``; a degenerate table (one non-empty group, or one outcome
        for everybody) gives statistic 0 and p = 1 with a note instead of an error."""
        n, c, ca, _ = self.counts.summed(1)
        tables = {
            "robust": np.stack([ca, n - ca], 1),
            "clean": np.stack([c, n - c], 1),
            "boundary": np.stack([ca, c - ca], 1),
        }
        out: dict[str, dict[str, Any]] = {}
        for name, table in tables.items():
            table = table[table.sum(1) > 0]
            rows = table.shape[0]
            res = {"statistic": 0.0, "dof": max(rows - 1, 0), "p_value": 1.0, "note": ""}
            if rows < 2:
                res["note"] = "fewer than two groups with samples; nothing to compare"
            elif (table.sum(0) == 0).any():
                res["note"] = "every sample has the same outcome; the groups cannot differ"
            else:
                stat, pval, dof, expected = chi2_contingency(table, correction=correction)
                res.update(statistic=float(stat), dof=int(dof), p_value=float(pval))
                if (expected < 5).any():
                    res["note"] = "some expected counts are below 5; the chi-square approximation is rough"
            out[name] = res
        return out

    # ------------------------------------------------------------------ confusion
    def confusion(self, adv: bool = False) -> np.ndarray:
        """(K, K) counts, true class (rows) -> predicted class (columns), clean or adversarial."""
        return np.array(self.counts.confusion_adv if adv else self.counts.confusion_clean)

    def cfps(self, adv: bool = True) -> np.ndarray:
        """Share of all errors that were predicted *as* each class (length K; "attractor" classes).
        NaN everywhere when there are no errors."""
        m = self.confusion(adv).astype(float)
        np.fill_diagonal(m, 0)
        return _div(m.sum(0), np.full(m.shape[0], m.sum()))

    # ------------------------------------------------------------------ export
    def to_frame(self) -> pd.DataFrame:
        """:attr:`by_group` with ``attack`` and ``eps`` columns (concatenate across attacks/eps)."""
        df = self.by_group
        df.insert(0, "eps", np.nan if self.eps is None else self.eps)  # a float, or the label
        df.insert(0, "attack", self.attack)
        return df

    def to_json(self, bootstrap: int = 0, seed: int = 0) -> dict[str, Any]:
        """A plain JSON-able dict. ``from_json`` rebuilds the report from the names and counts alone;
        the derived metrics (and bootstrap intervals when ``bootstrap > 0``) are for readers."""
        frame = lambda df: {str(i): row for i, row in df.to_dict(orient="index").items()}  # noqa: E731
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "attack": self.attack,
            "eps": self.eps,
            "class_names": list(self.class_names),
            "group_names": list(self.group_names),
            "counts": self.counts.to_lists(),
            "overall": self.overall,
            "by_group": frame(self.by_group),
            "by_class": frame(self.by_class),
            "aggregates": self.aggregates(),
            "chi2": self.chi2(),
        }
        if bootstrap:
            d["bootstrap"] = self.bootstrap(n=bootstrap, seed=seed)
        return to_jsonable(d)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GroupReport:
        """Rebuild a report from :meth:`to_json` output (counts and names only; derived values ignored)."""
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise DataError(f"not a GroupReport JSON (schema {got!r}, expected {SCHEMA!r}); pass the dict written by GroupReport.to_json()")
        try:
            return cls(Counts.from_lists(d["counts"]), d["class_names"], d["group_names"],
                       attack=d.get("attack", ""), eps=d.get("eps"))
        except KeyError as e:
            raise DataError(f"GroupReport JSON lacks {e}; pass the dict written by GroupReport.to_json()") from None

    def __repr__(self) -> str:
        eps = f"{self.eps:.4g}" if isinstance(self.eps, float) else repr(self.eps)
        head = f"GroupReport(attack={self.attack!r}, eps={eps}, n={self.n}, groups={self.num_groups}, classes={self.num_classes}"
        if self.n == 0:
            return head + ")"
        a = self.aggregates()["rob_acc"]
        return head + f", rob_acc avg={a['avg']:.4f} worst={a['worst']:.4f} ({a['worst_group']}))"


def seed_summary(reports: Sequence[GroupReport], metric: str = "rob_acc") -> pd.DataFrame:
    """Across runs (seeds) of one setting: per group mean, sd (ddof=1; NaN for one run), min, max of
    ``metric`` and ``worst_freq``, the share of runs in which the group was the worst one."""
    reports = list(reports)
    if not reports:
        raise DataError("seed_summary got no reports; pass one GroupReport per seed")
    names = reports[0].group_names
    if any(r.group_names != names for r in reports):
        raise DataError("seed_summary needs reports over the same groups; pass runs of one setting only")
    table = np.stack([r.by_group[metric].to_numpy() for r in reports])  # (S, G)
    worst = [r.aggregates()[metric]["worst_group"] for r in reports]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # groups empty in every run -> NaN
        return pd.DataFrame(
            {
                "mean": np.nanmean(table, 0),
                "sd": np.nanstd(table, 0, ddof=1) if len(reports) > 1 else np.full(len(names), np.nan),
                "min": np.nanmin(table, 0),
                "max": np.nanmax(table, 0),
                "worst_freq": [worst.count(g) / len(reports) for g in names],
            },
            index=pd.Index(names, name="group"),
        )
