"""One self-contained HTML page over a set of runs (figures as base64 PNG, inline CSS, no script,
no network), plus the same tables as Markdown and CSV.

    paths = write_report(entries, "report.html", title="frl-table")   # report.html, report.md, report_tables/*.csv

Picture first: the page opens with plain statements (a collapsed model, one at chance level) and the
figure that answers "which classes are weak, how much, and how sure" (robust accuracy per class with
95% intervals, sorted, average line, worst marked), then the class x run heatmap and the Pareto plot,
then the tables, then one collapsible section per run (standard / boundary error split, eps curves,
group x class heatmap, confusion matrices, training curves and the method's per-class state from
metrics.jsonl, and the weakest class's example strip: clean, adversarial and amplified perturbation
rows from the audit's examples.npz, when there is one; see :mod:`robfair.auditing.examples`).

Every label (run, class, method names, warnings) goes through Jinja2 autoescaping: a class named
``<script>`` is shown as text. Matplotlib math parsing is off, so ``$`` in a name is text too.
"""

from __future__ import annotations

import base64
import io
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import __version__
from ..metrics import wilson
from ..runfolder import RunFolder, is_audit_file, read_jsonl
from ..safeio import ResultSet
from . import plots
from .page import (Figure, ProbeLine, RunSection, Strip, StripCell, display_table, matplotlib_context,
                   render_html, to_png)
from . import reliability as rel
from .certify import curves_figure, run_lines
from .plots import classwise_bars, tied_min
from .tables import (RunEntry, Table, dataset_key, group_settings, mean_sd, paper_tables, pareto_by_dataset,
                     probe_tables, to_markdown, write_csvs)

@dataclass
class ReportPaths:
    html: Path
    markdown: Path
    tables: list[Path]


# ============================================================================== figures
def _figure(build: Any, title: str, alt: str, caption: str = "") -> Figure | None:
    """Run a plots.* builder under the report's matplotlib settings; None when it has nothing to draw."""
    with matplotlib_context():
        fig = build()
        if fig is None:
            return None
        return Figure(title, to_png(fig), alt, caption)


def figure_flags(entry: RunEntry) -> dict[str, tuple[float, float, float] | None]:
    """The classes the lead figure marks for a run: those its reliability probe flags as overstated
    by the audit, with the AutoAttack-corrected estimate (None for an older record). With
    AutoAttack in the audit the figure's numbers are AutoAttack's, so nothing is marked."""
    rec = getattr(entry.audit, "probe", None)
    if rel.kind(rec) not in ("sampled", "older"):
        return {}
    return {g: f.corrected for g, f in rel.flags(rec).items()}


def overview_figure(entries: Sequence[RunEntry], max_panels: int = 8) -> Figure:
    """The opening figure: robust accuracy per class with 95% Wilson intervals, sorted, per run;
    the classes the reliability probe flags marked, with their corrected estimate."""
    shown = list(entries)[:max_panels]
    more = len(entries) - len(shown)
    flagged = [figure_flags(e) for e in shown]
    return _figure(lambda: plots.overview_figure([(e.name, e.report) for e in shown], max_panels=max_panels,
                                                 flagged=flagged),
                   "Which classes are weak, how much, and how sure",
                   "robust accuracy per class, sorted, with intervals, for " + ", ".join(e.name for e in shown),
                   "Robust accuracy of every class (worst case over the audit's attacks), weakest first; bars show "
                   "95% Wilson intervals, the dashed line the average over all samples, red the worst class "
                   "(every class tied at the minimum is red)." + (
                       " Pale, hatched purple and marked !: a class the reliability probe flags, where the audit's "
                       "number is overstated; the purple diamond beside it is its AutoAttack-corrected robust "
                       "accuracy with its 95% interval (the per-run section has the probe's table)." if any(flagged)
                       else "") + (
                       " With more than 40 classes only the 20 weakest are named; the heatmap names all." if
                       max(len(e.report.group_names) for e in shown) > 40 else "") + (f" The first {len(shown)} of {len(entries)} runs; "
                                                                  "all runs are in the heatmap below." if more else ""))


