"""The reliability probe: official AutoAttack, spent where it can change the answer, says per class
how much the audit's attacks may overstate robustness.

PGD can overstate robustness (gradient masking, too few steps, a bad step size): on a PGD-AT digits
model PGD-20 said 34% robust and AutoAttack 12%, and one class went from 76.5% to 0%. Every audit
therefore checks its own numbers against AutoAttack (:class:`robfair.attacks.AutoAttack`, the
official package), class by class:

- **Only a sample the audit left robust can be overstated.** The overstatement of class c is the
  share of c's samples that are robust under the audit's attacks (the worst case over those of
  AutoAttack's norm) but not under AutoAttack. The probe attacks those samples only, stratified
  per class, in a seeded random order, in rounds (:mod:`robfair.auditing.probe_design`), in two stages
  (:func:`probe_stages`): a cheap screen on many, AutoAttack's untargeted DLR attack (APGD-DLR,
  official, as cheap as APGD-CE and finding what a cross-entropy PGD does not try), then
  AutoAttack's whole cascade (APGD-CE, APGD-T, FAB-T, Square) on the screen's survivors once the
  screen is settled; more samples go where disagreement appears, fewer where the bound is already
  tight. A sample counts as fooled by AutoAttack when the screen or the cascade fools it (every
  such sample has an adversarial example, so the corrected numbers never flatter the model).
- **What it states.** Per class an estimate, a lower bound and an upper bound on the overstatement
  (anytime-valid one-sided bounds for sampling without replacement, at ``alpha / (2G)`` and
  ``alpha / (4G)`` per bound, so every statement about every class holds at once with
  probability ``>= 1 - alpha``, 95% by default); a class is flagged when its lower bound exceeds
  the tolerance (default 1 point). The corrected robust accuracy (the audit's minus the estimate,
  with the interval the bounds give) is what the audit should have said.
- **Its cost, in the audit's own units** (:data:`robfair.attacks.attack.GRADIENT_PASS_UNITS`:
  passes through the model, a gradient pass counting 2). ``budget`` is a multiple of what the
  audit's attacks took (default 1: at most as much again); ``math.inf`` (``--probe all``) runs the
  whole cascade on every robust sample, which is exactly AutoAttack per class.
- **When the audit runs AutoAttack itself** the worst case already is AutoAttack's; the probe
  then states, exactly and on the same samples, how much each weaker attack alone overstates.
- **AutoAttack's own verdicts** (zero gradients, Square beating the gradient attacks, a randomized
  or dynamic defense, probability outputs) are kept (``autoattack_flags``) and become warnings.

The record (``AuditReport.probe``, audit.json ``"probe"``) is described in docs/audit-json.md; its
``verdict`` is the one line the CLI prints.
"""

from __future__ import annotations

import logging
import math
import re
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..attacks import get_attack
from ..attacks.autoattack import SCREEN, AutoAttack, cascade, load_backend
from ..attacks.attack import count_passes
from ..errors import RobfairError
from .checks import WORST_CASE
from .distributed import evaluate_sharded
from .probe_design import FIRST, PRIOR_COST, REST, Design, overall, random_orders, run_design

log = logging.getLogger(__name__)

#: the default budget: at most as much compute as the audit's attacks took
DEFAULT_BUDGET = 1.0
#: a class is flagged when it is overstated by more than this (fraction of its samples) with 95% confidence
DEFAULT_TOLERANCE = 0.01
#: the family-wise error of all the probe's statements together
ALPHA = 0.05
#: what a PGD-20 costs a sample that it leaves robust (20 gradient passes and one forward), the
#: audit's cost per sample when its attacks do not count their passes (plain callables)
_FALLBACK_UNITS_PER_SAMPLE = 41
PROGRESS_STAGE = "reliability probe (AutoAttack)"
#: the flag AutoAttack's checks put on their messages in the attacks' warnings
_FLAG = "autoattack: "


