"""Shared test set-up: single-threaded torch (the CI machine has 2 cores; the tests are tiny)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import torch  # noqa: E402

torch.set_num_threads(1)

import json  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

from robfair import hardware as _hardware  # noqa: E402

# The speed probe's record, pinned for the whole session (the CLI tests' subprocesses read it through
# the environment): bf16 and channels_last measured faster, fp16 slower, so every test sees the same
# decisions on every machine. tests/hardware/test_speed_probe.py measures for real in its own folder.
PINNED_SPEEDUP = {"bf16": 1.5, "fp16": 0.5, "channels_last": 1.2}
os.environ[_hardware.CACHE_ENV] = tempfile.mkdtemp(prefix="robfair-test-cache-")
with open(_hardware.cache_file("cpu"), "w") as _f:
    json.dump({"probe": _hardware.PROBE_VERSION, "key": _hardware.machine_key("cpu"), "what": "pinned by tests/conftest.py",
               "device": "cpu", "threads": 1, "speedup": PINNED_SPEEDUP}, _f)


@pytest.fixture(autouse=True)
def _no_default_probe(monkeypatch):
    """The reliability probe (official AutoAttack within the audit's own compute) costs seconds per
    audit; tests of other things audit without it. Tests of the probe ask for it explicitly
    (``probe=B`` / ``--probe B``)."""
    import importlib

    monkeypatch.setattr(importlib.import_module("robfair.auditing.probe"), "DEFAULT_BUDGET", 0.0)
