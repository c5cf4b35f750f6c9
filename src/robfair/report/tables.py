"""The papers' table layouts over a set of runs, as display strings (HTML, Markdown) and numbers (CSV).

    entries = [RunEntry(name=..., group=..., seed=..., audit=AuditReport, config={...}), ...]
    tables = paper_tables(entries, baseline="trades", n_boot=1000)
    to_markdown(tables); write_csvs(tables, "report_tables/")

Runs that differ only by their seed form one *setting* (``RunEntry.group``). A setting with one run
shows ``value [95% interval]`` (Wilson for averages, stratified bootstrap for worst and gap); a
setting with several seeds shows ``mean ± sd`` over seeds and how often its worst class changes.

Layouts: ``summary`` (CFA / DAFA: clean and robust average / worst, gap, DAFA's rho against a
baseline, Pareto front), ``frl`` (FRL: average and worst-class standard, boundary and robust error),
``benz-clean`` / ``benz-robust`` (Benz: accuracy per class, one table per class list), ``seeds``
(seed spread), ``eps`` (robust accuracy vs eps, when runs have an eps sweep), ``warnings``.

Why one module: every table layout (summary, FRL, Benz, leaderboard, probe) groups runs
the same way and formats intervals the same way, and the layouts are read side by side.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from ..errors import RobfairError
from ..inert import csv_cell, plain, visible
from ..metrics import seed_summary
from ..metrics.stats import dafa_rho, wilson
from ..utils import atomic_path
from . import reliability as rel


# ============================================================================== data model
@dataclass
class RunEntry:
    """One finished run as the report sees it."""

    name: str
    audit: Any  # robfair.auditing.AuditReport
    group: str = ""
    seed: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    eps_sweep: list[Any] | None = None  # AuditReports at increasing eps
    path: Path | None = None
    certify: dict[str, Any] | None = None  # certify.json (robfair certify), when the run has one

    def __post_init__(self) -> None:
        self.group = self.group or self.name

    @property
    def report(self) -> Any:
        """The headline GroupReport (worst case over the audit's attacks)."""
        return getattr(self.audit, "main", self.audit)


@dataclass
class Setting:
    """Runs of one configuration that differ only by seed."""

    name: str
    runs: list[RunEntry]

    @property
    def reports(self) -> list[Any]:
        return [r.report for r in self.runs]

    @property
    def config(self) -> dict[str, Any]:
        return self.runs[0].config

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.runs[0].report.group_names)

    def label(self, key: str, default: str = "") -> str:
        v = self.config.get(key, default)
        return "" if v is None else str(v)


@dataclass
class Table:
    """A table in display form (``rows`` of strings; ``emph`` marks cells to highlight as bad, e.g.
    the worst class, ``good`` as good, e.g. on the Pareto front) and in number form (``data``,
    written as CSV)."""

    key: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    data: pd.DataFrame
    note: str = ""
    emph: list[list[bool]] = field(default_factory=list)
    good: list[list[bool]] = field(default_factory=list)
    #: how the page lays it out: "" (cells on one line, ``value [lo, hi]`` split over two), "text"
    #: (sentences: cells wrap, nothing split), "narrow" (many columns: headers wrap)
    layout: str = ""

    def __post_init__(self) -> None:
        if not self.emph:
            self.emph = [[False] * len(r) for r in self.rows]
        if not self.good:
            self.good = [[False] * len(r) for r in self.rows]


def group_settings(entries: Iterable[RunEntry]) -> list[Setting]:
    """Settings in first-seen order, each with its runs sorted by seed; seeds must be unique per setting."""
    groups: dict[str, list[RunEntry]] = {}
    for e in entries:
        groups.setdefault(e.group, []).append(e)
    out = []
    for name, runs in groups.items():
        seeds = [r.seed for r in runs if r.seed is not None]
        if len(seeds) != len(set(seeds)):
            dup = sorted({s for s in seeds if seeds.count(s) > 1})
            raise RobfairError(f"setting '{name}' has several runs with seed {dup[0]}; give the runs distinct "
                               "names/groups or report them separately")
        out.append(Setting(name, sorted(runs, key=lambda r: (r.seed is None, r.seed or 0, r.name))))
    return out


