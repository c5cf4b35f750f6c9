"""``robfair audit``: its options, parsed once into :class:`AuditOptions` at the edge and handed on by
name, and what it prints and writes (audit.json, outcomes.npz, examples.npz, the --plot PNG).

The radius walks one way: ``--eps`` (or the checkpoint's training eps) becomes a checked
:class:`robfair.attacks.radius.Radius` here (:func:`robfair.cli.options.image_radius`: parsed, capped
for [0, 1] images), :func:`robfair.audit` and the engine take it as it is, and the attacks broadcast
each batch's slice of it without checking it again; ``--eps-sweep`` likewise becomes a
:class:`~robfair.attacks.radius.Sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.table import Table

from ..errors import ConfigError
from ..inert import term
from ..runfolder import RunFolder, audit_target, is_audit_file, is_run_folder
from ..safeio import check_output_file
from ..utils import MAX_BOOTSTRAP, MAX_SEED
from .app import _Bars, _progress, app, console, printed_warnings, quiet_rank
from .options import (PROBE_OPTION, PROBE_TOLERANCE_OPTION, ModelArgs, check_classes, checkpoint_radius, display_label,
                      image_radius, image_sweep, load_model_arg, model_label, model_options, probe_options)

if TYPE_CHECKING:  # lazy: typing only
    from ..attacks.radius import Radius, Sweep


@dataclass(frozen=True)
class AuditOptions:
    """``robfair audit``'s options as values: each parsed and checked once, by :meth:`parse`, before any
    file is read; :func:`run_audit_command` and the library read them by name and check none again
    (what depends on the machine or the files, the device, the outputs, the model and the data, is
    checked there, before the first batch)."""

    source: ModelArgs
    data: str
    split: str
    attacks: tuple[str, ...]
    #: the radius, checked (None: the checkpoint's training eps, read with the model)
    eps: Optional["Radius"]
    allow_large_eps: bool
    batch_size: int
    device: str
    seed: int
    early_exit: bool
    #: fp32 / bf16 / fp16, checked against the device before the model is read (hardware.check_precision)
    precision: str
    channels_last: Optional[bool]
    bootstrap: int
    out: Optional[Path]
    plot: Optional[Path]
    overwrite: bool
    groups: Optional[str]
    #: the radii of --eps-sweep, checked (None: no sweep)
    eps_sweep: Optional["Sweep"]
    distances: bool
    #: the probe's budget (a multiple of the audit's compute; inf: all) and tolerance (a fraction); None: defaults
    probe: Optional[float]
    probe_tolerance: Optional[float]
    examples: int
    autoattack_state: Optional[Path]

    @classmethod
    def parse(cls, *, source: ModelArgs, data: str, split: str, attacks: List[str], eps: Optional[str],
              allow_large_eps: bool, batch_size: int, device: str, seed: int, early_exit: bool, precision: str,
              channels_last: Optional[bool], bootstrap: int, out: Optional[Path], plot: Optional[Path],
              overwrite: bool, groups: Optional[str], eps_sweep: Optional[str], distances: bool,
              probe: Optional[str], probe_tolerance: Optional[float], examples: int,
              autoattack_state: Optional[Path]) -> "AuditOptions":
        """The options as typed on the command line -> values, or one line naming the option and the fix."""
        from ..attacks import parse_attack_name

        for name in attacks:
            parse_attack_name(name)  # an unknown name is refused here, naming the forms it could be
        budget, tolerance = probe_options(probe, probe_tolerance)
        return cls(source=source, data=data, split=split, attacks=tuple(attacks),
                   eps=None if eps is None else image_radius(eps, attacks, allow_large=allow_large_eps),
                   allow_large_eps=allow_large_eps, batch_size=batch_size, device=device, seed=seed,
                   early_exit=early_exit, precision=precision, channels_last=channels_last, bootstrap=bootstrap,
                   out=out, plot=plot, overwrite=overwrite, groups=groups,
                   eps_sweep=None if eps_sweep is None else image_sweep(eps_sweep, attacks, allow_large=allow_large_eps),
                   distances=distances, probe=budget, probe_tolerance=tolerance, examples=examples,
                   autoattack_state=autoattack_state)


@app.command()
@model_options
def audit(
    source: ModelArgs,
    data: str = typer.Option("digits", "--data", "-d", help="NAME[:PATH][,limit=N][,per_class=N], e.g. digits, cifar10:~/data."),
    split: str = typer.Option("test", help="Which split to audit: test or train."),
    attack: List[str] = typer.Option(["pgd20"], "--attack", "-a", help="Attack name; repeat for several (fgsm, pgd20, pgd20-l2, autoattack...)."),
    eps: Optional[str] = typer.Option(None, help="Radius, e.g. 0.1 or 8/255  \\[default: the checkpoint's training eps, else 8/255]"),
    batch_size: int = typer.Option(256, min=1, help="Samples per batch."),
    device: str = typer.Option("auto", help="auto, cpu, cuda, cuda:1, mps."),
    seed: int = typer.Option(0, min=0, max=MAX_SEED, help="Seeds the attacks' random starts."),
    early_exit: bool = typer.Option(True, help="Stop attacking samples already fooled (same result, faster)."),
    precision: str = typer.Option("fp32", help="fp32, bf16 or fp16 autocast."),
    channels_last: Optional[bool] = typer.Option(None, "--channels-last/--no-channels-last",
                                                 help="Channels-last memory format (same predictions)  \\[default: on "
                                                      "for convolutional models]"),
    bootstrap: int = typer.Option(1000, min=0, max=MAX_BOOTSTRAP, help="Bootstrap resamples for worst/gap intervals (0: none)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write audit.json here (a .json file or a folder). "
                                       "A run folder's own audit.json is only replaced, with --overwrite, by an audit "
                                       "of that run's best.pt on its split  \\[default: not written]"),
    plot: Optional[Path] = typer.Option(None, help="Write a per-class bar chart PNG here  \\[default: not written]"),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing output files."),
    allow_large_eps: bool = typer.Option(False, "--allow-large-eps", help="Accept an L-inf eps above 1 ([0,1] images)."),
    groups: Optional[str] = typer.Option(None, "--groups", help="Protected attribute to group by: utkface race/gender/age, "
                                         "celeba any attribute, imagefolder a groups.csv column, npz g; class: the classes  \\[default: the classes]"),
    eps_sweep: Optional[str] = typer.Option(None, "--eps-sweep", help="START:STOP:N, e.g. 0:16/255:9: robust accuracy "
                                            "vs eps per group (one pass; Wilson intervals; shown by `robfair report`)  \\[default: no sweep]"),
    distances: bool = typer.Option(False, "--distances", help="Distance of each sample to the decision boundary, "
                                   "summarized per group (exact for linear models, else bisection with the first attack)."),
    probe: Optional[str] = PROBE_OPTION,
    probe_tolerance: Optional[float] = PROBE_TOLERANCE_OPTION,
    examples: int = typer.Option(8, "--examples", min=0, help="With --out: keep N samples of the weakest class as "
                                 "clean / adversarial images for `robfair report` (examples.npz; their batches are "
                                 "attacked once more; 0: none)."),
    autoattack_state: Optional[Path] = typer.Option(None, "--autoattack-state", help="While AutoAttack runs (--attack "
                                                    "autoattack, the probe), keep the official package's evaluation "
                                                    "state of the batch being attacked in this .json file (a progress "
                                                    "record, replaced per batch, never resumed); under torchrun each "
                                                    "rank writes its own, NAME.rank<R>.json  \\[default: none]"),
) -> None:
    """Audit a model: per-class (per-group) clean and robust accuracy with intervals.

    Under torchrun (`torchrun --nproc-per-node N -m robfair audit ...`) every rank runs whole batches of the data (the reliability probe and an eps sweep included) and rank 0 writes the same files as one process would (see docs/audit-json.md, "Sharded audits")."""  # noqa: E501 - one paragraph: the help wraps it
    from ..distributed import cleanup, env_info, setup

    info = env_info()
    if info.enabled:
        quiet_rank(info)  # before the options are parsed: a refusal is one line, from rank 0
    opts = AuditOptions.parse(source=source, data=data, split=split, attacks=attack, eps=eps,
                              allow_large_eps=allow_large_eps, batch_size=batch_size, device=device, seed=seed,
                              early_exit=early_exit, precision=precision, channels_last=channels_last,
                              bootstrap=bootstrap, out=out, plot=plot, overwrite=overwrite, groups=groups,
                              eps_sweep=eps_sweep, distances=distances, probe=probe, probe_tolerance=probe_tolerance,
                              examples=examples, autoattack_state=autoattack_state)
    if not info.enabled:
        with printed_warnings():
            run_audit_command(opts)
        return
    dist_info, dev, owns = setup(device)
    try:
        with printed_warnings():
            run_audit_command(opts, dist=dist_info, rank_device=str(dev))
    finally:
        if owns:
            cleanup(dist_info)


def rank_file(path: Path, dist) -> Path:
    """``path`` in one process; ``NAME.rank<R>.SUFFIX`` on rank R of a torchrun command, so no two
    ranks ever write one file."""
    path = Path(path).expanduser()
    return path if dist is None else path.with_name(f"{path.stem}.rank{dist.rank}{path.suffix}")


def run_audit_command(opts: AuditOptions, *, dist=None, rank_device: Optional[str] = None) -> None:
    """``robfair audit`` with its options parsed (:class:`AuditOptions`): refuse what the machine or the
    files refuse (outputs, device, model, data) before the first batch, audit, print, write."""
    from ..attacks.autoattack import state_file
    from ..auditing import audit as run_audit
    from ..auditing.distributed import run_on_every_rank
    from ..auditing.examples import examples_path
    from ..data import load_dataset
    from ..hardware import check_precision
    from ..report.text import print_audit
    from ..runfolder import outcomes_path
    from ..utils import resolve_device

    src = opts.source
    main_rank = dist is None or dist.is_main

    def prepare():
        # everything that can be refused is refused before the first batch (on every rank): outputs, device, model, data
        # rank 0 claims the outputs it writes (a second robfair process writing them is refused), each rank its state file
        out_path = _audit_out(opts.out, model=src.model, split=opts.split, overwrite=opts.overwrite, data=opts.data,
                              groups=opts.groups, claim=main_rank)
        plot_path = check_output_file(opts.plot, "--plot", overwrite=opts.overwrite, suffixes=(".png",),
                                      claim=main_rank) if opts.plot is not None else None
        if out_path is not None and plot_path is not None and out_path.resolve() == plot_path.resolve():
            raise ConfigError("--out and --plot name the same file; give them different paths")
        state_path = None
        if opts.autoattack_state is not None:
            state_path = check_output_file(rank_file(opts.autoattack_state, dist), "--autoattack-state",
                                           overwrite=opts.overwrite, suffixes=(".json",), claim=True)
            taken = [p.resolve() for p in (out_path, plot_path) if p is not None]
            if out_path is not None:
                taken += [outcomes_path(out_path).resolve(), examples_path(out_path).resolve()]
            if state_path.resolve() in taken:
                raise ConfigError(f"--autoattack-state {state_path} is also an output of the audit; give it its own name")
        check_precision(opts.precision, resolve_device(opts.device))  # the CLI's own option name, before the model is read
        net, meta = load_model_arg(src.model, src.arch, src.arch_kwargs, src.model_dir, src.mean, src.std)
        radius = opts.eps if opts.eps is not None else checkpoint_radius(meta, opts.attacks,
                                                                          allow_large=opts.allow_large_eps)
        ds = load_dataset(opts.data, split=opts.split, groups=opts.groups)
        ds = check_classes(meta, ds, src.class_map)
        return out_path, plot_path, state_path, net, meta, radius, ds

    if dist is None:
        out_path, plot_path, state_path, net, meta, radius, ds = prepare()
    else:  # a refusal on one rank stops every rank, with its one line
        out_path, plot_path, state_path, net, meta, radius, ds = run_on_every_rank(prepare, dist)
    run_device = rank_device or opts.device
    eps_value = radius.max()  # a checkpoint's or the option's one radius (the CLI takes no per-sample eps)
    with _progress() as p, state_file(state_path):
        rep = run_audit(net, ds, attacks=list(opts.attacks), eps=radius, batch_size=opts.batch_size, device=run_device,
                        seed=opts.seed, early_exit=opts.early_exit, precision=opts.precision,
                        channels_last=opts.channels_last, probe=opts.probe, probe_tolerance=opts.probe_tolerance,
                        progress=_Bars(p) if main_rank else None, classes=ds.classes, dist=dist,
                        examples=opts.examples if out_path is not None and main_rank else 0)
    rep.meta["checkpoint"] = str(src.model)
    rep.meta["split"] = opts.split
    rep.meta["model_source"] = meta.get("source")
    rep.meta["class_order"] = meta.get("class_order")
    if main_rank:
        print_audit(console, rep, title=f"{src.model} on {opts.data} ({opts.split}), eps={eps_value:g}",
                    n_boot=opts.bootstrap)
    with state_file(state_path):
        extras = _audit_groups_sweep_distances(net, ds, rep, opts, eps_value, device=run_device, dist=dist)
    if not main_rank:  # rank 0 writes the files; this rank's part is done
        return
    from ..safeio import ResultSet

    with ResultSet() as files:  # the figure, the outcomes and examples, then audit.json: all of them or none
        if plot_path is not None:
            from ..report.plots import classwise_bars

            with files.file(plot_path) as tmp:
                classwise_bars({display_label(src.model): rep}, tmp,
                               title=f"{opts.data} ({opts.split}), eps={eps_value:.4g}, {_attack_label(rep)}")
        if out_path is not None:
            rep.save(out_path, bootstrap=opts.bootstrap, extras=extras, into=files)
    if out_path is not None:
        also = f" and {term(examples_path(out_path))}" if rep.examples is not None else ""
        console.print(f"wrote {term(out_path)}, {term(outcomes_path(out_path))}{also}", highlight=False)
    if plot_path is not None:
        console.print(f"wrote {term(plot_path)}", highlight=False)


def _attack_label(rep) -> str:
    attacks = list(rep.attacks)
    return attacks[0] if len(attacks) == 1 else "worst case of " + ", ".join(attacks)


def _audit_groups_sweep_distances(net, ds, rep, opts: AuditOptions, eps_value: float, *, device: str,
                                   dist=None) -> dict:
    """The audit's group tables (when the groups are not the classes), the eps sweep and the
    distances; returns their JSON for audit.json. Their per-sample minimal radii join the audit's
    outcomes (``min_eps``). Under torchrun (``dist``) the sweep and the distances are sharded like
    the audit (whole batches per rank, each seeded from its first sample's dataset index)."""
    from ..report.text import fit_table, group_table

    extras: dict = {}
    main = rep.main
    if ds.g is not None:
        console.print(group_table(main, title=f"per class, {main.attack}", by="class"))
        console.print(fit_table(console, _cell_table(main, title=f"per (group x class) cell, {main.attack}"), key_columns=2))
        console.print(_fairness_line(main))
    attacks, sweep_values = list(opts.attacks), opts.eps_sweep
    if sweep_values is not None:
        from ..auditing.eps_sweep import eps_sweep as run_sweep

        with _progress() as p:
            sweep = run_sweep(net, ds, attacks, sweep_values, batch_size=opts.batch_size, device=device, seed=opts.seed,
                              precision=opts.precision, channels_last=opts.channels_last, early_exit=opts.early_exit,
                              progress=_Bars(p) if dist is None or dist.is_main else None, dist=dist)
        extras["eps_sweep"] = {}
        for name in sweep.attacks:
            view = sweep.view(name)
            console.print(fit_table(console, _sweep_table(view)))
            extras["eps_sweep"][name] = view.to_json()
        for w in sweep.meta.get("warnings", []):
            console.print(f"[yellow]warning (eps sweep):[/yellow] {w}")
        if rep.outcomes is not None:
            rep.outcomes.min_eps.update(sweep.outcomes.min_eps)
    if opts.distances:
        from ..auditing.distances import boundary_distances

        eps_max = max(2 * eps_value, max(sweep_values) if sweep_values else 0.0) or 8 / 255
        with _progress() as p:
            drep = boundary_distances(net, ds, "auto", attack=attacks[0], eps_max=eps_max, batch_size=opts.batch_size,
                                      device=device, seed=opts.seed, dist=dist,
                                      progress=_Bars(p) if dist is None or dist.is_main else None)
        console.print(_distance_table(drep))
        extras["distances"] = drep.to_json()
        if rep.outcomes is not None:
            rep.outcomes.min_eps["distance"] = drep.distance
    return extras


def _cell_table(rep, *, title: str) -> Table:
    """One row per non-empty (group, class) cell: n, clean and robust accuracy with Wilson intervals."""
    df = rep.by_cell
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for c in ("group", "class"):
        t.add_column(c)
    for c in ("n", "clean acc % [95% CI]", "robust acc % [95% CI]", "bndy err %"):
        t.add_column(c, justify="right")
    pct = lambda v: "-" if v != v else f"{100 * v:.1f}"  # noqa: E731
    for (g, k), row in df.iterrows():
        t.add_row(term(g), term(k), str(int(row["n"])),
                  f"{pct(row['clean_acc'])} [{pct(row['clean_acc_lo'])}, {pct(row['clean_acc_hi'])}]",
                  f"{pct(row['rob_acc'])} [{pct(row['rob_acc_lo'])}, {pct(row['rob_acc_hi'])}]", pct(row["bndy_err"]))
    return t


def _fairness_line(rep) -> str:
    """Tran's fairness violations over the groups: accuracy parity (clean, robust), equal opportunity."""
    agg = rep.aggregates()
    line = (f"Fairness over groups: accuracy parity max_g |acc_g - acc| clean {100 * agg['clean_acc']['parity']:.1f} pts, "
            f"robust {100 * agg['rob_acc']['parity']:.1f} pts")
    if rep.num_classes == 2:
        eo = rep.equal_opportunity(positive=1)
        line += (f"; equal opportunity (TPR of '{term(eo['positive'])}') difference clean {100 * eo['clean_difference']:.1f} pts, "
                 f"robust {100 * eo['robust_difference']:.1f} pts")
    return line


def _sweep_table(sweep) -> Table:
    """Robust accuracy vs eps: one row per radius, one column per group (Wilson 95% CI), and all."""
    t = Table(title=f"robust acc % vs eps, {sweep.attack} [95% CI]{' (monotone)' if sweep.monotone else ''}",
              title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("eps", justify="right")
    names = list(sweep.reports[0].group_names)
    for name in names:
        t.add_column(term(name), justify="right")
    t.add_column("all", justify="right")
    pct = lambda v: "-" if v != v else f"{100 * v:.1f}"  # noqa: E731
    for e, r in zip(sweep.eps, sweep.reports):
        bg = r.by_group
        cells = [f"{pct(bg.loc[n, 'rob_acc'])} [{pct(bg.loc[n, 'rob_acc_lo'])}, {pct(bg.loc[n, 'rob_acc_hi'])}]"
                 for n in names]
        t.add_row(f"{e:.4g}", *cells, pct(r.overall["rob_acc"]))
    return t


def _distance_table(dist) -> Table:
    """Per group: distance to the boundary of the correctly classified samples (mean, quantiles)."""
    how = {"exact": "exact, [0,1] box ignored", "linearized": "linearized"}.get(dist.method) or (
        f"bisection, {dist.meta.get('attack')} up to eps {dist.meta.get('eps_max'):.4g}")
    t = Table(title=f"distance to the decision boundary ({dist.norm}, {how}); correctly classified samples",
              title_justify="left", show_edge=False, pad_edge=False)
    summ = dist.summary()
    t.add_column("group")
    cols = [c for c in summ.columns if c not in ("sd",)]
    for c in cols:
        t.add_column(c, justify="right")
    for name, row in summ.iterrows():
        t.add_row(term(name), *[str(int(row[c])) if c in ("n", "censored") else f"{row[c]:.4g}" for c in cols])
    return t


def _json_out(out: Optional[Path]) -> Optional[Path]:
    if out is None:
        return None
    return audit_target(out)


def _run_split(run_dir: Path) -> str:
    """The split a run folder's own audit.json is of: run.yaml's audit split, else test."""
    try:
        from ..experiments.config import RunSpec

        return str(RunSpec.load(run_dir).audit.get("split", "test"))
    except Exception:  # noqa: BLE001 - a train run folder has no run.yaml
        return "test"


def _run_data(run_dir: Path) -> Optional[str]:
    """The data spec a run folder was trained (and audited) on, from its config.yaml (None: unknown)."""
    try:
        from ..training.config import load_config_dict

        value = load_config_dict(RunFolder(run_dir).config).get("data")
        return None if value is None else str(value)
    except Exception:  # noqa: BLE001 - no or unreadable config.yaml
        return None


def _audit_out(out: Optional[Path], *, model: str, split: str, overwrite: bool,
               data: Optional[str] = None, groups: Optional[str] = None, claim: bool = False) -> Optional[Path]:
    """Where audit.json goes, checked before anything is computed: a run folder's own audit.json
    is the run's result and only an audit of that run's best.pt on that run's split may replace it
    (with --overwrite); an audit of another split or model is refused and pointed to another name.
    ``claim``: audit.json and its sidecars are claimed for this process (and audit.json checked again)."""
    path = _json_out(out)
    if path is None:
        return None
    checked = _audit_out_checked(path, model=model, split=split, overwrite=overwrite, data=data, groups=groups,
                                 claim=claim)
    if claim:
        from ..runfolder import outcomes_path
        from ..auditing.examples import examples_path
        from ..safeio import claim_outputs

        claim_outputs([outcomes_path(checked), examples_path(checked)], "--out")
    return checked


def _audit_out_checked(path: Path, *, model: str, split: str, overwrite: bool, data: Optional[str],
                       groups: Optional[str], claim: bool) -> Path:
    run_dir = path.parent
    if is_audit_file(path) and is_run_folder(run_dir):
        own = (not str(model).startswith("robustbench:")
               and Path(model).expanduser().resolve() == RunFolder(run_dir).best.resolve())
        run_split = _run_split(run_dir)
        tag = f"{split}" if own else f"{model_label(str(model))}-{split}"
        alt = str(run_dir / f"audit-{tag}.json")
        run_data = _run_data(run_dir)
        other_data = data is not None and (groups is not None or run_data is None or data != run_data)
        if not own or split != run_split or other_data:
            why = (f"another checkpoint ({model})" if not own else f"split {split!r} (the run's is {run_split!r})"
                   if split != run_split else f"other data ({data!r}{', groups ' + groups if groups else ''}; "
                                             f"the run's is {run_data!r})")
            raise ConfigError(f"--out {path} is the result of the run in {run_dir} (its best.pt on the "
                              f"{run_split} split); an audit of {why} never replaces it - write it elsewhere, e.g. "
                              f"--out {alt}")
        return check_output_file(path, "--out", overwrite=overwrite, run_owned=True, alt=alt, claim=claim)
    return check_output_file(path, "--out", overwrite=overwrite, suffixes=(".json",), claim=claim)
