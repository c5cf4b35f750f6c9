"""training/selection.py: which epoch best.pt holds."""

import math

from robfair.training.selection import Selection, select_best, selection_score


def summary(rob, worst, clean=0.9):
    return {"rob_acc": rob, "worst_rob_acc": worst, "clean_acc": clean}


def test_scores():
    s = summary(0.5, 0.25, 0.8)
    assert selection_score(s, "avg+worst") == 0.75 and selection_score(s, "avg-rob") == 0.5
    assert selection_score(s, "worst-rob") == 0.25 and selection_score(s, "clean") == 0.8
    assert selection_score(s, "last") is None and selection_score(None, "clean") is None
    assert selection_score(summary(math.nan, 0.1), "avg-rob") is None  # a NaN never wins


def test_running_selection_matches_the_replay_over_metrics():
    sums = [summary(0.4, 0.2), None, summary(0.5, 0.2), summary(0.5, 0.2), summary(0.3, 0.1)]
    sel = Selection("avg-rob")
    got = [sel.update(e, s) for e, s in enumerate(sums, 1)]
    assert [b for _, b in got] == [True, False, True, False, False]  # a tie keeps the earlier epoch
    assert (sel.epoch, sel.score) == (3, 0.5)
    history = [{"epoch": e, "val": None if s is None else {"summary": s}} for e, s in enumerate(sums, 1)]
    assert select_best(history, "avg-rob") == sel.epoch == 3
    last = Selection("last")
    assert all(last.update(e, s)[1] for e, s in enumerate(sums, 1)) and last.epoch == 5 and last.score is None
    assert select_best(history, "last") == 5 and select_best([], "clean") is None
