"""Long-tail remedies inside AT: each checked against a formula written out here, for K = 3 and 7."""

import io
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robfair.attacks import get_attack
from robfair.errors import ConfigError
from robfair.metrics import GroupReport
from robfair.training import METHODS, Trainer, TrainConfig, TrainContext, build_method, load_config, train
from robfair.training.checkpointing import plain

NAMES = ["at-cost-sensitive", "at-resample", "at-focal", "at-class-balanced", "at-ldam", "at-logit-adjust",
         "at-class-eps"]
CONFIGS = Path(__file__).resolve().parents[3] / "configs"


class Net(nn.Module):
    """A tiny model that keeps its train-mode inputs and logits (with their gradients after backward)."""

    def __init__(self, k):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, k))
        self.seen, self.outs = [], []

    def forward(self, x):
        z = self.net(x)
        if self.training and torch.is_grad_enabled():
            self.seen.append(x.detach().clone())
            z.retain_grad()
            self.outs.append(z)
        return z


def batch(k, n=28, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 3, 4, generator=g), torch.arange(n) % k


def ctx_for(method, k, attack="pgd10", eps=0.1, counts=None, **cfg):
    atk = None
    if attack is not None:
        atk = get_attack(attack, keep="last") if attack.startswith("pgd") else get_attack(attack)
    ctx = TrainContext(cfg=TrainConfig(eps=eps, **cfg), device=torch.device("cpu"), num_classes=k,
                       class_names=[f"c{i}" for i in range(k)], eps=eps, attack=atk,
                       generator=torch.Generator().manual_seed(3))
    if counts is not None:
        ctx.extra["train_counts"] = torch.as_tensor(counts)
    method.ctx = ctx
    method.on_train_start(ctx)
    return ctx


def run_loss(name, options, k, attack=None, counts=None, model=None, **kw):
    m = build_method(name, options)
    attack = attack or m.default_attack
    model = model if model is not None else Net(k).train()
    x, y = batch(k)
    ctx = ctx_for(m, k, attack, counts=counts if counts is not None else [10] * k, **kw)
    return m, model, x, y, m.loss(model, x, y, y, ctx)


def val_report(k, wrong):
    """A validation report with 10 samples per class, ``wrong[c]`` of class c robust errors (clean right)."""
    y, clean, adv = [], [], []
    for c in range(k):
        for i in range(10):
            y.append(c), clean.append(c), adv.append((c + 1) % k if i < wrong[c] else c)
    t = torch.tensor
    return GroupReport.from_outcomes(y=t(y), clean_pred=t(clean), adv_pred=t(adv),
                                     class_names=[f"c{i}" for i in range(k)], attack="pgd10", eps=0.1)


def test_registered_and_configs_load():
    assert set(NAMES) <= set(METHODS.names())
    files = sorted(CONFIGS.glob("longtail-*.yaml"))
    assert {load_config(f).method for f in files} == set(NAMES)
    for f in files:
        cfg = load_config(f)
        assert cfg.attack == "pgd10"
        assert load_config(f, method_options={**cfg.method_options, "base": "trades"}).attack == "trades-kl"


# ------------------------------------------------------------------ the neutral settings are plain AT / TRADES
NEUTRAL = [("at-focal", {"gamma": 0}), ("at-class-balanced", {"cb_beta": 0}), ("at-logit-adjust", {"tau": 0}),
           ("at-ldam", {"max_margin": 0})]


@pytest.mark.parametrize("k", [3, 7])
@pytest.mark.parametrize("name,opts", NEUTRAL)
def test_neutral_settings_equal_plain_adversarial_training(k, name, opts):
    m, model, x, y, loss = run_loss(name, opts, k, counts=[3 * i + 1 for i in range(k)])
    x_adv = model.seen[-1]
    logits = model.net(x_adv)
    ce = F.cross_entropy(logits, y, reduction="none")
    assert torch.equal(m.per_sample_loss(logits, y), ce)  # bit for bit
    assert torch.equal(loss, ce.mean())
    ref, rmodel, *_ , ref_loss = run_loss("pgd-at", {}, k)
    assert torch.equal(rmodel.seen[-1], x_adv)  # same attack on the plain CE
    assert torch.allclose(loss, ref_loss, rtol=1e-6, atol=0)
    # base trades: the TRADES loss
    _, _, _, _, t_loss = run_loss(name, {**opts, "base": "trades", "beta": 2}, k, counts=[3 * i + 1 for i in range(k)])
    _, _, _, _, t_ref = run_loss("trades", {"beta": 2}, k)
    assert torch.allclose(t_loss, t_ref, rtol=1e-6, atol=0)


