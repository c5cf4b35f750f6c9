"""One self-contained HTML page over a set of runs (figures as base64 PNG, inline CSS, no script,
no network), plus the same tables as Markdown and CSV.

    paths = write_report(entries, "report.html", title="frl-table")   # report.html, report.md, report_tables/*.csv

Every label (run, class, method names, warnings) goes through Jinja2 autoescaping: a class named
``<script>`` is shown as text. Matplotlib math parsing is off, so ``$`` in a name is text too.
"""

from __future__ import annotations

import base64
import contextlib
import html as _html
import io
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ..utils import atomic_path
from .tables import (RunEntry, Table, dataset_key, group_settings, mean_sd, paper_tables, pareto_by_dataset,
                     to_markdown, write_csvs)

DPI = 80


@dataclass
class Figure:
    title: str
    b64: str
    alt: str = ""


@dataclass
class RunSection:
    name: str
    lines: list[str]
    figures: list[Figure]
    config: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class ReportPaths:
    html: Path
    markdown: Path
    tables: list[Path]


# ============================================================================== figures
@contextlib.contextmanager
def _mpl() -> Iterator[Any]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from ..inert import mpl_rc

    with matplotlib.rc_context({**mpl_rc(), "svg.fonttype": "none"}):
        yield plt


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def bars_figure(entry: RunEntry) -> Figure:
    """Per-class clean vs robust accuracy with 95% Wilson intervals (``report.plots.classwise_bars``)."""
    from .plots import classwise_bars

    with _mpl(), tempfile.TemporaryDirectory() as d:
        path = classwise_bars({entry.name: entry.report}, Path(d) / "bars.png")
        b64 = base64.b64encode(path.read_bytes()).decode("ascii")
    return Figure("clean vs robust accuracy per class", b64, f"per-class accuracy of {entry.name}")


def confusion_figure(entry: RunEntry) -> Figure:
    """Clean and adversarial confusion matrices, rows normalized (true class -> predicted class)."""
    rep = entry.report
    names = list(rep.class_names)
    k = len(names)
    with _mpl() as plt:
        size = min(4.2 + 0.18 * k, 9)
        fig, axes = plt.subplots(1, 2, figsize=(2 * size, size * 0.9))
        for ax, adv, what in ((axes[0], False, "clean"), (axes[1], True, "adversarial")):
            m = rep.confusion(adv).astype(float)
            m = np.divide(m, m.sum(1, keepdims=True), out=np.zeros_like(m), where=m.sum(1, keepdims=True) > 0)
            im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
            ax.set_title(f"{what} inputs")
            ax.set_xlabel("predicted class")
            ax.set_ylabel("true class")
            if k <= 20:
                ax.set_xticks(range(k))
                ax.set_yticks(range(k))
                ax.set_xticklabels([str(n) for n in names], rotation=90, fontsize=7)
                ax.set_yticklabels([str(n) for n in names], fontsize=7)
                if k <= 12:
                    for i in range(k):
                        for j in range(k):
                            if m[i, j] >= 0.01:
                                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=6,
                                        color="white" if m[i, j] < 0.6 else "black")
        fig.colorbar(im, ax=list(axes), fraction=0.025)
        return Figure("confusion matrices (row-normalized)", _png(fig), f"confusion matrices of {entry.name}")


