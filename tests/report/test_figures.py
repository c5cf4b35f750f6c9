"""What a person sees first: ties marked alike, good and bad in different colours, plain statements
for collapsed / chance models, training curves and the method's state from metrics.jsonl, the group
heatmap, wide tables transposed, and the demo chart."""

from __future__ import annotations

import json

import numpy as np
import pytest

from robfair.auditing import AuditReport
from robfair.metrics import GroupReport
from robfair.report import html as H
from robfair.report import page as P
from robfair.report.plots import method_state_series, tied_min
from robfair.report.tables import RunEntry, paper_tables

from reportkit import audit_report, entry

CL = ["a", "b", "c", "d"]


def _table(tables, key):
    return next(t for t in tables if t.key == key)


def test_ties_are_all_the_worst():
    assert tied_min([0.2, 0.0, 0.5, 0.0]) == [1, 3] and tied_min([np.nan, 0.3]) == [1] and tied_min([np.nan]) == []
    es = [entry("tie", [(20, 19, 0), (20, 18, 0), (20, 17, 5), (20, 19, 3)], CL),
          entry("one", [(20, 19, 1), (20, 18, 0), (20, 17, 5), (20, 19, 3)], CL)]
    tables = paper_tables(es, n_boot=0)
    rob = _table(tables, "benz-robust")
    assert rob.emph == [[False, True, True, False, False], [False, False, True, False, False]]
    summary = _table(tables, "summary")
    assert summary.rows[0][summary.columns.index("worst class")] == "a, b (tied, 2)"
    assert summary.rows[1][summary.columns.index("worst class")] == "b"
    page = H.render_html(title="t", description="", meta=[], tables=[rob], figures=[], runs=[], warnings=[])
    assert page.count('class="em"') == 3  # both tied classes of 'tie', the one of 'one'


def test_pareto_marked_good_not_bad():
    es = [entry("weak", [(20, 10, 2)] * 4, CL), entry("strong", [(20, 18, 10)] * 4, CL)]
    s = _table(paper_tables(es, n_boot=0), "summary")
    col = s.columns.index("Pareto")
    assert [r[col] for r in s.rows] == ["", "yes"]
    assert s.good[1][col] and not any(e[col] for e in s.emph)


def _report(y, clean, adv, classes=CL, groups=None, group_names=None):
    return GroupReport.from_outcomes(y=np.asarray(y), clean_pred=np.asarray(clean), adv_pred=np.asarray(adv),
                                     class_names=classes, groups=groups, group_names=group_names, attack="pgd20", eps=0.1)


def test_plain_statements():
    y = np.repeat(np.arange(4), 50)
    collapsed = _report(y, np.zeros_like(y), np.zeros_like(y))
    lines = H.model_statements(collapsed)
    assert any("collapsed" in s and "'a'" in s and "100%" in s for s in lines)
    assert any("chance level" in s for s in lines)  # 25% clean accuracy with 4 balanced classes
    healthy_clean = y.copy()
    healthy_clean[::10] = (y[::10] + 1) % 4  # 90% clean accuracy
    broken = _report(y, healthy_clean, (y + 1) % 4)  # every attack succeeds
    assert H.model_statements(broken) == ["Robust accuracy is 0 in every class: the attack fools the model on every "
                                          "input, so the class-wise robust numbers carry no ranking."]
    fine = _report(y, healthy_clean, np.where(np.arange(len(y)) % 3 == 0, (y + 1) % 4, healthy_clean))
    assert H.model_statements(fine) == []


def _history(tmp_path, k=4, epochs=3):
    rows = []
    for e in range(epochs):
        rows.append({"epoch": e + 1, "lr": 0.1, "train": {"loss": 2.0 - 0.5 * e},
                     "val": {"summary": {"clean_acc": 0.5 + 0.1 * e, "rob_acc": 0.2 + 0.05 * e, "worst_rob_acc": 0.1},
                             "per_group": {c: {"n": 10, "rob_acc": 0.1 * (i + 1) + 0.01 * e} for i, c in enumerate(CL[:k])}},
                     "select": {"best_epoch": 2}, "method": {"phase": "frl", "class_weights": [1.0 + e, 1.0, 1.0, 1.0 - e / 10],
                                                            "lambda": {"a": 0.1 * e, "b": 0.0}, "fawa": {"gate": 0.2, "updated": True}}})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"half": ')
    return rows


