"""Randomized smoothing (robfair certify): exact linear oracle, Clopper-Pearson against scipy, abstention,
CERTIFY and PREDICT redone draw for draw from the documented noise streams (each of: alpha doubled, selection and
estimation sharing a stream, c_A taken from the estimation draws, a one-sided PREDICT fails one of them),
determinism and exact resume, the GroupReport bridge, outcomes, the attack check, gaussian-aug, the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import beta, binom, binomtest, norm
from torch import nn

from _shared import run_cli
from robfair import certifying as C
from robfair.data import Dataset
from robfair.errors import RobfairError

SIGMA = 0.25


class Linear2(nn.Module):
    """f(x) = 1 if w.x + b > 0 else 0, as two logits (-z/2, z/2)."""

    def __init__(self, w: torch.Tensor, b: float):
        super().__init__()
        self.w = nn.Parameter(w.clone())
        self.b = float(b)

    def forward(self, x):
        z = x.flatten(1) @ self.w + self.b
        return torch.stack([-z / 2, z / 2], 1)


def linear_problem(n=120, d=16, seed=0, max_dist=2 * SIGMA):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, generator=g)
    b = -0.5 * float(w.sum())
    x = torch.rand(4 * n, 1, 4, 4, generator=g)
    z = x.flatten(1) @ w + b
    dist = z.abs() / w.norm()
    keep = torch.nonzero((dist < max_dist) & (dist > 0.02 * SIGMA)).flatten()[:n]  # p_A in (0.5, Phi(2))
    x, z, dist = x[keep], z[keep], dist[keep]
    ds = Dataset(x=x, y=(z > 0).long(), classes=["neg", "pos"], name="linear")
    return Linear2(w, b), ds, dist.double().numpy()


# ---------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("k,n,alpha", [(0, 10, 0.05), (1, 10, 0.05), (7, 10, 0.001), (10, 10, 0.001),
                                       (99_990, 100_000, 0.001), (512, 1000, 0.01), (3, 3, 0.2)])
def test_clopper_pearson_equals_scipy(k, n, alpha):
    # independent implementation: scipy's exact binomial interval at two-sided level 1 - 2 alpha
    ref = binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    assert C.cp_lower(k, n, alpha) == pytest.approx(ref.low, rel=1e-10, abs=1e-14)
    assert C.cp_upper(k, n, alpha) == pytest.approx(ref.high, rel=1e-10, abs=1e-14)
    if 0 < k:
        assert C.cp_lower(k, n, alpha) == pytest.approx(beta.ppf(alpha, k, n - k + 1), rel=1e-12)


def test_clopper_pearson_is_vectorized_and_checked():
    k = np.array([0, 5, 10])
    lo = C.cp_lower(k, 10, 0.01)
    assert lo.shape == (3,) and lo[0] == 0 and np.all(np.diff(lo) > 0)
    with pytest.raises(RobfairError):
        C.cp_lower(11, 10, 0.01)
    with pytest.raises(RobfairError):
        C.cp_lower(1, 10, 1.5)


def test_coverage_of_the_lower_bound():
    # P[p_true < lower bound] <= alpha over repeated binomial draws
    rng = np.random.default_rng(0)
    p, n, alpha = 0.8, 200, 0.05
    k = rng.binomial(n, p, size=20_000)
    miss = (C.cp_lower(k, n, alpha) > p).mean()
    assert miss <= alpha + 3 * math.sqrt(alpha / 20_000)


def test_radius_and_abstention_rule():
    assert C.radius_from_p(0.5, SIGMA) == 0.0  # p_A <= 1/2: abstain, radius 0
    assert C.radius_from_p(0.3, SIGMA) == 0.0
    assert C.radius_from_p(np.nextafter(0.5, 1), SIGMA) > 0
    assert C.radius_from_p(norm.cdf(1.3), SIGMA) == pytest.approx(1.3 * SIGMA, rel=1e-12)
    assert C.max_radius(100_000, 0.001, SIGMA) == pytest.approx(SIGMA * norm.ppf(0.001 ** (1 / 100_000)), rel=1e-9)


# ---------------------------------------------------------------------------- the exact oracle
def test_linear_oracle_exact_p_gives_the_boundary_distance():
    model, ds, dist = linear_problem()
    z = (ds.x.flatten(1) @ model.w + model.b).detach().double().numpy()
    p_true = norm.cdf(np.abs(z) / (SIGMA * model.w.norm().item()))
    assert np.allclose(C.radius_from_p(p_true, SIGMA), dist, rtol=1e-6, atol=1e-9)


def test_linear_oracle_radius_is_a_lower_bound_and_tight():
    model, ds, dist = linear_problem()
    alpha = 0.001
    rep = C.certify(model, ds, SIGMA, n0=100, n=20_000, alpha=alpha, batch_size=1000, device="cpu")
    assert len(rep) == len(dist) == 120
    # the smoothed classifier of a linear model is the model itself: never wrong, possibly abstaining
    assert not ((rep.pred != ds.y.numpy()) & ~rep.abstain).any()
    over = rep.radius > dist + 1e-9
    # radius <= true distance for (1 - alpha) of samples (binomial slack at 1e-4)
    assert over.sum() <= binom.ppf(1 - 1e-4, len(dist), alpha)
    # tight on average: with n = 20000 the Clopper-Pearson shortfall is ~0.04 sigma at p_A = 0.9; allow 0.1 sigma
    shortfall = dist - rep.radius
    assert 0 < shortfall.mean() <= 0.1 * SIGMA
    assert rep.abstain.mean() < 0.1


def test_a_plug_in_radius_fails_the_oracle():
    # the oracle test can fail: sigma * Phi^-1(p_hat) without the confidence bound overshoots about half the time
    model, ds, dist = linear_problem()
    rep = C.certify(model, ds, SIGMA, n0=100, n=2000, alpha=0.001, device="cpu")
    p_hat = rep.n_top / rep.n
    naive = C.radius_from_p(np.minimum(p_hat, 1 - 1e-9), SIGMA)
    assert (naive > dist + 1e-9).sum() > binom.ppf(1 - 1e-4, len(dist), 0.001)


class Coin(nn.Module):
    """Class 0 or 1 by the sign of the first pixel minus 1/2: p_A = 1/2 exactly at x_0 = 1/2."""

    def forward(self, x):
        z = x.flatten(1)[:, 0] - 0.5
        return torch.stack([-z, z], 1)


def test_abstains_when_the_top_class_is_a_coin_flip():
    x = torch.full((6, 1, 2, 2), 0.5)
    ds = Dataset(x=x, y=torch.tensor([0, 1, 0, 1, 0, 1]), classes=["a", "b"])
    rep = C.certify(Coin(), ds, SIGMA, n0=50, n=2000, alpha=0.001, device="cpu")
    assert rep.abstain.all() and (rep.radius == 0).all() and (rep.pred == C.ABSTAIN).all()
    assert (rep.p_lower <= 0.5).all()
    assert rep.table().loc["all", "abstain"] == 1.0
    assert any("abstains" in w for w in rep.warnings)
    # PREDICT abstains too (the top two counts do not differ significantly)
    assert (C.predict(Coin(), x, SIGMA, n=2000, device="cpu") == C.ABSTAIN).all()


# ---------------------------------------------------------------------------- Cohen et al.'s algorithm, draw for draw
# The passes of every sample's noise, as documented (certifying/smoothing.py: seeded from (seed, dataset index, pass)):
# 0 selects the top class, 1 estimates its probability, 2 is PREDICT. Spelled here, not read from the module,
# so a change of the streams fails these tests instead of following them.
SELECT, ESTIMATE, PREDICT = 0, 1, 2


def draw_counts(model, x, seed, index, stage, num, K=2):
    """The base model's counts over ``num`` draws of one input's noise stream, drawn here from the
    seeding helper (one randn call, as certify makes when ``batch_size >= num``)."""
    from robfair.seeding import make_generator, noise_seed

    g = make_generator(torch.device("cpu"), noise_seed(seed, index, stage))
    e = torch.randn((num,) + tuple(x.shape), generator=g, dtype=x.dtype)
    pred = model(x + SIGMA * e).argmax(1)
    return np.bincount(pred.numpy(), minlength=K)


def coin_row(offsets):
    """Inputs of :class:`Coin` whose first pixel sits ``offsets`` sigmas above 1/2: P[class 1] = Phi(offset)."""
    x = torch.full((len(offsets), 1, 2, 2), 0.5)
    x[:, 0, 0, 0] += torch.as_tensor(offsets, dtype=torch.float32) * SIGMA
    return x


def test_certify_is_cohen_et_als_algorithm_draw_for_draw():
    """CERTIFY redone by hand: c_A = argmax of the n0 selection draws (pass 0), n_A = its count among n
    fresh estimation draws (pass 1), p_A = the one-sided Clopper-Pearson lower bound at alpha (scipy's
    beta quantile), radius sigma * Phi^-1(p_A) where p_A > 1/2, else abstain. Fails if alpha is
    doubled, if estimation reuses the selection stream, or if c_A comes from the estimation draws."""
    offsets = np.linspace(-2.0, 2.0, 25)
    x = coin_row(offsets)
    ds = Dataset(x=x, y=torch.as_tensor(offsets > 0).long(), classes=["a", "b"])
    n0, n, alpha, seed = 3, 64, 0.01, 5
    rep = C.certify(Coin(), ds, SIGMA, n0=n0, n=n, alpha=alpha, batch_size=n, seed=seed, device="cpu")
    sel = np.stack([draw_counts(Coin(), x[i], seed, int(k), SELECT, n0) for i, k in enumerate(rep.index)])
    est = np.stack([draw_counts(Coin(), x[i], seed, int(k), ESTIMATE, n) for i, k in enumerate(rep.index)])
    c_a = sel.argmax(1)
    n_a = est[np.arange(len(x)), c_a]
    p_a = np.where(n_a > 0, beta.ppf(alpha, np.maximum(n_a, 1), n - n_a + 1), 0.0)
    assert rep.selected.tolist() == c_a.tolist()
    assert rep.n_top.tolist() == n_a.tolist()
    assert np.allclose(rep.p_lower, p_a, rtol=1e-12, atol=0)
    ok = p_a > 0.5
    assert rep.pred.tolist() == np.where(ok, c_a, C.ABSTAIN).tolist()
    assert np.allclose(rep.radius, np.where(ok, SIGMA * norm.ppf(np.clip(p_a, 0.5, 1)), 0.0), rtol=1e-12, atol=0)
    # the case can tell the mutations apart: certified and abstained samples, selection and estimation that
    # disagree on the top class, and estimation counts that another stream would not give
    assert ok.any() and (~ok).any() and (n_a > 0).all()
    assert (c_a != est.argmax(1)).any()
    sel_stream = np.stack([draw_counts(Coin(), x[i], seed, int(k), SELECT, n) for i, k in enumerate(rep.index)])
    assert (sel_stream[np.arange(len(x)), c_a] != n_a).any()


class Constant(nn.Module):
    """Class 0 whatever the input: no noise or attack changes it."""

    def forward(self, x):
        return torch.stack([torch.ones(len(x)), torch.zeros(len(x))], 1) + 0 * x.flatten(1)[:, :1]


def test_a_model_without_doubt_gets_the_largest_radius_exactly():
    """Every draw is the label: n_A = n, so the Clopper-Pearson bound is alpha^(1/n) in closed form."""
    ds = Dataset(x=torch.rand(3, 1, 2, 2), y=torch.zeros(3, dtype=torch.long), classes=["a", "b"])
    for n, alpha in ((50, 0.001), (1000, 0.05)):
        rep = C.certify(Constant(), ds, SIGMA, n0=5, n=n, alpha=alpha, device="cpu")
        assert (rep.n_top == n).all() and (rep.pred == 0).all()
        assert np.allclose(rep.p_lower, alpha ** (1 / n), rtol=1e-12, atol=0)
        assert np.allclose(rep.radius, SIGMA * norm.ppf(alpha ** (1 / n)), rtol=1e-12, atol=0)


class Recorder2(nn.Module):
    """:class:`Coin` that keeps every input it sees."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        self.seen.append(x.detach().clone())
        return Coin()(x)


