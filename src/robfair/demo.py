"""``robfair demo``: standard training vs PGD-AT on the embedded digits data, audited class by class.

Everything here is the public machinery (``robfair.training.train`` and ``robfair.audit``) run on a
small problem; nothing is cached or pre-computed. Writes::

    <out>/st/  and  <out>/at/      run folders (config.yaml, checkpoints/{best,last}.pt, metrics.jsonl, audit.json)
    <out>/audit.json               both audits, keyed by run name (written last: a demo folder without it is unfinished)
    <out>/classwise.png            per-class clean / robust accuracy with 95% intervals
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .auditing import AuditReport
from .data import load_dataset
from .report.plots import classwise_bars
from .runfolder import AUDIT_FILE
from .safeio import ResultSet
from .training import ProgressCallback, TrainConfig, train
from .utils import write_json

DEMO_ATTACKS = ("fgsm", "pgd20")

#: (run name, label, method) of the demo's models.
DEMO_RUNS = (("st", "standard", "standard"), ("at", "pgd-at", "pgd-at"))
#: best.pt of each demo run: standard training (no attack) by clean validation accuracy, PGD-AT by robust
DEMO_SELECT = {"standard": "clean", "pgd-at": "avg+worst"}


@dataclass
class DemoResult:
    reports: dict[str, AuditReport]
    eps: float
    out: Path
    plot: Path
    attack_label: str = "worst case of " + " and ".join(DEMO_ATTACKS)
    summary_lines: list[str] = field(default_factory=list)
    seconds: float = 0.0


def demo_config(name: str, method: str, *, out: Path, eps: float, epochs: int, seed: int, device: str,
                probe: float | str | None = None, probe_tolerance: float | None = None):
    """The training config of one demo run (also written to its config.yaml, the probe of its audit included)."""
    return TrainConfig(
        data="digits", model="smallcnn", method=method, eps=eps, epochs=epochs, batch_size=64,
        optimizer="adam", lr=2e-3, weight_decay=0.0, schedule="cosine", val_per_class=0.1,
        val_attack="pgd10", select=DEMO_SELECT[method], seed=seed, device=device, out=str(out / name),
        probe=probe, probe_tolerance=probe_tolerance,
    )


def run_demo(out: str | Path = "runs/demo", *, eps: float = 0.1, epochs: int = 30, seed: int = 0,
             device: str = "auto", progress: Callable[[str, int, int], None] | None = None,
             probe: float | str | None = None, probe_tolerance: float | None = None) -> DemoResult:
    """Train ``standard`` and ``pgd-at`` small CNNs on digits, audit both on the test split with
    FGSM and PGD-20 at the training ``eps``, write the run folders, audit.json and the bar chart.
    ``probe``: the reliability probe's budget in both audits, as :func:`robfair.audit` takes it
    (a multiple of the audit's attacks' compute, default 1; ``"all"``: every robust sample through
    AutoAttack; 0: off); ``probe_tolerance`` a fraction (default 0.01, 1 point)."""
    t0 = time.perf_counter()
    out = Path(out)
    test = load_dataset("digits", split="test")

    reports: dict[str, AuditReport] = {}
    for name, label, method in DEMO_RUNS:
        cfg = demo_config(name, method, out=out, eps=eps, epochs=epochs, seed=seed, device=device, probe=probe,
                          probe_tolerance=probe_tolerance)
        result = train(cfg, callbacks=[ProgressCallback(progress, label=label)], final_audit=list(DEMO_ATTACKS),
                       test_data=test)
        rep = result.audit
        rep.meta["checkpoint"] = str(result.best_path)
        reports[label] = rep
    plot = out / "classwise.png"
    with ResultSet() as files:  # the figure, then the audits: a demo folder with its audit.json is whole
        with files.file(plot) as tmp:
            classwise_bars(reports, tmp, title=f"digits test set, L-inf eps={eps:g}, worst case of "
                                                f"{' and '.join(DEMO_ATTACKS)}")
        with files.file(out / AUDIT_FILE, last=True) as tmp:
            write_json(tmp, {"schema": "robfair.demo/1", "eps": eps,
                             "runs": {label: r.to_json() for label, r in reports.items()}})
    res = DemoResult(reports=reports, eps=eps, out=out, plot=plot, seconds=time.perf_counter() - t0)
    res.summary_lines = summarize(reports)
    return res


def summarize(reports: dict[str, AuditReport]) -> list[str]:
    """Plain sentences comparing the first (baseline) model with each other one, from measured numbers."""
    items = list(reports.items())
    base_label, base = items[0]
    b = base.main.aggregates()
    lines = []
    for label, r in items[1:]:
        a = r.main.aggregates()
        lines.append(
            f"{label} vs {base_label}: robust accuracy avg {100 * b['rob_acc']['avg']:.1f}% -> {100 * a['rob_acc']['avg']:.1f}%, "
            f"worst class ({a['rob_acc']['worst_group']}) {100 * a['rob_acc']['worst']:.1f}%; "
            f"class gap in robust accuracy {100 * b['rob_acc']['gap']:.1f} -> {100 * a['rob_acc']['gap']:.1f} points, "
            f"in clean accuracy {100 * b['clean_acc']['gap']:.1f} -> {100 * a['clean_acc']['gap']:.1f} points; "
            f"clean accuracy avg {100 * b['clean_acc']['avg']:.1f}% -> {100 * a['clean_acc']['avg']:.1f}%."
        )
    return lines
