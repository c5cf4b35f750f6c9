"""The command line with groups: audit --groups/--eps-sweep/--distances, train --groups with the fair
methods' options (--opt, and the deprecated --fairness/--lam/--dual-step aliases), and every bad input
of the issue (one line on stderr, exit code 2, nothing written)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from _shared import run_cli


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A linear checkpoint and an npz dataset with two groups (digits, groups = odd / even)."""
    from robfair.data import load_dataset
    from robfair.models import create, save_checkpoint

    d = tmp_path_factory.mktemp("cli-groups")
    torch.manual_seed(0)
    tr = load_dataset("digits", "train")
    model = create("mlp", 10, (1, 8, 8), hidden=[])
    opt = torch.optim.Adam(model.parameters(), 0.02)
    x = tr.images()
    for _ in range(60):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), tr.y).backward()
        opt.step()
    save_checkpoint(d / "lin.pt", model, classes=tr.classes)
    te = load_dataset("digits", "test").subset(slice(0, 120))
    y = te.y.numpy()
    np.savez(d / "dg.npz", x=te.images().numpy(), y=y, g=y % 2, classes=np.array(te.classes),
             groups=np.array(["even", "odd"]))
    np.savez(d / "hole.npz", x=te.images().numpy(), y=y, g=np.zeros_like(y), classes=np.array(te.classes),
             groups=np.array(["even", "odd"]))
    return d


def test_audit_with_groups_sweep_and_distances(setup, tmp_path, capsys):
    out = tmp_path / "a.json"
    code, text, err = run_cli(["audit", "-m", setup / "lin.pt", "-d", f"npz:{setup / 'dg.npz'}", "--groups", "g",
                           "--attack", "fgsm", "--eps", "0.05", "--eps-sweep", "0:0.1:3", "--distances",
                           "--bootstrap", "0", "-o", out], capsys)
    assert code == 0, err
    for title in ("per class", "per (group x class) cell", "accuracy parity", "robust acc % vs eps",
                  "distance to the decision boundary (linf, exact"):
        assert title in text
    d = json.loads(out.read_text())
    sweep = d["eps_sweep"]["fgsm"]
    assert sweep["eps"] == pytest.approx([0, 0.05, 0.1]) and set(sweep["curve"]) == {"even", "odd", "all"}
    # the sweep at the audit radius agrees with the audit itself (FGSM is deterministic)
    assert sweep["reports"][1]["counts"] == d["reports"]["fgsm"]["counts"]
    assert d["distances"]["method"] == "exact" and set(d["distances"]["summary"]) == {"even", "odd"}
    assert d["reports"]["fgsm"]["group_names"] == ["even", "odd"]


@pytest.mark.parametrize("args,msg", [
    (["-d", "digits", "--groups", "race"], "dataset 'digits' has no group attribute 'race'"),
    (["-d", "{hole}", "--groups", "g"], "have no samples in the test split (odd)"),
    (["-d", "{dg}", "--eps-sweep", "16/255:0:9"], "stop 0 is below start 0.0627"),
])
def test_audit_bad_inputs(setup, tmp_path, capsys, args, msg):
    args = [a.format(hole=f"npz:{setup / 'hole.npz'}", dg=f"npz:{setup / 'dg.npz'}") for a in args]
    out = tmp_path / "bad.json"
    code, text, err = run_cli(["audit", "-m", setup / "lin.pt", *args, "-o", out], capsys)
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_train_bad_inputs_write_nothing(setup, tmp_path, capsys):
    run_dir = tmp_path / "r"
    code, _, err = run_cli(["train", "-d", "digits", "--method", "fair-constraint", "--opt", "fairness=equal-opportunity",
                        "--epochs", "1", "-o", run_dir], capsys)
    assert code == 2 and "needs binary labels but the task has 10 classes" in err and len(err.strip().splitlines()) == 1
    assert not run_dir.exists()
    code, _, err = run_cli(["train", "-d", "digits", "--groups", "race", "--epochs", "1", "-o", run_dir], capsys)
    assert code == 2 and "no group attribute 'race'" in err and not run_dir.exists()


FAIR_RUN = ["--groups", "g", "--model", "mlp", "--method", "fair-constraint", "--epochs", "1",
            "--set", "val_attack=fgsm", "--eps", "0.05", "--audit-attack", "none"]


def _fair_run(setup, run_dir, capsys, *options):
    code, text, err = run_cli(["train", "-d", f"npz:{setup / 'dg.npz'}", *FAIR_RUN, *options, "-o", run_dir], capsys)
    assert code == 0, err
    import yaml

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["data"].endswith(",groups=g") and cfg["method"] == "fair-constraint"
    rec = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert set(rec["method"]["lambda"]) == {"even", "odd"} and rec["method"]["violation"]["max"] is not None
    assert set(rec["val"]["per_group"]) == {"even", "odd"}
    return cfg["method_options"], err


def test_train_with_groups_and_fairness_options(setup, tmp_path, capsys):
    opts, err = _fair_run(setup, tmp_path / "fair", capsys,
                          "--opt", "fairness=loss-parity", "--opt", "lam=0.3", "--opt", "dual_step=0.1")
    assert opts["fairness"] == "loss-parity" and opts["lam"] == 0.3 and opts["dual_step"] == 0.1
    assert "deprecated" not in err


def test_deprecated_fairness_flags_warn_name_the_opt_form_and_still_work(setup, tmp_path, capsys):
    opts, err = _fair_run(setup, tmp_path / "old", capsys, "--fairness", "loss-parity", "--lam", "0.3",
                          "--dual-step", "0.1")
    assert opts["fairness"] == "loss-parity" and opts["lam"] == 0.3 and opts["dual_step"] == 0.1
    warnings = [line for line in err.splitlines() if "deprecated" in line]
    assert warnings == ["warning: --fairness is deprecated; write --opt fairness=loss-parity (`robfair methods NAME` "
                        "lists a method's options)",
                        "warning: --lam is deprecated; write --opt lam=0.3 (`robfair methods NAME` lists a method's "
                        "options)",
                        "warning: --dual-step is deprecated; write --opt dual_step=0.1 (`robfair methods NAME` lists "
                        "a method's options)"]


def test_deprecated_fairness_flags_are_hidden_from_help(capsys):
    code, out, _ = run_cli(["train", "--help"], capsys)
    assert code == 0 and "--opt" in out and "robfairmethodsNAME" in re.sub(r"\s|│", "", out)
    for flag in ("--fairness", "--lam", "--dual-step"):
        assert flag not in out


@pytest.mark.parametrize("args,msg", [
    (["--method", "trades", "--lam", "0.3"], "method 'trades' has no option 'lam'; valid options (robfair methods trades): beta"),
    (["--method", "pgd-at", "--fairness", "loss-parity"], "method 'pgd-at' has no option 'fairness'"),
    (["--method", "trades", "--opt", "dual_step=0.1"], "method 'trades' has no option 'dual_step'"),
    (["--method", "fair-constraint", "--opt", "lamda=1"], "has no option 'lamda'; did you mean 'lam'?"),
])
def test_train_refuses_an_option_the_method_does_not_declare(tmp_path, capsys, args, msg):
    run_dir = tmp_path / "r"
    code, _, err = run_cli(["train", "-d", "digits", *args, "--epochs", "1", "-o", run_dir], capsys)
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, err
    assert not run_dir.exists()
