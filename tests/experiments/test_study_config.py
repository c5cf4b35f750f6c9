"""Study YAML: expansion, run names, collisions, ${...} references, unknown keys, empty grids, hashes."""

from __future__ import annotations

import pytest

from robfair.errors import ConfigError
from robfair.experiments import RunSpec, StudyConfig, config_hash, load_study
from robfair.experiments.config import sanitize


def study(d: dict) -> StudyConfig:
    return StudyConfig.from_dict(d)


def test_grid_is_a_cartesian_product_with_deterministic_names(tiny):
    tiny["grid"] = {"method": ["standard", "pgd-at"], "lr": [0.01, 0.1], "method_options.beta": [6]}
    tiny["grid"]["method"] = ["trades"]
    tiny["grid"]["method_options.beta"] = [1, 6]
    tiny["seeds"] = [0, 1]
    runs = study(tiny).expand("/tmp/out")
    assert len(runs) == 1 * 2 * 2 * 2
    names = [r.name for r in runs]
    assert names[0] == "method=trades,lr=0.01,beta=1,seed=0"
    assert names[1] == "method=trades,lr=0.01,beta=1,seed=1"
    assert names == [r.name for r in study(tiny).expand("/tmp/out")]  # deterministic
    r = runs[-1]
    assert r.train["lr"] == 0.1 and r.train["method_options"]["beta"] == 6 and r.seed == 1 and r.train["seed"] == 1
    assert r.group == "method=trades,lr=0.1,beta=6"
    assert r.train["out"] == "/tmp/out/" + r.name and r.train["resume"] is True
    assert r.overrides == {"method": "trades", "lr": 0.1, "method_options.beta": 6}
    # the base keys not overridden are kept; method defaults are resolved by TrainConfig
    assert r.train["epochs"] == 1 and r.train["attack"] == "trades-kl"


def test_variants_cross_grid_and_union_of_grid_blocks(tiny):
    tiny["grid"] = [{"lr": [0.01, 0.1]}, {"eps": ["8/255"]}]
    tiny["variants"] = [{"name": "st", "method": "standard"}, {"name": "trades b1", "method": "trades",
                                                               "method_options": {"beta": 1}}]
    runs = study(tiny).expand("out")
    assert [r.name for r in runs] == [
        "st,lr=0.01,seed=0", "st,lr=0.1,seed=0", "st,eps=8_255,seed=0",
        "trades_b1,lr=0.01,seed=0", "trades_b1,lr=0.1,seed=0", "trades_b1,eps=8_255,seed=0"]
    assert runs[2].train["eps"] == pytest.approx(8 / 255)
    assert runs[3].variant == "trades b1" and runs[3].train["method_options"]["beta"] == 1


def test_the_same_run_from_two_grid_blocks_runs_once(tiny):
    tiny["grid"] = [{"method": ["standard", "pgd-at"]}, {"eps": [0.1, 0.2]}]  # base eps is 0.1, method standard
    tiny["base"]["method"] = "standard"
    names = [r.name for r in study(tiny).expand("out")]
    assert names == ["method=standard,seed=0", "method=pgd-at,seed=0", "eps=0.2,seed=0"]


def test_sanitize():
    assert sanitize("method=trades,eps=8/255") == "method=trades,eps=8_255"
    for bad in ("../../etc", "..", ".hidden", "a b\tc"):
        s = sanitize(bad)
        assert "/" not in s and not s.startswith(".") and " " not in s and s
    long = sanitize("x" * 300)
    assert len(long) <= 120 and long != sanitize("x" * 301)


def test_name_collision_is_an_error(tiny):
    tiny["variants"] = [{"name": "a b", "method": "standard"}, {"name": "a/b", "method": "pgd-at"}]
    tiny["grid"] = {}
    with pytest.raises(ConfigError, match=r"two runs are named 'a_b,seed=0'"):
        study(tiny).expand("out")
    tiny["variants"] = [{"name": "x", "method": "standard"}]
    tiny["grid"] = {"val_attack": ["pgd5", "PGD5"]}  # equal up to case: one folder on macOS
    with pytest.raises(ConfigError, match="two runs are named"):
        study(tiny).expand("out")
    tiny["variants"] = [{"name": "x"}, {"name": "x"}]
    with pytest.raises(ConfigError, match="variant name 'x' is used twice"):
        study(tiny).expand("out")


