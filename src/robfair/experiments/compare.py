"""Two or more runs side by side: per-class differences and whether each is beyond the noise.

    cmp = compare({"trades": audit_a, "frl-rwrm": audit_b})     # AuditReport or GroupReport values
    cmp.per_class      # one row per (run vs reference, class, metric): values, difference, CI, p, verdict
    cmp.aggregates     # avg (z-test) and worst / gap (bootstrap) of clean and robust accuracy
    cmp.tables()       # Markdown/CSV-ready tables (robfair.report.tables.Table)

Every run is compared with the first one (the reference). Both runs are usually audited on the
*same* test samples, so outcomes are paired. When both audits have their per-sample outcomes
(``outcomes.npz`` beside audit.json) and cover the same samples (same dataset indices, labels and
groups), the per-class and average tests are the exact McNemar test: a two-sided binomial test at
1/2 on the discordant samples (the event in one run and not in the other; ``flips`` counts them),
and the interval of the difference is a paired one (:func:`robfair.metrics.stats.paired_interval`:
Tango's score interval, stretched to reach 0 where the exact test does not reject, cut at 0 in the
rare opposite case), so that a difference is marked beyond the noise exactly when its interval
excludes 0. Per class, the
verdict is Holm's step-down over the classes of each metric at ``alpha``, and each class's interval
is at the level that step-down tested it (``level`` = 1 - alpha / k, k the classes not yet
rejected; :func:`~robfair.metrics.stats.holm_levels`); the averages are tested at ``alpha`` with a
1 - alpha interval.

Otherwise (older audits, different samples) the runs are treated as independent: the difference of
two proportions with Newcombe's hybrid score interval (built from the Wilson intervals; 95% per
class, 1 - alpha for the averages) and a two-sided pooled two-proportion z-test, Holm-adjusted over
the classes of each metric, beyond when the adjusted p < alpha; this is conservative when the models
agree more than chance (the usual case), and the z-test and the interval can disagree near the
edge. The ``test`` and ``interval`` columns say which ran.

The worst class and the gap: independent stratified bootstrap of both runs (multinomial over each
class's outcome counts), a percentile 1 - alpha interval of the difference; beyond when it excludes
0. Boundary error (clean-correct but attacked, FRL's quantity) is compared the same way; for it and
for gaps lower is better.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import RobfairError
from ..metrics.stats import (bootstrap_counts, holm, holm_levels, mcnemar_exact, newcombe_interval, paired_interval,
                             two_proportion_test)
from ..report.tables import Table, pct
from ..runfolder import audit_file, is_audit_file
from .results import read_audit

RATES = (("clean_acc", "clean"), ("rob_acc", "robust"), ("bndy_err", "boundary error"))
#: metrics where lower is better (a negative difference is an improvement)
LOWER_IS_BETTER = {"bndy_err"}
_SHORT = {"clean_acc": "clean", "rob_acc": "robust", "bndy_err": "bndy err"}


def _paired(ref: Any, run: Any) -> dict[str, tuple[Any, Any]] | None:
    """Per-sample correctness ``(ref, run)`` per rate when both audits have outcomes on the same samples."""
    a, b = getattr(ref, "outcomes", None), getattr(run, "outcomes", None)
    if a is None or b is None or not a.same_samples(b):
        return None
    clean = tuple(o.clean_pred == o.y for o in (a, b))
    robust = tuple(o.robust() for o in (a, b))
    return {"clean_acc": clean, "rob_acc": robust, "bndy_err": tuple(c & ~r for c, r in zip(clean, robust))}


def _data_line(fp: Mapping[str, Any]) -> str:
    """``digits test, 451 samples`` for a fingerprint."""
    where = " ".join(str(fp[k]) for k in ("dataset", "split") if fp.get(k))
    return f"{where + ', ' if where else ''}{fp.get('n')} samples"


def same_data(ref_label: str, ref: Any, label: str, run: Any) -> tuple[bool | None, str | None]:
    """Whether two audits ran on the same samples, by their fingerprints (:meth:`robfair.audit.
    AuditReport.fingerprint`): ``(True, None)`` same samples in the same order; ``(False, note)``
    other samples of the same data (the note says how they differ; no paired test); ``(None, note)``
    a run without a fingerprint (an older file; its outcomes alone decide). Runs audited on another
    dataset or split are refused (one line): their per-class numbers measure other images."""
    audits = [(lab, a) for lab, a in ((ref_label, ref), (label, run)) if callable(getattr(a, "fingerprint", None))]
    fps = {lab: a.fingerprint() for lab, a in audits}
    fa, fb = fps.get(ref_label), fps.get(label)
    if fa is None or fb is None:
        older = [lab for lab, f in fps.items() if f is None]  # a bare GroupReport has nothing to say
        if not older:
            return None, None
        return None, (f"no fingerprint: older file ({', '.join(repr(o) for o in older)}); whether '{ref_label}' and "
                      f"'{label}' were audited on the same samples is judged from their outcomes.npz alone")
    for k in ("dataset", "split"):
        if fa.get(k) and fb.get(k) and fa[k] != fb[k]:
            raise RobfairError(f"runs '{ref_label}' and '{label}' were audited on different data ({_data_line(fa)} vs "
                               f"{_data_line(fb)}); their per-class numbers measure other images - compare runs "
                               "audited on the same dataset and split")
    diff = [k for k in ("n", "indices", "labels", "groups") if fa.get(k) != fb.get(k)]
    if not diff:
        return True, None
    how = (f"{fa.get('n')} vs {fb.get('n')} samples" if "n" in diff else
           f"the same {fa.get('n')} sample positions with other labels" if "indices" not in diff and "labels" in diff else
           f"the same {fa.get('n')} samples with other group ids" if "indices" not in diff else
           f"{fa.get('n')} samples each, but other ones or in another order")
    where = " ".join(str(fa[k]) for k in ("dataset", "split") if fa.get(k))
    return False, (f"'{ref_label}' and '{label}' were audited on different data ({where + ': ' if where else ''}{how}): "
                   "no paired test - they are compared as independent samples")


def _signed(v: float) -> str:
    """A percentage with its sign; 0 exactly as 0, and a value that one decimal would round to 0 with
    two significant digits (an interval end just past 0 must not read as 0)."""
    if v == 0:
        return "0"
    return f"{v:+.2g}" if abs(v) < 0.05 else f"{v:+.1f}"


def _diff_ci(r: Any) -> str:
    """``diff [lo, hi]`` of a row, in percent."""
    return f"{100 * r['diff']:+.1f} [{_signed(100 * r['lo'])}, {_signed(100 * r['hi'])}]"


def _flips(ok1: np.ndarray, ok2: np.ndarray) -> tuple[int, int]:
    """(b, c): the paired samples with the event in the reference only, and in the run only."""
    return int((ok1 & ~ok2).sum()), int((~ok1 & ok2).sum())


def _counts(rep: Any, rate: str) -> tuple[np.ndarray, np.ndarray]:
    """(events, n) per group of clean accuracy, robust accuracy or boundary error (clean-correct but
    attacked: c and not a)."""
    n, c, ca, _ = rep.counts.summed(1)
    k = {"clean_acc": c, "rob_acc": ca, "bndy_err": c - ca}[rate]
    return k.astype(np.int64), n.astype(np.int64)


def _boot(rep: Any, n_boot: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Bootstrap replicates (B, G) of clean accuracy, robust accuracy and boundary error per group
    (groups with samples; :func:`robfair.metrics.stats.bootstrap_counts`)."""
    counts, ng = bootstrap_counts(rep.counts.categories(axis=1), n_boot, rng)
    return {m: counts[m] / ng for m, _ in RATES}


