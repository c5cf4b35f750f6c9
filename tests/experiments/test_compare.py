"""robfair compare on hand-built reports: the tests against closed forms and published values."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from robfair.auditing import AuditReport
from robfair.cli import main
from robfair.errors import RobfairError
from robfair.experiments.compare import compare
from robfair.metrics import GroupReport
from robfair.metrics.stats import holm, holm_levels, mcnemar_exact, paired_interval, two_proportion_test
from robfair.utils import write_json


def report(cells, classes=None):
    """cells: per class (n, clean correct, robust correct) -> a GroupReport with exactly those counts."""
    k = len(cells)
    ys, cs, advs = [], [], []
    for i, (n, c, r) in enumerate(cells):
        y = np.full(n, i)
        wrong = (i + 1) % k
        clean = np.where(np.arange(n) < c, i, wrong)
        adv = np.where(np.arange(n) < r, i, wrong)
        ys.append(y), cs.append(clean), advs.append(adv)
    return GroupReport.from_outcomes(y=np.concatenate(ys), clean_pred=np.concatenate(cs), adv_pred=np.concatenate(advs),
                                     class_names=classes or [f"c{i}" for i in range(k)], attack="pgd20", eps=0.1)


def test_compare_flags_only_real_differences():
    a = report([(100, 95, 50), (100, 90, 50), (100, 80, 40)])
    b = report([(100, 95, 90), (100, 90, 52), (100, 80, 41)])
    cmp = compare({"a": a, "b": b}, n_boot=500)
    pc = cmp.per_class.set_index(["class", "metric"])
    assert pc.loc[("c0", "rob_acc"), "diff"] == pytest.approx(0.40)
    assert bool(pc.loc[("c0", "rob_acc"), "beyond"]) is True
    assert bool(pc.loc[("c1", "rob_acc"), "beyond"]) is False and bool(pc.loc[("c2", "rob_acc"), "beyond"]) is False
    assert (pc.xs("clean_acc", level="metric")["diff"] == 0).all()
    assert not pc.xs("clean_acc", level="metric")["beyond"].any()
    # Holm over the 3 classes of robust accuracy
    raw = [two_proportion_test(50, 100, 90, 100)[1], two_proportion_test(50, 100, 52, 100)[1],
           two_proportion_test(40, 100, 41, 100)[1]]
    assert pc.xs("rob_acc", level="metric")["p_holm"].tolist() == pytest.approx(holm(raw))
    ag = cmp.aggregates.set_index("statistic")
    assert ag.loc["robust avg", "diff"] == pytest.approx((183 - 140) / 300)
    assert bool(ag.loc["robust avg", "beyond"]) is True
    # worst class: 40% (c2) -> 41% (c2): a 1-point change is within the bootstrap noise
    assert ag.loc["robust worst", "diff"] == pytest.approx(0.01)
    assert ag.loc["robust worst", "lo"] < 0 < ag.loc["robust worst", "hi"] and not ag.loc["robust worst", "beyond"]
    # gap: 10 points -> 49 points, far beyond
    assert ag.loc["robust gap", "diff"] == pytest.approx(0.39) and bool(ag.loc["robust gap", "beyond"])


def test_identical_runs_show_no_difference():
    a = report([(60, 50, 30), (60, 40, 20)])
    cmp = compare({"a": a, "a2": a}, n_boot=300)
    assert not cmp.per_class["beyond"].any() and not cmp.aggregates["beyond"].any()
    assert (cmp.aggregates["diff"].abs() < 1e-12).all()


def test_compare_refuses_different_classes():
    with pytest.raises(RobfairError, match="different classes"):
        compare({"a": report([(10, 5, 2), (10, 5, 2)]), "b": report([(10, 5, 2), (10, 5, 2)], ["x", "y"])})
    with pytest.raises(RobfairError, match="at least two"):
        compare({"a": report([(10, 5, 2)])})


def test_compare_cli_outputs(tmp_path, capsys):
    for name, cells in (("trades", [(100, 95, 50), (100, 90, 50)]), ("frl", [(100, 93, 60), (100, 88, 70)])):
        (tmp_path / name).mkdir()
        write_json(tmp_path / name / "audit.json", AuditReport({"pgd20": report(cells, ["cat", "<b>dog</b>"])}).to_json())
    for suffix in (".json", ".md", ".csv"):
        out = tmp_path / f"cmp{suffix}"
        with pytest.raises(SystemExit) as exc:
            main(["compare", str(tmp_path / "trades"), str(tmp_path / "frl"), "--out", str(out), "--bootstrap", "200"])
        assert exc.value.code == 0
        printed = capsys.readouterr().out
        assert "Per class, each run vs trades" in printed and "<b>dog</b>" in printed
    d = json.loads((tmp_path / "cmp.json").read_text())
    assert d["labels"] == ["trades", "frl"] and len(d["per_class"]) == 6  # 2 classes x clean, robust, bndy
    md = (tmp_path / "cmp.md").read_text()
    assert "| cat |" in md and "+20.0" in md  # dog robust 50 -> 70
    csv = (tmp_path / "cmp.csv").read_text().splitlines()
    assert csv[0].startswith("run,reference,class,metric") and len(csv) == 1 + 6 + 7
    # bad input: one line, exit 2, no file
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(tmp_path / "trades"), str(tmp_path / "missing"), "--out", str(tmp_path / "x.md")])
    assert exc.value.code == 2 and not (tmp_path / "x.md").exists()
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_boundary_error_differences():
    """FRL's question: boundary error (clean-correct but attacked) differences beside clean and robust."""
    a = report([(100, 90, 40), (100, 90, 80)])  # bndy err 50%, 10%
    b = report([(100, 90, 70), (100, 90, 80)])  # bndy err 20%, 10%
    cmp = compare({"a": a, "b": b}, n_boot=400)
    pc = cmp.per_class.set_index(["class", "metric"])
    assert pc.loc[("c0", "bndy_err"), "ref_value"] == pytest.approx(0.5) and pc.loc[("c0", "bndy_err"), "value"] == pytest.approx(0.2)
    assert pc.loc[("c0", "bndy_err"), "diff"] == pytest.approx(-0.3) and bool(pc.loc[("c0", "bndy_err"), "beyond"])
    assert pc.loc[("c1", "bndy_err"), "diff"] == 0 and not bool(pc.loc[("c1", "bndy_err"), "beyond"])
    ag = cmp.aggregates.set_index("statistic")
    assert ag.loc["boundary error avg", "diff"] == pytest.approx(-0.15)
    assert ag.loc["boundary error worst", "ref_value"] == pytest.approx(0.5)  # the worst is the largest error
    assert ag.loc["boundary error worst", "diff"] == pytest.approx(-0.3) and bool(ag.loc["boundary error worst", "beyond"])
    t = cmp.tables()[0]
    col = t.columns.index("Δ bndy err b")
    assert t.rows[0][col].startswith("-30.0 [") and t.rows[0][col].endswith(" *")
    assert t.good[0][col] and not t.emph[0][col]  # a drop in boundary error is good, not bad
    rob = t.columns.index("Δ robust b")
    assert t.good[0][rob] and not t.emph[0][rob]


