"""The ``robfair`` command line (typer + rich). Library code never prints; this layer does.

Every user error is a :class:`robfair.errors.RobfairError`: printed as one line, exit code 2,
and no output file is left half-written (files are written atomically at the end).

Why one module (783 lines): the option objects and the progress adapters every command module
imports, and the audit command whose options the others reuse; moving the audit command to a module
of its own is still open.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from ..errors import ConfigError
from ..inert import term
from ..runfolder import CHECKPOINTS_DIR, RunFolder, audit_target, is_audit_file, is_run_folder
from ..safeio import check_output_dir, check_output_file
from ..utils import MAX_BOOTSTRAP, MAX_SEED, parse_eps

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="robfair: find, explain and fix unequal adversarial robustness (per class, per group).",
)
console = Console(width=None if Console().is_terminal else 150)
err_console = Console(stderr=True)

#: the checkpoint an interrupted command resumes from, set by the command once it knows the path
#: (certify's partial file, train's last.pt); the interrupt line names it only if the file exists
RESUME_FROM: list[Path] = []


def resume_from(path: Path | None) -> None:
    """Tell the error boundary which file an interrupted run of this command resumes from."""
    RESUME_FROM[:] = [] if path is None else [Path(path)]


def versions_line() -> str:
    """robfair's, torch's and Python's versions, read from the installed packages' metadata (no torch
    import: ``robfair --version`` stays instant)."""
    import importlib.metadata as md
    import platform

    from .. import __version__

    try:
        torch_version = md.version("torch")
    except md.PackageNotFoundError:
        torch_version = "not installed"
    return f"robfair {__version__} (torch {torch_version}, Python {platform.python_version()})"


def _version(value: bool) -> None:
    if value:
        console.print(versions_line(), highlight=False)
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the robfair, torch and Python versions and exit.")) -> None:
    """robfair: find, explain and fix unequal adversarial robustness (per class, per group).

    Start with `robfair demo`; the README lists every command and docs/ the methods, studies and file formats."""


def _progress() -> Progress:
    """Live bars on a terminal, drawn on the console the log lines go to (stdout when it is a terminal),
    so every line printed while a bar runs lands above the bars, whole. Without a terminal the bars are
    off and :class:`_Bars` writes plain progress lines instead."""
    live = console if console.is_terminal else err_console
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=live,
        transient=True,
        disable=not live.is_terminal and not _force_progress(),
    )


def _force_progress() -> bool:
    import os

    return bool(os.environ.get("ROBFAIR_PROGRESS"))


def log_line(text: str) -> None:
    """A log line (epoch summaries ...): whole, never cut to the terminal width, above any live bar."""
    console.print(text, highlight=False, soft_wrap=True)


class _Reported:
    """A filter on a terminal log handler: a record marked ``REPORTED`` (a warning the command prints
    itself from the result) is held back instead of written."""

    def __init__(self, attr: str) -> None:
        self.attr, self.held = attr, []

    def filter(self, record) -> bool:
        if getattr(record, self.attr, False):
            self.held.append(record)
            return False
        return True


@contextmanager
def printed_warnings():
    """Around a command whose audits' warnings it prints itself (``print_audit``, ``print_demo``,
    the eps sweep's lines): the library's log copies of exactly those lines (marked
    :data:`robfair.auditing.audit_report.REPORTED`) stay off the terminal's log handlers, so each warning
    shows once. If the command fails before printing them, the held lines are logged after all.
    Other records, other handlers (files) and the Python API's logging are untouched."""
    import logging
    import sys

    from ..auditing.audit_report import REPORTED

    streams = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    held = [(h, _Reported(REPORTED)) for h in logging.getLogger().handlers
            if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in streams]
    for h, f in held:
        h.addFilter(f)
    done = False
    try:
        yield
        done = True
    finally:
        for h, f in held:
            h.removeFilter(f)
            for record in f.held if not done else ():
                h.handle(record)


def _duration(seconds: float) -> str:
    s = int(round(max(0.0, seconds)))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


