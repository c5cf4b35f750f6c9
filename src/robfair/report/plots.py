"""Figures for audits and reports (matplotlib, Agg backend, no display needed).

Every builder returns a matplotlib Figure (``robfair.report.html`` embeds them as PNG) except
:func:`classwise_bars`, which writes the demo's / ``audit --plot``'s PNG. Colours keep one meaning
everywhere: blue = robust accuracy, light blue = clean accuracy, red = the worst class(es),
orange = boundary error, grey = standard error; dashed black = the average over all samples;
purple = a class the reliability probe flags (its bar pale and hatched purple: the audit's
overstated number; a purple diamond: the AutoAttack-corrected estimate with its interval).
Accuracies are in percent on every axis.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..charts import (AVG, BNDY_ERR, CLEAN, FLAGGED, HEATMAP, ROBUST, STD_ERR, WORST, draw_classwise, error_bars, pale,
                      pyplot, tick_style, tied_min)
from ..inert import mpl_rc, plain
from ..utils import atomic_path


def classwise_bars(reports: Mapping[str, Any], path: str | Path, *, title: str = "", by: str = "group") -> Path:
    """Per-group clean and robust accuracy (percent) with 95% Wilson intervals, one panel per model,
    the robust average as a dashed line and the worst group(s) in red (ties all marked).

    ``reports`` maps a label (e.g. ``"standard"``, ``"pgd-at"``) to a GroupReport (or an AuditReport,
    whose worst case over attacks is used). Written atomically as PNG. Labels are untrusted text:
    math text is off and control characters are dropped (:mod:`robfair.inert`)."""
    import matplotlib  # lazy: start-up time (matplotlib: ~0.4 s)

    with matplotlib.rc_context(mpl_rc()):
        return _classwise_bars(reports, path, title=title, by=by)


def _classwise_bars(reports: Mapping[str, Any], path: str | Path, *, title: str, by: str) -> Path:
    plt = pyplot()
    items = [(plain(label), getattr(r, "main", r)) for label, r in reports.items()]
    k = len(getattr(items[0][1], "by_group" if by == "group" else "by_class"))
    fig, axes = plt.subplots(len(items), 1, figsize=(max(7.0, 0.55 * k + 2.5), 3.3 * len(items) + 0.6),
                             squeeze=False)
    for ax, (label, rep) in zip(axes[:, 0], items):
        draw_classwise(ax, rep, label, by=by)
    from matplotlib.lines import Line2D  # lazy: start-up time (matplotlib: ~0.4 s)
    from matplotlib.patches import Patch  # lazy: start-up time (matplotlib: ~0.4 s)

    handles = [Patch(color=CLEAN, label="clean accuracy"), Patch(color=ROBUST, label="robust accuracy"),
               Patch(color=WORST, label="worst class (robust)"),
               Line2D([], [], color=AVG, ls="--", label="robust average (all samples)"), 
               Line2D([], [], color="#333333", marker="|", ls="", ms=8, label="95% Wilson interval")]
    height = 3.3 * len(items) + 0.6
    legend_y = 1 - (0.32 if title else 0.0) / height
    fig.legend(handles=handles, loc="upper center", ncol=5, fontsize=8, frameon=False, bbox_to_anchor=(0.5, legend_y))
    if title:
        fig.suptitle(plain(title), fontsize=11, y=1 - 0.02 / height, va="top")
    fig.tight_layout(rect=(0, 0, 1, legend_y - 0.08 / height))  # room for the legend (and the title above it)
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# ============================================================================== report figures
def overview_figure(items: Sequence[tuple[str, Any]], *, max_panels: int = 8,
                    flagged: Sequence[Mapping[str, tuple[float, float, float] | None]] | None = None) -> Any:
    """The report's opening figure: per run, robust accuracy of every class (percent) with its 95%
    Wilson interval, sorted from the weakest class, the run's average as a dashed line and the
    worst class(es) in red. ``items``: (label, GroupReport).

    ``flagged`` (one mapping per item): the classes the reliability probe flags, each with its
    AutoAttack-corrected robust accuracy ``(estimate, lo, hi)`` (fractions) or None: their bars are
    pale and hatched purple (the audit's number, overstated; red still marks the worst), their tick
    labels purple and marked ``!``, and the corrected estimate is a purple diamond with its
    interval (legend entries)."""
    plt = pyplot()
    items = [(plain(label), r) for label, r in list(items)[:max_panels]]
    flagged = list(flagged or [])[:len(items)] + [{}] * max(0, len(items) - len(flagged or []))
    k = max(len(r.group_names) for _, r in items)
    cols = 1 if len(items) == 1 or k > 25 else 2
    rows = math.ceil(len(items) / cols)
    width = min(15.5, max(7.5, 0.16 * k + 4)) if cols == 1 else 14.5
    fig, axes = plt.subplots(rows, cols, figsize=(width, 3.2 * rows + 0.3), squeeze=False, sharey=True)
    for ax in axes.flat[len(items):]:
        ax.set_visible(False)
    any_flag = any_corrected = False
    for ax, (label, rep), marks in zip(axes.flat, items, flagged):
        df = rep.by_group
        val = 100 * df["rob_acc"].to_numpy(dtype=float)
        order = np.argsort(np.where(np.isfinite(val), val, np.inf), kind="stable")
        v = val[order]
        lo = 100 * df["rob_acc_lo"].to_numpy(dtype=float)[order]
        hi = 100 * df["rob_acc_hi"].to_numpy(dtype=float)[order]
        names = [plain(df.index[i]) for i in order]
        keys = [str(df.index[i]) for i in order]
        flag = [i for i, g in enumerate(keys) if g in marks]
        worst = tied_min(v)
        colors = [WORST if i in worst else ROBUST for i in range(len(v))]
        x = np.arange(len(v))
        bars = ax.bar(x, v, 0.75, color=colors, yerr=error_bars(v, lo, hi), capsize=1.5 if len(v) <= 30 else 0,
                      error_kw={"lw": 0.7, "ecolor": "#333333"})
        for i in flag:  # the bar's own colour, pale (red still the worst), hatched purple
            bars[i].set_facecolor(pale(colors[i]))
            bars[i].set_edgecolor(FLAGGED)
            bars[i].set_hatch("///")
            bars[i].set_gid(f"flagged:{keys[i]}")
        corr = [(i, marks[keys[i]]) for i in flag if marks[keys[i]] is not None]
        if corr:
            cv = np.array([100 * c[0] for _, c in corr])
            ax.errorbar([i + 0.18 for i, _ in corr], cv, yerr=error_bars(cv, np.array([100 * c[1] for _, c in corr]),
                                                                   np.array([100 * c[2] for _, c in corr])),
                        fmt="D", ms=6.5, color=FLAGGED, mec="white", mew=0.8, ecolor=FLAGGED, elinewidth=1.8,
                        capsize=3, zorder=6, gid="corrected")  # beside the bar's own interval, not on it
        any_flag, any_corrected = any_flag or bool(flag), any_corrected or bool(corr)
        avg = 100 * rep.overall["rob_acc"]
        ax.axhline(avg, color=AVG, ls="--", lw=1.1)
        ax.text(len(v) - 0.5, avg + 1.5, f"average {avg:.1f}%", ha="right", va="bottom", fontsize=8,
                bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 1})
        wtxt = ", ".join(names[i] for i in worst[:3]) + (f" and {len(worst) - 3} more" if len(worst) > 3 else "")
        title = (f"{label}: worst {v[worst[0]]:.1f}% [{lo[worst[0]]:.1f}, {hi[worst[0]]:.1f}] ({wtxt})"
                 if worst else label)
        if flag:
            title += f"; probe flags {len(flag)}: " + ", ".join(names[i] for i in flag[:3]) + (" ..." if len(flag) > 3 else "")
        ax.set_title(title, fontsize=9.5, loc="left")
        ax.set_ylim(0, 105)
        ax.set_xlim(-0.6, len(v) - 0.4)
        ax.grid(axis="y", alpha=0.3)
        shown = [f"{n} !" if i in flag else n for i, n in enumerate(names)]
        if len(names) > 40:  # 100 names do not fit: name the 20 weakest (and every flagged one), the heatmap has them all
            tick_style(ax, [n if i < 20 or i in flag else "" for i, n in enumerate(shown)], worst)
            ax.tick_params(axis="x", labelsize=7)
        else:
            tick_style(ax, shown, worst)
        for i in flag:
            ax.get_xticklabels()[i].set_color(FLAGGED)
            ax.get_xticklabels()[i].set_fontweight("bold")
    for ax in axes[:, 0]:
        ax.set_ylabel("robust accuracy (%)")
    if any_flag:
        from matplotlib.lines import Line2D  # lazy: start-up time (matplotlib: ~0.4 s)
        from matplotlib.patches import Patch  # lazy: start-up time (matplotlib: ~0.4 s)

        handles = [Patch(fc=pale(ROBUST), ec=FLAGGED, hatch="///", label="! flagged by the reliability probe: the "
                         "audit's number, overstated")]
        if any_corrected:
            handles.append(Line2D([], [], color=FLAGGED, marker="D", ms=6.5, mec="white", ls="-", lw=1.8,
                                  label="AutoAttack-corrected estimate, 95% interval"))
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
                   bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout()
    return fig


def error_split_figure(rep: Any) -> Any:
    """Per class: standard error (clean mistakes) stacked under boundary error (clean-correct but
    attacked), so the bar is the robust error (percent), sorted by robust error, worst first."""
    plt = pyplot()
    df = rep.by_group
    std = 100 * df["std_err"].to_numpy(dtype=float)
    bndy = 100 * df["bndy_err"].to_numpy(dtype=float)
    rob = std + bndy
    order = np.argsort(-np.where(np.isfinite(rob), rob, -np.inf), kind="stable")
    names = [str(df.index[i]) for i in order]
    k = len(names)
    fig, ax = plt.subplots(figsize=(min(15.5, max(7.5, 0.16 * k + 4)), 3.6))
    x = np.arange(k)
    ax.bar(x, std[order], 0.75, color=STD_ERR, label="standard error (wrong on clean input)")
    ax.bar(x, bndy[order], 0.75, bottom=std[order], color=BNDY_ERR, label="boundary error (right on clean, wrong under attack)")
    worst = [i for i, o in enumerate(order) if o in tied_min(-rob)]
    ax.set_ylim(0, 105)
    ax.set_xlim(-0.6, k - 0.4)
    ax.set_ylabel("error (%); bar = robust error")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, frameon=False)
    if k > 40:  # name the 20 worst; 100 names at this width are unreadable
        tick_style(ax, [n if i < 20 else "" for i, n in enumerate(names)], worst)
        ax.tick_params(axis="x", labelsize=7)
    else:
        tick_style(ax, names, worst)
    fig.tight_layout()
    return fig


def heatmap_figure(matrix: np.ndarray, rows: Sequence[str], cols: Sequence[str], *, xlabel: str, ylabel: str,
                   cbar: str = "robust accuracy (%)", mark_row_min: bool = True) -> Any:
    """A percent heatmap (rows x cols) with values written in the cells when there are few, the
    minimum of each row outlined (the row's worst column). Sized so 100 rows or columns stay legible."""
    plt = pyplot()
    r, c = matrix.shape
    row_h = 0.42 if r <= 20 else 0.2  # inches; 100 rows -> 20 in, labels at 7 pt stay legible
    col_w = 0.5 if c <= 20 else (0.2 if c <= 50 else 0.13)
    if c <= 8:
        col_w = 1.0
    fig, ax = plt.subplots(figsize=(min(15.5, max(5.5, c * col_w + 3.2)), min(40.0, max(2.6, r * row_h + 1.6))))
    im = ax.imshow(100 * matrix, vmin=0, vmax=100, cmap=HEATMAP, aspect="auto", interpolation="nearest")
    tick_style(ax, [str(s) for s in cols], axis="x")
    tick_style(ax, [str(s) for s in rows], axis="y")
    if r > 20:  # tall: labels at 7 pt, column names at the top too (the bottom is a page away)
        ax.tick_params(axis="y", labelsize=7)
        ax.tick_params(axis="x", top=True, labeltop=True)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if r * c <= 260 or (col_w >= 0.5 and row_h >= 0.2):
        for i in range(r):
            for j in range(c):
                v = matrix[i, j]
                if np.isfinite(v):
                    ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center",
                            fontsize=(9 if r * c <= 100 else 7) if row_h > 0.3 else 6,
                            color="white" if v < 0.55 else "black")
    if mark_row_min:
        from matplotlib.patches import Rectangle  # lazy: start-up time (matplotlib: ~0.4 s)

        for i in range(r):
            for j in tied_min(matrix[i]):
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec=WORST, lw=1.6 if r * c <= 400 else 0.9))
    cb = fig.colorbar(im, ax=ax, fraction=0.03 if c > 10 else 0.06, pad=0.02)
    cb.set_label(cbar + ", higher is better", fontsize=8)
    fig.tight_layout()
    return fig


