"""fair-constraint / fair-adversarial: the penalty and the dual step against hand computations,
the task checks, and a short run whose metrics.jsonl carries the violation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from robfair.errors import ConfigError
from robfair.metrics import GroupReport
from robfair.training import TrainConfig
from robfair.training.methods import build_method
from robfair.training.methods.method import TrainContext


def _ctx(num_classes=2):
    cfg = TrainConfig(method="fair-constraint", device="cpu")
    return TrainContext(cfg=cfg, device=torch.device("cpu"), num_classes=num_classes,
                        class_names=[str(k) for k in range(num_classes)], eps=0.1)


LOGITS = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, -0.5], [-1.0, 2.0]])
Y = torch.tensor([0, 0, 1, 1, 1])
G = torch.tensor([0, 0, 0, 1, 1])


@pytest.mark.parametrize("fairness", ["accuracy-parity", "loss-parity", "equal-opportunity"])
def test_penalty_matches_hand_computation(fairness):
    m = build_method("fair-constraint", {"fairness": fairness, "lam": 0.5})
    m.ctx = _ctx()
    m.lam = torch.tensor([0.5, 2.0], dtype=torch.float64)
    ce = F.cross_entropy(LOGITS, Y, reduction="none")
    p_y = F.softmax(LOGITS, 1)[torch.arange(5), Y]
    s = (ce if fairness == "loss-parity" else 1 - p_y).double().numpy()
    keep = (Y == 1).numpy() if fairness == "equal-opportunity" else np.ones(5, bool)
    g = G.numpy()
    overall = s[keep].mean()
    want = sum(lam * abs(s[keep & (g == k)].mean() - overall) for k, lam in ((0, 0.5), (1, 2.0)))
    got = m.penalty(LOGITS, Y, G, ce)
    assert float(got) == pytest.approx(want, abs=1e-6)  # float32 means
    # and the batch loss is CE + penalty, differentiable
    z = LOGITS.clone().requires_grad_(True)
    loss = m.loss(lambda x: z, None, Y, G, m.ctx)
    assert float(loss.detach()) == pytest.approx(float(ce.mean()) + want, abs=1e-6)
    loss.backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()


def test_dual_ascent_step_from_the_validation_report():
    m = build_method("fair-constraint", {"lam": 0.3, "dual_step": 0.5, "alpha": 0.05})
    m.ctx = _ctx()
    # validation: group a 9/10 correct, group b 5/10 correct; overall 14/20
    y = np.zeros(20, int)
    clean = np.r_[np.zeros(9), np.ones(1), np.zeros(5), np.ones(5)].astype(int)
    rep = GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=clean, groups=np.r_[np.zeros(10), np.ones(10)].astype(int),
                                    class_names=["0", "1"], group_names=["a", "b"])
    m.on_epoch_end(m.ctx, rep)
    v = np.abs(np.array([0.9, 0.5]) - 0.7)
    assert m.lam.tolist() == pytest.approx(list(np.maximum(0, 0.3 + 0.5 * (v - 0.05))))
    st = m.epoch_state()
    assert st["violation"]["per_group"] == pytest.approx({"a": 0.2, "b": 0.2})
    assert st["violation"]["max"] == pytest.approx(0.2) and st["lambda"]["b"] == pytest.approx(0.375)
    assert st["violation"]["val_accuracy_parity"]["clean"] == pytest.approx(0.2)
    # multipliers never go below zero
    m2 = build_method("fair-constraint", {"lam": 0.01, "dual_step": 1.0, "alpha": 0.5})
    m2.ctx = _ctx()
    m2.on_epoch_end(m2.ctx, rep)
    assert m2.lam.tolist() == [0.0, 0.0]
    # state round trip
    m3 = build_method("fair-constraint", {"lam": 0.3})
    m3.load_state_dict(json.loads(json.dumps(m.state_dict())))
    assert m3.lam.tolist() == m.lam.tolist() and m3.group_names == ["a", "b"]


def test_fair_adversarial_uses_robust_accuracy_and_its_attack():
    m = build_method("fair-adversarial", {"lam": 0.0, "dual_step": 1.0})
    m.ctx = _ctx()
    y = np.zeros(4, int)
    clean = np.zeros(4, int)
    adv = np.array([0, 0, 1, 1])  # group a robust, group b not
    rep = GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=adv, groups=np.array([0, 0, 1, 1]),
                                    class_names=["0", "1"], group_names=["a", "b"])
    m.on_epoch_end(m.ctx, rep)
    assert m.lam.tolist() == pytest.approx([0.5, 0.5])  # |1 - 0.5|, |0 - 0.5| in robust accuracy
    assert TrainConfig(method="fair-adversarial").attack == "pgd10"
    assert TrainConfig(method="fair-adversarial", method_options={"inner": "trades"}).attack == "trades-kl"


def test_equal_opportunity_needs_binary_labels():
    m = build_method("fair-constraint", {"fairness": "equal-opportunity"})
    with pytest.raises(ConfigError, match=r"needs binary labels but the task has 10 classes; use fairness accuracy-parity or loss-parity \(--opt fairness=\.\.\.\)"):
        m.ctx = _ctx(10)
    with pytest.raises(ConfigError, match="has no option 'lambda'"):
        build_method("fair-constraint", {"lambda": 1})


def test_short_run_logs_the_violation(tmp_path):
    from robfair.theory import mixture_dataset, sample_group_mixture
    from robfair.training import train

    x, y, g = sample_group_mixture(600, 8, 0.3, 1.0, 1.5, group_sizes=(0.7, 0.3), group_scales=(1.0, 2.0), seed=0)
    ds = mixture_dataset(x, y, g, scale=0.08, group_names=["major", "minor"])
    cfg = TrainConfig(data="npz", model="mlp", model_kwargs={"hidden": []}, method="fair-adversarial",
                      method_options={"lam": 0.5, "dual_step": 0.2}, epochs=2, eps=0.02, lr=0.1, batch_size=100,
                      val_attack="fgsm", device="cpu", out=str(tmp_path / "run"), select="last")
    train(cfg, train_data=ds)
    lines = [json.loads(s) for s in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for rec in lines:
        meth = rec["method"]
        assert meth["fairness"] == "accuracy-parity" and set(meth["lambda"]) == {"major", "minor"}
        per = meth["violation"]["per_group"]
        val = rec["val"]["per_group"]
        n = {k: val[k]["n"] for k in val}
        overall = sum(val[k]["rob_acc"] * n[k] for k in val) / sum(n.values())
        for k in val:  # the logged violation is the validation robust-accuracy gap of each group
            assert per[k] == pytest.approx(abs(val[k]["rob_acc"] - overall), abs=1e-9)
    lam0 = np.array(list(lines[0]["method"]["lambda"].values()))
    v1 = np.array(list(lines[1]["method"]["violation"]["per_group"].values()))
    assert np.array(list(lines[1]["method"]["lambda"].values())) == pytest.approx(np.maximum(0, lam0 + 0.2 * v1))
