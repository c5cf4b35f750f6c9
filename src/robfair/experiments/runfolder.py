"""The files of a run folder besides the trainer's: attempts log, eps sweep, completeness checks.

    RUN_DIR/run.yaml         the run spec (robfair.experiments.config.RunSpec)
           /attempts.jsonl   one line per attempt event (start / done / failed / interrupted / adopt)
           /eps_sweep.json   audits at several radii (when the study asks for them)
           /worker.log       the worker's log (local backend)
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..errors import RobfairError
from ..utils import atomic_path
from .config import RunSpec
from .store import hostname

log = logging.getLogger(__name__)

ATTEMPTS_FILE = "attempts.jsonl"
EPS_SWEEP_FILE = "eps_sweep.json"

def log_attempt(run_dir: Path, event: str, **detail: Any) -> None:
    """Append one line to ``attempts.jsonl`` (start / done / failed / interrupted / adopt)."""
    rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "event": event, "pid": os.getpid(), "host": hostname(), **detail}
    with open(run_dir / ATTEMPTS_FILE, "a") as f:
        f.write(json.dumps(rec, default=str) + "\n")


def repair_metrics(run_dir: Path) -> int:
    """Drop unreadable lines of ``metrics.jsonl`` (a process killed mid-write); return the epochs kept."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0
    good = []
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            log.warning("dropping a half-written line of %s", path)
            continue
        if isinstance(rec, dict) and "epoch" in rec:
            good.append(json.dumps(rec))
        else:
            log.warning("dropping a line of %s that is not an epoch record", path)
    with atomic_path(path) as tmp:
        tmp.write_text("".join(s + "\n" for s in good))
    return len(good)



def read_audit(path: Path) -> Any:
    """An AuditReport from ``audit.json`` (with the per-sample outcomes of ``outcomes.npz`` beside it,
    when present); RobfairError when missing, truncated or not an audit."""
    from ..audit import AuditReport

    return AuditReport.load(path)


def read_eps_sweep(path: Path) -> list[Any] | None:
    """One AuditReport per radius of ``eps_sweep.json`` (an :class:`~robfair.audit.eps_sweep.EpsSweep`;
    None when absent); RobfairError when broken."""
    from ..audit.eps_sweep import EpsSweep

    if not path.exists():
        return None
    from ..safeio import read_json

    try:
        sweep = EpsSweep.from_json(read_json(path, "eps sweep"))
        for a, e in zip(sweep.audits, sweep.eps):
            a.meta.setdefault("eps", e)
        return sweep.audits
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, RobfairError):
        raise RobfairError(f"{path} is truncated or not an eps sweep") from None


def incomplete_reason(run_dir: Path, spec: RunSpec | None = None) -> str | None:
    """Why ``run_dir`` is not a finished run (None when it is): no checkpoint, no or broken audit.json."""
    ck = run_dir / "checkpoints"
    if not (ck / "best.pt").exists() and not (ck / "last.pt").exists():
        return "it has no checkpoints"
    try:
        read_audit(run_dir / "audit.json")
    except RobfairError as e:
        return str(e).replace(str(run_dir / "audit.json"), "audit.json")
    if spec is not None and spec.audit.get("eps_sweep"):
        try:
            if read_eps_sweep(run_dir / EPS_SWEEP_FILE) is None:
                return f"{EPS_SWEEP_FILE} is missing"
        except RobfairError as e:
            return str(e)
    return None


