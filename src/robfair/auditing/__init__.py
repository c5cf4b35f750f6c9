"""Auditing: one evaluation engine and what is built on it.

    from robfair.auditing import audit, AuditReport
    report = audit(model, dataset, attacks=["fgsm", "pgd20"], eps=8/255)      # robfair.audit(...) too

Modules: :mod:`~robfair.auditing.engine` (the one loop), :mod:`~robfair.auditing.outcomes` (its per-sample
:class:`Outcomes` and their files), :mod:`~robfair.auditing.inputs` (what ``audit()`` does with its inputs),
:mod:`~robfair.auditing.audit_report` (``audit()``, :class:`AuditReport`), :mod:`~robfair.auditing.eps_sweep`
(robust accuracy vs eps), :mod:`~robfair.auditing.distances` (distance to the decision boundary),
:mod:`~robfair.auditing.checks` (sanity checks), :mod:`~robfair.auditing.probe` (the AutoAttack
reliability probe), :mod:`~robfair.auditing.examples` (the weakest class's example images).

``robfair.audit`` (the attribute of the top-level package) is the function
:func:`robfair.auditing.audit_report.audit`; this package is only ever ``robfair.auditing``, so every
form of import works: ``from robfair.auditing import audit, evaluate``, ``from robfair.auditing import
engine``, ``import robfair.auditing.engine as E``. No submodule is named like an export.
"""

from __future__ import annotations

import importlib
from typing import Any

# lazy: start-up time (the exports below need torch; the CLI imports this package for its names,
# and ``robfair --help`` must not import torch)
_EXPORTS = {
    "AuditReport": "audit_report", "SCHEMA": "audit_report", "audit": "audit_report",
    "OUTCOMES_FILE": "outcomes", "Outcomes": "outcomes", "outcomes_path": "outcomes",
    "attack_seed": "engine", "check_model_output": "engine", "evaluate": "engine", "run_attack": "engine",
    "validate_model": "engine",
    "WORST_CASE": "checks", "model_state": "checks", "sanity_warnings": "checks",
    "EXAMPLES_FILE": "examples", "Examples": "examples", "examples_path": "examples",
}
_ALIASES = {"_check_model_output": ("engine", "check_model_output")}  # kept for callers of the former module

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # PEP 562
    if name in _EXPORTS or name in _ALIASES:
        module, attr = _ALIASES.get(name, (_EXPORTS.get(name), name))
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
