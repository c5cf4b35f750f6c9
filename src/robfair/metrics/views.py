"""Notebook and ecosystem views shared by :class:`GroupReport` and :class:`robfair.auditing.AuditReport`:
``_repr_html_`` (Jupyter), :meth:`aggregates_frame`, :meth:`plot` and :meth:`to_metricframe`."""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd

from ..errors import RobfairError
from ..charts import draw_classwise
from ..inert import mpl_rc

#: fairlearn metrics of :meth:`ReportViews.to_metricframe`, on the per-sample outcome columns
#: ``[clean correct, adversarial correct]`` (spec section 1)
_MF_METRICS = {
    "clean_acc": lambda o: o[:, 0],
    "rob_acc": lambda o: o[:, 0] & o[:, 1],
    "std_err": lambda o: ~o[:, 0],
    "bndy_err": lambda o: o[:, 0] & ~o[:, 1],
    "rob_err": lambda o: ~(o[:, 0] & o[:, 1]),
    "adv_acc": lambda o: o[:, 1],
}


def _metric(f):
    def metric(y_true, y_pred):
        return float(np.mean(f(np.asarray(y_pred, dtype=bool))))

    return metric


def _pct_table(df: pd.DataFrame, cols: tuple[str, ...]) -> str:
    rows = []
    for name, r in df.iterrows():
        cells = [f"<td>{html.escape(str(name))}</td>", f"<td>{int(r['n'])}</td>"]
        for c in cols:
            v, lo, hi = r[c], r.get(f"{c}_lo"), r.get(f"{c}_hi")
            txt = "-" if v != v else f"{100 * v:.1f}" + ("" if lo is None or lo != lo else f" [{100 * lo:.1f}, {100 * hi:.1f}]")
            cells.append(f"<td style='text-align:right'>{txt}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{html.escape(h)}</th>" for h in (df.index.name or "group", "n", *(f"{c} % [95% CI]" for c in cols)))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


class ReportViews:
    """Mixin: needs ``_headline()`` (the GroupReport to show) and ``_all_reports()`` ({name: GroupReport})."""

    # -- hooks --------------------------------------------------------------------------------
    def _headline(self) -> Any:
        return getattr(self, "main", self)

    def _all_reports(self) -> dict[str, Any]:
        reports = getattr(self, "reports", None)
        return dict(reports) if isinstance(reports, dict) else {getattr(self, "attack", "") or "report": self}

    # -- frames -------------------------------------------------------------------------------
    def aggregates_frame(self, k: int = 3) -> pd.DataFrame:
        """The aggregates (avg, class_mean, worst, best, gap, sd, ...) as a DataFrame: one row per
        (attack, rate), one column per statistic."""
        frames = {name: rep.summary_table(k) for name, rep in self._all_reports().items()}
        return pd.concat(frames, names=["attack", "rate"])

    # -- display ------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        rep = self._headline()
        agg = rep.aggregates()
        a, c = agg["rob_acc"], agg["clean_acc"]
        eps = f"{rep.eps:.4g}" if isinstance(rep.eps, float) else html.escape(str(rep.eps))
        parts = [f"<div><b>{html.escape(type(self).__name__)}</b>: attack <code>{html.escape(rep.attack)}</code>, "
                 f"eps {eps}, n = {rep.n}, {rep.num_groups} groups</div>"]
        if rep.n:
            parts.append(f"<div>robust accuracy avg {100 * a['avg']:.1f}%, worst {100 * a['worst']:.1f}% "
                         f"({html.escape(str(a['worst_group']))}), gap {100 * a['gap']:.1f} pts; clean avg "
                         f"{100 * c['avg']:.1f}%, worst {100 * c['worst']:.1f}%</div>")
        parts.append(_pct_table(rep.by_group, ("clean_acc", "rob_acc", "bndy_err")))
        for w in getattr(self, "warnings", []) or []:
            parts.append(f"<div style='color:#b03a2e'>warning: {html.escape(str(w))}</div>")
        return "\n".join(parts)

    def plot(self, ax: Any = None, *, by: str = "group") -> Any:
        """Per-group (``by="class"``: per-class) clean and robust accuracy with 95% Wilson intervals on
        matplotlib axes (a new figure when ``ax`` is None); returns the axes."""
        import matplotlib  # lazy: import time (matplotlib, needed by plotting only)

        with matplotlib.rc_context(mpl_rc()):  # labels are untrusted text: no math parsing
            fig = None
            if ax is None:
                import matplotlib.pyplot as plt  # lazy: import time (matplotlib)

                rep = self._headline()
                fig, ax = plt.subplots(figsize=(max(6.0, 0.65 * rep.num_groups + 2) + 1.4, 3.4))
            draw_classwise(ax, self._headline(), getattr(self._headline(), "attack", ""), by=by, legend=True)
            if fig is not None:  # its own figure: the legend beside the axes stays inside it
                fig.tight_layout()
        return ax

    # -- fairlearn ----------------------------------------------------------------------------
    def to_metricframe(self, extra_metrics: dict[str, Any] | None = None) -> Any:
        """A ``fairlearn.metrics.MetricFrame`` over the groups with ``clean_acc``, ``rob_acc``,
        ``std_err``, ``bndy_err``, ``rob_err``, ``adv_acc`` (needs ``pip install fairlearn``).

        Per-sample rows are rebuilt from the counts (one row per sample: true class, group, and
        ``y_pred = [clean correct, adversarial correct]``); sample order is not kept, so every metric
        of (group, class, outcome) counts is exact: ``by_group`` equals :attr:`by_group` to the bit.
        ``extra_metrics``: more ``f(y_true, y_pred)`` on those columns."""
        try:
            from fairlearn.metrics import MetricFrame  # lazy: optional extra (robfair[fairlearn])
        except ImportError:
            raise RobfairError("to_metricframe needs fairlearn; install it with `pip install robfair[fairlearn]`") from None
        rep = self._headline()
        c = rep.counts
        ys, gs, outs = [], [], []
        for gi in range(rep.num_groups):
            for ki in range(rep.num_classes):
                n, cl, rb, rp = (int(a[gi, ki]) for a in (c.n, c.clean, c.robust, c.repaired))
                block = [(1, 1)] * rb + [(1, 0)] * (cl - rb) + [(0, 1)] * rp + [(0, 0)] * (n - cl - rp)
                outs.extend(block)
                ys.extend([ki] * n)
                gs.extend([gi] * n)
        names = np.asarray(rep.group_names, dtype=object)
        metrics = {k: _metric(f) for k, f in _MF_METRICS.items()}
        metrics.update(extra_metrics or {})
        return MetricFrame(metrics=metrics, y_true=np.asarray(ys, dtype=np.int64),
                           y_pred=np.asarray(outs, dtype=bool).reshape(-1, 2),
                           sensitive_features=pd.Series(names[np.asarray(gs, dtype=np.int64)], name="group"))
