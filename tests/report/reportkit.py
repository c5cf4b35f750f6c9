"""Hand-built audits and run folders with known counts (no training); imported by the report tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from robfair.auditing import AuditReport
from robfair.metrics import GroupReport
from robfair.report.tables import RunEntry
from robfair.utils import write_json


def group_report(cells, classes, eps=0.1, attack="pgd20"):
    """cells: per class (n, clean correct, robust correct) -> a GroupReport with exactly those counts;
    every mistake is predicted as the next class."""
    k = len(cells)
    ys, cs, advs = [], [], []
    for i, (n, c, r) in enumerate(cells):
        ys.append(np.full(n, i))
        cs.append(np.where(np.arange(n) < c, i, (i + 1) % k))
        advs.append(np.where(np.arange(n) < r, i, (i + 1) % k))
    return GroupReport.from_outcomes(y=np.concatenate(ys), clean_pred=np.concatenate(cs),
                                     adv_pred=np.concatenate(advs), class_names=classes, attack=attack, eps=eps)


def audit_report(cells, classes, warnings=(), eps=0.1):
    rep = group_report(cells, classes, eps=eps)
    return AuditReport({"pgd20": rep}, warnings=list(warnings),
                       meta={"attacks": ["pgd20"], "eps": eps, "n": rep.n, "classes": list(classes)})


def entry(name, cells, classes, *, group=None, seed=0, method="pgd-at", warnings=(), eps_sweep=None):
    return RunEntry(name=name, group=group or name, seed=seed, audit=audit_report(cells, classes, warnings),
                    config={"data": "toy", "model": "mlp", "method": method, "seed": seed}, eps_sweep=eps_sweep)


def write_run(folder: Path, audit: AuditReport, config: dict | None = None) -> Path:
    """A trainer-style run folder: config.yaml, checkpoints/best.pt (placeholder), audit.json."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config or {"data": "toy", "method": "pgd-at", "seed": 0}))
    (folder / "checkpoints" / "best.pt").write_bytes(b"placeholder")
    write_json(folder / "audit.json", audit.to_json())
    return folder
