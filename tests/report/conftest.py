"""Fixtures of the report tests (helpers live in reportkit.py)."""

import pytest

from _shared import probe_problem
from robfair.auditing import audit


@pytest.fixture
def evil_classes():
    return ["<script>alert(1)</script>", "cat & dog", "$x^2$", "ok"]


# ---------------------------------------------------------------------------------------------- real probe records
# official AutoAttack on the gradient-masking model of tests/_shared.py (flagged), on a linear model
# where PGD is optimal (passed), and with AutoAttack among the audit's attacks (in-audit)
@pytest.fixture(scope="session")
def flagged():
    pytest.importorskip("pyautoattack")
    model, ds = probe_problem(masked=True)
    rep = audit(model, ds, ["pgd10"], eps=0.1, device="cpu", probe=20, examples=0)
    assert rep.probe["flagged_groups"] == ["a", "b"]  # the premise: PGD overstates both groups
    return rep


@pytest.fixture(scope="session")
def passed():
    pytest.importorskip("pyautoattack")
    model, ds = probe_problem(masked=False, n=240, k=2, seed=1)
    rep = audit(model, ds, ["pgd10"], eps=0.02, device="cpu", probe=30, examples=0)
    assert rep.probe["passed"]
    return rep


@pytest.fixture(scope="session")
def in_audit():
    pytest.importorskip("pyautoattack")
    model, ds = probe_problem(masked=True)
    rep = audit(model, ds, ["pgd10", "autoattack"], eps=0.1, device="cpu", examples=0)
    assert rep.probe["design"] == "in-audit" and rep.probe["per_attack"]["pgd10"]["flagged_groups"]
    return rep
