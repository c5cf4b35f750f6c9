"""FRL (frl-reweight / frl-remargin / frl-rwrm / baseline-reweight): the dual step against hand-computed
values, the wiring into the TRADES loss and attack (spec section 7 bugs), state, configs, end to end."""

import glob
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from robfair.attacks import get_attack
from robfair.errors import ConfigError
from robfair.metrics import GroupReport
from robfair.training import TrainConfig, TrainContext, build_method, load_config, train
from robfair.training.methods import frl as frl_module
from robfair.training.methods.frl import class_margins, frl_weights, project_multipliers
from _shared import Recorder, Stop, StopAfterEpoch

EPS = 0.1
FRL_NAMES = ("frl-reweight", "frl-remargin", "frl-rwrm", "baseline-reweight")


# ================================================================================ helpers



def batch(k, per_class=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    n = k * per_class
    return torch.rand(n, 1, 3, 4, generator=g) * 0.4 + 0.3, torch.arange(n) % k  # pixels in [0.3, 0.7]


def make(name, k, attack=None, **opts):
    """A method with a context, as the trainer sets it up (on_train_start included)."""
    m = build_method(name, opts)
    cfg = TrainConfig(eps=EPS, method=name, method_options=opts, val_attack="pgd20", init="init.pt")
    ctx = TrainContext(cfg=cfg, device=torch.device("cpu"), num_classes=k, class_names=[f"c{i}" for i in range(k)],
                       eps=EPS, attack=attack or get_attack("trades-kl"), generator=torch.Generator().manual_seed(3))
    m.ctx = ctx
    m.on_train_start(ctx)
    return m, ctx


def report(rows):
    """GroupReport from per-class (n, clean mistakes, boundary mistakes): clean mistakes stay wrong under
    attack, boundary mistakes are right clean and wrong under attack, the rest right in both."""
    k = len(rows)
    y, clean, adv = [], [], []
    for c, (n, std, bndy) in enumerate(rows):
        wrong = (c + 1) % k
        for i in range(n):
            y.append(c)
            clean.append(wrong if i < std else c)
            adv.append(wrong if i < std + bndy else c)
    return GroupReport.from_outcomes(y=np.array(y), clean_pred=np.array(clean), adv_pred=np.array(adv),
                                     class_names=[f"c{i}" for i in range(k)], attack="pgd20", eps=EPS)


def set_state(m, k, lam_nat=None, lam_bndy=None, psi=None, lam_rob=None, updates=1):
    z = [0.0] * k
    m.load_state_dict({"lam_nat": lam_nat or z, "lam_bndy": lam_bndy or z, "lam_rob": lam_rob or z, "psi": psi or z,
                       "updates": updates, "alpha1_now": 0.05, "gamma": {}})


# rows of the hand-computed case: class 0 has 6/10 clean mistakes, class 1 5/10 boundary mistakes
ROWS3 = [(10, 6, 0), (10, 0, 5), (10, 0, 0)]


# ================================================================================ the dual step
def test_projection_and_weights_closed_form():
    lam = project_multipliers(torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64), 0.5)
    assert lam.tolist() == pytest.approx([0.1875, 0.0, 0.3125])  # clip, then 0.8 -> 0.5
    assert project_multipliers(torch.tensor([0.1, -1.0, 0.2]), 0.5).tolist() == pytest.approx([0.1, 0.0, 0.2])
    w = frl_weights(torch.tensor([0.3, 0.0, 0.1], dtype=torch.float64))
    assert w.tolist() == pytest.approx([1 / 3 + 0.3 - 0.4 / 3, 1 / 3 - 0.4 / 3, 1 / 3 + 0.1 - 0.4 / 3])
    assert class_margins(torch.tensor([-1000.0, 0.0, 0.1, 1000.0]), 0.1, 2.0, 0.98, 3.0).tolist() == pytest.approx(
        [0.098, 0.1, 0.1 * math.exp(0.2), 0.3])