def test_runs_named_by_folder_or_name(tmp_path, capsys):
    from robfair.experiments.compare import unique_labels

    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        write_json(tmp_path / folder / "audit_10k_best.json", AuditReport({"pgd20": report([(50, 40, 20), (50, 45, 30)])}).to_json())
    files = [tmp_path / "x" / "audit_10k_best.json", tmp_path / "y" / "audit_10k_best.json"]
    assert unique_labels(files) == ["audit_10k_best", "y/audit_10k_best"]
    (tmp_path / "run" / "sub").mkdir(parents=True)
    assert unique_labels([tmp_path / "run" / "audit.json", tmp_path / "run"]) == ["run", f"{tmp_path.name}/run"]
    assert unique_labels(files, ["trades", "frl"]) == ["trades", "frl"]
    with pytest.raises(SystemExit) as exc:
        main(["compare", *map(str, files), "--name", "trades", "--name", "frl", "--bootstrap", "0"])
    assert exc.value.code == 0
    assert "Per class, each run vs trades" in capsys.readouterr().out

def _paired_audit(y, clean, adv):
    from robfair.auditing import Outcomes

    n = len(y)
    out = Outcomes(index=np.arange(n), y=y, group=y.copy(), clean_pred=clean, adv_pred={"pgd20": adv[None]},
                   first_step={"pgd20": np.full((1, n), -1)}, class_names=["a", "b", "c"], group_names=["a", "b", "c"],
                   has_groups=False, radii=[0.1], eps=0.1)
    return AuditReport(out.reports(), outcomes=out)


