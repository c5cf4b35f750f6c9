"""``robfair leaderboard`` on two small models of the test's own architecture, in two file forms."""

from __future__ import annotations

import copy
import csv

import numpy as np
import pytest
import torch

import robfair
from _shared import run_cli
from robfair.data import load_dataset


def test_leaderboard_ranks_by_worst_class_robust_accuracy(tiny, data_npz, tmp_path, capsys):
    mod, net = tiny
    weak = copy.deepcopy(net)
    with torch.no_grad():
        weak.head.weight.mul_(0.3)  # smaller margins: less robust under the same attack
        weak.head.bias.add_(torch.tensor([0.3, -0.2, 0.0]))
    ts = tmp_path / "strong.ts"
    torch.jit.save(torch.jit.script(net), ts)
    sd = tmp_path / "weak.pt"
    torch.save(weak.state_dict(), sd)
    out = tmp_path / "lb" / "board.html"
    args = ["leaderboard", sd, ts, "--data", f"npz:{data_npz}", "--eps", "0.03", "--attack", "fgsm",
            "--attack", "pgd5", "--arch", f"{mod.__file__}:TinyNet", "--arch-kwargs", '{"width": 5}',
            "--bootstrap", "50", "--device", "cpu", "--out", out, "--no-figures"]
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    page = out.read_text()
    assert "Worst-class robust accuracy leaderboard" in page
    rows = list(csv.DictReader(open(out.parent / "board_tables" / "leaderboard.csv")))
    # the same numbers as auditing each model with robfair.audit under the same attacks and seed
    ds = load_dataset(f"npz:{data_npz}")
    want = {}
    for name, m in (("strong.ts", net), ("weak.pt", weak)):
        rep = robfair.audit(m, ds, attacks=["fgsm", "pgd5"], eps=0.03, device="cpu")
        want[name] = rep.aggregates()["rob_acc"]
    order = sorted(want, key=lambda k: -want[k]["worst"])
    assert [r["model"] for r in rows] == order and [r["rank"] for r in rows] == ["1", "2"]
    assert want["strong.ts"]["worst"] != want["weak.pt"]["worst"]
    for r in rows:
        w = want[r["model"]]
        assert float(r["rob_acc_worst"]) == pytest.approx(w["worst"], abs=1e-6)
        assert float(r["rob_acc_avg"]) == pytest.approx(w["avg"], abs=1e-6)
        assert float(r["rob_acc_gap"]) == pytest.approx(w["gap"], abs=1e-6)
        assert float(r["rob_acc_worst_lo"]) <= float(r["rob_acc_worst"]) <= float(r["rob_acc_worst_hi"])
        assert float(r["rob_acc_avg_lo"]) <= float(r["rob_acc_avg"]) <= float(r["rob_acc_avg_hi"])
    assert "rank" in stdout and order[0] in stdout
    # every paper table of the report machinery follows the leaderboard on the page
    assert page.index("leaderboard") < page.index("FRL layout")


def test_leaderboard_bad_input(tmp_path, data_npz, capsys):
    code, _, err = run_cli(["leaderboard", tmp_path / "a.pt", "--data", f"npz:{data_npz}", "--eps", "0.1",
                            "--out", tmp_path / "x.html"], capsys)
    assert code == 2 and "at least two models" in err
    assert not (tmp_path / "x.html").exists()