@pytest.mark.parametrize("k", [3, 7])
def test_weights_stay_positive_and_sum_to_one(k):
    gen = torch.Generator().manual_seed(k)
    for name in ("frl-rwrm", "baseline-reweight"):
        m, ctx = make(name, k, alpha1=5.0)  # a large step, so the lim projection is active
        for step in range(6):
            n = (torch.randint(0, 10, (k,), generator=gen)).tolist()
            rows = [(10, a, min(10 - a, b)) for a, b in zip(n, torch.randint(0, 10, (k,), generator=gen).tolist())]
            ctx.epoch = step
            m.on_epoch_end(ctx, report(rows))
            for w in (m.class_weights(), m.boundary_weights()):
                assert w.shape == (k,) and bool((w > 0).all()) and float(w.sum()) == pytest.approx(1.0)
                assert float(w.min()) >= (1 - 0.5) / k - 1e-7  # (1 - lim) / K
            lam = m.lam_rob if m.baseline else m.lam_nat
            assert bool((lam >= 0).all()) and float(lam.sum()) <= 0.5 + 1e-12


def test_official_head_defaults_and_step_by_hand():
    """mode official = hannxu123/fair_robust HEAD a80547d: ratio form, beta 1.5, bounds 0.07, rate2 0.2."""
    m, ctx = make("frl-rwrm", 3)
    o = m.options
    assert (o.normalization, o.beta, o.tau_nat, o.tau_bndy, o.alpha2, o.violation, o.bndy_rate,
            o.alpha1_halve_every) == ("ratio", 1.5, 0.07, 0.07, 0.2, "signed", 2.0, 40)
    m.on_epoch_end(ctx, report(ROWS3))
    # e_i = (.6, 0, 0), e = .2; b_i = (0, .5, 0), b = 1/6; tau = .07
    assert m.gamma_nat.tolist() == pytest.approx([0.33, -0.27, -0.27])
    gb = [-1 / 6 - 0.07, 0.5 - 1 / 6 - 0.07, -1 / 6 - 0.07]
    assert m.gamma_bndy.tolist() == pytest.approx(gb)
    assert m.lam_nat.tolist() == pytest.approx([0.05 * 0.33, 0, 0])
    assert m.lam_bndy.tolist() == pytest.approx([0, 2 * 0.05 * gb[1], 0])
    assert m.psi.tolist() == pytest.approx([0.2 * g for g in gb])
    # the HEAD loss: sum w0 CE / sum w0 + 1.5 * sum w1 KL / sum w1
    k = 3
    x, y = batch(k)
    y = torch.tensor([0] * 6 + [1] * 4 + [2] * 2)
    model = Recorder(k).train()
    loss = m.loss(model, x, y, y, ctx)
    ce, kl = _terms(model, y)
    a, b = m.class_weights()[y], m.boundary_weights()[y]
    assert torch.allclose(loss, (a * ce).sum() / a.sum() + 1.5 * (b * kl).sum() / b.sum(), atol=1e-6)


