import re

import pytest

from robfair.errors import ConfigError
from pathlib import Path

from robfair.training import TrainConfig, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_unknown_key_is_rejected_by_name():
    with pytest.raises(ConfigError, match=r"unknown config key 'lrr'.*did you mean 'lr'"):
        TrainConfig(lrr=0.1)


@pytest.mark.parametrize("kw, key", [
    (dict(lr=0), "lr"), (dict(lr=-1), "lr"), (dict(eps="-8/255"), "eps"), (dict(eps="eight"), "eps"),
    (dict(epochs=0), "epochs"), (dict(optimizer="rmsprop"), "optimizer"), (dict(val_per_class=1.5), "val_per_class"),
    (dict(val_per_class=-3), "val_per_class"), (dict(ema=1.0), "ema"), (dict(precision="fp8"), "precision"),
])
def test_bad_values_name_the_key(kw, key):
    with pytest.raises(ConfigError, match=f"'{key}'") as e:
        TrainConfig(**kw)
    assert "\n" not in str(e.value)


def test_unknown_method_and_options():
    with pytest.raises(ConfigError, match="unknown method 'frll'"):
        TrainConfig(method="frll")
    with pytest.raises(ConfigError, match=r"method 'trades' has no option 'betta'; did you mean 'beta'\? valid options \(robfair methods trades\): beta"):
        TrainConfig(method="trades", method_options={"betta": 1})
    with pytest.raises(ConfigError, match="option 'beta'"):
        TrainConfig(method="trades", method_options={"beta": -1})


def test_cross_field_checks():
    with pytest.raises(ConfigError, match="milestones"):
        TrainConfig(epochs=10, milestones=[12])
    with pytest.raises(ConfigError, match="warmup_epochs"):
        TrainConfig(epochs=2, warmup_epochs=2)
    with pytest.raises(ConfigError, match="needs a validation split"):
        TrainConfig(val_per_class=0, select="avg+worst")
    TrainConfig(val_per_class=0, select="last")  # fine
    assert TrainConfig(val_per_class=0).select == "last"  # the default follows: nothing to select on
    with pytest.raises(ConfigError, match="eps_warmup"):
        TrainConfig(epochs=2, eps_warmup=3)


def test_select_defaults_follow_the_method():
    assert TrainConfig(method="standard").select == "clean"
    assert TrainConfig(method="fair-constraint").select == "clean"
    assert TrainConfig(method="pgd-at").select == "avg+worst"
    assert TrainConfig(method="trades", val_attack="none").select == "clean"  # no robust accuracy measured
    assert TrainConfig(method="standard", select="avg-rob").select == "avg-rob"  # explicit wins


@pytest.mark.parametrize("method", ["standard", "fair-constraint"])
@pytest.mark.parametrize("select", ["avg+worst", "avg-rob", "worst-rob"])
def test_a_run_trained_on_no_attack_is_not_selected_by_robust_accuracy(method, select):
    cfg = TrainConfig(method=method, select=select)  # a recorded config still reads back (resume, report)
    with pytest.raises(ConfigError, match=re.escape(f"method {method} trains on no attack, so select '{select}'")) as e:
        cfg.check_selection()
    assert "set select: clean" in str(e.value) and "\n" not in str(e.value)
    for fine in ("clean", "last"):
        assert TrainConfig(method=method, select=fine).check_selection().selection_problem() is None
    assert TrainConfig(method=method, select=select, val_attack="none").selection_problem() is None  # no robust score
    for robust in ("pgd-at", "trades", "frl-rwrm"):
        assert TrainConfig(method=robust, select=select).selection_problem() is None


def test_the_api_refuses_a_robust_selection_of_standard_training_before_anything_is_written(tmp_path):
    from robfair.training import train

    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="trains on no attack"):
        train(TrainConfig(method="standard", select="avg+worst", epochs=1, out=str(out)))
    assert not out.exists()


def test_milestones_as_fractions_and_rescaled_when_epochs_change(tmp_path):
    c = TrainConfig(epochs=20, milestones=[0.75, 0.9])
    assert c.resolved_milestones() == pytest.approx([15, 18])
    assert TrainConfig(epochs=4, milestones=[0.75, 0.9]).resolved_milestones() == pytest.approx([3, 3.6])
    with pytest.raises(ConfigError, match="fractions of the run"):
        TrainConfig(epochs=10, milestones=[0.9, 0.5])
    # a config with epoch counts keeps their place in the run when --epochs overrides it
    p = tmp_path / "c.yaml"
    p.write_text("epochs: 20\nmilestones: [15, 18]\n")
    assert load_config(p, epochs=4).resolved_milestones() == pytest.approx([3, 3.6])
    assert load_config(p, epochs=40).resolved_milestones() == pytest.approx([30, 36])
    assert load_config(p, epochs=1).resolved_milestones() == pytest.approx([0.75, 0.9])
    assert load_config(p, epochs=4, milestones=[1, 2]).resolved_milestones() == [1, 2]  # explicit wins
    assert load_config(p).resolved_milestones() == [15, 18]


#: shipped configs that set an option to show it (not a default): method -> options
EXAMPLE_OPTIONS = {"at-class-eps": {"eps"}, "at-ldam": {"drw_epoch"}}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_method_defaults_equal_the_shipped_configs(path):
    """`--method NAME` without a config trains what configs/NAME.yaml trains (method options)."""
    cfg = load_config(path)
    plain = TrainConfig(method=cfg.method)
    skip = EXAMPLE_OPTIONS.get(cfg.method, set())
    diff = {k: (v, plain.method_options.get(k)) for k, v in cfg.method_options.items()
            if k not in skip and plain.method_options.get(k) != v}
    assert diff == {}


def test_resolution_and_eps_parsing():
    c = TrainConfig(method="AT", eps="8/255", val_per_class=300)
    assert c.method == "pgd-at" and c.attack == "pgd10"
    assert c.eps == pytest.approx(8 / 255) and c.val_per_class == 300 and isinstance(c.val_per_class, int)
    t = TrainConfig(method="trades")
    assert t.method_options == {"beta": 6.0, "normalization": "ratio"} and t.attack == "trades-kl"
    assert TrainConfig().attack is None  # standard training attacks nothing
    assert TrainConfig(epochs=8).resolved_milestones() == [4.0, 6.0]


def test_yaml_round_trip_with_run_info(tmp_path):
    c = TrainConfig(method="trades", method_options={"beta": 1}, eps=0.1, epochs=3, milestones=[2])
    p = tmp_path / "config.yaml"
    p.write_text(c.to_yaml(run_info={"git_commit": None, "versions": {"torch": "x"}}))
    back = load_config(p)
    assert back == c and back.differences(c) == []
    assert load_config(tmp_path, epochs=5).epochs == 5  # a run folder works too; overrides win
    p.write_text("lr: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_the_trainer_object_refuses_a_robust_selection_of_standard_training(tmp_path):
    """Trainer(...) built by hand (not through train()) guards a new run's selection too."""
    from robfair.data import load_dataset, stratified_split
    from robfair.models import create
    from robfair.training import Trainer

    full = load_dataset("digits", "train")
    tr, va = stratified_split(full.y, 10, 0, classes=full.classes)
    model = create("mlp", 10, full.in_shape)
    cfg = TrainConfig(method="standard", select="worst-rob", epochs=1, device="cpu", out=str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="trains on no attack"):
        Trainer(model, full.subset(tr), full.subset(va), None, cfg)
    assert not (tmp_path / "r").exists()
