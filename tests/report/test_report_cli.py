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


def test_report_accepts_bare_audit_files(tmp_path, capsys):
    """An audit.json written by the Python API (no run folder around it) and one with an eps sweep."""
    from robfair.auditing.eps_sweep import EpsSweep
    from robfair.utils import write_json

    from reportkit import group_report

    api = tmp_path / "audit_10k_best"
    api.mkdir()
    a = audit_report([(50, 40, 20), (50, 45, 30)], CLASSES)
    write_json(api / "audit.json", a.to_json())
    sweep = EpsSweep("pgd20", [0.0, 0.1], [group_report([(50, 40, 40), (50, 45, 45)], CLASSES, eps=0.0),
                                          group_report([(50, 40, 20), (50, 45, 30)], CLASSES, eps=0.1)])
    other = tmp_path / "b" / "audit_10k_best.json"
    other.parent.mkdir()
    write_json(other, {**audit_report([(50, 30, 10), (50, 45, 35)], CLASSES).to_json(), "eps_sweep": {"pgd20": sweep.to_json()}})
    (entry_a,), _ = load_runs(api / "audit.json")
    assert entry_a.name == "audit_10k_best" and entry_a.eps_sweep is None
    out = tmp_path / "r.html"
    code, stdout, err = cli(["report", api / "audit.json", other, "--out", out, "--bootstrap", "0"], capsys)
    assert code == 0, err
    html = out.read_text()
    assert "<title>audit_10k_best</title>" in html  # the title from the folder / file names (once)
    # same name twice -> the parent folder in front of the second
    assert ">audit_10k_best<" in html and ">b/audit_10k_best<" in html
    assert "robust accuracy vs eps per class: b/audit_10k_best" in html  # the sweep stored in the audit file
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "robfair.audit/1"')
    code, _, err = cli(["report", bad, "--out", tmp_path / "x.html"], capsys)
    assert code == 2 and "truncated or not JSON" in err and not (tmp_path / "x.html").exists()


def test_report_reads_the_demo_audit_file(tmp_path):
    """runs/demo/audit.json (schema robfair.demo/1) holds both demo runs: one entry per model."""
    from robfair.utils import write_json

    runs = {"standard": audit_report([(50, 48, 2), (50, 47, 1)], CLASSES).to_json(),
            "pgd-at": audit_report([(50, 45, 30), (50, 44, 25)], CLASSES).to_json()}
    write_json(tmp_path / "audit.json", {"schema": "robfair.demo/1", "eps": 0.1, "runs": runs})
    entries, _ = load_runs(tmp_path / "audit.json")
    assert [e.name for e in entries] == ["standard", "pgd-at"]
    assert entries[1].report.aggregates()["rob_acc"]["worst"] == pytest.approx(0.5)