def bars_figure(entry: RunEntry) -> Figure:
    """Per-class clean vs robust accuracy with 95% Wilson intervals (``report.plots.classwise_bars``)."""
    with matplotlib_context(), tempfile.TemporaryDirectory() as d:
        path = classwise_bars({entry.name: entry.report}, Path(d) / "bars.png")
        b64 = base64.b64encode(path.read_bytes()).decode("ascii")
    return Figure("clean vs robust accuracy per class", b64, f"per-class accuracy of {entry.name}")


def error_split_figure(entry: RunEntry) -> Figure:
    return _figure(lambda: plots.error_split_figure(entry.report), "standard and boundary error per class",
                   f"standard and boundary error per class of {entry.name}",
                   "Robust error = standard error (wrong on the clean input, grey) + boundary error (right on the "
                   "clean input, wrong under attack, orange), per class, largest robust error first. FRL's "
                   "question is which of the two makes the worst class worst.")


def confusion_figure(entry: RunEntry) -> Figure:
    """Clean and adversarial confusion matrices, rows normalized (true class -> predicted class)."""
    return _figure(lambda: plots.confusion_figure(entry.report), "confusion matrices (row-normalized)",
                   f"confusion matrices of {entry.name}")


def _sweep_reports(entry: RunEntry) -> list[Any]:
    return [getattr(r, "main", r) for r in entry.eps_sweep or []]


def eps_figure(entry: RunEntry) -> Figure:
    """Robust accuracy per class/group against eps (the run's eps sweep), with 95% bands."""
    reps = _sweep_reports(entry)
    eps = [float(r.eps) for r in reps]
    names = [str(g) for g in reps[0].group_names]
    frames = [r.by_group for r in reps]
    vals, lo, hi = (np.stack([f[c].to_numpy(dtype=float) for f in frames]) for c in ("rob_acc", "rob_acc_lo", "rob_acc_hi"))
    avg = [r.overall["rob_acc"] for r in reps]
    audit_eps = (getattr(entry.audit, "meta", {}) or {}).get("eps")
    audit_eps = float(audit_eps) if isinstance(audit_eps, (int, float)) else None
    many = len(names) > 10
    return _figure(lambda: plots.eps_curves_figure(eps, names, vals, lo, hi, avg, audit_eps=audit_eps),
                   f"robust accuracy vs eps per class: {entry.name}", f"robust accuracy against eps for {entry.name}",
                   "One line per class" + (" (the 5 weakest at the largest eps in colour with 95% Wilson bands, "
                                           "the others grey)" if many else "") +
                   f"; attack {reps[0].attack or '-'}; dashed: the average over all samples.")


def groups_heatmap_figure(entry: RunEntry) -> Figure | None:
    """Robust accuracy per (group, class) cell, when the data has groups other than the classes."""
    rep = entry.report
    if rep.groups_are_classes:
        return None
    c = rep.counts
    with np.errstate(invalid="ignore", divide="ignore"):
        mat = np.where(c.n > 0, c.robust / np.maximum(c.n, 1), np.nan)
    return _figure(lambda: plots.heatmap_figure(mat, rep.group_names, rep.class_names, xlabel="class", ylabel="group"),
                   "robust accuracy per group and class", f"group by class heatmap of {entry.name}",
                   "Robust accuracy of each (group, class) cell in percent; blank cells have no samples; each "
                   "group's worst class is outlined in red.")


