"""GroupReport against hand-computed cases and independent formulas."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from robfair.errors import ConfigError, DataError, RobfairError
from robfair.metrics import Counts, GroupReport, seed_summary, wilson

NAMES = ["A", "B", "C"]
# (y, clean_pred, adv_pred), one row per sample, built so every outcome kind appears:
HAND = np.array([
    [0, 0, 0],  # robust
    [0, 0, 1],  # boundary error
    [0, 2, 0],  # clean mistake "repaired" by the attack
    [0, 1, 1],  # wrong both times
    [0, 1, 0],  # repaired again -> A's compat bndy goes negative
    [1, 1, 1],  # robust
    [1, 1, 2],  # boundary
    [1, 1, 2],  # boundary
    [2, 2, 2],  # robust
    [2, 2, 2],  # robust
    [2, 0, 0],  # wrong both times
])


def hand_report(**kw) -> GroupReport:
    y, c, a = HAND.T
    return GroupReport.from_outcomes(y=y, clean_pred=c, adv_pred=a, class_names=NAMES, **kw)


def random_outcomes(rng, n=300, K=4, G=None):
    y = rng.integers(0, K, n)
    clean = np.where(rng.random(n) < 0.7, y, rng.integers(0, K, n))
    adv = np.where(rng.random(n) < 0.5, y, rng.integers(0, K, n))
    g = None if G is None else rng.integers(0, G, n)
    return y, clean, adv, g


# ----------------------------------------------------------------------------- hand-computed case
def test_hand_counts():
    c = hand_report().counts
    np.testing.assert_array_equal(np.diag(c.n), [5, 3, 3])
    np.testing.assert_array_equal(np.diag(c.clean), [2, 3, 2])
    np.testing.assert_array_equal(np.diag(c.robust), [1, 1, 2])
    np.testing.assert_array_equal(np.diag(c.repaired), [2, 0, 0])
    np.testing.assert_array_equal(c.confusion_clean, [[2, 2, 1], [0, 3, 0], [1, 0, 2]])
    np.testing.assert_array_equal(c.confusion_adv, [[3, 2, 0], [0, 1, 2], [1, 0, 2]])


def test_hand_by_group():
    df = hand_report().by_group
    assert list(df.index) == NAMES
    expected = {  # A, B, C
        "n": [5, 3, 3],
        "clean_acc": [2 / 5, 1, 2 / 3],
        "rob_acc": [1 / 5, 1 / 3, 2 / 3],
        "std_err": [3 / 5, 0, 1 / 3],
        "bndy_err": [1 / 5, 2 / 3, 0],
        "rob_err": [4 / 5, 2 / 3, 1 / 3],  # A: the two repaired samples still count as robust errors
        "adv_acc": [3 / 5, 1 / 3, 2 / 3],
        "compat_bndy_err": [-1 / 5, 2 / 3, 0],  # FRL code's clean acc - adv acc: negative for A
    }
    for col, vals in expected.items():
        np.testing.assert_allclose(df[col].to_numpy(), vals, atol=1e-15, err_msg=col)
    np.testing.assert_allclose(df.rob_err, df.std_err + df.bndy_err, atol=1e-15)
    lo, hi = wilson(2, 5)
    assert df.loc["A", "clean_acc_lo"] == pytest.approx(lo) and df.loc["A", "clean_acc_hi"] == pytest.approx(hi)


def test_hand_overall_and_aggregates():
    rep = hand_report()
    ov = rep.overall
    assert ov["n"] == 11
    for key, val in {"clean_acc": 7 / 11, "rob_acc": 4 / 11, "std_err": 4 / 11, "bndy_err": 3 / 11,
                     "rob_err": 7 / 11, "adv_acc": 6 / 11, "compat_bndy_err": 1 / 11}.items():
        assert ov[key] == pytest.approx(val, abs=1e-15), key

    agg = rep.aggregates(k=2)
    ra = agg["rob_acc"]
    vals = [1 / 5, 1 / 3, 2 / 3]
    mean = sum(vals) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / 3)
    assert ra["avg"] == pytest.approx(4 / 11)
    assert ra["class_mean"] == pytest.approx(0.4)
    assert (ra["worst"], ra["worst_group"]) == (pytest.approx(0.2), "A")
    assert (ra["best"], ra["best_group"]) == (pytest.approx(2 / 3), "C")
    assert ra["gap"] == pytest.approx(7 / 15) == ra["difference"]
    assert ra["group_min"] == pytest.approx(0.2) and ra["group_max"] == pytest.approx(2 / 3)
    assert ra["sd"] == pytest.approx(sd)
    assert ra["nsd"] == pytest.approx(sd / 0.4)
    assert ra["ratio"] == pytest.approx(0.3)
    assert ra["tail_k"] == pytest.approx((1 / 5 + 1 / 3) / 2)
    assert ra["gini"] == pytest.approx(7 / 27)
    assert ra["parity"] == pytest.approx(10 / 33)  # |2/3 - 4/11|

    re = agg["rob_err"]  # errors: worst is the maximum
    assert (re["worst"], re["worst_group"], re["best"]) == (pytest.approx(0.8), "A", pytest.approx(1 / 3))
    assert re["ratio"] == pytest.approx(2.4)
    be = agg["bndy_err"]
    assert be["worst_group"] == "B" and be["best"] == 0.0
    assert math.isnan(be["ratio"])  # worst / 0 is undefined, not an exception


def test_hand_confusion_and_cfps():
    rep = hand_report()
    np.testing.assert_allclose(rep.cfps(adv=True), [1 / 5, 2 / 5, 2 / 5])
    np.testing.assert_allclose(rep.cfps(adv=False), [1 / 4, 1 / 2, 1 / 4])
    assert rep.confusion(adv=True).sum() == 11
    perfect = GroupReport.from_outcomes(y=[0, 1], clean_pred=[0, 1], adv_pred=[0, 1], class_names=["a", "b"])
    assert np.isnan(perfect.cfps()).all()


def test_rho_hand():
    rep = hand_report()
    y, c, a = HAND.T
    base = GroupReport.from_outcomes(y=y, clean_pred=c, adv_pred=c, class_names=NAMES)  # rob acc = clean acc
    # base: worst rob acc 2/5 (A), avg 7/11; rep: worst 1/5, avg 4/11
    assert rep.rho(base) == pytest.approx((0.2 - 0.4) / 0.4 + (4 / 11 - 7 / 11) / (7 / 11))
    assert rep.rho(rep) == 0.0


# ----------------------------------------------------------------------------- wilson
def test_wilson_hand_values():
    lo, hi = wilson(2, 5)
    assert (lo, hi) == (pytest.approx(0.117621, abs=1e-5), pytest.approx(0.769276, abs=1e-5))
    z2 = 1.96**2
    assert wilson(0, 10) == (pytest.approx(0.0), pytest.approx(z2 / (10 + z2)))
    assert wilson(10, 10) == (pytest.approx(10 / (10 + z2)), pytest.approx(1.0))
    lo, hi = wilson(np.array([1, 0]), np.array([2, 0]))
    assert np.isnan(lo[1]) and np.isnan(hi[1]) and lo[0] < 0.5 < hi[0]


def test_wilson_matches_textbook_form():
    rng = np.random.default_rng(1)
    n = rng.integers(1, 500, 200)
    k = rng.integers(0, n + 1)
    z = 2.576
    p = k / n
    # statsmodels' proportion_confint(method="wilson") form
    c = (k + z**2 / 2) / (n + z**2)
    h = z * np.sqrt(n) / (n + z**2) * np.sqrt(p * (1 - p) + z**2 / (4 * n))
    lo, hi = wilson(k, n, z=z)
    np.testing.assert_allclose(lo, np.clip(c - h, 0, 1), atol=1e-12)
    np.testing.assert_allclose(hi, np.clip(c + h, 0, 1), atol=1e-12)


# ----------------------------------------------------------------------------- merging
@pytest.mark.parametrize("G", [None, 3])
def test_merge_of_shards_equals_concatenation(G):
    rng = np.random.default_rng(0)
    y, clean, adv, g = random_outcomes(rng, n=400, K=4, G=G)
    gn = None if G is None else ["g0", "g1", "g2"]
    full = GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=adv, groups=g, class_names=list("abcd"),
                                     group_names=gn, attack="pgd20", eps="8/255")
    shard_id = rng.integers(0, 3, len(y))
    shards = [
        GroupReport.from_outcomes(y=y[m], clean_pred=clean[m], adv_pred=adv[m], groups=None if g is None else g[m],
                                  class_names=list("abcd"), group_names=gn, attack="pgd20", eps=8 / 255)
        for m in (shard_id == i for i in range(3))
    ]
    merged = GroupReport.merge_all(shards)
    assert merged == full
    assert shards[0] + shards[1] + shards[2] == full
    assert merged.by_group.equals(full.by_group)


def test_merge_rejects_different_evaluations():
    rep = hand_report(attack="pgd20", eps=0.1)
    with pytest.raises(DataError, match="attack"):
        rep.merge(hand_report(attack="fgsm", eps=0.1))
    with pytest.raises(DataError, match="eps"):
        rep.merge(hand_report(attack="pgd20", eps=0.2))
    other = GroupReport.from_outcomes(y=[0], clean_pred=[0], adv_pred=[0], class_names=["A", "B", "D"],
                                      attack="pgd20", eps=0.1)
    with pytest.raises(DataError, match="class_names"):
        rep.merge(other)
    with pytest.raises(DataError):
        GroupReport.merge_all([])


# ----------------------------------------------------------------------------- groups != classes
def test_groups_differ_from_classes_by_cell():
    #            y  clean adv group
    rows = np.array([[0, 0, 0, 0], [0, 0, 1, 1], [1, 1, 1, 0], [1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 1]])
    y, c, a, g = rows.T
    rep = GroupReport.from_outcomes(y=y, clean_pred=c, adv_pred=a, groups=g, class_names=["neg", "pos"],
                                    group_names=["men", "women"])
    assert not rep.groups_are_classes and hand_report().groups_are_classes
    cell = rep.by_cell
    assert list(cell.index) == [("men", "neg"), ("men", "pos"), ("women", "neg"), ("women", "pos")]
    np.testing.assert_array_equal(cell["n"], [1, 1, 2, 2])
    np.testing.assert_allclose(cell["rob_acc"], [1, 1, 1 / 2, 1 / 2])
    np.testing.assert_allclose(cell["bndy_err"], [0, 0, 1 / 2, 0])
    bg = rep.by_group
    np.testing.assert_array_equal(bg["n"], [2, 4])
    np.testing.assert_allclose(bg["rob_acc"], [1, 2 / 4])
    np.testing.assert_allclose(rep.by_class["clean_acc"], [1, 2 / 3])
    eo = rep.equal_opportunity("pos")
    assert eo["clean_tpr"] == {"men": 1.0, "women": 0.5}
    assert eo["clean_difference"] == pytest.approx(0.5) and eo["robust_difference"] == pytest.approx(0.5)


def test_empty_group_is_nan_and_skipped():
    rep = GroupReport.from_outcomes(y=[0, 1, 1], clean_pred=[0, 1, 0], adv_pred=[0, 0, 0], groups=[0, 0, 1],
                                    class_names=["a", "b"], group_names=["x", "y", "z"])
    assert np.isnan(rep.by_group.loc["z", "rob_acc"]) and rep.by_group.loc["z", "n"] == 0
    agg = rep.aggregates()
    assert agg["rob_acc"]["num_groups"] == 2 and agg["clean_acc"]["worst_group"] == "y"
    json.dumps(rep.to_json(bootstrap=20), allow_nan=False)


# ----------------------------------------------------------------------------- bootstrap
def two_group_report(n=200, accs=(0.5, 0.8)):
    y, clean, adv, grp = [], [], [], []
    for gi, acc in enumerate(accs):
        k = int(round(acc * n))
        y += [0] * n
        clean += [0] * n
        adv += [0] * k + [1] * (n - k)
        grp += [gi] * n
    return GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=adv, groups=grp, class_names=["a", "b"],
                                     group_names=["g0", "g1"])


def test_bootstrap_deterministic_and_covers_plug_in():
    rep = two_group_report()
    b1, b2 = rep.bootstrap(n=500, seed=3), rep.bootstrap(n=500, seed=3)
    assert b1 == b2
    assert rep.bootstrap(n=500, seed=4) != b1
    w = b1["metrics"]["rob_acc"]["worst"]
    gap = b1["metrics"]["rob_acc"]["gap"]
    assert w["plug_in"] == pytest.approx(0.5) and gap["plug_in"] == pytest.approx(0.3)
    assert w["lo"] < 0.5 < w["hi"] and gap["lo"] < 0.3 < gap["hi"]
    assert w["corrected"] == pytest.approx(2 * w["plug_in"] - w["mean"])
    sd = math.sqrt(0.25 / 200)  # one binomial group dominates the minimum here
    assert w["hi"] - w["lo"] == pytest.approx(2 * 1.96 * sd, rel=0.2)
    assert b1["metrics"]["rob_acc"]["worst_group_stability"] == 1.0
    assert b1["metrics"]["rob_err"]["worst"]["plug_in"] == pytest.approx(0.5)


def test_bootstrap_matches_naive_sample_resampling():
    """The multinomial shortcut has the same distribution as resampling samples within groups."""
    rng = np.random.default_rng(5)
    y, clean, adv, g = random_outcomes(rng, n=150, K=3, G=3)
    rep = GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=adv, groups=g, class_names=list("abc"),
                                    group_names=list("xyz"))
    B = 4000
    fast = rep.bootstrap(n=B, seed=0)["metrics"]["rob_acc"]
    robust = (clean == y) & (adv == y)
    worst = np.full(B, np.inf)
    for gi in range(3):
        r = robust[g == gi]
        idx = rng.integers(0, len(r), size=(B, len(r)))
        worst = np.minimum(worst, r[idx].mean(1))
    se = worst.std() / math.sqrt(B)
    assert fast["worst"]["mean"] == pytest.approx(worst.mean(), abs=5 * se * math.sqrt(2))
    assert fast["worst"]["lo"] == pytest.approx(np.quantile(worst, 0.025), abs=0.03)
    assert fast["worst"]["hi"] == pytest.approx(np.quantile(worst, 0.975), abs=0.03)


def test_bootstrap_bad_args():
    with pytest.raises(ConfigError):
        hand_report().bootstrap(n=0)
    with pytest.raises(ConfigError):
        hand_report().bootstrap(level=1.5)


# ----------------------------------------------------------------------------- chi2
def test_chi2_detects_different_groups_and_not_identical_ones():
    diff = two_group_report(n=100, accs=(0.1, 0.9)).chi2()
    assert diff["robust"]["p_value"] < 1e-10 and diff["robust"]["dof"] == 1
    same = two_group_report(n=100, accs=(0.6, 0.6)).chi2()
    assert same["robust"]["p_value"] == pytest.approx(1.0) and same["robust"]["statistic"] == pytest.approx(0.0)


def test_chi2_statistic_by_hand_and_degenerate_tables():
    rep = GroupReport.from_outcomes(  # 3 groups, robust counts 8/10, 5/10, 2/10; everyone clean-correct
        y=[0] * 30, clean_pred=[0] * 30, adv_pred=([0] * 8 + [1] * 2) + ([0] * 5 + [1] * 5) + ([0] * 2 + [1] * 8),
        groups=[0] * 10 + [1] * 10 + [2] * 10, class_names=["a", "b"], group_names=["x", "y", "z"])
    # Pearson: expected 5 robust / 5 not per group -> (9+0+9)/5 * 2 = 7.2
    res = rep.chi2()
    assert res["robust"]["statistic"] == pytest.approx(7.2) and res["robust"]["dof"] == 2
    assert res["robust"]["p_value"] == pytest.approx(math.exp(-7.2 / 2))  # chi2(2) survival = exp(-x/2)
    assert res["clean"]["p_value"] == 1.0 and res["clean"]["note"]  # all clean-correct: degenerate
    one = GroupReport.from_outcomes(y=[0, 0], clean_pred=[0, 1], adv_pred=[0, 1], class_names=["a", "b"])
    assert one.chi2()["robust"]["p_value"] == 1.0 and "two groups" in one.chi2()["robust"]["note"]


# ----------------------------------------------------------------------------- JSON
def test_json_round_trip_exact():
    rng = np.random.default_rng(2)
    y, clean, adv, g = random_outcomes(rng, n=100, K=3, G=2)
    for eps in (None, 8 / 255):
        rep = GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=adv, groups=g, class_names=list("abc"),
                                        group_names=["p", "q"], attack="pgd20", eps=eps)
        d = rep.to_json()
        assert d["schema"] == "robfair.group-report/1"
        back = GroupReport.from_json(json.loads(json.dumps(d, allow_nan=False)))
        assert back == rep and back.eps == rep.eps
        assert back.to_frame().equals(rep.to_frame())
    assert list(rep.to_frame().columns[:3]) == ["attack", "eps", "n"]


def test_eps_forms():
    assert hand_report(eps="8/255").eps == 8 / 255
    assert hand_report(eps=np.float32(0.1)).eps == 0.1  # float32 radii read as the decimal they came from
    label = hand_report(eps="per-sample", attack="pgd20")
    assert label.eps == "per-sample" and GroupReport.from_json(label.to_json()) == label
    assert (label + label).eps == "per-sample"
    with pytest.raises(DataError, match="eps"):
        label.merge(hand_report(eps=0.1, attack="pgd20"))
    with pytest.raises(RobfairError):
        hand_report(eps="8/25x")  # a mistyped number is not a label
    with pytest.raises(DataError, match="one number"):
        hand_report(eps=np.array([0.1, 0.2]))


def test_from_json_rejects_bad_input():
    d = hand_report().to_json()
    with pytest.raises(DataError, match="schema"):
        GroupReport.from_json({**d, "schema": "other/1"})
    bad = json.loads(json.dumps(d))
    bad["counts"]["robust"][0][0] = 99  # more robust than clean-correct
    with pytest.raises(DataError, match="inconsistent"):
        GroupReport.from_json(bad)


# ----------------------------------------------------------------------------- inputs
def test_torch_inputs_match_numpy():
    torch = pytest.importorskip("torch")
    y, c, a = HAND.T
    rep = GroupReport.from_outcomes(y=torch.tensor(y), clean_pred=torch.tensor(c), adv_pred=torch.tensor(a),
                                    class_names=NAMES, eps=torch.tensor(0.1))
    assert rep == hand_report(eps=0.1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(y=[0, 1], clean_pred=[0], adv_pred=[0, 1]), "entries"),
        (dict(y=[0, 3], clean_pred=[0, 1], adv_pred=[0, 1]), "outside"),
        (dict(y=[0, 1], clean_pred=[[0.1, 0.9], [0.8, 0.2]], adv_pred=[0, 1]), "argmax"),
        (dict(y=[0, 1], clean_pred=[0.5, 1.0], adv_pred=[0, 1]), "integer"),
        (dict(y=[0, 1], clean_pred=[0, 1], adv_pred=[0, -1]), "outside"),
        (dict(y=[0, 1], clean_pred=[0, 1], adv_pred=[0, 1], groups=[0, 2], group_names=["x", "y"]), "group names"),
        (dict(y=[0, 1], clean_pred=[0, 1], adv_pred=[0, 1], groups=[0]), "group id"),
    ],
)
def test_bad_inputs_raise_one_line_errors(kwargs, match):
    with pytest.raises(DataError, match=match) as e:
        GroupReport.from_outcomes(class_names=["a", "b"], **kwargs)
    assert "\n" not in str(e.value) and ";" in str(e.value)


def test_bad_names_and_args():
    with pytest.raises(DataError, match="duplicate"):
        GroupReport.from_outcomes(y=[0], clean_pred=[0], adv_pred=[0], class_names=["a", "a"])
    with pytest.raises(RobfairError):
        GroupReport.from_outcomes(y=[0], clean_pred=[0], adv_pred=[0], class_names=["a"], eps=-1)
    with pytest.raises(ConfigError):
        hand_report().aggregates(k=0)


# ----------------------------------------------------------------------------- identities on random data
def test_identities_random():
    rng = np.random.default_rng(7)
    y, clean, adv, g = random_outcomes(rng, n=500, K=5, G=4)
    rep = GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=adv, groups=g, class_names=list("abcde"),
                                    group_names=list("wxyz"))
    for df in (rep.by_group, rep.by_class, rep.by_cell):
        np.testing.assert_allclose(df.rob_err, df.std_err + df.bndy_err, atol=1e-15)
        np.testing.assert_allclose(df.rob_acc, 1 - df.rob_err, atol=1e-15)
        assert (df.rob_acc_lo <= df.rob_acc).all() and (df.rob_acc <= df.rob_acc_hi).all()
    # per-group values against direct masks
    for gi, name in enumerate("wxyz"):
        m = g == gi
        assert rep.by_group.loc[name, "rob_acc"] == pytest.approx(np.mean((clean[m] == y[m]) & (adv[m] == y[m])))
    assert Counts.from_lists(rep.counts.to_lists()) == rep.counts


def test_seed_summary():
    a = two_group_report(accs=(0.5, 0.8))
    b = two_group_report(accs=(0.7, 0.6))
    s = seed_summary([a, b])
    np.testing.assert_allclose(s["mean"], [0.6, 0.7])
    np.testing.assert_allclose(s["sd"], [np.std([0.5, 0.7], ddof=1), np.std([0.8, 0.6], ddof=1)])
    np.testing.assert_allclose(s["worst_freq"], [0.5, 0.5])
