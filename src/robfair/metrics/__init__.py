"""Per-group robustness metrics: counts -> rates, aggregates, intervals and tests (no torch models).

    from robfair.metrics import GroupReport
    rep = GroupReport.from_outcomes(y=y, clean_pred=p, adv_pred=p_adv, class_names=names)
    rep.by_group, rep.aggregates(), rep.bootstrap(), rep.chi2()
"""

from __future__ import annotations

from .counts import CATEGORIES, Counts
from .report import RATES, SCHEMA, GroupReport, seed_summary, wilson

__all__ = ["CATEGORIES", "Counts", "GroupReport", "RATES", "SCHEMA", "seed_summary", "wilson"]
