"""``robfair train --model FILE`` (issue 22, part 1): a user's own architecture and weights, as audit
reads them, fine-tuned by any method; it resumes bit-identically after a kill, its run folder records
the source, and its weights load back into the user's own class (``load_state_dict(strict=True)``).

The architecture is :class:`UserNet` below: defined in this test file, registered nowhere; robfair
imports it as ``--arch tests/training/test_model_file.py:UserNet``, as it would a user's file (a
subprocess that does so puts the tests' folder on its path for ``_shared``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from _shared import Stop, StopAfterEpoch, metric_lines, run_cli
from _shared import assert_same_weights as same
from _shared import weights as weights_of
from robfair.errors import ConfigError, ModelError

HERE = Path(__file__).resolve()
ARCH = f"{HERE}:UserNet"


class UserNet(nn.Module):
    """A user's CNN for 1x8x8 digits: BatchNorm (running statistics) and dropout (the global RNG),
    so an exact resume must restore both."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Dropout(0.1))
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


def cfg_dict(weights: Path, out: Path, **kw) -> dict:
    # PGD-AT with its random starts, crop-flip, momentum and a piecewise schedule: every piece of state
    return dict(data="digits", model=str(weights), arch=ARCH, arch_kwargs={"width": 6}, method="pgd-at",
                attack_options={"steps": 2}, eps=0.1, epochs=3, batch_size=128, lr=0.05, milestones=[2],
                augment="crop-flip", crop_padding=1, val_per_class=15, val_attack="pgd3", seed=4, device="cpu",
                out=str(out), **kw)


@pytest.fixture(scope="module")
def user_weights(tmp_path_factory):
    """The user's starting point: UserNet(width=6)'s state dict and the same weights as safetensors."""
    root = tmp_path_factory.mktemp("user")
    torch.manual_seed(0)
    net = UserNet(width=6)
    torch.save(net.state_dict(), root / "weights.pt")
    return root / "weights.pt", net


@pytest.fixture(scope="module")
def reference(user_weights, tmp_path_factory):
    from robfair.training import TrainConfig, train

    out = tmp_path_factory.mktemp("runs") / "ref"
    torch.set_num_threads(1)
    return out, train(TrainConfig(**cfg_dict(user_weights[0], out)))


def test_the_run_folder_records_the_source_and_saves_the_users_own_weights(reference, user_weights):
    out, result = reference
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    src = cfg["model_source"]
    assert src["format"] == "state-dict" and src["model"] == str(user_weights[0].resolve())
    import hashlib

    assert src["sha256"] == hashlib.sha256(user_weights[0].read_bytes()).hexdigest()
    assert src["arch"] == ARCH and src["arch_sha256"] == hashlib.sha256(HERE.read_bytes()).hexdigest()
    assert cfg["arch_kwargs"] == {"width": 6}
    # the weights moved (it trained) and load back into the user's own class, keys unchanged
    own = torch.load(out / "checkpoints" / "best.weights.pt", weights_only=True)
    net = UserNet(width=6)
    assert net.load_state_dict(own, strict=True) is not None
    assert set(own) == set(user_weights[1].state_dict())
    assert any(not torch.equal(own[k], v) for k, v in user_weights[1].state_dict().items())
    same(net.state_dict(), {k: v.cpu() for k, v in result.best_model.state_dict().items()})
    x = torch.rand(5, 1, 8, 8)
    net.eval()
    with torch.no_grad():  # (the trained copy runs channels_last: the same weights, other rounding)
        torch.testing.assert_close(net(x), result.best_model(x))
        # best.pt rebuilds through the recorded source (robfair audit / report read it as any checkpoint)
        from robfair.models import load_any

        again, meta = load_any(out / "checkpoints" / "best.pt")
        same(again.state_dict(), net.state_dict())
        torch.testing.assert_close(again(x), net(x))
        assert meta["spec"]["source"]["arch"] == ARCH


