"""Tiny studies on the embedded digits data (1-2 epochs of a 32-unit MLP; seconds on one core)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

TINY = {
    "name": "tiny",
    "description": "a tiny study for the tests",
    "base": {"data": "digits", "model": "mlp", "model_kwargs": {"hidden": [32]}, "epochs": 1, "batch_size": 128,
             "eps": 0.1, "attack_options": {"steps": 2}, "val_per_class": 10, "val_attack": "pgd5", "device": "cpu"},
    "grid": {"method": ["standard", "pgd-at"]},
    "seeds": [0],
    "audit": {"attacks": ["fgsm", "pgd20"], "eps": "${eps}", "bootstrap": 100},
}


@pytest.fixture
def tiny() -> dict:
    return copy.deepcopy(TINY)


@pytest.fixture(scope="session")
def tiny_copy():
    """For module-scoped fixtures: a function returning a fresh copy of the tiny study."""
    return lambda: copy.deepcopy(TINY)


@pytest.fixture
def write_study(tmp_path):
    def write(data: dict, name: str = "study.yaml") -> Path:
        p = tmp_path / name
        p.write_text(yaml.safe_dump(data, sort_keys=False))
        return p

    return write


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    # the machine is shared: one torch thread here and in every worker process the tests start
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
