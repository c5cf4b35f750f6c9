"""robfair.audit on small problems: consistency, worst case over attacks, per-sample eps, shard merge,
early exit, sanity warnings, and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import robfair
from robfair.auditing import AuditReport, audit, sanity_warnings
from robfair.data import Dataset
from robfair.errors import RobfairError


def linear_problem(n=300, d=16, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(d, k))
    with torch.no_grad():
        model[1].weight.copy_(torch.randn(k, d, generator=g))
        model[1].bias.zero_()
    x = 0.3 + 0.4 * torch.rand(n, 1, 4, 4, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    flip = torch.rand(n, generator=g) < 0.1  # some clean mistakes
    y[flip] = (y[flip] + 1) % k
    return model, Dataset(x=x, y=y, classes=[f"c{i}" for i in range(k)], name="lin")


class Identity:
    """An 'attack' that does nothing: it finds fewer errors than any real attack."""

    name = "pgd50"

    def __call__(self, model, x, y, eps, *, generator=None, early_exit=False):
        return x.clone()


def test_report_consistency_and_worst_case():
    model, ds = linear_problem()
    r = audit(model, ds, attacks=["fgsm", "pgd20"], eps=0.05, device="cpu", batch_size=64)
    assert isinstance(r, AuditReport) and set(r.reports) == {"fgsm", "pgd20", "worst-case"}
    for rep in r.reports.values():
        bg = rep.by_group
        assert np.allclose(bg["rob_err"], bg["std_err"] + bg["bndy_err"])
        assert (bg["rob_acc"] <= bg["clean_acc"] + 1e-12).all()
        assert rep.overall["n"] == len(ds)
    wc = r["worst-case"].overall["rob_acc"]
    assert wc <= min(r["fgsm"].overall["rob_acc"], r["pgd20"].overall["rob_acc"])
    # clean accuracy is shared: one clean pass for all attacks
    assert r["fgsm"].overall["clean_acc"] == r["pgd20"].overall["clean_acc"] == wc + r["worst-case"].overall["bndy_err"]
    assert robfair.audit(model, ds, attacks=["fgsm"], eps=0.05, device="cpu").main.overall == r["fgsm"].overall
    back = AuditReport.from_json(r.to_json())
    assert back["pgd20"] == r["pgd20"] and back.warnings == r.warnings
    f = r.to_frame()
    assert set(f["attack"]) == {"fgsm", "pgd20", "worst-case"} and len(f) == 9


def test_linear_model_reaches_exact_robust_error():
    """For a linear model the L-inf worst case is known per sample; PGD-20 must reach it (spec section 4)."""
    model, ds = linear_problem(k=2)
    eps = 0.03
    r = audit(model, ds, attacks=["pgd20"], eps=eps, device="cpu")
    w, b = model[1].weight.detach(), model[1].bias.detach()
    x = ds.x.flatten(1)
    z = x @ w.T + b
    margin = (z[:, 1] - z[:, 0]) * torch.where(ds.y == 1, 1.0, -1.0)  # > 0 iff correct
    right = margin > 0
    flips = margin <= eps * (w[1] - w[0]).abs().sum()
    exact = (~right | flips).double().mean().item()
    assert r["pgd20"].overall["rob_err"] == pytest.approx(exact, abs=1.5 / len(ds))


def test_per_sample_eps_zero_means_clean():
    model, ds = linear_problem()
    eps = torch.full((len(ds),), 0.2)
    eps[::2] = 0.0
    r = audit(model, ds, attacks=["pgd20"], eps=eps, device="cpu", batch_size=50)
    # samples with eps 0 keep their clean outcome, others are attacked hard
    r0 = audit(model, ds.subset(torch.arange(0, len(ds), 2)), attacks=["pgd20"], eps=0.0, device="cpu")
    assert r0["pgd20"].overall["rob_acc"] == r0["pgd20"].overall["clean_acc"]
    assert r.meta["eps"] == "per-sample"
    with pytest.raises(RobfairError):
        audit(model, ds, attacks=["pgd20"], eps=torch.zeros(3), device="cpu")
    with pytest.raises(RobfairError):
        audit(model, ds, attacks=["pgd20"], eps=-eps, device="cpu")


def test_shards_merge_exactly():
    model, ds = linear_problem()
    full = audit(model, ds, attacks=["fgsm"], eps=0.05, device="cpu")
    a = audit(model, ds.subset(torch.arange(0, 120)), attacks=["fgsm"], eps=0.05, device="cpu")
    b = audit(model, ds.subset(torch.arange(120, len(ds))), attacks=["fgsm"], eps=0.05, device="cpu")
    merged = a.merge(b)
    assert merged["fgsm"] == full["fgsm"]


def test_early_exit_same_outcome():
    model, ds = linear_problem(n=200)
    full = audit(model, ds, attacks=["pgd20"], eps=0.05, device="cpu", early_exit=False, seed=3)
    early = audit(model, ds, attacks=["pgd20"], eps=0.05, device="cpu", early_exit=True, seed=3)
    assert full["pgd20"] == early["pgd20"]


def test_gradient_masking_warning():
    model, ds = linear_problem()
    r = audit(model, ds, attacks=["fgsm", Identity()], eps=0.05, device="cpu")
    assert any("gradient masking" in w and "pgd50" in w for w in r.warnings)
    ok = audit(model, ds, attacks=["fgsm", "pgd20"], eps=0.05, device="cpu")
    assert not any("gradient masking" in w for w in ok.warnings)
    # L2 and targeted attacks are not compared with L-inf ones
    assert sanity_warnings({"fgsm": ok["fgsm"]}) == []


def test_model_data_mismatch_errors():
    model, ds = linear_problem(k=3)
    ds4 = Dataset(x=ds.x, y=ds.y, classes=["a", "b", "c", "d"], name="four")
    with pytest.raises(RobfairError, match="classes"):
        audit(model, ds4, attacks=["fgsm"], eps=0.1, device="cpu")
    with pytest.raises(RobfairError, match="listed twice"):
        audit(model, ds, attacks=["fgsm", "fgsm"], eps=0.1, device="cpu")
    with pytest.raises(RobfairError, match="attack"):
        audit(model, ds, attacks=[], eps=0.1, device="cpu")
