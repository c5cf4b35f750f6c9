"""The speed probe measured for real (each test in its own cache folder, not the session's pinned record):
its ratios come from timings, its record is cached per machine and torch version and written whole, and
``robfair doctor`` prints it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from robfair import hardware


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(hardware.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(hardware, "_MEASURED", {})
    return tmp_path / "cache"


def test_probe_measures_caches_and_reuses(cache, monkeypatch):
    t0 = time.perf_counter()
    rec = hardware.measure_speedups("cpu")
    took = time.perf_counter() - t0
    assert not rec["cached"] and took < 5.0  # a few hundred ms idle; generous for a loaded CI machine
    path = cache / f"speed-{hardware.machine_key('cpu')}.json"
    assert rec["cache_file"] == str(path) and path.is_file()
    assert [p.name for p in cache.iterdir()] == [path.name]  # no temporary file left beside it
    on_disk = json.loads(path.read_text())
    assert on_disk["speedup"] == rec["speedup"] and on_disk["torch"] == hardware.torch.__version__
    for k in ("bf16", "fp16", "channels_last"):
        r = rec["speedup"][k]
        assert r is None or (isinstance(r, float) and 0.0 < r < 100.0)
    assert isinstance(rec["speedup"]["channels_last"], float) and rec["fp32_step_ms"] > 0
    assert rec["failed"] == {}  # torch's CPU autocast runs both precisions: each is timed, none is "absent"
    # the next process (here: a cleared memory cache) reads the record instead of measuring
    monkeypatch.setattr(hardware, "_MEASURED", {})
    monkeypatch.setattr(hardware, "_timed_steps", lambda *a, **k: pytest.fail("measured again"))
    again = hardware.measure_speedups("cpu")
    assert again["cached"] and again["speedup"] == rec["speedup"]


def test_ratios_follow_the_timings(cache, monkeypatch):
    """The decision is the timing's: a variant made slow here is measured slow and refused."""
    real = hardware._timed_steps

    def slowed(dev, budget_s):
        res = real(dev, budget_s)
        res["ratio"]["bf16"] = res["ratio"]["bf16"] / 100.0  # as if every bf16 step took 100x longer
        return res

    monkeypatch.setattr(hardware, "_timed_steps", slowed)
    monkeypatch.delenv(hardware.EMULATION_ENV, raising=False)
    rec = hardware.measure_speedups("cpu")
    assert rec["speedup"]["bf16"] < 1.0 and not hardware.native_precisions("cpu")["bf16"]
    with pytest.raises(hardware.RobfairError, match=r"--precision bf16 is not native here \(measured 0\.\d\dx fp32's speed"):
        hardware.check_precision("bf16", "cpu")
    monkeypatch.setenv(hardware.EMULATION_ENV, "1")
    assert hardware.check_precision("bf16", "cpu") == "bf16"


def test_a_damaged_or_foreign_record_is_measured_again(cache, monkeypatch):
    path = hardware.cache_file("cpu")
    path.parent.mkdir(parents=True)
    for text in ("{not json", json.dumps({"probe": hardware.PROBE_VERSION, "key": "another machine", "speedup": {}})):
        path.write_text(text)
        monkeypatch.setattr(hardware, "_MEASURED", {})
        rec = hardware.measure_speedups("cpu", budget_s=0.05)
        assert not rec["cached"] and json.loads(path.read_text())["key"] == hardware.machine_key("cpu")


def test_key_changes_with_torch_version_and_flags(monkeypatch):
    key = hardware.machine_key("cpu")
    monkeypatch.setattr(hardware.torch, "__version__", "0.0.1")
    assert hardware.machine_key("cpu") != key
    monkeypatch.undo()
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2"}))
    assert hardware.machine_key("cpu") != key


def test_unwritable_cache_still_measures(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(hardware.CACHE_ENV, str(blocker / "below-a-file"))
    monkeypatch.setattr(hardware, "_MEASURED", {})
    rec = hardware.measure_speedups("cpu", budget_s=0.05)
    assert not rec["cached"] and set(rec["speedup"]) == {"bf16", "fp16", "channels_last"}


def test_doctor_prints_the_machine_and_the_measured_speedups(tmp_path):
    env = dict(os.environ, **{hardware.CACHE_ENV: str(tmp_path / "c")})
    env.pop(hardware.EMULATION_ENV, None)
    run = [sys.executable, "-c", "from robfair.cli import main; main()", "doctor"]
    first = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    out = first.stdout.splitlines()
    assert out[0].startswith("robfair ") and out[1].startswith(f"CPU: {hardware.cpu_model()}")
    assert out[2].startswith("flags that matter: ") and "measured now in" in first.stdout
    files = list((tmp_path / "c").iterdir())
    assert len(files) == 1 and f"cache: {files[0]}" in first.stdout
    rec = json.loads(files[0].read_text())
    for p in ("bf16", "fp16"):
        line = next(x for x in out if x.strip().startswith(f"{p} autocast"))
        r = rec["speedup"][p]
        assert (f"{r:.2f}x" if r is not None else " - ") in line
        assert ("offered" in line) == (r is not None and r > 1.0)
    cl = next(x for x in out if x.strip().startswith("channels_last"))
    assert f"{rec['speedup']['channels_last']:.2f}x" in cl
    second = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert "from the cache" in second.stdout and second.stdout.splitlines()[5:] == out[5:]  # same ratios, same file


def test_probe_leaves_the_callers_state_as_it_was(cache):
    """A seeded run is the same whether the probe ran in it or came from the cache: the global random
    stream, the thread count and grad mode are untouched; under no_grad / inference_mode it still measures."""
    import torch

    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    with torch.inference_mode():
        rec = hardware.measure_speedups("cpu", budget_s=0.05)
    assert torch.equal(torch.rand(4), expected) and torch.get_num_threads() == threads
    assert torch.is_grad_enabled() and isinstance(rec["speedup"]["channels_last"], float)
