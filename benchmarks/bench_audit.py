"""Early-exit PGD-20 vs full PGD-20 in an audit: same robust accuracy, how much faster.

Trains (or loads, with --st / --at) a standard and a PGD-AT small CNN on digits, then audits the test
split with PGD-20 at eps 0.1 twice, early exit on and off, and prints both robust accuracies (they
must agree) and the speed-up. Targets: >= 1.5x on the PGD-AT model, >= 5x on the standard model.

    python benchmarks/bench_audit.py            # full: 30 training epochs, 5 timing repeats
    python benchmarks/bench_audit.py --quick    # CI smoke run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import robfair
from robfair.data import load_dataset
from robfair.models import load_checkpoint
from robfair.utils import tune_allocator


def trained(method: str, epochs: int, out: Path, eps: float):
    from robfair.demo import demo_config
    from robfair.training import train

    cfg = demo_config(method, method, out=out, eps=eps, epochs=epochs, seed=0, device="cpu")
    return train(cfg).best_model


def time_audit(model, ds, eps: float, early_exit: bool, repeats: int):
    """Median wall time of the whole audit, median time inside the attack, and the last report."""
    times, attack_times, rep = [], [], None
    for _ in range(repeats):
        t = time.perf_counter()
        rep = robfair.audit(model, ds, attacks=["pgd20"], eps=eps, device="cpu", early_exit=early_exit, batch_size=256)
        times.append(time.perf_counter() - t)
        attack_times.append(rep.meta["attack_seconds"]["pgd20"])
    return statistics.median(times), statistics.median(attack_times), rep


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few epochs and one repeat (CI smoke run)")
    p.add_argument("--st", type=Path, help="checkpoint of a standard model (default: train one)")
    p.add_argument("--at", type=Path, help="checkpoint of a PGD-AT model (default: train one)")
    p.add_argument("--eps", type=float, default=0.1)
    p.add_argument("--out", type=Path, default=None, help="keep the trained checkpoints in this folder")
    args = p.parse_args(argv)
    tune_allocator()
    torch.manual_seed(0)
    epochs, repeats = (3, 1) if args.quick else (30, 5)
    ds = load_dataset("digits", split="test")
    with tempfile.TemporaryDirectory() as tmp:
        where = args.out or Path(tmp)
        models = {
            "standard": load_checkpoint(args.st)[0] if args.st else trained("standard", epochs, where, args.eps),
            "pgd-at": load_checkpoint(args.at)[0] if args.at else trained("pgd-at", epochs, where, args.eps),
        }
    print(f"digits test (n={len(ds)}), PGD-20 L-inf eps={args.eps}, batch 256, CPU threads {torch.get_num_threads()}"
          f"{' [quick]' if args.quick else ''}")
    print(f"{'model':<10} {'rob acc full':>12} {'rob acc early':>13} {'same':>5} {'full s':>8} {'early s':>8} "
          f"{'speed-up':>9} {'attack only':>12}")
    ok = True
    for name, model in models.items():
        t_full, a_full_s, r_full = time_audit(model, ds, args.eps, False, repeats)
        t_early, a_early_s, r_early = time_audit(model, ds, args.eps, True, repeats)
        a_full = r_full["pgd20"].overall["rob_acc"]
        a_early = r_early["pgd20"].overall["rob_acc"]
        same = r_full["pgd20"].counts == r_early["pgd20"].counts if hasattr(r_full["pgd20"], "counts") else a_full == a_early
        ok &= bool(same)
        print(f"{name:<10} {a_full:>12.4f} {a_early:>13.4f} {str(bool(same)):>5} {t_full:>8.3f} {t_early:>8.3f} "
              f"{t_full / t_early:>8.2f}x {a_full_s / a_early_s:>11.2f}x")
    # bf16 autocast (with channels_last) vs fp32 on the PGD-AT model: speed and robust accuracy
    t32, _, r32 = time_audit(models["pgd-at"], ds, args.eps, True, repeats)
    tbf = []
    for _ in range(repeats):
        t = time.perf_counter()
        rbf = robfair.audit(models["pgd-at"], ds, attacks=["pgd20"], eps=args.eps, device="cpu", precision="bf16",
                            channels_last=True, batch_size=256)
        tbf.append(time.perf_counter() - t)
    a32, abf = r32["pgd20"].overall["rob_acc"], rbf["pgd20"].overall["rob_acc"]
    diff = 100 * (abf - a32)
    print(f"bf16+channels_last vs fp32 audit (pgd-at, early exit): rob acc {a32:.4f} -> {abf:.4f} ({diff:+.2f} points, "
          f"{'within' if abs(diff) <= 0.5 else 'NOT within'} 0.5), speed-up {t32 / statistics.median(tbf):.2f}x")
    if not ok:
        print("MISMATCH: early exit changed the outcome", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
