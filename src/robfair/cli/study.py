"""``robfair sweep``, ``robfair report`` and ``robfair compare``: studies from YAML, one HTML page, run-vs-run tests."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.table import Table as RichTable

from ..errors import ConfigError, RobfairError
from ..inert import term
from ..utils import MAX_BOOTSTRAP, MAX_SEED
from .app import app, console, err_console


def _pct(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}"


def _status_table(rows: list[dict[str, Any]], title: str) -> RichTable:
    t = RichTable(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for c in ("run", "status", "attempts", "seconds", "clean avg", "clean worst", "robust avg", "robust worst",
              "worst class"):
        t.add_column(c, justify="left" if c in ("run", "status", "worst class") else "right")
    for r in rows:
        style = {"failed": "red", "running": "yellow", "pending": "dim"}.get(r["status"])
        t.add_row(term(r["id"]), r["status"] + (f" ({term(r['error'])})" if r.get("error") and r["status"] == "failed" else ""),
                  str(r["attempts"]), "-" if r["seconds"] is None else f"{r['seconds']:.0f}", _pct(r["clean_avg"]),
                  _pct(r["clean_worst"]), _pct(r["rob_avg"]), _pct(r["rob_worst"]), term(r["worst_class"] or "-"),
                  style=style)
    return t


def _gpus(text: Optional[str]) -> Optional[list[int]]:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--gpus {text!r} is not a list of GPU ids; write e.g. --gpus 0,1") from None


@app.command()
def sweep(
    study_file: Path = typer.Argument(..., metavar="STUDY", help="A study YAML (studies/*.yaml)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (default: the study's out, runs/<name>)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, help="Local: runs at a time (default: the study's local.workers)."),
    backend: str = typer.Option("local", help="local (processes on this machine) or slurm (submitit job array)."),
    partition: Optional[str] = typer.Option(None, help="Slurm partition  \\[default: the study's slurm.partition]"),
    gpus: Optional[str] = typer.Option(None, help="Local: GPU ids for the worker slots, e.g. 0,1  \\[default: none, CPU or the run's device]"),
    threads: Optional[int] = typer.Option(None, min=1, help="Local: torch threads per run (default: cores / workers)."),
    device: Optional[str] = typer.Option(None, help="Device of every run (auto, cpu, cuda); not part of the config hash  \\[default: each run's config]"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run failed runs again."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the runs and their state; run nothing, write nothing."),
    wait: bool = typer.Option(False, "--wait", help="Slurm: wait for the job array and print the results."),
    tensorboard: Optional[bool] = typer.Option(None, "--tensorboard/--no-tensorboard", help="TensorBoard scalars per epoch (needs the optional extra: pip install 'robfair\\[tensorboard]')  \\[default: the study's tracking.tensorboard]"),
    stale_after: float = typer.Option(120.0, help="Seconds without a heartbeat after which a claimed run is taken over."),
) -> None:
    """Run a study: expand its grid into runs, skip finished ones, resume interrupted ones, each exactly once."""
    from ..experiments import load_study
    from ..experiments import sweep as run_sweep

    from ..safeio import check_output_dir
    from ..utils import resolve_device

    study = load_study(study_file)
    check_output_dir(out if out is not None else study.out_dir, "--out", allow="study")
    if device is not None:
        resolve_device(device)
    state_names = {"new": "to run", "partial": "to resume", "complete": "done"}

    def on_plan(runs: list[Any]) -> None:
        counts = {k: sum(r.state == k for r in runs) for k in state_names}
        out_dir = runs[0].run_dir.parent if runs else study.out_dir
        console.print(f"study [bold]{term(study.name)}[/bold]: {len(runs)} runs ({counts['complete']} done, "
                      f"{counts['partial']} to resume, {counts['new']} new) -> {term(out_dir)}", highlight=False)
        if dry_run:
            t = RichTable(show_edge=False, pad_edge=False)
            t.add_column("run")
            t.add_column("state")
            t.add_column("method")
            t.add_column("hash")
            for r in runs:
                t.add_row(term(r.name), state_names[r.state], term(r.spec.train.get("method")), r.spec.hash)
            console.print(t)

    def on_finish(job: Any, row: Optional[dict[str, Any]], how: str) -> None:
        if row is None:
            console.print(f"{how:>11} {term(job.name)}", highlight=False)
            return
        extra = ""
        if row["status"] == "done":
            extra = (f" clean {_pct(row['clean_avg'])} (worst {_pct(row['clean_worst'])}), robust {_pct(row['rob_avg'])} "
                     f"(worst {_pct(row['rob_worst'])}, {term(row['worst_class'])})")
        elif row.get("error"):
            extra = f": {term(row['error'])}"
        secs = f" in {row['seconds']:.0f}s" if row.get("seconds") is not None and row["status"] == "done" else ""
        console.print(f"{how:>11} {term(job.name)}{secs}{extra}", highlight=False)

    result = run_sweep(study, out=out, backend=backend, workers=workers, gpus=_gpus(gpus), threads=threads,
                       device=device, partition=partition, retry_failed=retry_failed, dry_run=dry_run, wait=wait,
                       tensorboard=tensorboard, stale_after=stale_after, on_plan=on_plan, on_finish=on_finish)
    if result.skipped:
        console.print(f"[yellow]skipping:[/yellow] {term(result.skipped)}", highlight=False)
        return
    if dry_run:
        return
    if result.submitted and not wait:
        ids = sorted({str(j.job_id).split("_")[0] for j in result.submitted})
        console.print(f"submitted {len(result.submitted)} runs as Slurm job array {', '.join(ids)}; re-run this command "
                      "(it skips finished runs) or `robfair report` when they are done", highlight=False)
        return
    console.print(_status_table(result.rows, f"{term(study.name)}: {len(result.done)}/{len(result.rows)} done"))
    console.print(f"next: robfair report {result.out} --out {result.out}/report.html", highlight=False)
    if result.failed:
        names = ", ".join(term(r["id"]) for r in result.failed[:3])
        err_console.print(f"[red]{len(result.failed)} run(s) failed[/red] ({names}); see their worker.log; "
                          "fix and re-run with --retry-failed", highlight=False)
        raise typer.Exit(1)


@app.command()
def report(
    runs: List[Path] = typer.Argument(..., metavar="RUN", help="One or more study output folders, run folders or audit.json files "
                                      "(e.g. written by `robfair audit --out` or the Python API)."),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="HTML file; X.md and X_tables/*.csv are written beside it."),
    title: Optional[str] = typer.Option(None, help="Page title  \\[default: the study name, else the folder's name]"),
    baseline: Optional[str] = typer.Option(None, help="Setting to compute DAFA's rho against  \\[default: the study's report.baseline]"),
    bootstrap: Optional[int] = typer.Option(None, min=0, max=MAX_BOOTSTRAP, help="Bootstrap resamples for worst/gap intervals  \\[default: the study's audit.bootstrap, else 1000]"),
    skip_incomplete: bool = typer.Option(False, "--skip-incomplete", help="Skip half-written runs with a warning instead of failing."),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="Embed the figures (per-class accuracy, heatmaps, Pareto, eps and training curves)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing report (HTML, Markdown, CSV tables)."),
) -> None:
    """One self-contained HTML page, picture first (per-class robust accuracy, heatmaps, Pareto, eps and
    training curves), then the FRL / CFA-DAFA / Benz tables and one section per run; + Markdown + CSV."""
    from ..experiments.results import load_paths, study_info
    from ..report.html import default_title, write_report

    if out.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--out {out} must end in .html; the Markdown and CSV files are written beside it")
    _check_report_out(out, overwrite)
    entries, skipped = load_paths(runs, skip_incomplete=skip_incomplete)
    info = study_info(runs[0]) if len(runs) == 1 and runs[0].is_dir() else {}
    rep_cfg = info.get("report") or {}
    n_boot = bootstrap if bootstrap is not None else min(MAX_BOOTSTRAP, int((info.get("audit") or {}).get("bootstrap", 1000)))
    paths = write_report(entries, out, title=title or rep_cfg.get("title") or info.get("name") or default_title(runs),
                         description=info.get("description", ""), baseline=baseline or rep_cfg.get("baseline"),
                         n_boot=n_boot, figures=figures, extra_warnings=skipped)
    for w in skipped:
        err_console.print(f"[yellow]warning:[/yellow] {term(w)}", highlight=False)
    console.print(f"{len(entries)} runs -> wrote {term(paths.html)}, {term(paths.markdown)} and {len(paths.tables)} CSV "
                  f"tables in {term(paths.tables[0].parent) if paths.tables else '-'}", highlight=False)


def _check_report_out(out: Path, overwrite: bool) -> None:
    """The HTML page, its Markdown twin and the CSV folder, checked and claimed (a second robfair
    process writing them is refused) before any run is read."""
    from ..safeio import check_output_dir, check_output_file, claim_outputs

    html = check_output_file(out, "--out", overwrite=overwrite, claim=True)
    check_output_file(html.with_suffix(".md"), "--out (its Markdown twin)", overwrite=overwrite, claim=True)
    tables = html.parent / f"{html.stem}_tables"
    check_output_dir(tables, "--out (its CSV folder)", overwrite=True)
    claim_outputs([tables], "--out (its CSV folder)")  # replaced whole: its lock file is beside it
    if tables.exists() and not overwrite:
        raise ConfigError(f"--out: {tables} already exists (the CSV tables of an earlier report); pass --overwrite "
                          "to replace the report, or choose another --out")


@app.command()
def compare(
    runs: List[Path] = typer.Argument(..., metavar="RUN", help="Two or more run folders (or audit.json files); the first is the reference."),
    name: List[str] = typer.Option([], "--name", "-n", help="Name of each run, in order (repeat)  \\[default: the run's folder, or the file name without .json]"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the comparison: .md, .csv or .json by suffix  \\[default: terminal only]"),
    bootstrap: int = typer.Option(2000, min=0, max=MAX_BOOTSTRAP, help="Bootstrap resamples for the worst-class and gap differences."),
    alpha: float = typer.Option(0.05, min=0.0, max=1.0, help="Level of the tests."),
    seed: int = typer.Option(0, min=0, max=MAX_SEED, help="Bootstrap seed."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out file."),
) -> None:
    """Runs side by side: per-class clean / robust accuracy and boundary error, differences with intervals, and which are beyond the noise."""
    from ..experiments import compare as run_compare
    from ..experiments import load_report
    from ..report.tables import to_markdown
    from ..utils import atomic_path, write_json

    if len(runs) < 2:
        raise ConfigError("compare needs at least two runs; pass e.g. runs/frl/trades runs/frl/frl-rwrm")
    if out is not None:
        from ..safeio import check_output_file

        out = check_output_file(out, "--out", overwrite=overwrite, suffixes=(".md", ".csv", ".json"), claim=True)
    if len(name) > len(runs):
        raise ConfigError(f"{len(name)} --name values for {len(runs)} runs; give at most one name per run, in order")
    from ..experiments.compare import unique_labels

    loaded: dict[str, Any] = {}
    for label, p in zip(unique_labels(runs, name), runs):
        loaded[label] = load_report(p)[1]
    cmp = run_compare(loaded, n_boot=bootstrap, seed=seed, alpha=alpha)
    for note in cmp.notes:  # runs on other samples, older files: said before the numbers
        console.print(f"note: {term(note)}", highlight=False, soft_wrap=True)
    tables = cmp.tables()
    print_tables(tables)
    if out is not None:
        suffix = out.suffix.lower()
        if suffix == ".json":
            write_json(out, cmp.to_json())
        else:
            text = to_markdown(tables, title="robfair compare: " + " vs ".join(cmp.labels),
                               intro="\n".join(f"- note: {n}" for n in cmp.notes)) if suffix == ".md" else _tidy_csv(cmp)
            with atomic_path(out) as tmp:
                tmp.write_text(text)
        console.print(f"wrote {term(out)}", highlight=False)


def print_tables(tables: Any) -> None:
    """Tables (robfair.report.tables.Table) on the console, fitted to its width; worse beyond the noise
    in red, better in green (compare's and fix's tables)."""
    from ..report.text import fit_table

    for t in tables:
        rt = RichTable(title=term(t.title), title_justify="left", show_edge=False, pad_edge=False)
        for i, c in enumerate(t.columns):
            rt.add_column(term(c), justify="left" if i == 0 else "right")
        for row, em, gd in zip(t.rows, t.emph, t.good):
            rt.add_row(*[f"[bold red]{term(c)}[/bold red]" if e else (f"[bold green]{term(c)}[/bold green]" if g else term(c))
                         for c, e, g in zip(row, em, gd)])
        console.print(fit_table(console, rt))
        console.print(f"[dim]{term(t.note)} Red: worse beyond the noise, green: better.[/dim]", highlight=False)


def _tidy_csv(cmp: Any) -> str:
    import pandas as pd

    pc = cmp.per_class.assign(table="per_class")
    ag = cmp.aggregates.assign(table="aggregates")
    from ..report.tables import inert_frame

    return inert_frame(pd.concat([pc, ag], ignore_index=True)).to_csv(index=False, float_format="%.6g")


__all__ = ["sweep", "report", "compare", "RobfairError"]