def test_paired_audits_get_the_exact_mcnemar_test(tmp_path, capsys):
    """Two audits with outcomes on the same samples: exact McNemar on the discordant samples, flips counted."""
    from scipy.stats import binomtest

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    runs = []
    for p_clean, p_adv in ((0.9, 0.5), (0.85, 0.7)):
        clean = np.where(rng.random(300) < p_clean, y, (y + 1) % 3)
        adv = np.where(rng.random(300) < p_adv, clean, (clean + 1) % 3)
        runs.append(_paired_audit(y, clean, adv))
    for name, rep in zip(("one", "two"), runs):
        rep.save(tmp_path / name)
    cmp = compare({"one": runs[0], "two": runs[1]}, n_boot=0)
    pc = cmp.per_class.set_index(["class", "metric"])
    o1, o2 = runs[0].outcomes, runs[1].outcomes
    for metric, (ok1, ok2) in (("clean_acc", (o1.clean_pred == y, o2.clean_pred == y)),
                               ("rob_acc", (o1.robust(), o2.robust()))):
        for k, cname in enumerate(["a", "b", "c"]):
            sel = y == k
            b, c = int((ok1 & ~ok2 & sel).sum()), int((~ok1 & ok2 & sel).sum())
            row = pc.loc[(cname, metric)]
            assert row["test"] == "mcnemar-exact" and row["flips"] == b + c > 0
            assert row["p"] == pytest.approx(binomtest(b, b + c, 0.5).pvalue)
        avg = cmp.aggregates.set_index("statistic").loc[f"{'clean' if metric == 'clean_acc' else 'robust'} avg"]
        assert avg["test"] == "mcnemar-exact" and avg["flips"] == int((ok1 != ok2).sum())
        b, c = int((ok1 & ~ok2).sum()), int((~ok1 & ok2).sum())
        assert (avg["lo"], avg["hi"]) == paired_interval(b, c, 300, 0.05) and avg["interval"] == "paired"
    # the paired interval, at the level Holm's step-down tested each class: the star and the interval agree
    rows = cmp.per_class
    assert set(rows["interval"]) == {"paired"}
    for metric, sub in rows.groupby("metric"):
        levels = holm_levels(sub["p"].tolist(), 0.05)
        for (_, r), level in zip(sub.iterrows(), levels):
            assert r["level"] == pytest.approx(1 - level)
            sel = y == ["a", "b", "c"].index(r["class"])
            ok1, ok2 = _ok(o1, metric)[sel], _ok(o2, metric)[sel]
            assert (r["lo"], r["hi"]) == paired_interval(int((ok1 & ~ok2).sum()), int((~ok1 & ok2).sum()), r["n"], level)
            assert bool(r["beyond"]) == (not r["lo"] <= 0 <= r["hi"])
    assert rows["beyond"].any() and not rows["beyond"].all()
    # without outcomes (audit.json alone) the unpaired z-test runs
    unpaired = compare({"one": AuditReport.from_json(runs[0].to_json()), "two": runs[1]}, n_boot=0)
    assert set(unpaired.per_class["test"]) == {"z-test"} and set(unpaired.per_class["interval"]) == {"newcombe"}
    assert "95% Newcombe interval (independent samples)" in unpaired.tables()[0].note
    # other samples: not paired either
    other = _paired_audit(y[::-1].copy(), o2.clean_pred[::-1].copy(), o2.adv_pred["pgd20"][0][::-1].copy())
    assert set(compare({"one": runs[0], "x": other}, n_boot=0).per_class["test"]) == {"z-test"}
    # the CLI reads outcomes.npz beside audit.json
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(tmp_path / "one"), str(tmp_path / "two"), "--bootstrap", "0", "--out", str(tmp_path / "c.json")])
    assert exc.value.code == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "exact McNemar" in printed and "flipped" in printed
    assert "paired interval (Tango's score interval" in printed and "Newcombe" not in printed
    r = cmp.per_class.set_index(["class", "metric"]).loc[("a", "rob_acc")]
    assert f"{100 * r['diff']:+.1f} [{100 * r['lo']:+.1f}, {100 * r['hi']:+.1f}]" in printed  # the paired interval, shown
    saved = json.loads((tmp_path / "c.json").read_text())
    assert {row["interval"] for row in saved["per_class"]} == {"paired"}


def _ok(o, metric):
    return o.clean_pred == o.y if metric == "clean_acc" else o.robust() if metric == "rob_acc" else \
        (o.clean_pred == o.y) & ~o.robust()


def _flipped_runs(tables):
    """Two paired audits whose clean (and, with no attack success, robust) outcomes per class are
    given as (n, b, c): b samples right in the first run only, c in the second only, the rest right in both."""
    y, first, second = [], [], []
    for k, (n, b, c) in enumerate(tables):
        y += [k] * n
        first += [k] * b + [(k + 1) % 3] * c + [k] * (n - b - c)
        second += [(k + 1) % 3] * b + [k] * c + [k] * (n - b - c)
    y = np.array(y)
    return [_paired_audit(y, np.array(p), np.array(p)) for p in (first, second)]