class _Bars:
    """Adapter: the library's (stage, done, total) callback -> rich progress bars, one per stage.

    Without a terminal (output redirected to a file, a batch job) the bars are off; instead a plain
    line goes to stderr whenever a stage passes another ``every`` (10%) of its total, at most one
    line per ``min_gap`` seconds, and at least one every ``heartbeat`` seconds while anything runs::

        [  2m05s] pgd-at: epoch 3 train  45/120 (37%)  2.3 batches/s  ETA 33s

    The reliability probe counts passes through the model (its budget), so its bar and lines say
    ``passes`` (``12,000/49,320 passes (24%)  2,280 passes/s  ETA 16s``).
    """

    def __init__(self, progress: Progress, prefix: str = "", *, every: float = 0.1, min_gap: float = 5.0,
                 heartbeat: float = 30.0, clock=None, unit: str = "it") -> None:
        import time

        self.progress = progress
        self.prefix = prefix
        self.tasks: dict[str, int] = {}
        self.log = bool(progress.disable)
        self.every, self.min_gap, self.heartbeat = every, min_gap, heartbeat
        self.clock = clock or time.monotonic
        self.unit = unit
        self.t0 = self.clock()
        self.last_line = self.t0
        self.stages: dict[str, tuple[float, int, int]] = {}  # stage -> (start time, done then, last step logged)
        self.units: dict[str, str] = {}

    def _unit(self, key: str) -> str:
        if key not in self.units:
            from ..auditing.probe import PROGRESS_STAGE

            self.units[key] = "passes" if key.endswith(PROGRESS_STAGE) else self.unit
        return self.units[key]

    def __call__(self, stage: str, done: int, total: int) -> None:
        key = f"{self.prefix}{stage}"
        if self.log:
            self._log(key, done, total)
            return
        if key not in self.tasks:
            unit = self._unit(key)
            self.tasks[key] = self.progress.add_task(key, total=total, unit="" if unit == self.unit else unit)
        self.progress.update(self.tasks[key], completed=done, total=total)
        if done >= total:
            self.progress.remove_task(self.tasks.pop(key))

    def _log(self, key: str, done: int, total: int) -> None:
        now = self.clock()
        start, done0, step = self.stages.setdefault(key, (now, done, 0))
        frac = done / total if total else 1.0
        new_step = int(frac / self.every + 1e-9)
        gap = now - self.last_line
        finished = done >= total
        if (new_step > step and gap >= self.min_gap) or gap >= self.heartbeat or (finished and now - start >= self.min_gap
                                                                                   and gap >= self.min_gap):
            self.stages[key] = (start, done0, new_step)
            self.last_line = now
            rate = (done - done0) / (now - start) if now > start and done > done0 else 0.0
            eta = f"ETA {_duration((total - done) / rate)}" if rate > 0 and not finished else ("done" if finished else "ETA -")
            unit = self._unit(key)
            speed = (f"{rate:,.0f} {unit}/s" if rate >= 1000 else f"{rate:.3g} {unit}/s" if rate >= 0.1 else
                     f"{60 * rate:.3g} {unit}/min" if rate > 0 else "-")
            count = f"{done:,}/{total:,}" + ("" if unit == self.unit else f" {unit}")
            from ..inert import plain

            err_console.print(f"[{_duration(now - self.t0):>7}] {plain(key)}  {count} ({100 * frac:.0f}%)  "
                              f"{speed}  {eta}", highlight=False, soft_wrap=True, markup=False)
        if finished:
            self.stages.pop(key, None)


# ---------------------------------------------------------------------------------------------
# --model and the options that say how to read it: shared by every command that loads models (audit, certify, leaderboard)
MODEL_OPTION = typer.Option(..., "--model", "-m", help="A robfair checkpoint, TorchScript file, torch.export .pt2, "
                            "state dict / .safetensors (with --arch), or robustbench:NAME.")
