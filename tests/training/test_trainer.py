"""The training loop: learning, the run folder, model selection, determinism and exact resume."""

import subprocess
import sys
import textwrap

import pytest
import torch

from robfair.errors import ConfigError
from robfair.models import load_checkpoint
from _shared import Stop, StopAfterEpoch, assert_same_weights, metric_lines, weights
from robfair.training import TrainConfig, select_best, train

# small but exercises every piece of state: dropout (global RNG), crop-flip (augment generator),
# PGD random starts (attack generator), EMA, momentum, a piecewise schedule and the validation attack
RESUME_CFG = dict(data="digits", model="mlp", model_kwargs={"hidden": [32], "dropout": 0.1}, method="pgd-at",
                  attack_options={"steps": 2}, eps=0.1, epochs=3, batch_size=128, lr=0.1, milestones=[2],
                  augment="crop-flip", crop_padding=1, ema=0.8, val_per_class=15, val_attack="pgd5", seed=3,
                  device="cpu")  # bit-identical resume is a CPU promise


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, digits):
    """The uninterrupted reference run (3 epochs of PGD-AT with everything switched on)."""
    out = tmp_path_factory.mktemp("runs") / "full"
    torch.set_num_threads(1)
    result = train(TrainConfig(**RESUME_CFG, out=str(out)), train_data=digits)
    return out, result


def test_standard_training_learns_digits(digits):
    cfg = TrainConfig(data="digits", model="mlp", epochs=3, batch_size=64, lr=0.1, eps=0.1, val_attack="none",
                      select="clean")
    result = train(cfg, train_data=digits)
    accs = [r["val"]["summary"]["clean_acc"] for r in result.history]
    assert accs[-1] > 0.8
    assert result.history[0]["train"]["loss"] > result.history[-1]["train"]["loss"]
    assert result.out is None  # no out folder: nothing written


def test_run_folder_and_metrics(full_run, digits):
    out, result = full_run
    assert {p.name for p in out.iterdir()} >= {"config.yaml", "checkpoints", "metrics.jsonl"}
    assert {p.name for p in (out / "checkpoints").iterdir()} == {"last.pt", "best.pt"}
    text = (out / "config.yaml").read_text()
    assert "run_info:" in text and "torch:" in text and "method: pgd-at" in text
    recs = metric_lines(out)
    assert [r["epoch"] for r in recs] == [1, 2, 3]
    assert [r["lr"] for r in recs] == pytest.approx([0.1, 0.1, 0.01])  # milestone at epoch 2
    for r in recs:
        per = r["val"]["per_group"]
        assert list(per) == [str(i) for i in range(10)] and all(v["n"] == 15 for v in per.values())
        for v in per.values():
            assert v["rob_err"] == pytest.approx(v["std_err"] + v["bndy_err"])
            assert v["clean_acc"] == pytest.approx(1 - v["std_err"])
        s = r["val"]["summary"]
        assert s["worst_rob_acc"] == pytest.approx(min(v["rob_acc"] for v in per.values()))
        assert r["select"]["score"] == pytest.approx(s["rob_acc"] + s["worst_rob_acc"])
        assert r["train"]["n"] == len(digits) - 150 and 0 <= r["train"]["acc"] <= 1
    # best.pt is the epoch the criterion picks from the validation history, with EMA weights
    best_model, meta = load_checkpoint(out / "checkpoints" / "best.pt")
    assert meta["extra"]["epoch"] == select_best(recs, "avg+worst") == result.best_epoch
    assert_same_weights(weights(best_model), weights(result.best_model))
    last_model, last_meta = load_checkpoint(out / "checkpoints" / "last.pt")
    assert_same_weights(weights(last_model), weights(result.model))
    assert last_meta["extra"]["trainer"]["epoch"] == 3
    torch.load(out / "checkpoints" / "last.pt", weights_only=True)  # plain values only


def test_select_best_on_a_fake_history():
    def rec(epoch, clean, rob, worst):
        return {"epoch": epoch, "val": {"summary": {"clean_acc": clean, "rob_acc": rob, "worst_rob_acc": worst}}}

    hist = [rec(1, 0.90, 0.50, 0.10), rec(2, 0.80, 0.45, 0.30), rec(3, 0.85, 0.55, 0.05), rec(4, 0.95, 0.40, 0.30)]
    assert select_best(hist, "avg+worst") == 2  # 0.75 beats 0.60 / 0.60 / 0.70
    assert select_best(hist, "avg-rob") == 3
    assert select_best(hist, "worst-rob") == 2  # tie with epoch 4: the earlier one
    assert select_best(hist, "clean") == 4
    assert select_best(hist, "last") == 4
    hist.append({"epoch": 5, "val": None})
    assert select_best(hist, "avg-rob") == 3 and select_best(hist, "last") == 5


def test_resume_after_an_epoch_is_bit_identical(full_run, tmp_path, digits):
    ref_out, ref = full_run
    out = tmp_path / "run"
    with pytest.raises(Stop):
        train(TrainConfig(**RESUME_CFG, out=str(out)), train_data=digits, callbacks=[StopAfterEpoch(0)])
    assert len(metric_lines(out)) == 1
    # a changed config is refused, naming the key, and nothing is touched
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match=r"config changed: lr \(0\.1 -> 0\.05\)"):
        train(TrainConfig(**{**RESUME_CFG, "lr": 0.05}, out=str(out), resume=True), train_data=digits)
    # a run folder is never overwritten without resume
    with pytest.raises(ConfigError, match="already holds a run"):
        train(TrainConfig(**RESUME_CFG, out=str(out)), train_data=digits)
    assert (out / "metrics.jsonl").read_text() == before
    result = train(TrainConfig(**RESUME_CFG, out=str(out), resume=True), train_data=digits)
    assert_same_weights(weights(result.model), weights(ref.model))
    assert_same_weights(weights(result.best_model), weights(ref.best_model))
    assert metric_lines(out) == metric_lines(ref_out)