def test_official_2021_step_matches_hand_computation():
    m, ctx = make("frl-rwrm", 3, mode="official-2021")
    assert (m.options.normalization, m.options.beta) == ("joint", 1.0)
    assert m.class_weights().tolist() == pytest.approx([1 / 3] * 3)  # fine-tuning: uniform before any step
    assert m.class_eps().tolist() == pytest.approx([EPS] * 3)
    ctx.epoch = 0
    m.on_epoch_end(ctx, report(ROWS3))
    # e_i = (.6, 0, 0), e = .2; b_i = (0, .5, 0), b = 1/6; tau = .1
    assert m.gamma_nat.tolist() == pytest.approx([0.3, -0.3, -0.3])
    gb = [-1 / 6 - 0.1, 0.5 - 1 / 6 - 0.1, -1 / 6 - 0.1]
    assert m.gamma_bndy.tolist() == pytest.approx(gb)
    assert m.lam_nat.tolist() == pytest.approx([0.015, 0, 0])
    lb = 2 * 0.05 * gb[1]  # official: 2 * alpha1 on the boundary multipliers
    assert m.lam_bndy.tolist() == pytest.approx([0, lb, 0])
    assert m.psi.tolist() == pytest.approx([0.1 * g for g in gb])
    assert m.class_weights().tolist() == pytest.approx([1 / 3 + 0.015 - 0.005, 1 / 3 - 0.005, 1 / 3 - 0.005])
    assert m.boundary_weights().tolist() == pytest.approx([1 / 3 - lb / 3, 1 / 3 + lb - lb / 3, 1 / 3 - lb / 3])
    # the violating classes get the larger weight / eps next epoch; eps_i = eps * clamp(exp(2 psi), .98, 3)
    wn, wb, ce = m.class_weights(), m.boundary_weights(), m.class_eps()
    assert wn[0] > 1 / 3 > wn[1] and wb[1] > 1 / 3 > wb[0] and ce[1] > EPS > ce[0]
    assert m.class_eps().tolist() == pytest.approx([0.098, EPS * math.exp(0.2 * gb[1]), 0.098])
    # signed violations: once class 0 is fair again its multiplier shrinks (0.015 - 0.05 * 0.1 = 0.01)
    m.on_epoch_end(ctx, report([(10, 3, 0), (10, 0, 0), (10, 0, 0)]))  # e_i - e - tau = .3 - .1 - .1 = .1 > 0
    assert m.lam_nat[0] == pytest.approx(0.015 + 0.05 * 0.1)
    m.on_epoch_end(ctx, report([(10, 0, 0), (10, 0, 0), (10, 0, 0)]))
    assert m.lam_nat.tolist() == pytest.approx([0.02 - 0.05 * 0.1, 0, 0])


def test_paper_mode_choices_differ_as_documented():
    m, ctx = make("frl-rwrm", 3, mode="paper")
    assert (m.options.violation, m.options.bndy_rate, m.options.alpha1_halve_every, m.options.normalization) == \
        ("positive", 1.0, 0, "ratio")
    m.on_epoch_end(ctx, report(ROWS3))
    gb1 = 0.5 - 1 / 6 - 0.1
    assert m.lam_nat.tolist() == pytest.approx([0.015, 0, 0])
    assert m.lam_bndy.tolist() == pytest.approx([0, 0.05 * gb1, 0])  # alpha1, not 2 * alpha1
    assert m.psi.tolist() == pytest.approx([0, 0.1 * gb1, 0])  # positive part only: no class shrinks
    assert m.class_eps().tolist() == pytest.approx([EPS, EPS * math.exp(0.2 * gb1), EPS])
    m.on_epoch_end(ctx, report([(10, 0, 0)] * 3))  # no violation: positive part leaves lam as it was
    assert m.lam_nat.tolist() == pytest.approx([0.015, 0, 0])
    # an explicit option beats the mode's default
    m2, _ = make("frl-rwrm", 3, mode="paper", bndy_rate=2.0, normalization="joint")
    assert (m2.options.bndy_rate, m2.options.normalization, m2.options.violation) == (2.0, "joint", "positive")


def test_alpha1_is_halved_every_40_frl_epochs_in_official_mode():
    m, ctx = make("frl-reweight", 3)
    for epoch, rate in [(0, 0.05), (37, 0.05), (38, 0.025), (78, 0.0125)]:  # step at the end of epoch e prepares e + 2
        ctx.epoch = epoch
        m.on_epoch_end(ctx, report(ROWS3))
        assert m.alpha1_now == pytest.approx(rate)
    p, pctx = make("frl-reweight", 3, mode="paper")
    pctx.epoch = 78
    p.on_epoch_end(pctx, report(ROWS3))
    assert p.alpha1_now == 0.05


def test_baseline_reweight_uses_one_multiplier_on_robust_error():
    m, ctx = make("baseline-reweight", 3)
    m.on_epoch_end(ctx, report(ROWS3))
    r = 11 / 30  # rob_err_i = (.6, .5, 0)
    g = [0.6 - r - 0.1, 0.5 - r - 0.1, 0.0 - r - 0.1]
    assert m.gamma_rob.tolist() == pytest.approx(g)
    lam = [0.05 * g[0], 0.05 * g[1], 0.0]
    w = [1 / 3 + v - sum(lam) / 3 for v in lam]
    assert m.class_weights().tolist() == pytest.approx(w)
    assert torch.equal(m.class_weights(), m.boundary_weights())
    assert m.class_eps() is None