# ------------------------------------------------------------------ closed forms
def test_focal_loss_matches_the_formula():
    z = torch.tensor([[2.0, -1.0, 0.5], [0.1, 0.2, 3.0], [-2.0, 1.0, 1.0]])
    y = torch.tensor([0, 1, 2])
    m, model, x, yb, loss = run_loss("at-focal", {"gamma": 2.0}, 3)
    p = torch.softmax(z, 1)[torch.arange(3), y]
    assert torch.allclose(m.per_sample_loss(z, y), (1 - p) ** 2 * -torch.log(p), atol=1e-6)
    # and the batch loss is the mean over the attacked batch
    p_b = torch.softmax(model.net(model.seen[-1]), 1)[torch.arange(len(yb)), yb]
    assert torch.allclose(loss, ((1 - p_b) ** 2 * -torch.log(p_b)).mean(), atol=1e-6)


@pytest.mark.parametrize("k", [3, 7])
def test_class_balanced_weights_are_inverse_effective_numbers(k):
    counts = [10 ** (i % 4) for i in range(k)]  # 1, 10, 100, 1000, 1, ...
    beta = 0.9
    eff = [(1 - beta ** n) / (1 - beta) for n in counts]
    w = [1 / e for e in eff]
    w = torch.tensor([v / (sum(w) / k) for v in w])
    m, model, x, y, loss = run_loss("at-class-balanced", {"cb_beta": beta}, k, counts=counts)
    assert torch.allclose(m.class_weights(), w, rtol=1e-5)
    assert m.epoch_state()["class_weights"] == pytest.approx(w.tolist(), rel=1e-5)
    ce = F.cross_entropy(model.net(model.seen[-1]), y, reduction="none")
    assert torch.allclose(loss, (w[y] * ce).sum() / w[y].sum(), atol=1e-6)
    # Cui's reduction divides by the batch size
    m2, model2, _, _, loss2 = run_loss("at-class-balanced", {"cb_beta": beta, "reduction": "mean"}, k, counts=counts)
    ce2 = F.cross_entropy(model2.net(model2.seen[-1]), y, reduction="none")
    assert torch.allclose(loss2, (w[y] * ce2).mean(), atol=1e-6)


def test_ldam_margins_and_loss_by_hand():
    counts = [16, 81, 1, 256]  # n^(1/4) = 2, 3, 1, 4
    margins = [0.25, 0.5 / 3, 0.5, 0.125]
    m, model, x, y, loss = run_loss("at-ldam", {"max_margin": 0.5, "s": 2.0}, 4, counts=counts)
    assert m.epoch_state()["margins"] == pytest.approx(margins)
    z = model.net(model.seen[-1])
    expected = []
    for zi, yi in zip(z, y.tolist()):
        zz = zi.clone()
        zz[yi] -= margins[yi]
        expected.append(torch.logsumexp(2 * zz, 0) - 2 * zz[yi])
    assert torch.allclose(loss, torch.stack(expected).mean(), atol=1e-5)
    # the attack is PGD on the plain CE: the same adversarial examples as pgd-at
    _, ref_model, *_ = run_loss("pgd-at", {}, 4)
    assert torch.equal(model.seen[-1], ref_model.seen[-1])


def test_ldam_deferred_reweighting_starts_at_its_epoch():
    m, *_ = run_loss("at-ldam", {"drw_epoch": 2, "drw_beta": 0.9}, 3, counts=[1, 10, 100])
    m.ctx.epoch = 1
    assert m.class_weights() is None
    m.ctx.epoch = 2
    eff = torch.tensor([(1 - 0.9 ** n) / 0.1 for n in (1, 10, 100)])
    assert torch.allclose(m.class_weights(), (1 / eff) / (1 / eff).mean(), rtol=1e-5)