def confusion_figure(rep: Any) -> Any:
    """Clean and adversarial confusion matrices, rows normalized (true class -> predicted class)."""
    plt = pyplot()
    names = [str(n) for n in rep.class_names]
    k = len(names)
    size = min(4.0 + 0.17 * k, 8.5)
    fig, axes = plt.subplots(1, 2, figsize=(2 * size + 1.2, size), constrained_layout=True)
    im = None
    for ax, adv, what in ((axes[0], False, "clean inputs"), (axes[1], True, "adversarial inputs")):
        m = rep.confusion(adv).astype(float)
        s = m.sum(1, keepdims=True)
        m = np.divide(m, s, out=np.zeros_like(m), where=s > 0)
        im = ax.imshow(m, vmin=0, vmax=1, cmap=HEATMAP, interpolation="nearest")
        ax.set_title(what, fontsize=10)
        ax.set_xlabel("predicted class")
        ax.set_ylabel("true class")
        if k <= 30:
            tick_style(ax, names, axis="x")
            tick_style(ax, names, axis="y")
            if k <= 12:
                for i in range(k):
                    for j in range(k):
                        if m[i, j] >= 0.01:
                            ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=6,
                                    color="white" if m[i, j] < 0.6 else "black")
    cb = fig.colorbar(im, ax=list(axes), fraction=0.025)
    cb.set_label("share of the true class's samples", fontsize=8)
    return fig


