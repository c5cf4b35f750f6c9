"""``robfair train``: one training run from a YAML config and/or flags, into a run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer
import yaml
from rich.markup import escape

from ..errors import ConfigError
from ..inert import term
from ..runfolder import RunFolder
from ..safeio import yaml_loads
from .app import _Bars, _progress, app, console, err_console, printed_warnings, resume_from
from .options import (ARCH_KWARGS_OPTION, ARCH_OPTION, MEAN_OPTION, MODEL_DIR_OPTION, PROBE_HELP, PROBE_TOLERANCE_HELP,
                      STD_OPTION, parse_stats, probe_options)


def _kv(items: list[str], what: str) -> dict[str, Any]:
    """``["beta=6", "tau=0.05"]`` -> ``{"beta": 6, "tau": 0.05}`` (values parsed as YAML scalars)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"{what} {item!r} is not KEY=VALUE; write e.g. {what} beta=6")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = yaml_loads(v, f"{what} {k.strip()}")
        except yaml.YAMLError:
            raise ConfigError(f"{what} {item!r}: cannot read the value; quote it or write a plain number/word") from None
    return out


def _config_method_options(config: Optional[Path], method: Optional[str]) -> dict[str, Any]:
    """The config file's ``method_options`` (unvalidated, so a method with required options can get
    them from --opt) -- dropped when --method switches to another method than the file's."""
    if config is None:
        return {}
    from ..training.config import load_config_dict

    raw = load_config_dict(config)
    if method is not None and str(raw.get("method", "")).lower() != method.lower():
        return {}
    return dict(raw.get("method_options") or {})


class _TrainBars:
    """Trainer callback -> rich bars (epochs, train batches, validation batches: the library's
    :class:`robfair.training.ProgressCallback`) and one printed line per epoch."""

    def __init__(self, bars: _Bars) -> None:
        from ..training import ProgressCallback  # lazy: start-up time (the training package imports torch)

        self.bars = bars
        self.events = ProgressCallback(bars)
        self.cfg: Any = None

    def on_train_start(self, trainer: Any) -> None:
        self.cfg = trainer.cfg
        self.events.on_train_start(trainer)

    def on_batch(self, epoch: int, batch: int, num_batches: int) -> None:
        self.events.on_batch(epoch, batch, num_batches)

    def on_val_batch(self, epoch: int, batch: int, num_batches: int) -> None:
        self.events.on_val_batch(epoch, batch, num_batches)

    def on_epoch_end(self, epoch: int, record: dict[str, Any]) -> None:
        self.events.on_epoch_end(epoch, record)
        console.print(epoch_line(epoch, record, self.cfg), highlight=False, soft_wrap=True)

    def on_audit_progress(self, stage: str, done: int, total: int) -> None:
        self.bars("final audit" if stage == "audit" else f"final audit: {stage}", done, total)


def epoch_line(epoch: int, record: dict[str, Any], cfg: Any) -> str:
    """One line per epoch that names what was measured: the training loss of the method (and its eps
    while it ramps up), the validation split's size, clean accuracy and, only when there is a validation
    attack, robust accuracy under that attack and radius."""
    tr = record.get("train") or {}
    parts = [f"epoch {epoch + 1:>3}: {getattr(cfg, 'method', 'train')} loss {tr.get('loss', float('nan')):.4f}"]
    if tr.get("eps"):
        parts.append(f"train eps {tr['eps'][-1]:.4g}")
    val = (record.get("val") or {}).get("summary") or {}
    if val:
        attack = str(getattr(cfg, "val_attack", "none"))
        v = f"val (n={val.get('n')}) clean {100 * val.get('clean_acc', float('nan')):.1f}%"
        if attack.lower() != "none" and getattr(cfg, "eps", 0):
            v += (f", {attack} eps {cfg.eps:g} robust {100 * val.get('rob_acc', float('nan')):.1f}%, worst-class "
                  f"robust {100 * val.get('worst_rob_acc', float('nan')):.1f}% ({term(val.get('worst_group', '-'))})")
        else:
            v += " (no validation attack: val_attack none)"
        parts.append(v)
    sel = record.get("select") or {}
    if sel.get("is_best"):
        parts.append(f"best by {sel.get('criterion')}")
    return "  ".join(parts)


def _default(field: str, fmt: str = "{}") -> str:
    """``[default: ...]`` for a train option: the config file's value, else TrainConfig's default."""
    from ..training.config import TrainConfig

    v = TrainConfig.model_fields[field].default
    shown = "none" if v is None else (f"{v:.4g}" + (" (8/255)" if abs(v - 8 / 255) < 1e-12 else "") if isinstance(v, float)
                                      else fmt.format(v))
    return f"  \\[default: the config file's {field}, else {shown}]"


#: the method-specific flags ``train`` once had: hidden aliases of ``--opt KEY=VALUE``
DEPRECATED_OPTION_FLAGS = {"fairness": "--fairness", "lam": "--lam", "dual_step": "--dual-step"}


