"""The reliability probe on the HTML page: its verdict per run near the top, the flagged classes
marked in the lead figure with their corrected estimate, each run's probe table, and older
audit.json records (the earlier per-group-test schema, a skipped probe) still rendered. The records
come from real probe runs (tests/report/conftest.py), except the older one, written as the earlier
robfair wrote it."""

from __future__ import annotations

import re

import numpy as np

from robfair.auditing import AuditReport
from robfair.report import html as H
from robfair.report import plots
from robfair.report import reliability as rel
from robfair.report.tables import RunEntry, probe_tables


def _pct(v):
    return f"{100 * v:.1f}"


OLD = {"attack": "autoattack", "compared_with": ["pgd20"], "alpha": 0.05, "per_group_max": 20,
       "overall": {"n": 40, "robust_acc": 0.5, "autoattack_robust_acc": 0.3, "overstatement": 0.2,
                   "only_autoattack_fools": 8, "only_audit_fools": 0, "p": 0.0039},
       "per_group": {"a": {"n": 20, "robust_acc": 0.6, "autoattack_robust_acc": 0.2, "overstatement": 0.4,
                           "only_autoattack_fools": 8, "only_audit_fools": 0, "p": 0.0039, "p_holm": 0.0078},
                     "b": {"n": 20, "robust_acc": 0.4, "autoattack_robust_acc": 0.4, "overstatement": 0.0,
                           "only_autoattack_fools": 0, "only_audit_fools": 0, "p": 1.0, "p_holm": 1.0}},
       "flagged_groups": ["a"], "seconds": 3.2}
OLD_WARNING = ("reliability probe: AutoAttack finds significantly more errors than pgd20 in a 60.0% -> 20.0% "
               "(+40.0 pts, p=0.0078)")


def _old_entry(flagged, probe, warnings):
    """An audit.json as an earlier robfair wrote it (the same reports, the older probe record)."""
    d = flagged.to_json(bootstrap=0)
    d["probe"], d["warnings"] = probe, list(warnings)
    return RunEntry(name="old", audit=AuditReport.from_json(d))


# ============================================================================== the page
def test_probe_table_per_run_holds_the_record(flagged):
    (t,) = probe_tables(flagged.probe)
    p = flagged.probe
    assert t.columns[:4] == ["group", "n", "robust % (audit)", "audit-robust"]
    assert "at most, against APGD-CE" in t.columns  # the later stages did not run within this budget
    col = {c: i for i, c in enumerate(t.columns)}
    for row, em in zip(t.rows, t.emph):
        r = p["per_group"][row[0]]
        assert row[col["APGD-CE attacked"]] == str(r["first_attacked"]) and row[col["APGD-CE fooled"]] == str(r["first_fooled"])
        assert row[col["at least"]] == _pct(r["lower"]) and row[col["at most, against APGD-CE"]] == _pct(r["upper_first"])
        assert row[col["corrected robust % [95%]"]] == (f"{_pct(r['corrected_robust_acc'])} [{_pct(r['corrected_lo'])}, "
                                                       f"{_pct(r['corrected_hi'])}]")
        assert row[col["flagged"]] == "yes" and em[0] and em[col["flagged"]]
    assert list(t.data["lower"]) == [p["per_group"][g]["lower"] for g in ("a", "b")]  # the CSV: the record's numbers


def test_in_audit_gets_a_table_per_weaker_attack(in_audit):
    (t,) = probe_tables(in_audit.probe)
    rows = in_audit.probe["per_attack"]["pgd10"]["per_group"]
    col = t.columns.index("overstated by (points)")
    assert t.key == "probe-pgd10" and {r[0]: r[col] for r in t.rows} == {g: _pct(r["overstatement"]) for g, r in rows.items()}


def _page(tmp_path, entries):
    paths = H.write_report(entries, tmp_path / "r.html", n_boot=0)
    return paths.html.read_text()


def test_page_states_the_verdict_and_shows_the_probe_table(flagged, passed, tmp_path):
    html = _page(tmp_path, [RunEntry(name="masked", audit=flagged), RunEntry(name="linear", audit=passed)])
    top = html[html.index('<section id="probe"'):html.index('<section id="figures">')]
    assert '<span class="badge flagged">flagged</span><strong>masked</strong>' in top
    assert '<span class="badge passed">passed</span><strong>linear</strong>' in top
    assert top.count("reliability probe: pgd10 overstates robust accuracy in") == 1 and "reliability probe: passed" in top
    assert html.index('id="probe"') < html.index("Which classes are weak")  # near the top, before the figure
    box = html[html.index('<section id="warnings">'):html.index('<h2 id="tables">')]
    assert "reliability probe" not in box  # stated above, not again among the sanity warnings
    assert html.count("reliability probe per group: pgd10 against autoattack") == 2  # one table per run
    assert html.count('<td class="flag">a</td>') == 1 and html.count('<td class="flag">yes</td>') == 2
    assert "Pale, hatched purple and marked !" in html
    assert re.search(r"<\s*script", html, re.I) is None  # still self-contained, no script


