"""The chi-square test of GroupReport equals scipy.stats.chi2_contingency without importing scipy.stats."""

from __future__ import annotations

import numpy as np
import pytest

from robfair.metrics.groups import chi2_contingency


@pytest.mark.parametrize("rows", [2, 3, 10])
@pytest.mark.parametrize("correction", [True, False])
def test_equals_scipy(rows, correction):
    from scipy.stats import chi2_contingency as ref

    rng = np.random.default_rng(rows)
    for _ in range(20):
        table = rng.integers(1, 60, size=(rows, 2))
        got = chi2_contingency(table, correction=correction)
        want = ref(table, correction=correction)
        assert got[0] == pytest.approx(want[0], rel=1e-12, abs=1e-12)
        assert got[1] == pytest.approx(want[1], rel=1e-10, abs=1e-300)
        assert got[2] == want[2] and np.allclose(got[3], want[3], rtol=1e-12)
    # a strongly dependent table: tiny p-values agree too
    t = np.array([[500, 5], [5, 500]])
    assert chi2_contingency(t)[1] == pytest.approx(ref(t)[1], rel=1e-8)


def test_chi2_sf_equals_scipy_over_the_range():
    from scipy.special import chdtrc

    from robfair.metrics.groups import chi2_sf

    for dof in (1, 2, 3, 9, 40, 199):
        for stat in np.concatenate([[0.0, 1e-8, 0.3], np.geomspace(0.01, 1500, 60)]):
            want = chdtrc(dof, stat)
            got = chi2_sf(stat, dof)
            assert got == pytest.approx(want, rel=1e-10, abs=1e-300), (dof, stat, got, want)
    assert chi2_sf(float("inf"), 3) == 0.0


def test_no_scipy_import_for_the_report():
    import subprocess
    import sys

    code = ("import sys, numpy as np; from robfair.metrics import GroupReport; "
            "r = GroupReport.from_outcomes(y=np.array([0, 1, 0, 1] * 10), clean_pred=np.array([0, 1, 1, 1] * 10), "
            "adv_pred=np.array([1, 1, 1, 0] * 10), class_names=['a', 'b']); r.chi2(); "
            "print('scipy' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
