"""Auditing: one evaluation engine and what is built on it.

    from robfair.audit import audit, AuditReport
    report = audit(model, dataset, attacks=["fgsm", "pgd20"], eps=8/255)      # robfair.audit(...) works too

Modules: :mod:`~robfair.audit.engine` (the one loop: per-sample :class:`Outcomes`),
:mod:`~robfair.audit.report` (``audit()``, :class:`AuditReport`), :mod:`~robfair.audit.eps_sweep`
(robust accuracy vs eps), :mod:`~robfair.audit.distances` (distance to the decision boundary),
:mod:`~robfair.audit.checks` (sanity checks), :mod:`~robfair.audit.probe` (the AutoAttack
reliability probe).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .checks import WORST_CASE, model_state, sanity_warnings
from .engine import OUTCOMES_FILE, Outcomes, attack_seed, check_model_output, evaluate, outcomes_path, run_attack
from .examples import EXAMPLES_FILE, Examples, examples_path
from .report import SCHEMA, AuditReport, audit

# kept for callers of the former module robfair.audit
_check_model_output = check_model_output

__all__ = ["AuditReport", "EXAMPLES_FILE", "Examples", "OUTCOMES_FILE", "Outcomes", "SCHEMA", "WORST_CASE", "attack_seed", "audit",
           "check_model_output", "evaluate", "examples_path", "model_state", "outcomes_path", "run_attack", "sanity_warnings"]


class _CallableModule(types.ModuleType):
    """``robfair.audit`` is both this package and the function: importing the package makes the
    attribute of ``robfair`` the module, so the module itself forwards calls to :func:`audit`."""

    def __call__(self, *args: Any, **kwargs: Any) -> AuditReport:
        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
