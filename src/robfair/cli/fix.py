"""``robfair fix``: audit a model, fine-tune it with a fair method, audit it again, one paired report."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from ..errors import ConfigError
from ..inert import term
from ..runfolder import RunFolder
from ..utils import MAX_BOOTSTRAP
from .app import _Bars, _progress, app, console, printed_warnings, resume_from
from .options import (ARCH_KWARGS_OPTION, ARCH_OPTION, MEAN_OPTION, MODEL_DIR_OPTION, PROBE_HELP, PROBE_TOLERANCE_HELP,
                      STD_OPTION, parse_stats, probe_options)
from .study import print_tables
from .train import _config_method_options, _TrainBars, _kv


class _FixBars(_TrainBars):
    """The trainer's bars, and both audits' progress under their step's name."""

    def __init__(self, bars: _Bars) -> None:
        super().__init__(bars)

    def audit(self, step: str, stage: str, done: int, total: int) -> None:
        self.bars(f"{step} audit" if stage == "audit" else f"{step} audit: {stage}", done, total)

    def on_audit_progress(self, stage: str, done: int, total: int) -> None:  # the after-audit comes through fix's hook
        pass


@app.command()
def fix(
    model: str = typer.Option(..., "--model", "-m", help="The model to fix, as audit takes it: a robfair checkpoint, "
                              "TorchScript, a state dict / .safetensors with --arch, robustbench:NAME."),
    data: str = typer.Option(..., "--data", "-d", help="NAME[:PATH]: its train split is fine-tuned on (minus the "
                             "validation split), its test split audited before and after (`robfair datasets`)."),
    out: Path = typer.Option(..., "--out", "-o", help="Fix folder: before/ (the audit of the model as given), train/ "
                             "(the fine-tuning run, its audit.json the audit after), fix.md and fix.json (the report)."),
    method: str = typer.Option("frl-rwrm", help="The fair method (`robfair methods`): frl-rwrm, frl-reweight, cfa, "
                               "faal, wat, dafa, bat, trades, ..."),
    arch: Optional[str] = ARCH_OPTION,
    arch_kwargs: Optional[str] = ARCH_KWARGS_OPTION,
    mean: Optional[str] = MEAN_OPTION,
    std: Optional[str] = STD_OPTION,
    model_dir: Optional[Path] = MODEL_DIR_OPTION,
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML training config (configs/); flags override it  \\[default: none]"),
    epochs: Optional[int] = typer.Option(None, min=1, help="Fine-tuning epochs  \\[default: the config's, else 10]"),
    lr: Optional[float] = typer.Option(None, help="Learning rate  \\[default: the config's, else 0.1]"),
    batch_size: Optional[int] = typer.Option(None, min=1, help="Batch size  \\[default: the config's, else 128]"),
    eps: Optional[str] = typer.Option(None, help="Radius of training and of both audits, e.g. 8/255  \\[default: the config's, else 8/255]"),
    opt: List[str] = typer.Option([], "--opt", help="Method option KEY=VALUE (repeat), e.g. --opt tau_bndy=0.05  \\[default: the config's method_options, else the method's defaults]"),
    set_: List[str] = typer.Option([], "--set", help="Any training config key KEY=VALUE (repeat), e.g. --set val_per_class=50  \\[default: none]"),
    attack: List[str] = typer.Option(["pgd20"], "--attack", "-a", help="Attacks of both audits (repeat)."),
    audit_batch_size: int = typer.Option(256, "--audit-batch-size", min=1, help="Batch size of both audits."),
    probe: Optional[str] = typer.Option(None, "--probe", metavar="B", help=PROBE_HELP.format(default="1") +
                                        ", in both audits."),
    probe_tolerance: Optional[float] = typer.Option(None, "--probe-tolerance", metavar="POINTS",
                                                    help=PROBE_TOLERANCE_HELP.format(default="1")),
    bootstrap: int = typer.Option(2000, min=0, max=MAX_BOOTSTRAP, help="Bootstrap resamples for the worst-class and gap differences."),
    alpha: float = typer.Option(0.05, min=0.0, max=1.0, help="Level of the paired tests (Holm over classes)."),
    seed: Optional[int] = typer.Option(None, help="Seeds the split, the fine-tuning and both audits  \\[default: the config's, else 0]"),
    device: Optional[str] = typer.Option(None, help="auto, cpu, cuda, cuda:1  \\[default: auto]"),
    precision: Optional[str] = typer.Option(None, help="fp32, bf16 or fp16 autocast  \\[default: fp32]"),
    resume: bool = typer.Option(False, help="Continue a fix cut short in --out (the same options)."),
) -> None:
    """Fix a model's weakest classes: audit it, fine-tune it with a fair method, audit it again on the same samples, and test the change class by class."""
    from ..experiments.fix import fix as run_fix
    from ..models.sources import parse_arch_kwargs

    budget, tolerance = probe_options(probe, probe_tolerance)
    if arch_kwargs is not None and arch is None:
        raise ConfigError("--arch-kwargs needs --arch FILE.py:NAME; pass both")
    options: dict[str, Any] = dict(arch=arch, arch_kwargs=parse_arch_kwargs(arch_kwargs) if arch_kwargs is not None else None,
                                   mean=parse_stats(mean, "mean"), std=parse_stats(std, "std"),
                                   model_dir=str(model_dir) if model_dir is not None else None, epochs=epochs, lr=lr,
                                   batch_size=batch_size, eps=eps, seed=seed, device=device, precision=precision,
                                   probe=budget, probe_tolerance=tolerance)
    options.update(_kv(set_, "--set"))
    if opt:
        options["method_options"] = {**_config_method_options(config, method), **_kv(opt, "--opt")}
    resume_from(RunFolder(out / "train").last)
    with printed_warnings():
        with _progress() as p:
            bars = _FixBars(_Bars(p))
            res = run_fix(model, data, out, method=method, attacks=attack, config=config, resume=resume,
                          audit_batch_size=audit_batch_size, bootstrap=bootstrap, alpha=alpha, callbacks=[bars],
                          progress=bars.audit, **options)
    for note in res.summary.get("notes", []):
        console.print(f"note: {term(note)}", highlight=False, soft_wrap=True)
    print_tables(res.tables())
    console.print(f"verdict: {term(res.summary['verdict'])}", highlight=False, soft_wrap=True)
    console.print(f"wrote {term(res.out / 'fix.md')}, {term(res.out / 'fix.json')} (fine-tuned model: "
                  f"{term(res.train_dir / 'checkpoints' / 'best.pt')})", highlight=False, soft_wrap=True)
