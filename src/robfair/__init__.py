"""robfair: find, explain and fix unequal adversarial robustness.

    import robfair
    report = robfair.audit(model, robfair.load_dataset("digits"), attacks=["pgd20"], eps=0.1)
    report.to_frame()          # per-class table
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "audit": ("robfair.audit", "audit"),
    "AuditReport": ("robfair.audit", "AuditReport"),
    "certify": ("robfair.certify", "certify"),
    "CertifyReport": ("robfair.certify", "CertifyReport"),
    "GroupReport": ("robfair.metrics", "GroupReport"),
    "Dataset": ("robfair.data", "Dataset"),
    "load_dataset": ("robfair.data", "load_dataset"),
    "create_model": ("robfair.models", "create"),
    "save_checkpoint": ("robfair.models", "save_checkpoint"),
    "load_checkpoint": ("robfair.models", "load_checkpoint"),
    "get_attack": ("robfair.attacks", "get_attack"),
    "RobfairError": ("robfair.errors", "RobfairError"),
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:  # PEP 562: import submodules only when used
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'robfair' has no attribute {name!r}")
