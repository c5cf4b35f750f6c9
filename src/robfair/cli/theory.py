"""``robfair theory gaussian``: the closed forms of Xu et al. (2021, section 3) next to trained linear models
(docs/groups-fairness.md, "Theory lab")."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import ConfigError
from ..inert import term
from ..utils import MAX_SEED, parse_eps, parse_number
from .app import app, console

theory_app = typer.Typer(no_args_is_help=True, help="Exact fixtures from the theory of robust fairness (docs/groups-fairness.md, section 6).")
app.add_typer(theory_app, name="theory")


def _floats(text: str, what: str) -> list[float]:
    try:
        return [parse_number(t, what, minimum=None) for t in text.split(",") if t.strip()]
    except Exception:
        raise ConfigError(f"{what} {text!r} must be comma-separated numbers, e.g. 0.8,0.2") from None


def _fmt(v: float) -> str:
    return "-" if v != v else f"{v:.4f}"


@theory_app.command("gaussian")
def gaussian(
    d: int = typer.Option(50, "--d", min=1, max=100_000, help="Input dimension."),
    eta: str = typer.Option("0.1", "--eta", help="Per-coordinate class mean: x|y ~ N(y*eta*1, ...)."),
    K: str = typer.Option("2", "--K", help="Std ratio of class +1 (hard) to class -1 (easy)."),
    eps: str = typer.Option("0.05", "--eps", help="L-inf radius of robust training and robust error (< eta)."),
    sigma: str = typer.Option("1", "--sigma", help="Std of class -1."),
    n: int = typer.Option(20000, "--n", min=2, max=10_000_000, help="Training samples (and fresh test samples for Monte Carlo)."),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED),
    group_sizes: str = typer.Option("1", "--group-sizes", help="Protected-group shares, e.g. 0.8,0.2."),
    group_scales: str = typer.Option("1", "--group-scales", help="Per-group std multiplier, e.g. 1,1.5."),
    threshold: str = typer.Option("logistic", "--threshold",
                                  help="logistic: the trained bias; 01: bias refit to the empirical 0-1 error."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the rows as JSON here  \\[default: not written]"),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out file."),
) -> None:
    """Closed form vs trained vs Monte Carlo on the binary Gaussian mixture of Xu et al. (2021); see
    docs/groups-fairness.md, section 6 "Theory lab"."""
    from ..safeio import check_output_file
    from ..theory import gaussian_lab

    if out is not None:
        out = check_output_file(out, "--out", overwrite=overwrite, suffixes=(".json",), claim=True)
    if d * n > 200_000_000:
        raise ConfigError(f"--d {d} x --n {n} is {d * n:.2g} numbers (twice: train and test); keep d * n "
                          "below 2e8, e.g. --n 20000 --d 50")
    if threshold not in ("logistic", "01"):
        raise ConfigError(f"--threshold must be logistic or 01, got {threshold!r}")
    res = gaussian_lab(d=d, eta=parse_eps(eta, "eta"), K=parse_number(K, "K"), eps=parse_eps(eps),
                       sigma=parse_number(sigma, "sigma"), n=n, seed=seed,
                       group_sizes=_floats(group_sizes, "--group-sizes"),
                       group_scales=_floats(group_scales, "--group-scales"), threshold=threshold)
    s = res.setting
    groups = len(s["group_sizes"]) > 1
    t = Table(title=(f"Gaussian mixture d={s['d']}, eta={s['eta']:g}, sigma={s['sigma']:g}, K={s['K']:g}, "
                     f"eps={s['eps']:g} (L-inf), n={s['n']}, seed={s['seed']}; errors per class "
                     "(-1 easy, +1 hard)"), title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("model")
    if groups:
        t.add_column("group", justify="right")
    t.add_column("class", justify="right")
    for metric in ("std", "rob"):
        t.add_column(f"{metric} err closed", justify="right")
        t.add_column(f"{metric} err trained", justify="right")
        t.add_column(f"{metric} err MC [95% CI]", justify="right", no_wrap=True)
    for r in res.rows:
        cells = [r["model"]] + ([str(r["group"])] if groups else []) + [f"{r['cls']:+d}"]
        for m in ("std_err", "rob_err"):
            cells += [_fmt(r[f"{m}_closed"]), _fmt(r[f"{m}_trained"]),
                      f"{_fmt(r[f'{m}_mc'])} [{_fmt(r[f'{m}_mc_lo'])}, {_fmt(r[f'{m}_mc_hi'])}]"]
        t.add_row(*cells)
    console.print(t)
    console.print("closed form: the optimal natural / robust linear classifier of Xu et al. (2021), exact "
                  "(docs/groups-fairness.md, section 6). "
                  "trained: logistic regression (natural) and adversarial training with the exact inner "
                  f"max x - eps*y*sign(w) (robust), bias: {threshold}; exact errors of the trained w, b, and "
                  f"Monte Carlo on {s['n_test']} fresh samples." + (
                      " With groups, 'closed' is the one-group optimal classifier's exact error on each group."
                      if groups else "") + (
                      " The logistic bias is not the 0-1 optimum when the classes have different variances; "
                      "--threshold 01 refits it." if threshold == "logistic" else ""), highlight=False)
    if out is not None:
        from ..utils import write_json

        write_json(out, res.to_json())
        console.print(f"wrote {term(out)}", highlight=False)