def test_selection_estimation_and_predict_draw_independent_noise():
    """No draw of one pass reappears in another (whatever the streams are called): shared streams would
    make the first n0 estimation draws the selection draws."""
    ds = Dataset(x=coin_row([0.3]), y=torch.ones(1, dtype=torch.long), classes=["a", "b"])
    model = Recorder2()
    C.certify(model, ds, SIGMA, n0=4, n=10, batch_size=10, device="cpu")
    by_rows = {len(t): t for t in model.seen}
    sel, est = by_rows[4], by_rows[10]
    C.predict(model, ds.x, SIGMA, n=12, batch_size=12, device="cpu")
    pred = model.seen[-1]
    assert len(pred) == 12
    rows = [r.flatten() for t in (sel, est, pred) for r in t]
    assert len({tuple(r.tolist()) for r in rows}) == len(rows)


def test_predict_is_the_two_sided_binomial_test_of_the_top_two_counts():
    """PREDICT redone by hand from pass 2's draws: the top class when scipy's two-sided binomial test of
    the top two counts at 1/2 gives p <= alpha, else abstain; alpha is set between the one- and the
    two-sided p of one input, where only the two-sided test abstains."""
    from scipy.stats import binomtest

    offsets = np.linspace(-0.6, 0.6, 13)
    x = coin_row(offsets)
    n, seed = 200, 7
    keys = list(range(100, 113))
    counts = np.stack([draw_counts(Coin(), x[i], seed, k, PREDICT, n) for i, k in enumerate(keys)])
    top = np.argsort(-counts, axis=1, kind="stable")[:, :2]
    c1, c2 = counts[np.arange(len(x)), top[:, 0]], counts[np.arange(len(x)), top[:, 1]]
    two = np.array([binomtest(int(a), int(a + b), 0.5).pvalue for a, b in zip(c1, c2)])
    one = np.array([binomtest(int(a), int(a + b), 0.5, alternative="greater").pvalue for a, b in zip(c1, c2)])
    i = int(np.argmin(np.where(two < 0.5, np.abs(two - 0.1), np.inf)))  # a clear but not overwhelming lead
    assert c1[i] > c2[i] and one[i] < two[i] < 1
    for alpha in (0.5 * (one[i] + two[i]), two[i] * (1 + 1e-9), 0.05):
        got = C.predict(Coin(), x, SIGMA, n=n, alpha=alpha, batch_size=n, seed=seed, keys=keys, device="cpu")
        assert got.tolist() == np.where(two <= alpha, top[:, 0], C.ABSTAIN).tolist(), alpha
    got = C.predict(Coin(), x, SIGMA, n=n, alpha=0.5 * (one[i] + two[i]), batch_size=n, seed=seed, keys=keys, device="cpu")
    assert got[i] == C.ABSTAIN  # a one-sided test would have returned the top class here

