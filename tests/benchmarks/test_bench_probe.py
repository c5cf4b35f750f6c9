"""benchmarks/bench_probe.py: its simulation (the probe's own design on exact draws) on a tiny grid,
its tables, its memoised bounds (the same results as without), and the CI smoke run."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
import sys
from pathlib import Path

import pytest
import torch

from robfair.auditing import probe_design
from robfair.auditing.probe_design import FIRST
from robfair.metrics.stats import finite_population_bounds

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_probe.py"


@pytest.fixture
def bench(monkeypatch):
    """The script, loaded with the probe's shipped default budget (1x): tests/conftest.py turns the
    default off for every other test."""
    monkeypatch.setattr(importlib.import_module("robfair.auditing.probe"), "DEFAULT_BUDGET", 1.0)
    spec = importlib.util.spec_from_file_location("bench_probe", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_probe", mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def costs(bench):
    return bench.Costs(44.0, 13.0, 213.0, 9500.0, "test")


def test_simulation_on_a_tiny_grid(bench):
    S = bench.Scenario
    scenarios = [S("power", 10, 100, 0.5, 0.40, FIRST), S("power", 10, 100, 0.5, 0.40, bench.LATER, 1.0),
                 S("power", 10, 100, 0.5, 0.40, bench.LATER, math.inf), S("faithful", 10, 100, 0.5),
                 S("at-tolerance", 10, 100, 0.5)]
    rows = bench.run_grid(scenarios, 12, costs(bench))
    assert [r["scenario"] for r in rows] == scenarios
    assert all(r["reps"] == 12 and len(r["spent"]) == 12 for r in rows)
    hits = [r["hits"] for r in rows]
    # 40 of 100 samples fooled by the screen: flagged every time at 1x; by AutoAttack's cascade only:
    # never at 1x (the screen is not settled within the budget), always with every sample attacked
    assert hits[:3] == [12, 0, 12] and hits[3:] == [0, 0]
    assert all(r["alarms"] == 0 and r["miscovered"] == 0 for r in rows)
    assert max(max(r["spent"]) for r in rows[:2] + rows[3:]) <= 1.0 + 1e-9  # the default budget is never overspent
    assert min(rows[2]["spent"]) > 100  # "all": the whole cascade on every robust sample
    assert rows[0]["hits_ci"][0] > 0.7 and rows[1]["hits_ci"][1] < 0.3  # Wilson intervals
    text = bench.sim_tables(rows, costs(bench))
    assert text.count("| 10 | 100 | 50% | 1x |") == 2 and "| 10 | 100 | 50% | all |" in text
    assert "-> met" in text and "MISSED" not in text


def test_a_missed_target_is_reported(bench):
    """The targets line reads the measured power: below 90% at 10 points (K = 10) it says MISSED."""
    row = bench.run_grid([bench.Scenario("power", 10, 100, 0.5, 0.10, FIRST)], 4, costs(bench))[0]
    assert bench.targets([row]).startswith("Target power >= 90% at 10 points")
    row["hits"] = 1  # what a weaker design would give
    assert "-> MISSED" in bench.targets([row])


def test_memoised_bounds_change_nothing(bench):
    scn = bench.Scenario("power", 10, 200, 0.8, 0.05, FIRST)
    plain = bench.simulate(scn, 6, costs(bench), seed=3)
    with bench.cached_bounds():
        cached = bench.simulate(scn, 6, costs(bench), seed=3)
    assert plain == cached
    assert probe_design.finite_population_bounds is finite_population_bounds  # restored


def test_grid_skips_overstatements_above_the_robust_rate(bench):
    scns = bench.grid()
    assert not any(s.delta > s.r + 1e-9 for s in scns)
    assert {(s.K, s.n_c) for s in scns} == {(10, 1000), (10, 250), (100, 100)}
    assert {s.budget for s in scns if s.where == bench.LATER} == {1.0, 10.0, 100.0, math.inf}
    assert len([s for s in scns if s.kind != "power"]) == 2 * 9


def test_the_comparison_with_the_exact_run_counts_what_went_wrong(bench):
    def row(n, robust, lower, upper, upper_first=1.0, flagged=False, first_fooled=0):
        return {"n": n, "robust": robust, "robust_acc": robust / n, "first_attacked": 5, "rest_attacked": 0,
                "first_fooled": first_fooled, "rest_fooled": 0, "overstatement": lower, "lower": lower,
                "upper": upper, "upper_first": upper_first, "flagged": flagged}

    exact = {"tolerance": 0.01, "per_group": {"a": row(100, 50, 0.05, 0.05), "b": row(100, 50, 0.0, 0.0),
                                              "c": row(100, 50, 0.03, 0.03, first_fooled=3)},
             "overall": {"n": 300, "lower": 0.08 / 3, "first_fooled": 3}, "rounds": [], "cost": {"ratio": 150.0},
             "stages": {"first": ["apgd-dlr"], "rest": ["apgd-ce", "apgd-t", "fab-t", "square"]},
             "verdict": "v"}
    good = {"cost": {"ratio": 1.0}, "per_group": {"a": row(100, 50, 0.02, 0.5, flagged=True),
                                                  "b": row(100, 50, 0.0, 0.5), "c": row(100, 50, 0.0, 0.5)}}
    bad = {"cost": {"ratio": 1.0}, "per_group": {"a": row(100, 50, 0.06, 0.5, flagged=True),  # lower above the exact
                                                 "b": row(100, 50, 0.02, 0.5, flagged=True),  # not overstated
                                                 "c": row(100, 50, 0.0, 0.5, upper_first=0.02)}}  # the screen finds 3
    m = bench.Real("toy", None, None, 0.1, "toy")
    _, per = bench.check_rows({"model": m, "attacks": ["pgd20"], "exact": exact, "runs": {1.0: good, 10.0: bad}})
    assert per[1.0]["overstated"] == ["a", "c"] and per[1.0]["later"] == ["a"] and per[1.0]["flagged"] == ["a"]
    assert (per[1.0]["false flags"], per[1.0]["missed"], per[1.0]["bounds violated"]) == (0, 1, 0)
    assert (per[10.0]["false flags"], per[10.0]["missed"], per[10.0]["bounds violated"],
            per[10.0]["screen bound violated"]) == (1, 1, 2, 1)


def test_the_stages_are_named_from_the_probe(bench):
    """The tables name the probe's real stages (robfair.auditing.probe.probe_stages), not a fixed list."""
    assert bench.stage_names(bench.probe_stages(10)) == {"first": "APGD-DLR", "rest": "APGD-CE + APGD-T + FAB-T + Square"}
    assert bench.stage_names(bench.probe_stages(3)) == {"first": "APGD-CE", "rest": "FAB + Square"}
    assert bench.WHERE[FIRST] == "the screen (APGD-DLR) finds it"
    assert bench.WHERE[bench.LATER].startswith("only AutoAttack's cascade finds it (APGD-CE + APGD-T + FAB-T + Square")


