"""`robfair methods [NAME]` and the epoch line of `robfair train`."""

from _shared import run_cli
from robfair.cli.train import epoch_line
from robfair.training import TrainConfig


def test_methods_lists_every_registered_method(capsys):
    from robfair.training import METHODS

    code, out, _ = run_cli(["methods"], capsys)
    assert code == 0
    for name in METHODS.names():
        assert name in out
    assert "clean" in out and "avg+worst" in out  # the default selection per method


def test_methods_name_shows_options_defaults_and_sources(capsys):
    code, out, _ = run_cli(["methods", "frl"], capsys)  # an alias
    assert code == 0 and "frl-rwrm" in out
    assert "a80547def881cb4ca99b50e7544f997f9a0210a7" in out and "18d11779da18a93e2c6a5cefa3b709b5e9845948" in out
    assert "tau_nat" in out and "0.07" in out and "1.5" in out
    code, out, _ = run_cli(["methods", "cfa"], capsys)
    assert "eq. 8" in out and "071f3334a59d144cedbe65b18019c9757bece6f2" in out
    code, _, err = run_cli(["methods", "frll"], capsys)
    assert code == 2 and "unknown method 'frll'" in err and len(err.strip().splitlines()) == 1


def test_epoch_line_names_what_was_measured():
    rec = {"train": {"loss": 0.5, "eps": [0.05, 0.1]}, "select": {"is_best": True, "criterion": "clean"},
           "val": {"summary": {"n": 300, "clean_acc": 0.9, "rob_acc": 0.9, "worst_rob_acc": 0.8, "worst_group": "3"}}}
    line = epoch_line(0, rec, TrainConfig(method="standard", val_attack="none"))
    assert "standard loss 0.5000" in line and "val (n=300) clean 90.0%" in line and "no validation attack" in line
    assert "robust" not in line.replace("no validation attack", "") and "train eps 0.1" in line
    line = epoch_line(0, rec, TrainConfig(method="trades", val_attack="pgd20", eps=0.1))
    assert "pgd20 eps 0.1 robust 90.0%" in line and "worst-class robust 80.0% (3)" in line
