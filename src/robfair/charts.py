"""The drawing primitives every chart shares: one palette, the tick style, and the per-class bar panel.

On the ground floor so that both :mod:`robfair.metrics.views` (``GroupReport.plot``) and
:mod:`robfair.report.plots` (every figure of the reports) draw with it; matplotlib is imported
only when a figure is drawn. Colours keep one meaning everywhere: blue = robust accuracy, light
blue = clean accuracy, red = the worst class(es), orange = boundary error, grey = standard error;
dashed black = the average over all samples; purple = a class the reliability probe flags.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .inert import plain

CLEAN = "#9cc3e6"
ROBUST = "#2b6cb0"
WORST = "#c0392b"
STD_ERR = "#8a8f98"
BNDY_ERR = "#e67e22"
AVG = "#111111"
#: a class the reliability probe flags (the audit overstates it): its bar pale and hatched in this
#: colour, the AutoAttack-corrected estimate a diamond with its interval
FLAGGED = "#7d3c98"
HEATMAP = "viridis"  # sequential: brighter = higher accuracy (better); same map in every heatmap


def pyplot():
    import matplotlib  # lazy: start-up time (matplotlib: ~0.4 s)

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # lazy: start-up time (matplotlib: ~0.4 s)

    return plt


def tied_min(values: Sequence[float], tol: float = 1e-12) -> list[int]:
    """Indices of every value equal to the minimum (ties are all the worst); NaNs ignored."""
    a = np.asarray(values, dtype=float)
    if not np.isfinite(a).any():
        return []
    m = np.nanmin(a)
    return [i for i, v in enumerate(a) if np.isfinite(v) and abs(v - m) <= tol]


def tick_style(ax: Any, labels: Sequence[str], worst: Sequence[int] = (), axis: str = "x") -> None:
    """Class names as tick labels, rotated / shrunk as the count grows; worst ones red and bold."""
    k = len(labels)
    longest = max((len(str(s)) for s in labels), default=1)
    size = 8 if k <= 20 else (6.5 if k <= 50 else 5)
    pos = range(k)
    if axis == "x":
        ax.set_xticks(pos)
        rot = 0 if (k <= 12 and longest <= 4) else (90 if k > 30 or longest > 10 else 35)
        ticks = ax.set_xticklabels([plain(s) for s in labels], rotation=rot, fontsize=size,
                                   ha="right" if rot == 35 else "center",
                                   rotation_mode="anchor" if rot == 35 else "default")
    else:
        ax.set_yticks(pos)
        ticks = ax.set_yticklabels([plain(s) for s in labels], fontsize=size)
    for i in worst:
        ticks[i].set_color(WORST)
        ticks[i].set_fontweight("bold")


def pale(color: str, share: float = 0.3) -> tuple[float, float, float]:
    """``color`` mixed with white (``share`` of the colour left)."""
    from matplotlib.colors import to_rgb  # lazy: start-up time (matplotlib: ~0.4 s)

    return tuple(1 - share * (1 - c) for c in to_rgb(color))


def error_bars(val: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(np.vstack([val - lo, hi - val])), 0, None)


# ============================================================================== the demo / audit --plot chart
def draw_classwise(ax: Any, rep: Any, label: str = "", *, by: str = "group", legend: bool = False) -> None:
    """One panel of :func:`classwise_bars` on matplotlib axes ``ax``: per-group (``by="class"``: per-class)
    clean and robust accuracy (percent) with 95% Wilson intervals, the robust average dashed, the worst
    group(s) red. ``rep``: a GroupReport or an AuditReport (its worst case); ``legend``: a legend beside the
    axes, outside them on the right, so it never covers a bar (bars reach any height: no corner inside the
    axes is sure to be empty)."""
    rep = getattr(rep, "main", rep)
    label = plain(label)
    df = rep.by_group if by == "group" else rep.by_class
    idx = np.arange(len(df))
    w = 0.38
    for off, col, color, name in ((-w / 2, "clean_acc", CLEAN, "clean"), (w / 2, "rob_acc", ROBUST, "robust")):
        val = 100 * df[col].to_numpy(dtype=float)
        err = error_bars(val, 100 * df[f"{col}_lo"].to_numpy(dtype=float), 100 * df[f"{col}_hi"].to_numpy(dtype=float))
        colors = [color] * len(df)
        if col == "rob_acc":
            for i in tied_min(val):
                colors[i] = WORST
        ax.bar(idx + off, val, w, yerr=err, color=colors, label=f"{name} accuracy", capsize=2,
               error_kw={"lw": 0.8, "ecolor": "#333333"})
    avg = 100 * rep.overall["rob_acc"]
    ax.axhline(avg, color=AVG, ls="--", lw=1.1, zorder=5)
    worst = tied_min(df["rob_acc"].to_numpy(dtype=float))
    agg = rep.aggregates()["rob_acc"]
    wnames = ", ".join(plain(df.index[i]) for i in worst[:4]) + (f" and {len(worst) - 4} more, tied" if len(worst) > 4 else "")
    head = f"{label}: " if label else ""
    ax.set_title(f"{head}robust accuracy avg {100 * agg['avg']:.1f}%, worst {100 * agg['worst']:.1f}% "
                 f"({wnames}), gap {100 * agg['gap']:.1f} points", fontsize=10, loc="left")
    ax.set_ylim(0, 105)
    ax.set_ylabel("accuracy (%)")
    ax.grid(axis="y", alpha=0.3)
    tick_style(ax, [str(c) for c in df.index], worst)
    if legend:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)