def eps_curves_figure(eps: Sequence[float], names: Sequence[str], values: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                      average: Sequence[float], *, audit_eps: float | None = None, max_lines: int = 10) -> Any:
    """Robust accuracy (percent) against eps, one line per class (``values``: E x G). With more than
    ``max_lines`` classes, the weakest ones at the largest eps are drawn in colour with their 95%
    band and the rest as thin grey lines."""
    plt = pyplot()
    eps = np.asarray(eps, dtype=float)
    g = len(names)
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    ref = values[-1] if len(eps) else np.zeros(g)
    ranked = list(np.argsort(np.where(np.isfinite(ref), ref, np.inf), kind="stable"))
    colour = ranked if g <= max_lines else ranked[:5]
    cmap = plt.get_cmap("tab10")
    if g > max_lines:
        for gi in ranked[5:]:
            ax.plot(eps, 100 * values[:, gi], "-", lw=0.6, color="#b8bcc4", zorder=1)
        ax.plot([], [], "-", lw=0.6, color="#b8bcc4", label=f"the other {g - 5} classes")
    for n, gi in enumerate(colour):
        c = cmap(n % 10)
        ax.plot(eps, 100 * values[:, gi], "-o", ms=3, lw=1.3, color=c, label=plain(names[gi]), zorder=3)
        if g > max_lines:
            ax.fill_between(eps, 100 * lo[:, gi], 100 * hi[:, gi], color=c, alpha=0.12, lw=0)
    ax.plot(eps, [100 * a for a in average], "--", color=AVG, lw=2, label="average (all samples)", zorder=4)
    if audit_eps is not None and math.isfinite(audit_eps):
        ax.axvline(audit_eps, color="#555555", lw=0.8, ls=":")
        ax.text(audit_eps, 101, f" audit eps {audit_eps:.4g}", fontsize=7, va="bottom", color="#555555")
    ax.set_xlabel("eps")
    ax.set_ylabel("robust accuracy (%)")
    ax.set_ylim(0, 106)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(colour) > 5 else 1, loc="center left", bbox_to_anchor=(1.01, 0.5),
              title="weakest first" if g > max_lines else None, title_fontsize=7)
    fig.tight_layout()
    return fig