def parse_budget(value: Any, what: str = "probe") -> float:
    """The probe's budget from the CLI or the API: ``None`` the default (1), ``0`` / ``"off"`` none,
    a number ``>= 0`` (``2``, ``"2x"``, ``"0.5"``) a multiple of the audit's attacks' compute,
    ``"all"`` every robust sample through the whole cascade (``math.inf``)."""
    if value is None:
        return DEFAULT_BUDGET
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("all", "inf", "every"):
            return math.inf
        if text in ("off", "none", "no"):
            return 0.0
        text = text[:-1] if text.endswith("x") else text
        try:
            value = float(text)
        except ValueError:
            raise RobfairError(f"{what} must be a multiple of the audit's compute (e.g. 1, 2.5x), 0 (off) or 'all', "
                               f"got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise RobfairError(f"{what} must be a multiple of the audit's compute >= 0 (e.g. 1, 2.5), 0 (off) or 'all', "
                           f"got {value!r}")
    return float(value)


def parse_tolerance(value: Any, what: str = "probe tolerance") -> float:
    """The tolerance as a fraction (``0.01``; the CLI takes points, ``--probe-tolerance 1``)."""
    if value is None:
        return DEFAULT_TOLERANCE
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= float(value) < 1:
        raise RobfairError(f"{what} must be a fraction in [0, 1) (0.01 is 1 point), got {value!r}")
    return float(value)


def budget_label(budget: float) -> str:
    return "all" if math.isinf(budget) else f"{budget:g}x"


def probe_attack(attack_names: Sequence[str]) -> dict[str, Any]:
    """What the probe compares: ``{"mode": "sampled" | "in-audit" | None, "reference": AutoAttack's
    name, "compared": the audit's attacks it checks, "why": the reason when nothing}``. The audit's
    untargeted attacks of one norm (L-inf first) are compared with AutoAttack of that norm; when the
    audit runs AutoAttack itself, its weaker attacks of that norm are compared with it, exactly."""
    untargeted: dict[str, list[str]] = {"linf": [], "l2": []}
    in_audit: dict[str, str] = {}
    for name in attack_names:
        try:
            atk = get_attack(name)
        except Exception:  # an attack object passed by the caller: compare by its attributes
            continue
        norm = getattr(atk, "norm", "linf")
        if getattr(atk, "family", "") == "autoattack":
            in_audit.setdefault(norm, name)
            continue
        if getattr(atk, "targeted", False) or getattr(atk, "family", "") == "trades-kl":
            continue
        untargeted.setdefault(norm, []).append(name)
    for norm, aa in (("linf", "autoattack"), ("l2", "autoattack-l2")):  # L-inf first, then L2
        if norm in in_audit:
            return {"mode": "in-audit", "reference": in_audit[norm], "compared": untargeted.get(norm, []), "why": ""}
        if untargeted.get(norm):
            return {"mode": "sampled", "reference": aa, "compared": untargeted[norm], "why": ""}
    return {"mode": None, "reference": None, "compared": [], "why": "no untargeted L-inf or L2 attack to compare with"}


def probe_stages(n_classes: int) -> dict[str, list[str]]:
    """The probe's two stages for a model with ``n_classes`` outputs: ``first``, the cheap screen,
    AutoAttack's untargeted DLR attack (APGD-DLR, 100 steps: the loss a cross-entropy PGD does not
    try: on the PGD-AT digits, Fashion-MNIST and CIFAR-10 JPEG models of ``benchmarks/bench_probe.py``,
    of the samples FGSM + PGD-20 left robust and the whole of AutoAttack fooled, it fooled 3 of 4,
    63 of 68 and 13 of 15, APGD-CE 1, 2 and 0), and ``rest``, AutoAttack's whole cascade on the
    screen's survivors. Below 4 classes (AutoAttack's own custom cascade, where its checks refuse
    the DLR losses) the screen is the cascade's first attack and the rest its others."""
    steps = cascade("standard", n_classes)
    if n_classes >= 4:
        return {FIRST: [SCREEN], REST: steps}
    return {FIRST: steps[:1], REST: steps[1:]}


