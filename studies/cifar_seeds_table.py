"""Per-seed worst class and gap with their bootstrap intervals, and the probe's AutoAttack-corrected average,
for the 3-seed CIFAR-10 studies (docs/results-cifar.md, "3 seeds"):

    python studies/cifar_seeds_table.py runs/benz-pair-cifar-seeds runs/fair-methods-cifar-seeds

Reads each run's audit.json + outcomes.npz (robfair.auditing.AuditReport); the stratified bootstrap is
GroupReport.bootstrap (1000 resamples, seed 0) of the worst case over the audit's attacks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import mean, stdev

from robfair.auditing import AuditReport


def pct(v: float) -> str:
    return f"{100 * v:.1f}"


def main(folders: list[str]) -> None:
    print("| study | setting | seed | clean worst [95%] | clean gap [95%] | robust avg | robust worst [95%] | "
          "robust gap [95%] | worst class | probe-corrected robust avg [upper] | probe flags |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    agg: dict[tuple[str, str], dict[str, list[float]]] = {}
    for folder in folders:
        for run in sorted(Path(folder).iterdir()):
            if not (run / "audit.json").is_file():
                continue
            setting, seed = run.name.rsplit(",seed=", 1)
            rep = AuditReport.load(run)
            b = rep.main.bootstrap(n=1000, seed=0)["metrics"]
            by = rep.main.by_group
            worst = by["rob_acc"].idxmin()
            ov = (rep.probe or {}).get("overall") or {}
            cells = []
            for m, s in (("clean_acc", "worst"), ("clean_acc", "gap"), ("rob_acc", "avg"), ("rob_acc", "worst"), ("rob_acc", "gap")):
                d = b[m][s]
                cells.append(pct(d["plug_in"]) if (m, s) == ("rob_acc", "avg") else f"{pct(d['plug_in'])} [{pct(d['lo'])}, {pct(d['hi'])}]")
                agg.setdefault((Path(folder).name, setting), {}).setdefault(f"{m} {s}", []).append(d["plug_in"])
            corr = f"{pct(ov['corrected_robust_acc'])} [{pct(ov['corrected_hi'])}]" if ov.get("corrected_robust_acc") is not None else "-"
            flags = ", ".join((rep.probe or {}).get("flagged_groups") or []) or "none"
            print(f"| {Path(folder).name} | {setting} | {seed} | " + " | ".join(cells) + f" | {worst} | {corr} | {flags} |")
    print()
    print("| study | setting | clean worst | clean gap | robust avg | robust worst | robust gap |")
    print("|---|---|---|---|---|---|---|")
    for (study, setting), d in agg.items():
        ms = [f"{100 * mean(v):.1f} ± {100 * stdev(v):.1f}" for v in d.values()]
        print(f"| {study} | {setting} | " + " | ".join(ms) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