# ---------------------------------------------------------------------------- determinism and resume
def test_deterministic_under_seed_and_independent_of_the_other_samples():
    model, ds, _ = linear_problem(n=40)
    a = C.certify(model, ds, SIGMA, n0=20, n=300, batch_size=128, seed=3, device="cpu")
    import robfair

    b = robfair.certify(model, ds, SIGMA, n0=20, n=300, batch_size=128, seed=3, device="cpu")  # the module is callable
    assert isinstance(b, robfair.CertifyReport)
    assert np.array_equal(a.n_top, b.n_top) and np.array_equal(a.radius, b.radius)
    c = C.certify(model, ds, SIGMA, n0=20, n=300, batch_size=128, seed=4, device="cpu")
    assert not np.array_equal(a.n_top, c.n_top)
    # a sample's noise depends on (seed, index, pass) only: certifying a subset gives its rows exactly
    sub = C.certify(model, ds, SIGMA, n0=20, n=300, batch_size=300, seed=3, device="cpu", indices=[5, 17, 30])
    assert np.array_equal(sub.n_top, a.n_top[[5, 17, 30]])


def test_interrupted_run_resumes_to_the_same_numbers(tmp_path):
    model, ds, _ = linear_problem(n=40)
    kw = dict(n0=20, n=250, batch_size=100, seed=1, device="cpu")
    full = C.certify(model, ds, SIGMA, **kw)
    ck = tmp_path / "ck.npz"

    def stop_after_first(stage, done, total):
        if done >= 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        C.certify(model, ds, SIGMA, checkpoint=ck, progress=stop_after_first, **kw)
    assert ck.exists()
    with np.load(ck) as z:
        assert 0 < z["done"].sum() < 40
    seen = []
    resumed = C.certify(model, ds, SIGMA, checkpoint=ck, progress=lambda s, d, t: seen.append(d), **kw)
    assert seen[0] >= 10 and resumed.meta["resumed_samples"] >= 10
    for f in ("n_top", "p_lower", "pred", "radius", "selected", "base_pred"):
        assert np.array_equal(getattr(full, f), getattr(resumed, f)), f
    # a checkpoint of other settings is refused, not silently mixed in
    with pytest.raises(RobfairError, match="another model, data or settings"):
        C.certify(model, ds, 0.5, checkpoint=ck, **kw)