# ============================================================================ the verdict line
def _pts(v: float) -> str:
    return f"{100 * v:.1f}"


def _attack_name(a: str) -> str:
    """AutoAttack's attacks as its paper names them: APGD-CE, APGD-T, FAB-T, Square."""
    return "Square" if a == "square" else a.upper()


def _times(ratio: float) -> str:
    """``0.41x``, ``1.6x``, ``32x``, ``1,250x``: a multiple, never in exponent notation."""
    return f"{ratio:.2g}x" if ratio < 10 else f"{ratio:,.0f}x"


def _label(attacks: Sequence[str]) -> str:
    return " + ".join(attacks) if attacks else "the audit"


def _flag_note(flags: Sequence[str]) -> str:
    if not flags:
        return ""
    return f"; AutoAttack's own checks raised {len(flags)} flag{'s' if len(flags) > 1 else ''} (see the warnings)"


def verdict(rec: dict[str, Any]) -> str:
    """The probe's one line, whether it passes or fails (the CLI prints it once)."""
    if "skipped" in rec:
        return f"reliability probe: skipped ({rec['skipped']})"
    tol = _pts(rec["tolerance"])
    label = _label(rec["compared_with"])
    flags = _flag_note(rec.get("autoattack_flags", []))
    if rec["design"] == "in-audit":
        ref = rec["attack"]
        parts = []
        for atk, r in rec["per_attack"].items():
            rows = r["per_group"]
            bad = sorted(r["flagged_groups"], key=lambda g: -rows[g]["overstatement"])
            if bad:
                parts.append(f"{atk} alone overstates {len(bad)} of {len(rows)} groups beyond {tol} points: "
                             + ", ".join(f"{g} +{_pts(rows[g]['overstatement'])}" for g in bad[:5])
                             + (", ..." if len(bad) > 5 else ""))
            elif rows:
                top = max(rows, key=lambda g: rows[g]["overstatement"])
                parts.append(f"{atk} alone overstates no group beyond {tol} points (largest: {top} "
                             f"+{_pts(rows[top]['overstatement'])})")
        body = "; ".join(parts) if parts else "no weaker attack of its norm to compare"
        return (f"reliability probe: {ref} is among the audit's attacks, so the worst case is AutoAttack's; "
                f"{body} (exact, the same samples){flags}")
    rows, o = rec["per_group"], rec["overall"]
    cost = rec["cost"]
    first, rest = (" + ".join(_attack_name(a) for a in rec["stages"][k]) for k in (FIRST, REST))
    spend = (f"{o['first_attacked']} of {o['robust']} audit-robust samples through {first}"
             + (f", {o['rest_attacked']} of its survivors through {rest}" if o["rest_attacked"] else "")
             + f"; {_times(cost['ratio'])} the audit's attacks' compute")
    if not o["robust"]:
        return f"reliability probe: nothing to check: no sample is robust under {label}{flags}"
    if not o["first_attacked"] and any(r["robust"] / max(r["n"], 1) > rec["tolerance"] for r in rows.values()):
        return (f"reliability probe: not run: {rec['budget']} the audit's attacks' compute ({cost['audit_units']:,} "
                f"units) does not cover AutoAttack's first attack on one sample; raise --probe (e.g. --probe 5 or "
                f"--probe all){flags}")
    flagged = sorted(rec["flagged_groups"], key=lambda g: -rows[g]["lower"])
    if flagged:
        shown = "; ".join(
            f"{g} {_pts(rows[g]['robust_acc'])}% -> {_pts(rows[g]['corrected_robust_acc'])}% "
            f"[{_pts(rows[g]['corrected_lo'])}, {_pts(rows[g]['corrected_hi'])}] "
            f"(AutoAttack fooled {rows[g]['first_fooled'] + rows[g]['rest_fooled']} of "
            f"{rows[g]['first_attacked']} probed)" for g in flagged[:5]) + ("; ..." if len(flagged) > 5 else "")
        return (f"reliability probe: {label} overstates robust accuracy in {len(flagged)} of {len(rows)} groups "
                f"(by more than {tol} points, 95%): {shown}; overall {_pts(o['robust_acc'])}% -> "
                f"{_pts(o['corrected_robust_acc'])}% [{_pts(o['corrected_lo'])}, {_pts(o['corrected_hi'])}]. "
                f"Audit with --attack {rec['attack']} before trusting the flagged groups ({spend}){flags}")
    live = {g: r for g, r in rows.items() if r["robust"]}
    if o["rest_attacked"] or o["exact"]:
        worst = max(live, key=lambda g: live[g]["upper"])
        bound = (f"{label} may overstate a group by at most {_pts(live[worst]['upper'])} points ({worst}) and the "
                 f"average by at most {_pts(o['upper'])}")
    else:
        worst = max(live, key=lambda g: live[g]["upper_first"])
        bound = (f"against {first}, {label} may overstate a group by at most {_pts(live[worst]['upper_first'])} "
                 f"points ({worst}) and the average by at most {_pts(o['upper_first'])}; the rest of AutoAttack "
                 f"({rest}, which also catches gradient masking) did not run within this budget (--probe all runs it)")
    return (f"reliability probe: passed, no group overstated by more than {tol} points; {bound} "
            f"(95%, every statement at once; {spend}){flags}")