ARCH_OPTION = typer.Option(None, "--arch", help="FILE.py:NAME, the class or factory a state dict was saved from (default: none; needed for weights-only files).")
ARCH_KWARGS_OPTION = typer.Option(None, "--arch-kwargs", help="Its arguments as JSON/YAML, e.g. '{\"width\": 32}' (default: none).")
MODEL_DIR_OPTION = typer.Option(None, "--model-dir", help="RobustBench's model folder for robustbench:NAME (default ./models).")
MEAN_OPTION = typer.Option(None, "--mean", help="The model expects normalized inputs: per-channel mean "
                           "(0.49,0.48,0.45) or a preset: cifar10, cifar100, imagenet (default: none, the model takes [0, 1] images).")
STD_OPTION = typer.Option(None, "--std", help="Per-channel std (or a preset); with --mean (default: none).")
CLASS_MAP_OPTION = typer.Option(None, "--class-map", help="State the model's class order: 'model' (its stored "
                                "names), DATA=MODEL renames, the names in output order, or a .json/.yaml file (default: none, names must match).")

@dataclass(frozen=True)
class ModelArgs:
    """--model and the options that say how to read it, as one value: what :func:`model_options` hands a
    command (``source``) instead of seven parameters each command would declare again."""

    model: str
    arch: Optional[str] = None
    arch_kwargs: Optional[str] = None
    model_dir: Optional[Path] = None
    mean: Optional[str] = None
    std: Optional[str] = None
    class_map: Optional[str] = None


#: the bundle's options, in the order --help lists them: (parameter, annotation, typer option)
_MODEL_PARAMS = (("model", str, MODEL_OPTION), ("arch", Optional[str], ARCH_OPTION),
                 ("arch_kwargs", Optional[str], ARCH_KWARGS_OPTION), ("model_dir", Optional[Path], MODEL_DIR_OPTION),
                 ("mean", Optional[str], MEAN_OPTION), ("std", Optional[str], STD_OPTION),
                 ("class_map", Optional[str], CLASS_MAP_OPTION))


def model_options(command: Any) -> Any:
    """A command that loads one model (audit, certify) declares ``source: ModelArgs`` first; this puts the
    bundle's seven options in its place for typer (``--model``, ``--arch``, ``--arch-kwargs``,
    ``--model-dir``, ``--mean``, ``--std``, ``--class-map``) and calls it with them as one ``ModelArgs``."""
    import functools
    import inspect
    import typing

    hints = typing.get_type_hints(command)
    sig = inspect.signature(command)
    rest = [q.replace(annotation=hints.get(q.name, q.annotation)) for q in sig.parameters.values() if q.name != "source"]
    bundle = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=ann)
              for name, ann, option in _MODEL_PARAMS]

    @functools.wraps(command)
    def with_source(**kwargs: Any) -> Any:
        source = ModelArgs(**{name: kwargs.pop(name) for name, _, _ in _MODEL_PARAMS})
        return command(source=source, **kwargs)

    del with_source.__wrapped__  # typer reads the signature below, not the command's own
    with_source.__signature__ = sig.replace(parameters=bundle + rest)
    with_source.__annotations__ = {q.name: q.annotation for q in bundle + rest} | {"return": hints.get("return")}
    return with_source


#: --probe / --probe-tolerance: the same meaning wherever an audit runs (audit, train, demo, leaderboard)
PROBE_HELP = ("Reliability probe budget: AutoAttack on the samples the attacks left robust, within B times the "
              "audit's attacks' compute (default {default}; 'all': every robust sample, exactly AutoAttack per class; "
              "0: off)")
PROBE_TOLERANCE_HELP = ("The probe flags a class whose robust accuracy it shows overstated by more than POINTS "
                        "(95%, every statement at once) (default {default}).")
PROBE_OPTION = typer.Option(None, "--probe", metavar="B", help=PROBE_HELP.format(default="1") + ".")
PROBE_TOLERANCE_OPTION = typer.Option(None, "--probe-tolerance", metavar="POINTS",
                                      help=PROBE_TOLERANCE_HELP.format(default="1"))


