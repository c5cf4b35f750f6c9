"""Issue-10 evidence: TRADES vs FRL-RWRM (paper, official), CFA (eq. 8), WAT (official cost), DAFA, FAAL, BAT,
three seeds, at a reduced CPU size.

Per seed: TRADES from scratch for ``--epochs``; FRL-RWRM (mode paper and mode official) and FAAL fine-tune
that TRADES run's best.pt (``--init``, which also fixes their validation split) for ``--ft-epochs`` /
``--faal-epochs``; CFA, WAT, DAFA and BAT train from scratch for ``--epochs``. Test audit: PGD-20 on
``--test-per-class`` images per class. Table: mean +- sd over seeds of average and worst-class robust
accuracy, the pooled bootstrap interval of the seed-mean worst-class robust accuracy (each replicate
resamples every seed's test samples within each class, takes each seed's worst class and averages over
seeds), and the paired difference to TRADES (same seed) with a t statistic.

    OMP_NUM_THREADS=1 nice -n 19 python studies/methods_issue10.py --out runs/issue10 --md docs/results-methods-issue10.md
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from robfair.audit import audit
from robfair.data import load_dataset, stratified_split
from robfair.training import TrainConfig, train

METHODS = {  # label -> (method, options, fine-tunes TRADES?)
    "TRADES": ("trades", {"beta": 6.0}, False),
    "FRL-RWRM paper": ("frl-rwrm", {"mode": "paper"}, True),
    "FRL-RWRM official": ("frl-rwrm", {"mode": "official"}, True),
    "CFA (eq. 8)": ("cfa", {"ccr_form": "paper"}, False),
    "WAT (official cost)": ("wat", {"cost": "trades-surrogate"}, False),
    "DAFA": ("dafa", {}, False),
    "FAAL": ("faal", {"base": "trades"}, True),
    "BAT": ("bat", {}, False),
}
T_975_DF2 = 4.303  # two-sided 95% t quantile, 2 degrees of freedom (3 seeds)


def cfg_for(args, method, opts, seed, out, epochs, init=None, lr=None):
    return TrainConfig(data=args.data, model="mlp", method=method, method_options=opts, eps=args.eps, epochs=epochs,
                       batch_size=128, lr=lr or args.lr, milestones=[0.75], val_per_class=args.val_per_class,
                       val_attack="pgd10", select="avg+worst", seed=seed, device="cpu", init=init, out=str(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--eps", type=float, default=0.1)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--per-class", type=int, default=150, help="training images per class (incl. validation)")
    ap.add_argument("--val-per-class", type=int, default=30)
    ap.add_argument("--test-per-class", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--ft-epochs", type=int, default=3)
    ap.add_argument("--faal-epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--ft-lr", type=float, default=0.01)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    full, test_full = load_dataset(args.data, "train"), load_dataset(args.data, "test")
    _, te_idx = stratified_split(test_full.y, args.test_per_class, 0)
    test = test_full.subset(te_idx)
    t_start = time.perf_counter()
    results: dict[str, list[dict]] = {k: [] for k in METHODS}
    for seed in seeds:
        _, tr_idx = stratified_split(full.y, args.per_class, 100 + seed)
        data = full.subset(tr_idx)
        init = None
        for label, (method, opts, ft) in METHODS.items():
            slug = "".join(ch if ch.isalnum() else "-" for ch in label.lower()).strip("-")
            out = args.out / f"seed{seed}" / slug
            if ft:
                epochs = args.faal_epochs if method == "faal" else args.ft_epochs
                cfg = cfg_for(args, method, opts, seed, out, epochs, init=init, lr=args.ft_lr)
            else:
                cfg = cfg_for(args, method, opts, seed, out, args.epochs)
            t0 = time.perf_counter()
            res = train(cfg, train_data=data)
            rep = audit(res.best_model, test, attacks=["pgd20"], eps=args.eps, seed=seed, device="cpu").main
            frame = rep.by_class
            n = frame["n"].to_numpy(dtype=float)
            rob = frame["rob_acc"].to_numpy(dtype=float)
            agg = rep.aggregates()
            results[label].append({"seed": seed, "rob_avg": agg["rob_acc"]["avg"], "rob_worst": agg["rob_acc"]["worst"],
                                   "clean_avg": agg["clean_acc"]["avg"], "worst_class": agg["rob_acc"]["worst_group"],
                                   "n": n.tolist(), "rob": rob.tolist(), "seconds": time.perf_counter() - t0})
            print(label, seed, json.dumps({k: v for k, v in results[label][-1].items() if k not in ("n", "rob")}),
                  flush=True)
            if method == "trades":
                init = str(out / "checkpoints" / "best.pt")
    wall = time.perf_counter() - t_start
    (args.out / "results.json").write_text(json.dumps({"args": vars(args) | {"out": str(args.out),
                                                       "md": str(args.md)}, "results": results}, indent=1))
    if args.md:
        args.md.write_text(markdown(args, results, wall, len(test)))


def pooled_worst_interval(runs: list[dict], n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    reps = np.zeros(n_boot)
    for r in runs:
        n = np.asarray(r["n"])
        k = np.round(np.asarray(r["rob"]) * n)
        draws = rng.binomial(n.astype(int)[None, :], (k / np.maximum(n, 1))[None, :], size=(n_boot, n.size))
        reps += (draws / np.maximum(n, 1)).min(1)
    reps /= len(runs)
    return float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975))


def markdown(args, results, wall, n_test) -> str:
    p = lambda v: f"{100 * v:.1f}"  # noqa: E731
    base = {r["seed"]: r for r in results["TRADES"]}
    lines = [
        "# Fair robust training methods, 3 seeds, reduced CPU size (issue 10, part 6)",
        "",
        f"Measured by `studies/methods_issue10.py` (wall {wall / 60:.1f} min, CPU, 1 thread, `nice -n 19`, shared "
        f"machine). **Reduced size**: {args.data}, {args.per_class} training images per class ({args.val_per_class} "
        f"of them the validation split), model mlp (256-256), L-inf eps {args.eps:g}, seeds {args.seeds} (the "
        f"training subset and every random start depend on the seed). Scratch methods: {args.epochs} epochs, SGD lr "
        f"{args.lr:g}, lr /10 at 75%. FRL-RWRM (paper / official modes) and FAAL (base trades) fine-tune the same "
        f"seed's TRADES best.pt for {args.ft_epochs} / {args.faal_epochs} epochs at lr {args.ft_lr:g} (reusing its "
        f"validation split), so they get more training than the others. best.pt by validation avg + worst-class "
        f"robust accuracy (PGD-10). Test: PGD-20 on {n_test} test images ({args.test_per_class} per class), the "
        "same images for every run. Percent.",
        "",
        "Worst-class CI: pooled bootstrap 95% interval of the seed-mean worst-class robust accuracy (per replicate, "
        "every seed's test outcomes are resampled within each class). Paired diff: worst-class robust accuracy "
        "minus TRADES' at the same seed, mean +- sd over seeds, t = mean / (sd / sqrt(seeds)); with 3 seeds "
        "|t| > 4.30 is beyond the seed noise at 95% (2 degrees of freedom).",
        "",
        "| method | clean avg | robust avg (mean +- sd) | worst-class robust (mean +- sd) | pooled 95% CI | "
        "paired diff vs TRADES | t | avg robust cost vs TRADES |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for label, runs in results.items():
        if not runs:
            continue
        ra = np.array([r["rob_avg"] for r in runs])
        rw = np.array([r["rob_worst"] for r in runs])
        ca = np.array([r["clean_avg"] for r in runs])
        lo, hi = pooled_worst_interval(runs)
        if label == "TRADES":
            diff_txt, t_txt, cost = "-", "-", "-"
        else:
            d = np.array([r["rob_worst"] - base[r["seed"]]["rob_worst"] for r in runs])
            c = np.array([r["rob_avg"] - base[r["seed"]]["rob_avg"] for r in runs])
            sd = d.std(ddof=1) if len(d) > 1 else float("nan")
            t = d.mean() / (sd / math.sqrt(len(d))) if sd > 0 else (0.0 if d.mean() == 0 else math.copysign(math.inf, d.mean()))
            diff_txt = f"{p(d.mean())} +- {p(sd)}"
            t_txt = f"{t:.2f}"
            cost = f"{p(c.mean())} +- {p(c.std(ddof=1))}"
            if t > T_975_DF2:
                verdicts.append(f"- **{label}** beats TRADES on worst-class robust accuracy beyond the seed noise "
                                f"(+{p(d.mean())} points, t = {t:.2f}) at an average robust accuracy change of "
                                f"{p(c.mean())} points.")
            elif t < -T_975_DF2:
                verdicts.append(f"- **{label}** is worse than TRADES on worst-class robust accuracy beyond the seed "
                                f"noise ({p(d.mean())} points, t = {t:.2f}).")
        lines.append(f"| {label} | {p(ca.mean())} | {p(ra.mean())} +- {p(ra.std(ddof=1))} | "
                     f"{p(rw.mean())} +- {p(rw.std(ddof=1))} | [{p(lo)}, {p(hi)}] | {diff_txt} | {t_txt} | {cost} |")
    lines += ["", "**Verdict.**", ""]
    lines += verdicts or ["- No method beats TRADES on worst-class robust accuracy beyond the seed noise at this size "
                          "(no paired |t| > 4.30)."]
    lines += ["", "Per seed (worst class in parentheses):", "",
              "| method | " + " | ".join(f"seed {s} robust avg / worst" for s in args.seeds.split(",")) + " |",
              "|---|" + "---|" * len(args.seeds.split(","))]
    for label, runs in results.items():
        lines.append(f"| {label} | " + " | ".join(f"{p(r['rob_avg'])} / {p(r['rob_worst'])} ({r['worst_class']})"
                                                 for r in runs) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