# ============================================================================ AutoAttack in the audit
def in_audit_record(outcomes: Any, reference: str, compared: Sequence[str], tolerance: float) -> dict[str, Any]:
    """The audit ran AutoAttack (``reference``): per group and per weaker attack of its norm, the
    share of samples robust under that attack alone but fooled by AutoAttack (exact, the same
    samples; rows shaped like the sampled probe's, with ``lower == upper``)."""
    groups, names = outcomes.group, outcomes.group_names
    rob_ref = outcomes.robust(0, [reference])
    per_attack = {}
    for atk in compared:
        rob = outcomes.robust(0, [atk])
        rows = {}
        for gi, name in enumerate(names):
            sel = groups == gi
            n = int(sel.sum())
            if not n:
                continue
            d = int((rob & ~rob_ref & sel).sum())
            m = max(n, 1)
            r = int((rob & sel).sum())
            rows[str(name)] = {"n": n, "robust": r, "robust_acc": r / m, "autoattack_robust_acc": float((rob_ref & sel).sum()) / m,
                               "overstatement": d / m, "lower": d / m, "upper": d / m, "upper_first": d / m,
                               "corrected_robust_acc": (r - d) / m, "corrected_lo": (r - d) / m,
                               "corrected_hi": (r - d) / m, "only_autoattack_fools": d,
                               "only_attack_fools": int((~rob & rob_ref & sel).sum()),
                               "flagged": bool(d / m > tolerance), "exact": True}
        per_attack[atk] = {"per_group": rows, "flagged_groups": [g for g, r in rows.items() if r["flagged"]]}
    return {"design": "in-audit", "attack": reference, "compared_with": list(compared), "tolerance": tolerance,
            "alpha": None, "per_attack": per_attack}


# ============================================================================ the sampled probe
def _flags(warnings: Sequence[str]) -> list[str]:
    """AutoAttack's own messages among an evaluation's warnings (``[name] autoattack: ...``), in order."""
    return [t for t in (w.split("] ", 1)[1] if w.startswith("[") and "] " in w else w for w in warnings)
            if t.startswith(_FLAG)]


def _merge_flags(flags: Sequence[str], whose: str = "the probe's") -> list[str]:
    """One line per kind of AutoAttack flag over the probe's runs (the same message with other
    numbers is the same flag, e.g. "there are 58 points with zero gradient" from another chunk):
    the first run's text, and how many runs raised it when more than one did."""
    kinds: dict[str, list[str]] = {}
    for f in flags:
        kinds.setdefault(re.sub(r"\d+(\.\d+)?", "#", f), []).append(f)
    return [v[0] if len(v) == 1 else f"{v[0]} (raised by {len(v)} of {whose} AutoAttack runs)"
            for v in kinds.values()]


