"""Helpers shared by several test modules (importable because tests/ holds the root conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from robfair.data import Dataset
from robfair.training import Callback


class Recorder(nn.Module):
    """A tiny K-class model on 12 input features that remembers the inputs of its train-mode calls
    (attacks run it in eval mode, so only the training loss's inputs are recorded)."""

    def __init__(self, k: int):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, k))
        self.seen = []

    def forward(self, x):
        if self.training:
            self.seen.append(x.detach().clone())
        return self.net(x)


class Stop(Exception):
    """Raised by :class:`StopAfterEpoch` to simulate a run killed between epochs."""


class StopAfterEpoch(Callback):
    def __init__(self, epoch: int = 0):
        self.epoch = epoch

    def on_epoch_end(self, epoch, record):
        if epoch == self.epoch:
            raise Stop


class Quantize(nn.Module):
    """Rounds every pixel to ``levels`` steps: the forward pass is piecewise constant, so every input
    gradient is zero and gradient attacks get nowhere, while the decision still moves with the input."""

    def __init__(self, levels: int = 4):
        super().__init__()
        self.levels = levels

    def forward(self, x):
        return torch.round(x * self.levels) / self.levels


def probe_problem(masked: bool, n=150, k=3, seed=0):
    """A linear model on 4x4 inputs (behind :class:`Quantize` when ``masked``: PGD overstates its
    robustness and the reliability probe flags it) and a dataset it labels itself, in two groups."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    lin = nn.Linear(16, k)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(k, 16, generator=g))
        lin.bias.copy_(-lin.weight @ torch.full((16,), 0.5))
    layers = ([Quantize()] if masked else []) + [nn.Flatten(), lin]
    model = nn.Sequential(*layers).eval()
    x = 0.25 + 0.5 * torch.rand(n, 1, 4, 4, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    gid = (torch.arange(n) % 2).long()
    return model, Dataset(x=x, y=y, classes=[f"c{i}" for i in range(k)], g=gid, groups=["a", "b"], name="probe")


def run_cli(argv, capsys):
    """Run the robfair CLI in-process; return (exit code, stdout, stderr)."""
    from robfair.cli import main

    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def wait_for(pred, proc, timeout: float = 180.0) -> None:
    """Wait until ``pred()`` holds while the subprocess ``proc`` runs (fail if it ends first or time runs out)."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the process ended ({proc.returncode}) before the condition: {out[-1000:]} {err[-1000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("timed out waiting")


def drop_in(monkeypatch, tmp_path, package: str, registry, filename: str, source: str) -> list[str]:
    """Emulate one new file in a component package: write ``filename`` with ``source`` to a folder
    on the package's ``__path__`` and run the package's own discovery
    (:func:`robfair.registry.import_submodules`). The registry and ``sys.modules`` are restored
    after the test. Returns the names the file registered."""
    import importlib
    import sys

    from robfair.registry import import_submodules

    pkg = importlib.import_module(package)
    folder = tmp_path / "drop_in"
    folder.mkdir(exist_ok=True)
    (folder / filename).write_text(source)
    before = set(registry.names())
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    monkeypatch.setattr(registry, "_aliases", dict(registry._aliases))
    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(folder)])
    module = f"{package}.{filename.removesuffix('.py')}"
    monkeypatch.setitem(sys.modules, module, None)  # records "absent": teardown removes the module
    del sys.modules[module]
    import_submodules(package, pkg.__path__)
    return sorted(set(registry.names()) - before)


def weights(model):
    """A copy of ``model``'s state dict (to compare runs)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def metric_lines(out):
    """A run folder's metrics.jsonl records without their wall times (to compare runs)."""
    recs = [json.loads(s) for s in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    for r in recs:
        r.pop("time")
    return recs
