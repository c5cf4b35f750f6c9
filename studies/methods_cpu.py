"""Issue-3 evidence on real data, CPU size: standard vs PGD-AT vs TRADES vs FRL-RWRM vs CFA vs WAT vs DAFA.

Fashion-MNIST (Debian's dataset-fashion-mnist; digits where it is absent), a small CNN, L-inf eps 0.1.
Every method gets the same epoch budget; FRL-RWRM fine-tunes the TRADES model of the first
``--pre`` epochs for the rest of the budget (the paper's protocol), and "trades" is trained for the
whole budget, so the comparison is at equal cost. Test audit: PGD-20 (+ FGSM), per class, with 95%
Wilson intervals and bootstrap intervals for the worst class.

    OMP_NUM_THREADS=2 python studies/methods_cpu.py --out runs/methods-cpu --md docs/results-methods.md

Sizes are flags (train images per class, epochs, test images per class); the defaults take about
half an hour on 2 CPU cores. Nothing here is cached: every number is measured by this run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import torch

from robfair.auditing import audit
from robfair.data import load_dataset, stratified_split
from robfair.training import TrainConfig, train
from robfair.utils import tune_allocator

METHODS = ["standard", "pgd-at", "trades", "frl-rwrm", "cfa", "wat", "dafa"]


def base_cfg(args, method: str, out: Path, epochs: int, **kw) -> TrainConfig:
    opts = {
        "trades": {"beta": 6.0},
        "frl-rwrm": {"mode": "official", "beta": 1.0},
        "cfa": {"base": "trades", "beta": 6.0, "calibrate_from": 0.2, "fawa_from": 0.5},
        "wat": {"beta": 6.0},
        "dafa": {"base": "trades", "beta": 6.0, "warmup": 0.65},
    }.get(method, {})
    attack = {"pgd-at": "pgd10", "standard": None}.get(method, "trades-kl")
    cfg = dict(data=args.data, model="smallcnn", model_kwargs={"width": args.width}, method=method,
               method_options=opts, eps=args.eps, attack=attack, epochs=epochs, batch_size=128,
               optimizer="adam", lr=args.lr, weight_decay=0.0, schedule="cosine", val_per_class=args.val_per_class,
               val_attack="pgd20", select="avg+worst", seed=args.seed, device="cpu", out=str(out))
    if method == "standard":
        cfg["select"] = "clean"  # a standard model's robust accuracy is ~0: select it on clean accuracy
    cfg.update(kw)
    return TrainConfig(**cfg)


def row(label: str, rep, seconds: float) -> dict:
    main = rep.main
    agg = main.aggregates()
    boot = main.bootstrap(n=1000, seed=0)["metrics"]["rob_acc"]["worst"]
    bg = main.by_group
    return {
        "method": label, "seconds": round(seconds, 1),
        "clean_avg": agg["clean_acc"]["avg"], "clean_worst": agg["clean_acc"]["worst"],
        "rob_avg": agg["rob_acc"]["avg"], "rob_worst": agg["rob_acc"]["worst"],
        "rob_worst_lo": boot["lo"], "rob_worst_hi": boot["hi"], "worst_class": agg["rob_acc"]["worst_group"],
        "rob_gap": agg["rob_acc"]["gap"], "clean_gap": agg["clean_acc"]["gap"],
        "bndy_worst": agg["bndy_err"]["worst"],
        "per_class": {str(k): {"clean": v["clean_acc"], "rob": v["rob_acc"], "rob_lo": v["rob_acc_lo"],
                               "rob_hi": v["rob_acc_hi"]} for k, v in bg.to_dict(orient="index").items()},
        "warnings": list(rep.warnings),
    }


def markdown(rows: list[dict], args, wall: float, n_train: int, n_test: int) -> str:
    p = lambda v: f"{100 * v:.1f}"  # noqa: E731
    lines = [
        f"### Fair robust training on {args.data}, CPU size (`studies/methods_cpu.py`)",
        "",
        f"Command: `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '?')} python studies/methods_cpu.py "
        f"--per-class {args.per_class} --test-per-class {args.test_per_class} --epochs {args.epochs} --pre {args.pre} "
        f"--width {args.width} --eps {args.eps}`; wall time {wall / 60:.1f} min on this 2-core machine.",
        f"smallcnn (width {args.width}), L-inf eps {args.eps}, {n_train} training images "
        f"({args.per_class}/class, {args.val_per_class}/class of them held out for validation/selection), "
        f"test audit on {n_test} test images ({args.test_per_class}/class) with FGSM + PGD-20 (worst case), "
        f"{args.epochs} epochs each (FRL-RWRM: {args.pre} TRADES epochs + {args.epochs - args.pre} FRL epochs), "
        "Adam + cosine, best checkpoint by validation avg + worst-class robust accuracy. Percent; "
        "worst-class interval: 95% bootstrap.",
        "",
        "| method | clean avg | clean worst | robust avg | robust worst [95% CI] | worst class | robust gap | worst bndy err | train+audit s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['method']} | {p(r['clean_avg'])} | {p(r['clean_worst'])} | {p(r['rob_avg'])} | "
                     f"{p(r['rob_worst'])} [{p(r['rob_worst_lo'])}, {p(r['rob_worst_hi'])}] | {r['worst_class']} | "
                     f"{p(r['rob_gap'])} | {p(r['bndy_worst'])} | {r['seconds']:.0f} |")
    classes = list(rows[0]["per_class"])
    lines += ["", "Per-class robust accuracy (percent, 95% Wilson interval):", "",
              "| class | " + " | ".join(r["method"] for r in rows) + " |",
              "|---|" + "---|" * len(rows)]
    for c in classes:
        cells = [f"{p(r['per_class'][c]['rob'])} [{p(r['per_class'][c]['rob_lo'])}, {p(r['per_class'][c]['rob_hi'])}]"
                 for r in rows]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    warn = [f"- {r['method']}: {w}" for r in rows for w in r["warnings"]]
    if warn:
        lines += ["", "Audit warnings:", *warn]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="default: fashion-mnist if installed, else digits")
    ap.add_argument("--per-class", type=int, default=400, help="training images per class (incl. validation)")
    ap.add_argument("--val-per-class", type=int, default=50)
    ap.add_argument("--test-per-class", type=int, default=300)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--pre", type=int, default=8, help="TRADES epochs before FRL fine-tuning")
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--eps", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", type=Path, default=Path("runs/methods-cpu"))
    ap.add_argument("--md", type=Path, default=None, help="write the Markdown table here")
    args = ap.parse_args(argv)
    tune_allocator()
    if args.data is None:
        args.data = "fashion-mnist" if Path("/usr/share/datasets/fashion-mnist").is_dir() else "digits"
    t0 = time.perf_counter()
    full = load_dataset(args.data, "train")
    test_full = load_dataset(args.data, "test")
    _, tr_idx = stratified_split(full.y, args.per_class, args.seed)
    _, te_idx = stratified_split(test_full.y, args.test_per_class, args.seed)
    train_ds, test_ds = full.subset(tr_idx), test_full.subset(te_idx)

    def final_audit(m, data):
        return audit(m, data, attacks=["fgsm", "pgd20"], eps=args.eps, device="cpu", seed=args.seed)

    # Results of earlier invocations in the same --out are kept; methods run now replace theirs.
    results = args.out / "results.json"
    rows = json.loads(results.read_text()) if results.exists() else []
    trades_pre = None
    for method in args.methods.split(","):
        rows = [r for r in rows if r["method"] != method]
        t = time.perf_counter()
        if (args.out / method).exists():
            shutil.rmtree(args.out / method)  # a rerun of a method replaces its earlier run folder
        if method == "frl-rwrm":
            if trades_pre is None:
                done = args.out / "trades-pre" / "checkpoints" / "best.pt"
                if done.exists():  # the same deterministic pre-training run of an earlier invocation
                    trades_pre = str(done)
                else:
                    pre = train(base_cfg(args, "trades", args.out / "trades-pre", args.pre), train_data=train_ds)
                    trades_pre = str(pre.best_path)
            cfg = base_cfg(args, method, args.out / method, args.epochs - args.pre, init=trades_pre, lr=args.lr / 2)
        else:
            cfg = base_cfg(args, method, args.out / method, args.epochs)
        res = train(cfg, final_audit=final_audit, train_data=train_ds, test_data=test_ds)
        r = row(method, res.audit, time.perf_counter() - t)
        rows.append(r)
        print(f"{method:<10} clean {100 * r['clean_avg']:.1f}/{100 * r['clean_worst']:.1f}  "
              f"robust {100 * r['rob_avg']:.1f}/{100 * r['rob_worst']:.1f} ({r['worst_class']})  {r['seconds']:.0f}s", flush=True)
        rows.sort(key=lambda r: METHODS.index(r["method"]) if r["method"] in METHODS else len(METHODS))
        results.write_text(json.dumps(rows, indent=1))
    wall = time.perf_counter() - t0
    md = markdown(rows, args, wall, len(train_ds), len(test_ds))
    print(md)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