# ---------------------------------------------------------------------------- reports
def small_report():
    model, ds, _ = linear_problem(n=60)
    ds.g = (torch.arange(len(ds)) % 3)
    ds.groups = ["g0", "g1", "g2"]
    return model, ds, C.certify(model, ds, SIGMA, n0=20, n=500, device="cpu", radii=[0, 0.1, 0.2])


def test_group_report_bridge_and_tables_agree():
    _, ds, rep = small_report()
    t = rep.table("class")
    for r in rep.radii:
        gr = rep.report_at(r, by="class")
        bc = gr.by_group.loc[list(rep.class_names)]
        assert np.allclose(bc["rob_acc"].to_numpy(), t.loc[list(rep.class_names), f"cert@{r:g}"].to_numpy())
        assert np.allclose(bc["rob_acc_lo"].to_numpy(), t.loc[list(rep.class_names), f"cert@{r:g}_lo"].to_numpy())
        assert np.allclose(bc["clean_acc"].to_numpy(), t.loc[list(rep.class_names), "smoothed_acc"].to_numpy())
        assert gr.overall["rob_acc"] == pytest.approx(rep.certified(r).mean())
    tg = rep.table("group")
    assert list(tg.index) == ["g0", "g1", "g2", "all"] and tg["n"].sum() == 2 * len(rep)
    # certified accuracy is non-increasing in the radius, per class, in the curves too
    cur = rep.curves("class")
    assert (np.diff(cur.to_numpy(), axis=0) <= 1e-12).all()
    gaps = rep.gaps(by="group", n_boot=200)
    assert (gaps["worst_lo"] <= gaps["worst"] + 1e-12).all() and (gaps["gap_hi"] >= gaps["gap"] - 1e-12).all()
    # median radius of the correct class: the 50% crossing of the class curve
    for name in rep.class_names:
        m = rep.y == rep.class_names.index(name)
        assert t.loc[name, "median_radius"] == pytest.approx(np.median(np.where(rep.correct[m], rep.radius[m], 0)))


