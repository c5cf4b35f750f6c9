"""Distances to the decision boundary: exact, linearized and bisection agree on linear models; the
bisection brackets the flip point; per-group summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robfair.auditing.distances import (DistanceReport, affine_params, boundary_distances, exact_linear_distance,
                               linearized_margin, minimal_eps)
from robfair.errors import ModelError


def _wb(model):
    lin = model.net[1]
    return lin.weight.detach().double(), lin.bias.detach().double()


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_binary_linear_three_methods_agree(linear2, norm):
    model, ds = linear2
    W, b = _wb(model)
    w, c = W[1] - W[0], b[1] - b[0]
    x = ds.x.flatten(1).double()
    q = 1 if norm == "linf" else 2
    hand = ((x @ w + c).abs() / torch.linalg.vector_norm(w, ord=q)).numpy()  # |w.x + b| / ||w||_q
    from robfair.attacks import get_attack

    # L-inf PGD reaches the worst corner exactly from any start; L2 PGD from a random start only
    # approaches the optimum along w (about 1e-4 short), so start it at x: four steps of eps/4 along w
    attack = "pgd20" if norm == "linf" else get_attack("pgd20-l2", random_start=False)
    ex = boundary_distances(model, ds, "exact", norm=norm, attack=attack, device="cpu")
    lin = boundary_distances(model, ds, "linearized", norm=norm, attack=attack, device="cpu")
    tol = 2e-4
    bis = boundary_distances(model, ds, "bisection", attack=attack, eps_max=0.2, tol=tol, device="cpu")
    np.testing.assert_allclose(ex.distance, hand, rtol=1e-9)
    np.testing.assert_allclose(lin.distance, hand, rtol=1e-5, atol=1e-7)  # float32 forward
    assert hand.max() < 0.2 and (ds.x.min() - 0.2 > 0) and (ds.x.max() + 0.2 < 1)  # the box never binds
    assert (bis.lower <= hand + 1e-6).all() and (hand <= bis.distance + 1e-6).all()  # brackets the flip point
    assert (bis.distance - bis.lower <= tol + 1e-12).all()
    assert ex.method == "exact" and boundary_distances(model, ds, "auto", device="cpu").method == "exact"


def test_multiclass_linear_exact_is_the_nearest_facet(linear4):
    model, ds = linear4
    W, b = affine_params(model, ds.in_shape)
    Wm, bm = _wb(model)
    assert torch.allclose(W, Wm, rtol=1e-12, atol=1e-12) and torch.allclose(b, bm, rtol=1e-12, atol=1e-12)
    x = ds.images()
    d, pred = exact_linear_distance(W, b, x, "linf")
    dl, pl = linearized_margin(model, x, norm="linf")
    np.testing.assert_allclose(dl.numpy(), d.numpy(), rtol=1e-5, atol=1e-7)  # float32 forward
    assert torch.equal(pred, pl)
    # brute force over the facets' worst corners: x - r * sign(w_pred - w_k) flips iff r >= d (up to 1e-6)
    xf = x.flatten(1).double()
    for i in range(len(x)):
        p = int(pred[i])
        def flips(r):
            for k in range(W.shape[0]):
                if k == p:
                    continue
                xa = xf[i] - r * torch.sign(W[p] - W[k])
                z = W @ xa + b
                if int(z.argmax()) != p:
                    return True
            return False
        assert flips(float(d[i]) * (1 + 1e-6)) and not flips(float(d[i]) * (1 - 1e-6))
    tol = 1e-3
    lo, hi, pb = minimal_eps(model, x, "pgd50-cw", eps_max=0.3, tol=tol)
    assert torch.equal(pb, pred)
    assert (hi.numpy() >= d.numpy() - 1e-6).all()  # no attack flips the prediction below the true distance
    assert (hi - lo <= tol + 1e-12).all()
    # with K > 2 an untargeted attack may head for another facet than the nearest one: the bisection
    # is then an upper bound only (here it is exact for most samples)
    assert np.mean(hi.numpy() - d.numpy() <= tol + 1e-6) > 0.5


def test_bisection_rounds_do_not_grow_with_n(linear2):
    """Every round attacks all unfinished samples at once, with one radius per sample."""
    from robfair.attacks import get_attack

    model, ds = linear2
    base = get_attack("fgsm")
    calls = []

    class Recording:
        norm = "linf"
        name = "fgsm"

        def __call__(self, m, x, y, eps, **kw):
            calls.append((x.shape[0], tuple(eps.shape)))
            return base(m, x, y, eps, **kw)

    lo, hi, _ = minimal_eps(model, ds.images(), Recording(), eps_max=0.2, tol=0.2 / 64)
    assert len(calls) == 1 + 6  # one check at eps_max, then log2(64) halvings
    assert calls[0] == (len(ds), (len(ds),)) and all(len(s) == 1 and s[0] == n for n, s in calls)


def test_non_affine_model_and_auto_fallback():
    from robfair.data import load_dataset
    from robfair.models import create

    torch.manual_seed(0)
    model = create("mlp", 10, (1, 8, 8), hidden=[8]).eval()
    ds = load_dataset("digits", "test").subset(slice(0, 20))
    with pytest.raises(ModelError, match="not affine"):
        boundary_distances(model, ds, "exact", device="cpu")
    rep = boundary_distances(model, ds, "auto", eps_max=0.5, tol=0.05, device="cpu")
    assert rep.method == "bisection" and rep.meta["eps_max"] == 0.5
    with pytest.raises(Exception, match="eps_max"):
        boundary_distances(model, ds, "bisection", device="cpu")


def test_summary_histogram_and_json():
    d = np.array([0.1, 0.2, 0.3, 0.4, math.inf, 0.5, 0.05, 0.7])
    rep = DistanceReport(method="bisection", norm="linf", distance=d, y=np.array([0, 0, 0, 0, 0, 1, 1, 1]),
                         pred=np.array([0, 0, 0, 0, 0, 1, 1, 0]), groups=np.array([0, 0, 0, 0, 0, 1, 1, 1]),
                         class_names=["a", "b"], group_names=["g0", "g1"], lower=d / 2)
    s = rep.summary()
    assert s.loc["g0", "n"] == 5 and s.loc["g0", "censored"] == 1
    assert s.loc["g0", "mean"] == pytest.approx(0.25) and s.loc["g0", "median"] == pytest.approx(0.3)
    assert s.loc["g0", "max"] == math.inf and s.loc["g1", "n"] == 2  # the misclassified 0.7 is left out
    assert rep.summary(which="all").loc["g1", "n"] == 3
    h = rep.histogram(bins=5)
    assert len(h["edges"]) == 6 and sum(h["counts"]["g0"]) == 4 and h["censored"]["g0"] == 1
    again = DistanceReport.from_json(__import__("json").loads(__import__("json").dumps(rep.to_json())))
    np.testing.assert_array_equal(again.distance, rep.distance)
    assert rep.summary(by="class").loc["b", "n"] == 2