def test_paired_intervals_follow_holms_levels():
    """A class whose raw p is below alpha but that Holm's step-down does not reject gets no star, and its
    interval (at the step-down's level) holds 0; a 95% interval would have excluded it."""
    one, two = _flipped_runs([(30, 0, 9), (30, 0, 6), (30, 0, 6)])  # p = 1/256, 1/32, 1/32
    cmp = compare({"one": one, "two": two}, n_boot=0)
    pc = cmp.per_class[cmp.per_class["metric"] == "clean_acc"].set_index("class")
    assert pc["p"].tolist() == pytest.approx([2 / 2 ** 9, 2 / 2 ** 6, 2 / 2 ** 6])
    assert pc["beyond"].tolist() == [True, False, False]  # Holm: 1/256 < 0.05/3, then 1/32 >= 0.05/2: stop
    assert pc["level"].tolist() == pytest.approx([1 - 0.05 / 3, 1 - 0.025, 1 - 0.025])
    for cls in ("b", "c"):
        assert pc.loc[cls, "lo"] <= 0 <= pc.loc[cls, "hi"]
        assert paired_interval(0, 6, 30, 0.05)[0] > 0 and mcnemar_exact(0, 6) < 0.05
    assert pc.loc["a", "lo"] > 0
    t = cmp.tables()[0]
    col = t.columns.index("Δ clean two")
    assert [row[col].endswith(" *") for row in t.rows] == [True, False, False]
    assert t.rows[1][col].startswith("+20.0 [0, ")  # stretched to reach 0: printed as 0, not +0.0
    avg = cmp.aggregates.set_index("statistic").loc["clean avg"]
    assert avg["beyond"] and avg["lo"] > 0 and (avg["lo"], avg["hi"]) == paired_interval(0, 21, 90, 0.05)


def test_a_bootstrap_p_of_zero_prints_below_its_resolution_everywhere(tmp_path, capsys, monkeypatch):
    """Gap 10 -> 60 points: no bootstrap replicate on the other side, p = 0 exactly. The terminal and
    the Markdown print ``< 2/B`` (``< 0.002`` at B = 1000: p is twice the smaller tail share, so 2/B
    is the smallest p B replicates resolve), never ``0``; JSON and CSV keep the 0 with the
    resolution beside it; a p the replicates do resolve prints as its number."""
    from robfair.experiments.compare import p_text

    cells = {"a": [(200, 190, 100), (200, 180, 80)], "b": [(200, 190, 190), (200, 180, 70)]}
    for name, c in cells.items():
        (tmp_path / name).mkdir()
        write_json(tmp_path / name / "audit.json", AuditReport({"pgd20": report(c)}).to_json())
    cmp = compare({k: report(c) for k, c in cells.items()}, n_boot=1000)
    ag = cmp.aggregates.set_index("statistic")
    assert ag.loc["robust gap", "p"] == 0 and ag.loc["robust gap", "p_resolution"] == pytest.approx(0.002)
    assert math.isnan(ag.loc["robust avg", "p_resolution"])  # exact tests: no resolution, their own p
    monkeypatch.setenv("COLUMNS", "250")
    files = {s: tmp_path / f"cmp{s}" for s in (".md", ".json", ".csv")}
    for out in files.values():
        with pytest.raises(SystemExit) as exc:
            main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--bootstrap", "1000", "--out", str(out)])
        assert exc.value.code == 0
        printed = capsys.readouterr().out
        gap = next(l for l in printed.splitlines() if "robust gap" in l)
        assert "< 0.002" in gap and "│ 0 " not in gap
    md_gap = next(l for l in files[".md"].read_text().splitlines() if "| robust gap |" in l)
    assert "| &lt; 0.002 |" in md_gap  # Markdown cells escape "<" (it renders as "< 0.002")
    assert "2/1000 where no replicate fell on one side" in files[".md"].read_text()
    j = next(r for r in json.loads(files[".json"].read_text())["aggregates"] if r["statistic"] == "robust gap")
    assert j["p"] == 0 and j["p_resolution"] == pytest.approx(0.002)
    head, *rows = files[".csv"].read_text().splitlines()
    cols = head.split(",")
    row = dict(zip(cols, next(r for r in rows if ",robust gap," in r).split(",")))
    assert float(row["p"]) == 0 and float(row["p_resolution"]) == pytest.approx(0.002)
    assert p_text(0.0, 0.002) == "< 0.002" and p_text(0.0314, 0.002) == "0.0314" and p_text(1e-80) == "1e-80"
    assert p_text(0.0) == "0"  # an exact test's p of 0 is printed as it is (underflow), never dressed as a bound