@dataclass
class Comparison:
    labels: list[str]
    per_class: pd.DataFrame
    aggregates: pd.DataFrame
    alpha: float
    n_boot: int
    #: what the reader must know about the data (runs audited on other samples, older files)
    notes: list[str] = field(default_factory=list)

    def tables(self) -> list[Table]:
        """Side-by-side per-class table and the aggregate differences, display + numbers."""
        ref = self.labels[0]
        out = []
        pc = self.per_class
        classes = list(dict.fromkeys(pc["class"]))
        cols = ["class"]
        for lab in self.labels:
            cols += [f"{lab} {_SHORT[m]}" for m, _ in RATES]
        for lab in self.labels[1:]:
            cols += [f"Δ {_SHORT[m]} {lab}" for m, _ in RATES]
        rows, emph, good = [], [], []
        for cname in classes:
            sub = pc[pc["class"] == cname]
            row, em, gd = [str(cname)], [False], [False]
            first = sub[sub["run"] == self.labels[1]]
            for lab in self.labels:
                if lab == ref:
                    vals = {m: first[first["metric"] == m]["ref_value"].iloc[0] for m, _ in RATES}
                else:
                    s = sub[sub["run"] == lab]
                    vals = {m: s[s["metric"] == m]["value"].iloc[0] for m, _ in RATES}
                row += [pct(vals[m]) for m, _ in RATES]
                em += [False] * len(RATES)
                gd += [False] * len(RATES)
            for lab in self.labels[1:]:
                s = sub[sub["run"] == lab]
                for m, _ in RATES:
                    r = s[s["metric"] == m].iloc[0]
                    row.append(_diff_ci(r) + (" *" if r["beyond"] else ""))
                    better = (r["diff"] < 0) if m in LOWER_IS_BETTER else (r["diff"] > 0)
                    em.append(bool(r["beyond"]) and not better)
                    gd.append(bool(r["beyond"]) and better)
            rows.append(row)
            emph.append(em)
            good.append(gd)
        how_classes, how_avg = self._how()
        out.append(Table("compare-classes", f"Per class, each run vs {ref}", cols, rows, self.per_class,
                         f"Percent. Δ = run - {ref} [interval]; {how_classes}. Boundary error "
                         "(bndy err) = clean-correct but attacked; lower is better, so a negative Δ is an improvement.",
                         emph, good))
        ag = self.aggregates
        rows = []
        emph, good = [], []
        for _, r in ag.iterrows():
            test = r["test"]
            if test == "mcnemar-exact":
                test += f" ({int(r['flips'])} flipped)"
            p = p_text(r["p"], r.get("p_resolution", math.nan))
            rows.append([r["run"], r["statistic"], pct(r["ref_value"]), pct(r["value"]), _diff_ci(r), p,
                         "yes" if r["beyond"] else "no", test])
            lower = r["statistic"].startswith("boundary error") or r["statistic"].endswith(" gap")
            better = (r["diff"] < 0) if lower else (r["diff"] > 0)
            emph.append([False] * 6 + [bool(r["beyond"]) and not better, False])
            good.append([False] * 6 + [bool(r["beyond"]) and better, False])
        out.append(Table("compare-aggregates", f"Averages, worst class and gap vs {ref}",
                         ["run", "statistic", ref, "run value", f"difference [{100 * (1 - self.alpha):g}% CI]", "p",
                          "beyond", "test"], rows,
                         self.aggregates, f"Percent. Averages: {how_avg}; worst class and gap: "
                                          f"percentile interval of {self.n_boot} independent stratified bootstrap "
                                          "replicates of both runs (p: twice the smaller tail share; "
                                          f"< {2 / max(self.n_boot, 1):.2g} = 2/{self.n_boot} where no replicate "
                                          "fell on one side, the smallest p these replicates resolve). Boundary "
                                          "error and gaps: lower is better.", emph, good))
        return out

    def _how(self) -> tuple[str, str]:
        """What the per-class and the average intervals and stars are, for the tables' notes; a run
        compared on the same samples gets the paired test and interval, any other the unpaired ones."""
        a = f"{self.alpha:g}"
        avg = self.aggregates[self.aggregates["statistic"].str.endswith(" avg")]
        paired = [lab for lab in self.labels[1:] if (avg[avg["run"] == lab]["test"] == "mcnemar-exact").all()]
        unpaired = [lab for lab in self.labels[1:] if lab not in paired]
        classes, avgs = [], []
        if paired:
            fl = "; ".join(f"{r['run']} {r['statistic'].rsplit(' ', 1)[0]}: {int(r['flips'])}"
                           for _, r in avg[avg["run"].isin(paired)].iterrows())
            who = f"{', '.join(paired)}: " if unpaired else ""
            classes.append(f"{who}paired interval (Tango's score interval, reaching 0 where the exact test does not "
                           f"reject) at the level Holm's step-down tested the class (1 - {a}/k, k = classes not yet "
                           f"rejected); * = beyond the noise: the exact McNemar test on the samples that flipped "
                           f"between the runs (same samples; flips: {fl}), Holm's step-down over classes at {a}, so a "
                           "* marks exactly the intervals that exclude 0")
            avgs.append(f"{who}exact McNemar test, p < {a}, and the paired {100 * (1 - self.alpha):g}% interval "
                        "(it excludes 0 exactly when p < " + a + ")")
        if unpaired:
            who = f"{', '.join(unpaired)}: " if paired else ""
            classes.append(f"{who}95% Newcombe interval (independent samples); * = beyond the noise: two-proportion "
                           f"z-test, Holm-adjusted over classes, p < {a}")
            avgs.append(f"{who}z-test, p < {a}, and the {100 * (1 - self.alpha):g}% Newcombe interval "
                        "(independent samples)")
        return "; ".join(classes), "; ".join(avgs)

    def to_json(self) -> dict[str, Any]:
        clean = lambda df: json.loads(df.to_json(orient="records"))  # noqa: E731  (NaN -> null)
        return {"schema": "robfair.compare/1", "labels": self.labels, "alpha": self.alpha, "n_boot": self.n_boot,
                "notes": list(self.notes), "per_class": clean(self.per_class), "aggregates": clean(self.aggregates)}


