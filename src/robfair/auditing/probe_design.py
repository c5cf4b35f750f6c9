"""The reliability probe's design: which audit-robust samples AutoAttack attacks, round by round,
and what may be said once it stops. Pure numpy, no model: :mod:`robfair.auditing.probe` runs it
against a model, ``benchmarks/bench_probe.py`` against simulated outcomes (the same code).

**The quantity.** Only a sample the audit's attacks left robust can be overstated. In a group
(class) of ``n`` samples of which ``R`` are robust under the audit, the overstatement is
``D / n``, ``D`` being the number of those ``R`` that AutoAttack fools: the points of robust
accuracy the audit claims beyond AutoAttack's.

**The design.** Each group's robust samples are put in a seeded random order; AutoAttack only
ever attacks a *prefix* of that order, so every prefix is a simple random sample without
replacement of the group's robust samples. AutoAttack runs in two stages
(:func:`robfair.auditing.probe.probe_stages`):

- ``first``: a cheap screen (AutoAttack's APGD-DLR: 100 gradient steps, about five PGD-20s) on
  the first ``m1`` samples of each group;
- ``rest``: AutoAttack's cascade (APGD-CE, APGD-T, FAB-T, Square), the expensive part, only on the
  samples of the first ``m2 <= m1`` that survived the screen. It starts once the screen is settled
  (every group's first-stage interval is narrower than the tolerance, or covers all its robust
  samples).

Rounds: the first round of a stage gives every open group the same number of samples (half of
the budget left, or everything the stage needs when the budget covers it); each later round
gives half of what is left (all of it once it is below an eighth of the budget, or when half
buys not one sample) in proportion to
the width of each group's interval in points, so samples go where disagreement appears and
none where the bound is already tight.

**What is said.** Per group, with ``k1`` of ``m1`` fooled by the first stage and ``k2`` of the
``m2`` covered by the rest (``finite_population_bounds``: anytime-valid, so the adaptive rounds
do not invalidate them; the bounds of every round are intersected):

- ``lower = L1 + k2``: ``L1`` the one-sided lower bound on the first stage's count at
  ``alpha / (2G)``, plus the samples the later attacks were seen to fool. A group is **flagged**
  when ``lower / n`` exceeds the tolerance (default 1 point).
- ``upper = U1 + U2`` at ``alpha / (4G)`` each: the most AutoAttack may fool. While the later
  attacks have covered none of a group's samples, ``upper = R`` (nothing rules out that they
  fool every survivor), and ``upper_first`` (``U1``) bounds what the first attack alone finds.
- the estimate ``R * k1 / m1 + R * k2 / m2`` (the later stages' term 0 while ``m2 = 0``).

``G`` counts the groups with a robust sample (a group without one cannot be overstated). By the
union bound every statement about every group holds at once with probability ``>= 1 - alpha``
(the family-wise error over all statements, flags included, is at most ``alpha``). With every
robust sample attacked by the whole cascade (budget ``"all"``) ``lower = upper = D``: exactly
AutoAttack per group.

**Budget.** In the audit's own units: one sample through the model forward is 1, forward plus
input gradient 2 (:data:`robfair.attacks.attack.GRADIENT_PASS_UNITS`); the audit's attacks' total
is the unit of ``budget`` (default 1: at most as much compute as the audit's attacks took).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..metrics.stats import finite_population_bounds

FIRST, REST = "first", "rest"
STAGES = (FIRST, REST)
#: units per sample before a stage has run (replaced by the measured cost after its first round):
#: the screen (APGD, 100 steps x 2 + its forwards, 213 measured); the cascade: APGD-CE 213, APGD-T
#: 9 targets x 100 steps x 2 (1,838), FAB-T about 3 units a step over 9 x 100 steps (2,738), Square
#: 5,000 forward queries (5,013)
PRIOR_COST = {FIRST: 213.0, REST: 9_800.0}
#: a round spends half of what is left, all of it once that is below this share of the budget
LAST_SHARE = 1 / 8
MAX_ROUNDS = 8


@dataclass
class Group:
    """One group's state: its audit-robust samples (``order``: positions in the outcomes, in the
    probe's random order) and what each stage found on its prefix."""

    name: str
    n: int
    order: np.ndarray
    first: list[bool] = field(default_factory=list)  # fooled by the first stage, per sample of the prefix
    rest: list[bool] = field(default_factory=list)  # fooled by the later stages (False where the first fooled it)
    looks: list[tuple[int, int, int, int]] = field(default_factory=list)  # (m1, k1, m2, k2) after each round

    @property
    def robust(self) -> int:
        return int(self.order.size)

    @property
    def m1(self) -> int:
        return len(self.first)

    @property
    def k1(self) -> int:
        return int(sum(self.first))

    @property
    def m2(self) -> int:
        return len(self.rest)

    @property
    def k2(self) -> int:
        return int(sum(self.rest))


