"""CFA, WAT, DAFA and MART: update rules against hand computations, losses against formulas written
out independently, per-class radii reaching the attack, and short end-to-end runs on digits."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from robfair.attacks import get_attack
from robfair.data import Dataset
from robfair.metrics import GroupReport
from robfair.models import load_checkpoint
from robfair.training import TrainConfig, TrainContext, Trainer, build_method, load_config, train
from robfair.training.methods.dafa import dafa_weights
from robfair.training.methods.mart import mart_loss
from robfair.training.runner import build_model, split_train_val
from robfair.seeding import seed_everything
from _shared import Recorder, Stop, StopAfterEpoch

CONFIGS = Path(__file__).resolve().parents[3] / "configs"





class Shift:
    """Test double of the training attack: x + eps_i * a fixed sign pattern; remembers its eps."""

    def __init__(self):
        self.pattern = torch.randint(0, 2, (1, 1, 3, 4), generator=torch.Generator().manual_seed(7)) * 2.0 - 1
        self.eps = []

    def __call__(self, model, x, y, eps, *, generator=None):
        self.eps.append(eps)
        e = eps.view(-1, 1, 1, 1) if isinstance(eps, torch.Tensor) else eps
        return (x + e * self.pattern).clamp(0, 1)


def batch(k, n=18, seed=1):
    g = torch.Generator().manual_seed(seed)
    return 0.2 + 0.6 * torch.rand(n, 1, 3, 4, generator=g), torch.arange(n) % k


def ctx_for(method, k, attack, eps=0.1, epochs=10, epoch=0):
    ctx = TrainContext(cfg=TrainConfig(eps=eps), device=torch.device("cpu"), num_classes=k,
                       class_names=[f"c{i}" for i in range(k)], eps=eps, attack=attack,
                       generator=torch.Generator().manual_seed(3), epochs=epochs, epoch=epoch)
    method.ctx = ctx
    return ctx


def ce_kl(model, x, x_adv, y):
    nat, adv = model.net(x), model.net(x_adv)
    ce = F.cross_entropy(nat, y, reduction="none")
    kl = F.kl_div(F.log_softmax(adv, 1), F.softmax(nat, 1), reduction="none").sum(1)
    return ce, kl


def report_with(per_class, k):
    """A validation GroupReport from (n, clean correct, robust correct) per class."""
    y, clean, adv = [], [], []
    for c, (n, cc, rc) in enumerate(per_class):
        wrong = (c + 1) % k
        for i in range(n):
            y.append(c)
            clean.append(c if i < cc else wrong)
            adv.append(c if i < rc else wrong)
    return GroupReport.from_outcomes(y=np.array(y), clean_pred=np.array(clean), adv_pred=np.array(adv),
                                     class_names=[f"c{i}" for i in range(k)])


def linf(a, b):
    return (a - b).flatten(1).abs().amax(1)


# ================================================================================ DAFA
SIM3 = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]], dtype=torch.float64)


def test_dafa_weights_by_hand():
    # diag 0.5 < 0.6 < 0.8. Paper rule: W0 = 1 + .3*.8 + .2*.6; W1 = 1 - .3*.8 - .2*.8; W2 = 1 - .2*.6 + .2*.8
    assert dafa_weights(SIM3).tolist() == pytest.approx([1.36, 0.60, 1.04])
    # the official HEAD (c60ba83) is the paper rule; before its 2024-09 fix (4a7f87e) the else-branch
    # was W_i -= p_i(j) p_j(j): W1 = 1 - .1*.5 - .1*.6; W2 = 1 - .2*.5 + .2*.8
    assert dafa_weights(SIM3, rule="official").tolist() == pytest.approx([1.36, 0.60, 1.04])
    assert dafa_weights(SIM3, rule="official-2024-02").tolist() == pytest.approx([1.36, 0.89, 1.06])
    assert dafa_weights(SIM3, lam=0.5).tolist() == pytest.approx([1.18, 0.80, 1.02])
    # the paper rule moves weight between pairs: the sum stays K (K = 7, distinct diagonals)
    g = torch.Generator().manual_seed(0)
    sim = torch.softmax(3 * torch.randn(7, 7, generator=g, dtype=torch.float64), 1)
    assert float(dafa_weights(sim).sum()) == pytest.approx(7.0)
    assert float(dafa_weights(sim, rule="official-2024-02").sum()) != pytest.approx(7.0)


def test_dafa_similarity_is_collected_in_the_last_warmup_epoch():
    K = 3
    x, y = batch(K)
    model = Recorder(K).train()
    m = build_method("dafa", {"warmup": 2, "beta": 6})
    attack = Shift()
    ctx = ctx_for(m, K, attack, epochs=5)
    for epoch in (0, 1):
        ctx.epoch = epoch
        m.on_epoch_start(ctx)
        loss = m.loss(model, x, y, y, ctx)
        if epoch == 0:  # warm-up: plain TRADES at the global eps, nothing collected
            assert attack.eps[-1] == 0.1
            ce, kl = ce_kl(model, x, model.seen[-1], y)
            assert torch.allclose(loss, ce.mean() + 6 * kl.mean(), atol=1e-6)
        m.on_epoch_end(ctx, None)
        assert (m.weights is None) == (epoch == 0)
    # p_i(j): mean adversarial softmax over class i's samples, computed here from the recorded x'
    probs = torch.softmax(model.net(model.seen[-1]), 1).double()
    sim = torch.stack([probs[y == i].mean(0) for i in range(K)])
    assert torch.allclose(m.similarity.double(), sim, atol=1e-6)
    assert torch.allclose(m.weights.double(), dafa_weights(sim), atol=1e-6)
    state = m.epoch_state()
    assert state["class_weights"] == pytest.approx(m.weights.tolist())
    assert state["class_eps"] == pytest.approx((0.1 * m.weights).tolist())
    assert len(state["class_similarity"]) == K and len(state["class_similarity"][0]) == K
    # resume: a fresh method restores the weights
    m2 = build_method("dafa", {"warmup": 2})
    m2.load_state_dict(m.state_dict())
    assert torch.equal(m2.weights, m.weights)


@pytest.mark.parametrize("base", ["pgd-at", "trades"])
def test_dafa_keeps_class_margins_and_steps_in_both_branches(base):
    # the official PGD branch follows the class step with a global-eps step + projection: margins lost
    K = 3
    x, y = batch(K)
    model = Recorder(K).train()
    m = build_method("dafa", {"base": base, "beta": 2})
    m.weights = torch.tensor([0.0, 1.0, 1.5])
    pgd = base == "pgd-at"
    one_step = get_attack("pgd10", steps=1, random_start=False, keep="last") if pgd else \
        get_attack("trades-kl", steps=1, noise_std=1e-4)
    loss = m.loss(model, x, y, y, ctx_for(m, K, one_step, eps=0.1))
    x_adv = model.seen[-1]
    d = linf(x_adv, x)
    assert torch.equal(x_adv[y == 0], x[y == 0])       # W = 0: clean inputs
    # one step of rel_step * eps_y = 0.25 * W_y * 0.1 (inputs are away from the [0, 1] box)
    tol = 1e-6 if pgd else 1e-3  # TRADES starts from x + 1e-4 * N(0, I)
    assert d[y == 1].tolist() == pytest.approx([0.025] * int((y == 1).sum()), abs=tol)
    assert d[y == 2].tolist() == pytest.approx([0.0375] * int((y == 2).sum()), abs=tol)
    w = torch.tensor([0.0, 1.0, 1.5])[y]
    if pgd:
        expected = (w * F.cross_entropy(model.net(x_adv), y, reduction="none")).mean()
    else:
        ce, kl = ce_kl(model, x, x_adv, y)
        expected = (w * ce).mean() + 2 * kl.mean()
    assert torch.allclose(loss, expected, atol=1e-6)
    # and with the full 10-step attack the margin class goes beyond the global eps
    model.seen.clear()
    full = get_attack("pgd10", keep="last") if pgd else get_attack("trades-kl")
    m.loss(model, x, y, y, ctx_for(m, K, full, eps=0.1))
    d = linf(model.seen[-1], x)
    assert bool((d[y == 2] > 0.1 + 1e-3).all()) and bool((d[y == 2] <= 0.15 + 1e-6).all())
    assert bool((d[y == 1] <= 0.1 + 1e-6).all())


# ================================================================================ CFA
def test_cfa_calibration_by_hand():
    m = build_method("cfa", {"calibrate_from": 2, "fawa": False})  # trades base: lambda1 = 0.3
    assert m.options.lambda1 == 0.3 and build_method("cfa", {"base": "pgd-at"}).options.lambda1 == 0.5
    ctx = ctx_for(m, 3, Shift(), eps=0.1)
    ctx.train_class_acc = torch.tensor([0.2, 0.5, float("nan")])
    ctx.epoch = 0
    m.on_epoch_end(ctx, None)  # next epoch 1 < calibrate_from: global eps and beta
    assert m.class_eps() is None and m.betas(torch.tensor([0])) == 6.0
    ctx.epoch = 1
    m.on_epoch_end(ctx, None)
    # eps_k = (0.3 + t_k) * 0.1, beta_k = (0.5 + t_k) * 6; a class unseen in training keeps eps, beta
    assert m.class_eps().tolist() == pytest.approx([0.05, 0.08, 0.1])
    assert m.betas(torch.tensor([0, 1, 2])).tolist() == pytest.approx([4.2, 6.0, 6.0])
    state = m.epoch_state()
    assert state["class_eps"] == pytest.approx([0.05, 0.08, 0.1]) and state["class_beta"] == pytest.approx([4.2, 6, 6])
    assert state["train_rob_acc"][:2] == pytest.approx([0.2, 0.5]) and state["train_rob_acc"][2] is None


def test_cfa_before_calibration_is_trades():
    K = 3
    x, y = batch(K)
    model = Recorder(K).train()
    cfa, trades = build_method("cfa", {"fawa": False, "ccr_form": "unnormalized"}), build_method("trades")
    a = cfa.loss(model, x, y, y, ctx_for(cfa, K, Shift()))
    b = trades.loss(model, x, y, y, ctx_for(trades, K, Shift()))
    assert torch.equal(a, b)
    # eq. 8 (and the official code) before calibration: (CE + beta KL) / (1 + beta) at the global beta 6
    for form in ("paper", "official"):
        m = build_method("cfa", {"fawa": False, "ccr_form": form})
        assert torch.allclose(m.loss(model, x, y, y, ctx_for(m, K, Shift())), b / 7, atol=1e-6)


def test_cfa_class_eps_reaches_the_attack():
    K = 3
    x, y = batch(K)
    model = Recorder(K).train()
    m = build_method("cfa", {"base": "pgd-at", "lambda1": 0.0, "calibrate_from": 0, "fawa": False})
    ctx = ctx_for(m, K, get_attack("pgd10", keep="last"), eps=0.1)
    m.update_calibration(torch.tensor([0.0, 0.5, 1.0]), next_epoch=1)
    loss = m.loss(model, x, y, y, ctx)
    x_adv = model.seen[-1]
    d = linf(x_adv, x)
    assert torch.equal(x_adv[y == 0], x[y == 0])  # eps_0 = 0: clean inputs
    assert bool((d[y == 1] <= 0.05 + 1e-6).all()) and bool((d[y == 2] > 0.05 + 1e-3).all())
    assert torch.allclose(loss, F.cross_entropy(model.net(x_adv), y), atol=1e-6)


@pytest.mark.parametrize("form", ["paper", "official", "unnormalized"])
def test_cfa_trades_loss_uses_class_betas(form):
    K = 3
    x, y = batch(K)
    model = Recorder(K).train()
    m = build_method("cfa", {"calibrate_from": 0, "fawa": False, "ccr_form": form})
    attack = Shift()
    ctx = ctx_for(m, K, attack, eps=0.1)
    m.update_calibration(torch.tensor([0.0, 0.5, 1.0]), next_epoch=1)
    loss = m.loss(model, x, y, y, ctx)
    assert torch.allclose(attack.eps[-1], torch.tensor([0.03, 0.08, 0.13])[y])  # (0.3 + t) * 0.1
    ce, kl = ce_kl(model, x, model.seen[-1], y)
    beta = torch.tensor([3.0, 6.0, 9.0])[y]  # (0.5 + t) * 6
    if form == "unnormalized":
        expected = ce.mean() + (beta * kl).mean()
    elif form == "paper":  # eq. 8
        expected = ((ce + beta * kl) / (1 + beta)).mean()
    else:  # official code: (1 - b) CE + b KL with b = beta / (1 + beta)
        b = beta / (1 + beta)
        expected = ((1 - b) * ce + b * kl).mean()
    assert torch.allclose(loss, expected, atol=1e-6)


def test_fawa_is_gated_by_the_worst_validation_class_and_averages_by_hand():
    K = 3
    x, y = batch(K)
    model = Recorder(K).train()
    m = build_method("cfa", {"fawa_from": 1, "fawa_threshold": 0.2, "fawa_decay": 0.85, "calibrate_from": 0})
    ctx = ctx_for(m, K, Shift(), epochs=10)
    ctx.train_class_acc = torch.tensor([0.5, 0.5, 0.5])
    m.loss(model, x, y, y, ctx)  # the method learns which model it averages
    good = report_with([(10, 9, 5), (10, 8, 3), (10, 7, 2)], K)  # worst class robust acc 0.2
    bad = report_with([(10, 9, 5), (10, 8, 1), (10, 7, 2)], K)   # 0.1
    w0 = {k: v.clone() for k, v in model.state_dict().items()}
    for epoch, rep in ((0, good), (1, bad)):  # before fawa_from; below the threshold
        ctx.epoch = epoch
        m.on_epoch_end(ctx, rep)
        assert m.eval_model() is None and not m.fawa_updated
    assert m.epoch_state()["fawa"]["gate_worst_rob_acc"] == pytest.approx(0.1)
    ctx.epoch = 2
    m.on_epoch_end(ctx, good)  # first accepted epoch: a copy
    avg = m.eval_model()
    assert avg is not None and avg is not model and m.fawa_updated
    assert all(torch.equal(avg.state_dict()[k], w0[k]) for k in w0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    ctx.epoch = 3
    m.on_epoch_end(ctx, good)
    for k, v in m.eval_model().state_dict().items():
        assert torch.allclose(v, 0.85 * w0[k] + 0.15 * (w0[k] + 1), atol=1e-6), k
    snapshot = {k: v.clone() for k, v in m.eval_model().state_dict().items()}
    ctx.epoch = 4
    m.on_epoch_end(ctx, bad)  # rejected: unchanged
    assert all(torch.equal(m.eval_model().state_dict()[k], snapshot[k]) for k in snapshot)
    assert m.epoch_state()["fawa"] == {"gate_worst_rob_acc": pytest.approx(0.1), "updated": False, "updates": 2,
                                       "in_use": True}
    # resume: the average comes back once the method sees the model again
    m2 = build_method("cfa", {"fawa_from": 1, "calibrate_from": 0})
    ctx_for(m2, K, Shift())
    m2.load_state_dict(m.state_dict())
    assert m2.fawa_updates == 2 and torch.equal(m2.class_eps(), m.class_eps())
    m2.loss(model, x, y, y, m2.ctx)
    assert all(torch.equal(m2.eval_model().state_dict()[k], snapshot[k]) for k in snapshot)


def test_fractional_epoch_options_scale_with_the_run():
    from robfair.training.methods.cfa import resolve_epoch

    assert resolve_epoch(50, 200) == 50 and resolve_epoch(0.5, 20) == 10 and resolve_epoch(0, 5) == 0
    assert build_method("dafa", {"warmup": 0.7}).warmup_epochs(10) == 7


# ================================================================================ WAT
def test_wat_hedge_weights_by_hand():
    K = 3
    m = build_method("wat", {"eta": 0.1, "beta": 6, "cost": "trades-01"})
    ctx_for(m, K, Shift())
    assert m.hedge_weights().tolist() == pytest.approx([0.75] * 4)  # K * softmax(0) over K + 1
    # (n, clean correct, robust correct): std_err, bndy_err -> cost std + 6 * bndy
    r1 = report_with([(10, 8, 5), (10, 10, 10), (20, 10, 10)], K)  # costs 0.2+1.8, 0, 0.5; all: 12/40 + 6 * 3/40
    m.update(r1)
    c1 = np.array([2.0, 0.0, 0.5, 0.3 + 6 * 0.075])
    assert m.last_cost.tolist() == pytest.approx(c1.tolist())
    r2 = report_with([(10, 10, 10), (10, 9, 9), (20, 20, 10)], K)  # 0, 0.1, 3.0; all: 0.025 + 6 * 0.25
    m.update(r2)
    c = c1 + np.array([0.0, 0.1, 3.0, 0.025 + 1.5])
    w = 3 * np.exp(0.1 * c) / np.exp(0.1 * c).sum()
    assert m.hedge_weights().tolist() == pytest.approx(w.tolist())
    assert float(m.hedge_weights().sum()) == pytest.approx(3.0)
    assert m.class_weights().tolist() == pytest.approx((w[:3] + w[3]).tolist(), rel=1e-6)
    state = m.epoch_state()
    assert state["hedge_weights"] == pytest.approx(w.tolist()) and state["cum_cost"] == pytest.approx(c.tolist())
    # resume
    m2 = build_method("wat")
    ctx_for(m2, K, Shift())
    m2.load_state_dict(m.state_dict())
    assert torch.equal(m2.hedge_weights(), m.hedge_weights())
    # without the pseudo-class and on robust error
    m3 = build_method("wat", {"average_class": False, "cost": "rob-err"})
    ctx_for(m3, K, Shift())
    m3.update(r1)
    c3 = np.array([0.5, 0.0, 0.5])
    assert m3.hedge_weights().tolist() == pytest.approx((3 * np.exp(0.1 * c3) / np.exp(0.1 * c3).sum()).tolist())


@pytest.mark.parametrize("normalize", [False, True])
def test_wat_weights_scale_the_trades_loss(normalize):
    K = 7
    x, y = batch(K, n=21)
    model = Recorder(K).train()
    m = build_method("wat", {"beta": 3, "normalize": normalize})
    ctx = ctx_for(m, K, Shift())
    m.cum_cost = torch.linspace(0, 12, K + 1, dtype=torch.float64)
    loss = m.loss(model, x, y, y, ctx)
    w = K * torch.softmax(0.1 * m.cum_cost, 0)
    s = (w[:K] + w[K]).float()[y]
    ce, kl = ce_kl(model, x, model.seen[-1], y)
    per = s * (ce + 3 * kl)
    expected = per.sum() / s.sum() if normalize else per.mean()
    assert torch.allclose(loss, expected, atol=1e-5)


# ================================================================================ MART
def _mart_by_hand(nat, adv, y, beta, w=None):
    n = len(y)
    w = np.ones(n) if w is None else np.asarray(w, dtype=float)
    bce, reg = np.zeros(n), np.zeros(n)
    for i in range(n):
        pn = np.exp(nat[i] - nat[i].max()); pn /= pn.sum()
        pa = np.exp(adv[i] - adv[i].max()); pa /= pa.sum()
        other = max(pa[k] for k in range(len(pa)) if k != y[i])
        bce[i] = -math.log(pa[y[i]]) - math.log(1.0001 - other + 1e-12)
        kl = sum(pn[k] * (math.log(pn[k]) - math.log(pa[k])) for k in range(len(pn)))
        reg[i] = kl * (1.0000001 - pn[y[i]])
    return (w * bce).sum() / w.sum() + beta * (w * reg).sum() / w.sum()


def test_mart_loss_by_hand():
    g = torch.Generator().manual_seed(4)
    nat, adv = torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, 3, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 2, 1, 0])
    got = mart_loss(nat, adv, y, 6.0)
    assert float(got) == pytest.approx(_mart_by_hand(nat.numpy(), adv.numpy(), y.numpy(), 6.0), rel=1e-5)
    wts = torch.tensor([1.0, 2.0, 3.0, 1.0, 1.0, 5.0])
    got_w = mart_loss(nat, adv, y, 2.0, wts)
    assert float(got_w) == pytest.approx(_mart_by_hand(nat.numpy(), adv.numpy(), y.numpy(), 2.0, wts.numpy()), rel=1e-5)


def test_mart_method_attacks_and_records_adversarial_logits():
    K = 3
    x, y = batch(K)
    model = Recorder(K).train()
    m = build_method("mart")
    ctx = ctx_for(m, K, get_attack("pgd10", keep="last"), eps=0.1)
    loss = m.loss(model, x, y, y, ctx)
    x_adv = model.seen[-1]
    assert not torch.equal(x_adv, x) and bool((linf(x_adv, x) <= 0.1 + 1e-6).all())
    assert torch.allclose(loss, mart_loss(model.net(x), model.net(x_adv), y, 6.0), atol=1e-6)
    logits, labels = ctx.take_record()
    assert torch.allclose(logits, model.net(x_adv)) and torch.equal(labels, y)


# ================================================================================ configs
@pytest.mark.parametrize("name", ["cfa", "wat", "dafa", "mart"])
def test_configs_load(name):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    assert cfg.method == name and cfg.attack is not None


# ================================================================================ end to end on digits
@pytest.fixture(scope="module")
def digits3(digits):
    """Three digit classes (0, 1, 2), 60 images each: a K = 3 problem."""
    idx = torch.cat([torch.nonzero(digits.y == c).flatten()[:60] for c in range(3)])
    return Dataset(x=digits.x[idx], y=digits.y[idx], classes=digits.classes[:3], name="digits3")


def tiny_cfg(method, options, out, **kw):
    base = dict(data="digits", model="mlp", model_kwargs={"hidden": [16]}, attack_options={"steps": 2}, eps=0.1,
                epochs=2, batch_size=60, lr=0.1, val_per_class=10, val_attack="pgd3", device="cpu")
    return TrainConfig(**{**base, **kw}, method=method, method_options=options, out=str(out))


def metric_lines(out):
    return [json.loads(s) for s in (Path(out) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("method,options,keys", [
    ("wat", {}, ["hedge_weights", "class_weights", "val_cost", "cum_cost"]),
    ("dafa", {"warmup": 1}, ["class_weights", "class_eps", "class_similarity"]),
    ("dafa", {"warmup": 1, "base": "pgd-at"}, ["class_weights", "class_eps", "class_similarity"]),
    ("mart", {}, []),
])
def test_end_to_end_writes_the_method_state(method, options, keys, tmp_path, digits3):
    result = train(tiny_cfg(method, options, tmp_path / "run"), train_data=digits3)
    recs = metric_lines(tmp_path / "run")
    assert [r["epoch"] for r in recs] == [1, 2]
    for key in keys:
        assert key in recs[-1]["method"], key
    if method == "wat":
        assert len(recs[-1]["method"]["hedge_weights"]) == 4
        assert recs[-1]["method"]["hedge_weights"] != recs[0]["method"]["hedge_weights"]
    if method == "dafa":
        # set once, at the end of the (single) warm-up epoch: its line already shows what epoch 2 used
        assert recs[0]["method"]["class_similarity"] == recs[1]["method"]["class_similarity"]
        assert recs[0]["method"]["class_weights"] == recs[1]["method"]["class_weights"]
        assert sum(recs[-1]["method"]["class_weights"]) == pytest.approx(3.0, abs=1e-4)
    assert all(math.isfinite(r["train"]["loss"]) for r in recs) and result.best_epoch in (1, 2)


def _fit(cfg, digits3, audited, callbacks=()):
    full = digits3
    seed_everything(cfg.seed)  # as robfair.training.train does: the same initial weights every time
    tr, va = split_train_val(full, cfg)
    model = build_model(cfg, full.num_classes, full.in_shape)
    trainer = Trainer(model, tr, va, None, cfg, test=va, callbacks=callbacks,
                      final_audit=lambda m, test: audited.append({k: v.clone() for k, v in m.state_dict().items()}))
    return trainer, trainer.fit()


def test_cfa_end_to_end_best_and_audit_use_the_fawa_average_and_resume_exactly(tmp_path, digits3):
    opts = {"calibrate_from": 1, "fawa_from": 0, "fawa_threshold": 0.0}
    cfg = tiny_cfg("cfa", opts, tmp_path / "full", select="last", epochs=3)
    audited = []
    trainer, result = _fit(cfg, digits3, audited)
    recs = metric_lines(tmp_path / "full")
    last = recs[-1]["method"]
    assert len(last["class_eps"]) == 3 and len(last["class_beta"]) == 3 and len(last["train_rob_acc"]) == 3
    assert last["class_eps"] == pytest.approx([(0.3 + t) * 0.1 for t in last["train_rob_acc"]], abs=1e-6)
    assert last["fawa"]["updates"] == 3 and last["fawa"]["in_use"]
    avg = trainer.method.eval_model().state_dict()
    best, _ = load_checkpoint(tmp_path / "full" / "checkpoints" / "best.pt")
    raw, _ = load_checkpoint(tmp_path / "full" / "checkpoints" / "last.pt")
    for k, v in best.state_dict().items():
        assert torch.equal(v, avg[k]) and torch.equal(audited[0][k], avg[k]), k
    assert any(not torch.equal(v, raw.state_dict()[k]) for k, v in best.state_dict().items())
    # killed after the first epoch, resumed: the same raw weights, average and metrics
    out = tmp_path / "resumed"
    with pytest.raises(Stop):
        _fit(tiny_cfg("cfa", opts, out, select="last", epochs=3), digits3, [], callbacks=[StopAfterEpoch()])
    audited2 = []
    _fit(tiny_cfg("cfa", opts, out, select="last", epochs=3, resume=True), digits3, audited2)
    raw2, _ = load_checkpoint(out / "checkpoints" / "last.pt")
    for k, v in raw.state_dict().items():
        assert torch.equal(v, raw2.state_dict()[k]), k
    for k, v in audited[0].items():
        assert torch.equal(v, audited2[0][k]), k
    strip = [{k: v for k, v in r.items() if k != "time"} for r in recs]
    assert strip == [{k: v for k, v in r.items() if k != "time"} for r in metric_lines(out)]
