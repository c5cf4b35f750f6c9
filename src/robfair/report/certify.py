"""Certified robustness (``robfair certify``) in the HTML report: certified accuracy against radius per
class, and the per-class / gap tables. Everything is drawn from ``certify.json`` (schema
``robfair.certify/1``), so a report needs no per-sample file.

    page = render_certify_html({"pgd-at": read_certify("runs/pgd-at")}, title="...")   # its certify.json
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from .. import __version__
from ..errors import RobfairError
from ..inert import plain
from ..runfolder import RunFolder
from ..safeio import read_json
from .page import Figure, matplotlib_context, render_html, to_png
from .tables import Table


def read_certify(run_dir: Path) -> dict | None:
    """A run folder's ``certify.json`` (None when absent); RobfairError when it is not one."""
    p = RunFolder(run_dir).certify
    if not p.exists():
        return None
    try:
        d = read_json(p, "certify result")
    except (OSError, ValueError, RobfairError):
        raise RobfairError(f"{p} is unreadable or not JSON; rerun `robfair certify --out {p}` or delete it") from None
    if not isinstance(d, dict) or d.get("schema") != "robfair.certify/1":
        raise RobfairError(f"{p} is not a robfair certify result; rerun `robfair certify --out {p}` or delete it")
    return d


def _pct(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}"


def curves_figure(payloads: Mapping[str, dict], by: str = "class") -> Figure:
    """Certified accuracy against L2 radius, one line per class (group) and the average, one panel per run."""
    items = [(k, p) for k, p in payloads.items() if by in (p.get("curves") or {})]
    with matplotlib_context() as plt:
        fig, axes = plt.subplots(1, len(items), figsize=(6.4 * len(items), 4.4), squeeze=False, sharey=True)
        for ax, (label, p) in zip(axes[0], items):
            c = p["curves"][by]
            r = c["radius"]
            names = [k for k in c if k not in ("radius", "all")]
            cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
            for i, name in enumerate(names[:20]):
                vals = [math.nan if v is None else 100 * v for v in c[name]]
                ax.plot(r, vals, lw=1.2, color=cmap(i % cmap.N), label=plain(name))
            ax.plot(r, [100 * v for v in c["all"]], "k--", lw=2, label="all")
            s = p.get("settings", {})
            if s.get("max_radius"):
                ax.axvline(s["max_radius"], ls=":", color="grey", lw=1, label="largest certifiable radius")
            ax.set_title(f"{plain(label)}: sigma {s.get('sigma')}, n {s.get('n')}, alpha {s.get('alpha')}", fontsize=10)
            ax.set_xlabel("L2 radius")
            ax.set_ylim(0, 102)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("certified accuracy (%)")
        axes[0][-1].legend(fontsize=7, ncol=2, loc="best")
        fig.tight_layout()
        return Figure(f"certified accuracy vs radius per {by}", to_png(fig),
                      f"certified accuracy against radius per {by} for {', '.join(k for k, _ in items)}")


def per_class_table(label: str, p: dict, by: str = "class") -> Table:
    """n, smoothed accuracy, abstain rate, certified accuracy at each radius [Wilson 95%], median radius, ACR."""
    radii = p["settings"]["radii"]
    rows, emph, data = [], [], []
    tab = p["tables"][by]
    cols = [by, "n", "smoothed acc %", "abstain %"] + [f"cert. acc % r={r:g}" for r in radii] + ["median radius", "ACR"]
    real = {k: v for k, v in tab.items() if k != "all" and v["n"]}
    worst = {r: min(real, key=lambda k: real[k][f"cert@{r:g}"]) for r in radii} if real else {}
    for name, row in tab.items():
        cells = [str(name), str(row["n"]), f"{_pct(row['smoothed_acc'])} [{_pct(row['smoothed_acc_lo'])}, {_pct(row['smoothed_acc_hi'])}]",
                 _pct(row["abstain"])]
        em = [False] * 4
        for r in radii:
            c = f"cert@{r:g}"
            cells.append(f"{_pct(row[c])} [{_pct(row[c + '_lo'])}, {_pct(row[c + '_hi'])}]")
            em.append(name != "all" and real.get(name) is not None and row[c] == real[worst[r]][c] and r > 0)
        cells += ["-" if row["median_radius"] is None else f"{row['median_radius']:.3f}",
                  "-" if row["acr"] is None else f"{row['acr']:.3f}"]
        em += [False, False]
        rows.append(cells)
        emph.append(em)
        data.append({by: name, **row})
    return Table(key=f"certified-{label}-{by}", title=f"{label}: certified accuracy per {by}", columns=cols, rows=rows,
                 data=pd.DataFrame(data), emph=emph,
                 note="Randomized smoothing (Cohen et al. 2019): a sample counts at radius r when the smoothed "
                      "classifier is correct and its certified L2 radius is >= r; abstentions count as errors. "
                      "Intervals: Wilson 95%. Median radius / ACR: of the correct class, 0 for wrong or abstained "
                      "samples. Highlighted: the worst class at each radius.")