# ============================================================================== formatting
def pct(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{100 * float(v):.{digits}f}"


def with_ci(v: Any, lo: Any, hi: Any) -> str:
    if lo is None or hi is None or any(isinstance(x, float) and not math.isfinite(x) for x in (lo, hi)):
        return pct(v)
    return f"{pct(v)} [{pct(lo)}, {pct(hi)}]"


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    a = np.asarray([v for v in values if v is not None], dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return math.nan, math.nan
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else math.nan


def pm(mean: float, sd: float) -> str:
    return pct(mean) if not math.isfinite(sd) else f"{pct(mean)} ± {pct(sd)}"


def _wilson_overall(rep: Any, metric: str) -> tuple[float, float]:
    """Wilson interval of a rate over all samples, from the exact counts."""
    k = rep.overall_counts()
    return wilson(k[metric], k["n"])


# ============================================================================== statistics per setting
#: (label, rate, statistic) of the summary layout
SUMMARY_STATS = (("clean avg", "clean_acc", "avg"), ("clean worst", "clean_acc", "worst"),
                 ("robust avg", "rob_acc", "avg"), ("robust worst", "rob_acc", "worst"),
                 ("robust gap", "rob_acc", "gap"))
FRL_STATS = (("Avg Std", "std_err", "avg"), ("Worst Std", "std_err", "worst"),
             ("Avg Bndy", "bndy_err", "avg"), ("Worst Bndy", "bndy_err", "worst"),
             ("Avg Rob", "rob_err", "avg"), ("Worst Rob", "rob_err", "worst"))


class _Stats:
    """Aggregates of each run of a setting, bootstrap of single runs, cached."""

    def __init__(self, n_boot: int) -> None:
        self.n_boot = n_boot
        self._agg: dict[int, dict] = {}
        self._boot: dict[int, dict] = {}

    def agg(self, rep: Any) -> dict:
        if id(rep) not in self._agg:
            self._agg[id(rep)] = rep.aggregates()
        return self._agg[id(rep)]

    def boot(self, rep: Any) -> dict:
        if id(rep) not in self._boot:
            self._boot[id(rep)] = rep.bootstrap(n=self.n_boot, seed=0)["metrics"] if self.n_boot else {}
        return self._boot[id(rep)]

    def cell(self, s: Setting, rate: str, stat: str) -> tuple[str, dict[str, float]]:
        """Display string and numbers (value, sd, lo, hi, n) of one statistic of a setting."""
        vals = [self.agg(r)[rate][stat] for r in s.reports]
        mean, sd = mean_sd(vals)
        lo = hi = math.nan
        if len(vals) == 1:
            rep = s.reports[0]
            if stat == "avg":
                lo, hi = _wilson_overall(rep, rate)
            elif stat in ("worst", "gap") and self.n_boot:
                b = self.boot(rep).get(rate, {}).get(stat)
                if b:
                    lo, hi = b["lo"], b["hi"]
            text = with_ci(mean, lo, hi)
        else:
            text = pm(mean, sd)
        return text, {"value": mean, "sd": sd, "lo": lo, "hi": hi, "seeds": len(vals)}


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which points are not dominated (higher is better in both coordinates)."""
    out = []
    for i, (x, y) in enumerate(points):
        dominated = any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i)
        out.append(not dominated and math.isfinite(x) and math.isfinite(y))
    return out


def dataset_key(s: Setting) -> tuple[str, tuple[str, ...]]:
    """Settings are comparable (rho, Pareto front) when they share the dataset and its classes/groups."""
    return s.label("data"), s.classes


def pareto_by_dataset(settings: Sequence[Setting], points: Sequence[tuple[float, float]]) -> list[bool]:
    """:func:`pareto_front` computed separately within each dataset."""
    out = [False] * len(points)
    for key in dict.fromkeys(dataset_key(s) for s in settings):
        idx = [i for i, s in enumerate(settings) if dataset_key(s) == key]
        for i, f in zip(idx, pareto_front([points[i] for i in idx])):
            out[i] = f
    return out


def worst_changes(s: Setting, stats: _Stats, rate: str = "rob_acc") -> tuple[list[str], int]:
    """Worst group of each seed and the number of distinct ones."""
    worst = [str(stats.agg(r)[rate]["worst_group"]) for r in s.reports]
    return worst, len(set(worst))


# ============================================================================== the layouts
def summary_table(settings: list[Setting], stats: _Stats, baseline: str | None = None) -> Table:
    """CFA / DAFA layout: clean and robust average and worst class, gap, DAFA rho, Pareto front."""
    base = None
    if baseline is not None:
        base = next((s for s in settings if s.name == baseline), None)
        if base is None:
            raise RobfairError(f"baseline '{baseline}' is not a setting of these runs; choose one of: "
                               f"{', '.join(s.name for s in settings)}")
    means = {s.name: {(r, st): mean_sd([stats.agg(x)[r][st] for x in s.reports])[0]
                      for _, r, st in SUMMARY_STATS} for s in settings}
    front = pareto_by_dataset(settings, [(means[s.name][("rob_acc", "avg")], means[s.name][("rob_acc", "worst")])
                                         for s in settings])
    columns = ["setting", "data", "model", "method", "seeds"] + [lab for lab, _, _ in SUMMARY_STATS] + ["worst class"]
    if base is not None:
        columns.append(f"rho vs {base.name}")
    columns.append("Pareto")
    rows, emph, good, records = [], [], [], []
    for s, on_front in zip(settings, front):
        row = [s.name, s.label("data"), s.label("model"), s.label("method"), str(len(s.runs))]
        rec: dict[str, Any] = {"setting": s.name, "data": s.label("data"), "model": s.label("model"),
                               "method": s.label("method"), "seeds": len(s.runs)}
        for lab, rate, stat in SUMMARY_STATS:
            text, nums = stats.cell(s, rate, stat)
            row.append(text)
            key = f"{rate}_{stat}"
            rec.update({key: nums["value"], f"{key}_sd": nums["sd"], f"{key}_lo": nums["lo"], f"{key}_hi": nums["hi"]})
        worst, distinct = worst_changes(s, stats)
        if len(worst) == 1:
            row.append(tied_names(s.reports[0]))
        else:
            top = max(worst, key=worst.count)
            row.append(f"{top} ({worst.count(top)}/{len(worst)} seeds)")
        rec["worst_class"] = "|".join(worst)
        if base is not None and dataset_key(s) != dataset_key(base):
            row.append("-")  # rho compares runs on the baseline's dataset only
            rec["rho"] = math.nan
        elif base is not None:
            m, b = means[s.name], means[base.name]
            rho = dafa_rho(m[("rob_acc", "worst")], b[("rob_acc", "worst")], m[("rob_acc", "avg")], b[("rob_acc", "avg")])
            row.append("-" if not math.isfinite(rho) else f"{rho:+.3f}")
            rec["rho"] = rho
        row.append("yes" if on_front else "")
        rec["pareto"] = bool(on_front)
        rows.append(row)
        emph.append([False] * len(row))
        good.append([False] * (len(row) - 1) + [on_front])
        records.append(rec)
    note = ("Percent. One seed: value [95% interval] (Wilson for averages, stratified bootstrap for worst and gap); "
            "several seeds: mean ± sd over seeds. Robust = worst case over the audit's attacks. "
            "Pareto: not dominated in (robust avg, robust worst) among the settings on the same dataset.")
    if base is not None:
        note += (" rho = (worst - worst_base)/worst_base + (avg - avg_base)/avg_base on robust accuracy (DAFA), "
                 "for settings on the baseline's dataset.")
    return Table("summary", "Average and worst-class accuracy (CFA / DAFA layout)", columns, rows,
                 pd.DataFrame(records), note, emph, good)


def tied_names(rep: Any, rate: str = "rob_acc", limit: int = 3) -> str:
    """The worst group of ``rep`` by ``rate`` -- every group tied at the minimum, not just the first."""
    vals = rep.by_group[rate].to_numpy(dtype=float)
    if not np.isfinite(vals).any():
        return "-"
    m = np.nanmin(vals)
    names = [str(g) for g, v in zip(rep.group_names, vals) if np.isfinite(v) and abs(v - m) <= 1e-12]
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:limit]) + (f" +{len(names) - limit}" if len(names) > limit else "") + f" (tied, {len(names)})"


def _rank_key(e: RunEntry, rate: str = "rob_acc") -> tuple[float, float]:
    a = e.report.aggregates()[rate]
    w, m = a["worst"], a["avg"]
    return (-w if math.isfinite(w) else math.inf, -m if math.isfinite(m) else math.inf)


def rank_by_worst(entries: Sequence[RunEntry], rate: str = "rob_acc") -> list[RunEntry]:
    """``entries`` best first by worst-group ``rate`` (ties: higher average first; NaN last)."""
    return sorted(entries, key=lambda e: _rank_key(e, rate))


def competition_ranks(entries: Sequence[RunEntry], rate: str = "rob_acc") -> list[int]:
    """The rank of each of ``entries`` (in the order :func:`rank_by_worst` gives): 1 + the number of
    entries strictly ahead by (worst-group ``rate``, then average ``rate``). Entries whose two point
    estimates are identical tie (``1, 2, 2, 4``): both are ratios of exact counts on the same samples,
    so equal outcomes (the same weights in two file formats) give equal floats, never an order of
    their own."""
    keys = [_rank_key(e, rate) for e in rank_by_worst(entries, rate)]
    return [1 + sum(k2 < k for k2 in keys) for k in keys]


#: the page's word for a model whose audit ran no reliability probe (``--probe 0``, an older audit)
NOT_PROBED = "not run"


def leaderboard_table(entries: Sequence[RunEntry], stats: _Stats | int = 1000) -> Table:
    """Models ranked by worst-class (worst-group) robust accuracy, then average robust accuracy
    (identical point estimates of both tie: the same rank, marked ``tie``): rank, model, the
    reliability probe's verdict (passed / flagged / inconclusive / skipped), clean avg, robust avg,
    worst and gap with their intervals (Wilson for averages, stratified bootstrap for worst and gap)."""
    stats = _Stats(stats) if isinstance(stats, int) else stats
    ranked = rank_by_worst(entries)
    ranks = competition_ranks(ranked)
    cols = [("clean avg", "clean_acc", "avg"), ("robust avg", "rob_acc", "avg"), ("robust worst", "rob_acc", "worst"),
            ("robust gap", "rob_acc", "gap")]
    columns = ["rank", "model", "reliability", "source", "n"] + [c for c, _, _ in cols] + ["worst class"]
    rows, records, emph, good = [], [], [], []
    for i, (rank, e) in enumerate(zip(ranks, ranked)):
        s = Setting(e.name, [e])
        tied = ranks.count(rank) > 1
        verdict = rel.status(getattr(e.audit, "probe", None)) or NOT_PROBED
        row = [f"{rank} (tie)" if tied else str(rank), e.name, verdict, str(e.config.get("model", "")),
               str(e.report.n)]
        rec: dict[str, Any] = {"rank": rank, "tied": tied, "model": e.name, "reliability": verdict,
                               "source": e.config.get("model", ""), "n": e.report.n}
        for lab, rate, stat in cols:
            text, nums = stats.cell(s, rate, stat)
            row.append(text)
            rec.update({f"{rate}_{stat}": nums["value"], f"{rate}_{stat}_lo": nums["lo"], f"{rate}_{stat}_hi": nums["hi"]})
        worst = str(stats.agg(e.report)["rob_acc"]["worst_group"])
        row.append(worst)
        rec["worst_class"] = worst
        rows.append(row)
        records.append(rec)
        emph.append([False] * 2 + [verdict == rel.FLAGGED] + [False] * 7)
        good.append([False] * 2 + [verdict == rel.PASSED] + [False] * 4 + [rank == 1] + [False] * 2)
    note = ("Percent, ranked by worst-class robust accuracy, then average robust accuracy (robust = worst case over "
            "the attacks, the same attacks, eps and samples for every model); models whose two point estimates are "
            "identical share a rank (tie). Intervals: 95% Wilson for averages, stratified bootstrap for worst and "
            "gap; overlapping intervals mean the ranking between those models is not settled by these samples. "
            "Reliability: the reliability probe's verdict on each model's audit (AutoAttack on the samples its "
            "attacks left robust; flagged = a class's robust accuracy is overstated beyond the tolerance).")
    return Table("leaderboard", "Worst-class robust accuracy leaderboard", columns, rows, pd.DataFrame(records), note,
                 emph, good)  # the leader's worst-class robust accuracy, each model's probe verdict


def frl_table(settings: list[Setting], stats: _Stats) -> Table:
    """FRL layout: Avg / Worst x Std / Bndy / Rob error (std + bndy = rob exactly, per class)."""
    columns = ["setting"] + [lab for lab, _, _ in FRL_STATS]
    rows, records = [], []
    for s in settings:
        row = [s.name]
        rec: dict[str, Any] = {"setting": s.name, "seeds": len(s.runs)}
        for lab, rate, stat in FRL_STATS:
            text, nums = stats.cell(s, rate, stat)
            row.append(text)
            key = f"{rate}_{stat}"
            rec.update({key: nums["value"], f"{key}_sd": nums["sd"], f"{key}_lo": nums["lo"], f"{key}_hi": nums["hi"]})
        rows.append(row)
        records.append(rec)
    return Table("frl", "Standard, boundary and robust error: average and worst class (FRL layout)", columns, rows,
                 pd.DataFrame(records),
                 "Error in percent (lower is better). Std = clean error, Bndy = clean-correct but attacked "
                 "(P[c and not a]), Rob = Std + Bndy. Intervals / spread as in the summary.")


def benz_tables(settings: list[Setting], stats: _Stats) -> list[Table]:
    """Benz layout: per-class clean and robust accuracy, one table pair per class list (dataset)."""
    by_classes: dict[tuple[str, ...], list[Setting]] = {}
    for s in settings:
        by_classes.setdefault(s.classes, []).append(s)
    tables = []
    for i, (classes, group) in enumerate(by_classes.items()):
        data_name = group[0].label("data") or f"set {i + 1}"
        suffix = f"-{_slug(data_name)}" if len(by_classes) > 1 else ""
        for rate, what in (("clean_acc", "clean"), ("rob_acc", "robust")):
            rows, emph, records = [], [], []
            for s in group:
                frames = [r.by_group for r in s.reports]
                vals = np.stack([f[rate].to_numpy(dtype=float) for f in frames])  # (seeds, G)
                cells = []
                for gi, cname in enumerate(classes):
                    m, sd = mean_sd(vals[:, gi])
                    if len(frames) == 1:
                        lo, hi = frames[0][f"{rate}_lo"].iloc[gi], frames[0][f"{rate}_hi"].iloc[gi]
                        cells.append(with_ci(m, lo, hi))
                    else:
                        lo = hi = math.nan
                        cells.append(pm(m, sd))
                    records.append({"setting": s.name, "class": cname, "metric": rate, "value": m, "sd": sd,
                                    "lo": lo, "hi": hi, "seeds": len(frames)})
                means = np.nanmean(vals, 0) if vals.size else vals
                low = np.nanmin(means) if np.isfinite(means).any() else math.nan
                rows.append([s.name] + cells)
                emph.append([False] + [bool(np.isfinite(means[gi]) and abs(means[gi] - low) <= 1e-12)
                                       for gi in range(len(classes))])
            tables.append(Table(f"benz-{what}{suffix}", f"Per-class {what} accuracy{' on ' + data_name if suffix else ''} "
                                f"(Benz layout)", ["setting"] + list(classes), rows, pd.DataFrame(records),
                                "Percent; worst class of each setting highlighted (every class tied at the minimum). One seed: value [95% Wilson "
                                "interval]; several seeds: mean ± sd.", emph))
    return tables


def seeds_table(settings: list[Setting], stats: _Stats) -> Table | None:
    """Seed spread: robust worst class mean ± sd, worst class per seed, how often it changes."""
    multi = [s for s in settings if len(s.runs) > 1]
    if not multi:
        return None
    rows, records = [], []
    for s in multi:
        worst, distinct = worst_changes(s, stats)
        top = max(worst, key=worst.count)
        w_mean, w_sd = mean_sd([stats.agg(r)["rob_acc"]["worst"] for r in s.reports])
        a_mean, a_sd = mean_sd([stats.agg(r)["rob_acc"]["avg"] for r in s.reports])
        rows.append([s.name, str(len(s.runs)), pm(a_mean, a_sd), pm(w_mean, w_sd), ", ".join(worst),
                     str(distinct), f"{worst.count(top)}/{len(worst)}"])
        frame = seed_summary(s.reports, "rob_acc")
        for g, r in frame.iterrows():
            records.append({"setting": s.name, "class": g, "rob_acc_mean": r["mean"], "rob_acc_sd": r["sd"],
                            "rob_acc_min": r["min"], "rob_acc_max": r["max"], "worst_freq": r["worst_freq"]})
    return Table("seeds", "Spread over seeds", ["setting", "seeds", "robust avg", "robust worst", "worst class per seed",
                                                "distinct worst classes", "modal worst share"], rows,
                 pd.DataFrame(records),
                 "Percent, mean ± sd over seeds (ddof=1). CSV: per-class robust accuracy mean, sd, min, max and "
                 "the share of seeds in which each class is the worst (robfair.metrics.seed_summary).")


def eps_table(entries: list[RunEntry]) -> Table | None:
    """Robust accuracy vs eps for runs audited at several radii (optional section)."""
    runs = [e for e in entries if e.eps_sweep]
    if not runs:
        return None
    rows, records = [], []
    for e in runs:
        for rep in e.eps_sweep:
            main = getattr(rep, "main", rep)
            agg = main.aggregates()["rob_acc"]
            rows.append([e.name, f"{main.eps:g}" if isinstance(main.eps, float) else str(main.eps), pct(agg["avg"]),
                         pct(agg["worst"]), str(agg["worst_group"]), pct(agg["gap"])])
            for g, r in main.by_group.iterrows():
                records.append({"run": e.name, "eps": main.eps, "group": g, "rob_acc": r["rob_acc"],
                                "rob_acc_lo": r["rob_acc_lo"], "rob_acc_hi": r["rob_acc_hi"], "n": int(r["n"])})
    return Table("eps", "Robust accuracy vs eps", ["run", "eps", "robust avg", "robust worst", "worst group", "gap"],
                 rows, pd.DataFrame(records), "Percent. CSV: every group at every eps with 95% Wilson intervals.")


def warnings_table(entries: list[RunEntry], extra: Sequence[str] = ()) -> Table | None:
    rows = [[e.name, w] for e in entries for w in getattr(e.audit, "warnings", [])]
    rows += [["(report)", w] for w in extra]
    if not rows:
        return None
    return Table("warnings", "Sanity warnings", ["run", "warning"], rows, pd.DataFrame(rows, columns=["run", "warning"]),
                 "From the audits (gradient masking checks, inconsistent reports, the reliability probe) and from "
                 "loading the runs.", layout="text")


# ============================================================================== the reliability probe, per run
def _count(v: Any) -> str:
    return "-" if v is None else f"{int(v):,}"


def _probe_table(key: str, title: str, columns: Sequence[tuple[str, str, Any]], rows: dict[str, dict[str, Any]],
                 note: str) -> Table:
    """One row per group of a probe record: ``columns`` are (field, header, format); a flagged
    group's name and flag are highlighted; the CSV keeps the record's numbers."""
    shown, emph, records = [], [], []
    for g, r in rows.items():
        flagged = bool(r.get("flagged"))
        shown.append([str(g)] + [fmt(r) for _, _, fmt in columns])
        emph.append([flagged] + [flagged and f in ("flagged", "corrected_robust_acc", "overstatement") for f, _, _ in columns])
        records.append({"group": str(g), **{f: r.get(f) for f, _, _ in columns if f in r}})
    return Table(key, title, ["group"] + [h for _, h, _ in columns], shown, pd.DataFrame(records), note, emph,
                 layout="narrow")


def _flag_cell(r: dict[str, Any]) -> str:
    return "yes" if r.get("flagged") else ""


def _corrected(r: dict[str, Any]) -> str:
    return with_ci(r.get("corrected_robust_acc"), r.get("corrected_lo"), r.get("corrected_hi"))


def probe_tables(rec: dict[str, Any] | None) -> list[Table]:
    """The reliability probe's per-group tables of one run (``AuditReport.probe``): the sampled
    probe's counts per stage, estimate, bounds and corrected robust accuracy; with AutoAttack in the
    audit, one table per weaker attack with its exact overstatement; an older record's per-group
    tests as it has them. Empty without a record or when it was skipped."""
    if not isinstance(rec, dict) or "skipped" in rec or not isinstance(rec.get("per_group", rec.get("per_attack")), dict):
        return []
    pts = lambda f: (lambda r: pct(r.get(f)))  # noqa: E731
    num = lambda f: (lambda r: _count(r.get(f)))  # noqa: E731
    alpha = rec.get("alpha")
    level = f"{100 * (1 - alpha):.0f}%" if isinstance(alpha, (int, float)) else "95%"
    tol = pct(rec.get("tolerance"))
    if rec.get("design") == "in-audit":
        ref = str(rec.get("attack", "autoattack"))
        out = []
        for atk, a in rec.get("per_attack", {}).items():
            cols = [("n", "n", num("n")), ("robust_acc", f"robust % ({atk} alone)", pts("robust_acc")),
                    ("autoattack_robust_acc", f"robust % ({ref})", pts("autoattack_robust_acc")),
                    ("only_autoattack_fools", f"fooled by {ref} only", num("only_autoattack_fools")),
                    ("only_attack_fools", f"fooled by {atk} only", num("only_attack_fools")),
                    ("overstatement", "overstated by (points)", pts("overstatement")),
                    ("corrected_robust_acc", "robust under both %", pts("corrected_robust_acc")),
                    ("flagged", "flagged", _flag_cell)]
            out.append(_probe_table(f"probe-{atk}", f"reliability probe: {atk} alone against {ref} (exact, the same samples)",
                                    cols, a.get("per_group", {}),
                                    f"{ref} is among the audit's attacks, so the audit's worst case is {ref}'s; this is how "
                                    f"much {atk} alone overstates each group's robust accuracy: the share of the group's "
                                    f"samples robust under {atk} but fooled by {ref}, counted, not estimated. Flagged: "
                                    f"above the tolerance of {tol} points."))
        return out
    rows = rec["per_group"]
    if rec.get("design") != "sampled":  # the older record: per-group exact tests, Holm-adjusted
        known = [("n", "n", num("n")), ("robust_acc", "robust % (audit, probed samples)", pts("robust_acc")),
                 ("autoattack_robust_acc", "robust % (AutoAttack)", pts("autoattack_robust_acc")),
                 ("overstatement", "overstated by (points)", pts("overstatement")),
                 ("only_autoattack_fools", "fooled by AutoAttack only", num("only_autoattack_fools")),
                 ("only_audit_fools", "fooled by the audit only", num("only_audit_fools")),
                 ("p", "p", lambda r: f"{r['p']:.2g}" if isinstance(r.get("p"), (int, float)) else "-"),
                 ("p_holm", "p (Holm)", lambda r: f"{r['p_holm']:.2g}" if isinstance(r.get("p_holm"), (int, float)) else "-")]
        first = next(iter(rows.values()), {})
        cols = [c for c in known if c[0] in first]
        flagged = set(rec.get("flagged_groups") or [])
        rows = {g: {**r, "flagged": g in flagged} for g, r in rows.items()}
        size = f" on up to {rec['per_group_max']} samples per group" if "per_group_max" in rec else ""
        return [_probe_table("probe", "reliability probe per group (an older audit.json)", cols + [("flagged", "flagged", _flag_cell)],
                             rows, f"Written by an earlier robfair: official AutoAttack{size}, compared sample by sample "
                                   "with the audit (exact one-sided McNemar test per group, Holm-adjusted; flagged at "
                                   f"p (Holm) < {alpha if isinstance(alpha, (int, float)) else 0.05:g}). Percent on the "
                                   "probed samples.")]
    stages = rec.get("stages") or {}
    name = lambda a: str(a).capitalize() if str(a) == "square" else str(a).upper()  # noqa: E731 - APGD-CE, FAB-T, Square
    first = " + ".join(map(name, stages.get("first") or ["apgd-ce"]))
    rest = " + ".join(map(name, stages.get("rest") or [])) or "the rest of AutoAttack"
    partial = any(r.get("robust") and not r.get("rest_covered") for r in rows.values())
    cols = [("n", "n", num("n")), ("robust_acc", "robust % (audit)", pts("robust_acc")),
            ("robust", "audit-robust", num("robust")),
            ("first_attacked", f"{first} attacked", num("first_attacked")),
            ("first_fooled", f"{first} fooled", num("first_fooled")),
            ("rest_attacked", "later stages attacked", num("rest_attacked")),
            ("rest_fooled", "later stages fooled", num("rest_fooled")),
            ("overstatement", "overstated by (points)", pts("overstatement")),
            ("lower", "at least", pts("lower")), ("upper", "at most", pts("upper"))]
    if partial:
        cols.append(("upper_first", f"at most, against {first}",
                     lambda r: pct(r.get("upper_first")) if r.get("robust") and not r.get("rest_covered") else "-"))
    cols += [("corrected_robust_acc", f"corrected robust % [{level}]", _corrected), ("flagged", "flagged", _flag_cell)]
    cost = rec.get("cost") or {}
    spent = (f" It spent {_count(cost.get('probe_units'))} passes through the model against the audit's attacks' "
             f"{_count(cost.get('audit_units'))} ({cost['ratio']:.2g}x; budget {rec.get('budget', '-')}) in "
             f"{len(rec.get('rounds') or [])} rounds." if isinstance(cost.get("ratio"), (int, float)) else "")
    label = " + ".join(rec.get("compared_with") or []) or "the audit's attacks"
    return [_probe_table("probe", f"reliability probe per group: {label} against {rec.get('attack', 'AutoAttack')}", cols, rows,
                         f"Official AutoAttack ({rec.get('attack', 'autoattack')}) on the samples {label} left robust (audit-robust), per "
                         f"group in a seeded random order: {first} first, then the later stages ({rest}) on its "
                         f"survivors. Overstated by: the estimated points of robust accuracy the audit claims beyond "
                         f"AutoAttack's, with one-sided bounds (at least, at most; every statement about every group "
                         f"holds at once with {level}); flagged when 'at least' exceeds the tolerance of {tol} points. "
                         + (f"Where the later stages did not run, nothing bounds what they would find ('at most' is "
                            f"then the audit-robust share); 'at most, against {first}' bounds what {first} alone "
                            "finds. " if partial else "")
                         + "Corrected robust %: the audit's minus the overstatement, with the interval the bounds give."
                         + spent)]


def paper_tables(entries: list[RunEntry], *, baseline: str | None = None, n_boot: int = 1000,
                 extra_warnings: Sequence[str] = ()) -> list[Table]:
    """Every layout that applies to ``entries`` (see the module docstring)."""
    if not entries:
        raise RobfairError("no runs to tabulate; pass at least one finished run")
    settings = group_settings(entries)
    stats = _Stats(n_boot)
    tables = [summary_table(settings, stats, baseline), frl_table(settings, stats)]
    tables += benz_tables(settings, stats)
    for t in (seeds_table(settings, stats), eps_table(entries), warnings_table(entries, extra_warnings)):
        if t is not None:
            tables.append(t)
    return tables


# ============================================================================== output
def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-") or "x"


def _md_cell(s: str) -> str:
    """A Markdown table cell: pipes escaped, HTML characters as entities (Markdown renders raw HTML)."""
    s = plain(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def table_markdown(t: Table) -> str:
    lines = [f"### {_md_cell(t.title)}", "", "| " + " | ".join(_md_cell(c) for c in t.columns) + " |",
             "|" + "|".join("---" for _ in t.columns) + "|"]
    for row, em in zip(t.rows, t.emph):
        cells = [f"**{_md_cell(c)}**" if e and c else _md_cell(c) for c, e in zip(row, em)]
        lines.append("| " + " | ".join(cells) + " |")
    if t.note:
        lines += ["", f"_{_md_cell(t.note)}_"]
    return "\n".join(lines) + "\n"


def to_markdown(tables: Sequence[Table], title: str = "", intro: str = "", *, after: int = 0, middle: str = "") -> str:
    """The tables as Markdown under ``title`` and ``intro``; ``middle`` (text) goes after the first
    ``after`` tables (a leaderboard: its ranking, then the verdicts, then the rest)."""
    def text(s: str) -> str:
        return visible(s.strip()).replace("<", "&lt;").replace(">", "&gt;") + "\n"

    parts = [f"## {_md_cell(title)}\n"] if title else []
    if intro:
        parts.append(text(intro))
    parts += [table_markdown(t) for t in tables[:after]]
    if middle:
        parts.append(text(middle))
    parts += [table_markdown(t) for t in tables[after:]]
    return "\n".join(parts)


def inert_frame(df: Any) -> Any:
    """A copy of ``df`` whose text cells and column names no spreadsheet runs as formulas
    (:func:`robfair.inert.csv_cell`); numbers are untouched."""
    out = df.copy()
    for c in out.columns:
        if not (pd.api.types.is_numeric_dtype(out[c]) or pd.api.types.is_bool_dtype(out[c])):
            out[c] = out[c].map(lambda v: csv_cell(v) if isinstance(v, str) else v)
    out.columns = [csv_cell(c) if isinstance(c, str) else c for c in out.columns]
    return out


def table_csv(t: Table) -> str:
    buf = io.StringIO()
    inert_frame(t.data).to_csv(buf, index=False, quoting=csv.QUOTE_MINIMAL, float_format="%.6g")
    return buf.getvalue()


def write_csvs(tables: Sequence[Table], folder: str | Path) -> list[Path]:
    """One CSV per table (``<key>.csv``), each written atomically."""
    folder = Path(folder)
    paths = []
    for t in tables:
        p = folder / f"{_slug(t.key)}.csv"
        with atomic_path(p) as tmp:
            tmp.write_text(table_csv(t))
        paths.append(p)
    return paths
