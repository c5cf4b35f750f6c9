"""``robfair certify``: per-class certified L2 robustness by randomized smoothing (Cohen et al. 2019)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from ..errors import ConfigError
from ..inert import term
from ..runfolder import CERTIFY_FILE
from ..utils import MAX_BOOTSTRAP, MAX_SEED, input_file, parse_number
from .app import _Bars, _progress, app, console, err_console, resume_from
from .options import ModelArgs, model_options


def _paths(out: Optional[Path], outcomes: Optional[Path]) -> tuple[Optional[Path], Optional[Path], Optional[Path]]:
    """(certify.json, outcomes CSV, resume checkpoint) from --out / --outcomes."""
    if out is None:
        return None, outcomes, None
    out = out.expanduser()
    if out.suffix.lower() != ".json":
        out = out / CERTIFY_FILE
    oc = outcomes if outcomes is not None else out.with_name(out.stem + "_outcomes.csv")
    return out, oc, out.with_name(f".{out.stem}.partial.npz")


def certify_table(rep, by: str = "class") -> Table:
    """Per class (group): n, smoothed accuracy, abstain rate, certified accuracy at each radius with
    its Wilson 95% interval, median certified radius and ACR."""
    df = rep.table(by)
    t = Table(title=f"certified accuracy % per {by} at L2 radius r [Wilson 95% CI] (sigma {rep.sigma:g}, n {rep.n}, alpha {rep.alpha:g})",
              title_justify="left", show_edge=False, pad_edge=False)
    t.add_column(by)
    show_acc = 0.0 not in rep.radii  # certified accuracy at radius 0 is the smoothed accuracy
    for c in ["n"] + (["smoothed acc"] if show_acc else []) + ["abstain"] + [f"r={r:g}" for r in rep.radii] + ["median R", "ACR"]:
        t.add_column(c, justify="right")
    pct = lambda v: "-" if v != v else f"{100 * v:.1f}"  # noqa: E731
    pct0 = lambda v: "-" if v != v else f"{100 * v:.0f}"  # noqa: E731
    cell = lambda row, c: f"{pct(row[c])} [{pct0(row[c + '_lo'])}, {pct0(row[c + '_hi'])}]"  # noqa: E731
    for name, row in df.iterrows():
        t.add_row(term(name), str(int(row["n"])), *([cell(row, "smoothed_acc")] if show_acc else []), pct(row["abstain"]),
                  *[cell(row, f"cert@{r:g}") for r in rep.radii],
                  "-" if row["median_radius"] != row["median_radius"] else f"{row['median_radius']:.3f}",
                  "-" if row["acr"] != row["acr"] else f"{row['acr']:.3f}", end_section=name == df.index[-2])
    return t


def gap_table(rep, by: str = "class", n_boot: int = 1000) -> Table:
    g = rep.gaps(by=by, n_boot=n_boot)
    t = Table(title=f"worst {by} and gap in certified accuracy % [bootstrap 95% CI]", title_justify="left",
              show_edge=False, pad_edge=False)
    for c in ("radius", "average", f"worst {by}", "worst", "gap", "worst stable"):
        t.add_column(c, justify="left" if c.startswith("worst ") and c != "worst stable" else "right")
    pct = lambda v: "-" if v != v else f"{100 * v:.1f}"  # noqa: E731
    for _, r in g.iterrows():
        ci = lambda s: f" [{pct(r[s + '_lo'])}, {pct(r[s + '_hi'])}]" if f"{s}_lo" in r else ""  # noqa: E731
        t.add_row(f"{r['radius']:g}", pct(r["avg"]), term(r["worst_group"]), pct(r["worst"]) + ci("worst"),
                  pct(r["gap"]) + ci("gap"), pct(r.get("worst_group_stability", float("nan"))))
    return t


@app.command()
@model_options
def certify(
    source: ModelArgs,
    data: str = typer.Option("digits", "--data", "-d", help="NAME[:PATH], e.g. digits, cifar10:~/data."),
    split: str = typer.Option("test", help="Which split: test or train."),
    sigma: str = typer.Option("0.25", help="Noise level of the smoothed classifier (L2, pixels in [0, 1])."),
    n0: int = typer.Option(100, "--n0", min=1, help="Noise draws that select the top class."),
    n: int = typer.Option(100_000, "--n", min=1, help="Noise draws that estimate its probability."),
    alpha: float = typer.Option(0.001, help="Failure probability of each certificate."),
    batch_size: int = typer.Option(1000, min=1, help="Noise draws per forward pass."),
    radius: List[str] = typer.Option([], "--radius", "-r", help="Radius of the tables (repeat); default 0, sigma/2, "
                                     "sigma, 1.5 sigma, 2 sigma."),
    per_class: Optional[int] = typer.Option(None, "--per-class", min=1, help="Certify the first N samples of each class  \\[default: every sample (with --skip)]"),
    skip: int = typer.Option(1, min=1, help="Certify every k-th sample (Cohen et al. use 20 on CIFAR-10)."),
    groups: Optional[str] = typer.Option(None, "--groups", help="Protected attribute to group by (as in audit)  \\[default: the classes]"),
    seed: int = typer.Option(0, min=0, max=MAX_SEED, help="Seeds every sample's noise."),
    device: str = typer.Option("auto", help="auto, cpu, cuda, cuda:1, mps."),
    precision: str = typer.Option("fp32", help="fp32, bf16 or fp16 autocast (as audit: only where native)."),
    channels_last: Optional[bool] = typer.Option(None, "--channels-last/--no-channels-last",
                                                 help="Channels-last memory format (same certificates in fp32)  "
                                                      "\\[default: on for convolutional models]"),
    bootstrap: int = typer.Option(1000, min=0, max=MAX_BOOTSTRAP, help="Bootstrap resamples for worst-class and gap intervals."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write certify.json here (a .json file or a folder); "
                                       "also the per-sample outcomes and, while running, a resume checkpoint  \\[default: not written]"),
    outcomes: Optional[Path] = typer.Option(None, help="Per-sample outcomes CSV (default: <out>_outcomes.csv)."),
    html: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML page (curves per class, tables)  \\[default: not written]"),
    restart: bool = typer.Option(False, "--restart", help="Discard a checkpoint of an interrupted run instead of resuming."),
    check_radius: Optional[str] = typer.Option(None, "--check-radius", help="Sanity-check the certificates at this "
                                               "radius with an L2 attack on the smoothed classifier  \\[default: no check]"),
    check_attack: str = typer.Option("pgd20-l2", help="L2 attack of the check."),
    check_per_class: int = typer.Option(20, min=1, help="Samples per class of the check."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing output files."),
) -> None:
    """Certify per class (group) with randomized smoothing: certified accuracy at radii with intervals, abstain rate, median radius."""
    model, arch, arch_kwargs, model_dir = source.model, source.arch, source.arch_kwargs, source.model_dir
    mean, std, class_map = source.mean, source.std, source.class_map
    from .. import certifying as C
    from ..data import load_dataset
    from .options import check_classes, load_model_arg, model_label

    C.check_draws(n0, n, batch_size, cli=True)  # before anything is read: --n 10**12 is refused at once
    sigma_v = parse_number(sigma, "sigma", minimum=None)
    if not sigma_v > 0:
        raise ConfigError(f"--sigma must be > 0, got {sigma}; pass e.g. 0.25")
    radii = [parse_number(r, "radius") for r in radius] or None
    check_r = parse_number(check_radius, "--check-radius") if check_radius is not None else None
    if not 0 < alpha < 1:
        raise ConfigError(f"--alpha must be in (0, 1), got {alpha:g}; pass e.g. 0.001")
    if html is not None and html.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--html {html} must end in .html")
    if check_r is not None:
        from ..attacks import get_attack

        if getattr(get_attack(check_attack), "norm", None) != "l2":
            raise ConfigError(f"--check-attack must be an L2 attack, got '{check_attack}'; pass e.g. pgd20-l2")
    out_path, oc_path, ck_path = _paths(out, outcomes)
    from ..safeio import ResultSet, check_output_file, claim_outputs
    from ..utils import resolve_device

    # the outputs are checked and claimed before the first noise draw (a run's results are never replaced unless
    # asked; a second certify writing them, or resuming the same checkpoint, is refused)
    if out_path is not None:
        out_path = check_output_file(out_path, "--out", overwrite=overwrite, suffixes=(".json",), claim=True)
    if oc_path is not None:
        oc_path = check_output_file(oc_path, "--outcomes", overwrite=overwrite, suffixes=(".csv",), claim=True)
    if html is not None:
        html = check_output_file(html, "--html", overwrite=overwrite, claim=True)
    claim_outputs([ck_path], "--out")
    from ..hardware import check_precision

    check_precision(precision, resolve_device(device))  # before the model and data are read
    net, meta = load_model_arg(model, arch, arch_kwargs, model_dir, mean, std)  # any source audit accepts
    ds = load_dataset(data, split=split, groups=groups)
    ds = check_classes(meta, ds, class_map)
    if ck_path is not None and ck_path.exists():
        if restart:
            ck_path.unlink()
        else:
            input_file(ck_path, "certify checkpoint", error=ConfigError)  # a FIFO there: refused, never read
            err_console.print(f"resuming from {ck_path} (pass --restart to start over)", highlight=False)
    resume_from(ck_path)  # an interrupt names it only once it exists
    with _progress() as p:
        rep = C.certify(net, ds, sigma_v, n0=n0, n=n, alpha=alpha, batch_size=batch_size, radii=radii, seed=seed,
                        device=device, per_class=per_class, skip=skip, checkpoint=ck_path, progress=_Bars(p),
                        precision=precision, channels_last=channels_last)
    rep.meta.update(checkpoint=str(model), data=data, split=split, class_order=meta.get("class_order"))
    if check_r is not None:
        with _progress() as p:
            C.attack_check(net, ds, rep, check_r, attack=check_attack, per_class=check_per_class,
                           batch_size=batch_size, seed=seed, device=device)
    from ..report.text import fit_table

    for by in ["class"] + (["group"] if rep.has_groups else []):
        console.print(fit_table(console, certify_table(rep, by)))
        console.print(fit_table(console, gap_table(rep, by, n_boot=bootstrap)))
    for line in rep.summary_lines():
        console.print(term(line), highlight=False)
    for chk in rep.meta.get("attack_check", []):
        console.print(term(C.check_line(chk)), highlight=False)
    for w in rep.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {term(w)}", highlight=False)
    console.print(f"{rep.meta['n_samples']} samples, {rep.meta['noise_draws']} noise draws in {rep.meta['seconds']:.1f} s "
                  f"({rep.meta['draws_per_second'] or 0:.0f} draws/s on {rep.meta['device']})", highlight=False)
    payload = rep.to_json(bootstrap=bootstrap) if (out_path is not None or html is not None) else None
    page = None
    if html is not None:  # everything is computed before the first file is written
        from ..report.certify import render_certify_html

        page = render_certify_html({model_label(model): payload}, title=f"certified robustness: {model_label(model)} on {data}")
    with ResultSet() as files:  # the outcomes, the page, then certify.json: all of them or none
        if oc_path is not None:
            with files.file(oc_path) as tmp:
                rep.write_outcomes(tmp)
        if page is not None:
            with files.file(html) as tmp:
                tmp.write_text(page, encoding="utf-8")
        if out_path is not None:
            from ..utils import write_json

            with files.file(out_path, last=True) as tmp:
                write_json(tmp, payload)
    for path in (oc_path, out_path, html):
        if path is not None:
            console.print(f"wrote {term(path)}", highlight=False)
    if ck_path is not None and ck_path.exists():  # the result is in place: the resume checkpoint has done its work
        ck_path.unlink()
