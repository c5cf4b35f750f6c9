"""Auditing: one evaluation engine and what is built on it.

    from robfair.audit import audit, AuditReport
    report = audit(model, dataset, attacks=["fgsm", "pgd20"], eps=8/255)      # robfair.audit(...) too

Modules: :mod:`~robfair.audit.engine` (the one loop: per-sample :class:`Outcomes`),
:mod:`~robfair.audit.report` (``audit()``, :class:`AuditReport`), :mod:`~robfair.audit.eps_sweep`
(robust accuracy vs eps), :mod:`~robfair.audit.distances` (distance to the decision boundary),
:mod:`~robfair.audit.checks` (sanity checks), :mod:`~robfair.audit.probe` (the AutoAttack
reliability probe), :mod:`~robfair.audit.examples` (the weakest class's example images).

``robfair.audit`` (the attribute of the top-level package) is the function
:func:`robfair.audit.report.audit`, not this package: ``robfair/__init__.py`` binds it (see
docs/architecture.md, "robfair.audit"). Import from the package by name:
``from robfair.audit import audit, evaluate`` and ``from robfair.audit import engine`` work;
``import robfair.audit.engine as E`` and ``robfair.audit.engine`` do not (the attribute is the function).
"""

from __future__ import annotations

import importlib
from typing import Any

# lazy: start-up time (``import robfair`` imports this package to bind ``robfair.audit``; the
# exports below need torch, which ``robfair --help`` must not import)
_EXPORTS = {
    "AuditReport": "report", "SCHEMA": "report", "audit": "report",
    "OUTCOMES_FILE": "engine", "Outcomes": "engine", "attack_seed": "engine", "check_model_output": "engine",
    "evaluate": "engine", "outcomes_path": "engine", "run_attack": "engine", "validate_model": "engine",
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
