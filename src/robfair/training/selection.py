"""Which epoch ``best.pt`` holds: the validation summary of an epoch, its score, the best so far.

    summary = val_summary(report)                  # average and worst-group value of each rate
    score = selection_score(summary, "avg+worst")  # higher is better; None: no score
    best = Selection("avg+worst"); best.update(epoch=3, summary=summary) -> (score, is_best)
    select_best(history, "avg+worst")              # the same choice, replayed over metrics.jsonl

Selection uses the validation split only (never the test split). ``last``: the latest epoch always wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

#: the rates of a GroupReport that metrics.jsonl keeps (average and worst group of each)
RATES = ("clean_acc", "rob_acc", "std_err", "bndy_err", "rob_err")
#: the selection criteria (TrainConfig.select)
CRITERIA = ("avg+worst", "avg-rob", "worst-rob", "clean", "last")


def val_summary(report: Any) -> dict[str, Any]:
    """Average and worst-group values of each rate of a validation ``GroupReport``."""
    agg = report.aggregates()
    out: dict[str, Any] = {"n": report.n}
    for rate in RATES:
        out[rate] = agg[rate]["avg"]
        out[f"worst_{rate}"] = agg[rate]["worst"]
    out["worst_group"] = agg["rob_acc"]["worst_group"]
    return out


def selection_score(summary: dict[str, Any] | None, criterion: str) -> float | None:
    """The model-selection score (higher is better) of one epoch's validation summary.

    ``avg+worst``: average + worst-group robust accuracy; ``avg-rob``: average robust accuracy;
    ``worst-rob``: worst-group robust accuracy; ``clean``: average clean accuracy; ``last``: None
    (the latest epoch always wins)."""
    if criterion == "last" or summary is None:
        return None
    value = {
        "avg+worst": lambda s: s["rob_acc"] + s["worst_rob_acc"],
        "avg-rob": lambda s: s["rob_acc"],
        "worst-rob": lambda s: s["worst_rob_acc"],
        "clean": lambda s: s["clean_acc"],
    }[criterion](summary)
    return None if value is None or not math.isfinite(value) else float(value)


@dataclass
class Selection:
    """The best epoch so far under ``criterion`` (1-based ``epoch``; None before any scored epoch).
    Ties keep the earlier epoch; epochs without a score never win (except under ``last``)."""

    criterion: str
    epoch: int | None = None
    score: float | None = None

    def update(self, epoch: int, summary: dict[str, Any] | None) -> tuple[float | None, bool]:
        """Score epoch ``epoch`` (1-based) by its validation ``summary``; returns (score, is_best)
        and remembers it when it is the best."""
        score = selection_score(summary, self.criterion)
        if self.criterion == "last":
            is_best = True
        else:
            is_best = score is not None and (self.score is None or score > self.score)
        if is_best:
            self.epoch, self.score = epoch, score
        return score, is_best


def select_best(history: Sequence[dict[str, Any]], criterion: str) -> int | None:
    """The epoch ``best.pt`` holds for a metrics.jsonl history: the highest score, earliest on ties
    (``last``: the final epoch). Epochs without a score never win."""
    sel = Selection(criterion)
    for rec in history:
        sel.update(rec["epoch"], (rec.get("val") or {}).get("summary"))
    return sel.epoch