def test_references(tiny):
    tiny["vars"] = {"tag": "v1", "lr0": 0.05}
    tiny["base"]["lr"] = "${vars.lr0}"
    tiny["base"]["val_attack_options"] = {"steps": "${attack_options.steps}"}
    tiny["audit"] = {"attacks": ["pgd20"], "eps": "${base.eps}", "eps_sweep": ["${eps}", "2*${eps}"]}
    tiny["description"] = "${tag}"  # not resolved: only runs are
    tiny["grid"] = {"eps": [0.05, 0.2]}
    runs = study(tiny).expand("out")
    assert runs[0].train["lr"] == 0.05  # a whole-string reference keeps the number type
    assert runs[0].train["val_attack_options"] == {"steps": 2}
    assert runs[0].audit["eps"] == 0.1  # base.eps, not the grid's
    assert runs[1].audit["eps_sweep"] == pytest.approx([0.2, 0.4])  # ${eps} is the run's own; embedded in text
    tiny["base"]["lr"] = "${nope}"
    with pytest.raises(ConfigError, match=r"unknown reference \$\{nope\} in 'base.lr'"):
        study(tiny).expand("out")
    tiny["base"]["lr"] = "${vars.missing}"
    with pytest.raises(ConfigError, match=r"reference \$\{vars.missing\} in 'base.lr' names nothing"):
        study(tiny).expand("out")
    tiny["vars"] = {"a": "${vars.b}", "b": "${vars.a}"}
    tiny["base"]["lr"] = "${vars.a}"
    with pytest.raises(ConfigError, match="reference cycle vars.a -> vars.b -> vars.a"):
        study(tiny).expand("out")


def test_unknown_keys_are_named(tiny, write_study):
    tiny["gird"] = {"lr": [0.1]}
    with pytest.raises(ConfigError, match=r"unknown key 'gird'; did you mean 'grid'\?") as e:
        load_study(write_study(tiny))
    assert "\n" not in str(e.value)
    del tiny["gird"]
    tiny["audit"]["atacks"] = ["pgd20"]
    with pytest.raises(ConfigError, match=r"unknown key 'audit.atacks'; did you mean 'attacks'\?"):
        load_study(write_study(tiny))
    del tiny["audit"]["atacks"]
    tiny["base"]["lrr"] = 0.1
    with pytest.raises(ConfigError, match=r"unknown training key 'lrr' in base; did you mean 'lr'\?"):
        load_study(write_study(tiny)).expand("out")
    del tiny["base"]["lrr"]
    tiny["grid"] = {"method_optons.beta": [1]}
    with pytest.raises(ConfigError, match="unknown training key 'method_optons' in grid"):
        load_study(write_study(tiny)).expand("out")


def test_empty_grid_and_bad_seeds(tiny):
    tiny["grid"] = {"lr": []}
    with pytest.raises(ConfigError, match=r"grid.lr is an empty list, so the grid has no runs"):
        study(tiny).expand("out")
    tiny["grid"] = []
    with pytest.raises(ConfigError, match="the grid is an empty list"):
        study(tiny).expand("out")
    tiny["grid"] = {}
    assert [r.name for r in study(tiny).expand("out")] == ["base,seed=0"]  # the base run alone is a study
    tiny["seeds"] = []
    with pytest.raises(ConfigError, match="seeds"):
        study(tiny)
    tiny["seeds"] = [0]
    tiny["grid"] = {"seed": [1, 2]}
    with pytest.raises(ConfigError, match="list seeds under the top-level 'seeds:'"):
        study(tiny).expand("out")


def test_unregistered_method_is_named(tiny):
    tiny["grid"] = {"method": ["standard", "frl-rwrm-not-here"]}
    with pytest.raises(ConfigError, match=r"uses method 'frl-rwrm-not-here', which is not registered") as e:
        study(tiny).expand("out")
    assert "\n" not in str(e.value)


def test_bad_training_value_names_the_run(tiny):
    tiny["grid"] = {"lr": [0.1, -1.0]}
    with pytest.raises(ConfigError, match=r"study tiny, run lr=-1,seed=0: config key 'lr'"):
        study(tiny).expand("out")


