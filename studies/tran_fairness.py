"""Issue-4 evidence (Tran et al., "Fairness Increases Adversarial Vulnerability"), CPU size.

Two problems with a protected attribute that is *not* the class:

1. ``synthetic``: a binary task in R^10 with two groups. The majority (80%) is separable along the
   first five coordinates, the minority (20%) mostly along the last five. An unconstrained linear
   model leans on the majority's features; accuracy parity can only be bought by moving weight to
   the minority's features, which brings the majority's samples closer to the boundary.
2. ``digits``: scikit-learn digits, groups = even / odd digit, with the odd digits under-represented
   in training (20% of them kept); an MLP. The test split is untouched.

For each problem: ``fair-constraint`` (accuracy parity, fixed lambda) for lambda in {0, 0.1, 0.3,
1, 3}, and ``fair-adversarial`` (the same constraint on PGD examples, Tran's mitigation) at
lambda = 0 and 1. Every model is evaluated on the test split: per-group clean accuracy, the fairness
violation (accuracy parity max_g |acc_g - acc|), robust accuracy vs eps per group (``eps_sweep``,
Wilson intervals) and distances to the decision boundary per group (exact for the linear model,
bisection with PGD for the MLP).

    OMP_NUM_THREADS=1 python studies/tran_fairness.py --out runs/tran --md docs/results-tran.md

About 5 minutes on one CPU thread. Every number is measured by the run; nothing is cached.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from robfair.data import Dataset, load_dataset
from robfair.auditing.distances import boundary_distances
from robfair.auditing.eps_sweep import eps_sweep
from robfair.metrics import GroupReport
from robfair.theory import mixture_dataset
from robfair.training import TrainConfig, train
from robfair.utils import tune_allocator

LAMBDAS = [0.0, 0.1, 0.3, 1.0, 3.0]


# ----------------------------------------------------------------------------- data
def synthetic(n: int, seed: int, d: int = 10, minor: float = 0.2) -> Dataset:
    """Binary task, two groups with different informative features (see the module docstring)."""
    rng = np.random.default_rng(seed)
    g = (rng.random(n) < minor).astype(np.int64)
    y = np.where(rng.random(n) < 0.5, -1, 1)
    h = d // 2
    mu = np.zeros((n, d))
    mu[g == 0, :h] = 0.6  # majority: signal on the first half
    mu[g == 1, h:] = 0.6  # minority: signal on the second half ...
    mu[g == 1, :h] = 0.15  # ... and a little on the first
    x = y[:, None] * mu + rng.standard_normal((n, d))
    return mixture_dataset(x, y, g, scale=0.08, group_names=["majority", "minority"], name="two-group-gaussian")


def digits_parity(split: str, keep_odd: float, seed: int) -> Dataset:
    ds = load_dataset("digits", split)
    ds.g = (ds.y % 2).clone()
    ds.groups = ["even", "odd"]
    if split == "train" and keep_odd < 1:
        rng = np.random.default_rng(seed)
        keep = (ds.g.numpy() == 0) | (rng.random(len(ds)) < keep_odd)
        ds = ds.subset(np.flatnonzero(keep))
    ds.name = f"digits-parity-{split}"
    return ds.validate()


# ----------------------------------------------------------------------------- one run
def run_one(problem: dict, method: str, lam: float, seed: int) -> dict:
    cfg = TrainConfig(data=problem["name"], model="mlp", model_kwargs={"hidden": problem["hidden"]}, method=method,
                      method_options={"fairness": "accuracy-parity", "lam": lam}, eps=problem["train_eps"],
                      attack="pgd10" if method == "fair-adversarial" else None, epochs=problem["epochs"],
                      batch_size=128, optimizer="adam", lr=problem["lr"], weight_decay=0.0, schedule="cosine",
                      val_per_class=0.1, val_attack="fgsm" if problem["linear"] else "pgd10", select="last",
                      seed=seed, device="cpu")
    t0 = time.perf_counter()
    result = train(cfg, train_data=problem["train"])
    model = result.model.eval()
    test = problem["test"]
    sweep = eps_sweep(model, test, problem["attack"], problem["eps"], device="cpu", seed=seed)
    dist = boundary_distances(model, test, "exact" if problem["linear"] else "bisection", attack=problem["attack"],
                              eps_max=problem["eps_max"], tol=problem["eps_max"] / 64, device="cpu", seed=seed)
    clean: GroupReport = sweep.reports[0]
    agg = clean.aggregates()
    last = result.history[-1]["method"]
    return {
        "method": method, "lam": lam, "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
        "clean": {g: float(v) for g, v in clean.by_group["clean_acc"].items()},
        "clean_all": clean.overall["clean_acc"],
        "parity": agg["clean_acc"]["parity"],
        "val_violation": (last.get("violation") or {}).get("max"),
        "rob": {f"{e:.4g}": {**{g: float(v) for g, v in r.by_group["rob_acc"].items()}, "all": r.overall["rob_acc"]}
                for e, r in zip(sweep.eps, sweep.reports)},
        "rob_ci": {f"{e:.4g}": {g: [float(r.by_group.loc[g, "rob_acc_lo"]), float(r.by_group.loc[g, "rob_acc_hi"])]
                                for g in r.group_names} for e, r in zip(sweep.eps, sweep.reports)},
        "rob_parity": {f"{e:.4g}": r.aggregates()["rob_acc"]["parity"] for e, r in zip(sweep.eps, sweep.reports)},
        "dist": {g: {k: float(v) for k, v in row.items()} for g, row in dist.summary().iterrows()},
        "dist_hist": dist.histogram(bins=8),
    }


# ----------------------------------------------------------------------------- tables
def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def pct(v) -> str:
    return "-" if v is None or v != v else f"{100 * v:.1f}"


def label(r: dict) -> str:
    return f"{r['method']} λ={r['lam']:g}"


def aggregate(runs: list[dict]) -> dict[tuple[str, float], dict]:
    """Per (method, lambda): the runs of every seed and the mean / sd of the headline numbers."""
    out: dict[tuple[str, float], dict] = {}
    for r in runs:
        out.setdefault((r["method"], r["lam"]), {"runs": []})["runs"].append(r)
    for agg in out.values():
        rs = agg["runs"]
        groups = list(rs[0]["clean"])
        vals = {
            "clean_all": [r["clean_all"] for r in rs], "parity": [r["parity"] for r in rs],
            "val_violation": [r["val_violation"] if r["val_violation"] is not None else np.nan for r in rs],
        }
        for g in groups:
            vals[f"clean:{g}"] = [r["clean"][g] for r in rs]
            vals[f"dist:{g}"] = [r["dist"][g]["mean"] for r in rs]
            vals[f"median:{g}"] = [r["dist"][g]["median"] for r in rs]
        for e in rs[0]["rob"]:
            for g in [*groups, "all"]:
                vals[f"rob:{e}:{g}"] = [r["rob"][e][g] for r in rs]
            vals[f"robpar:{e}"] = [r["rob_parity"][e] for r in rs]
        agg["mean"] = {k: float(np.mean(v)) for k, v in vals.items()}
        agg["sd"] = {k: float(np.std(v, ddof=1)) if len(v) > 1 else float("nan") for k, v in vals.items()}
    return out


def ms(agg: dict, key: str, scale: float = 100, digits: int = 1) -> str:
    m, sd = agg["mean"][key], agg["sd"][key]
    if m != m:
        return "-"
    return f"{scale * m:.{digits}f}" + ("" if sd != sd else f" ± {scale * sd:.{digits}f}")


def tables(problem: dict, runs: list[dict]) -> str:
    groups = list(runs[0]["clean"])
    eps_keys = list(runs[0]["rob"])
    e_mid = eps_keys[len(eps_keys) // 2]
    aggs = aggregate(runs)
    seeds = sorted({r["seed"] for r in runs})
    lines = [f"### {problem['title']}", "", problem["desc"], ""]
    hdr = ["model", *[f"clean {g} %" for g in groups], "acc. parity (test) pts",
           "val violation, last epoch (clean acc; fair-adversarial: robust acc) pts",
           *[f"robust {g} % @ε={e_mid}" for g in groups], f"robust all % @ε={e_mid}",
           f"robust all % @ε={eps_keys[-1]}", *[f"mean dist {g} (x1000)" for g in groups]]
    rows = []
    for (method, lam), a in aggs.items():
        rows.append([f"{method} λ={lam:g}", *[ms(a, f"clean:{g}") for g in groups], ms(a, "parity"),
                     ms(a, "val_violation"), *[ms(a, f"rob:{e_mid}:{g}") for g in groups], ms(a, f"rob:{e_mid}:all"),
                     ms(a, f"rob:{eps_keys[-1]}:all"), *[ms(a, f"dist:{g}", 1000, 1) for g in groups]])
    lines += [f"Summary, mean ± sd over seeds {seeds} (test split; distances: {problem['dist_how']}, correctly "
              "classified samples; accuracy parity = max_g |acc_g − acc|):", "", md_table(hdr, rows), ""]
    first = [r for r in runs if r["seed"] == seeds[0]]
    hdr = ["model", "group", *[f"ε={e}" for e in eps_keys]]
    rows = []
    for r in first:
        for g in groups:
            rows.append([label(r), g, *[f"{pct(r['rob'][e][g])} [{pct(r['rob_ci'][e][g][0])}, {pct(r['rob_ci'][e][g][1])}]"
                                        for e in eps_keys]])
    lines += [f"Robust accuracy % vs ε, seed {seeds[0]} ({problem['attack']}, one-pass sweep, Wilson 95% CI):", "",
              md_table(hdr, rows), ""]
    hdr = ["model", "group", "n", "q10", "q25", "median", "q75", "q90", "censored"]
    rows = []
    for r in first:
        for g in groups:
            d = r["dist"][g]
            rows.append([label(r), g, str(int(d["n"])), *[f"{d[k]:.4f}" for k in ("q10", "q25", "median", "q75", "q90")],
                         str(int(d["censored"]))])
    lines += [f"Distance-to-boundary distributions, seed {seeds[0]} (quantiles; histogram data in results.json):", "",
              md_table(hdr, rows), ""]
    return "\n".join(lines)


def verdict(problem: dict, runs: list[dict]) -> str:
    """Plain statements of what the seed means show, computed from them (no hand-written claims)."""
    aggs = aggregate(runs)
    fc = {lam: a["mean"] for (m, lam), a in aggs.items() if m == "fair-constraint"}
    fa = {lam: a["mean"] for (m, lam), a in aggs.items() if m == "fair-adversarial"}
    groups = list(runs[0]["clean"])
    fav = max(groups, key=lambda g: fc[0.0][f"clean:{g}"])  # the favoured group of the unconstrained model
    other = [g for g in groups if g != fav][0]
    eps_keys = list(runs[0]["rob"])
    e_mid, e_hi = eps_keys[len(eps_keys) // 2], eps_keys[-1]
    top = max(fc)
    lo, hi = fc[0.0], fc[top]
    word = lambda ok, yes, no: yes if ok else no  # noqa: E731
    out = [f"- favoured group (higher clean accuracy at λ=0): **{fav}**."]
    out.append(f"- accuracy parity (test) λ=0 → λ={top:g}: {pct(lo['parity'])} → {pct(hi['parity'])} pts "
               f"({word(hi['parity'] < lo['parity'], 'smaller', 'NOT smaller')}).")
    out.append(f"- mean distance of the favoured group λ=0 → λ={top:g}: {lo[f'dist:{fav}']:.4f} → {hi[f'dist:{fav}']:.4f} "
               f"({word(hi[f'dist:{fav}'] < lo[f'dist:{fav}'], 'shrinks', 'does NOT shrink')}); "
               f"of the other group: {lo[f'dist:{other}']:.4f} → {hi[f'dist:{other}']:.4f}.")
    order = sorted(fc)
    mono = all(fc[a][f"dist:{fav}"] >= fc[b][f"dist:{fav}"] for a, b in zip(order, order[1:]))
    series = ", ".join(f"{fc[lam]['dist:' + fav]:.4f}" for lam in order)
    out.append(f"- favoured-group mean distance non-increasing in λ over {order}: {word(mono, 'yes', 'no')} ({series}).")
    for e in (e_mid, e_hi):
        out.append(f"- robust accuracy at ε={e}, λ=0 → λ={top:g}: favoured group {pct(lo[f'rob:{e}:{fav}'])} → "
                   f"{pct(hi[f'rob:{e}:{fav}'])}% ({word(hi[f'rob:{e}:{fav}'] < lo[f'rob:{e}:{fav}'], 'lower', 'NOT lower')}), "
                   f"other group {pct(lo[f'rob:{e}:{other}'])} → {pct(hi[f'rob:{e}:{other}'])}%, all samples "
                   f"{pct(lo[f'rob:{e}:all'])} → {pct(hi[f'rob:{e}:all'])}% "
                   f"({word(hi[f'rob:{e}:all'] < lo[f'rob:{e}:all'], 'lower', 'NOT lower')}); clean (all) "
                   f"{pct(lo['clean_all'])} → {pct(hi['clean_all'])}%.")
    if 1.0 in fa and 1.0 in fc:
        a, c = fa[1.0], fc[1.0]
        out.append(f"- fair-adversarial vs fair-constraint at λ=1: accuracy parity {pct(a['parity'])} vs {pct(c['parity'])} pts; "
                   f"robust accuracy (all) at ε={e_mid} {pct(a[f'rob:{e_mid}:all'])} vs {pct(c[f'rob:{e_mid}:all'])}%, at "
                   f"ε={e_hi} {pct(a[f'rob:{e_hi}:all'])} vs {pct(c[f'rob:{e_hi}:all'])}%; favoured-group mean distance "
                   f"{a[f'dist:{fav}']:.4f} vs {c[f'dist:{fav}']:.4f}.")
    if 0.0 in fa and 1.0 in fa:
        out.append(f"- fair-adversarial λ=0 (plain PGD-AT) vs λ=1: accuracy parity {pct(fa[0.0]['parity'])} vs "
                   f"{pct(fa[1.0]['parity'])} pts, robust accuracy (all) at ε={e_mid} {pct(fa[0.0][f'rob:{e_mid}:all'])} vs "
                   f"{pct(fa[1.0][f'rob:{e_mid}:all'])}%.")
    return "\n".join(out)


def make_problems(which: str, seed: int) -> list[dict]:
    problems = []
    if "synthetic" in which:
        problems.append({
            "key": "synthetic", "name": "two-group-gaussian", "title": "Synthetic two-group Gaussian (linear model)",
            "desc": ("Binary task in R^10 mapped to pixels 0.5 + 0.08 x; majority 80% (signal 0.6 on coordinates 1-5), "
                     "minority 20% (signal 0.6 on 6-10, 0.15 on 1-5), unit noise. 4000 train / 4000 test samples; "
                     "linear model (mlp with no hidden layer), Adam lr 0.05, 30 epochs, train/attack eps 0.02 (PGD-10 for "
                     "fair-adversarial). FGSM is the exact worst case for a binary linear model (box permitting), so "
                     "the robust accuracies are exact."),
            "train": synthetic(4000, seed), "test": synthetic(4000, seed + 1000), "hidden": [], "linear": True,
            "epochs": 30, "lr": 0.05, "train_eps": 0.02, "attack": "fgsm", "eps": [0.0, 0.01, 0.02, 0.03, 0.04],
            "eps_max": 0.2, "dist_how": "exact, |w·x+b|/||w||_1"})
    if "digits" in which:
        problems.append({
            "key": "digits", "name": "digits-parity", "title": "Digits, groups = even / odd digit (MLP)",
            "desc": ("scikit-learn digits (8x8), groups = even / odd digit; training keeps 20% of the odd digits "
                     "(test split untouched: 451 images); MLP 64 hidden units, Adam lr 0.01, 30 epochs, train eps 0.1 "
                     "(PGD-10 for fair-adversarial); evaluation PGD-10 sweep."),
            "train": digits_parity("train", 0.2, seed), "test": digits_parity("test", 1.0, seed),
            "hidden": [64], "linear": False, "epochs": 30, "lr": 0.01, "train_eps": 0.1, "attack": "pgd10",
            "eps": [0.0, 0.05, 0.1, 0.15, 0.2], "eps_max": 0.5, "dist_how": "bisection with PGD-10 up to 0.5, tol 0.5/64"})
    return problems


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/tran"))
    p.add_argument("--md", type=Path, default=None, help="write the Markdown tables here")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (data draw, training and attacks)")
    p.add_argument("--problems", default="synthetic,digits")
    args = p.parse_args(argv)
    tune_allocator()
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    seeds = [int(v) for v in args.seeds.split(",")]
    results: dict[str, list[dict]] = {}
    problems: list[dict] = []
    for seed in seeds:
        for prob in make_problems(args.problems, seed):
            if seed == seeds[0]:
                problems.append(prob)
            for method, lams in (("fair-constraint", LAMBDAS), ("fair-adversarial", [0.0, 1.0])):
                for lam in lams:
                    r = run_one(prob, method, lam, seed)
                    results.setdefault(prob["key"], []).append(r)
                    dists = ", ".join(f"{g}: {v['mean']:.4f}" for g, v in r["dist"].items())
                    print(f"[{prob['key']} seed {seed}] {label(r)}: clean {r['clean']} parity {pct(r['parity'])} "
                          f"mean dist {{{dists}}} ({r['seconds']} s)", file=sys.stderr, flush=True)
    total = time.perf_counter() - t_start
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    cmd = "OMP_NUM_THREADS=1 python studies/tran_fairness.py " + " ".join(argv if argv is not None else sys.argv[1:])
    md = ["## Fairness vs robustness (Tran et al.): issue 4 evidence", "",
          f"Command: `{cmd}` (seeds {seeds}; {total / 60:.1f} min wall on one CPU thread; torch {torch.__version__}). "
          f"The summary tables give the mean ± sd over the {len(seeds)} seeds (each seed draws its own synthetic data, "
          f"odd-digit subsample, initialization and attack starts); the detail tables show seed {seeds[0]} with "
          "Wilson 95% intervals.", ""]
    for prob in problems:
        md += [tables(prob, results[prob["key"]]), "What the numbers show (computed by the script):", "",
               verdict(prob, results[prob["key"]]), ""]
    text = "\n".join(md)
    if args.md is not None:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