def random_orders(groups: np.ndarray, robust: np.ndarray, names: Sequence[str], seed: int) -> list[Group]:
    """One :class:`Group` per group id in ``names``: its audit-robust positions (``robust`` a bool
    array over the outcomes) in a seeded random order, the stream keyed by (seed, group index)."""
    out = []
    for gi, name in enumerate(names):
        pos = np.flatnonzero((groups == gi) & robust)
        rng = np.random.Generator(np.random.PCG64([int(seed), 0x9E0B, gi]))
        out.append(Group(str(name), int((groups == gi).sum()), pos[rng.permutation(pos.size)]))
    return out


def waterfill(total: int, weights: Sequence[float], caps: Sequence[int], ties: Sequence[int] | None = None) -> list[int]:
    """``total`` integer items over slots in proportion to ``weights``, none above its cap (what a
    capped slot cannot take goes to the others, slots of weight 0 last): ``min(cap, lam * w)``
    rounded down, the rest by largest remainder, ties broken by ``ties`` (a rank per slot, lowest
    first; default: the first slot)."""
    w = np.asarray(weights, dtype=np.float64)
    cap = np.asarray(caps, dtype=np.int64)
    total = int(min(max(total, 0), cap.sum()))
    pos = (w > 0) & (cap > 0)
    if cap[pos].sum() < total:  # the weighted slots cannot take it all: the rest equally to the others
        out = np.where(pos, cap, 0)
        rest = waterfill(total - int(out.sum()), np.where(pos, 0.0, 1.0).tolist(), np.where(pos, 0, cap).tolist(), ties)
        return (out + np.asarray(rest, dtype=np.int64)).tolist()
    x = np.zeros(cap.size)
    free, left = pos.copy(), float(total)
    while free.any():
        lam = left / w[free].sum()
        over = free & (lam * w > cap)
        if not over.any():
            x[free] = lam * w[free]
            break
        x[over] = cap[over]
        left -= float(cap[over].sum())
        free &= ~over
    out = np.minimum(np.floor(x + 1e-9).astype(np.int64), cap)
    rank = np.arange(cap.size) if ties is None else np.asarray(ties)
    for i in np.lexsort((rank, -np.round(x - out, 12))):  # largest remainder first, then the tie rank
        if out.sum() >= total:
            break
        if out[i] < cap[i] and pos[i]:
            out[i] += 1
    return out.tolist()