@pytest.mark.parametrize("k", [3, 7])
def test_logit_adjustment_adds_tau_log_prior(k):
    counts = [i + 1 for i in range(k)]
    prior = torch.tensor(counts, dtype=torch.float64) / sum(counts)
    m, model, x, y, loss = run_loss("at-logit-adjust", {"tau": 1.5}, k, counts=counts)
    z = model.net(model.seen[-1]).double() + 1.5 * prior.log()
    expected = (torch.logsumexp(z, 1) - z[torch.arange(len(y)), y]).mean()
    assert torch.allclose(loss.double(), expected, atol=1e-5)
    # on balanced counts the offsets are one constant: cross-entropy again
    _, model_b, _, _, loss_b = run_loss("at-logit-adjust", {"tau": 1.5}, k, counts=[7] * k)
    assert torch.allclose(loss_b, F.cross_entropy(model_b.net(model_b.seen[-1]), y), atol=1e-6)


# ------------------------------------------------------------------ cost-sensitive weights from validation
@pytest.mark.parametrize("k", [3, 7])
def test_cost_sensitive_weights_follow_the_validation_error(k):
    m, *_ = run_loss("at-cost-sensitive", {"smoothing": 0.0}, k)
    assert m.class_weights().tolist() == [1.0] * k  # first epoch: uniform
    wrong = list(range(k))  # class c has robust error c/10
    m.on_epoch_end(m.ctx, val_report(k, wrong))
    assert torch.allclose(m.class_weights(), torch.tensor([2 * c / (k - 1) for c in range(k)]), atol=1e-6)
    state = m.epoch_state()
    assert state["class_error"] == pytest.approx([c / 10 for c in range(k)])
    # temperature 2: square roots; momentum 0.5: halfway from uniform
    m2, *_ = run_loss("at-cost-sensitive", {"smoothing": 0.1, "temperature": 2.0, "momentum": 0.5}, k)
    m2.on_epoch_end(m2.ctx, val_report(k, wrong))
    raw = [math.sqrt(c / 10 + 0.1) for c in range(k)]
    new = [r / (sum(raw) / k) for r in raw]
    assert torch.allclose(m2.class_weights(), torch.tensor([0.5 + 0.5 * v for v in new]), atol=1e-6)
    # std error is 0 everywhere here: uniform weights
    m3, *_ = run_loss("at-cost-sensitive", {"error": "std", "smoothing": 0.0}, k)
    m3.on_epoch_end(m3.ctx, val_report(k, wrong))
    assert m3.class_weights().tolist() == [1.0] * k


@pytest.mark.parametrize("k", [3, 7])
@pytest.mark.parametrize("base", ["pgd-at", "trades"])
def test_a_class_with_weight_zero_contributes_no_gradient(k, base):
    m, model, x, y, _ = run_loss("at-cost-sensitive", {"smoothing": 0.0, "base": base}, k)
    m.on_epoch_end(m.ctx, val_report(k, [0] + [3] * (k - 1)))  # class 0 has no validation error
    assert m.class_weights()[0] == 0
    model.outs.clear()
    loss = m.loss(model, x, y, y, m.ctx)
    loss.backward()
    assert len(model.outs) == (1 if base == "pgd-at" else 2)
    for z in model.outs:
        assert torch.equal(z.grad[y == 0], torch.zeros_like(z.grad[y == 0]))
        assert bool((z.grad[y != 0].abs().sum(1) > 0).all())
    # a batch of that class alone: zero loss, no NaN
    x0, y0 = x[y == 0], y[y == 0]
    loss0 = m.loss(model, x0, y0, y0, m.ctx)
    assert loss0.item() == 0.0
    loss0.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_cost_sensitive_needs_a_validation_split():
    m = build_method("at-cost-sensitive")
    with pytest.raises(ConfigError, match="val_per_class"):
        ctx_for(m, 3, val_per_class=0, select="last")
    m = build_method("at-cost-sensitive", {"error": "bndy"})
    with pytest.raises(ConfigError, match="val_attack"):
        ctx_for(m, 3, val_attack="none")
    with pytest.raises(ConfigError, match="no option 'gama'"):
        build_method("at-focal", {"gama": 2})
    with pytest.raises(ConfigError, match="cb_beta"):
        build_method("at-class-balanced", {"cb_beta": 1.0})


