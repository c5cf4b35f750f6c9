"""The papers' table layouts on hand-built runs: values, intervals, seed spread, Markdown and CSV."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from robfair.errors import RobfairError
from robfair.metrics import wilson
from robfair.report.tables import (group_settings, paper_tables, pareto_front, table_markdown, to_markdown,
                                   write_csvs)

from reportkit import entry

CLASSES = ["a", "b", "c"]


@pytest.fixture
def entries():
    return [
        # one setting, one seed
        entry("st", [(100, 90, 10), (100, 80, 0), (100, 70, 5)], CLASSES, method="standard"),
        # one setting, two seeds: worst class b then c
        entry("at,seed=0", [(100, 80, 50), (100, 70, 30), (100, 60, 40)], CLASSES, group="at", seed=0),
        entry("at,seed=1", [(100, 82, 52), (100, 72, 44), (100, 58, 36)], CLASSES, group="at", seed=1),
    ]


def table(tables, key):
    return next(t for t in tables if t.key == key)


def test_summary_single_seed_has_intervals_and_multi_seed_has_spread(entries):
    tables = paper_tables(entries, n_boot=200, baseline="at")
    t = table(tables, "summary")
    assert t.columns[:5] == ["setting", "data", "model", "method", "seeds"]
    st, at = t.rows
    lo, hi = wilson(240, 300)
    assert st[5] == f"80.0 [{100 * lo:.1f}, {100 * hi:.1f}]"  # clean avg with its Wilson interval
    assert st[6].startswith("70.0 [")  # clean worst with a bootstrap interval
    # robust avg over seeds: 120/300 and 132/300 -> mean 42.0, sd (ddof=1) of (40, 44) = 2.83
    assert at[7] == "42.0 ± 2.8"
    assert at[8] == f"{100 * np.mean([0.30, 0.36]):.1f} ± {100 * np.std([0.30, 0.36], ddof=1):.1f}"
    assert at[10] == "b (1/2 seeds)" or at[10] == "c (1/2 seeds)"
    d = t.data.set_index("setting")
    assert d.loc["at", "rob_acc_avg"] == pytest.approx(0.42) and d.loc["at", "worst_class"] == "b|c"
    # DAFA rho against at (seed means: worst 0.33, avg 0.42); st: worst 0, avg 0.05
    assert at[t.columns.index("rho vs at")] == "+0.000"
    assert d.loc["st", "rho"] == pytest.approx((0 - 0.33) / 0.33 + (0.05 - 0.42) / 0.42)
    assert st[t.columns.index("rho vs at")] == "-1.881"
    assert d.loc["at", "pareto"] and not d.loc["st", "pareto"]
    st_only = table(paper_tables(entries[:1], n_boot=0, baseline="st"), "summary")
    assert st_only.rows[0][st_only.columns.index("rho vs st")] == "-"  # baseline worst class at 0: undefined


def test_frl_layout_adds_up(entries):
    t = table(paper_tables(entries, n_boot=0), "frl")
    d = t.data.set_index("setting")
    # std + bndy = rob on averages (exact identity of the counts)
    for s in d.index:
        assert d.loc[s, "std_err_avg"] + d.loc[s, "bndy_err_avg"] == pytest.approx(d.loc[s, "rob_err_avg"])
    assert d.loc["st", "rob_err_worst"] == pytest.approx(1.0) and d.loc["st", "std_err_worst"] == pytest.approx(0.3)
    assert t.rows[0][t.columns.index("Worst Rob")] == "100.0"  # no bootstrap -> no interval


def test_benz_per_class_and_worst_highlight(entries):
    tables = paper_tables(entries, n_boot=0)
    rob = table(tables, "benz-robust")
    assert rob.columns == ["setting", "a", "b", "c"]
    lo, hi = wilson(10, 100)
    assert rob.rows[0][1] == f"10.0 [{100 * lo:.1f}, {100 * hi:.1f}]"
    assert rob.emph[0] == [False, False, True, False]  # st's worst robust class: b (0%)
    assert rob.rows[1][2] == "37.0 ± 9.9"  # b over seeds: 30, 44
    assert rob.emph[1] == [False, False, True, False]  # mean over seeds: b 37 < c 38
    long = rob.data
    assert set(long.columns) >= {"setting", "class", "metric", "value", "sd", "lo", "hi", "seeds"}
    assert len(long) == 2 * 3


def test_seed_table_counts_worst_class_changes(entries):
    t = table(paper_tables(entries, n_boot=0), "seeds")
    (row,) = t.rows
    assert row[0] == "at" and row[4] == "b, c" and row[5] == "2" and row[6] == "1/2"
    d = t.data[t.data["class"] == "b"].iloc[0]
    assert d["rob_acc_mean"] == pytest.approx(0.37) and d["worst_freq"] == pytest.approx(0.5)


def test_warnings_and_eps_tables():
    sweep = [entry(f"e{i}", [(10, 10, 10 - 3 * i), (10, 9, 9 - 4 * i)], ["x", "y"]).audit for i in range(3)]
    for i, a in enumerate(sweep):
        for r in a.reports.values():
            object.__setattr__(r, "eps", 0.05 * i)
    es = [entry("w", [(10, 5, 2), (10, 6, 3)], ["x", "y"], warnings=["possible gradient masking: <b>x</b>"],
                eps_sweep=sweep)]
    tables = paper_tables(es, n_boot=0, extra_warnings=["skipped runs/x: audit.json is truncated"])
    w = table(tables, "warnings")
    assert w.rows == [["w", "possible gradient masking: <b>x</b>"], ["(report)", "skipped runs/x: audit.json is truncated"]]
    e = table(tables, "eps")
    assert [r[1] for r in e.rows] == ["0", "0.05", "0.1"]
    assert [r[3] for r in e.rows] == ["90.0", "50.0", "10.0"]  # worst group y: 9, 5, 1 of 10


def test_pareto_front():
    assert pareto_front([(0.5, 0.2), (0.4, 0.3), (0.3, 0.1), (0.5, 0.2)]) == [True, True, False, True]
    assert pareto_front([(0.1, float("nan"))]) == [False]


def test_markdown_and_csv(entries, tmp_path):
    tables = paper_tables(entries, n_boot=0)
    t = table(tables, "summary")
    t.rows[0][0] = "a|b"
    md = table_markdown(t)
    assert "a\\|b" in md and md.count("\n|") >= 3
    assert to_markdown(tables, title="T").startswith("## T")
    paths = write_csvs(tables, tmp_path / "tables")
    assert {p.name for p in paths} == {"summary.csv", "frl.csv", "benz-clean.csv", "benz-robust.csv", "seeds.csv"}
    back = pd.read_csv(tmp_path / "tables" / "summary.csv")
    assert back["rob_acc_avg"].tolist() == pytest.approx([0.05, 0.42])


def test_duplicate_seed_in_a_setting_is_an_error():
    e = [entry("a", [(10, 5, 2)], ["x"], group="g", seed=0), entry("b", [(10, 5, 2)], ["x"], group="g", seed=0)]
    with pytest.raises(RobfairError, match="several runs with seed 0"):
        group_settings(e)
    with pytest.raises(RobfairError, match="no runs"):
        paper_tables([])
    with pytest.raises(RobfairError, match="baseline 'zzz' is not a setting"):
        paper_tables([entry("a", [(10, 5, 2)], ["x"])], baseline="zzz")


def test_benz_tables_split_by_class_list():
    es = [entry("d1", [(10, 5, 2), (10, 6, 3)], ["x", "y"]), entry("d2", [(10, 5, 2)] * 3, ["p", "q", "r"])]
    es[1].config["data"] = "other"
    keys = [t.key for t in paper_tables(es, n_boot=0)]
    assert "benz-robust-toy" in keys and "benz-robust-other" in keys


def test_rho_and_pareto_stay_within_a_dataset():
    es = [entry("d1-at", [(10, 9, 8), (10, 9, 6)], ["x", "y"]), entry("d1-st", [(10, 10, 2), (10, 9, 1)], ["x", "y"]),
          entry("d2", [(10, 5, 1), (10, 5, 1)], ["p", "q"])]
    es[2].config["data"] = "other"
    t = table(paper_tables(es, n_boot=0, baseline="d1-at"), "summary")
    rho = [r[t.columns.index("rho vs d1-at")] for r in t.rows]
    assert rho[0] == "+0.000" and rho[1] != "-" and rho[2] == "-"  # no rho across datasets
    # d2 is far below d1 but alone on its dataset: on its own front
    assert [r[-1] for r in t.rows] == ["yes", "", "yes"]