class _Ticker:
    """The probe's progress in units: what earlier rounds spent plus the passes of the running one,
    at most every ``every`` seconds (display only; the design never reads the clock)."""

    def __init__(self, progress: Callable[[str, int, int], None] | None, every: float = 0.25) -> None:
        self.progress, self.every = progress, every
        self.base, self.total, self.last = 0, 1, 0.0

    def __call__(self, count: Any) -> None:
        now = time.monotonic()
        if self.progress is not None and now - self.last >= self.every:
            self.last = now
            self.progress(PROGRESS_STAGE, min(self.base + count.units, self.total - 1), self.total)

    def done(self) -> None:
        if self.progress is not None:
            self.progress(PROGRESS_STAGE, self.total, self.total)


def audit_units(outcomes: Any) -> tuple[int, bool]:
    """What the audit's attacks cost, in units, and whether that was counted (True) or estimated
    (its attacks do not count their passes: a PGD-20 per sample)."""
    counted = int(sum(outcomes.meta.get("attack_units", {}).values()))
    if counted > 0:
        return counted, True
    return _FALLBACK_UNITS_PER_SAMPLE * outcomes.n, False


def reliability_probe(model: Any, dataset: Any, outcomes: Any, attacks: list[str], eps: Any, *,
                      budget: float = DEFAULT_BUDGET, tolerance: float = DEFAULT_TOLERANCE, alpha: float = ALPHA,
                      seed: int = 0, batch_size: int = 256, device: Any = "auto", precision: str = "fp32",
                      dist: Any = None, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Run the probe for an audit whose per-sample outcomes are ``outcomes`` (see the module doc).
    Returns the record stored under ``"probe"`` in audit.json (``{"skipped": reason}`` when none
    ran); its ``verdict`` is one line, its ``warnings`` what the audit should warn about.

    Each round's samples (sorted by dataset index) are attacked in fixed chunks of ``batch_size``,
    each seeded from (seed, stage, its first sample's index), so the record is the same for any
    number of torchrun ranks (``dist``: the chunks spread over the ranks like the audit's batches)."""
    t0 = time.perf_counter()
    budget = parse_budget(budget)
    tolerance = parse_tolerance(tolerance)
    what = probe_attack(attacks)
    if what["mode"] is None:
        return {"skipped": what["why"]}
    if what["mode"] == "in-audit":
        rec = in_audit_record(outcomes, what["reference"], what["compared"], tolerance)
        rec["autoattack_flags"] = _merge_flags(_flags(outcomes.warnings), "the audit's")
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        rec["verdict"] = verdict(rec)
        rec["passed"] = not any(r["flagged_groups"] for r in rec["per_attack"].values())
        rec["warnings"] = [] if rec["passed"] else [rec["verdict"]]
        return rec
    if budget == 0:
        return {"skipped": "disabled (probe=0)"}
    try:
        load_backend()
    except Exception as e:  # noqa: BLE001 - the package is a core dependency; say so when it is missing
        return {"skipped": str(e)}
    aa_name, compared = what["reference"], what["compared"]
    norm = "l2" if aa_name.endswith("l2") else "linf"
    robust = outcomes.robust(0, compared)
    groups = random_orders(outcomes.group, robust, outcomes.group_names, seed)
    base_units, counted = audit_units(outcomes)
    stage_attacks = probe_stages(len(outcomes.class_names))  # the model's outputs: the engine checked they match
    # below 4 classes AutoAttack runs a custom cascade whose APGD makes 5 restarts
    prior = {FIRST: PRIOR_COST[FIRST] * (1 if len(outcomes.class_names) >= 4 else 5), REST: PRIOR_COST[REST]}
    design = Design(groups, budget=budget * base_units, alpha=alpha, tolerance=tolerance, prior_cost=prior, seed=seed)
    ticker = _Ticker(progress)
    flags: list[str] = []

    def attack_round(stage: str, plan: dict[int, np.ndarray]) -> tuple[dict[int, np.ndarray], float]:
        pos = np.concatenate(list(plan.values()))
        if not pos.size:  # the later stages on prefixes the first stage fooled entirely: nothing to attack
            return {gi: np.zeros(0, dtype=bool) for gi in plan}, 0.0
        order = np.argsort(outcomes.index[pos], kind="stable")
        idx = outcomes.index[pos][order]
        atk = AutoAttack(norm=norm, stages=stage_attacks[stage], precision=precision)
        ticker.base = int(design.spent)
        ticker.total = int(max(design.budget if math.isfinite(design.budget) else _all_units(design), design.spent + 1))
        with count_passes(on_pass=ticker):
            res = evaluate_sharded(model, dataset, [atk], eps, dist=dist, indices=idx, batch_size=batch_size,
                                   device=device, seed=seed, precision=precision, channels_last=False,
                                   stage="reliability probe")
        flags.extend(_flags(res.warnings))
        fooled_sorted = res.adv_pred[atk.name][0] != res.y
        fooled_pos = np.empty(pos.size, dtype=bool)
        fooled_pos[order] = fooled_sorted
        out, at = {}, 0
        for gi, p in plan.items():
            out[gi] = fooled_pos[at:at + p.size]
            at += p.size
        return out, float(sum(res.meta.get("attack_units", {}).values()))

    if any(g.robust for g in groups):
        run_design(design, attack_round)
    ticker.done()
    rows = design.per_group()
    flags = _merge_flags(flags)
    seconds = round(time.perf_counter() - t0, 3)
    audit_seconds = float(sum(outcomes.meta.get("attack_seconds", {}).values()))
    rec: dict[str, Any] = {
        "design": "sampled", "attack": aa_name, "compared_with": list(compared),
        "stages": {FIRST: stage_attacks[FIRST], REST: stage_attacks[REST]},
        "alpha": alpha, "tolerance": tolerance, "budget": budget_label(budget),
        "alpha_per_bound": {"lower": design.alpha_lower, "upper": design.alpha_upper},
        "per_group": rows, "overall": overall(rows),
        "flagged_groups": [g for g, r in rows.items() if r["flagged"]],
        "rounds": design.rounds,
        "cost": {"unit": "passes through the model per sample (a forward 1, forward + input gradient 2)",
                 "audit_units": base_units, "audit_units_counted": counted, "probe_units": design.spent,
                 "ratio": design.spent / max(base_units, 1),
                 # wall time (this run's, unlike the units): the probe's over the audit's attacks'
                 "time": {"seconds": seconds, "audit_attack_seconds": round(audit_seconds, 3),
                          "ratio": seconds / audit_seconds if audit_seconds > 0 else None}},
        "autoattack_flags": flags,
        "seconds": seconds,
    }
    rec["verdict"] = verdict(rec)
    rec["passed"] = not rec["flagged_groups"]
    rec["warnings"] = ([] if rec["passed"] else [rec["verdict"]]) + [f"[{aa_name}] {f}" for f in flags]
    return rec


def _all_units(design: Design) -> float:
    """The units the whole cascade on every robust sample would take (the progress total of
    ``--probe all``), from the stages' costs so far."""
    first = sum(g.robust for g in design.groups) * design.cost(FIRST)
    surv = sum(g.robust - g.k1 for g in design.groups)
    return first + surv * design.cost(REST)


__all__ = ["reliability_probe", "in_audit_record", "probe_attack", "probe_stages", "parse_budget", "parse_tolerance", "verdict",
           "budget_label", "audit_units", "DEFAULT_BUDGET", "DEFAULT_TOLERANCE", "ALPHA", "WORST_CASE",
           "PROGRESS_STAGE"]
