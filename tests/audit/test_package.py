"""``robfair.audit`` is plainly the function and ``robfair.auditing`` plainly the package (issue 24): every
form of import works, whatever is imported first."""

from __future__ import annotations

import subprocess
import sys

import pytest

FIRST = {
    "import robfair": "import robfair",
    "from robfair.auditing import engine": "from robfair.auditing import engine",
    "from robfair.auditing.engine import evaluate": "from robfair.auditing.engine import evaluate",
    "import robfair.auditing.distances": "import robfair.auditing.distances",
    "from robfair.auditing import audit": "from robfair.auditing import audit",
    "import robfair.auditing.engine as E": "import robfair.auditing.engine as E",
}

CHECK = """
import inspect, sys
import robfair
from robfair.auditing import audit, evaluate, AuditReport, engine, eps_sweep
from robfair.auditing.audit_report import audit as report_audit
from robfair.auditing.distances import boundary_distances
from robfair import audit as top
assert inspect.isfunction(robfair.audit), type(robfair.audit)
assert robfair.audit is audit is report_audit is top
assert sys.modules["robfair.auditing.engine"] is engine and engine.evaluate is evaluate
assert inspect.ismodule(sys.modules["robfair.auditing"])
print("ok")
"""


@pytest.mark.parametrize("first", list(FIRST))
def test_robfair_audit_is_the_function_whatever_is_imported_first(first):
    out = subprocess.run([sys.executable, "-c", FIRST[first] + "\n" + CHECK], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_in_process_forms():
    import inspect

    import robfair
    from robfair.auditing import engine

    assert inspect.isfunction(robfair.audit)
    assert {"mean", "std", "attacks", "eps"} <= set(inspect.signature(robfair.audit).parameters)
    assert engine.__name__ == "robfair.auditing.engine"
    import robfair.auditing.engine as E
    import robfair.auditing.outcomes as O

    assert E is engine and robfair.auditing.engine is engine and O.Outcomes is robfair.auditing.Outcomes
    with pytest.raises(ModuleNotFoundError):  # one name, one thing: there is no package robfair.audit
        import robfair.audit  # noqa: F401
