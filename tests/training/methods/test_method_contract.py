"""The contract every registered training method keeps, parametrized over the registry (as the
attack, model and dataset contracts): a new method file gets these tests with no edit here.

- ``robfair methods NAME`` is where a method's options are documented: a one-line help, and a
  description for every option; the default options validate and an option the method does not
  declare is refused in one line naming the method and ``robfair methods NAME``.
- The default training attack (if any) is a valid attack name.
- Two tiny epochs on three digit classes run through the real trainer: a finite loss each epoch,
  both checkpoints written.
- A run killed after its first epoch and resumed ends bit-identical to the uninterrupted run (the
  weights and every metrics line): whatever the method updates between epochs is in its
  ``state_dict``.

A registration may state ``contract_options={...}`` (options for the tiny run, e.g. a warm-up that
fits in two epochs) and ``contract_slow=True``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from robfair.attacks import get_attack
from robfair.data import Dataset
from robfair.errors import ConfigError
from robfair.training import METHODS, TrainConfig, build_method, train
from robfair.training.methods import describe_method
from _shared import Stop, StopAfterEpoch


def registered_methods() -> list:
    return [pytest.param(e.name, e.meta.get("contract_options", {}), id=e.name,
                         marks=[pytest.mark.slow] if e.meta.get("contract_slow") else [])
            for e in METHODS]


@pytest.fixture(scope="module")
def digits3(digits):
    """Three digit classes (0, 1, 2), 40 images each: a K = 3 problem small enough for every method."""
    idx = torch.cat([torch.nonzero(digits.y == c).flatten()[:40] for c in range(3)])
    return Dataset(x=digits.x[idx], y=digits.y[idx], classes=digits.classes[:3], name="digits3")


def _cfg(name: str, options: dict, out: Path, **kw) -> TrainConfig:
    base = dict(data="digits", model="mlp", model_kwargs={"hidden": [16], "dropout": 0.1}, attack_options={"steps": 2},
                eps=0.1, epochs=2, batch_size=32, lr=0.1, val_per_class=8, val_attack="pgd2", seed=5, device="cpu")
    return TrainConfig(**{**base, **kw}, method=name, method_options=options, out=str(out))


def _lines(out: Path) -> list[dict]:
    recs = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    for r in recs:
        r.pop("time", None)
    return recs


def check_method_contract(name: str, options: dict, data: Dataset, tmp_path: Path) -> None:
    entry = METHODS.entry(name)
    # the options are documented where `robfair methods NAME` shows them
    d = describe_method(name)
    assert d["help"].strip(), f"{name}: no one-line help"
    undocumented = [o["option"] for o in d["options"] if not o["description"].strip()]
    assert not undocumented, f"{name}: options without a description (Field(description=...)): {undocumented}"
    method = build_method(name)  # the defaults validate
    with pytest.raises(ConfigError, match=rf"method '{entry.name}' has no option 'no_such_option'.*robfair methods"):
        build_method(name, {"no_such_option": 1})
    if method.default_attack is not None:
        get_attack(method.default_attack)
    # two tiny epochs through the trainer
    ref = tmp_path / "full"
    full = train(_cfg(name, options, ref), train_data=data)
    recs = _lines(ref)
    assert [r["epoch"] for r in recs] == [1, 2], name
    assert all(math.isfinite(r["train"]["loss"]) for r in recs), f"{name}: non-finite training loss"
    assert (ref / "checkpoints" / "best.pt").is_file() and (ref / "checkpoints" / "last.pt").is_file(), name
    # killed after epoch 1 and resumed: the same run
    out = tmp_path / "resumed"
    with pytest.raises(Stop):
        train(_cfg(name, options, out), train_data=data, callbacks=[StopAfterEpoch(0)])
    again = train(_cfg(name, options, out, resume=True), train_data=data)
    a, b = full.model.state_dict(), again.model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), f"{name}: resumed weights differ (state missing from state_dict?)"
    assert _lines(out) == recs, f"{name}: the resumed run's metrics differ"


@pytest.mark.parametrize("name,options", registered_methods())
def test_every_registered_method_keeps_the_contract(name, options, digits3, tmp_path):
    check_method_contract(name, options, digits3, tmp_path)


DUMMY = '''
import torch
import torch.nn.functional as F
from pydantic import Field

from robfair.training.methods.method import METHODS, Method


@METHODS.register("dummy-reweight", help="test only: CE on adversarial inputs, class weights from validation")
class DummyReweight(Method):
    class Options(Method.Options):
        step: float = Field(0.5, ge=0, description="how far the class weights move per epoch")

    default_attack = "pgd10"

    def on_train_start(self, ctx):
        if getattr(self, "w", None) is None:
            self.w = torch.ones(ctx.num_classes)

    def class_weights(self):
        return getattr(self, "w", None)

    def loss(self, model, x, y, g, ctx):
        logits = model(ctx.attack(model, x, y, ctx.eps, generator=ctx.generator))
        ctx.record(logits, y)
        return F.cross_entropy(logits, y, weight=self.w.to(logits.device))

    def on_epoch_end(self, ctx, val_report):
        err = torch.tensor(1 - val_report.by_class["rob_acc"].to_numpy(dtype=float), dtype=torch.float32)
        self.w = self.w * torch.exp(self.options.step * err)
        self.w = self.w / self.w.mean()

    def state_dict(self):
        return {"w": self.w.clone()}

    def load_state_dict(self, state):
        self.w = state["w"]
'''


def test_a_new_method_file_registers_itself_and_gets_the_contract(monkeypatch, tmp_path, digits3, capsys):
    from _shared import drop_in, run_cli

    assert drop_in(monkeypatch, tmp_path, "robfair.training.methods", METHODS, "dummy_reweight.py", DUMMY) == ["dummy-reweight"]
    assert "dummy-reweight" in [p.id for p in registered_methods()]
    code, out, _ = run_cli(["methods", "dummy-reweight"], capsys)
    assert code == 0 and "how far the class weights move per epoch" in out
    check_method_contract("dummy-reweight", {}, digits3, tmp_path / "ok")
    # the contract can fail: the same method without its state in state_dict does not resume exactly
    forgetful = DUMMY.replace("dummy-reweight", "dummy-forgetful").replace(
        "    def state_dict(self):\n        return {\"w\": self.w.clone()}\n\n    def load_state_dict(self, state):\n"
        "        self.w = state[\"w\"]\n", "")
    assert "def state_dict" not in forgetful
    drop_in(monkeypatch, tmp_path, "robfair.training.methods", METHODS, "dummy_forgetful.py", forgetful)
    with pytest.raises(AssertionError, match="resumed"):
        check_method_contract("dummy-forgetful", {}, digits3, tmp_path / "bad")
    # ... and so does an option without a description
    drop_in(monkeypatch, tmp_path, "robfair.training.methods", METHODS, "dummy_mute.py",
            DUMMY.replace("dummy-reweight", "dummy-mute").replace(', description="how far the class weights move per epoch"', ""))
    with pytest.raises(AssertionError, match="without a description"):
        check_method_contract("dummy-mute", {}, digits3, tmp_path / "mute")