class Design:
    """The probe's state and decisions (see the module doc). ``budget``: units (``math.inf``: every
    robust sample through the whole cascade)."""

    def __init__(self, groups: list[Group], *, budget: float, alpha: float, tolerance: float,
                 prior_cost: dict[str, float] | None = None, seed: int = 0) -> None:
        self.groups = groups
        self.seed = int(seed)
        self.budget = float(budget)
        self.alpha = float(alpha)
        self.tolerance = float(tolerance)
        self.spent = 0.0
        self.units = {s: 0.0 for s in STAGES}
        self.attacked = {s: 0 for s in STAGES}
        self.prior = dict(PRIOR_COST if prior_cost is None else prior_cost)
        self.rounds: list[dict[str, Any]] = []
        self.stage_rounds = {s: 0 for s in STAGES}
        live = sum(1 for g in groups if g.robust)
        self.alpha_lower = self.alpha / (2 * max(live, 1))
        self.alpha_upper = self.alpha / (4 * max(live, 1))  # for each of the two stages' upper bounds
        #: an interval narrower than this (points) gets no more samples; with an unlimited budget
        #: every robust sample goes through the whole cascade
        self.tight = -1.0 if math.isinf(self.budget) else self.tolerance
        self._planned: tuple[str, dict[int, int]] | None = None

    # -- costs -----------------------------------------------------------------------------------
    def cost(self, stage: str) -> float:
        """Units per attacked sample of ``stage``: measured once it has run, else the prior."""
        return self.units[stage] / self.attacked[stage] if self.attacked[stage] else self.prior[stage]

    # -- bounds ----------------------------------------------------------------------------------
    def _first_bounds(self, g: Group, m1: int, k1: int) -> tuple[int, int]:
        return finite_population_bounds(k1, m1, g.robust, self.alpha_lower, self.alpha_upper)

    def bounds(self, g: Group) -> dict[str, float]:
        """Counts: ``lower``, ``upper``, ``upper_first`` (the first stage alone) and ``estimate``,
        each bound intersected over the rounds' looks."""
        if not g.robust:
            return {"lower": 0, "upper": 0, "upper_first": 0, "estimate": 0.0}
        looks = g.looks or [(g.m1, g.k1, g.m2, g.k2)]
        lower, upper, upper_first = 0, g.robust, g.robust
        for m1, k1, m2, k2 in looks:
            l1, u1 = self._first_bounds(g, m1, k1)
            lower = max(lower, l1 + k2)
            upper_first = min(upper_first, u1)
            if m2:
                _, u2 = finite_population_bounds(k2, m2, g.robust, None, self.alpha_upper)
                upper = min(upper, u1 + u2)
        upper = max(min(upper, g.robust), lower)
        est = (g.robust * g.k1 / g.m1 if g.m1 else 0.0) + (g.robust * g.k2 / g.m2 if g.m2 else 0.0)
        return {"lower": lower, "upper": upper, "upper_first": max(upper_first, min(lower, upper_first)),
                "estimate": float(min(max(est, lower), upper))}

    def flagged(self, g: Group) -> bool:
        return g.n > 0 and self.bounds(g)["lower"] / g.n > self.tolerance

    def _width(self, g: Group, stage: str) -> float:
        """The interval's width in points (fraction of the group): the first stage's, or the whole cascade's."""
        b = self.bounds(g)
        if stage == FIRST:
            l1, u1 = self._first_bounds(g, g.m1, g.k1)
            return (u1 - l1) / g.n
        return (b["upper"] - b["lower"]) / g.n

    def _open(self, stage: str) -> list[int]:
        out = []
        for i, g in enumerate(self.groups):
            if not g.robust:
                continue
            room = g.robust - g.m1 if stage == FIRST else g.m1 - g.m2
            if room > 0 and self._width(g, stage) > self.tight:
                out.append(i)
        return out

    # -- rounds ----------------------------------------------------------------------------------
    def next_round(self) -> tuple[str, dict[int, np.ndarray]] | None:
        """The next round: ``(stage, {group index: positions to attack})``, or None when done (the
        budget spent, every interval tight, or every robust sample through the whole cascade).
        For the later stages the positions are the prefix's survivors of the first stage only."""
        if len(self.rounds) >= MAX_ROUNDS:
            return None
        left = self.budget - self.spent
        for stage in STAGES:
            idx = self._open(stage)
            if not idx:
                continue
            plan = self._allocate(stage, idx, left)
            if plan is None:
                return None
            return stage, plan
        return None

    def _allocate(self, stage: str, idx: list[int], left: float) -> dict[int, np.ndarray] | None:
        cost = self.cost(stage)
        gs = [self.groups[i] for i in idx]
        caps = [g.robust - g.m1 if stage == FIRST else g.m1 - g.m2 for g in gs]
        # what a prefix item costs: one attacked sample for the first stage; for the rest only the
        # first stage's survivors are attacked (the group's survival rate so far)
        surv = [1.0 if stage == FIRST else max(1.0 - g.k1 / g.m1, 1e-3) for g in gs]
        if sum(c * s for c, s in zip(caps, surv)) * cost <= left:
            take = list(caps)
        else:
            spend = left if left <= LAST_SHARE * self.budget or len(self.rounds) >= MAX_ROUNDS - 1 else left / 2
            if self.stage_rounds[stage] == 0:  # the same number of attacked samples per group
                weights = [1.0 / s for s in surv]
            else:  # where the interval is widest
                weights = [self._width(g, stage) / s for g, s in zip(gs, surv)]
            mean_cost = cost * float(np.average(surv, weights=weights))
            for spend in (spend, left):  # half of what is left; all of it when half buys nothing
                take = waterfill(int(spend // mean_cost), weights, caps, self._ties(len(gs)))
                while sum(take) and sum(t * s for t, s in zip(take, surv)) * cost > spend:
                    take[int(np.argmax(take))] -= 1
                if any(take):
                    break
        if not any(take):
            return None
        plan = {}
        for i, g, t in zip(idx, gs, take):
            if t <= 0:
                continue
            if stage == FIRST:
                plan[i] = g.order[g.m1:g.m1 + t]
            else:
                seg = slice(g.m2, g.m2 + t)
                plan[i] = g.order[seg][~np.asarray(g.first[seg], dtype=bool)]
        self._planned = (stage, {i: int(t) for i, t in zip(idx, take) if t > 0})
        return plan

    def _ties(self, n: int) -> np.ndarray:
        """A seeded random rank per open group for this round: when the budget cannot give every
        group as much (fewer samples than groups), who gets the remainder is not the class order."""
        return np.random.Generator(np.random.PCG64([self.seed, 0x71E5, len(self.rounds)])).permutation(n)

    def record(self, stage: str, fooled: dict[int, np.ndarray], units: float) -> None:
        """What a round found: per group, whether each attacked position was fooled (in the order
        of the plan), and the units the round cost."""
        if self._planned is None or self._planned[0] != stage:
            raise RuntimeError(f"probe round recorded for stage {stage!r} without a plan for it")
        takes = self._planned[1]
        attacked = 0
        for i, t in takes.items():
            g = self.groups[i]
            hit = np.asarray(fooled.get(i, np.zeros(0, dtype=bool)), dtype=bool)
            if stage == FIRST:
                if hit.size != t:
                    raise RuntimeError(f"probe round: {hit.size} outcomes for {t} planned samples of {g.name}")
                g.first.extend(bool(h) for h in hit)
                attacked += t
            else:
                seg = slice(g.m2, g.m2 + t)
                survivors = ~np.asarray(g.first[seg], dtype=bool)
                if hit.size != int(survivors.sum()):
                    raise RuntimeError(f"probe round: {hit.size} outcomes for {int(survivors.sum())} survivors of {g.name}")
                row = np.zeros(t, dtype=bool)
                row[survivors] = hit
                g.rest.extend(bool(h) for h in row)
                attacked += int(survivors.sum())
        for g in self.groups:
            g.looks.append((g.m1, g.k1, g.m2, g.k2))
        self.spent += float(units)
        self.units[stage] += float(units)
        self.attacked[stage] += attacked
        self.stage_rounds[stage] += 1
        self.rounds.append({"stage": stage, "samples": attacked, "units": float(units)})
        self._planned = None

    # -- the result ------------------------------------------------------------------------------
    def per_group(self) -> dict[str, dict[str, Any]]:
        """Per group: the counts, the estimate and bounds in points of robust accuracy, the
        corrected robust accuracy with its interval, and the flag (see the module doc)."""
        rows: dict[str, dict[str, Any]] = {}
        for g in self.groups:
            b = self.bounds(g)
            n = max(g.n, 1)
            exact = g.m1 == g.robust and g.m2 == g.robust
            rows[g.name] = {
                "n": g.n, "robust": g.robust, "robust_acc": g.robust / n,
                "first_attacked": g.m1, "first_fooled": g.k1,
                "rest_covered": g.m2, "rest_attacked": g.m2 - sum(g.first[:g.m2]), "rest_fooled": g.k2,
                "overstatement": b["estimate"] / n, "lower": b["lower"] / n, "upper": b["upper"] / n,
                "upper_first": b["upper_first"] / n,
                "corrected_robust_acc": (g.robust - b["estimate"]) / n,
                "corrected_lo": (g.robust - b["upper"]) / n, "corrected_hi": (g.robust - b["lower"]) / n,
                "flagged": bool(g.n > 0 and b["lower"] / n > self.tolerance), "exact": bool(exact),
            }
        return rows


def overall(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The groups' statements summed: bounds on the overstatement of the average (all samples),
    implied by the per-group ones (no further error spent)."""
    n = sum(r["n"] for r in rows.values())
    robust = sum(r["robust"] for r in rows.values())
    tot = {k: sum(r[k] * r["n"] for r in rows.values()) for k in ("overstatement", "lower", "upper", "upper_first")}
    m = max(n, 1)
    return {"n": n, "robust": robust, "robust_acc": robust / m, **{k: v / m for k, v in tot.items()},
            "corrected_robust_acc": (robust - tot["overstatement"]) / m,
            "corrected_lo": (robust - tot["upper"]) / m, "corrected_hi": (robust - tot["lower"]) / m,
            "first_attacked": sum(r["first_attacked"] for r in rows.values()),
            "first_fooled": sum(r["first_fooled"] for r in rows.values()),
            "rest_attacked": sum(r["rest_attacked"] for r in rows.values()),
            "rest_fooled": sum(r["rest_fooled"] for r in rows.values()),
            "exact": all(r["exact"] for r in rows.values())}


def run_design(design: Design, attack_round) -> Design:
    """Drive ``design`` to its end: ``attack_round(stage, plan) -> (fooled per group, units)``
    runs one round (the model in :mod:`robfair.auditing.probe`, a simulation in the benchmark)."""
    while True:
        nxt = design.next_round()
        if nxt is None:
            return design
        stage, plan = nxt
        fooled, units = attack_round(stage, plan)
        design.record(stage, fooled, units)


def simulated_attack(first: Sequence[np.ndarray], rest: Sequence[np.ndarray],
                     cost: dict[str, float] | None = None):
    """An ``attack_round`` for :func:`run_design` from known outcomes (benchmarks, tests): per group,
    indexed by position, whether the first stage fools each sample (``first``) and whether the
    rest would fool a survivor of it (``rest``); each attacked sample costs ``cost[stage]`` units."""
    cost = dict(PRIOR_COST if cost is None else cost)

    def attack_round(stage: str, plan: dict[int, np.ndarray]) -> tuple[dict[int, np.ndarray], float]:
        truth = first if stage == FIRST else rest
        out = {i: np.asarray(truth[i], dtype=bool)[pos] for i, pos in plan.items()}
        return out, cost[stage] * sum(p.size for p in plan.values())

    return attack_round


__all__ = ["Design", "Group", "FIRST", "REST", "STAGES", "PRIOR_COST", "random_orders", "waterfill", "overall",
           "run_design", "simulated_attack"]
