"""The terminal: progress lines without a terminal, bars that never swallow log lines, wide tables in
long format, --version, and help texts that show defaults and name real commands and documents."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from _shared import run_cli
import importlib

A = importlib.import_module("robfair.cli.app")


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _bars(capsys, steps, total=100, **kw):
    """Drive a non-interactive _Bars through (seconds, done) steps; return the stderr lines."""
    clock = Clock()
    progress = A._progress()
    assert progress.disable  # pytest's captured streams are not terminals
    bars = A._Bars(progress, clock=clock, **kw)
    capsys.readouterr()
    for t, done in steps:
        clock.t = t
        bars("epoch 1 train", done, total)
    return [l for l in capsys.readouterr().err.splitlines() if l.strip()]


def test_progress_lines_every_tenth_with_rate_and_eta(capsys):
    # one batch per second for 100 s: a line at each 10% (10 s apart), none in between
    lines = _bars(capsys, [(t, t) for t in range(1, 101)])
    assert len(lines) == 10, lines
    assert lines[0] == "[    10s] epoch 1 train  10/100 (10%)  1 it/s  ETA 1m30s"
    assert lines[4].startswith("[    50s] epoch 1 train  50/100 (50%)  1 it/s  ETA 50s")
    assert lines[-1].endswith("100/100 (100%)  1 it/s  done")


def test_progress_lines_are_throttled_and_keep_a_heartbeat(capsys):
    # fast stage: 100 batches in 2 s -> no line at all (min_gap 5 s)
    assert _bars(capsys, [(0.02 * i, i) for i in range(1, 101)]) == []
    # slow stage: 1 batch every 20 s (< 10% of 1000 each): the 30 s heartbeat still reports
    lines = _bars(capsys, [(20.0 * i, i) for i in range(1, 7)], total=1000)
    assert [l.split("]")[0] for l in lines] == ["[    40s", "[  1m20s", "[  2m00s"]
    assert "ETA" in lines[0] and "it/min" in lines[0]  # 3 per minute


def test_progress_bars_on_the_log_console(monkeypatch):
    """On a terminal the live bars are drawn on the console the log lines use, so a line printed
    while a bar runs is written whole above it (not glued to the bar, not cut at the width)."""
    buf = io.StringIO()
    term_console = Console(file=buf, force_terminal=True, width=60)
    monkeypatch.setattr(A, "console", term_console)
    with A._progress() as p:
        assert p.console is term_console and not p.disable
        bars = A._Bars(p)
        bars("epoch 1 train", 3, 10)
        A.log_line("epoch   1: loss 2.3057  val clean 16.9%  robust 8.8%  worst-class robust 0.0% (cat)")
        bars("epoch 1 train", 10, 10)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    assert "epoch   1: loss 2.3057  val clean 16.9%  robust 8.8%  worst-class robust 0.0% (cat)" in plain


def _table(cols=12):
    t = Table(title="robust acc % vs eps")
    t.add_column("eps")
    for i in range(cols):
        t.add_column(f"class-{i}")
    for e in ("0", "0.03"):
        t.add_row(e, *[f"{50 + i}.0 [{40 + i}.1, {60 + i}.2]" for i in range(cols)])
    return t


def test_wide_tables_switch_to_long_format():
    from robfair.report.text import fit_table

    narrow = Console(file=io.StringIO(), width=160)
    long = fit_table(narrow, _table())
    assert long.row_count == 2 * 12 and [str(c.header) for c in long.columns] == ["eps", "column", "value"]
    assert "long format" in long.title
    cells = [list(c.cells) for c in long.columns]
    assert (cells[0][13], cells[1][13], cells[2][13]) == ("0.03", "class-1", "51.0 [41.1, 61.2]")
    small = _table(2)
    assert fit_table(narrow, small) is small
    narrow.print(long)
    assert max(len(l) for l in narrow.file.getvalue().splitlines()) <= 160


def test_version(capsys):
    from robfair import __version__

    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0 and out.startswith(f"robfair {__version__} (torch ")


def _commands():
    from typer.main import get_command

    def walk(c, path):
        if hasattr(c, "commands"):
            for n, sub in c.commands.items():
                yield from walk(sub, path + [n])
        else:
            yield path, c

    return list(walk(get_command(A.app), []))


def test_every_help_shows_defaults_and_names_real_things(capsys):
    missing = []
    for path, cmd in _commands():
        for p in cmd.params:
            if type(p).__name__ != "TyperOption" or p.name == "help" or p.required or p.hidden:  # hidden: deprecated
                continue
            flag_off = p.is_flag and not p.secondary_opts and p.default in (False, None)
            if not flag_off and p.default in (None, [], ()) and "default" not in (p.help or "").lower():
                missing.append(f"{' '.join(path)} {p.opts[0]}")
        code, out, _ = run_cli([*path, "--help"], capsys)
        assert code == 0
        text = " ".join(out.split())
        assert "spec section" not in text and "(extra )" not in text, path
    assert missing == []
    code, out, _ = run_cli(["train", "--help"], capsys)
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())
    for opt, default in (("epochs", "10"), ("lr", "0.1"), ("batch_size", "128"), ("eps", "0.03137 (8/255)")):
        assert f"the config file's {opt}, else {default}]" in text, opt
    from rich.markup import render

    sweep = next(c for p, c in _commands() if p == ["sweep"])
    tb = next(p for p in sweep.params if p.name == "tensorboard")
    assert "pip install 'robfair[tensorboard]'" in render(tb.help).plain  # as rich shows it, brackets kept
    code, out, _ = run_cli(["theory", "gaussian", "--help"], capsys)
    assert "docs/groups-fairness.md" in re.sub(r"\s|│", "", out)


_TYPER_TYPES = re.compile(r"<(bool|str|int|float|path|int range|float range|list\[[a-z]+\])>|\{[A-Za-z_]+\}")


def _groups():
    from typer.main import get_command

    def walk(c, path):
        yield path, c
        for n, sub in getattr(c, "commands", {}).items():
            yield from walk(sub, path + [n])

    return list(walk(get_command(A.app), []))


def test_every_help_fits_80_columns_with_whole_option_names_and_short_metavars(capsys, monkeypatch):
    """``COLUMNS=80 robfair [GROUP] [CMD] --help`` for every command and group of the app: no line over
    80 columns, nothing cut (no ``…``), every option name whole, no ``<bool>`` / ``<str>`` / ``{models}``."""
    monkeypatch.setenv("COLUMNS", "80")
    seen = 0
    for path, cmd in _groups():
        code, out, err = run_cli([*path, "--help"], capsys)
        assert code == 0, (path, err)
        lines = out.splitlines()
        assert max(len(l) for l in lines) <= 80, (path, max(lines, key=len))
        assert "…" not in out, path
        assert not _TYPER_TYPES.search(out), (path, _TYPER_TYPES.search(out).group(0))
        for p in cmd.params:
            if getattr(p, "hidden", False) or type(p).__name__ != "TyperOption":
                continue
            for name in [*p.opts, *p.secondary_opts]:
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", out), (path, name)
            if p.is_flag:  # a flag takes no value: its names stand alone
                assert re.search(rf"{re.escape(p.opts[-1])}(/\S+)?\s{{2,}}", out), (path, p.opts)
        seen += 1
    assert seen >= 15  # robfair, its commands, theory and its commands
    code, out, _ = run_cli(["leaderboard", "--help"], capsys)
    assert "Usage: robfair leaderboard [OPTIONS] [MODEL]..." in out
    assert "Usage: robfair sweep [OPTIONS] STUDY" in run_cli(["sweep", "--help"], capsys)[1]
    assert re.search(r"--allow-large-eps\s", run_cli(["audit", "--help"], capsys)[1])
    assert re.search(r"--figures/--no-figures\s", out) and re.search(r"--probe-tolerance POINTS\s", out)


def test_probe_progress_lines_count_passes_with_rate_and_eta(capsys):
    from robfair.auditing.probe import PROGRESS_STAGE

    clock = Clock()
    bars = A._Bars(A._progress(), clock=clock)
    capsys.readouterr()
    for t in range(1, 11):  # 5,000 passes a second, 50,000 in all: a line every 10%
        clock.t = t
        bars(f"audit: {PROGRESS_STAGE}", 5000 * t, 50_000)
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert lines == ["[     5s] audit: reliability probe (AutoAttack)  25,000/50,000 passes (50%)  5,000 passes/s  ETA 5s",
                     "[    10s] audit: reliability probe (AutoAttack)  50,000/50,000 passes (100%)  5,000 passes/s  done"]
    # other stages keep their unit and plain counts
    assert _bars(capsys, [(t, t) for t in range(1, 101)])[0].endswith("10/100 (10%)  1 it/s  ETA 1m30s")


def test_probe_bar_names_its_unit_on_a_terminal(monkeypatch):
    from robfair.auditing.probe import PROGRESS_STAGE

    buf = io.StringIO()
    monkeypatch.setattr(A, "console", Console(file=buf, force_terminal=True, width=120))
    with A._progress() as p:
        bars = A._Bars(p)
        bars(PROGRESS_STAGE, 1234, 50_000)
        p.refresh()
        bars("audit", 3, 10)
        p.refresh()
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    assert re.search(r"1234/50000 passes", shown) and not re.search(r"3/10 passes", shown)


def test_printed_warnings_keep_exactly_the_reported_lines_off_the_terminal_log(capsys):
    """A command that prints the audit's warnings itself keeps the library's log copies of exactly
    those lines off the terminal; other records pass; if it fails first, the held lines are logged."""
    import logging
    import sys

    from robfair.auditing.audit_report import REPORTED

    root, log = logging.getLogger(), logging.getLogger("robfair.auditing.audit_report")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("LOG %(message)s"))
    root.addHandler(handler)
    try:
        with A.printed_warnings():
            log.warning("%s", "reported line", extra={REPORTED: True})
            log.warning("an unrelated record")
        assert capsys.readouterr().err.splitlines() == ["LOG an unrelated record"]
        with pytest.raises(KeyError):
            with A.printed_warnings():
                log.warning("%s", "held line", extra={REPORTED: True})
                raise KeyError("the command failed before printing it")
        assert capsys.readouterr().err.splitlines() == ["LOG held line"]
        log.warning("%s", "outside", extra={REPORTED: True})  # the Python API: logged as ever
        assert capsys.readouterr().err.splitlines() == ["LOG outside"] and not handler.filters
    finally:
        root.removeHandler(handler)


def test_a_real_audit_says_the_probes_verdict_once_on_the_terminal(tmp_path):
    """`robfair audit` in a subprocess (its own logging set-up, as a user runs it) on a model that
    masks its gradients: the failing verdict appears once in stdout + stderr, the flagged groups are
    marked (the progress lines are tested above, with a clock)."""
    import os
    import subprocess
    import sys
    import warnings

    import numpy as np
    import torch

    pytest.importorskip("pyautoattack")
    from _shared import probe_problem

    model, ds = probe_problem(masked=True)
    with warnings.catch_warnings():  # TorchScript is deprecated in torch 2.13, and one of the formats robfair reads
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace(model, ds.x[:2]).save(str(tmp_path / "masked.pt"))
    np.savez(tmp_path / "masked.npz", x=ds.x.numpy(), y=ds.y.numpy(), classes=np.array(ds.classes, dtype=str))
    src = str(Path(A.__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", "from robfair.cli import main; main()", "audit", "--model",
                        str(tmp_path / "masked.pt"), "--data", f"npz:{tmp_path / 'masked.npz'}", "--attack", "pgd10",
                        "--eps", "0.1", "--probe", "20", "--bootstrap", "0", "--device", "cpu"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    both = r.stdout + r.stderr
    assert both.count("reliability probe: pgd10 overstates robust accuracy in") == 1, both
    assert "WARNING" not in r.stderr
    assert re.search(r"^! c\d ", r.stdout, re.M) and "AutoAttack-corrected robust %" in r.stdout