def test_outcomes_round_trip_and_json(tmp_path):
    _, _, rep = small_report()
    p = rep.write_outcomes(tmp_path / "o.csv")
    back = C.CertifyReport.read_outcomes(p)
    for f in ("index", "y", "g", "n_top", "p_lower", "pred", "radius"):
        assert np.array_equal(getattr(back, f), getattr(rep, f)), f
    assert back.group_names == rep.group_names and back.radii == rep.radii
    d = json.loads(json.dumps(rep.to_json(bootstrap=50)))
    assert d["schema"] == "robfair.certify/1" and set(d["tables"]) == {"class", "group"}
    from robfair.metrics import GroupReport

    gr = GroupReport.from_json(d["reports"]["0.1"])
    assert gr == rep.report_at(0.1, by="group")
    with pytest.raises(RobfairError):
        C.CertifyReport.read_outcomes(tmp_path / "missing.csv")


def test_html_page_has_the_curves(tmp_path):
    from robfair.report.certify import render_certify_html

    _, _, rep = small_report()
    page = render_certify_html({"lin<script>": rep.to_json(bootstrap=20)}, title="t")
    assert "certified accuracy vs radius per class" in page and "data:image/png;base64," in page
    assert "<script>" not in page  # labels are escaped


# ---------------------------------------------------------------------------- the attack check
def test_attack_check_is_quiet_on_true_certificates_and_fires_on_forged_ones():
    model, ds, dist = linear_problem(n=40)
    rep = C.certify(model, ds, SIGMA, n0=50, n=5000, device="cpu")
    r = float(np.median(dist))
    res = C.attack_check(model, ds, rep, r, per_class=20, noise_samples=16, n_predict=2000, device="cpu")
    assert res["contradictions"] == 0 and not res["warnings"]
    assert res["certified"] <= res["empirical_robust"]
    # forge: claim every correct sample is certified far beyond its distance to the boundary
    forged = C.CertifyReport(**{**{f: getattr(rep, f) for f in ("index", "y", "g", "base_pred", "selected", "n_top",
                                                             "p_lower", "pred", "class_names")},
                                "radius": np.where(rep.correct, 10.0, 0.0), "sigma": SIGMA, "n": rep.n})
    res2 = C.attack_check(model, ds, forged, r, per_class=20, noise_samples=16, n_predict=2000, device="cpu")
    assert res2["contradictions"] >= 3 and any("suspect" in w for w in forged.warnings)
    assert res2["empirical_robust"] < res2["certified"]
    # the printed line states the relation that holds, in both directions
    for got in (res, res2):
        assert got["n_certified"] == round(got["certified"] * got["n"]) and got["n_robust"] == round(got["empirical_robust"] * got["n"])
    line = C.check_line(res)
    assert f"certified {100 * res['certified']:.1f}% ({res['n_certified']}) < empirical robust" in line
    assert "expected order" in line and " > " not in line
    line2 = C.check_line(res2)
    assert (f"certified {100 * res2['certified']:.1f}% ({res2['n_certified']}) > empirical robust "
            f"{100 * res2['empirical_robust']:.1f}% ({res2['n_robust']})") in line2
    assert "<" not in line2 and f"{res2['contradictions']} contradicted certificates" in line2
    # the certified samples called not robust are the contradicted and the abstained ones, and they make the excess
    assert res2["contradictions"] + res2["certified_abstained"] >= res2["n_certified"] - res2["n_robust"]