def probe_options(probe: Optional[str], probe_tolerance: Optional[float]) -> tuple:
    """``--probe`` and ``--probe-tolerance``, checked before anything is computed: the budget
    (:func:`robfair.auditing.probe.parse_budget`: a multiple, ``all`` = ``inf``, ``0`` off) and the
    tolerance as a fraction (the option takes points); None where the option was not given."""
    from ..auditing.probe import parse_budget

    budget = None if probe is None else parse_budget(probe, "--probe")
    if probe_tolerance is not None and not 0 <= probe_tolerance < 100:
        raise ConfigError(f"--probe-tolerance must be points of robust accuracy in [0, 100) (e.g. 1, 0.5), got "
                          f"{probe_tolerance:g}")
    return budget, None if probe_tolerance is None else probe_tolerance / 100


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
    args = dict(locals())  # the options, before anything else is bound here
    from ..distributed import cleanup, env_info, setup

    info = env_info()
    if not info.enabled:
        with printed_warnings():
            _audit(**args)
        return
    quiet_rank(info)
    dist_info, dev, owns = setup(device)
    try:
        with printed_warnings():
            _audit(**args, dist=dist_info, rank_device=str(dev))
    finally:
        if owns:
            cleanup(dist_info)


def rank_file(path: Path, dist) -> Path:
    """``path`` in one process; ``NAME.rank<R>.SUFFIX`` on rank R of a torchrun command, so no two
    ranks ever write one file."""
    path = Path(path).expanduser()
    return path if dist is None else path.with_name(f"{path.stem}.rank{dist.rank}{path.suffix}")


def quiet_rank(info) -> None:
    """Ranks other than 0 of a torchrun command print nothing (no tables, bars or warnings; their
    user errors reach rank 0, which prints the one line): N copies of every line help no one."""
    import logging

    if info.is_main:
        return
    console.quiet = True
    err_console.quiet = True
    logging.getLogger("robfair").setLevel(logging.ERROR)


