"""The reliability probe's design (``robfair.auditing.probe_design``), on simulated AutoAttack outcomes:
what it flags, what it states, where it spends, and the three rules each test pins (one-sided
bounds, the multiplicity correction, the tolerance)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robfair.auditing.probe_design import (FIRST, PRIOR_COST, REST, Design, Group, overall, random_orders, run_design,
                                        simulated_attack, waterfill)
from robfair.metrics.stats import finite_population_bounds


def population(n: int, robust: int, first_bad: int, rest_bad: int = 0, seed: int = 0, name: str = "g"):
    """A group: ``robust`` of ``n`` samples robust under the audit; the first ``first_bad`` of them
    (in a shuffled order) are fooled by AutoAttack's first attack, the next ``rest_bad`` only by the rest."""
    rng = np.random.default_rng(seed)
    first = np.zeros(robust, dtype=bool)
    rest = np.zeros(robust, dtype=bool)
    first[:first_bad] = True
    rest[first_bad:first_bad + rest_bad] = True
    perm = rng.permutation(robust)
    return Group(name, n, rng.permutation(robust)), first[perm], rest[perm]


def design_for(specs, budget, *, tolerance=0.01, alpha=0.05, seed=0):
    made = [population(*s, seed=seed + i, name=f"c{i}") for i, s in enumerate(specs)]
    groups = [m[0] for m in made]
    des = Design(groups, budget=budget, alpha=alpha, tolerance=tolerance)
    return des, [m[1] for m in made], [m[2] for m in made]


def test_an_unlimited_budget_is_autoattack_exactly():
    des, first, rest = design_for([(100, 40, 6, 3), (100, 25, 0, 2), (100, 0, 0, 0), (100, 60, 30, 0)], math.inf)
    run_design(des, simulated_attack(first, rest))
    rows = des.per_group()
    for i, r in enumerate(rows.values()):
        d = int(first[i].sum() + rest[i].sum())
        assert r["exact"] and r["lower"] == r["upper"] == r["overstatement"] == d / 100
        assert r["first_attacked"] == r["robust"] and r["rest_covered"] == r["robust"]
    assert [g for g in rows if rows[g]["flagged"]] == ["c0", "c1", "c3"]
    assert rows["c2"]["robust"] == 0 and not rows["c2"]["flagged"]
    assert [r["stage"] for r in des.rounds] == [FIRST, REST]  # the cascade: cheap attack first, then the rest


def test_the_budget_caps_the_spend_and_is_spent_where_disagreement_appears():
    specs = [(500, 250, 0)] * 5 + [(500, 250, 60)] + [(500, 250, 0)] * 4
    budget = 250 * PRIOR_COST[FIRST]  # a tenth of the robust samples through APGD-CE
    des, first, rest = design_for(specs, budget)
    run_design(des, simulated_attack(first, rest))
    assert des.spent <= budget and des.spent >= 0.9 * budget
    assert len(des.rounds) >= 2 and des.rounds[0]["stage"] == FIRST
    takes = [g.m1 for g in des.groups]
    r1 = [g.looks[0][0] for g in des.groups]
    assert max(r1) - min(r1) <= 1 and sum(r1) == des.rounds[0]["samples"]  # the first round: the same for every group
    assert takes[5] > 1.25 * max(takes[:5] + takes[6:])  # then where the interval is wide
    assert des.per_group()["c5"]["flagged"] and len([g for g in des.groups if des.flagged(g)]) == 1
    assert not any(g.m2 for g in des.groups)  # the later stages cost ~45 APGD-CE each: not within this budget


def test_bounds_are_the_stated_statistics():
    """lower = the first stage's one-sided bound at alpha/(2G) + the later stages' witnesses; upper
    = the two stages' upper bounds at alpha/(4G) each; nothing ruled out before the rest ran."""
    g, first, rest = population(200, 100, 20, 4, seed=3)
    des = Design([g] + [Group(f"o{i}", 200, np.arange(50)) for i in range(4)], budget=math.inf, alpha=0.05,
                 tolerance=0.01)
    g.first = list(first[:40])
    g.looks = [(g.m1, g.k1, 0, 0)]
    b = des.bounds(g)
    l1, u1 = finite_population_bounds(g.k1, 40, 100, 0.05 / 10, 0.05 / 20)
    assert (b["lower"], b["upper_first"], b["upper"]) == (l1, u1, 100)
    g.rest = [bool(r) and not bool(f) for r, f in zip(rest[:20], first[:20])]
    g.looks.append((g.m1, g.k1, g.m2, g.k2))
    b = des.bounds(g)
    _, u2 = finite_population_bounds(g.k2, 20, 100, None, 0.05 / 20)
    assert b["lower"] == max(l1, l1 + g.k2) and b["upper"] == min(100, u1 + u2)


