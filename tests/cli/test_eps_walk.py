"""The radius's walk from ``robfair audit --eps`` to the attacks: parsed once, at the edge, and trusted
after (issue 24, part 3). Counted, not read from the code: every call of Radius.parse / Sweep.parse on
a value that is not already a Radius / Sweep is a parse; every as_eps call with a plain value is a
check. One audit with two attacks, a sweep and the probe parses the radius once and the sweep once,
and its attacks check neither again."""

from __future__ import annotations

import importlib
import json
import warnings

import numpy as np
import pytest
import torch

from _shared import probe_problem, run_cli
from robfair.attacks import radius as radius_mod


@pytest.fixture
def counted(monkeypatch):
    """Counters of real parses (Radius / Sweep) and of as_eps calls that check a plain radius."""
    seen = {"radius": [], "sweep": [], "as_eps_plain": 0, "as_eps_radius": 0}
    real_r, real_s = radius_mod.Radius.parse.__func__, radius_mod.Sweep.parse.__func__

    def radius_parse(cls, eps, n=None, *, what="epsilon"):
        if not isinstance(eps, radius_mod.Radius):
            seen["radius"].append(what)
        return real_r(cls, eps, n, what=what)

    def sweep_parse(cls, values, what="eps_values"):
        if not isinstance(values, radius_mod.Sweep):
            seen["sweep"].append(what)
        return real_s(cls, values, what)

    monkeypatch.setattr(radius_mod.Radius, "parse", classmethod(radius_parse))
    monkeypatch.setattr(radius_mod.Sweep, "parse", classmethod(sweep_parse))
    attack_mod = importlib.import_module("robfair.attacks.attack")
    real_as_eps = attack_mod.as_eps

    def as_eps(eps, x, what="epsilon"):
        if what == "epsilon":
            seen["as_eps_radius" if isinstance(eps, radius_mod.Radius) else "as_eps_plain"] += 1
        return real_as_eps(eps, x, what)

    for mod in ("robfair.attacks.attack", "robfair.attacks.pgd", "robfair.attacks.trades"):
        monkeypatch.setattr(importlib.import_module(mod), "as_eps", as_eps)
    return seen


@pytest.fixture
def model_and_data(tmp_path):
    model, ds = probe_problem(masked=False, n=60)
    with warnings.catch_warnings():  # TorchScript is deprecated in torch 2.13, and one of the formats robfair reads
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace(model, ds.x[:2]).save(str(tmp_path / "net.pt"))
    np.savez(tmp_path / "data.npz", x=ds.x.numpy(), y=ds.y.numpy(), classes=np.array(ds.classes, dtype=str))
    return tmp_path / "net.pt", f"npz:{tmp_path / 'data.npz'}"


def test_robfair_audit_parses_the_radius_once_and_no_attack_checks_it_again(counted, model_and_data, tmp_path,
                                                                            capsys):
    net, data = model_and_data
    probe = ["--probe", "1"] if importlib.util.find_spec("pyautoattack") else ["--probe", "0"]
    out = tmp_path / "audit.json"
    code, _, err = run_cli(["audit", "--model", net, "--data", data, "--attack", "fgsm", "--attack", "pgd10",
                            "--eps", "2*4/255", "--eps-sweep", "0:16/255:3", "--bootstrap", "0", "--device", "cpu",
                            "--batch-size", "16", "--out", out, *probe], capsys)
    assert code == 0, err
    assert counted["radius"] == ["--eps"], counted  # the option, once; audit(), the engine, probe, examples: none
    assert counted["sweep"] == ["--eps-sweep"], counted
    assert counted["as_eps_plain"] == 0 and counted["as_eps_radius"] > 0, counted
    meta = json.loads(out.read_text())["meta"]
    assert meta["eps"] == pytest.approx(8 / 255)


def test_a_bad_radius_is_refused_before_the_model_is_read(counted, tmp_path, capsys):
    code, _, err = run_cli(["audit", "--model", tmp_path / "absent.pt", "--eps", "8/", "--bootstrap", "0"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--eps '8/' is not a number" in err, err  # not "absent.pt"
    code, _, err = run_cli(["audit", "--model", tmp_path / "absent.pt", "--eps", "8", "--bootstrap", "0"], capsys)
    assert code == 2 and "--eps 8 is above 1" in err, err
    code, _, err = run_cli(["audit", "--model", tmp_path / "absent.pt", "--eps-sweep", "0:1:x"], capsys)
    assert code == 2 and "not an integer" in err, err


def test_the_python_api_parses_once_where_it_enters(counted):
    import robfair

    model, ds = probe_problem(masked=False, n=40)
    rep = robfair.audit(model, ds, attacks=["fgsm", "pgd5"], eps="0.05", probe=0, device="cpu", batch_size=16)
    assert counted["radius"] == ["epsilon"] and counted["as_eps_plain"] == 0, counted
    assert rep.meta["eps"] == pytest.approx(0.05)
    per = torch.linspace(0, 0.1, len(ds))
    counted["radius"].clear()
    rep = robfair.audit(model, ds, attacks=["pgd5"], eps=per, probe=0, device="cpu", batch_size=16)
    assert counted["radius"] == ["epsilon"] and counted["as_eps_plain"] == 0 and rep.meta["eps"] == "per-sample"