def training_figure(history: Sequence[dict[str, Any]], class_names: Sequence[str] | None = None) -> Any | None:
    """Training curves from metrics.jsonl: train loss, validation clean / robust / worst-class robust
    accuracy (best epoch marked) and validation robust accuracy per class. None without epochs."""
    plt = pyplot()
    epochs = [int(r.get("epoch", i + 1)) for i, r in enumerate(history)]
    if not epochs:
        return None
    loss = [_num((r.get("train") or {}).get("loss")) for r in history]
    summ = [((r.get("val") or {}).get("summary") or {}) for r in history]
    per_group = [((r.get("val") or {}).get("per_group") or {}) for r in history]
    best = next((r.get("select", {}).get("best_epoch") for r in reversed(history) if r.get("select")), None)
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
    ax = axes[0]
    ax.plot(epochs, loss, "-o", ms=2.5, color="#333333")
    ax.set_title("training loss", fontsize=10, loc="left")
    ax.set_xlabel("epoch")
    ax.grid(alpha=0.3)
    ax = axes[1]
    for key, lab, c, ls in (("clean_acc", "clean avg", CLEAN, "-"), ("rob_acc", "robust avg", ROBUST, "-"),
                            ("worst_rob_acc", "robust worst class", WORST, "-")):
        ax.plot(epochs, [100 * _num(s.get(key)) for s in summ], ls, marker="o", ms=2.5, color=c, label=lab)
    if best is not None:
        ax.axvline(best, color="#555555", lw=0.8, ls=":")
        ax.text(best, 2, f" best.pt (epoch {best})", fontsize=7, color="#555555")
    ax.set_ylim(0, 102)
    ax.set_title("validation accuracy (%)", fontsize=10, loc="left")
    ax.set_xlabel("epoch")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax = axes[2]
    names = list(dict.fromkeys(n for pg in per_group for n in pg))
    if names:
        mat = np.array([[100 * _num((pg.get(n) or {}).get("rob_acc")) for n in names] for pg in per_group])
        _lines(ax, epochs, mat, names)
        ax.set_ylim(0, 102)
    ax.set_title("validation robust accuracy per class (%)", fontsize=10, loc="left")
    ax.set_xlabel("epoch")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def method_state_series(history: Sequence[dict[str, Any]], class_names: Sequence[str] | None = None
                        ) -> dict[str, tuple[list[str], np.ndarray]]:
    """The method's per-class (per-group) state over epochs from metrics.jsonl's ``method`` entries:
    every key whose value is a list of numbers, or a mapping of group names to numbers, as
    (names, E x K). Scalars, flags and matrices (DAFA's class similarity) are left out."""
    def number(x: Any) -> bool:
        return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))

    named = set(map(str, class_names)) if class_names is not None else None
    keys: dict[str, None] = {}
    for r in history:
        for k, v in (r.get("method") or {}).items():
            if isinstance(v, list) and v and all(map(number, v)):
                keys[k] = None
            elif isinstance(v, dict) and v and all(map(number, v.values())) and (named is None or set(v) <= named):
                keys[k] = None  # per-group values keyed by the groups' names (e.g. fair-constraint's lambda)
    out = {}
    for k in keys:
        vals = [(r.get("method") or {}).get(k) for r in history]
        first = next(v for v in vals if v is not None)
        if isinstance(first, dict):
            names = list(first)
            mat = [[_num((v or {}).get(n)) for n in names] for v in vals]
        else:
            width = max(len(v) for v in vals if v is not None)
            names = list(class_names) if class_names is not None and len(class_names) == width else [str(i) for i in range(width)]
            mat = [[_num(v[i]) if v is not None and i < len(v) else math.nan for i in range(width)] for v in vals]
        out[k] = (names, np.asarray(mat, dtype=float))
    return out