def test_a_killed_run_resumes_bit_identically(reference, user_weights, tmp_path):
    from robfair.training import TrainConfig, train

    ref_out, ref = reference
    out = tmp_path / "killed"
    script = textwrap.dedent(f"""
        import os, signal, sys, torch
        sys.path.insert(0, {str(HERE.parents[1])!r})  # _shared, which this file imports
        from robfair.training import Callback, TrainConfig, train
        torch.set_num_threads(1)
        class Kill(Callback):
            def on_batch(self, epoch, batch, num_batches):
                if epoch == 1 and batch == 3:
                    os.kill(os.getpid(), signal.SIGKILL)
        train(TrainConfig(**{cfg_dict(user_weights[0], out)!r}), callbacks=[Kill()])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert [r["epoch"] for r in metric_lines(out)] == [1]
    result = train(TrainConfig(**cfg_dict(user_weights[0], out), resume=True))
    same(weights_of(result.model), weights_of(ref.model))
    same(weights_of(result.best_model), weights_of(ref.best_model))
    assert metric_lines(out) == metric_lines(ref_out)
    assert (out / "checkpoints" / "best.weights.pt").read_bytes() != b""
    same(torch.load(out / "checkpoints" / "best.weights.pt", weights_only=True),
         torch.load(ref_out / "checkpoints" / "best.weights.pt", weights_only=True))


def test_resume_refuses_a_changed_model_file(reference, user_weights, tmp_path):
    from robfair.training import TrainConfig, train

    w = tmp_path / "w.pt"
    w.write_bytes(user_weights[0].read_bytes())
    out = tmp_path / "run"
    with pytest.raises(Stop):
        train(TrainConfig(**{**cfg_dict(w, out), "epochs": 2}), callbacks=[StopAfterEpoch(0)])
    torch.manual_seed(1)
    torch.save(UserNet(width=6).state_dict(), w)  # other weights under the same name
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match=r"config changed: model_source"):
        train(TrainConfig(**{**cfg_dict(w, out), "epochs": 2}, resume=True))
    assert (out / "metrics.jsonl").read_text() == before


def test_safetensors_and_torchscript_train_and_come_back_in_their_own_format(user_weights, tmp_path, capsys):
    pytest.importorskip("safetensors")
    from safetensors.torch import load_file, save_file

    net = user_weights[1]
    save_file(net.state_dict(), tmp_path / "w.safetensors")
    torch.jit.save(torch.jit.script(UserNet(width=6)), tmp_path / "w.ts")
    common = ["--data", "digits", "--method", "trades", "--eps", "0.1", "--epochs", "1", "--device", "cpu",
              "--set", "attack_options={steps: 1}", "--set", "val_attack=fgsm", "--set", "val_per_class=10",
              "--audit-attack", "fgsm", "--probe", "0"]
    code, out, err = run_cli(["train", "--model", tmp_path / "w.safetensors", "--arch", ARCH, "--arch-kwargs",
                              "width: 6", "--out", tmp_path / "st", *common], capsys)
    assert code == 0, err
    own = load_file(tmp_path / "st" / "checkpoints" / "best.safetensors")
    UserNet(width=6).load_state_dict(own, strict=True)
    code, out, err = run_cli(["train", "--model", tmp_path / "w.ts", "--mean", "0.5", "--std", "0.25",
                              "--out", tmp_path / "ts", *common], capsys)
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "ts" / "config.yaml").read_text())["mean"] == [0.5]
    assert "grad attribute" not in err + json.dumps(json.loads((tmp_path / "ts" / "audit.json").read_text())["warnings"])
    script = torch.jit.load(str(tmp_path / "ts" / "checkpoints" / "best.ts"))  # the user's module, no wrapper
    own = torch.load(tmp_path / "ts" / "checkpoints" / "best.weights.pt", weights_only=True)
    assert set(own) == set(script.state_dict()) == set(net.state_dict())
    # report and compare read both runs as any of robfair's
    code, out, err = run_cli(["compare", tmp_path / "st", tmp_path / "ts"], capsys)
    assert code == 0, err
    code, out, err = run_cli(["report", tmp_path / "st", tmp_path / "ts", "--out", tmp_path / "r.html"], capsys)
    assert code == 0 and (tmp_path / "r.html").is_file(), err


def _frozen(tmp_path):
    p = tmp_path / "frozen.ts"
    torch.jit.save(torch.jit.freeze(torch.jit.script(UserNet(width=6).eval())), p)
    return p


def _exported(tmp_path):
    p = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(UserNet(width=6).eval(), (torch.rand(2, 1, 8, 8),)), p)
    return p


def _robfair_ckpt(tmp_path):
    from robfair.models import create, save_checkpoint

    p = tmp_path / "ck.pt"
    save_checkpoint(p, create("mlp", 10, (1, 8, 8), hidden=[8]), classes=[str(i) for i in range(10)])
    return p


def _wrong_classes(tmp_path):
    p = tmp_path / "three.pt"
    torch.save(UserNet(width=6, classes=3).state_dict(), p)
    return p


@pytest.mark.parametrize("make,extra,needle", [
    (_frozen, [], "frozen TorchScript module"),
    (_exported, [], "cannot switch to training mode"),
    (_robfair_ckpt, [], "--init"),
    (lambda t: "mlp", ["--arch", ARCH], "are for a model file"),
    (_wrong_classes, ["--arch", ARCH, "--arch-kwargs", "{width: 6, classes: 3}"], "10"),
    (lambda t: t / "missing.pt", ["--arch", ARCH], "does not exist"),
], ids=["frozen-torchscript", "export-pt2", "robfair-checkpoint", "arch-with-robfair-model", "wrong-class-count",
        "missing-file"])
def test_a_model_file_that_cannot_be_trained_is_one_line(make, extra, needle, tmp_path, capsys):
    model = make(tmp_path)
    out = tmp_path / "run"
    code, _, err = run_cli(["train", "--model", model, *extra, "--data", "digits", "--epochs", "1", "--device", "cpu",
                            "--audit-attack", "none", "--out", out], capsys)
    lines = [s for s in err.splitlines() if s.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert needle in lines[0], lines[0]
    assert not out.exists(), list(out.rglob("*"))  # refused before anything is written


def test_the_python_api_takes_a_class_free_config(user_weights, tmp_path):
    """TrainConfig's keys alone (no CLI), and the one-line refusals of keys that do not go together."""
    from robfair.training import TrainConfig

    with pytest.raises(ConfigError, match="arch_kwargs"):
        TrainConfig(model=str(user_weights[0]), model_kwargs={"width": 6})
    with pytest.raises(ConfigError, match="itself the starting point"):
        TrainConfig(model=str(user_weights[0]), arch=ARCH, init="x.pt")
    with pytest.raises(ModelError, match="state dict"):
        from robfair.training import train

        train(TrainConfig(model=str(user_weights[0]), epochs=1, out=str(tmp_path / "r")))


class Faulty(UserNet):
    """A user's model whose forward breaks on its 40th training batch (as a shape bug in a rare branch would)."""

    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            type(self).calls += 1
            if type(self).calls == 40:
                raise ValueError("a bug in the user's forward")
        return super().forward(x)


def test_a_fault_in_the_users_forward_mid_training_is_their_error_in_one_line(tmp_path, capsys):
    """Issue 22: a model file whose forward raises during training ends in one line naming the model and
    its exception as the user's (exit 2), not robfair's 'internal error'; its class and state dict keys
    stay the user's while robfair guards it; the run resumes from its last checkpoint."""
    from robfair.models.validate import guard_training

    net = UserNet(width=6)
    keys = list(net.state_dict())
    guarded = guard_training(net)
    assert guarded is net and type(net).__name__ == "UserNet" and isinstance(net, UserNet)
    assert list(net.state_dict()) == keys and guard_training(net) is net  # once
    torch.save(Faulty(width=6).state_dict(), tmp_path / "w.pt")
    out = tmp_path / "run"
    Faulty.calls = 0
    code, _, err = run_cli(["train", "--model", tmp_path / "w.pt", "--arch", f"{HERE}:Faulty", "--arch-kwargs",
                            "{width: 6}", "--data", "digits", "--method", "pgd-at", "--epochs", "3", "--batch-size", "64",
                            "--set", "attack_options={steps: 1}", "--set", "val_per_class=10", "--device", "cpu",
                            "--audit-attack", "none", "--out", out], capsys)
    lines = [s for s in err.splitlines() if s.strip() and not s.startswith("interrupted")]
    assert code == 2 and "Traceback" not in err and "internal error" not in err, err
    assert any("Faulty) raised ValueError: a bug in the user's forward in training" in s for s in lines), err
    assert (out / "checkpoints" / "last.pt").is_file()  # the epoch before the fault is kept
