"""The eps sweep: parsing, exactness on a linear model, soundness of reusing smaller radii, and
agreement with independent audits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robfair.auditing import audit
from robfair.auditing.eps_sweep import EpsSweep, eps_sweep, parse_eps_range
from robfair.errors import AttackError


def test_parse_eps_range():
    assert parse_eps_range("0:16/255:9") == pytest.approx([2 * k / 255 for k in range(9)])
    assert parse_eps_range("0.1:0.1:1") == [0.1]
    for bad, msg in (("16/255:0:9", "stop 0 is below start 0.0627"), ("0:1", "not START:STOP:N"),
                     ("0:1:x", "is not an integer"), ("0:1:1", "use N >= 2"), ("a:1:3", "not a number")):
        with pytest.raises(Exception, match=msg) as e:
            parse_eps_range(bad)
        assert e.value.exit_code == 2 if hasattr(e.value, "exit_code") else True
    with pytest.raises(AttackError, match="increasing"):
        eps_sweep(torch.nn.Linear(1, 2), None, "fgsm", [0.2, 0.1])


def _margin_l1(model, ds):
    """Exact robust outcome of a binary affine model under L-inf: margin of the label vs eps*||w1 - w0||_1."""
    W, bias = model.net[1].weight.detach(), model.net[1].bias.detach()
    w = (W[1] - W[0]).double()
    b = float(bias[1] - bias[0])
    s = ds.x.flatten(1).double() @ w + b  # > 0 -> class 1
    sign = 2 * ds.y.double() - 1
    return (sign * s).numpy(), float(w.abs().sum())


def test_linear_model_sweep_is_exact(linear2):
    model, ds = linear2
    eps = [0.0, 0.01, 0.02, 0.04, 0.08]
    sweep = eps_sweep(model, ds, "fgsm", eps, batch_size=40, device="cpu")
    margin, l1 = _margin_l1(model, ds)
    g = ds.g.numpy()
    for e, rep in zip(eps, sweep.reports):
        robust = margin > e * l1  # FGSM reaches the worst corner x - e*sign(w) of a linear binary model
        bg = rep.by_group
        for gi, name in enumerate(ds.group_names):
            assert bg.loc[name, "n"] == (g == gi).sum()
            assert bg.loc[name, "rob_acc"] == pytest.approx(robust[g == gi].mean(), abs=1e-12), (e, name)
            k, n = robust[g == gi].sum(), (g == gi).sum()
            assert (bg.loc[name, "rob_acc_lo"], bg.loc[name, "rob_acc_hi"]) == pytest.approx(
                __import__("robfair.metrics", fromlist=["wilson"]).wilson(k, n))
    curve = sweep.curve()
    assert list(curve.columns) == ["major", "minor", "all"] and curve.index.tolist() == eps
    assert curve.loc[0.0, "all"] == pytest.approx((margin > 0).mean())
    assert (np.diff(curve["all"].to_numpy()) <= 0).all()
    # fooled samples are not attacked again; clean mistakes never
    att = sweep.meta["attacked_samples"]
    assert att[0] == 0 and att[1] == int((margin > 0).sum()) and att[2] == int((margin > 0.01 * l1).sum())


def test_monotone_is_the_running_intersection_and_independent_matches_audit():
    torch.manual_seed(0)
    from robfair.data import load_dataset
    from robfair.models import create

    ds = load_dataset("digits", "test").subset(slice(0, 120))
    model = create("mlp", 10, (1, 8, 8), hidden=[16]).eval()
    eps = [0.0, 0.05, 0.1, 0.3]
    ind = eps_sweep(model, ds, "fgsm", eps, device="cpu", monotone=False, batch_size=50)
    mono = eps_sweep(model, ds, "fgsm", eps, device="cpu", batch_size=50)
    y = ds.y.numpy()
    running = np.ones(len(ds), dtype=bool)
    for e, ri, rm in zip(eps, ind.reports, mono.reports):
        aud = audit(model, ds, ["fgsm"], eps=e, device="cpu", batch_size=50)["fgsm"]
        assert ri.counts.robust.sum() == aud.counts.robust.sum()  # the same as an independent audit
        assert np.array_equal(ri.counts.robust, aud.counts.robust)
        # FGSM is deterministic: robust under the monotone sweep <=> robust at every radius so far
        rob_ind = _robust_flags(model, ds, e)
        running &= rob_ind
        assert rm.counts.robust.sum() == running.sum()
    assert mono.reports[-1].overall["rob_acc"] <= ind.reports[-1].overall["rob_acc"]


def _robust_flags(model, ds, e):
    from robfair.attacks import get_attack

    x, y = ds.images(), ds.y
    with torch.no_grad():
        clean = model(x).argmax(1) == y
    if e == 0:
        return clean.numpy()
    xa = get_attack("fgsm")(model, x, y, e)
    with torch.no_grad():
        return (clean & (model(xa).argmax(1) == y)).numpy()


def test_json_round_trip_and_frames(linear2):
    model, ds = linear2
    sweep = eps_sweep(model, ds, "pgd20", "0:0.04:3", device="cpu")
    again = EpsSweep.from_json(__import__("json").loads(__import__("json").dumps(sweep.to_json())))
    assert again.eps == sweep.eps and all(a == b for a, b in zip(again.reports, sweep.reports))
    f = sweep.frame("cell")
    assert set(f.columns) >= {"eps", "group", "class", "n", "rob_acc", "rob_acc_lo", "rob_acc_hi"}
    assert sweep[0.02].eps == pytest.approx(0.02)
    assert math.isclose(sweep.frame().groupby("eps")["n"].sum().iloc[0], len(ds))