def _warn_deprecated_option_flags(flags: dict[str, Any]) -> None:
    """One warning line per method option given through a deprecated flag, naming its ``--opt`` form.
    Called once the config validated, so a refusal (e.g. an option the method lacks) stays one line."""
    for key, value in flags.items():
        err_console.print(f"[yellow]warning:[/yellow] {DEPRECATED_OPTION_FLAGS[key]} is deprecated; write "
                          f"--opt {key}={escape(str(value))} (`robfair methods NAME` lists a method's options)",
                          highlight=False, soft_wrap=True)


@app.command()
def train(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML config (see configs/); flags override it  \\[default: none, flags and defaults only]"),
    data: Optional[str] = typer.Option(None, "--data", "-d", help="NAME[:PATH]; the train split is used (`robfair datasets`)." + _default("data")),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Architecture (`robfair models`), or a model file to "
                                        "fine-tune as audit takes it: TorchScript, state dict / .safetensors (with --arch), "
                                        "robustbench:NAME." + _default("model")),
    arch: Optional[str] = ARCH_OPTION,
    arch_kwargs: Optional[str] = ARCH_KWARGS_OPTION,
    mean: Optional[str] = MEAN_OPTION,
    std: Optional[str] = STD_OPTION,
    model_dir: Optional[Path] = MODEL_DIR_OPTION,
    method: Optional[str] = typer.Option(None, help="standard, pgd-at, trades, frl-rwrm, cfa, ... (robfair methods lists them; docs/methods-*.md)." + _default("method")),
    eps: Optional[str] = typer.Option(None, help="Training radius, e.g. 8/255 or 0.1." + _default("eps")),
    epochs: Optional[int] = typer.Option(None, min=1, help="Training epochs." + _default("epochs")),
    batch_size: Optional[int] = typer.Option(None, min=1, help="Batch size." + _default("batch_size")),
    lr: Optional[float] = typer.Option(None, help="Learning rate." + _default("lr")),
    seed: Optional[int] = typer.Option(None, help="Seeds data order, initialization and attacks." + _default("seed")),
    device: Optional[str] = typer.Option(None, help="auto, cpu, cuda, cuda:1." + _default("device")),
    precision: Optional[str] = typer.Option(None, help="fp32, bf16 or fp16 autocast." + _default("precision")),
    channels_last: Optional[bool] = typer.Option(None, "--channels-last/--no-channels-last", help="Channels-last convolutions." + _default("channels_last")),
    init: Optional[str] = typer.Option(None, help="Checkpoint to fine-tune from (same architecture and classes); "
                                       "the run reuses its validation split (val_split: init)." + _default("init")),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run folder  \\[default: the config file's out; one of the two is required]"),
    resume: bool = typer.Option(False, help="Continue a killed run in --out (its config must be unchanged)."),
    opt: List[str] = typer.Option([], "--opt", help="Method option KEY=VALUE (repeat), e.g. --opt beta=6; "
                                  "`robfair methods NAME` lists a method's options  \\[default: the config's method_options, else the method's defaults]"),
    set_: List[str] = typer.Option([], "--set", help="Any config key KEY=VALUE (repeat), e.g. --set val_per_class=300  \\[default: none]"),
    audit_attack: List[str] = typer.Option(["pgd20"], "--audit-attack", help="Attacks of the final test audit (repeat); 'none' to skip."),
    probe: Optional[str] = typer.Option(None, "--probe", metavar="B", help=PROBE_HELP.format(
        default="the config file's probe; with --resume the run's; else 1") + ", in the final test audit; recorded "
        "in config.yaml."),
    probe_tolerance: Optional[float] = typer.Option(None, "--probe-tolerance", metavar="POINTS", help=PROBE_TOLERANCE_HELP.format(
        default="the config file's, where probe_tolerance: 0.01 is 1 point; with --resume the run's; else 1")),
    groups: Optional[str] = typer.Option(None, "--groups", help="Protected attribute of the data (utkface race/gender/age, "
                                         "celeba an attribute, imagefolder a groups.csv column); stored in the data spec  \\[default: none, groups are the classes]"),
    # deprecated aliases of --opt (method options live with the method: `robfair methods NAME`); hidden from --help
    fairness: Optional[str] = typer.Option(None, "--fairness", hidden=True),
    lam: Optional[float] = typer.Option(None, "--lam", hidden=True),
    dual_step: Optional[float] = typer.Option(None, "--dual-step", hidden=True),
    allow_large_eps: bool = typer.Option(False, "--allow-large-eps", help="Accept an L-inf eps above 1 ([0,1] images)."),
) -> None:
    """Train a model (standard, PGD-AT, TRADES, fair methods) and audit the selected checkpoint on the test split."""
    from ..training import load_config
    from ..training import train as run_training

    budget, tolerance = probe_options(probe, probe_tolerance)  # the final audit's, recorded in config.yaml
    overrides: dict[str, Any] = dict(data=data, model=model, method=method, eps=eps, epochs=epochs, batch_size=batch_size,
                                     lr=lr, seed=seed, device=device, precision=precision, channels_last=channels_last,
                                     init=init, out=str(out) if out is not None else None, resume=resume or None,
                                     probe=budget, probe_tolerance=tolerance)
    if arch_kwargs is not None and arch is None:
        raise ConfigError("--arch-kwargs needs --arch FILE.py:NAME; pass both")
    from ..models.sources import parse_arch_kwargs

    model_file = dict(arch=arch, arch_kwargs=parse_arch_kwargs(arch_kwargs) if arch_kwargs is not None else None,
                      mean=parse_stats(mean, "mean"), std=parse_stats(std, "std"),
                      model_dir=str(model_dir) if model_dir is not None else None)
    overrides.update(model_file)
    overrides.update(_kv(set_, "--set"))
    flags = {k: v for k, v in (("fairness", fairness), ("lam", lam), ("dual_step", dual_step)) if v is not None}
    if groups is not None:
        from ..data import with_options

        base_data = overrides.get("data") or load_config(config, method=method).data
        overrides["data"] = with_options(base_data, groups=groups)
    if opt or flags or (method is not None and config is not None):
        overrides["method_options"] = {**_config_method_options(config, method), **_kv(opt, "--opt"), **flags}
    cfg = load_config(config, **overrides).check_selection()  # the method's options; an honest best.pt criterion
    _warn_deprecated_option_flags(flags)
    if cfg.out is None:
        raise ConfigError("no run folder given; pass --out runs/NAME (or set 'out' in the config)")
    from ..safeio import check_output_dir
    from ..attacks import check_image_eps
    from ..distributed import env_info
    from ..utils import resolve_device

    # refused before any data is read: the run folder (claimed by rank 0: a second train or resume of it is
    # refused), the device, the radius
    check_output_dir(cfg.out, "--out", allow="run" if cfg.resume else None,
                     fix="pass --resume to continue the run in it, or choose another --out", claim=env_info().is_main)
    resume_from(RunFolder(cfg.out).last)  # an interrupt names it only once the first epoch wrote it
    resolve_device(cfg.device)
    check_image_eps(cfg.eps, [a for a in (cfg.attack, cfg.val_attack) if a and a.lower() != "none"],
                    allow_large=allow_large_eps)

    attacks = [a for a in audit_attack if a.lower() != "none"]
    if attacks:
        from ..attacks import get_attack

        for a in attacks:  # fail on a bad name now, not after hours of training
            get_attack(a)

    # the final audit: robfair.audit with the config's probe (cfg.probe, cfg.probe_tolerance), its
    # progress (the attacks, then the probe) on the same bars or plain lines as the epochs
    with printed_warnings():  # the final audit's warnings: printed below, not logged as well
        with _progress() as p:
            result = run_training(cfg, callbacks=[_TrainBars(_Bars(p))], final_audit=attacks or None)
        score = "-" if result.best_score is None else f"{result.best_score:.4f}"
        console.print(f"best epoch {result.best_epoch} (selection score {score}); run folder {result.out}")
        if result.audit is not None:
            from ..report.text import print_audit

            print_audit(console, result.audit, title=f"test audit of {result.best_path}, eps={cfg.eps:g}")


