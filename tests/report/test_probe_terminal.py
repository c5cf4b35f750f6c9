"""The reliability probe in the terminal: its verdict once (passed or not, the library's log copy of
it kept off the terminal by the CLI: tests/cli/test_terminal.py), the flagged groups marked in the
group table with their AutoAttack-corrected robust accuracy, AutoAttack's own flags once, and the
demo's closing screen. The records come from real probe runs (tests/report/conftest.py)."""

from __future__ import annotations

import io
import re

from rich.console import Console

from robfair.auditing import AuditReport
from robfair.report import reliability as rel
from robfair.report.text import print_audit, print_demo


def _printed(rep) -> str:
    buf = io.StringIO()
    print_audit(Console(file=buf, width=150, color_system=None), rep, title="t", n_boot=0)
    return buf.getvalue()


def _pct(v):
    return f"{100 * v:.1f}"


# ============================================================================== terminal
def test_terminal_prints_a_failing_verdict_once_and_marks_the_flagged_groups(flagged):
    out = _printed(flagged)
    p = flagged.probe
    assert p["verdict"] in flagged.warnings  # the library keeps it among the warnings ...
    assert out.count("reliability probe: pgd10 overstates robust accuracy in") == 1  # ... the terminal says it once
    assert out.count("warning: reliability probe:") == 1
    rows = {m.group(2): m.group(1) for m in re.finditer(r"^(!| ) (a|b) +│", out, re.M)}
    assert rows == {"a": "!", "b": "!"}
    assert "AutoAttack-corrected robust %" in out
    for g in ("a", "b"):
        r = p["per_group"][g]
        assert f"{_pct(r['corrected_robust_acc'])} [{_pct(r['corrected_lo'])}, {_pct(r['corrected_hi'])}]" in out
    legend = [line for line in out.splitlines() if line.startswith("! flagged by the reliability probe")]
    assert len(legend) == 1 and "AutoAttack-corrected" in legend[0]


def test_terminal_prints_a_passing_verdict_once_and_marks_nothing(passed):
    out = _printed(passed)
    assert out.count("reliability probe: passed") == 1 and "warning: reliability probe" not in out
    assert "AutoAttack-corrected" not in out and not re.search(r"^! ", out, re.M)


def test_terminal_marks_in_audit_overstatement_with_the_exact_number(in_audit):
    out = _printed(in_audit)
    rows = in_audit.probe["per_attack"]["pgd10"]["per_group"]
    flagged = in_audit.probe["per_attack"]["pgd10"]["flagged_groups"]
    assert out.count("reliability probe: autoattack is among") == 1 and "overstated (probe)" in out
    for g in flagged:
        assert re.search(rf"^! {g} .*pgd10 \+{re.escape(_pct(rows[g]['overstatement']))}", out, re.M)


def test_autoattack_flags_print_once_as_warnings(flagged):
    rep = AuditReport(flagged.reports, meta=flagged.meta, probe={**flagged.probe, "autoattack_flags": [
        "autoattack: Square Attack has decreased the robust accuracy of 2.0%"]})
    rep.warnings = [*flagged.warnings, "[autoattack] autoattack: Square Attack has decreased the robust accuracy of 2.0%"]
    out = _printed(rep)
    assert out.count("Square Attack has decreased") == 1 and out.count("reliability probe: pgd10 overstates robust accuracy in") == 1


def test_demo_screen_marks_the_flagged_model_and_says_each_verdict_once(flagged, passed, tmp_path):
    from robfair.demo import DemoResult

    result = DemoResult(reports={"standard": passed, "pgd-at": flagged}, eps=0.1, out=tmp_path, plot=tmp_path / "p.png",
                        seconds=1.0)
    buf = io.StringIO()
    print_demo(Console(file=buf, width=200, color_system=None), result)
    out = buf.getvalue()
    assert out.count("reliability probe (standard): passed") == 1 and out.count("reliability probe: passed") == 0
    assert out.count("warning (pgd-at): reliability probe: pgd10 overstates robust accuracy in") == 1
    assert out.count("reliability probe: pgd10 overstates robust accuracy in") == 1
    assert "pgd-at AutoAttack-corrected %" in out and "standard AutoAttack-corrected %" not in out
    assert out.count("! pgd-at: flagged by the reliability probe") == 1


# ============================================================================== the record, read
def test_reliability_reads_every_record_kind(flagged, passed, in_audit):
    assert rel.status(flagged.probe) == rel.FLAGGED and rel.status(passed.probe) == rel.PASSED
    assert rel.status({"skipped": "disabled (probe=0)"}) == rel.SKIPPED
    assert rel.verdict_line({"skipped": "disabled (probe=0)"}) == "reliability probe: skipped (disabled (probe=0))"
    assert set(rel.flags(flagged.probe)) == {"a", "b"} and rel.flags(passed.probe) == {}
    assert all(f.corrected is None for f in rel.flags(in_audit.probe).values())
    # the verdict is dropped from the other warnings, nothing else
    others = rel.other_warnings(flagged.probe, [*flagged.warnings, "x", "x"])
    assert others == [w for w in flagged.warnings if w != flagged.probe["verdict"]] + ["x"]
