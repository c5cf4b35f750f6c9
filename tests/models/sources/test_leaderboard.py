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


def _weak(net):
    weak = copy.deepcopy(net)
    with torch.no_grad():
        weak.head.weight.mul_(0.3)  # smaller margins: less robust under the same attack
        weak.head.bias.add_(torch.tensor([0.3, -0.2, 0.0]))
    return weak


def test_leaderboard_page_opens_with_the_ranking_and_ties_identical_models(tiny, data_npz, tmp_path, capsys):
    """The same weights as TorchScript and as a state dict give the same outcomes: they share rank 1
    (marked a tie), the weaker model is 3rd; the page and the Markdown open with the ranking and each
    model's reliability verdict, the figures after it."""
    from robfair.report import reliability as rel

    mod, net = tiny
    ts, sd, weak = tmp_path / "strong.ts", tmp_path / "strong.pt", tmp_path / "weak.pt"
    torch.jit.save(torch.jit.script(net), ts)
    torch.save(net.state_dict(), sd)
    torch.save(_weak(net).state_dict(), weak)
    out = tmp_path / "board.html"
    code, stdout, err = run_cli(["leaderboard", weak, ts, sd, "--data", f"npz:{data_npz}", "--eps", "0.03",
                                 "--attack", "pgd5", "--arch", f"{mod.__file__}:TinyNet", "--arch-kwargs", "width: 5",
                                 "--bootstrap", "50", "--probe", "all", "--device", "cpu", "--out", out], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(open(tmp_path / "board_tables" / "leaderboard.csv")))
    assert [(r["model"], r["rank"], r["tied"]) for r in rows] == [("strong.ts", "1", "True"), ("strong.pt", "1", "True"),
                                                                  ("weak.pt", "3", "False")]
    assert rows[0]["rob_acc_worst"] == rows[1]["rob_acc_worst"] and rows[0]["rob_acc_avg"] == rows[1]["rob_acc_avg"]
    ds = load_dataset(f"npz:{data_npz}")
    for r, m in zip(rows, (net, net, _weak(net))):  # each verdict is the one its own audit's probe gives
        rep = robfair.audit(m, ds, attacks=["pgd5"], eps=0.03, device="cpu", probe="all")
        assert r["reliability"] == rel.status(rep.probe) and r["reliability"] in (rel.PASSED, rel.FLAGGED, rel.OPEN)
        assert float(r["rob_acc_worst"]) == pytest.approx(rep.aggregates()["rob_acc"]["worst"], abs=1e-6)
    page = out.read_text()
    first = page.index("Worst-class robust accuracy leaderboard</h3>")
    assert first < page.index('id="probe"') < page.index('<section id="figures">') < page.index("<img")
    assert first < page.index("FRL layout")
    head = page[first:page.index("</table>", first)]
    assert head.count("1 (tie)") == 2 and ">3<" in head and "reliability" in head
    md = (tmp_path / "board.md").read_text()
    body = md.split("\n\n", 2)  # the title, the one-line description, then the ranking
    assert body[0].startswith("## worst-class robustness leaderboard") and "3 models on npz:" in body[1]
    assert body[2].lstrip().startswith("### Worst-class robust accuracy leaderboard")
    assert md.index("| 1 (tie) | strong.ts |") < md.index("| 3 | weak.pt |") < md.index("reliability probe")
    assert md.index("| 3 | weak.pt |") < md.index("- runs: 3")
    assert "1 (tie)" in stdout and "reliability" in stdout


def test_leaderboard_takes_an_arch_and_its_arguments_per_model(tiny, data_npz, calibrate, tmp_path, capsys):
    """Two widths of one class in one run: --model / --arch / --arch-kwargs repeated per model, or one
    --arch with --arch-kwargs per model; each row is that model's own audit."""
    mod, net = tiny
    wide = calibrate(mod.TinyNet(width=7).eval(), torch.rand(200, 1, 8, 8, generator=torch.Generator().manual_seed(2)))
    a, b = tmp_path / "w5.pt", tmp_path / "w7.pt"
    torch.save(net.state_dict(), a)
    torch.save(wide.state_dict(), b)
    arch = f"{mod.__file__}:TinyNet"
    ds = load_dataset(f"npz:{data_npz}")
    want = {n: robfair.audit(m, ds, attacks=["pgd5"], eps=0.03, device="cpu", probe=0).aggregates()["rob_acc"]
            for n, m in (("w5.pt", net), ("w7.pt", wide))}
    assert want["w5.pt"]["avg"] != want["w7.pt"]["avg"]
    ts = tmp_path / "w5.ts"  # brings its architecture: '-' in its place
    torch.jit.save(torch.jit.script(net), ts)
    want["w5.ts"] = want["w5.pt"]
    common = ["--data", f"npz:{data_npz}", "--eps", "0.03", "--attack", "pgd5", "--probe", "0", "--bootstrap", "20",
              "--device", "cpu", "--no-figures"]
    forms = {"per-model": ["--model", a, "--arch", arch, "--arch-kwargs", "width: 5",
                           "--model", b, "--arch", arch, "--arch-kwargs", "{width: 7}"],
             "shared-arch": [a, b, "--arch", arch, "--arch-kwargs", "width: 5", "--arch-kwargs", "width: 7"],
             "none-for-one": ["--model", ts, "--arch", "-", "--arch-kwargs", "-",
                              "--model", b, "--arch", arch, "--arch-kwargs", "width: 7"]}
    for form, args in forms.items():
        out = tmp_path / form / "lb.html"
        code, _, err = run_cli(["leaderboard", *args, *common, "--out", out], capsys)
        assert code == 0, (form, err)
        rows = list(csv.DictReader(open(out.parent / "lb_tables" / "leaderboard.csv")))
        assert sorted(r["model"] for r in rows) == (["w5.ts", "w7.pt"] if form == "none-for-one" else ["w5.pt", "w7.pt"])
        for r in rows:
            assert float(r["rob_acc_avg"]) == pytest.approx(want[r["model"]]["avg"], abs=1e-6), form
            assert float(r["rob_acc_worst"]) == pytest.approx(want[r["model"]]["worst"], abs=1e-6), form
            assert r["reliability"] == "skipped"  # --probe 0
    # one width for both is the other model's error, named (the weights do not fit width 5)
    code, _, err = run_cli(["leaderboard", a, b, "--arch", arch, "--arch-kwargs", "width: 5", *common,
                            "--out", tmp_path / "x" / "lb.html"], capsys)
    assert code == 2 and "w7.pt" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, said", [
    (["A", "B", "C", "--arch", "ARCH", "--arch", "ARCH"], "3 models but 2 --arch: give --arch once"),
    (["--model", "A", "--model", "B", "--arch-kwargs", "width: 5", "--arch-kwargs", "width: 5",
      "--arch-kwargs", "width: 5"], "2 models but 3 --arch-kwargs"),
    (["A", "--model", "B"], "either as arguments or as repeated --model, not both"),
    (["--model", "A"], "at least two models"),
])
def test_leaderboard_model_counts_are_one_line(tiny, data_npz, tmp_path, capsys, args, said):
    mod, net = tiny
    a = tmp_path / "a.pt"
    torch.save(net.state_dict(), a)
    repl = {"A": a, "B": a, "C": a, "ARCH": f"{mod.__file__}:TinyNet"}
    argv = ["leaderboard", *[repl.get(x, x) for x in args], "--data", f"npz:{data_npz}", "--eps", "0.03",
            "--probe", "0", "--device", "cpu", "--out", tmp_path / "lb.html"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == [a]