def test_variants_switch_the_right_parts_on():
    parts = {}
    for name in FRL_NAMES:
        m, ctx = make(name, 3)
        m.on_epoch_end(ctx, report(ROWS3))
        parts[name] = (m.class_weights() is not None, m.boundary_weights() is not None, m.class_eps() is not None)
    assert parts == {"frl-reweight": (True, True, False), "frl-remargin": (True, False, True),
                     "frl-rwrm": (True, True, True), "baseline-reweight": (True, True, False)}
    assert build_method("frl").name == "frl-rwrm"


def test_pretraining_is_plain_until_the_first_dual_step():
    m, ctx = make("frl-rwrm", 3, pretrain_epochs=2, mode="official-2021")
    assert m.class_weights() is None and m.boundary_weights() is None and m.class_eps() is None
    ctx.epoch = 0
    m.on_epoch_end(ctx, report(ROWS3))  # still pre-training: no step
    assert m.updates == 0 and m.epoch_state()["phase"] == "pretrain"
    ctx.epoch = 1
    m.on_epoch_end(ctx, report(ROWS3))  # end of the last pre-training epoch: first step, FRL epoch 1 next
    assert m.updates == 1 and m.active and m.lam_nat.tolist() == pytest.approx([0.015, 0, 0])
    assert m.epoch_state()["phase"] == "frl"


def test_pgd_at_pretraining_trains_on_pgd_examples():
    k = 3
    m, ctx = make("frl-reweight", k, pretrain_epochs=1, pretrain_method="pgd-at", pretrain_attack="pgd3")
    x, y = batch(k)
    model = Recorder(k).train()
    loss = m.loss(model, x, y, y, ctx)
    assert len(model.seen) == 1  # PGD-AT: one forward, on the adversarial batch (TRADES makes two)
    x_adv = model.seen[0]
    d = (x_adv - x).abs().flatten(1).amax(1)
    assert bool((d > 0).all()) and bool((d <= EPS + 1e-6).all())
    assert torch.allclose(loss, F.cross_entropy(model.net(x_adv), y), atol=1e-6)
    assert ctx.attack.name == "trades-kl"  # the training attack is put back


# ================================================================================ wiring (spec section 7)
@pytest.mark.parametrize("k", [3, 7])
def test_class_eps_really_reaches_the_attack(k):
    # class 0: margin 0 (clean inputs); class 1: eps; class 2: 3 x eps; the rest eps
    m, ctx = make("frl-remargin", k, margin_min=0.0)
    set_state(m, k, psi=[-1000.0, 0.0, 1000.0] + [0.0] * (k - 3))
    assert m.class_eps().tolist()[:3] == pytest.approx([0.0, EPS, 3 * EPS])
    x, y = batch(k)
    model = Recorder(k).train()
    m.loss(model, x, y, y, ctx)
    x_adv = model.seen[-1]
    d = (x_adv - x).abs().flatten(1).amax(1)
    assert torch.equal(x_adv[y == 0], x[y == 0])  # eps 0: exactly the clean input (the start noise too)
    assert bool((d[y == 1] <= EPS + 1e-6).all())
    # the 3x class goes beyond the base eps and reaches its own 3x edge: 10 steps of eps_i/4 do,
    # the reference's fixed eps/4 step could not (10 * eps/4 = 2.5 eps)
    assert bool((d[y == 2] > 2.5 * EPS + 1e-3).all())
    assert d[y == 2].tolist() == pytest.approx([3 * EPS] * int((y == 2).sum()), abs=1e-6)


def test_trades_step_is_per_sample_not_the_batch_max():
    k = 3
    m, ctx = make("frl-remargin", k, attack=get_attack("trades-kl", steps=1))
    set_state(m, k, psi=[0.0, 0.0, 1000.0])  # eps, eps, 3 eps
    x, y = batch(k)
    model = Recorder(k).train()
    m.loss(model, x, y, y, ctx)
    d = (model.seen[-1] - x).abs().flatten(1).amax(1)
    # one step of eps_i / 4 from x + 0.001 N(0, I): ~eps/4 for the 1x classes, ~3 eps/4 for the 3x class.
    # A batch-wide max(eps_i)/4 step would move the 1x classes by 3 eps/4 (clipped to eps).
    assert bool((d[y < 2] < EPS / 4 + 0.006).all())
    assert bool((d[y == 2] > 3 * EPS / 4 - 0.006).all())


