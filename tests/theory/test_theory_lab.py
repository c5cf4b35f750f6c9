"""The theory lab: group sampler, exact per-group errors, trained linear classifiers, and the spec
section 4 numbers through the library and the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from robfair.errors import ConfigError
from robfair.theory import (fit_threshold, gaussian_lab, group_errors, linear_robust_error, mixture_dataset,
                            sample_group_mixture, train_linear)

PINNED = {("natural", -1): 0.1184, ("natural", 1): 0.4540, ("robust", -1): 0.0598, ("robust", 1): 0.5284}


def test_group_sampler_shares_and_scales():
    x, y, g = sample_group_mixture(40_000, 4, 0.2, 1.0, 2.0, group_sizes=(3, 1), group_scales=(1.0, 1.5), seed=0)
    assert abs((g == 1).mean() - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 40_000)
    for gi, s in ((0, 1.0), (1, 1.5)):
        for cls, k in ((-1, 1.0), (1, 2.0)):
            m = (g == gi) & (y == cls)
            assert x[m].mean() == pytest.approx(0.2 * cls, abs=0.03)
            assert x[m].std() == pytest.approx(s * k, rel=0.02)
    with pytest.raises(ConfigError, match="one scale per group"):
        sample_group_mixture(10, 2, 0.1, 1.0, 2.0, group_sizes=(1, 1, 1), group_scales=(1, 2))


def test_group_errors_match_monte_carlo():
    rng = np.random.default_rng(3)
    w, b = rng.normal(size=5), 0.3
    x, y, g = sample_group_mixture(100_000, 5, 0.3, 1.0, 1.5, group_sizes=(1, 1), group_scales=(1.0, 2.0), seed=1)
    exact = group_errors(w, b, 0.3, 1.0, 1.5, 0.05, group_scales=(1.0, 2.0))
    rob = linear_robust_error(w, b, x, y, 0.05)
    for gi in (0, 1):
        for cls, key in ((-1, "neg"), (1, "pos")):
            m = (g == gi) & (y == cls)
            p = getattr(exact[gi]["rob_err"], key)
            assert abs(rob[m].mean() - p) < 4 * math.sqrt(p * (1 - p) / m.sum())


def test_train_linear_robust_loss_is_the_loss_at_the_worst_point():
    import torch

    x, y, _ = sample_group_mixture(2000, 6, 0.3, 1.0, 1.0, seed=2)
    w, b = train_linear(x, y, eps=0.1)
    # the closed-form inner max x' = x - eps*y*sign(w) is the worst point: no vertex of the box is worse
    margin = y * ((x - 0.1 * y[:, None] * np.sign(w)[None]) @ w + b)
    assert np.allclose(margin, y * (x @ w + b) - 0.1 * np.abs(w).sum())
    # stationarity of the robust logistic objective at the solution (a convex problem)
    wt = torch.tensor(w, requires_grad=True)
    bt = torch.tensor(b, requires_grad=True)
    xt, yt = torch.tensor(x), torch.tensor(y, dtype=torch.float64)
    loss = torch.nn.functional.softplus(-(yt * (xt @ wt + bt) - 0.1 * wt.abs().sum())).mean()
    loss.backward()
    assert float(wt.grad.abs().max()) < 1e-4 and abs(float(bt.grad)) < 1e-4
    wn, bn = train_linear(x, y)
    rloss = lambda ww, bb: np.logaddexp(0, -(y * (x @ ww + bb) - 0.1 * np.abs(ww).sum())).mean()  # noqa: E731
    assert rloss(w, b) < rloss(wn, bn) - 1e-3  # the natural solution is not robust-optimal
    assert np.abs(w).sum() < np.abs(wn).sum()  # the L1 penalty eps*||w||_1 shrinks the weights


def test_fit_threshold_is_the_empirical_optimum():
    rng = np.random.default_rng(0)
    x, y, _ = sample_group_mixture(500, 3, 0.4, 1.0, 2.0, seed=4)
    w = rng.normal(size=3) + 1
    for eps in (0.0, 0.1):
        b = fit_threshold(w, x, y, eps=eps)
        err = lambda bb: 0.5 * sum(linear_robust_error(w, bb, x, y, eps)[y == c].mean() for c in (-1, 1))  # noqa: E731
        grid = np.linspace(-5, 5, 1001)
        assert err(b) <= min(err(bb) for bb in grid) + 1e-12


def test_lab_pins_the_closed_forms_and_trained_matches_monte_carlo():
    res = gaussian_lab(n=4000, seed=0, threshold="01")
    rows = {(r["model"], r["cls"]): r for r in res.rows}
    for key, value in PINNED.items():
        assert round(rows[key]["std_err_closed"], 4) == value
    for r in res.rows:
        for m in ("std_err", "rob_err"):
            p, n = r[f"{m}_trained"], r["n_test"]
            assert abs(r[f"{m}_mc"] - p) < 4.5 * math.sqrt(p * (1 - p) / n)  # exact error of the trained w, b
    # with the 0-1 bias the trained classifiers approach the optimum: the theory's direction appears
    assert rows[("robust", -1)]["std_err_trained"] < rows[("natural", -1)]["std_err_trained"]
    assert rows[("robust", 1)]["std_err_trained"] > rows[("natural", 1)]["std_err_trained"]
    grp = gaussian_lab(n=1000, group_sizes=(0.5, 0.5), group_scales=(1.0, 1.5))
    assert {r["group"] for r in grp.rows} == {0, 1} and len(grp.rows) == 8


def test_mixture_dataset_is_a_valid_affine_image_dataset():
    x, y, g = sample_group_mixture(50, 4, 0.2, 1.0, 1.0, group_sizes=(1, 1), seed=0)
    ds = mixture_dataset(x, y, g, scale=0.1, group_names=["a", "b"])
    assert ds.x.shape == (50, 1, 1, 4) and ds.classes == ["-1", "+1"] and ds.group_names == ["a", "b"]
    assert np.allclose(ds.x.numpy().reshape(50, 4), np.clip(0.5 + 0.1 * x, 0, 1), atol=1e-7)
    assert ds.y.tolist() == (y > 0).astype(int).tolist()


def test_cli_theory_gaussian_prints_the_pinned_numbers(tmp_path, capsys):
    from robfair.cli import main

    out = tmp_path / "lab.json"
    with pytest.raises(SystemExit) as e:
        main(["theory", "gaussian", "--d", "50", "--eta", "0.1", "--K", "2", "--eps", "0.05", "--n", "2000",
              "--seed", "0", "--out", str(out)])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for value in PINNED.values():
        assert f"{value:.4f}" in text
    rows = json.loads(out.read_text())["rows"]
    assert {(r["model"], r["cls"]): round(r["std_err_closed"], 4) for r in rows} == PINNED
    with pytest.raises(SystemExit) as e:
        main(["theory", "gaussian", "--eps", "0.2", "--out", str(tmp_path / "bad.json")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "eps must satisfy" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad.json").exists()
