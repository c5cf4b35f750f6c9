"""``robfair demo`` (train a standard and a PGD-AT model on digits, audit both) and the listings a
first session asks for: ``robfair datasets``, ``models``, ``attacks``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..safeio import check_output_dir
from ..utils import MAX_SEED
from .app import _Bars, _progress, app, console, printed_warnings
from .options import PROBE_HELP, PROBE_TOLERANCE_OPTION, image_radius, probe_options

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
    from ..utils import resolve_device

    check_output_dir(out, fix="choose another --out (or delete the old demo first)", claim=True)
    resolve_device(device)
    eps_value = image_radius(eps, ("pgd", "fgsm"), allow_large=allow_large_eps).max()
    budget, tolerance = probe_options(probe, probe_tolerance)
    with printed_warnings():
        with _progress() as p:
            result = run_demo(out, eps=eps_value, epochs=epochs, seed=seed, device=device, progress=_Bars(p),
                              probe=budget, probe_tolerance=tolerance)
        print_demo(console, result)


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
