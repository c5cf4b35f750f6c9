"""robfair: find, explain and fix unequal adversarial robustness.

    import robfair
    report = robfair.audit(model, robfair.load_dataset("digits"), attacks=["pgd20"], eps=0.1)
    report.to_frame()          # per-class table
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# ``robfair.audit`` is the function robfair.audit.report.audit (a plain function, as users call it),
# and ``robfair/audit/`` the package of the evaluation engine. Importing a package sets its name on
# the parent *after* the package has run, so the binding is made here: the package is imported
# (it is light: its exports are lazy), then the name is removed so that ``__getattr__`` below
# returns the function. Submodules stay importable by name (``from robfair.audit import engine``,
# ``from robfair.audit.engine import evaluate``); ``import robfair.audit.engine as E`` does not work.
from . import audit as _audit_package  # noqa: E402,F401  (binds robfair.audit to the package first)

del audit  # noqa: F821  (now robfair.audit resolves through __getattr__ to the function)

_LAZY = {
    "audit": ("robfair.audit.report", "audit"),
    "AuditReport": ("robfair.audit.report", "AuditReport"),
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