def _terms(model, y):
    x, x_adv = model.seen[-2], model.seen[-1]
    nat, adv = model.net(x), model.net(x_adv)
    ce = F.cross_entropy(nat, y, reduction="none")
    kl = F.kl_div(F.log_softmax(adv, 1), F.softmax(nat, 1), reduction="none").sum(1)
    return ce, kl


@pytest.mark.parametrize("norm", ["ratio", "mean-k", "joint"])
def test_class_weights_scale_the_loss(norm):
    k, beta = 3, 1.5
    m, ctx = make("frl-rwrm", k, normalization=norm, beta=beta)
    set_state(m, k, lam_nat=[0.3, 0.0, 0.1], lam_bndy=[0.0, 0.2, 0.0])
    wn = torch.tensor([1 / 3 + 0.3 - 0.4 / 3, 1 / 3 - 0.4 / 3, 1 / 3 + 0.1 - 0.4 / 3])
    wb = torch.tensor([1 / 3 - 0.2 / 3, 1 / 3 + 0.2 - 0.2 / 3, 1 / 3 - 0.2 / 3])
    x, y = batch(k, per_class=5)
    y = torch.tensor([0] * 8 + [1] * 4 + [2] * 3)  # unequal counts: the normalizations differ
    model = Recorder(k).train()
    loss = m.loss(model, x, y, y, ctx)
    ce, kl = _terms(model, y)
    a, b = wn[y], wb[y]
    expected = {
        "ratio": (a * ce).sum() / a.sum() + beta * (b * kl).sum() / b.sum(),
        "mean-k": (k * a * ce).mean() + beta * (k * b * kl).mean(),
        "joint": (a * ce + beta * b * kl).sum() / (a + b).sum(),  # the official code's merge
    }[norm]
    assert torch.allclose(loss, expected, atol=1e-6)
    assert m.options.beta == beta  # the temporary beta is restored
    uniform = {"ratio": ce.mean() + beta * kl.mean(), "mean-k": ce.mean() + beta * kl.mean(),
               "joint": (ce.mean() + beta * kl.mean()) / 2}[norm]
    assert not torch.allclose(expected, uniform, atol=1e-4)  # the weights matter
    set_state(m, k)  # lam = 0: uniform weights give TRADES (joint: half of it, as in the official code)
    model.seen.clear()
    loss = m.loss(model, x, y, y, ctx)
    ce, kl = _terms(model, y)
    uniform = {"ratio": ce.mean() + beta * kl.mean(), "mean-k": ce.mean() + beta * kl.mean(),
               "joint": (ce.mean() + beta * kl.mean()) / 2}[norm]
    assert torch.allclose(loss, uniform, atol=1e-6)


def test_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    k = 7
    m, ctx = make("frl-rwrm", k)
    for e in range(3):
        ctx.epoch = e
        m.on_epoch_end(ctx, report([(10, (3 * i + e) % 7, i % 3) for i in range(k)]))
    torch.save(m.state_dict(), tmp_path / "s.pt")
    fresh, fctx = make("frl-rwrm", k)
    fresh.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    for hook in ("class_weights", "boundary_weights", "class_eps"):
        assert torch.equal(getattr(fresh, hook)(), getattr(m, hook)())
    assert fresh.epoch_state() == m.epoch_state()
    # and both continue identically
    rep = report([(10, i % 4, 2) for i in range(k)])
    m.on_epoch_end(ctx, rep), fresh.on_epoch_end(fctx, rep)
    assert torch.equal(fresh.lam_bndy, m.lam_bndy) and torch.equal(fresh.psi, m.psi)
    other, _ = make("frl-rwrm", 3)
    with pytest.raises(ConfigError, match="7 multiplier values but the data has 3 classes"):
        other.load_state_dict(m.state_dict())


