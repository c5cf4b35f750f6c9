"""``robfair.audit`` is a plain function; the ``robfair/audit/`` package's modules stay importable by name,
whatever is imported first."""

from __future__ import annotations

import subprocess
import sys

import pytest

FIRST = {
    "import robfair": "import robfair",
    "from robfair.audit import engine": "from robfair.audit import engine",
    "from robfair.audit.engine import evaluate": "from robfair.audit.engine import evaluate",
    "import robfair.audit.distances": "import robfair.audit.distances",
    "from robfair.audit import audit": "from robfair.audit import audit",
}

CHECK = """
import inspect, sys
import robfair
from robfair.audit import audit, evaluate, AuditReport, engine, eps_sweep
from robfair.audit.report import audit as report_audit
from robfair.audit.distances import boundary_distances
from robfair import audit as top
assert inspect.isfunction(robfair.audit), type(robfair.audit)
assert robfair.audit is audit is report_audit is top
assert sys.modules["robfair.audit.engine"] is engine and engine.evaluate is evaluate
assert inspect.ismodule(sys.modules["robfair.audit"])
print("ok")
"""


@pytest.mark.parametrize("first", list(FIRST))
def test_robfair_audit_is_the_function_whatever_is_imported_first(first):
    out = subprocess.run([sys.executable, "-c", FIRST[first] + "\n" + CHECK], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_in_process_forms():
    import inspect

    import robfair
    from robfair.audit import engine

    assert inspect.isfunction(robfair.audit)
    assert {"mean", "std", "attacks", "eps"} <= set(inspect.signature(robfair.audit).parameters)
    assert engine.__name__ == "robfair.audit.engine"
    with pytest.raises(AttributeError):
        robfair.audit.engine  # noqa: B018  (the attribute is the function: documented in docs/architecture.md)