def method_state_figure(history: Sequence[dict[str, Any]], method: str = "", class_names: Sequence[str] | None = None,
                        max_panels: int = 4) -> Any | None:
    """One panel per per-class quantity of the method (weights, class eps, multipliers ...) over
    epochs; None when the method logs none."""
    series = method_state_series(history, class_names)
    series = {k: v for k, v in series.items() if np.isfinite(v[1]).any()}
    if not series:
        return None
    plt = pyplot()
    epochs = [int(r.get("epoch", i + 1)) for i, r in enumerate(history)]
    items = list(series.items())[:max_panels]
    fig, axes = plt.subplots(1, len(items), figsize=(min(15, 5 * len(items)), 3.5), squeeze=False)
    for ax, (key, (names, mat)) in zip(axes[0], items):
        _lines(ax, epochs, mat, names)
        ax.set_title(plain(f"{method + ': ' if method else ''}{key.replace('_', ' ')}"), fontsize=10, loc="left")
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _lines(ax: Any, epochs: Sequence[int], mat: np.ndarray, names: Sequence[str]) -> None:
    """One line per column; a legend up to 10 lines, else thin lines and the 3 lowest at the end named."""
    plt = pyplot()
    k = mat.shape[1]
    if k <= 10:
        cmap = plt.get_cmap("tab10")
        for i, n in enumerate(names):
            ax.plot(epochs, mat[:, i], "-", lw=1.2, color=cmap(i % 10), label=plain(n))
        ax.legend(fontsize=6.5, ncol=2, loc="best")
        return
    for i in range(k):
        ax.plot(epochs, mat[:, i], "-", lw=0.5, color="#9aa0aa", alpha=0.7)
    last = mat[-1]
    for i in list(np.argsort(np.where(np.isfinite(last), last, np.inf), kind="stable"))[:3]:
        ax.plot(epochs, mat[:, i], "-", lw=1.4, color=WORST)
        ax.annotate(plain(names[i]), (epochs[-1], mat[-1, i]), xytext=(3, 0), textcoords="offset points", fontsize=6.5,
                    color=WORST, va="center")
    ax.text(0.01, 0.98, f"{k} lines, one per class; 3 lowest at the end in red", transform=ax.transAxes,
            fontsize=6.5, va="top", color="#555555")


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def pareto_figure(points: Sequence[tuple[float, float]], sds: Sequence[tuple[float, float]], labels: Sequence[str],
                  methods: Sequence[str], front: Sequence[bool], keys: Sequence[Any]) -> Any:
    """Average vs worst-class robust accuracy (percent), one point per setting (mean ± sd over seeds);
    the Pareto front of each dataset drawn as a staircase with its points ringed; labels spread so
    they do not overlap."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 5.6))
    uniq = list(dict.fromkeys(methods))
    cmap = plt.get_cmap("tab10" if len(uniq) <= 10 else "tab20")
    P = np.array([[100 * x, 100 * y] for x, y in points], dtype=float)
    S = np.array([[100 * a, 100 * b] for a, b in sds], dtype=float)
    for m in uniq:
        idx = [i for i, mm in enumerate(methods) if mm == m]
        ax.errorbar(P[idx, 0], P[idx, 1], xerr=S[idx, 0], yerr=S[idx, 1], fmt="o", ms=6,
                    color=cmap(uniq.index(m) % cmap.N), label=plain(m), capsize=2, lw=0.8, zorder=3)
    multi = len(set(keys)) > 1
    for n, key in enumerate(dict.fromkeys(keys)):
        idx = [i for i in range(len(P)) if front[i] and keys[i] == key and np.isfinite(P[i]).all()]
        if not idx:
            continue
        fr = P[sorted(idx, key=lambda i: P[i, 0])]
        # staircase: from each front point go down-right to the next (higher avg, lower worst)
        xs, ys = [fr[0, 0]], [fr[0, 1]]
        for a, b in zip(fr[:-1], fr[1:]):
            xs += [b[0], b[0]]
            ys += [a[1], b[1]]
        ax.plot(xs, ys, "-", color="#222222", lw=1.2, alpha=0.7, zorder=2,
                label=("Pareto front" + (f" ({plain(key[0])})" if multi else "")) if n < 6 else None)
        ax.scatter(fr[:, 0], fr[:, 1], s=170, facecolors="none", edgecolors="#222222", lw=1.4, zorder=4)
    finite = np.isfinite(P).all(1)
    lims = []
    for d in (0, 1):
        vals = np.concatenate([P[finite, d] - S[finite, d], P[finite, d] + S[finite, d]]) if finite.any() else np.array([0, 100])
        lo, hi = float(np.nanmin(vals)), float(np.nanmax(vals))
        span = max(hi - lo, 10.0)  # at least 10 points so near-zero values do not look like 0-1
        mid = (lo + hi) / 2
        lo, hi = mid - 0.6 * span, mid + 0.6 * span
        if lo < 0:
            lo, hi = 0.0, hi - lo
        if hi > 100:
            lo, hi = max(0.0, lo - (hi - 100)), 100.0
        lims.append((lo, hi))
    ax.set_xlim(*lims[0])
    ax.set_ylim(*lims[1])
    if len(labels) <= 40:
        _spread_labels(ax, P, labels, finite)
    ax.set_xlabel("average robust accuracy (%)")
    ax.set_ylabel("worst-class robust accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def _spread_labels(ax: Any, P: np.ndarray, labels: Sequence[str], finite: np.ndarray) -> None:
    """Place each label next to its point, moving it along a short list of offsets until its box
    overlaps no label already placed (greedy; good enough for tens of points)."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    placed: list[Any] = []
    offsets = [(5, 4), (5, -11), (-5, 4), (-5, -11), (5, 14), (5, -21), (-5, 14), (-5, -21), (5, 24), (-5, 24)]
    for i in np.argsort(-P[:, 1]):
        if not finite[i]:
            continue
        best = None
        for dx, dy in offsets:
            t = ax.annotate(plain(labels[i]), tuple(P[i]), xytext=(dx, dy), textcoords="offset points", fontsize=7,
                            ha="left" if dx > 0 else "right", color="#222222")
            bb = t.get_window_extent(renderer).expanded(1.05, 1.15)
            if not any(bb.overlaps(o) for o in placed):
                best = (t, bb)
                break
            t.remove()
        if best is None:
            t = ax.annotate(plain(labels[i]), tuple(P[i]), xytext=offsets[0], textcoords="offset points", fontsize=7,
                            color="#222222")
            best = (t, t.get_window_extent(renderer))
        placed.append(best[1])