def test_training_curves_and_method_state(tmp_path):
    rows = _history(tmp_path)
    series = method_state_series(rows, CL)
    assert set(series) == {"class_weights", "lambda"}  # numbers per class / group; not 'phase', not nested dicts
    names, mat = series["class_weights"]
    assert names == CL and mat.shape == (3, 4) and mat[2, 0] == 3.0 and mat[2, 3] == pytest.approx(0.8)
    assert series["lambda"][0] == ["a", "b"] and series["lambda"][1][:, 0].tolist() == pytest.approx([0, 0.1, 0.2])
    e = entry("frl", [(20, 19, 8), (20, 18, 6), (20, 17, 5), (20, 19, 3)], CL, method="frl-rwrm")
    e.path = tmp_path
    assert len(H.read_history(e)) == 3  # the half-written last line is skipped
    figs = H.training_figures(e)
    assert [f.title for f in figs] == ["training curves", "frl-rwrm state per class over epochs"]
    e.path = tmp_path / "nowhere"
    assert H.training_figures(e) == []


def test_group_heatmap_only_with_groups():
    y = np.tile(np.arange(4), 30)
    g = np.arange(120) % 3
    rep = _report(y, y, np.where(g == 0, (y + 1) % 4, y), groups=g, group_names=["g0", "g1", "g2"])
    e = RunEntry("grp", AuditReport({"pgd20": rep}, meta={"attacks": ["pgd20"], "eps": 0.1}))
    f = H.groups_heatmap_figure(e)
    assert f is not None and f.title == "robust accuracy per group and class"
    assert H.groups_heatmap_figure(entry("plain", [(20, 19, 8)] * 4, CL)) is None


def test_class_run_heatmap_needs_two_runs_on_the_same_classes():
    one = entry("one", [(20, 19, 8)] * 4, CL)
    other = entry("other", [(20, 19, 8)] * 3, CL[:3])
    assert H.class_run_heatmap([one]) is None and H.class_run_heatmap([one, other]) is None
    f = H.class_run_heatmap([one, entry("two", [(20, 19, 2)] * 4, CL), other])
    assert f is not None and "1 runs on other classes left out" in f.caption


def test_wide_tables_transposed_and_intervals_on_a_second_line():
    classes = [f"k{i}" for i in range(30)]
    t = _table(paper_tables([entry("x", [(20, 19, 8)] * 30, classes)], n_boot=0), "benz-robust")
    d = H.display_table(t)
    assert d.columns == ["setting →", "x"] and len(d.rows) == 30 and d.rows[0][0] == "k0"
    assert sum(r[1] for r in d.emph) == 30  # all tied at 40%: every class marked
    assert H.display_table(_table(paper_tables([entry("x", [(20, 19, 8)] * 4, CL)], n_boot=0), "benz-robust")).rows[0][0] == "x"
    assert str(P._cell("40.0 [21.9, 61.3]")) == '40.0<span class="ci">[21.9, 61.3]</span>'
    assert str(P._cell("<b> [x]")) == '&lt;b&gt;<span class="ci">[x]</span>'
    assert str(P._cell("42.0 ± 2.8")) == "42.0 ± 2.8"


def test_default_title_from_the_folder(tmp_path, monkeypatch):
    run = tmp_path / "frl-table"
    run.mkdir()
    monkeypatch.chdir(run)
    assert H.default_title(["."]) == "frl-table"
    (run / "audit.json").write_text("{}")
    assert H.default_title([run / "audit.json"]) == "frl-table"
    assert H.default_title([tmp_path / "a.json", tmp_path / "b"]) == "a vs b"


def test_demo_chart(tmp_path):
    from robfair.report.plots import classwise_bars

    rep = audit_report([(20, 19, 0), (20, 18, 0), (20, 17, 5), (20, 19, 3)], CL)
    p = classwise_bars({"standard": rep, "pgd-at": rep}, tmp_path / "c.png", title="digits")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


@pytest.mark.parametrize("cells", [
    [(40, 40, 39), (40, 39, 38), (40, 40, 40)],  # every bar near 100%: no corner of the axes is empty
    [(40, 5, 1), (40, 4, 2), (40, 6, 0), (40, 3, 3), (40, 40, 40)],  # low bars, the last one full
    [(30, 30, 30)] * 12,  # many classes
])
def test_api_plot_legend_never_covers_a_bar(cells):
    """``report.plot()``: the legend's box in the rendered figure overlaps no bar's box (nor its error
    bar) and lies inside the figure the plot made."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.transforms import Bbox

    classes = [f"class {i}" for i in range(len(cells))]
    for rep in (audit_report(cells, classes), audit_report(cells, classes)["pgd20"]):
        ax = rep.plot()
        fig = ax.figure
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        leg = ax.get_legend()
        assert leg is not None and [t.get_text() for t in leg.get_texts()] == ["clean accuracy", "robust accuracy"]
        box = leg.get_window_extent(r)
        bars = [p.get_window_extent(r) for p in ax.patches if p.get_height() > 0]
        assert len(bars) >= len(cells)
        errs = [Bbox(c.get_transform().transform(seg)) for c in ax.collections if isinstance(c, LineCollection)
                for seg in c.get_segments()]  # each error bar's line, in display coordinates
        assert errs  # the error bars are drawn, and checked too
        assert not any(box.overlaps(b) for b in bars + errs)
        assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
        plt.close(fig)