def test_the_which_attack_table_counts_against_the_whole_autoattack(bench):
    import numpy as np

    def row(*fooled, seconds=1.0, units=500):
        return {"fooled": np.array(fooled, dtype=bool), "seconds": seconds, "units": units}

    rows = {label: row(0, 0, 0, 0) for label, _, _ in bench.ALONE}
    rows["APGD-DLR"] = row(1, 1, 0, 1, seconds=2.5)  # finds 2 of AutoAttack's 3 and one it misses
    rows["APGD-CE"] = row(0, 0, 1, 0)
    rows[bench.WHOLE] = row(1, 1, 1, 0, seconds=30.0, units=40_000)
    m = bench.Real("toy", None, None, 0.1, "toy")
    text = bench.which_table([{"model": m, "n": 10, "robust": 4, "rows": rows}])
    assert "| toy | 4 of 10 | APGD-DLR | 3 | 2 | 1 | 1 | 2.5 | 125 |" in text
    assert "| toy | 4 of 10 | APGD-CE | 1 | 1 | 0 | 2 | 1.0 | 125 |" in text
    assert "| toy | 4 of 10 | AutoAttack (standard) | 3 | 3 | 0 | 0 | 30.0 | 10,000 |" in text
    assert "| toy | 4 of 10 | APGD-DLR or AutoAttack | 4 | 3 | 1 | 0 |" in text


def test_bad_costs_is_one_line_exit_2(bench, capsys):
    assert bench.main(["--parts", "sim", "--costs", "1,2,3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --costs must be four positive numbers") and err.count("\n") == 1


@pytest.mark.slow
def test_quick_mode_runs(bench, tmp_path, capsys):
    pytest.importorskip("pyautoattack")
    out = tmp_path / "probe.md"
    threads, level = torch.get_num_threads(), logging.getLogger("robfair").level
    assert bench.main(["--quick", "--threads", "1", "--cache", str(tmp_path / "cache"), "--out", str(out)]) == 0
    assert (torch.get_num_threads(), logging.getLogger("robfair").level) == (threads, level)  # given back
    text = capsys.readouterr().out
    assert out.read_text() + "\n" == text  # the markdown, written whole
    for part in ("## Simulation", "**False alarms at the default budget (1x)**", "## Real models",
                 "| digits | 451 |", "What it found, against the exact answer", "| digits | fgsm + pgd20 | 0.2 | 40 |",
                 "the screen (APGD-DLR) finds it", "## Which of AutoAttack's attacks finds it",
                 "| APGD-DLR |", "| APGD-T, 9 targets |", "| FAB-T |", "| Square |", "| AutoAttack (standard) |"):
        assert part in text, part
    assert (tmp_path / "cache" / "digits-pgd-at-e3.pt").is_file()  # a rerun loads it