# ------------------------------------------------------------------ re-sampling
@pytest.mark.parametrize("k", [3, 7])
def test_balanced_resampling_draws_every_class_equally(k):
    counts = [1000 // (3 ** c) + 5 for c in range(k)]
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])[torch.randperm(sum(counts))]
    m = build_method("at-resample")
    ctx_for(m, k, counts=counts)
    idx = m.epoch_order(labels, torch.Generator().manual_seed(0))
    assert len(idx) == len(labels) and int(idx.min()) >= 0 and int(idx.max()) < len(labels)
    share = torch.bincount(labels[idx], minlength=k).double() / len(idx)
    assert torch.allclose(share, torch.full((k,), 1 / k, dtype=torch.float64), atol=0.04)
    assert m.epoch_state()["class_share"] == pytest.approx([1 / k] * k)
    rare = labels[idx] == k - 1
    assert len(set(idx[rare].tolist())) > 0.5 * counts[-1]  # uniform within the class
    # power 1: the data's own class shares
    m1 = build_method("at-resample", {"power": 1.0})
    ctx_for(m1, k, counts=counts)
    assert m1.class_share().tolist() == pytest.approx([n / sum(counts) for n in counts])


def test_resampling_from_validation_error_never_draws_a_zero_weight_class():
    k = 3
    counts = [50, 50, 50]
    labels = torch.arange(150) % k
    m = build_method("at-resample", {"target": "val-error", "smoothing": 0.0})
    ctx_for(m, k, counts=counts)
    m.on_epoch_end(m.ctx, val_report(k, [0, 2, 6]))  # weights 0, 0.75, 2.25
    idx = m.epoch_order(labels, torch.Generator().manual_seed(0))
    drawn = torch.bincount(labels[idx], minlength=k)
    assert drawn[0] == 0 and drawn[2] > 2 * drawn[1]
    assert m.epoch_state()["class_share"] == pytest.approx([0, 0.25, 0.75])
    assert "class_weights" not in m.epoch_state()  # the loss itself is unweighted
    # in-batch mode: the zero-weight class never reaches the model (eps 0: the rows it sees are clean)
    mb = build_method("at-resample", {"target": "val-error", "smoothing": 0.0, "mode": "in-batch"})
    model = Net(k).train()
    x, y = batch(k)
    ctx_for(mb, k, eps=0.0, counts=counts)
    mb.on_epoch_end(mb.ctx, val_report(k, [0, 2, 6]))
    mb.loss(model, x, y, y, mb.ctx)
    label_of = {tuple(xi.flatten().tolist()): int(yi) for xi, yi in zip(x, y)}
    classes = [label_of[tuple(r.flatten().tolist())] for r in model.seen[-1]]
    assert len(classes) == len(y) and 0 not in classes and classes.count(2) > classes.count(1)
    # sampler mode outside a trainer that calls epoch_order is refused, not silently unbalanced
    ms = build_method("at-resample")
    ctx_for(ms, k, counts=counts)
    with pytest.raises(ConfigError, match="in-batch"):
        ms.loss(model, x, y, y, ms.ctx)


# ------------------------------------------------------------------ per-class eps
@pytest.mark.parametrize("k", [3, 7])
@pytest.mark.parametrize("base", ["pgd-at", "trades"])
def test_class_eps_reaches_the_attack(k, base):
    mult = [0.0] + [1.0 + (c % 2) for c in range(1, k)]  # class 0: clean; odd classes 2x eps
    m, model, x, y, _ = run_loss("at-class-eps", {"multipliers": mult, "base": base}, k)
    x_adv = model.seen[-1]  # pgd-at: the only forward; trades: the adversarial one
    dist = (x_adv - x).flatten(1).abs().amax(1)
    assert torch.equal(x_adv[y == 0], x[y == 0])
    eps = torch.tensor(mult)[y] * 0.1
    assert bool((dist <= eps + 1e-6).all())
    assert bool((dist[y == 1] > 0.1 + 1e-3).all())  # the doubled radius is used, not the global one
    assert m.epoch_state()["class_eps"] == pytest.approx([0.1 * v for v in mult])