def class_run_heatmap(entries: Sequence[RunEntry]) -> Figure | None:
    """Robust accuracy of every class in every run (runs sharing the first run's classes). Runs are
    rows up to 30 classes; beyond, classes are rows (weakest on average first) so 100 stay legible."""
    ref = tuple(entries[0].report.group_names) if entries else ()
    same = [e for e in entries if tuple(e.report.group_names) == ref]
    if len(same) < 2:
        return None
    mat = np.stack([e.report.by_group["rob_acc"].to_numpy(dtype=float) for e in same])  # runs x classes
    runs = [e.name for e in same]
    classes = [str(c) for c in ref]
    left = f" ({len(entries) - len(same)} runs on other classes left out)" if len(same) < len(entries) else ""
    if len(classes) <= 30:
        build = lambda: plots.heatmap_figure(mat, runs, classes, xlabel="class", ylabel="run")  # noqa: E731
        cap = "Rows: runs, columns: classes; each run's worst class outlined in red."
    else:
        order = np.argsort(np.nanmean(mat, 0), kind="stable")
        build = lambda: plots.heatmap_figure(mat[:, order].T, [classes[i] for i in order], runs, xlabel="run",  # noqa: E731
                                             ylabel="class (weakest on average first)", mark_row_min=False)
        cap = "Rows: classes sorted by their mean robust accuracy over the runs, weakest on top; columns: runs."
    return _figure(build, "robust accuracy per class and run", "class by run heatmap of robust accuracy",
                   "Robust accuracy in percent (brighter is better). " + cap + left)


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
    return _figure(lambda: plots.pareto_figure(pts, sds, labels, methods, front, keys),
                   "average vs worst-class robust accuracy", "Pareto plot of average against worst-class robust accuracy",
                   "One point per setting (mean ± sd over seeds). Up and right is better; ringed points are on the "
                   "Pareto front (no other setting on the same dataset is better in both), joined by the black staircase.")


def read_history(entry: RunEntry) -> list[dict[str, Any]]:
    """The run's metrics.jsonl lines (empty when there is none; unreadable lines skipped)."""
    if entry.path is None:
        return []
    return read_jsonl(RunFolder(entry.path).metrics)


def training_figures(entry: RunEntry) -> list[Figure]:
    hist = read_history(entry)
    if not hist:
        return []
    names = [str(c) for c in entry.report.group_names]
    method = str(entry.config.get("method") or "")
    out = [_figure(lambda: plots.training_figure(hist, names), "training curves", f"training curves of {entry.name}",
                   "From metrics.jsonl: the training loss, validation accuracy (the validation split carved from the "
                   "training set; the dotted line is the epoch best.pt holds) and validation robust accuracy per class.")]
    out.append(_figure(lambda: plots.method_state_figure(hist, method, names), f"{method or 'method'} state per class over epochs",
                       f"per-class state of {method} over epochs",
                       "The method's own per-class quantities as logged in metrics.jsonl after each epoch "
                       "(weights, per-class eps, multipliers ...)."))
    return [f for f in out if f is not None]


# ============================================================================== example strip
#: the strip's images are enlarged (nearest neighbour) to at least this many pixels a side
STRIP_MIN_PX = 64