def test_a_run_killed_before_its_first_epoch_starts_again(tmp_path, digits):
    """config.yaml, an empty metrics.jsonl and checkpoints/ (a kill before epoch 1 ended) hold no
    result: a new run may start there without resume, as the CLI's output guard already allows."""
    cfg = dict(data="digits", model="mlp", epochs=1, batch_size=256, eps=0.1, val_attack="none", select="clean",
               device="cpu", out=str(tmp_path / "run"))
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "config.yaml").write_text("method: standard\n")
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    result = train(TrainConfig(**cfg), train_data=digits)
    assert [r["epoch"] for r in result.history] == [1] and len(metric_lines(tmp_path / "run")) == 1
    with pytest.raises(ConfigError, match="already holds a run"):  # now it holds one
        train(TrainConfig(**cfg), train_data=digits)


def test_resume_after_a_kill_mid_epoch_is_bit_identical(full_run, tmp_path, digits):
    ref_out, ref = full_run
    out = tmp_path / "killed"
    script = textwrap.dedent(f"""
        import os, signal, torch
        from robfair.training import Callback, TrainConfig, train
        torch.set_num_threads(1)
        class Kill(Callback):
            def on_batch(self, epoch, batch, num_batches):
                if epoch == 1 and batch == 4:
                    os.kill(os.getpid(), signal.SIGKILL)
        train(TrainConfig(**{RESUME_CFG!r}, out={str(out)!r}), callbacks=[Kill()])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert [r["epoch"] for r in metric_lines(out)] == [1]
    result = train(TrainConfig(**RESUME_CFG, out=str(out), resume=True), train_data=digits)
    assert_same_weights(weights(result.model), weights(ref.model))
    assert metric_lines(out) == metric_lines(ref_out)


def test_same_seed_same_weights_other_seed_differs(digits):
    cfg = dict(data="digits", model="mlp", model_kwargs={"hidden": [16]}, method="trades", attack_options={"steps": 1},
               eps=0.1, epochs=1, batch_size=256, val_per_class=0, select="last", augment="crop-flip",
               device="cpu")
    a = train(TrainConfig(**cfg, seed=5), train_data=digits)
    b = train(TrainConfig(**cfg, seed=5), train_data=digits)
    c = train(TrainConfig(**cfg, seed=6), train_data=digits)
    assert_same_weights(weights(a.model), weights(b.model))
    assert a.history == [{**b.history[0], "time": a.history[0]["time"]}]
    assert not all(torch.equal(u, v) for u, v in zip(weights(a.model).values(), weights(c.model).values()))


def test_fast_paths_run(digits, monkeypatch):
    # bf16 autocast, channels_last, warm-up + cosine, Adam, EMA, final audit hook
    monkeypatch.setenv("ROBFAIR_EMULATED_PRECISION", "1")  # bf16 is emulated on CPUs without bf16 units
    calls = []

    def audit(model, test):
        calls.append(len(test))
        return {"n": len(test), "training": model.training}

    small = digits.subset(torch.arange(0, len(digits), 3))
    cfg = TrainConfig(data="digits", model="smallcnn", model_kwargs={"width": 4, "hidden": 16}, method="pgd-at",
                      attack_options={"steps": 1}, eps=0.1, epochs=2, batch_size=64, optimizer="adam", lr=1e-3,
                      schedule="cosine", warmup_epochs=0.5, ema=0.9, precision="bf16", channels_last=True,
                      val_per_class=5, val_attack="pgd2", select="worst-rob")
    result = train(cfg, train_data=small, test_data=small.subset(torch.arange(20)), final_audit=audit)
    assert len(result.history) == 2 and calls == [20] and result.audit == {"n": 20, "training": False}
    assert all(torch.isfinite(v).all() for v in weights(result.model).values())


def test_bad_inputs_fail_before_anything_is_written(tmp_path, digits):
    from robfair.errors import AttackError, DataError, ModelError
    from robfair.models import create, save_checkpoint
    from robfair.training import build_model

    out = tmp_path / "run"
    base = dict(data="digits", model="mlp", model_kwargs={"hidden": [8]}, epochs=1, device="cpu", out=str(out))
    with pytest.raises(AttackError, match="pgdx"):
        train(TrainConfig(**base, val_attack="pgdx"), train_data=digits)
    with pytest.raises(DataError, match="validation split larger than class"):
        train(TrainConfig(**base, val_per_class=500), train_data=digits)
    ck = tmp_path / "init.pt"
    save_checkpoint(ck, create("mlp", 10, (1, 8, 8), hidden=[16]), classes=digits.classes)
    with pytest.raises(ModelError, match="does not fit the configured model"):
        train(TrainConfig(**base, init=str(ck)), train_data=digits)
    assert not out.exists()
    # a matching --init starts from the checkpoint's weights
    src = create("mlp", 10, (1, 8, 8), hidden=[8])
    save_checkpoint(ck, src, classes=digits.classes)
    model = build_model(TrainConfig(**base, init=str(ck)), 10, (1, 8, 8))
    assert_same_weights(weights(model), weights(src))