def p_resolution(n_boot: int) -> float:
    """The smallest non-zero p that ``n_boot`` bootstrap replicates give: p is twice the smaller
    tail share, so one replicate on a side is 2 / ``n_boot``; a p of 0 (no replicate on one side)
    says only that p is below this."""
    return 2 / n_boot


def p_text(p: float, resolution: float = math.nan) -> str:
    """A p-value as the tables print it: ``< 0.002`` for a bootstrap p of 0 at ``resolution`` (2/B),
    else three significant digits (an exact test's p, however small, is printed as it is)."""
    if p == 0 and math.isfinite(resolution):
        return f"< {resolution:.2g}"
    return f"{p:.3g}"


def compare(reports: Mapping[str, Any], *, n_boot: int = 2000, seed: int = 0, alpha: float = 0.05) -> Comparison:
    """Compare every report with the first; see the module docstring."""
    items = [(str(k), getattr(v, "main", v)) for k, v in reports.items()]
    if len(items) < 2:
        raise RobfairError("compare needs at least two runs; pass e.g. runs/a runs/b")
    audits = list(reports.values())
    ref_label, ref = items[0]
    for lab, rep in items[1:]:
        if tuple(rep.group_names) != tuple(ref.group_names):
            raise RobfairError(f"runs '{ref_label}' and '{lab}' have different classes/groups; compare runs "
                               "audited on the same dataset")
    rng = np.random.Generator(np.random.PCG64(seed))
    boot_ref = _boot(ref, n_boot, rng) if n_boot else None
    z_avg = NormalDist().inv_cdf(1 - alpha / 2)  # the unpaired averages' Newcombe interval, at 1 - alpha
    per_class, aggs, notes = [], [], []
    for j, (lab, rep) in enumerate(items[1:], start=1):
        same, note = same_data(ref_label, audits[0], lab, audits[j])
        if note is not None and note not in notes:
            notes.append(note)
        paired = _paired(audits[0], audits[j]) if same is not False else None
        gid = audits[0].outcomes.group if paired else None
        for metric, _ in RATES:
            k1, n1 = _counts(ref, metric)
            k2, n2 = _counts(rep, metric)
            rows, flips = [], []
            for gi, g in enumerate(ref.group_names):
                z, p = two_proportion_test(int(k1[gi]), int(n1[gi]), int(k2[gi]), int(n2[gi]))
                lo, hi = newcombe_interval(int(k1[gi]), int(n1[gi]), int(k2[gi]), int(n2[gi]))
                v1 = k1[gi] / n1[gi] if n1[gi] else math.nan
                v2 = k2[gi] / n2[gi] if n2[gi] else math.nan
                row = {"run": lab, "reference": ref_label, "class": g, "metric": metric, "ref_value": v1,
                       "value": v2, "diff": v2 - v1, "lo": lo, "hi": hi, "z": z, "p": p,
                       "n_ref": int(n1[gi]), "n": int(n2[gi]), "test": "z-test", "flips": None,
                       "interval": "newcombe", "level": 0.95}
                if paired:
                    b, c = _flips(*(t[gid == gi] for t in paired[metric]))
                    row.update(p=mcnemar_exact(b, c), test="mcnemar-exact", flips=b + c, z=math.nan)
                    flips.append((b, c))
                rows.append(row)
            ps = [r["p"] for r in rows]
            levels = holm_levels(ps, alpha) if paired else None
            for i, (r, padj) in enumerate(zip(rows, holm(ps))):
                r["p_holm"] = padj
                r["beyond"] = bool(padj < alpha)
                if paired:  # star and interval from one test: p < the level Holm tested the class at
                    r["lo"], r["hi"] = paired_interval(*flips[i], r["n"], levels[i])
                    r.update(interval="paired", level=1 - levels[i], beyond=bool(r["p"] < levels[i]))
            per_class += rows
            # averages over all samples
            K1, N1, K2, N2 = int(k1.sum()), int(n1.sum()), int(k2.sum()), int(n2.sum())
            z, p = two_proportion_test(K1, N1, K2, N2)
            lo, hi = newcombe_interval(K1, N1, K2, N2, z=z_avg)
            test, flips_all, interval = "z-test", None, "newcombe"
            if paired:
                b, c = _flips(*paired[metric])
                p, test, flips_all, interval = mcnemar_exact(b, c), "mcnemar-exact", b + c, "paired"
                lo, hi = paired_interval(b, c, N2, alpha)
            aggs.append({"run": lab, "statistic": f"{dict(RATES)[metric]} avg", "ref_value": K1 / N1 if N1 else math.nan,
                         "value": K2 / N2 if N2 else math.nan, "diff": (K2 / N2 - K1 / N1) if N1 and N2 else math.nan,
                         "lo": lo, "hi": hi, "p": p, "beyond": bool(p < alpha), "test": test, "flips": flips_all,
                         "interval": interval, "level": 1 - alpha})
        if n_boot:
            boot = _boot(rep, n_boot, rng)
            a_ref, a = ref.aggregates(), rep.aggregates()
            for metric, stat in (("rob_acc", "worst"), ("rob_acc", "gap"), ("clean_acc", "worst"), ("bndy_err", "worst")):
                if stat == "gap":
                    f = lambda x: np.ptp(x, axis=1)  # noqa: E731
                elif metric in LOWER_IS_BETTER:
                    f = lambda x: x.max(1)  # noqa: E731  the worst boundary error is the largest
                else:
                    f = lambda x: x.min(1)  # noqa: E731
                d = f(boot[metric]) - f(boot_ref[metric])
                lo, hi = np.quantile(d, [alpha / 2, 1 - alpha / 2])
                p = float(min(1.0, 2 * min((d <= 0).mean(), (d >= 0).mean())))
                aggs.append({"run": lab, "statistic": f"{dict(RATES)[metric]} {stat}",
                             "ref_value": a_ref[metric][stat], "value": a[metric][stat],
                             "diff": a[metric][stat] - a_ref[metric][stat], "lo": float(lo), "hi": float(hi), "p": p,
                             "beyond": bool(lo > 0 or hi < 0), "test": "bootstrap", "interval": "percentile",
                             "level": 1 - alpha, "p_resolution": p_resolution(n_boot)})
    return Comparison([lab for lab, _ in items], pd.DataFrame(per_class), pd.DataFrame(aggs), alpha, n_boot, notes)


