"""Issue-10 evidence: TRADES vs FRL-RWRM (paper, official), CFA (eq. 8), WAT (official cost), DAFA, FAAL, BAT,
three seeds.

Per seed: TRADES from scratch for ``--epochs``; FRL-RWRM (mode paper and mode official) and FAAL fine-tune
that TRADES run's best.pt (``--init``, which also fixes their validation split) for ``--ft-epochs`` /
``--faal-epochs``; CFA, WAT, DAFA and BAT train from scratch for ``--epochs``. Test audit: PGD-20 on
``--test-per-class`` images per class. Table: mean +- sd over seeds of average and worst-class robust
accuracy, the pooled bootstrap interval of the worst-class robust accuracy (the seeds' test reports merged
with ``GroupReport.merge_all``, then ``GroupReport.bootstrap``: every class holds seeds x test images
outcomes), and the paired difference to TRADES (same seed) with a t statistic.

Results are written to ``OUT/results.json`` after every run and a rerun with the same ``--out`` skips the
runs already there (a killed study resumes; a partial one is reportable with ``--report-only``).

The CPU size of ``docs/results-methods.md`` (smallcnn width 8, 400/class, 12 epochs, Adam + cosine); ``--md``
replaces only the text between the script's markers in that file::

    OMP_NUM_THREADS=1 python studies/methods_issue10.py --preset cpu --out runs/issue10-cpu --md docs/results-methods.md

The reduced size of ``docs/results-methods-issue10.md`` (the defaults: mlp, 200/class, 8 epochs, SGD)::

    OMP_NUM_THREADS=1 nice -n 19 python studies/methods_issue10.py --per-class 200 --epochs 8 \\
        --test-per-class 100 --out runs/issue10 --md docs/results-methods-issue10.md
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import t as student_t

from robfair.auditing import audit
from robfair.data import load_dataset, stratified_split
from robfair.metrics.groups import GroupReport
from robfair.models.checkpoint import load_checkpoint
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
#: --preset cpu: the CPU size of docs/results-methods.md (studies/methods_cpu.py's recipe)
PRESETS = {"cpu": dict(model="smallcnn", width=8, per_class=400, val_per_class=50, test_per_class=300, epochs=12,
                       optimizer="adam", lr=2e-3, ft_lr=1e-3, schedule="cosine", weight_decay=0.0,
                       val_attack="pgd20")}


def slug(label: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in label.lower()).strip("-")


def cfg_for(args, method, opts, seed, out, epochs, init=None, lr=None):
    sched = {"schedule": "cosine"} if args.schedule == "cosine" else {"milestones": [0.75]}
    kw = {"model_kwargs": {"width": args.width}} if args.width else {}
    return TrainConfig(data=args.data, model=args.model, method=method, method_options=opts, eps=args.eps,
                       epochs=epochs, batch_size=128, optimizer=args.optimizer, lr=lr or args.lr,
                       weight_decay=args.weight_decay, val_per_class=args.val_per_class, val_attack=args.val_attack,
                       select="avg+worst", seed=seed, device="cpu", init=init, out=str(out), **sched, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--md", type=Path, default=None, help="write the Markdown section here")
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None, help="set the size flags below at once")
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--eps", type=float, default=0.1)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default=",".join(METHODS), help="labels to run (comma-separated)")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--width", type=int, default=None, help="model_kwargs width (smallcnn)")
    ap.add_argument("--per-class", type=int, default=150, help="training images per class (incl. validation)")
    ap.add_argument("--val-per-class", type=int, default=30)
    ap.add_argument("--test-per-class", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--ft-epochs", type=int, default=3)
    ap.add_argument("--faal-epochs", type=int, default=2)
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--schedule", choices=["step", "cosine"], default="step", help="step: lr /10 at 75%%")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--ft-lr", type=float, default=0.01)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--val-attack", default="pgd10")
    ap.add_argument("--probe", default="0",
                    help="audit reliability probe budget: AutoAttack on the samples PGD-20 left robust, within B "
                         "times PGD-20's compute ('all': every robust sample); 0 (default): PGD-20 only")
    ap.add_argument("--reaudit-from", type=Path, default=None,
                    help="audit the best.pt of that --out's runs again on this call's --test-per-class, train nothing")
    ap.add_argument("--report-only", action="store_true", help="write --md from OUT/results.json, train nothing")
    args = ap.parse_args()
    if args.preset:
        given = {a.split("=")[0][2:].replace("-", "_") for a in sys.argv[1:] if a.startswith("--")}
        for k, v in PRESETS[args.preset].items():
            if k not in given:  # an explicit flag wins over the preset
                setattr(args, k, v)
    labels = [m.strip() for m in args.methods.split(",")]
    unknown = [m for m in labels if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method label(s) {unknown}; choose from {list(METHODS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "results.json"
    saved = json.loads(store.read_text()) if store.exists() else {}
    results: dict[str, list[dict]] = {k: list(saved.get("results", {}).get(k, [])) for k in METHODS}
    if args.reaudit_from is not None:  # the trained runs of another --out, audited again on this test set
        src = json.loads((args.reaudit_from / "results.json").read_text())
        for k, v in src["args"].items():
            if k not in ("out", "md", "report_only", "preset", "test_per_class", "reaudit_from", "reaudited", "probe"):
                setattr(args, k, v)
        saved.setdefault("seconds", src["seconds"])  # the training time of the runs
        saved.setdefault("cpu_seconds", src["cpu_seconds"])
    args.reaudited = args.reaudit_from
    if args.report_only:  # describe the runs as they were measured, whatever flags this call got
        for k, v in saved.get("args", {}).items():
            if k not in ("out", "md", "report_only", "preset", "reaudit_from", "reaudited"):
                setattr(args, k, v)
        args.reaudited = saved.get("args", {}).get("reaudit_from")
    spent = float(saved.get("seconds", 0.0))
    cpu_spent = float(saved.get("cpu_seconds", 0.0))
    full, test_full = load_dataset(args.data, "train"), load_dataset(args.data, "test")
    _, te_idx = stratified_split(test_full.y, args.test_per_class, 0)
    test = test_full.subset(te_idx)

    def save(extra_seconds: float = 0.0, extra_cpu: float = 0.0) -> None:
        nonlocal spent, cpu_spent
        spent, cpu_spent = spent + extra_seconds, cpu_spent + extra_cpu
        store.write_text(json.dumps({"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                                     "seconds": spent, "cpu_seconds": cpu_spent, "results": results}, indent=1))

    if args.reaudit_from is not None:
        reaudit(args, results, test, save)
    for seed in seeds if not (args.report_only or args.reaudit_from) else []:
        _, tr_idx = stratified_split(full.y, args.per_class, 100 + seed)
        data = full.subset(tr_idx)
        init = str(args.out / f"seed{seed}" / slug("TRADES") / "checkpoints" / "best.pt")
        for label in labels:
            method, opts, ft = METHODS[label]
            if any(r["seed"] == seed for r in results[label]):
                continue  # measured by an earlier invocation with this --out
            out = args.out / f"seed{seed}" / slug(label)
            if out.exists():
                shutil.rmtree(out)  # a run killed half-way: start it again
            if ft:
                if not Path(init).exists():
                    raise SystemExit(f"{label} fine-tunes seed {seed}'s TRADES run; run TRADES first ({init})")
                epochs = args.faal_epochs if method == "faal" else args.ft_epochs
                cfg = cfg_for(args, method, opts, seed, out, epochs, init=init, lr=args.ft_lr)
            else:
                cfg = cfg_for(args, method, opts, seed, out, args.epochs)
            t0, c0 = time.perf_counter(), time.process_time()
            res = train(cfg, train_data=data)
            t1 = time.perf_counter()
            rep = audit(res.best_model, test, attacks=["pgd20"], eps=args.eps, seed=seed, device="cpu",
                        probe=args.probe).main
            agg = rep.aggregates()
            now, cnow = time.perf_counter(), time.process_time()
            results[label].append({"seed": seed, "rob_avg": agg["rob_acc"]["avg"], "rob_worst": agg["rob_acc"]["worst"],
                                   "clean_avg": agg["clean_acc"]["avg"], "clean_worst": agg["clean_acc"]["worst"],
                                   "worst_class": agg["rob_acc"]["worst_group"], "epochs": epochs if ft else args.epochs,
                                   "train_seconds": t1 - t0, "audit_seconds": now - t1, "cpu_seconds": cnow - c0,
                                   "report": rep.to_json()})
            save(now - t0, cnow - c0)
            print(label, seed, json.dumps({k: v for k, v in results[label][-1].items() if k != "report"}), flush=True)
    if args.md:
        write_section(args.md, markdown(args, results, spent, cpu_spent, len(test)))


def reaudit(args, results: dict[str, list[dict]], test, save) -> None:
    """Audit every run of ``--reaudit-from`` again (its best.pt, PGD-20) on this call's test set; the
    training records (seconds, epochs) are kept, the test outcomes and audit seconds replaced."""
    src = json.loads((args.reaudit_from / "results.json").read_text())["results"]
    for label, runs in src.items():
        for r in runs:
            if any(q["seed"] == r["seed"] for q in results[label]):
                continue
            ckpt = args.reaudit_from / f"seed{r['seed']}" / slug(label) / "checkpoints" / "best.pt"
            model, _ = load_checkpoint(ckpt)
            t0, c0 = time.perf_counter(), time.process_time()
            rep = audit(model.eval(), test, attacks=["pgd20"], eps=args.eps, seed=r["seed"], device="cpu",
                        probe=args.probe).main
            agg = rep.aggregates()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            results[label].append(r | {"rob_avg": agg["rob_acc"]["avg"], "rob_worst": agg["rob_acc"]["worst"],
                                       "clean_avg": agg["clean_acc"]["avg"], "clean_worst": agg["clean_acc"]["worst"],
                                       "worst_class": agg["rob_acc"]["worst_group"], "audit_seconds": dt,
                                       "cpu_seconds": r["cpu_seconds"] + dc, "reaudit_of": str(ckpt),
                                       "report": rep.to_json()})
            save(dt - r["audit_seconds"], dc)
            print("re-audit", label, r["seed"], json.dumps({k: v for k, v in results[label][-1].items()
                                                            if k != "report"}), flush=True)


START, END = "<!-- methods_issue10.py: start -->", "<!-- methods_issue10.py: end -->"


def write_section(path: Path, text: str) -> None:
    """Replace the text between the START and END markers of ``path`` (the hand-written rest of the
    document stays); a file without the markers is written whole."""
    old = path.read_text() if path.exists() else ""
    if START in old and END in old:
        head, rest = old.split(START, 1)
        path.write_text(head + START + "\n" + text + END + rest.split(END, 1)[1])
    else:
        path.write_text(START + "\n" + text + END + "\n")


def pooled(runs: list[dict], n_boot: int = 2000) -> dict:
    """The seeds' test reports merged (every class: seeds x test images outcomes), its worst-class robust
    accuracy and the stratified bootstrap interval of it (``GroupReport.bootstrap``)."""
    merged = GroupReport.merge_all([GroupReport.from_json(r["report"]) for r in runs])
    return merged.bootstrap(n=n_boot, seed=0)["metrics"]["rob_acc"]["worst"]


def markdown(args, results, wall, cpu, n_test) -> str:
    p = lambda v: f"{100 * v:.1f}"  # noqa: E731
    base = {r["seed"]: r for r in results["TRADES"]}
    seeds = sorted({r["seed"] for runs in results.values() for r in runs})
    model = f"{args.model} (width {args.width})" if args.width else args.model
    sched = "cosine" if args.schedule == "cosine" else "lr /10 at 75%"
    lines = [
        f"### Fair robust training methods, {len(seeds)} seeds (issue 10, part 6): {args.data}, {model}, "
        f"{args.per_class}/class, {args.epochs} epochs",
        "",
        f"Measured by `studies/methods_issue10.py`: {args.data}, {args.per_class} training images per class "
        f"({args.val_per_class} of them the validation split), model {model}, L-inf eps {args.eps:g}, seeds "
        f"{','.join(map(str, seeds))} (the training subset and every random start depend on the seed). Scratch "
        f"methods: {args.epochs} epochs, {args.optimizer} lr {args.lr:g}, {sched}, weight decay "
        f"{args.weight_decay:g}, batch 128. FRL-RWRM (paper / official modes) and FAAL (base trades) fine-tune "
        f"the same seed's TRADES best.pt for {args.ft_epochs} / {args.faal_epochs} epochs at lr {args.ft_lr:g} "
        "(reusing its validation split), so they get that much more training than the others. best.pt by "
        f"validation avg + worst-class robust accuracy ({args.val_attack}). Test: PGD-20 on {n_test} test images "
        f"({args.test_per_class} per class), the same images for every run. Percent. Total {wall / 60:.1f} min wall, "
        f"{cpu / 60:.1f} min CPU (training + test audits, `OMP_NUM_THREADS=1`, one process, on a shared 2-core "
        "AVX2 machine without native bf16; float32).",
        "",
        *([f"The test outcomes are a second audit of the trained runs' best.pt on this test set "
           f"(`--reaudit-from {args.reaudited}`; the same checkpoints, nothing retrained).", ""]
          if args.reaudited else []),
        "Worst-class robust: mean +- sd over seeds of each run's worst class. Pooled: the seeds' test reports "
        "merged (`GroupReport.merge_all`: every class then holds seeds x test images outcomes), its worst-class "
        "robust accuracy and the 95% stratified bootstrap interval (`GroupReport.bootstrap`, 2000 replicates). "
        "Paired diff: worst-class robust accuracy minus TRADES' at the same seed, mean +- sd over seeds, "
        "t = mean / (sd / sqrt(seeds)); the seed-noise criterion: |t| above the two-sided 95% t quantile with "
        "seeds - 1 degrees of freedom (4.30 for 3 seeds). Avg robust cost: average robust accuracy minus TRADES' at the same seed.",
        "",
        "| method | seeds | clean avg | robust avg (mean +- sd) | worst-class robust (mean +- sd) | pooled worst "
        "[95% CI] | paired diff vs TRADES | t | beyond seed noise | avg robust cost vs TRADES |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    sd_ = lambda a: float(a.std(ddof=1)) if len(a) > 1 else float("nan")  # noqa: E731
    for label, runs in results.items():
        if not runs:
            continue
        ra = np.array([r["rob_avg"] for r in runs])
        rw = np.array([r["rob_worst"] for r in runs])
        ca = np.array([r["clean_avg"] for r in runs])
        pw = pooled(runs)
        if label == "TRADES":
            diff_txt, t_txt, cost, noise = "-", "-", "-", "-"
        else:
            paired = [r for r in runs if r["seed"] in base]
            d = np.array([r["rob_worst"] - base[r["seed"]]["rob_worst"] for r in paired])
            c = np.array([r["rob_avg"] - base[r["seed"]]["rob_avg"] for r in paired])
            if len(d) < 2:
                diff_txt, t_txt, noise = (f"{p(d.mean())}" if len(d) else "-"), "-", "needs 2+ seeds"
                cost = f"{p(c.mean())}" if len(c) else "-"
            else:
                sd = sd_(d)
                t = d.mean() / (sd / math.sqrt(len(d))) if sd > 0 else (0.0 if d.mean() == 0 else math.copysign(math.inf, d.mean()))
                crit = float(student_t.ppf(0.975, len(d) - 1))
                diff_txt, t_txt, cost = f"{p(d.mean())} +- {p(sd)}", f"{t:.2f}", f"{p(c.mean())} +- {p(sd_(c))}"
                if t > crit:
                    noise = "**yes, better**"
                    verdicts.append(f"- **{label} beats TRADES** on worst-class robust accuracy beyond the seed noise: "
                                    f"{p(d.mean())} +- {p(sd)} points (t = {t:.2f}), at an average robust accuracy "
                                    f"change of {p(c.mean())} +- {p(sd_(c))} points.")
                elif t < -crit:
                    noise = "**yes, worse**"
                    verdicts.append(f"- {label} is *worse* than TRADES on worst-class robust accuracy beyond the seed "
                                    f"noise: {p(d.mean())} +- {p(sd)} points (t = {t:.2f}); average robust change "
                                    f"{p(c.mean())} points.")
                else:
                    noise = "no"
        lines.append(f"| {label} | {len(runs)} | {p(ca.mean())} | {p(ra.mean())} +- {p(sd_(ra))} | "
                     f"{p(rw.mean())} +- {p(sd_(rw))} | {p(pw['plug_in'])} [{p(pw['lo'])}, {p(pw['hi'])}] | "
                     f"{diff_txt} | {t_txt} | {noise} | {cost} |")
    lines += ["", "Per seed: robust avg / worst-class robust (worst class), clean avg; train + audit minutes:", "",
              "| method | " + " | ".join(f"seed {s}" for s in seeds) + " | minutes (wall / CPU, all seeds) |",
              "|---|" + "---|" * len(seeds) + "---|"]
    for label, runs in results.items():
        if not runs:
            continue
        by = {r["seed"]: r for r in runs}
        cells = [f"{p(by[s]['rob_avg'])} / {p(by[s]['rob_worst'])} ({by[s]['worst_class']}), {p(by[s]['clean_avg'])}"
                 if s in by else "not run" for s in seeds]
        w = sum(r["train_seconds"] + r["audit_seconds"] for r in runs) / 60
        c = sum(r["cpu_seconds"] for r in runs) / 60
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {w:.1f} / {c:.1f} |")
    ran = [label for label, runs in results.items() if runs]
    merged = {label: GroupReport.merge_all([GroupReport.from_json(r["report"]) for r in results[label]]) for label in ran}
    if merged:
        first = merged[ran[0]]
        lines += ["", "Per class, pooled over the seeds: robust accuracy (PGD-20), percent:", "",
                  "| class | " + " | ".join(ran) + " |", "|---|" + "---|" * len(ran)]
        for c in first.class_names:
            lines.append(f"| {c} | " + " | ".join(p(merged[label].by_class.loc[c, "rob_acc"]) for label in ran) + " |")
    lines += ["", "**Verdict (measured at this size only).**", ""]
    lines += verdicts or ["- No method beats TRADES on worst-class robust accuracy beyond the seed noise "
                          "(no paired t above the 95% t quantile of its seed count)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
