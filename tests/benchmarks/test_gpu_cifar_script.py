"""benchmarks/gpu_cifar.py --dry-run on a small archive in the cifar10-jpeg layout: every output is
written, the numbers in them agree with each other, and an existing output folder is refused."""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_cifar.py"
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_cifar", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def small_archive(path: Path) -> Path:
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tar:
        for split, n in (("train", 3), ("test", 2)):
            for c in CLASSES:
                for k in range(n):
                    buf = io.BytesIO()
                    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, format="JPEG")
                    info = tarfile.TarInfo(f"cifar10-jpeg/{split}/{c}/{k:04d}.jpg")
                    info.size = buf.tell()
                    buf.seek(0)
                    tar.addfile(info, buf)
    return path


@pytest.mark.slow
def test_dry_run_writes_consistent_outputs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROBFAIR_CACHE", str(tmp_path / "cache"))
    archive = small_archive(tmp_path / "cifar10-jpeg.tar.gz")
    out = tmp_path / "out"
    gpu = load_script()
    # fp32 keeps the test quick (bf16 autocast is ~20x slower on this CPU); CI runs the bf16 dry run
    argv = ["--dry-run", "--data", f"cifar10-jpeg:{archive}", "--out", str(out), "--precision", "fp32"]
    assert gpu.main(argv) == 0
    printed = capsys.readouterr().out
    # the plan: the reference epoch's FLOPs as counted, the 15 s H200 target and the throughput it needs
    ref = gpu.epoch_flops("preact-resnet18", 10)
    pflop = ref["per_image_flop"] * 50_000 / 1e15
    assert 1.2 < pflop < 1.35  # 10 x (forward + input gradient) + forward + backward, 1.11 GFLOP a forward
    assert f"= {pflop:.3f} PFLOP per epoch; H200 target 15 s per epoch = {pflop * 1e3 / 15:.0f} TFLOP/s" in printed
    assert "plan: cifar-cnn PGD-2 AT, epochs" in printed and "batch 16, fp32 autocast" in printed
    # every path of the GPU run went through: the workers' decode, the compiled step, the audit with its probe
    assert "2 DataLoader workers decoded the archive's first 50 JPEGs, identical" in printed
    assert "torch.compile (aot_eager): the training step ran compiled" in printed
    for name in ("summary.md", "per_class.csv", "aggregates.json", "audit.json", "outcomes.npz", "timings.json", "info.json",
                 "train/metrics.jsonl", "train/checkpoints/best.pt"):
        assert (out / name).is_file(), name
    table = pd.read_csv(out / "per_class.csv", index_col="class")
    assert list(table.index) == CLASSES and table["n"].tolist() == [2] * 10  # test_per_class=2 of the dry run
    assert (table["rob_acc"] <= table["clean_acc"] + 1e-9).all()
    assert (table["rob_acc"] <= table[["rob_acc_fgsm", "rob_acc_pgd2"]].min(axis=1) + 1e-9).all()  # worst case
    aggs = json.loads((out / "aggregates.json").read_text())
    assert aggs["clean_acc"]["avg"] * 100 == pytest.approx(table["clean_acc"].mean(), abs=0.01)
    audit = json.loads((out / "audit.json").read_text())
    assert audit["schema"] == "robfair.audit/1" and set(audit["reports"]) == {"fgsm", "pgd2", "worst-case"}
    timings = json.loads((out / "timings.json").read_text())
    assert len(timings["train_s_per_epoch"]) == timings["epochs"] == 1
    assert timings["total_s"] >= timings["train_wall_s"] + timings["audit_s"]
    info = json.loads((out / "info.json").read_text())
    assert info["n_train"] == 30 and info["n_test"] == 20 and info["settings"]["model"] == "cifar-cnn"
    assert info["compile"] == {"backend": "aot_eager", "used": True, "warnings": []}
    assert info["plan"]["reference_pflop_per_epoch"] == pytest.approx(pflop) and info["plan"]["h200_target_s"] == 15
    assert isinstance(audit.get("probe"), dict) or (out / "probe.json").is_file()  # the audit ran with the probe
    summary = (out / "summary.md").read_text()
    assert "| automobile | 2 |" in summary and "93 / 67" in summary and "lossy" in summary
    # an output folder holding results is refused (exit 2), nothing in it is touched
    before = (out / "summary.md").stat().st_mtime_ns
    assert gpu.main(argv) == 2
    assert "already holds results" in capsys.readouterr().err
    assert (out / "summary.md").stat().st_mtime_ns == before


def test_missing_archive_is_one_line_exit_2(tmp_path, capsys):
    gpu = load_script()
    assert gpu.main(["--dry-run", "--data", f"cifar10-jpeg:{tmp_path / 'nope.tar.gz'}", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cifar10-jpeg: path") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_probe_verdict_lines():
    gpu = load_script()
    assert gpu.probe_verdict({"skipped": "disabled (probe=0)"}) == "skipped (disabled (probe=0))"
    rec = {"attack": "autoattack", "flagged_groups": ["cat"], "verdict": "reliability probe: pgd20 overstates ..."}
    assert gpu.probe_verdict(rec) == rec["verdict"]
    assert gpu.probe_verdict({"attack": "autoattack", "flagged_groups": ["cat"]}) == "autoattack: flagged cat"
