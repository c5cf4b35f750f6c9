"""The table of studies/autoattack-fair-cifar.sh: per class, robust accuracy under FGSM + PGD-20 (the
study's audit) and exactly under FGSM + PGD-20 + AutoAttack (``--probe all``), for each model; then the
worst class and the average with Wilson 95% intervals, and each method's worst class against TRADES's
(Newcombe's interval of the difference: the two worst classes' counts, taken as independent, which is
conservative for models audited on the same samples).

    python studies/autoattack_fair_table.py runs/autoattack-fair-cifar
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from robfair.metrics.stats import newcombe_interval, wilson


def load(path: Path) -> dict:
    d = json.loads(path.read_text())
    probe = d["probe"]
    if not probe["overall"].get("exact"):
        raise SystemExit(f"{path}: the probe did not cover every robust sample (run with --probe all)")
    per = dict(probe["per_group"])
    return {"per": per, "overall": probe["overall"], "seconds": probe["seconds"], "verdict": probe["verdict"],
            "meta": d["meta"]}


def pct(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{100 * k / n:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def main(folder: str) -> None:
    runs = {p.stem: load(p) for p in sorted(Path(folder).glob("*.json")) if not p.name.endswith(".rank0.json")}
    order = [m for m in ("trades", "frl", "faal") if m in runs] + [m for m in runs if m not in ("trades", "frl", "faal")]
    classes = list(runs[order[0]]["per"])
    print("| class | " + " | ".join(f"{m}: FGSM+PGD-20 | {m}: + AutoAttack" for m in order) + " |")
    print("|---|" + "---|---|" * len(order))
    for c in classes:
        cells = []
        for m in order:
            r = runs[m]["per"][c]
            cells += [f"{100 * r['robust_acc']:.1f}", f"{100 * r['corrected_robust_acc']:.1f}"]
        print(f"| {c} | " + " | ".join(cells) + " |")
    print()
    worst = {}
    for m in order:
        per = runs[m]["per"]
        name = min(per, key=lambda c: per[c]["corrected_robust_acc"])
        n = per[name]["n"]
        k = round(per[name]["corrected_robust_acc"] * n)
        worst[m] = (name, k, n)
        o = runs[m]["overall"]
        k_all, n_all = round(o["corrected_robust_acc"] * o["n"]), o["n"]
        audited = min(per.values(), key=lambda r: r["robust_acc"])
        print(f"- {m}: worst class {name} {pct(k, n)} with AutoAttack (FGSM+PGD-20 worst "
              f"{100 * audited['robust_acc']:.1f}); average {pct(k_all, n_all)} (FGSM+PGD-20 "
              f"{100 * o['robust_acc']:.1f}); probe {runs[m]['seconds']:.0f} s")
    if "trades" in worst:
        _, k0, n0 = worst["trades"]
        for m in order:
            if m == "trades":
                continue
            _, k1, n1 = worst[m]
            lo, hi = newcombe_interval(k0, n0, k1, n1)  # the interval of p1 - p0
            print(f"- worst class, {m} - trades: {100 * (k1 / n1 - k0 / n0):+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}]")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/autoattack-fair-cifar")
