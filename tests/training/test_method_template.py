"""The method template in ``training/methods/method.py``'s docstring (issue 24, part 4): written out as a new
file it registers, trains, and repeats none of the code the methods once each carried (the attack-at-
sample_eps preamble, TRADES's beta option)."""

from __future__ import annotations

import re
import textwrap

import torch

from _shared import drop_in


def template_source() -> str:
    import robfair.training.methods.method as M

    doc = M.__doc__
    block = doc.split("registered with one line::", 1)[1].split("\n\n The trainer", 1)[0]
    block = block.split("The trainer sets", 1)[0]
    code = textwrap.dedent(block).strip("\n")
    header = ("import torch.nn.functional as F\nfrom pydantic import Field\n\n"
              "from robfair.training.methods.method import METHODS, Method, TradesOptions\n\n\n")
    return header + code + "\n"


def test_the_template_registers_trains_and_copies_nothing(monkeypatch, tmp_path):
    from robfair.training import METHODS, TrainConfig, train

    source = template_source()
    # what the template must not spell out again: each is a helper now
    assert "ctx.attack(model, x, y, self.sample_eps(y)" not in source
    assert not re.search(r"beta: float = Field\(6\.0", source)
    assert "self.adversarial(model, x, y, ctx)" in source and "class Options(TradesOptions)" in source
    names = drop_in(monkeypatch, tmp_path, "robfair.training.methods", METHODS, "my_method.py", source)
    assert names == ["my-method"]
    method = METHODS.get("my-method")()
    assert set(method.options.model_dump()) == {"beta", "gamma"} and method.options.beta == 6.0
    torch.set_num_threads(1)
    res = train(TrainConfig(data="digits", model="mlp", method="my-method", eps=0.1, epochs=1, val_per_class=10,
                            attack_options={"steps": 2}, val_attack="pgd3", device="cpu", out=str(tmp_path / "run")))
    assert res.best_epoch == 1 and res.history[-1]["train"]["loss"] > 0