@app.command()
def methods(name: Optional[str] = typer.Argument(None, metavar="NAME", help="A method (or alias) to describe in full.")) -> None:
    """List the training methods, or one method's options, defaults and the source of each mode."""
    from rich.table import Table

    from ..training.methods import describe_method, describe_methods

    if name is None:
        table = Table(title="training methods  (--method NAME; robfair methods NAME for its options)",
                      title_justify="left")
        for col in ("method", "aliases", "attack", "select", "description"):
            table.add_column(col)
        for row in describe_methods():
            table.add_row(*[escape(str(row[c])) for c in ("method", "aliases", "attack", "select", "description")])
        console.print(table)
        return
    d = describe_method(name)
    alias = f"  (aliases: {', '.join(d['aliases'])})" if d["aliases"] else ""
    console.print(f"[bold]{escape(d['name'])}[/bold]{escape(alias)}: {escape(d['help'])}", highlight=False)
    console.print(f"default training attack: {d['default_attack'] or 'none'};  default select: {d['default_select']}",
                  highlight=False)
    if d["options"]:
        table = Table(title="method_options  (--opt KEY=VALUE)", title_justify="left")
        for col in ("option", "default", "type", "description"):
            table.add_column(col)
        for o in d["options"]:
            table.add_row(escape(o["option"]), escape(repr(o["default"])), escape(o["type"]), escape(o["description"]))
        console.print(table)
    if d["sources"]:
        table = Table(title="sources (paper = the paper's equations; official = the official code at a commit)",
                      title_justify="left")
        table.add_column("method / mode")
        table.add_column("source")
        for k, v in d["sources"].items():
            table.add_row(escape(k), escape(v))
        console.print(table)