def test_class_eps_by_name_and_bad_input():
    m = build_method("at-class-eps", {"eps": {"c2": "1/10", 0: 0}})
    ctx_for(m, 3, eps=0.05)
    assert m.class_eps().tolist() == pytest.approx([0.0, 0.05, 0.1])
    with pytest.raises(ConfigError, match="both multipliers and eps"):
        build_method("at-class-eps", {"eps": {"c0": 0}, "multipliers": [1, 1, 1]})
    plain_at = build_method("at-class-eps", {})
    ctx_for(plain_at, 3, eps=0.05)
    assert plain_at.class_eps().tolist() == pytest.approx([0.05] * 3)
    with pytest.raises(ConfigError, match="multipliers"):
        build_method("at-class-eps", {"multipliers": [1, -1]})
    with pytest.raises(ConfigError, match="2 multipliers but the data has 3 classes"):
        ctx_for(build_method("at-class-eps", {"multipliers": [1, 1]}), 3)
    with pytest.raises(ConfigError, match="'cat'.*c0, c1, c2"):
        ctx_for(build_method("at-class-eps", {"eps": {"cat": 0.1}}), 3)
    with pytest.raises(ConfigError, match="exceeds 1"):
        ctx_for(build_method("at-class-eps", {"multipliers": [1, 20, 1]}), 3)


# ------------------------------------------------------------------ state
STATEFUL = [("at-cost-sensitive", {}), ("at-resample", {"target": "val-error"}), ("at-focal", {}),
            ("at-class-balanced", {}), ("at-ldam", {"drw_epoch": 0}), ("at-logit-adjust", {}),
            ("at-class-eps", {"multipliers": [0, 1, 2]})]


@pytest.mark.parametrize("name,opts", STATEFUL)
def test_state_dict_round_trip(name, opts):
    counts = [5, 50, 500]
    m = build_method(name, opts)
    ctx_for(m, 3, counts=counts)
    m.on_epoch_end(m.ctx, val_report(3, [1, 4, 9]))
    buf = io.BytesIO()
    torch.save(plain(m.state_dict()), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    fresh = build_method(name, opts)
    ctx_for(fresh, 3, counts=counts)
    fresh.load_state_dict(state)
    assert fresh.epoch_state() == m.epoch_state()
    assert json.dumps(m.epoch_state())  # JSON-able for metrics.jsonl
    if name == "at-cost-sensitive":
        assert fresh.epoch_state()["class_weights"] != [1.0, 1.0, 1.0]


# ------------------------------------------------------------------ end to end through the trainer
def test_cost_sensitive_end_to_end_logs_the_weights(tmp_path, digits):
    small = digits.subset(torch.arange(500))
    cfg = TrainConfig(data="digits", model="mlp", model_kwargs={"hidden": [16]}, method="at-cost-sensitive",
                      method_options={"smoothing": 0.0}, attack_options={"steps": 2}, eps=0.1, epochs=2,
                      batch_size=100, lr=0.1, val_per_class=8, val_attack="pgd3", seed=0, device="cpu",
                      out=str(tmp_path / "run"))
    train(cfg, train_data=small)
    lines = [json.loads(s) for s in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for rec in lines:
        err = [rec["val"]["per_group"][c]["rob_err"] for c in small.classes]
        mean = sum(err) / len(err)
        assert rec["method"]["class_error"] == pytest.approx(err)
        assert rec["method"]["class_weights"] == pytest.approx([e / mean for e in err], rel=1e-5)


def test_resample_end_to_end_balances_what_the_loss_sees(digits):
    keep = torch.cat([torch.nonzero(digits.y == c).squeeze(1)[: max(6, 120 >> c)] for c in range(10)])
    small = digits.subset(keep)
    m = build_method("at-resample")
    seen = []
    orig = m.loss

    def spy(model, x, y, g, ctx):
        seen.append(y.clone())
        return orig(model, x, y, g, ctx)

    m.loss = spy
    cfg = TrainConfig(data="digits", model="mlp", model_kwargs={"hidden": [16]}, method="at-resample",
                      attack_options={"steps": 1}, eps=0.1, epochs=2, batch_size=64, val_per_class=0,
                      select="last", seed=0, device="cpu")
    from robfair.models import create

    result = Trainer(create("mlp", 10, small.in_shape, hidden=[16]), small, None, m, cfg).fit()
    y = torch.cat(seen)
    assert len(y) == 2 * len(small)
    share = torch.bincount(y, minlength=10).double() / len(y)
    data_share = torch.bincount(small.y, minlength=10).double() / len(small)
    assert data_share.max() > 0.3 and data_share.min() < 0.03
    assert float((share - 0.1).abs().max()) < 0.05
    assert result.history[-1]["method"]["class_share"] == pytest.approx([0.1] * 10)
