"""Figures for audits (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from ..inert import plain
from ..utils import atomic_path


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def classwise_bars(reports: Mapping[str, "object"], path: str | Path, *, title: str = "", by: str = "group") -> Path:
    """Per-group clean and robust accuracy with 95% Wilson intervals, one panel per model.

    ``reports`` maps a label (e.g. ``"standard"``, ``"pgd-at"``) to a GroupReport (or an AuditReport,
    whose worst case over attacks is used). Written atomically as PNG. Labels are untrusted text:
    math text is off and control characters are dropped (:mod:`robfair.inert`)."""
    import matplotlib

    from ..inert import mpl_rc

    with matplotlib.rc_context(mpl_rc()):
        return _classwise_bars(reports, path, title=title, by=by)


def _classwise_bars(reports: Mapping[str, "object"], path: str | Path, *, title: str, by: str) -> Path:
    plt = _plt()
    items = [(label, getattr(r, "main", r)) for label, r in reports.items()]
    fig, axes = plt.subplots(len(items), 1, figsize=(max(6.0, 0.65 * len(items[0][1].by_group) + 2), 3.1 * len(items)),
                             squeeze=False, sharex=True)
    for ax, (label, rep) in zip(axes[:, 0], items):
        df = rep.by_group if by == "group" else rep.by_class
        idx = np.arange(len(df))
        w = 0.38
        for off, col, color, name in ((-w / 2, "clean_acc", "#8fb3d9", "clean"), (w / 2, "rob_acc", "#c0392b", "robust")):
            val = df[col].to_numpy()
            err = np.clip(np.vstack([val - df[f"{col}_lo"].to_numpy(), df[f"{col}_hi"].to_numpy() - val]), 0, None)
            ax.bar(idx + off, val, w, yerr=err, color=color, label=name, capsize=2, error_kw={"lw": 0.8})
        worst = int(np.argmin(df["rob_acc"].to_numpy()))
        ax.annotate("worst", (worst + w / 2, df["rob_acc"].iloc[worst]), xytext=(0, 12), textcoords="offset points",
                    ha="center", fontsize=8, arrowprops={"arrowstyle": "-", "lw": 0.6})
        agg = rep.aggregates()["rob_acc"]
        ax.set_title(f"{plain(label)}: robust acc avg {agg['avg']:.3f}, worst {agg['worst']:.3f}, gap {agg['gap']:.3f}", fontsize=10)
        ax.set_ylim(0, 1.08)
        ax.set_ylabel("accuracy")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        ax.set_xticks(idx)
        ax.set_xticklabels([plain(c) for c in df.index], rotation=30 if max(len(str(c)) for c in df.index) > 3 else 0,
                           ha="right" if max(len(str(c)) for c in df.index) > 3 else "center")
    if title:
        fig.suptitle(plain(title), fontsize=11)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path