def test_epoch_state_logs_multipliers_weights_and_eps():
    m, ctx = make("frl-rwrm", 3, mode="official-2021")
    m.on_epoch_end(ctx, report(ROWS3))
    s = m.epoch_state()
    assert s["phase"] == "frl" and s["dual_steps"] == 1 and s["alpha1"] == 0.05
    assert s["lambda_nat"] == pytest.approx([0.015, 0, 0]) and s["gamma_nat"] == pytest.approx([0.3, -0.3, -0.3])
    assert s["class_weights"] == pytest.approx(m.class_weights().tolist())
    assert s["boundary_weights"] == pytest.approx(m.boundary_weights().tolist())
    assert s["class_eps"] == pytest.approx(m.class_eps().tolist())
    assert set(s) >= {"lambda_bndy", "psi", "gamma_bndy"}
    json.dumps(s)


def test_compat_boundary_error_is_opt_in():
    # a class whose attack "repairs" clean mistakes: exact bndy_err stays 0, compat goes negative
    y = np.array([0] * 10 + [1] * 10)
    clean = np.array([1] * 4 + [0] * 6 + [1] * 10)
    adv = np.array([0] * 10 + [1] * 10)  # the 4 clean mistakes of class 0 become right under attack
    rep = GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=adv, class_names=["a", "b"], attack="pgd20",
                                    eps=EPS)
    exact, ctx = make("frl-reweight", 2, tau_bndy=0.1)
    exact.on_epoch_end(ctx, rep)
    compat, cctx = make("frl-reweight", 2, bndy_err="compat", tau_bndy=0.1)
    compat.on_epoch_end(cctx, rep)
    assert exact.gamma_bndy.tolist() == pytest.approx([-0.1, -0.1])
    assert compat.gamma_bndy.tolist() == pytest.approx([-0.4 + 0.2 - 0.1, 0 + 0.2 - 0.1])


def test_bad_options_and_setups_are_one_line_config_errors():
    with pytest.raises(ConfigError, match="option 'lim'"):
        build_method("frl-rwrm", {"lim": 1.0})
    with pytest.raises(ConfigError, match="margin_min .* above margin_max"):
        build_method("frl-rwrm", {"margin_min": 2.0, "margin_max": 1.5})
    with pytest.raises(ConfigError, match="no option 'tau'"):
        build_method("frl-reweight", {"tau": 0.1})
    with pytest.raises(ConfigError, match="attack_options.step"):
        make("frl-remargin", 3, attack=get_attack("trades-kl", step=0.01))
    m, ctx = make("frl-rwrm", 3)
    with pytest.raises(ConfigError, match="validation report"):
        m.on_epoch_end(ctx, None)
    with pytest.raises(ConfigError, match="4 classes but the model 3"):
        m.on_epoch_end(ctx, report([(5, 1, 1)] * 4))
    cfg = TrainConfig(eps=EPS, method="frl-rwrm", val_attack="none", select="clean")
    ctx.cfg = cfg
    with pytest.raises(ConfigError, match="val_attack"):
        m.on_train_start(ctx)


def test_no_cuda_or_ten_classes_in_the_source():
    src = Path(frl_module.__file__).read_text()
    assert "cuda" not in src and "range(10)" not in src and "torch.ones(10)" not in src


# ================================================================================ configs
def test_configs_load_and_fine_tune_with_the_frl_defaults():
    root = Path(__file__).resolve().parents[3] / "configs"
    ours = ["trades", "pgd-at", *FRL_NAMES]
    for name in ours:
        cfg = load_config(root / f"{name}.yaml")
        assert cfg.method == name
        if name in FRL_NAMES:
            assert cfg.lr == 1e-3 and 1 <= cfg.method_options["beta"] <= 1.5
            assert cfg.val_attack == "pgd20" and cfg.val_per_class > 0 and cfg.attack == "trades-kl"
    for path in glob.glob(str(root / "*.yaml")):  # every config in the folder loads
        load_config(path)


# ================================================================================ end to end
TINY = dict(data="digits", model="mlp", model_kwargs={"hidden": [32]}, eps=EPS, batch_size=256,
            attack_options={"steps": 2, "rel_step": 0.5}, val_per_class=10, val_attack="pgd5", seed=1, device="cpu")