def test_a_standard_run_inheriting_a_robust_selection_is_refused_at_expansion(tiny):
    tiny["base"]["select"] = "avg+worst"  # the base of an adversarial study ...
    tiny["grid"] = {"method": ["pgd-at", "standard"]}  # ... and its standard baseline inherits it
    with pytest.raises(ConfigError, match=r"study tiny, run method=standard,seed=0: method standard trains on no "
                                          r"attack, so select 'avg\+worst'") as e:
        study(tiny).expand("out")
    assert "\n" not in str(e.value)
    tiny["variants"] = [{"name": "at", "method": "pgd-at"}, {"name": "st", "method": "standard", "select": "clean"}]
    tiny["grid"] = {}
    runs = {r.variant: r.train["select"] for r in study(tiny).expand("out")}
    assert runs == {"at": "avg+worst", "st": "clean"}


def test_audit_defaults_follow_the_run(tiny):
    tiny["audit"] = {"attacks": ["pgd20"]}
    tiny["seeds"] = [3]
    r = study(tiny).expand("out")[0]
    assert r.audit["eps"] == 0.1 and r.audit["seed"] == 3 and r.audit["split"] == "test"
    tiny["audit"] = {"attacks": ["pgd20-not-an-attack"]}
    with pytest.raises(ConfigError, match="audit"):
        study(tiny).expand("out")


def test_hash_ignores_device_and_out_but_not_what_is_computed(tiny, tmp_path):
    a = study(tiny).expand("out_a")[0]
    tiny["base"]["device"] = "cuda"
    b = study(tiny).expand("out_b")[0]
    assert a.hash == b.hash
    tiny["base"]["epochs"] = 2
    assert study(tiny).expand("out_a")[0].hash != a.hash
    assert config_hash(a.train, {**a.audit, "eps": 0.2}) != a.hash
    # run.yaml round trip
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run.yaml").write_text(a.to_yaml())
    back = RunSpec.load(tmp_path / "r")
    assert back == a and back.train_config().epochs == 1


def test_requires_lists_missing_methods(tiny):
    tiny["requires"] = ["standard", "fair-constraint-not-yet"]
    assert study(tiny).missing_methods() == ["fair-constraint-not-yet"]


def test_audit_channels_last_defaults_to_the_model_and_leaves_old_run_folders_matching(tiny):
    """``audit.channels_last`` None (default): on for 2-D conv models, as the CLI and the trainer; it
    changes speed, never predictions, so it is out of the hash and run folders made when the
    default was False (or with an explicit value) still match."""
    from robfair.experiments.config import config_differences

    a = study(tiny).expand("out")[0]
    assert a.audit["channels_last"] is None
    d = a.model_dump(by_alias=True, exclude={"hash"})
    for value in (False, True):
        old = RunSpec(**{**d, "audit": {**a.audit, "channels_last": value}})
        assert old.hash == a.hash and config_differences(old, a) == []
    # a setting that does change outcomes still counts
    other = RunSpec(**{**d, "audit": {**a.audit, "early_exit": False}})
    assert other.hash != a.hash and config_differences(other, a) == ["audit.early_exit: False -> True"]


def test_audit_probe_is_a_budget_set_in_the_audit_block_only(tiny):
    """``audit.probe`` is the probe's budget (a multiple, '2x', 'all', 0) and ``probe_tolerance`` a
    fraction; left at their defaults they are out of the run's settings (and its hash). The run's
    TrainConfig carries them (config.yaml records what the final audit ran with); set anywhere but
    the audit block they are refused, since the audit block is what the worker audits with."""
    plain = study(tiny).expand("out")[0]
    assert not {"probe", "probe_tolerance"} & (set(plain.audit) | set(plain.train))
    assert plain.train_config().probe is None  # the trainer fills in the default (or a resumed run's own)
    for given, stored in (("2x", 2.0), (3, 3.0), ("all", "all"), ("off", 0.0)):
        tiny["audit"].update(probe=given, probe_tolerance=0.02)
        r = study(tiny).expand("out")[0]
        assert r.audit["probe"] == stored and r.audit["probe_tolerance"] == 0.02 and r.hash != plain.hash
        cfg = r.train_config("runs/x", resume=True)
        assert (cfg.probe, cfg.probe_tolerance) == (stored, 0.02) and "probe" not in r.train
    for key, bad in (("probe", "lots"), ("probe", -1), ("probe_tolerance", 2)):
        with pytest.raises(ConfigError, match=f"key 'audit.{key}'") as e:
            study(dict(tiny, audit={**tiny["audit"], key: bad})).expand("out")
        assert "\n" not in str(e.value)
    for where in ("base", "grid"):
        t = dict(tiny, **{where: {**tiny[where], "probe": [2] if where == "grid" else 2}})
        with pytest.raises(ConfigError, match="audit block"):
            study(t).expand("out")