def gap_table(label: str, p: dict, by: str = "class") -> Table:
    rows, data = [], []
    for g in p["gaps"][by]:
        ci = lambda s: f" [{_pct(g.get(s + '_lo'))}, {_pct(g.get(s + '_hi'))}]" if s + "_lo" in g else ""  # noqa: E731
        rows.append([f"{g['radius']:g}", _pct(g["avg"]), str(g["worst_group"]), _pct(g["worst"]) + ci("worst"),
                     _pct(g["gap"]) + ci("gap"), _pct(g.get("worst_group_stability"))])
        data.append(g)
    return Table(key=f"certified-gap-{label}-{by}", title=f"{label}: worst {by} and gap in certified accuracy",
                 columns=["radius", "average %", f"worst {by}", "worst %", "gap (pts)", "worst stable %"], rows=rows,
                 data=pd.DataFrame(data),
                 note="Intervals: stratified bootstrap 95% over the samples of each class (GroupReport.bootstrap); "
                      "'worst stable' is the share of resamples with the same worst class.")


def render_certify_html(payloads: Mapping[str, dict], *, title: str = "certified robustness") -> str:
    """A self-contained page for one or more ``certify.json`` payloads (figures first, then tables)."""
    tables: list[Table] = []
    figures = []
    bys = ["class"] + (["group"] if any(p.get("group_names") for p in payloads.values()) else [])
    for by in bys:
        figures.append(curves_figure(payloads, by))
    for label, p in payloads.items():
        for by in bys:
            if by in p["tables"]:
                tables += [per_class_table(label, p, by), gap_table(label, p, by)]
    warnings = [(label, w) for label, p in payloads.items() for w in p.get("warnings", [])]
    first = next(iter(payloads.values()))
    meta = [("runs", ", ".join(payloads)), ("samples", str(first.get("meta", {}).get("n_samples", "-"))),
            ("generated", time.strftime("%Y-%m-%d %H:%M")), ("robfair", __version__)]
    return render_html(title=title, description="", meta=meta, tables=tables, figures=figures, runs=[],
                       warnings=warnings)


def run_lines(p: dict) -> list[str]:
    """One line per radius for a run section of ``robfair report``."""
    tab = p["tables"]["class"]
    real = {k: v for k, v in tab.items() if k != "all" and v["n"]}
    s = p["settings"]
    out = [f"certified (randomized smoothing, sigma {s['sigma']}, n {s['n']}, alpha {s['alpha']}): smoothed accuracy "
           f"{_pct(tab['all']['smoothed_acc'])}%, abstained {_pct(tab['all']['abstain'])}%, median radius "
           f"{tab['all']['median_radius']:.3f}"]
    for r in s["radii"]:
        c = f"cert@{r:g}"
        if r == 0 or not real:
            continue
        w = min(real, key=lambda k: real[k][c])
        out.append(f"certified accuracy at r={r:g}: {_pct(tab['all'][c])}% (worst class {w}: {_pct(real[w][c])}%)")
    return out