def pareto_figure(entries: Sequence[RunEntry]) -> Figure:
    """Average vs worst-class robust accuracy, one point per setting (mean ± sd over seeds)."""
    settings = group_settings(entries)
    pts, sds, labels, methods = [], [], [], []
    for s in settings:
        aggs = [r.aggregates()["rob_acc"] for r in s.reports]
        ax_, sx = mean_sd([a["avg"] for a in aggs])
        ay, sy = mean_sd([a["worst"] for a in aggs])
        pts.append((ax_, ay))
        sds.append((0 if math.isnan(sx) else sx, 0 if math.isnan(sy) else sy))
        labels.append(s.name)
        methods.append(s.label("method") or s.name)
    front = pareto_by_dataset(settings, pts)
    keys = [dataset_key(s) for s in settings]
    with _mpl() as plt:
        fig, ax = plt.subplots(figsize=(7.5, 5.2))
        uniq = list(dict.fromkeys(methods))
        cmap = plt.get_cmap("tab10" if len(uniq) <= 10 else "tab20")
        for m in uniq:
            idx = [i for i, mm in enumerate(methods) if mm == m]
            ax.errorbar([100 * pts[i][0] for i in idx], [100 * pts[i][1] for i in idx],
                        xerr=[100 * sds[i][0] for i in idx], yerr=[100 * sds[i][1] for i in idx], fmt="o", ms=6,
                        color=cmap(uniq.index(m) % cmap.N), label=m, capsize=2, lw=0.8)
        for n, key in enumerate(dict.fromkeys(keys)):  # one front per dataset
            fr = sorted((pts[i] for i in range(len(pts)) if front[i] and keys[i] == key), key=lambda p: p[0])
            if fr:
                ax.plot([100 * p[0] for p in fr], [100 * p[1] for p in fr], "--", color="grey", lw=1,
                        label="Pareto front" + (f" ({key[0]})" if len(set(keys)) > 1 else "") if n < 6 else None)
        if len(labels) <= 30:
            for (x, y), lab in zip(pts, labels):
                if math.isfinite(x) and math.isfinite(y):
                    ax.annotate(lab, (100 * x, 100 * y), xytext=(4, 3), textcoords="offset points", fontsize=6.5)
        for axis, k in ((ax.set_xlim, 0), (ax.set_ylim, 1)):  # zoom on the points (with their error bars)
            vals = [100 * (p[k] + sg * d[k]) for p, d in zip(pts, sds) for sg in (-1, 1) if math.isfinite(p[k])]
            if vals:
                lo, hi = min(vals), max(vals)
                pad = max(1.0, 0.12 * (hi - lo))
                axis(max(0.0, lo - pad), min(100.0, hi + pad))
        ax.set_xlabel("average robust accuracy (%)")
        ax.set_ylabel("worst-class robust accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        return Figure("average vs worst-class robust accuracy", _png(fig),
                      "Pareto plot of average against worst-class robust accuracy")


def eps_figure(entry: RunEntry) -> Figure:
    """Robust accuracy per class/group against eps (the run's eps sweep)."""
    reps = [getattr(r, "main", r) for r in entry.eps_sweep or []]
    eps = [r.eps for r in reps]
    names = list(reps[0].group_names)
    vals = np.stack([r.by_group["rob_acc"].to_numpy(dtype=float) for r in reps])  # (E, G)
    avg = [r.overall["rob_acc"] for r in reps]
    with _mpl() as plt:
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
        for gi, g in enumerate(names[:20]):
            ax.plot(eps, 100 * vals[:, gi], "-o", ms=3, lw=1, color=cmap(gi % cmap.N), label=str(g))
        ax.plot(eps, [100 * a for a in avg], "k--", lw=2, label="average")
        ax.set_xlabel("eps")
        ax.set_ylabel("robust accuracy (%)")
        ax.set_ylim(0, 102)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        return Figure(f"robust accuracy vs eps: {entry.name}", _png(fig), f"robust accuracy against eps for {entry.name}")


# ============================================================================== the page
def _config_lines(e: RunEntry) -> list[tuple[str, str]]:
    keys = ("data", "model", "method", "method_options", "eps", "epochs", "lr", "batch_size", "seed")
    out = [(k, str(e.config[k])) for k in keys if k in e.config]
    a = e.audit.meta if hasattr(e.audit, "meta") else {}
    if a:
        out.append(("audit", f"{', '.join(map(str, a.get('attacks', [])))} at eps {a.get('eps')}, n={a.get('n')}"))
    return out