def test_check_line_says_equal_when_certificates_meet_the_attack():
    """A constant model: certified wherever it is right, and no attack moves it, so certified and
    empirical robust accuracy are the same samples."""
    ds = Dataset(x=torch.rand(6, 1, 2, 2), y=torch.tensor([0, 0, 0, 0, 1, 1]), classes=["a", "b"])
    rep = C.certify(Constant(), ds, SIGMA, n0=10, n=200, device="cpu")
    res = C.attack_check(Constant(), ds, rep, 0.1, per_class=3, noise_samples=4, n_predict=200, device="cpu")
    assert res["n_certified"] == res["n_robust"] == 3 and res["n"] == 5
    line = C.check_line(res)
    assert "certified 60.0% (3) = empirical robust 60.0% (3), the lower and the upper bound meet" in line
    assert line.endswith("0 contradicted certificates, 0 certified samples where PREDICT abstained")


# ---------------------------------------------------------------------------- gaussian-aug
def test_gaussian_aug_trains_on_seeded_noise():
    from robfair.training import TrainConfig, TrainContext, build_method

    from _shared import Recorder

    m = build_method("gaussian-aug", {"sigma": 0.5})
    assert m.default_attack is None
    model = Recorder(3).train()
    x, y = torch.rand(8, 1, 3, 4), torch.arange(8) % 3

    def loss(seed):
        m.ctx = TrainContext(cfg=TrainConfig(), device=torch.device("cpu"), num_classes=3, class_names=list("abc"),
                             eps=0.0, generator=torch.Generator().manual_seed(seed))
        return m.loss(model, x, y, y, m.ctx)

    l1, l2, l3 = loss(1), loss(1), loss(2)
    assert torch.equal(l1, l2) and not torch.equal(l1, l3)
    seen = model.seen[0]
    noise = seen - x
    assert abs(noise.std().item() - 0.5) < 0.15 and (seen.min() < 0 or seen.max() > 1)  # unclipped
    with pytest.raises(RobfairError):
        build_method("gaussian-aug", {"sigma": 0})


def test_gaussian_aug_config_loads():
    from pathlib import Path

    from robfair.training import load_config

    cfg = load_config(Path(__file__).parents[2] / "configs" / "gaussian-aug.yaml")
    assert cfg.method == "gaussian-aug" and cfg.method_options["sigma"] == 0.25