def run_label(path: str | Path) -> str:
    """The name a run goes by: its folder (a run folder, or the folder of an ``audit.json``), else the
    file's name without ``.json``."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p.resolve().name
    return p.resolve().parent.name if is_audit_file(p) else p.stem


def unique_labels(paths: Sequence[str | Path], names: Sequence[str] = ()) -> list[str]:
    """One label per path: ``names`` where given (``--name``), else :func:`run_label`; a label
    already taken gets the folder above it in front (``b/audit_10k_best``), then ``#2``..."""
    out: list[str] = []
    for i, p in enumerate(paths):
        if i < len(names) and names[i]:
            label = str(names[i])
        else:
            label = run_label(p)
            if label in out:
                q = Path(p).expanduser().resolve()
                folder = q if q.is_dir() else q.parent
                up = folder.parent if folder.name == label else folder
                label = f"{up.name}/{label}"
        base, k = label, 2
        while label in out:
            label, k = f"{base}#{k}", k + 1
        out.append(label)
    return out


def load_report(path: str | Path) -> tuple[str, Any]:
    """(label, AuditReport) from a run folder or an audit.json file."""
    label = run_label(path)
    p = audit_file(path)
    if not p.exists():
        raise RobfairError(f"{p} does not exist; pass a finished run folder (with audit.json) or an audit.json file")
    try:
        return label, read_audit(p)
    except RobfairError as e:
        raise RobfairError(str(e) if ";" in str(e) else f"{e}; re-run the audit or pick another run") from None  # one fix