def run_sections(entries: Sequence[RunEntry], *, figures: bool = True) -> list[RunSection]:
    out = []
    for e in entries:
        rep = e.report
        agg = rep.aggregates()
        chi = rep.chi2()["robust"]
        lines = [f"clean accuracy {100 * agg['clean_acc']['avg']:.1f}% (worst {100 * agg['clean_acc']['worst']:.1f}%, "
                 f"{agg['clean_acc']['worst_group']}); robust {100 * agg['rob_acc']['avg']:.1f}% "
                 f"(worst {100 * agg['rob_acc']['worst']:.1f}%, {agg['rob_acc']['worst_group']})",
                 f"do the classes differ in robust accuracy? chi2 = {chi['statistic']:.1f} (dof {chi['dof']}), "
                 f"p = {chi['p_value']:.2g}" + (f" ({chi['note']})" if chi.get("note") else "")]
        figs = [bars_figure(e), confusion_figure(e)] if figures else []
        if figures and e.eps_sweep:
            figs.append(eps_figure(e))
        if e.certify:
            from .certify import curves_figure, run_lines

            lines += run_lines(e.certify)
            if figures:
                figs.append(curves_figure({e.name: e.certify}))
        out.append(RunSection(e.name, lines, figs, _config_lines(e)))
    return out


def render_html(*, title: str, description: str, meta: list[tuple[str, str]], tables: Sequence[Table],
                figures: Sequence[Figure], runs: Sequence[RunSection], warnings: Sequence[tuple[str, str]]) -> str:
    """The page from its parts (Jinja2, autoescape on)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("robfair.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2").render(title=title, description=description, meta=meta, tables=tables,
                                                      figures=figures, runs=runs, warnings=warnings)


def write_report(entries: Sequence[RunEntry], out: str | Path, *, title: str = "robfair report", description: str = "",
                 baseline: str | None = None, n_boot: int = 1000, figures: bool = True,
                 extra_warnings: Sequence[str] = ()) -> ReportPaths:
    """Write ``out`` (HTML), ``out`` with ``.md`` and ``<stem>_tables/*.csv``. Everything is computed
    before the first file is written."""
    from .. import __version__

    entries = list(entries)
    out = Path(out)
    tables = paper_tables(entries, baseline=baseline, n_boot=n_boot, extra_warnings=extra_warnings)
    figs = [pareto_figure(entries)] if figures else []
    sections = run_sections(entries, figures=figures)
    warn = [(e.name, w) for e in entries for w in getattr(e.audit, "warnings", [])] + [("(report)", w) for w in extra_warnings]
    attacks = sorted({a for e in entries for a in (getattr(e.audit, "meta", {}) or {}).get("attacks", [])})
    eps = sorted({str((getattr(e.audit, "meta", {}) or {}).get("eps")) for e in entries})
    settings = group_settings(entries)
    meta = [("runs", f"{len(entries)} in {len(settings)} settings"), ("attacks", ", ".join(attacks) or "-"),
            ("audit eps", ", ".join(eps)), ("generated", time.strftime("%Y-%m-%d %H:%M")),
            ("robfair", __version__)]
    page = render_html(title=title, description=description, meta=meta, tables=tables, figures=figs,
                       runs=sections, warnings=warn)
    md_intro = "\n".join(f"- {k}: {v}" for k, v in meta) + ("\n\n" + description if description else "")
    markdown = to_markdown(tables, title=title, intro=md_intro)
    with atomic_path(out) as tmp:
        tmp.write_text(page, encoding="utf-8")
    md = out.with_suffix(".md")
    with atomic_path(md) as tmp:
        tmp.write_text(markdown, encoding="utf-8")
    csvs = write_csvs(tables, out.parent / f"{out.stem}_tables")
    return ReportPaths(out, md, csvs)


def escape(s: Any) -> str:
    """HTML-escape (for callers building snippets outside the template)."""
    return _html.escape(str(s))
