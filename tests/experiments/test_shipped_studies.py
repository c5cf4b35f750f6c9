"""The studies in studies/: each loads, expands to valid runs, and comes in a CPU and a paper size."""

from __future__ import annotations

from pathlib import Path

import pytest

from robfair.data.loading import split_options
from robfair.errors import ConfigError
from robfair.experiments import load_study

STUDIES = sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.yaml"))
CPU_DATA = ("digits", "fashion-mnist", "mnist")
#: real data at CPU size: a seeded subset of at most this many training images per class
CPU_SUBSET = {"cifar10-jpeg": 1250}
#: the CPU-size studies on the papers' own dataset, which name their paper-size counterpart in vars.paper_size
CIFAR_CPU = {"benz-classwise-cifar-cpu": "benz-classwise-paper", "fair-methods-cifar-cpu": "successors-paper",
             "benz-pair-cifar-seeds": "benz-classwise-paper", "fair-methods-cifar-seeds": "successors-paper"}


def test_every_study_has_a_cpu_and_a_paper_size():
    names = {p.stem for p in STUDIES}
    assert {"benz-classwise", "frl-table", "successors", "tran-fairness", *CIFAR_CPU} <= names
    for n in names:
        if n.endswith("-cpu") or n in CIFAR_CPU:
            study = load_study(next(p for p in STUDIES if p.stem == n))
            assert study.size == "cpu" and n in CIFAR_CPU, n
            assert study.vars.get("paper_size") == CIFAR_CPU[n] and CIFAR_CPU[n] in names, n
            continue
        base = n.removesuffix("-paper")
        assert base in names and f"{base}-paper" in names, n


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_study_expands(path, tmp_path):
    study = load_study(path)
    assert study.name == path.stem and study.size == ("paper" if path.stem.endswith("-paper") else "cpu")
    if study.missing_methods():
        pytest.skip(f"needs {study.missing_methods()}")
    try:
        runs = study.expand(tmp_path / "runs")
    except ConfigError as e:
        if "which is not registered" in str(e):
            pytest.skip(str(e))  # a method another issue adds has not landed yet
        raise
    assert runs and len({r.name for r in runs}) == len(runs)
    data = {r.train["data"].split(":")[0].split(",")[0] for r in runs}
    if study.size == "cpu":
        assert data <= set(CPU_DATA) | set(CPU_SUBSET), data
        for r in runs:  # real data at CPU size only as a small seeded subset
            name, opts = split_options(r.train["data"])
            if name.split(":")[0] in CPU_SUBSET:
                assert 0 < int(opts["per_class"]) <= CPU_SUBSET[name.split(":")[0]], r.train["data"]
    else:
        assert not data & set(CPU_DATA), data
    for r in runs:  # honest selection (issue 22): a model trained on no attack is never picked by robust accuracy
        if r.train["method"] == "standard":
            assert r.train["select"] in ("clean", "last"), (r.name, r.train["select"])
    groups = {r.group for r in runs}
    if study.report.baseline is not None:
        assert study.report.baseline in groups


@pytest.mark.parametrize("name", sorted(CIFAR_CPU))
def test_cifar_cpu_studies_dry_run_through_the_cli(name, tmp_path, capsys):
    """`robfair sweep STUDY --dry-run` plans every run of the CIFAR CPU studies and trains nothing."""
    from tests._shared import run_cli

    out = tmp_path / name
    code, stdout, err = run_cli(["sweep", STUDIES[0].parent / f"{name}.yaml", "--out", out, "--dry-run"], capsys)
    assert code == 0, err
    expected = {"benz-classwise-cifar-cpu": ["standard", "pgd-at", "trades"],
                "fair-methods-cifar-cpu": ["trades", "frl", "cfa", "wat", "dafa", "faal"],
                "benz-pair-cifar-seeds": ["pgd-at", "standard"],
                "fair-methods-cifar-seeds": ["trades", "frl", "cfa", "faal"]}[name]
    seeds = (0, 1, 2) if name.endswith("-seeds") else (0,)
    for run in expected:
        for seed in seeds:
            assert f"{run},seed={seed}" in stdout
    assert f"{len(expected) * len(seeds)} runs" in stdout
    assert not any(out.rglob("metrics.jsonl")) and not any(out.rglob("audit.json"))
    study = load_study(STUDIES[0].parent / f"{name}.yaml")
    runs = study.expand(tmp_path / "x")
    if name.endswith("-seeds"):  # issue 22: ~1,200 training images per class, the whole test split, 3 seeds
        assert {r.train["data"] for r in runs} == {"cifar10-jpeg,per_class=1250,test_per_class=1000"}
        assert {r.train["val_per_class"] for r in runs} == {50} and {r.audit["probe"] for r in runs} == {1.0}
        if name == "fair-methods-cifar-seeds":  # each seed fine-tunes the benz pair's PGD-AT model of its seed
            benz = load_study(STUDIES[0].parent / "benz-pair-cifar-seeds.yaml")
            at = {r.seed: r for r in benz.expand(tmp_path / "b") if r.variant == "pgd-at"}
            for r in runs:
                assert r.train["init"] == f"{benz.out_dir}/{at[r.seed].name}/checkpoints/best.pt", r.name
                for key in ("data", "model", "eps", "attack_options", "val_per_class", "batch_size"):
                    assert str(r.train[key]) == str(at[r.seed].train[key]), key
        return
    assert {r.train["data"] for r in runs} == {"cifar10-jpeg,per_class=550,test_per_class=100"}
    assert {r.train["model"] for r in runs} == {"cifar-cnn"} and {r.audit["probe"] for r in runs} == {10.0}  # 10x the audit's compute
    if name == "fair-methods-cifar-cpu":  # every method a 2-epoch fine-tune of the benz study's TRADES run
        benz = load_study(STUDIES[0].parent / "benz-classwise-cifar-cpu.yaml")
        trades = next(r for r in benz.expand(tmp_path / "b") if r.variant == "trades")
        assert {r.train["init"] for r in runs} == {f"{benz.out_dir}/{trades.name}/checkpoints/best.pt"}
        assert {r.train["epochs"] for r in runs} == {2} and trades.train["epochs"] == 5
        for key in ("data", "model", "eps", "attack_options", "val_per_class", "batch_size"):
            assert {str(r.train[key]) for r in runs} == {str(trades.train[key])}, key
