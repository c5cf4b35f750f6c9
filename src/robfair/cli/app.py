"""The ``robfair`` command line (typer + rich). Library code never prints; this layer does.

Every user error is a :class:`robfair.errors.RobfairError`: printed as one line, exit code 2,
and no output file is left half-written (files are written atomically at the end).

This module is the shell every command module stands on: the typer ``app``, the consoles, the
progress bars (and their plain lines off a terminal), the warnings a command prints itself, the
resume hint. The shared options live in :mod:`robfair.cli.options`; each command in its own module.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

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


def quiet_rank(info) -> None:
    """Ranks other than 0 of a torchrun command print nothing (no tables, bars or warnings; their
    user errors reach rank 0, which prints the one line): N copies of every line help no one."""
    import logging

    if info.is_main:
        return
    console.quiet = True
    err_console.quiet = True
    logging.getLogger("robfair").setLevel(logging.ERROR)