def _audit(*, source: ModelArgs, data, split, attack, eps, batch_size, device,
           seed, early_exit, precision, channels_last, bootstrap, out, plot, overwrite, allow_large_eps, groups,
           eps_sweep, distances, probe, probe_tolerance, examples, autoattack_state=None, dist=None,
           rank_device=None) -> None:
    model, arch, arch_kwargs, model_dir = source.model, source.arch, source.arch_kwargs, source.model_dir
    mean, std, class_map = source.mean, source.std, source.class_map
    from ..auditing import audit as run_audit
    from ..attacks.autoattack import state_file
    from ..auditing.distributed import run_on_every_rank
    from ..data import load_dataset
    from ..runfolder import outcomes_path
    from ..auditing.examples import examples_path
    from ..auditing.eps_sweep import parse_eps_range
    from ..hardware import check_precision
    from ..report.text import print_audit
    from ..utils import check_image_eps, resolve_device

    main_rank = dist is None or dist.is_main
    probe, probe_tolerance = probe_options(probe, probe_tolerance)  # the same on every rank

    def prepare():
        # everything that can be refused is refused before the first batch (on every rank): outputs, device, numbers
        # rank 0 claims the outputs it writes (a second robfair process writing them is refused), each rank its state file
        out_path = _audit_out(out, model=model, split=split, overwrite=overwrite, data=data, groups=groups,
                              claim=main_rank)
        plot_path = check_output_file(plot, "--plot", overwrite=overwrite, suffixes=(".png",),
                                      claim=main_rank) if plot is not None else None
        if out_path is not None and plot_path is not None and out_path.resolve() == plot_path.resolve():
            raise ConfigError("--out and --plot name the same file; give them different paths")
        state_path = None
        if autoattack_state is not None:
            state_path = check_output_file(rank_file(autoattack_state, dist), "--autoattack-state",
                                           overwrite=overwrite, suffixes=(".json",), claim=True)
            taken = [p.resolve() for p in (out_path, plot_path) if p is not None]
            if out_path is not None:
                taken += [outcomes_path(out_path).resolve(), examples_path(out_path).resolve()]
            if state_path.resolve() in taken:
                raise ConfigError(f"--autoattack-state {state_path} is also an output of the audit; give it its own name")
        check_precision(precision, resolve_device(device))  # the CLI's own option name, before the model is read
        sweep_values = parse_eps_range(eps_sweep) if eps_sweep is not None else None
        if sweep_values:
            check_image_eps(max(sweep_values), attack, allow_large=allow_large_eps, what="--eps-sweep")
        net, meta = load_model_arg(model, arch, arch_kwargs, model_dir, mean, std)
        eps_value = parse_eps(eps) if eps is not None else _checkpoint_eps(meta)
        check_image_eps(eps_value, attack, allow_large=allow_large_eps)
        ds = load_dataset(data, split=split, groups=groups)
        ds = _check_classes(meta, ds, class_map)
        return out_path, plot_path, state_path, sweep_values, net, meta, eps_value, ds

    if dist is None:
        out_path, plot_path, state_path, sweep_values, net, meta, eps_value, ds = prepare()
    else:  # a refusal on one rank stops every rank, with its one line
        out_path, plot_path, state_path, sweep_values, net, meta, eps_value, ds = run_on_every_rank(prepare, dist)
    run_device = rank_device or device
    with _progress() as p, state_file(state_path):
        rep = run_audit(net, ds, attacks=attack, eps=eps_value, batch_size=batch_size, device=run_device, seed=seed,
                        early_exit=early_exit, precision=precision, channels_last=channels_last, probe=probe,
                        probe_tolerance=probe_tolerance, progress=_Bars(p) if main_rank else None,
                        classes=ds.classes, dist=dist, examples=examples if out_path is not None and main_rank else 0)
    rep.meta["checkpoint"] = str(model)
    rep.meta["split"] = split
    rep.meta["model_source"] = meta.get("source")
    rep.meta["class_order"] = meta.get("class_order")
    if main_rank:
        print_audit(console, rep, title=f"{model} on {data} ({split}), eps={eps_value:g}", n_boot=bootstrap)
    with state_file(state_path):
        extras = _audit_groups_sweep_distances(net, ds, rep, attack, eps_value, sweep_values, distances,
                                               batch_size=batch_size, device=run_device, seed=seed,
                                               precision=precision, channels_last=channels_last,
                                               early_exit=early_exit, dist=dist)
    if not main_rank:  # rank 0 writes the files; this rank's part is done
        return
    from ..safeio import ResultSet

    with ResultSet() as files:  # the figure, the outcomes and examples, then audit.json: all of them or none
        if plot_path is not None:
            from ..report.plots import classwise_bars

            with files.file(plot_path) as tmp:
                classwise_bars({_display_label(model): rep}, tmp,
                               title=f"{data} ({split}), eps={eps_value:.4g}, {_attack_label(rep)}")
        if out_path is not None:
            rep.save(out_path, bootstrap=bootstrap, extras=extras, into=files)
    if out_path is not None:
        also = f" and {term(examples_path(out_path))}" if rep.examples is not None else ""
        console.print(f"wrote {term(out_path)}, {term(outcomes_path(out_path))}{also}", highlight=False)
    if plot_path is not None:
        console.print(f"wrote {term(plot_path)}", highlight=False)


def _checkpoint_label(path: Path) -> str:
    """``runs/trades/checkpoints/best.pt`` -> ``trades (best.pt)``: the run, not the file name."""
    path = Path(path)
    if path.parent.name == CHECKPOINTS_DIR and path.parent.parent.name:
        return f"{path.parent.parent.name} ({path.name})"
    return path.name


def _attack_label(rep) -> str:
    attacks = list(rep.attacks)
    return attacks[0] if len(attacks) == 1 else "worst case of " + ", ".join(attacks)


