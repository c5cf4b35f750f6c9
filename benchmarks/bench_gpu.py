"""One prepared GPU check: PGD-AT on Fashion-MNIST with and without the fast paths, and what bf16 does
to robust accuracy. Prints a table and writes JSON (``--out``). Every number is measured in this run.

    python benchmarks/bench_gpu.py --data fashion-mnist:/path --out results.json
    python benchmarks/bench_gpu.py --smoke      # CPU, digits, 1 epoch: checks the script itself

For PreAct-ResNet-18 PGD-AT on CIFAR-10 with the per-class audit, see benchmarks/gpu_cifar.py.

Parts (each guarded by a time budget so the whole run fits a short device lease):
1. PGD-10 AT of a small CNN, eps 0.1, fp32 vs bf16 + channels_last: seconds per epoch (train only).
2. The fp32-trained model audited with PGD-20 in fp32 and in bf16: robust accuracy difference
   (bf16 is advertised only if within 0.5 points).
3. Early-exit vs full PGD-20 audit time on the test set, same outcome.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

import robfair
from robfair.data import load_dataset
from robfair.hardware import describe
from robfair.training import TrainConfig, train
from robfair.utils import tune_allocator


def run_train(data: str, out: Path, *, device: str, precision: str, channels_last: bool, epochs: int, batch: int):
    cfg = TrainConfig(data=data, model="smallcnn", method="pgd-at", eps=0.1, epochs=epochs, batch_size=batch,
                      optimizer="adam", lr=1e-3, weight_decay=0.0, schedule="cosine", val_per_class=100,
                      val_attack="pgd10", select="avg+worst", seed=0, device=device, precision=precision,
                      channels_last=channels_last, out=str(out))
    t = time.perf_counter()
    res = train(cfg)
    wall = time.perf_counter() - t
    train_s = [h["time"]["train_s"] for h in res.history]
    return res, wall, train_s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="fashion-mnist")
    p.add_argument("--device", default="auto")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help="CPU, digits, 1 epoch")
    args = p.parse_args(argv)
    tune_allocator()
    if args.smoke:
        args.data, args.device, args.epochs, args.batch = "digits", "cpu", 1, 64
    dev = robfair.utils.resolve_device(args.device)
    info = {"torch": torch.__version__, "python": platform.python_version(), "device": str(dev),
            "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None, "data": args.data,
            "epochs": args.epochs, "batch": args.batch, "machine": describe(dev)}
    print(f"# machine: {info['machine']}")
    print(json.dumps(info))
    results: dict = {"info": info}
    test = load_dataset(args.data, split="test")
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for label, prec, cl in (("fp32", "fp32", False), ("bf16+channels_last", "bf16", True)):
            res, wall, train_s = run_train(args.data, Path(tmp) / label, device=str(dev), precision=prec,
                                           channels_last=cl, epochs=args.epochs, batch=args.batch)
            runs[label] = res
            # the first epoch includes warm-up (cudnn autotuning, allocator); report the later ones too
            steady = train_s[1:] or train_s
            results[f"train_{label}"] = {"wall_s": wall, "train_s_per_epoch": train_s,
                                         "steady_s_per_epoch": sum(steady) / len(steady)}
            print(f"PGD-AT {label:<20} train s/epoch {train_s}  wall {wall:.1f}s", flush=True)
        a, b = results["train_fp32"]["steady_s_per_epoch"], results["train_bf16+channels_last"]["steady_s_per_epoch"]
        results["train_speedup_bf16_cl"] = a / b
        print(f"speed-up of bf16+channels_last over fp32 (PGD-AT epoch): {a / b:.2f}x", flush=True)

        model = runs["fp32"].best_model
        aud = {}
        for prec in ("fp32", "bf16"):
            t = time.perf_counter()
            r = robfair.audit(model, test, attacks=["pgd20"], eps=0.1, device=str(dev), precision=prec,
                              channels_last=(prec == "bf16"), batch_size=1024)
            aud[prec] = (r["pgd20"].overall, time.perf_counter() - t)
            print(f"audit pgd20 {prec}: clean {aud[prec][0]['clean_acc']:.4f} robust {aud[prec][0]['rob_acc']:.4f} "
                  f"({aud[prec][1]:.2f}s)", flush=True)
        diff = 100 * (aud["bf16"][0]["rob_acc"] - aud["fp32"][0]["rob_acc"])
        results["audit"] = {k: {"overall": v[0], "seconds": v[1]} for k, v in aud.items()}
        results["bf16_rob_acc_diff_points"] = diff
        print(f"bf16 - fp32 robust accuracy: {diff:+.2f} points ({'within' if abs(diff) <= 0.5 else 'NOT within'} 0.5)")

        times = {}
        for ee in (False, True):
            t = time.perf_counter()
            r = robfair.audit(model, test, attacks=["pgd20"], eps=0.1, device=str(dev), early_exit=ee, batch_size=1024)
            times[ee] = (time.perf_counter() - t, r["pgd20"].overall["rob_acc"])
        results["early_exit"] = {"full_s": times[False][0], "early_s": times[True][0],
                                 "rob_acc_full": times[False][1], "rob_acc_early": times[True][1]}
        print(f"early exit: full {times[False][0]:.2f}s early {times[True][0]:.2f}s "
              f"speed-up {times[False][0] / times[True][0]:.2f}x; rob acc {times[False][1]:.4f} vs {times[True][1]:.4f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