def test_lead_figure_marks_flagged_classes_with_their_corrected_estimate(flagged, passed):
    marks = H.figure_flags(RunEntry(name="m", audit=flagged))
    assert set(marks) == {"a", "b"}
    fig = plots.overview_figure([("m", flagged.main), ("l", passed.main)], flagged=[marks, {}])
    ax, ax2 = fig.axes[:2]
    bars = {p.get_gid(): p for p in ax.patches if p.get_gid()}
    assert set(bars) == {"flagged:a", "flagged:b"} and not [p for p in ax2.patches if p.get_gid()]
    from matplotlib.colors import to_hex

    assert {to_hex(b.get_edgecolor()) for b in bars.values()} == {plots.FLAGGED} and {b.get_hatch() for b in bars.values()} == {"///"}
    others = ax2.patches  # the run without flags: plain bars
    assert others and all(to_hex(p.get_facecolor()) in (plots.ROBUST, plots.WORST) and not p.get_hatch() for p in others)
    (dia,) = [line for line in ax.lines if line.get_gid() == "corrected" and line.get_marker() == "D"]
    y = sorted(np.round(dia.get_ydata(), 6))
    assert y == sorted(round(100 * flagged.probe["per_group"][g]["corrected_robust_acc"], 6) for g in ("a", "b"))
    ticks = {t.get_text(): to_hex(t.get_color()) for t in ax.get_xticklabels()}
    assert ticks == {"a !": plots.FLAGGED, "b !": plots.FLAGGED}
    labels = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert any("flagged by the reliability probe" in s for s in labels) and any("AutoAttack-corrected" in s for s in labels)
    plain = plots.overview_figure([("l", passed.main)])
    assert not plain.legends and not [p for p in plain.axes[0].patches if p.get_gid()]
    # with AutoAttack in the audit the figure's numbers are AutoAttack's: nothing to mark
    assert H.figure_flags(RunEntry(name="x", audit=AuditReport(flagged.reports, probe={"design": "in-audit",
                                                                                        "per_attack": {}}))) == {}


def test_older_and_skipped_records_still_render(flagged, tmp_path):
    old = _old_entry(flagged, OLD, [OLD_WARNING])
    skipped = _old_entry(flagged, {"skipped": "disabled (probe=0)"}, [])
    skipped.name = "off"
    html = _page(tmp_path, [old, skipped])
    assert "reliability probe per group (an older audit.json)" in html and "p (Holm)" in html
    assert '<span class="badge flagged">flagged</span><strong>old</strong>: ' + OLD_WARNING.replace("'", "&#39;").replace(">", "&gt;") in html
    assert '<span class="badge skipped">skipped</span><strong>off</strong>: reliability probe: skipped (disabled (probe=0))' in html
    assert H.figure_flags(old) == {"a": None}  # marked, no corrected estimate: the old record has no interval
    (t,) = probe_tables(OLD)
    assert t.columns[-3:] == ["p", "p (Holm)", "flagged"] and t.rows[0][-1] == "yes" and t.rows[1][-1] == ""
    quiet = _old_entry(flagged, {k: v for k, v in OLD.items() if k != "flagged_groups"}, [])
    assert rel.verdict_line(quiet.audit.probe).endswith("no group flagged") and rel.status(quiet.audit.probe) == rel.PASSED


def test_autoattacks_own_flags_show_with_the_verdict_once(flagged, tmp_path):
    flag = "autoattack: Square Attack has decreased the robust accuracy of 2.0%"
    rep = AuditReport(flagged.reports, meta=flagged.meta, probe={**flagged.probe, "autoattack_flags": [flag]},
                      warnings=[*flagged.warnings, f"[autoattack] {flag}", "possible gradient masking: x"])
    html = _page(tmp_path, [RunEntry(name="m", audit=rep)])
    top = html[html.index('<section id="probe"'):html.index('<section id="figures">')]
    box = html[html.index('<section id="warnings">'):html.index('<h2 id="tables">')]
    assert f"<li>AutoAttack's own check: {flag}</li>" in top and flag not in box
    assert "possible gradient masking: x" in box and "1 sanity warning" in box