@pytest.fixture(scope="module")
def trades_init(tmp_path_factory, digits):
    out = tmp_path_factory.mktemp("frl") / "trades"
    train(TrainConfig(**TINY, method="trades", epochs=2, lr=0.1, out=str(out)), train_data=digits)
    return out / "checkpoints" / "best.pt"


def frl_cfg(init, out, initial_step=False, **kw):
    kw = {"epochs": 2, **kw}
    return TrainConfig(**TINY, method="frl-rwrm", method_options={"mode": "official-2021", "beta": 1.0, "alpha1": 0.2,
                                                               "initial_step": initial_step},
                       init=str(init), lr=0.01, out=str(out), **kw)


def test_frl_initial_step_uses_the_initial_models_errors(trades_init, tmp_path, digits):
    """Official order when fine-tuning: validate the initial model, take a dual step, then train epoch 1
    (without it, epoch 1 trains with uniform weights)."""
    on = train(frl_cfg(trades_init, tmp_path / "on", initial_step=True, epochs=1), train_data=digits)
    off = train(frl_cfg(trades_init, tmp_path / "off", initial_step=False, epochs=1), train_data=digits)
    rec_on = json.loads((tmp_path / "on" / "metrics.jsonl").read_text().splitlines()[0])
    rec_off = json.loads((tmp_path / "off" / "metrics.jsonl").read_text().splitlines()[0])
    assert rec_on["method"]["dual_steps"] == 2 and rec_off["method"]["dual_steps"] == 1
    # epoch 1 was trained with different (non-uniform) weights and margins
    assert any(not torch.equal(a, b) for a, b in zip(on.model.state_dict().values(), off.model.state_dict().values()))
    # a method constructed by hand: the initial step moves the multipliers of violating classes
    m = train(frl_cfg(trades_init, tmp_path / "m", initial_step=True, epochs=1), train_data=digits)
    assert m.history[0]["method"]["lambda_nat"] == rec_on["method"]["lambda_nat"]


def test_frl_rwrm_fine_tunes_and_logs_its_state(trades_init, tmp_path, digits):
    out = tmp_path / "frl"
    result = train(frl_cfg(trades_init, out), train_data=digits)
    recs = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in recs] == [1, 2]
    lam = [0.0] * 10
    for r in recs:
        s, val = r["method"], r["val"]
        assert s["phase"] == "frl" and s["dual_steps"] == r["epoch"]
        assert len(s["class_weights"]) == len(s["boundary_weights"]) == len(s["class_eps"]) == 10
        assert sum(s["class_weights"]) == pytest.approx(1.0) and min(s["class_weights"]) > 0
        assert all(0.098 - 1e-6 <= e <= 0.3 + 1e-6 for e in s["class_eps"])
        # the logged violations are this epoch's validation errors, recomputed from the same record
        e_i = [val["per_group"][str(c)]["std_err"] for c in range(10)]
        gamma = [e - val["summary"]["std_err"] - 0.1 for e in e_i]
        assert s["gamma_nat"] == pytest.approx(gamma, abs=1e-9)
        step = torch.tensor(lam, dtype=torch.float64) + 0.2 * torch.tensor(gamma, dtype=torch.float64)
        lam = project_multipliers(step, 0.5).tolist()
        assert s["lambda_nat"] == pytest.approx(lam, abs=1e-9)
    assert result.best_epoch in (1, 2)


def test_frl_resume_is_bit_identical(trades_init, tmp_path, digits):
    ref = train(frl_cfg(trades_init, tmp_path / "ref"), train_data=digits)
    out = tmp_path / "run"
    with pytest.raises(Stop):
        train(frl_cfg(trades_init, out), train_data=digits, callbacks=[StopAfterEpoch(0)])
    res = train(frl_cfg(trades_init, out, resume=True), train_data=digits)
    for a, b in zip(ref.model.state_dict().values(), res.model.state_dict().values()):
        assert torch.equal(a, b)

    def lines(p):
        recs = [json.loads(s) for s in (p / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k != "time"} for r in recs]

    assert lines(out) == lines(tmp_path / "ref")
