"""Per-epoch overhead of the fair-training machinery (FRL, CFA, WAT, DAFA) against plain TRADES.

Each method trains the same small CNN on digits for a few epochs through the real trainer; the
training part of an epoch (``time.train_s`` in metrics.jsonl) is compared with TRADES', and the
validation part (``time.val_s``: the PGD validation attack every method needs for its dual or
calibration step) is printed separately. Target: training-time overhead <= 10% over TRADES.

    python benchmarks/bench_methods.py            # 4 epochs per method, median of epochs 2..4
    python benchmarks/bench_methods.py --quick    # CI smoke run: 2 epochs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from robfair.hardware import describe
from robfair.training import TrainConfig, train
from robfair.utils import tune_allocator

OPTIONS = {
    "trades": {"beta": 6.0},
    "frl-rwrm": {"beta": 6.0, "pretrain_epochs": 0},
    "cfa": {"base": "trades", "beta": 6.0, "calibrate_from": 0, "fawa_from": 0, "fawa_threshold": 0.0},
    "wat": {"beta": 6.0},
    "dafa": {"base": "trades", "beta": 6.0, "warmup": 1},
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--epochs", type=int, default=None)
    args = p.parse_args(argv)
    tune_allocator()
    print(f"# machine: {describe('cpu')}", flush=True)
    epochs = args.epochs or (2 if args.quick else 4)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        init = None
        # warm-up: the first training run of a process pays one-off costs (allocator, kernels); without
        # it the baseline, which runs first, would look slower than the methods measured after it
        train(TrainConfig(data="digits", model="smallcnn", method="trades", eps=0.1, attack="trades-kl", epochs=1,
                          batch_size=64, val_per_class=20, val_attack="pgd10", select="last", seed=0, device="cpu",
                          schedule="constant", out=str(Path(tmp) / "warm-up")))
        for method, opts in OPTIONS.items():
            cfg = TrainConfig(data="digits", model="smallcnn", method=method, method_options=opts, eps=0.1,
                              attack="trades-kl", epochs=epochs, batch_size=64, optimizer="adam", lr=1e-3,
                              weight_decay=0.0, schedule="constant", val_per_class=20, val_attack="pgd10",
                              select="last", seed=0, device="cpu", init=init, out=str(Path(tmp) / method))
            res = train(cfg)
            if method == "trades":
                init = str(res.last_path)  # FRL fine-tunes a TRADES model, as in the paper
            later = res.history[1:] or res.history
            rows[method] = (statistics.median(h["time"]["train_s"] for h in later),
                            statistics.median(h["time"]["val_s"] for h in later))
    base_train, base_val = rows["trades"]
    print(f"digits, smallcnn, TRADES-KL inner max, batch 64, {epochs} epochs, torch threads {torch.get_num_threads()}")
    print(f"{'method':<10} {'train s/epoch':>14} {'overhead':>9} {'val s/epoch':>12} {'val vs trades':>14}")
    for method, (tr, va) in rows.items():
        print(f"{method:<10} {tr:>14.3f} {100 * (tr / base_train - 1):>8.1f}% {va:>12.3f} {va / base_val:>13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
