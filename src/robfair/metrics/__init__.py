"""Per-group robustness metrics: counts -> rates, aggregates, intervals and tests (no torch models).

    from robfair.metrics import GroupReport
    rep = GroupReport.from_outcomes(y=y, clean_pred=p, adv_pred=p_adv, class_names=names)
    rep.by_group, rep.aggregates(), rep.bootstrap(), rep.chi2()
"""

from __future__ import annotations

from .counts import CATEGORIES, Counts
from .groups import RATES, SCHEMA, GroupReport, seed_summary, wilson
from .stats import chi2_contingency, dafa_rho, stratified_bootstrap

__all__ = ["CATEGORIES", "Counts", "GroupReport", "RATES", "SCHEMA", "chi2_contingency", "dafa_rho", "seed_summary",
           "stratified_bootstrap", "wilson"]