@pytest.mark.parametrize("changed", ["alpha/G", "alpha", "alpha/(4G)"])
def test_the_multiplicity_correction_is_alpha_over_2G(changed):
    """Flags use alpha / (2G), G the groups with a robust sample (the empty ones do not count): with
    the tolerance between the lower bounds at that level and at a changed one, the flag follows
    the right level."""
    G = 4
    others = [Group(f"o{i}", 400, np.arange(100)) for i in range(G - 1)] + [Group("empty", 400, np.arange(0))]
    level = {"alpha/G": 0.05 / G, "alpha": 0.05, "alpha/(4G)": 0.05 / (4 * G)}[changed]
    k, m, robust, n = 15, 60, 200, 400
    lo, _ = finite_population_bounds(k, m, robust, 0.05 / (2 * G), None)
    lo_c, _ = finite_population_bounds(k, m, robust, level, None)
    assert lo != lo_c
    tolerance = (lo + lo_c) / 2 / n  # between the two: flagged at one level, not at the other
    g = Group("g", n, np.arange(robust))
    g.first = [True] * k + [False] * (m - k)
    des = Design([g] + others, budget=1.0, alpha=0.05, tolerance=tolerance)
    assert des.alpha_lower == 0.05 / (2 * G) and des.alpha_upper == 0.05 / (4 * G)
    assert des.flagged(g) == des.per_group()["g"]["flagged"] == (lo > lo_c)  # the record's flag too


def test_the_tolerance_is_strict_and_settable():
    """A group is flagged when its lower bound exceeds the tolerance: 1 witness in 100 samples
    (exactly 1 point) is not flagged at 1 point, 2 are; at 2 points, 2 are not. The record's flag
    (``per_group``, what ``flagged_groups`` lists) follows the same rule."""
    def flagged(k, tolerance):
        g = Group("g", 100, np.arange(10))
        g.first, g.rest = [True] * k + [False] * (10 - k), [False] * 10
        des = Design([g], budget=1.0, alpha=0.05, tolerance=tolerance)
        assert des.per_group()["g"]["flagged"] == des.flagged(g)
        return des.flagged(g)

    assert (flagged(1, 0.01), flagged(2, 0.01), flagged(2, 0.02), flagged(3, 0.02)) == (False, True, False, True)


def test_false_alarms_at_the_tolerance_stay_under_alpha():
    """Every group overstated by exactly the tolerance (the null's boundary): a flag is a false alarm."""
    alarms, reps = 0, 60
    for rep in range(reps):
        des, first, rest = design_for([(200, 100, 2)] * 10, budget=300 * PRIOR_COST[FIRST], seed=1000 * rep)
        run_design(des, simulated_attack(first, rest))
        alarms += any(des.flagged(g) for g in des.groups)
    assert alarms / reps <= 0.05


def test_power_at_ten_points_for_ten_classes():
    """One class of ten overstated by 10 points (robust 50%, 250 samples a class), the budget of a
    PGD-20 audit (41 units a robust sample, 6 a fooled one): flagged in nearly every run."""
    budget = 10 * 250 * (0.5 * 41 + 0.5 * 6)
    hits = 0
    for rep in range(20):
        des, first, rest = design_for([(250, 125, 25)] + [(250, 125, 0)] * 9, budget=budget, seed=77 * rep)
        run_design(des, simulated_attack(first, rest))
        hits += des.flagged(des.groups[0])
        assert not any(des.flagged(g) for g in des.groups[1:])
    assert hits >= 18


def test_orders_are_seeded_per_group():
    groups = np.array([0] * 30 + [1] * 20)
    robust = np.ones(50, dtype=bool)
    robust[::3] = False
    a = random_orders(groups, robust, ["x", "y"], seed=0)
    b = random_orders(groups, robust, ["x", "y"], seed=0)
    c = random_orders(groups, robust, ["x", "y"], seed=1)
    assert all(np.array_equal(p.order, q.order) for p, q in zip(a, b))
    assert not np.array_equal(a[0].order, c[0].order)
    assert sorted(a[0].order.tolist()) == [i for i in range(30) if robust[i]] and a[1].n == 20


def test_overall_sums_the_groups():
    des, first, rest = design_for([(100, 50, 10), (300, 90, 0)], math.inf)
    run_design(des, simulated_attack(first, rest))
    o = overall(des.per_group())
    assert o["n"] == 400 and o["robust"] == 140 and o["lower"] == o["upper"] == pytest.approx(10 / 400)
    assert o["corrected_robust_acc"] == pytest.approx(130 / 400) and o["exact"]


def test_waterfill():
    assert waterfill(10, [1, 1, 1], [2, 10, 10]) == [2, 4, 4]
    assert waterfill(7, [3, 1, 0], [10, 10, 10]) == [5, 2, 0]
    assert waterfill(100, [1, 1], [3, 4]) == [3, 4]
    assert sum(waterfill(9, [0.2, 0.3, 0.5], [9, 9, 9])) == 9


def test_what_half_the_budget_cannot_buy_the_whole_rest_may():
    """After the first stage covers every robust sample, the later stages get what is left even
    when half of it would not pay for one survivor."""
    des, first, rest = design_for([(100, 10, 0, 2)], budget=10 * PRIOR_COST[FIRST] + 1.5 * PRIOR_COST[REST])
    run_design(des, simulated_attack(first, rest))
    assert des.groups[0].m1 == 10 and des.attacked[REST] == 1 and des.spent <= des.budget


def test_a_budget_smaller_than_the_groups_is_not_spent_by_class_order():
    """Three samples for ten groups: which groups get them is a seeded draw, not the first three."""
    got = set()
    for seed in range(6):
        des, first, rest = design_for([(100, 50, 0)] * 10, budget=3 * PRIOR_COST[FIRST], seed=0)
        des.seed = seed
        run_design(des, simulated_attack(first, rest))
        takes = [g.m1 for g in des.groups]
        assert sum(takes) == 3 and max(takes) == 1
        got.add(tuple(i for i, t in enumerate(takes) if t))
    assert len(got) > 1 and (0, 1, 2) not in got or len(got) > 2
