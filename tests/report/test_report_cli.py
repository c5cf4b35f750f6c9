"""`robfair report` over run folders: grouping by seed, bad input (one line, exit 2, no output file)."""

from __future__ import annotations

import pytest

from robfair.cli import main
from robfair.experiments import load_runs

from reportkit import audit_report, write_run

CLASSES = ["a", "b"]


def cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    write_run(root / "trades-s0", audit_report([(50, 40, 20), (50, 45, 30)], CLASSES), {"method": "trades", "seed": 0})
    write_run(root / "trades-s1", audit_report([(50, 42, 22), (50, 44, 26)], CLASSES), {"method": "trades", "seed": 1})
    write_run(root / "frl", audit_report([(50, 38, 25), (50, 41, 27)], CLASSES), {"method": "frl-rwrm", "seed": 0})
    return root


def test_trainer_folders_group_by_seed(runs):
    entries, skipped = load_runs(runs)
    assert [(e.name, e.group, e.seed) for e in entries] == [("frl", "frl", 0), ("trades-s0", "trades", 0),
                                                           ("trades-s1", "trades", 1)]
    assert skipped == []
    (one,), _ = load_runs(runs / "frl")  # a single run folder works too
    assert one.name == "frl"


def test_report_command(runs, tmp_path, capsys):
    out = tmp_path / "out" / "r.html"
    code, stdout, err = cli(["report", runs, "--out", out, "--no-figures", "--baseline", "trades"], capsys)
    assert code == 0, err
    assert "3 runs -> wrote" in stdout
    md = out.with_suffix(".md").read_text()
    assert "| trades | " in md and "rho vs trades" in md and "Spread over seeds" in md
    assert (tmp_path / "out" / "r_tables" / "seeds.csv").exists()


@pytest.mark.parametrize("case", ["no-runs", "no-checkpoints", "truncated-audit", "bad-out"])
def test_bad_report_input(case, runs, tmp_path, capsys):
    out = tmp_path / "r.html"
    target = runs
    expect = {"no-runs": "no runs under", "no-checkpoints": "has no checkpoints",
              "truncated-audit": "audit.json is truncated or not JSON", "bad-out": "must end in .html"}[case]
    if case == "no-runs":
        target = tmp_path / "empty"
        target.mkdir()
        (target / "notes.txt").write_text("nothing here")
    elif case == "no-checkpoints":
        (runs / "half").mkdir()
        (runs / "half" / "config.yaml").write_text("method: trades\n")
    elif case == "truncated-audit":
        p = runs / "frl" / "audit.json"
        p.write_text(p.read_text()[:100])
    elif case == "bad-out":
        out = tmp_path / "r.pdf"
    code, stdout, err = cli(["report", target, "--out", out], capsys)
    assert code == 2 and expect in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not out.with_suffix(".md").exists() and not (tmp_path / "r_tables").exists()
    if case in ("no-checkpoints", "truncated-audit"):
        assert ("half" if case == "no-checkpoints" else "frl") in err  # the folder is named
        code, stdout, err = cli(["report", target, "--out", out, "--skip-incomplete", "--no-figures"], capsys)
        assert code == 0 and "warning: skipped" in err and out.exists()
        assert "skipped" in out.read_text()  # the page lists what it left out