def _audit_groups_sweep_distances(net, ds, rep, attacks: List[str], eps_value: float, sweep_values, distances: bool,
                                   *, batch_size: int, device: str, seed: int, precision: str = "fp32",
                                   channels_last: bool | None = None, early_exit: bool = True, dist=None) -> dict:
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
    if sweep_values is not None:
        from ..auditing.eps_sweep import eps_sweep as run_sweep

        with _progress() as p:
            sweep = run_sweep(net, ds, list(attacks), sweep_values, batch_size=batch_size, device=device, seed=seed,
                              precision=precision, channels_last=channels_last, early_exit=early_exit,
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
    if distances:
        from ..auditing.distances import boundary_distances

        eps_max = max(2 * eps_value, max(sweep_values) if sweep_values else 0.0) or 8 / 255
        with _progress() as p:
            drep = boundary_distances(net, ds, "auto", attack=attacks[0], eps_max=eps_max, batch_size=batch_size,
                                      device=device, seed=seed, dist=dist,
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
        tag = f"{split}" if own else f"{_model_label(str(model))}-{split}"
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


def _checkpoint_eps(meta: dict) -> float:
    extra = meta.get("extra") or {}
    for key in ("eps", "train_eps"):
        if key in extra and extra[key] is not None:
            return parse_eps(extra[key])
    return 8 / 255


def _check_classes(meta: dict, ds, class_map: Optional[str] = None):
    """The model's image shape and class count must match the dataset's, and so must the class names it
    stores (order included) unless ``--class-map`` states the mapping; returns the dataset with its
    labels in the model's order (one-line errors)."""
    from ..data import class_order, parse_class_map, with_class_order
    from ..models import check_model_data

    check_model_data(meta, ds.in_shape, ds.num_classes)
    if class_map is not None:
        order, renames = parse_class_map(class_map, meta.get("classes"))
        meta["class_order"] = class_order(None, ds.classes, stated=True)
        return with_class_order(ds, order, renames)
    meta["class_order"] = class_order(meta.get("classes"), ds.classes,
                                      what=f"the model ({meta.get('source', 'checkpoint')})")
    if meta["class_order"].get("note"):  # said once, before the long work; audit.json keeps it in meta.class_order
        where = f"{meta['path']}: " if meta.get("path") else ""
        console.print(f"note: {term(where + meta['class_order']['note'])}", highlight=False, soft_wrap=True)
    return ds


def _parse_stats(text: Optional[str], what: str):
    """``--mean``/``--std``: a preset name (``cifar10``, ``cifar100``, ``imagenet``; the key of
    ``NORMALIZATION_PRESETS``) or comma-separated finite numbers (a std positive), one line naming
    the option otherwise; how many values the images need is checked against their channels later."""
    if text is None:
        return None
    import difflib
    import math

    from ..errors import ModelError
    from ..models.parts import NORMALIZATION_PRESETS, preset_key

    presets = ", ".join(NORMALIZATION_PRESETS)
    example = f"--{what} {'0.2471,0.2435,0.2616' if what == 'std' else '0.4914,0.4822,0.4465'} (one per channel)"
    t = text.strip().strip("()[]").strip()
    key = preset_key(t)
    if key is not None:
        return key
    parts = [v.strip() for v in t.split(",")]
    try:
        vals = [float(v) for v in parts]
    except ValueError:
        if not t or "" in parts:
            raise ModelError(f"--{what} {text!r} has an empty value; write one number per channel, e.g. {example}, "
                             f"or a preset: {presets}") from None
        near = difflib.get_close_matches(t.lower(), list(NORMALIZATION_PRESETS), n=1, cutoff=0.6)
        raise ModelError(f"--{what} {text!r} is neither numbers nor a normalization preset"
                         + (f" (did you mean {near[0]}?)" if near else "")
                         + f"; write e.g. {example} or a preset: {presets}") from None
    if not all(math.isfinite(v) for v in vals):
        raise ModelError(f"--{what} {text!r} must hold finite numbers; write e.g. {example} or a preset: {presets}")
    if what == "std" and min(vals) <= 0:
        raise ModelError(f"--std {text!r} must be positive (each channel's standard deviation, the divisor of the "
                         f"normalization); write e.g. {example} or a preset: {presets}")
    return vals


def load_model_arg(model: str, arch: Optional[str], arch_kwargs: Optional[str], model_dir: Optional[Path],
                   mean: Optional[str], std: Optional[str]):
    """``--model`` (+ ``--arch``/``--arch-kwargs``/``--model-dir``) loaded with ``robfair.models.load_any``,
    wrapped in ``Normalized`` for ``--mean``/``--std``; returns (model, meta)."""
    from ..models import load_any, with_normalization
    from ..models.sources import parse_arch_kwargs

    if arch is None and arch_kwargs is not None:
        from ..errors import ModelError

        raise ModelError("--arch-kwargs needs --arch FILE.py:NAME; pass both")
    net, meta = load_any(model, arch=arch, arch_kwargs=parse_arch_kwargs(arch_kwargs), model_dir=model_dir)
    m, s = _parse_stats(mean, "mean"), _parse_stats(std, "std")
    if m is not None or s is not None:
        net = with_normalization(net, m, s)
        meta = {**meta, "normalization": {"mean": mean, "std": std}}
    return net, meta


def _display_label(model: str) -> str:
    """A model's name on plots and tables: the run for a run's checkpoint, the RobustBench name."""
    return model.split(":", 1)[1] if model.startswith("robustbench:") else _checkpoint_label(Path(model))


def _model_label(model: str) -> str:
    return model.split(":", 1)[1].split("/")[-1] if model.startswith("robustbench:") else Path(model).stem


# ---------------------------------------------------------------------------------------------
@app.command()
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", "-o", help="Run folder."),
    eps: str = typer.Option("0.1", help="L-inf radius for training and the audit."),
    epochs: int = typer.Option(30, min=1, max=10_000, help="Training epochs per model."),
    seed: int = typer.Option(0, min=0, max=MAX_SEED),
    device: str = typer.Option("auto"),
    allow_large_eps: bool = typer.Option(False, "--allow-large-eps", help="Accept an L-inf eps above 1."),
    probe: Optional[str] = typer.Option(None, "--probe", metavar="B", help=PROBE_HELP.format(default="1") +
                                        ", for both models' audits."),
    probe_tolerance: Optional[float] = PROBE_TOLERANCE_OPTION,
) -> None:
    """Train a standard and a PGD-AT model on digits, audit both, show the class-wise gap."""
    from ..demo import run_demo
    from ..report.text import print_demo
    from ..utils import check_image_eps, resolve_device

    check_output_dir(out, fix="choose another --out (or delete the old demo first)", claim=True)
    resolve_device(device)
    eps_value = check_image_eps(parse_eps(eps), ("pgd", "fgsm"), allow_large=allow_large_eps)
    budget, tolerance = probe_options(probe, probe_tolerance)
    with printed_warnings():
        with _progress() as p:
            result = run_demo(out, eps=eps_value, epochs=epochs, seed=seed, device=device, progress=_Bars(p),
                              probe=budget, probe_tolerance=tolerance)
        print_demo(console, result)


# ---------------------------------------------------------------------------------------------
@app.command()
def datasets() -> None:
    """List the datasets robfair reads, and where it looks for them."""
    from ..data import describe_datasets

    _print_rows("datasets  (--data NAME[:PATH])", describe_datasets())


@app.command()
def models() -> None:
    """List the model architectures."""
    from ..models import describe_models

    _print_rows("models", describe_models())


@app.command()
def attacks() -> None:
    """List the attacks and the name forms they accept."""
    from ..attacks import describe_attacks

    _print_rows("attacks  (--attack NAME)", describe_attacks())


def _print_rows(title: str, rows) -> None:
    rows = [r._asdict() if hasattr(r, "_asdict") else r for r in rows]
    table = Table(title=title, title_justify="left")
    if rows and isinstance(rows[0], dict):
        cols = list(rows[0])
        for c in cols:
            table.add_column(str(c))
        for r in rows:
            table.add_row(*[str(r.get(c, "")) for c in cols])
    else:
        for r in rows:
            table.add_row(*[str(v) for v in r])
    console.print(table)