# ---------------------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from robfair.models import create, save_checkpoint

    torch.manual_seed(0)
    net = create("mlp", 10, (1, 8, 8), hidden=[16])
    p = tmp_path_factory.mktemp("ck") / "m.pt"
    save_checkpoint(p, net, classes=[str(i) for i in range(10)])
    return p


def test_cli_certify_writes_json_outcomes_html(ckpt, tmp_path, capsys):
    out = tmp_path / "c" / "certify.json"
    code, stdout, err = run_cli(["certify", "--model", ckpt, "--data", "digits", "--per-class", "2", "--n0", "10",
                                 "--n", "100", "--sigma", "0.25", "--out", out, "--html", tmp_path / "c.html",
                                 "--bootstrap", "20", "--check-radius", "0.1", "--check-per-class", "1"], capsys)
    assert code == 0, err
    d = json.loads(out.read_text())
    (chk,) = d["meta"]["attack_check"]
    assert C.check_line(chk) in " ".join(stdout.split())  # the check's line, with the relation that holds
    assert d["schema"] == "robfair.certify/1" and d["meta"]["n_samples"] == 20
    assert (tmp_path / "c" / "certify_outcomes.csv").is_file() and (tmp_path / "c.html").is_file()
    assert not list((tmp_path / "c").glob(".*partial*"))  # the resume checkpoint is gone after success
    assert "certified accuracy" in stdout


@pytest.mark.parametrize("args,msg", [(["--sigma", "0"], "sigma"), (["--alpha", "2"], "alpha"),
                                      (["--check-radius", "0.1", "--check-attack", "pgd20"], "L2 attack"),
                                      (["--html", "x.txt"], ".html")])
def test_cli_bad_input_is_one_line_and_writes_nothing(ckpt, tmp_path, capsys, args, msg):
    out = tmp_path / "certify.json"
    code, _, err = run_cli(["certify", "--model", ckpt, "--n", "10", "--out", out, *args], capsys)
    assert code == 2 and msg in err and len(err.strip().splitlines()) <= 3
    assert not out.exists()


def test_report_of_a_run_folder_shows_its_certificates(tmp_path, capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "report"))
    from reportkit import audit_report, write_run

    from robfair.utils import write_json

    _, _, rep = small_report()
    run = write_run(tmp_path / "runs" / "lin", audit_report([(10, 9, 5), (10, 8, 2)], ["neg", "pos"]))
    write_json(run / "certify.json", rep.to_json(bootstrap=20))
    code, _, err = run_cli(["report", tmp_path / "runs", "--out", tmp_path / "r.html"], capsys)
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "certified accuracy vs radius per class" in page and "certified (randomized smoothing, sigma 0.25" in page
    (run / "certify.json").write_text("{}")
    code, _, err = run_cli(["report", tmp_path / "runs", "--out", tmp_path / "r2.html"], capsys)
    assert code == 2 and "not a robfair certify result" in err


def test_model_data_mismatch_is_one_line():
    model, ds, _ = linear_problem(n=5)
    ds3 = Dataset(x=ds.x, y=ds.y, classes=["a", "b", "c"])
    with pytest.raises(RobfairError, match="2 logits but the dataset has 3 classes"):
        C.certify(model, ds3, SIGMA, n=10, device="cpu")
    with pytest.raises(RobfairError, match="sigma"):
        C.certify(model, ds, -1.0, n=10, device="cpu")


def test_cli_certify_takes_any_model_source(tmp_path, capsys):
    # a TorchScript file (no robfair checkpoint): the same sources as `robfair audit`
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).eval()
    p = tmp_path / "m.ts.pt"
    torch.jit.save(torch.jit.trace(net, torch.rand(2, 1, 8, 8)), str(p))
    out = tmp_path / "c.json"
    code, _, err = run_cli(["certify", "--model", p, "--data", "digits", "--per-class", "1", "--n0", "10", "--n", "50",
                            "--out", out, "--bootstrap", "0"], capsys)
    assert code == 0, err
    assert json.loads(out.read_text())["meta"]["n_samples"] == 10
    code, _, err = run_cli(["certify", "--model", tmp_path / "nope.pt", "--n", "10"], capsys)
    assert code == 2 and "does not exist" in err
