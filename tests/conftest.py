"""Shared test set-up: single-threaded torch (the CI machine has 2 cores; the tests are tiny)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import torch  # noqa: E402

torch.set_num_threads(1)

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_default_probe(monkeypatch):
    """The reliability probe (official AutoAttack within the audit's own compute) costs seconds per
    audit; tests of other things audit without it. Tests of the probe ask for it explicitly
    (``probe=B`` / ``--probe B``)."""
    import importlib

    monkeypatch.setattr(importlib.import_module("robfair.audit.probe"), "DEFAULT_BUDGET", 0.0)
