"""Sanity checks every evaluation path runs on its outcomes (the engine calls them).

- robust accuracy <= clean accuracy for every group (a clean mistake is always a robust error);
- accuracy on adversarial inputs above clean accuracy: the attack repairs more than it breaks;
- a stronger attack (more PGD steps/restarts, AutoAttack) finding fewer errors than a weaker one,
  or FGSM beating PGD: typical of gradient masking;
- a collapsed model (one predicted class for every sample) or one at chance level (clean accuracy
  not above 1/K): its per-group "gaps" measure the collapse, not robustness, and are named so.

The reliability probe (AutoAttack on a stratified sample, :mod:`robfair.auditing.probe`) is the
check for masking that these cannot see.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..metrics import GroupReport, wilson

WORST_CASE = "worst-case"


def attack_strength(name: str) -> tuple[int, int, str] | None:
    """A partial order on attack names: (family, budget, loss); ``None`` if not comparable
    (another threat model such as L2, or a targeted attack)."""
    n = name.lower()
    if n.startswith("autoattack"):
        return (3, 0, "*") if "l2" not in n.split("-") else None
    if n in ("fgsm", "rs-fgsm"):
        return (1, 1, "*")
    m = re.fullmatch(r"pgd(\d+)((?:-[a-z0-9]+)*)", n)
    if not m:
        return None
    tokens = [t for t in m.group(2).split("-") if t]
    if "l2" in tokens or any(t.startswith("t") for t in tokens):
        return None
    restarts = next((int(t[1:]) for t in tokens if re.fullmatch(r"r\d+", t)), 1)
    return (2, int(m.group(1)) * restarts, "cw" if "cw" in tokens else "ce")


def _stronger(strong: tuple[int, int, str], weak: tuple[int, int, str]) -> bool:
    if strong[0] != weak[0]:
        return strong[0] > weak[0]
    return strong[2] == weak[2] and strong[1] > weak[1]


def model_state(report: GroupReport) -> dict[str, Any] | None:
    """``{"state": "collapsed" | "chance", "message": ...}`` when the model's clean predictions are
    degenerate; None for a working model. Read off the clean confusion matrix of ``report``."""
    conf = report.confusion(adv=False)
    n = int(conf.sum())
    K = conf.shape[0]
    if n < 2 or K < 2:
        return None
    cols = conf.sum(0)
    acc = float(np.trace(conf) / n)
    if int((cols > 0).sum()) == 1:
        k = int(np.argmax(cols))
        return {"state": "collapsed", "predicted": report.class_names[k],
                "message": (f"the model is collapsed: it predicts class '{report.class_names[k]}' for all {n} samples "
                            f"(clean accuracy {100 * acc:.1f}%); per-group gaps here measure the collapse, not "
                            "robustness; check the checkpoint and its training")}
    lo, hi = wilson(int(np.trace(conf)), n)
    if hi >= 1.0 / K and acc < 1.5 / K:
        return {"state": "chance",
                "message": (f"the model is at chance level: clean accuracy {100 * acc:.1f}% [95% CI {100 * lo:.1f}, "
                            f"{100 * hi:.1f}] with {K} classes (chance {100 / K:.1f}%); its per-group gaps and "
                            "robust accuracies are not meaningful; check the checkpoint and its training")}
    return None


def sanity_warnings(reports: dict[str, GroupReport]) -> list[str]:
    """The checks of the module doc on per-attack reports (same samples, same eps); each failure is
    a warning a person must read."""
    out: list[str] = []
    if reports:
        state = model_state(next(iter(reports.values())))
        if state is not None:
            out.append(state["message"])
    for name, rep in reports.items():
        bg = rep.by_group
        bad = bg.index[bg["rob_acc"] > bg["clean_acc"] + 1e-12].tolist()
        if bad:
            out.append(f"[{name}] robust accuracy exceeds clean accuracy for {bad}: the report is inconsistent (bug)")
        if name == WORST_CASE:
            continue
        adv = rep.overall.get("adv_acc")
        clean = rep.overall.get("clean_acc")
        if adv is not None and clean is not None and adv > clean + 1e-12:
            out.append(
                f"[{name}] accuracy on adversarial inputs ({adv:.4f}) is above clean accuracy ({clean:.4f}): "
                "the attack repairs more mistakes than it makes; check the attack and the epsilon"
            )
    names = [n for n in reports if n != WORST_CASE]
    for weak in names:
        for strong in names:
            sw, ss = attack_strength(weak), attack_strength(strong)
            if sw is None or ss is None or not _stronger(ss, sw):
                continue
            ew = reports[weak].overall["rob_err"]
            es = reports[strong].overall["rob_err"]
            if es < ew - 1e-12:
                kind = "FGSM beats PGD" if weak in ("fgsm", "rs-fgsm") else "a stronger attack finds fewer errors"
                out.append(
                    f"possible gradient masking: {kind} ({weak}: robust error {ew:.4f} > {strong}: {es:.4f}); "
                    "evaluate with autoattack and more restarts before trusting these numbers"
                )
    return out


def outcome_warnings(outcomes: Any) -> list[str]:
    """:func:`sanity_warnings` on the reports of an evaluation: at every radius of a sweep (prefixed
    with the radius; the model checks once), the model checks alone when no attack ran."""
    if not outcomes.attacks:
        state = model_state(outcomes.clean_report())
        return [state["message"]] if state else []
    radii = outcomes.radii or []
    if len(radii) <= 1:
        return sanity_warnings(outcomes.reports(0))
    out: list[str] = []
    state = model_state(outcomes.clean_report())
    if state is not None:
        out.append(state["message"])
    for r, e in enumerate(radii):
        out += [f"eps {e:g}: {w}" for w in sanity_warnings(outcomes.reports(r)) if state is None or w != state["message"]]
    return out
