"""Helpers shared by several test modules (importable because tests/ holds the root conftest.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

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


def run_cli(argv, capsys):
    """Run the robfair CLI in-process; return (exit code, stdout, stderr)."""
    from robfair.cli import main

    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


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