def _imageto_png(img: np.ndarray) -> str:
    """A (C, H, W) uint8 image (C = 1 or 3) as a base64 PNG, enlarged by an integer factor to at
    least :data:`STRIP_MIN_PX` pixels a side so small images stay sharp."""
    import matplotlib.image  # lazy: start-up time (matplotlib only when a report is drawn)

    a = np.asarray(img, dtype=np.uint8)
    a = a[0] if a.shape[0] == 1 else np.transpose(a[:3], (1, 2, 0))
    f = max(1, -(-STRIP_MIN_PX // max(1, min(a.shape[:2]))))
    a = np.repeat(np.repeat(a, f, axis=0), f, axis=1)
    buf = io.BytesIO()
    if a.ndim == 2:
        matplotlib.image.imsave(buf, a, cmap="gray", vmin=0, vmax=255, format="png")
    else:
        matplotlib.image.imsave(buf, a, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def amplified_perturbation(clean: np.ndarray, adv: np.ndarray) -> tuple[np.ndarray, float]:
    """``(image, factor)``: ``adv - clean`` scaled by ``factor`` so its largest absolute value
    reaches 127, around mid-grey 128 (uint8); factor 1 for a zero perturbation."""
    d = adv.astype(np.int16) - clean.astype(np.int16)
    peak = int(np.abs(d).max()) if d.size else 0
    factor = 127.0 / peak if peak else 1.0
    return np.clip(np.rint(128 + d * factor), 0, 255).astype(np.uint8), factor


def example_strip(entry: RunEntry) -> Strip | None:
    """The strip of the run's audit examples (``AuditReport.examples``), None when it has none."""
    ex = getattr(entry.audit, "examples", None)
    if ex is None or len(ex) == 0:
        return None
    names = [str(c) for c in ex.class_names]
    groups = [str(g) for g in ex.group_names]
    name = lambda i: names[int(i)] if 0 <= int(i) < len(names) else str(int(i))  # noqa: E731
    clean, adv, pert = [], [], []
    for j in range(len(ex)):
        i = int(ex.index[j])
        grp = f", group {groups[int(ex.group[j])]}" if ex.has_groups and 0 <= int(ex.group[j]) < len(groups) else ""
        clean.append(StripCell(_imageto_png(ex.clean[j]), name(ex.clean_pred[j]),
                               f"clean image of sample {i} (class {name(ex.y[j])}{grp}), predicted {name(ex.clean_pred[j])}"))
        adv.append(StripCell(_imageto_png(ex.adv[j]), name(ex.adv_pred[j]),
                             f"adversarial image of sample {i}, predicted {name(ex.adv_pred[j])}"))
        p, factor = amplified_perturbation(ex.clean[j], ex.adv[j])
        pert.append(StripCell(_imageto_png(p), f"×{factor:.0f}", f"perturbation of sample {i}, amplified {factor:.0f} times"))
    fooled = int(((ex.adv_pred != ex.y) & (ex.clean_pred == ex.y)).sum())
    eps = _fmt_eps(ex.eps)
    return Strip(f"weakest class '{name(ex.weakest)}': clean and adversarial examples",
                 [("clean", clean), (f"{ex.attack}, eps {eps}", adv), ("perturbation", pert)],
                 f"{len(ex)} samples of the class with the lowest robust accuracy (worst case over the audit's "
                 f"attacks), under the strongest attack ({ex.attack}); {fooled} of them fooled. Labels are the "
                 "predicted classes. Samples are those the attack fooled first, then clean mistakes, then robust "
                 "ones, in dataset order, from the one or two batches holding most fooled samples of the class; "
                 "the adversarial images were regenerated with the audit's seed and give the predictions recorded "
                 "in outcomes.npz. Perturbation: adversarial minus clean, scaled so its largest value fills the "
                 "range (grey is zero).")


# ============================================================================== plain statements
def model_statements(rep: Any) -> list[str]:
    """Plain sentences for a model that is collapsed (one predicted class takes almost every input),
    no better than chance on clean inputs, or has no robustness at all; empty when none applies."""
    out: list[str] = []
    n = rep.n
    k = rep.num_classes
    if n == 0 or k < 2:
        return out
    conf = rep.confusion(False)
    pred = conf.sum(0)
    top = int(np.argmax(pred))
    share = pred[top] / max(1, pred.sum())
    prior = conf.sum(1) / max(1, conf.sum())
    chance = float(prior.max())
    o = rep.overall
    lo, hi = wilson(rep.overall_counts()["clean_acc"], n)
    if share >= 0.9:
        out.append(f"The model is collapsed: it predicts class '{rep.class_names[top]}' for {100 * share:.0f}% of the "
                   f"clean inputs.")
    if lo <= chance + 1e-12 or hi <= chance + 0.02:
        out.append(f"Clean accuracy {100 * o['clean_acc']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] is at chance level "
                   f"(always predicting the largest class gives {100 * chance:.1f}%): per-class numbers describe a "
                   "model that has not learned the task.")
    if o["rob_acc"] == 0 and o["clean_acc"] > 0:
        out.append("Robust accuracy is 0 in every class: the attack fools the model on every input, so the class-wise "
                   "robust numbers carry no ranking.")
    return out


def probe_line(entry: RunEntry) -> ProbeLine | None:
    """The run's reliability-probe verdict (passed or not) and AutoAttack's own flags; None when
    its audit has no probe record."""
    audit = entry.audit
    rec = getattr(audit, "probe", None)
    line = rel.verdict_line(rec, getattr(audit, "warnings", []))
    if line is None:
        return None
    return ProbeLine(entry.name, rel.status(rec), line, rel.autoattack_flags(rec))


def _tied(names: Sequence[Any], values: Sequence[float]) -> str:
    idx = tied_min(values)
    shown = ", ".join(str(names[i]) for i in idx[:4])
    return shown + (f" and {len(idx) - 4} more, tied" if len(idx) > 4 else (" (tied)" if len(idx) > 1 else ""))


# ============================================================================== the page
def _config_lines(e: RunEntry) -> list[tuple[str, str]]:
    keys = ("data", "model", "method", "method_options", "eps", "epochs", "lr", "batch_size", "seed")
    out = [(k, str(e.config[k])) for k in keys if k in e.config]
    a = e.audit.meta if hasattr(e.audit, "meta") else {}
    if a:
        out.append(("audit", f"{', '.join(map(str, a.get('attacks', [])))} at eps {_fmt_eps(a.get('eps'))}, n={a.get('n')}"))
    if e.path is not None:
        out.append(("folder", str(e.path)))
    return out


def _fmt_eps(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def run_sections(entries: Sequence[RunEntry], *, figures: bool = True) -> list[RunSection]:
    out = []
    for e in entries:
        rep = e.report
        agg = rep.aggregates()
        chi = rep.chi2()["robust"]
        bg = rep.by_group
        lines = [f"clean accuracy {100 * agg['clean_acc']['avg']:.1f}% (worst {100 * agg['clean_acc']['worst']:.1f}%, "
                 f"{_tied(bg.index, bg['clean_acc'].to_numpy(dtype=float))}); robust {100 * agg['rob_acc']['avg']:.1f}% "
                 f"(worst {100 * agg['rob_acc']['worst']:.1f}%, {_tied(bg.index, bg['rob_acc'].to_numpy(dtype=float))})",
                 f"do the classes differ in robust accuracy? chi2 = {chi['statistic']:.1f} (dof {chi['dof']}), "
                 f"p = {chi['p_value']:.2g}" + (f" ({chi['note']})" if chi.get("note") else "")]
        figs: list[Figure] = []
        if figures:
            figs = [error_split_figure(e)]
            if e.eps_sweep:
                figs.append(eps_figure(e))
            figs.append(groups_heatmap_figure(e))
            figs += training_figures(e)
            figs.append(confusion_figure(e))
            figs = [f for f in figs if f is not None]
        if e.certify:
            lines += run_lines(e.certify)
            if figures:
                figs.append(curves_figure({e.name: e.certify}))
        rec = getattr(e.audit, "probe", None)
        out.append(RunSection(e.name, lines, figs, _config_lines(e), model_statements(rep),
                              example_strip(e) if figures else None, probe_line(e),
                              [display_table(t) for t in probe_tables(rec)]))
    return out


# ---------------------------------------------------------------------------------------------- tables for display
def default_title(paths: Sequence[str | Path]) -> str:
    """A page title from what was reported: the folder's name (resolved, so ``.`` works), the
    parent folder of a bare ``audit.json``, or the names joined."""
    names = []
    for p in paths:
        p = Path(p).expanduser().resolve()
        if p.is_file() or p.suffix.lower() == ".json":
            p = p.parent if is_audit_file(p) else p.with_suffix("")
        names.append(p.name or str(p))
    names = list(dict.fromkeys(n for n in names if n))
    return " vs ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "") if names else "robfair report"


def write_report(entries: Sequence[RunEntry], out: str | Path, *, title: str | None = None, description: str = "",
                 baseline: str | None = None, n_boot: int = 1000, figures: bool = True,
                 extra_warnings: Sequence[str] = (), lead_tables: Sequence[Table] = ()) -> ReportPaths:
    """Write ``out`` (HTML), ``out`` with ``.md`` and ``<stem>_tables/*.csv``. Everything is computed
    before the first file is written; the three are one :class:`~robfair.safeio.ResultSet` (the
    CSV folder replaced whole, the page last), so a failed write leaves the earlier report. ``title`` defaults to the runs' common folder; ``lead_tables``
    open the page and the Markdown, before the probe's verdicts, the statements and the figures (the
    leaderboard's ranking)."""
    entries = list(entries)
    out = Path(out)
    if not title:
        paths = [e.path for e in entries if e.path is not None]
        common = Path(os.path.commonpath([str(Path(p).resolve()) for p in paths])) if paths else None
        title = default_title([common]) if common is not None else "robfair report"
    lead = list(lead_tables)
    tables = paper_tables(entries, baseline=baseline, n_boot=n_boot, extra_warnings=extra_warnings)
    figs: list[Figure] = []
    if figures:
        figs = [overview_figure(entries), class_run_heatmap(entries)]
        if len(group_settings(entries)) > 1:
            figs.append(pareto_figure(entries))
        figs = [f for f in figs if f is not None]
    sections = run_sections(entries, figures=figures)
    statements = [(s.name, line) for s in sections for line in s.statements]
    probes = [s.probe for s in sections if s.probe is not None]
    # the probe's verdicts and AutoAttack's own flags are stated above the figures, not again here
    warn = [(e.name, w) for e in entries
            for w in rel.other_warnings(getattr(e.audit, "probe", None), getattr(e.audit, "warnings", []), drop_flags=True)]
    warn += [("(report)", w) for w in extra_warnings]
    attacks = sorted({a for e in entries for a in (getattr(e.audit, "meta", {}) or {}).get("attacks", [])})
    eps = sorted({_fmt_eps((getattr(e.audit, "meta", {}) or {}).get("eps")) for e in entries})
    settings = group_settings(entries)
    meta = [("runs", f"{len(entries)} in {len(settings)} settings"), ("attacks", ", ".join(attacks) or "-"),
            ("audit eps", ", ".join(eps)), ("generated", time.strftime("%Y-%m-%d %H:%M")),
            ("robfair", __version__)]
    page = render_html(title=title, description=description, meta=meta, tables=tables, figures=figs,
                       runs=sections, warnings=warn, statements=statements, probes=probes, lead=lead)
    md_meta = "\n".join(f"- {k}: {v}" for k, v in meta)
    md_said = ""
    if statements:
        md_said += "\n\n" + "\n".join(f"- **{run}**: {line}" for run, line in statements)
    if probes:
        md_said += "\n\n" + "\n".join(f"- **{p.run}** ({p.status}): {line}" for p in probes for line in [p.line, *p.flags])
    if lead:  # the ranking first (after the one-line description), then what the page says of it
        markdown = to_markdown([*lead, *tables], title=title, intro=description, after=len(lead),
                               middle=(md_said.strip() + "\n\n" + md_meta).strip())
    else:
        md_intro = md_meta + ("\n\n" + description if description else "") + md_said
        markdown = to_markdown(tables, title=title, intro=md_intro)
    tables = [*lead, *tables]  # the CSVs: every table
    md, folder = out.with_suffix(".md"), out.parent / f"{out.stem}_tables"
    with ResultSet() as files:  # the CSV folder (replaced whole), the Markdown, then the page: all of them or none
        with files.folder(folder) as staged:
            names = [p.name for p in write_csvs(tables, staged)]
        with files.file(md) as tmp:
            tmp.write_text(markdown, encoding="utf-8")
        with files.file(out, last=True) as tmp:
            tmp.write_text(page, encoding="utf-8")
    return ReportPaths(out, md, [folder / name for name in names])
