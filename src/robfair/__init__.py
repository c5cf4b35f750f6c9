"""robfair: find, explain and fix unequal adversarial robustness.

    import robfair
    report = robfair.audit(model, robfair.load_dataset("digits"), attacks=["pgd20"], eps=0.1)
    report.to_frame()          # per-class table

``robfair.audit`` is the function (:func:`robfair.auditing.audit_report.audit`); the package of the evaluation
engine behind it is :mod:`robfair.auditing`. Every name here is resolved on first use (``robfair --help``
imports no torch).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "audit": ("robfair.auditing.audit_report", "audit"),
    "AuditReport": ("robfair.auditing.audit_report", "AuditReport"),
    "certify": ("robfair.certifying.run", "certify"),
    "CertifyReport": ("robfair.certifying.certify_report", "CertifyReport"),
    "GroupReport": ("robfair.metrics", "GroupReport"),
    "Dataset": ("robfair.data", "Dataset"),
    "load_dataset": ("robfair.data", "load_dataset"),
    "create_model": ("robfair.models", "create"),
    "save_checkpoint": ("robfair.models", "save_checkpoint"),
    "load_checkpoint": ("robfair.models", "load_checkpoint"),
    "get_attack": ("robfair.attacks", "get_attack"),
    "RobfairError": ("robfair.errors", "RobfairError"),
    "fix": ("robfair.experiments.fix", "fix"),
    "train": ("robfair.training", "train"),
    "TrainConfig": ("robfair.training", "TrainConfig"),
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:  # PEP 562, lazy: start-up time (``robfair --help`` imports no torch)
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'robfair' has no attribute {name!r}")
