"""Terminal rendering of audits (rich tables). Used by the CLI only; the library never prints."""

from __future__ import annotations

import math
from typing import Any, Mapping

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from ..auditing.checks import model_state
from ..inert import term
from . import reliability as rel

#: rich styles of a flagged group's mark and of the probe's verdict by outcome
FLAG_STYLE = "bold yellow"
_VERDICT = {rel.PASSED: ("green", ""), rel.FLAGGED: ("yellow", "warning: "), rel.OPEN: ("yellow", "note: "),
            rel.SKIPPED: ("dim", "")}


def _pct(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}"


def _ci(row, col: str) -> str:
    return f"{_pct(row[col])} [{_pct(row[col + '_lo'])}, {_pct(row[col + '_hi'])}]"


def group_table(rep, *, title: str = "", by: str = "group", probe: dict | None = None) -> Table:
    """Per group: n, clean / robust accuracy and std / bndy / rob error (percent, 95% Wilson CI).
    ``probe`` (the audit's reliability-probe record, per-group tables only): the groups it flags get
    the mark ``!`` and a column with the AutoAttack-corrected robust accuracy [95% interval] (in-audit:
    each weaker attack's exact overstatement), filled only where flagged; :func:`flag_legend` says so."""
    df = rep.by_group if by == "group" else rep.by_class
    worst = df["rob_acc"].idxmin() if len(df) else None
    marks = rel.flags(probe) if by == "group" else {}
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column(by)
    t.add_column("n", justify="right")
    for c in ("clean acc % [95% CI]", "robust acc % [95% CI]", "std err", "bndy err", "rob err"):
        t.add_column(c, justify="right")
    extra = None
    if marks:
        extra = "AutoAttack-corrected robust %" if rel.kind(probe) == "sampled" else "overstated (probe)"
        t.add_column(extra, justify="right")
    for name, row in df.iterrows():
        style = "bold red" if name == worst else None
        cells = [term(name), str(int(row["n"])), _ci(row, "clean_acc"), _ci(row, "rob_acc"),
                 _pct(row["std_err"]), _pct(row["bndy_err"]), _pct(row["rob_err"])]
        if extra is not None:
            f = marks.get(str(name))
            cells[0] = f"[{FLAG_STYLE}]{rel.MARK} {cells[0]}[/{FLAG_STYLE}]" if f else f"  {cells[0]}"
            cells.append(_flag_cell(f))
        t.add_row(*cells, style=style)
    return t


def _flag_cell(f: rel.Flag | None) -> str:
    """A flagged group's cell: the corrected robust accuracy [95% interval], or why (in-audit)."""
    if f is None:
        return ""
    shown = term(f.why) if f.corrected is None else f"{_pct(f.corrected[0])} [{_pct(f.corrected[1])}, {_pct(f.corrected[2])}]"
    return f"[{FLAG_STYLE}]{shown}[/{FLAG_STYLE}]"


def flag_legend(probe: dict | None, who: str = "") -> str | None:
    """The one line under a group table with flagged groups (rich markup), None without any."""
    line = rel.legend(probe)
    if line is None:
        return None
    return f"[{FLAG_STYLE}]{rel.MARK}[/{FLAG_STYLE}]{' ' + term(who) + ':' if who else ''}{term(line[len(rel.MARK):])}"


def verdict_markup(probe: dict | None, warnings=(), who: str = "") -> str | None:
    """The probe's verdict as one console line: green when it passed, a yellow warning when it
    flags a group, a note when nothing was attacked, dim when skipped; None without a record."""
    line = rel.verdict_line(probe, warnings)
    if line is None:
        return None
    colour, lead = _VERDICT[rel.status(probe)]
    head, sep, rest = line.partition(": ")
    who = f" ({term(who)})" if who else ""
    if lead:
        return f"[{colour}]{lead.rstrip(': ')}{who}:[/{colour}] {term(line)}"
    return f"[{colour}]{term(head)}{who}{sep}[/{colour}]{term(rest)}"


def print_probe(console: Console, report, who: str = "") -> None:
    """The probe's verdict, once, then the audit's other warnings (AutoAttack's own flags among
    them), each once."""
    line = verdict_markup(report.probe, report.warnings, who)
    if line is not None:
        console.print(line, soft_wrap=True)
    label = f" ({term(who)})" if who else ""
    for w in rel.other_warnings(report.probe, report.warnings):
        console.print(f"[yellow]warning{label}:[/yellow] {term(w)}", soft_wrap=True)


def aggregate_table(rep, *, n_boot: int = 1000, seed: int = 0, k: int = 3, title: str = "") -> Table:
    """Disparity over groups for clean and robust accuracy and boundary error; bootstrap CI for worst/gap."""
    agg = rep.aggregates(k=k)
    boot = rep.bootstrap(n=n_boot, seed=seed)["metrics"] if n_boot > 0 else {}
    metrics = [("clean_acc", "clean acc"), ("rob_acc", "robust acc"), ("bndy_err", "bndy err")]
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("over groups")
    for _, label in metrics:
        t.add_column(label + " %", justify="right")
    rows = [("avg", "avg (all samples)"), ("class_mean", "mean of groups"), ("worst", "worst"), ("best", "best"),
            ("gap", "gap (best - worst)"), ("sd", "sd"), ("nsd", "nsd (sd/mean)"), ("ratio", "ratio (worst/best)"),
            ("tail_k", f"tail-{k} (mean of {k} worst)"), ("gini", "Gini")]
    unitless = {"nsd", "ratio", "gini"}
    for key, label in rows:
        cells = []
        for m, _ in metrics:
            v = agg[m].get(key)
            s = "-" if v is None or (isinstance(v, float) and math.isnan(v)) else (f"{v:.3f}" if key in unitless else _pct(v))
            if key in ("worst", "gap") and m in boot:
                b = boot[m][key]
                s += f" [{_pct(b['lo'])}, {_pct(b['hi'])}]"
            cells.append(s)
        t.add_row(label, *cells)
    t.add_row("worst group", *[term(agg[m]["worst_group"]) for m, _ in metrics])
    return t


def chi2_line(rep) -> str:
    state = model_state(rep)
    if state is not None:  # a "significant" gap between groups of a degenerate model means nothing
        return f"Do the groups differ?  not tested: the model is {'collapsed' if state['state'] == 'collapsed' else 'at chance level'}"
    c = rep.chi2()
    parts = []
    for key in ("clean", "robust"):
        r = c[key]
        p = r["p_value"]
        parts.append(f"{key}: chi2={r['statistic']:.1f} (dof {r['dof']}), p={p:.2g}" + (f" ({r['note']})" if r.get("note") else ""))
    return "Do the groups differ?  " + ";  ".join(parts)


def print_audit(console: Console, report, *, title: str = "", n_boot: int = 1000, by: str = "group") -> None:
    """Print an AuditReport: per-attack overall line, the headline per-group table (the probe's
    flagged groups marked), aggregates, tests, the probe's verdict once, the other warnings."""
    console.print(f"[bold]{term(title)}[/bold]" if title else "")
    for name, rep in report.reports.items():
        o = rep.overall
        console.print(f"  {term(name):<12} n={o['n']}  clean {_pct(o['clean_acc'])}%  robust {_pct(o['rob_acc'])}%"
                      f"  (std err {_pct(o['std_err'])} + bndy err {_pct(o['bndy_err'])} = rob err {_pct(o['rob_err'])})")
    main = report.main
    label = main.attack if main.attack else "attack"
    console.print(fit_table(console, group_table(main, title=f"per {by}, {label}", by=by, probe=report.probe)))
    legend = flag_legend(report.probe) if by == "group" else None
    if legend:
        console.print(legend, soft_wrap=True)
    console.print(aggregate_table(main, n_boot=n_boot, title=f"disparity, {label} (95% bootstrap CI for worst and gap)"))
    console.print(chi2_line(main))
    print_probe(console, report)


def side_by_side(reports: Mapping[str, Any], *, title: str = "") -> Table:
    """One row per class, clean and robust accuracy of several models next to each other; a model
    whose reliability probe flags classes gets their mark and its AutoAttack-corrected column."""
    items = [(label, getattr(r, "main", r), rel.flags(getattr(r, "probe", None))) for label, r in reports.items()]
    frames = [(label, rep.by_group, marks) for label, rep, marks in items]
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("class")
    for label, _, marks in frames:
        t.add_column(f"{label} clean %", justify="right")
        t.add_column(f"{label} robust % [95% CI]", justify="right")
        if marks:
            t.add_column(f"{label} AutoAttack-corrected %", justify="right")
    worst = {label: df["rob_acc"].idxmin() for label, df, _ in frames}
    for name in frames[0][1].index:
        cells = []
        for label, df, marks in frames:
            row = df.loc[name]
            rob = _ci(row, "rob_acc")
            f = marks.get(str(name))
            rob = f"{rob} [{FLAG_STYLE}]{rel.MARK}[/{FLAG_STYLE}]" if f else (f"{rob}  " if marks else rob)
            cells += [_pct(row["clean_acc"]), f"[bold red]{rob}[/bold red]" if worst[label] == name else rob]
            if marks:
                cells.append(_flag_cell(f))
        t.add_row(term(name), *cells)
    return t


def disparity_table(reports: Mapping[str, Any], *, n_boot: int = 1000, title: str = "") -> Table:
    """Headline disparity figures of several models: avg / worst / gap of clean and robust accuracy."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for c in ("model", "clean avg", "clean worst", "robust avg", "robust worst [95% CI]", "robust gap [95% CI]",
              "robust sd", "worst class", "chi2 p (robust)"):
        t.add_column(c, justify="left" if c in ("model", "worst class") else "right")
    for label, r in reports.items():
        rep = getattr(r, "main", r)
        a = rep.aggregates()
        b = rep.bootstrap(n=n_boot, seed=0)["metrics"]["rob_acc"] if n_boot else None
        ci = (lambda key: f" [{_pct(b[key]['lo'])}, {_pct(b[key]['hi'])}]") if b else (lambda key: "")
        t.add_row(term(label), _pct(a["clean_acc"]["avg"]), _pct(a["clean_acc"]["worst"]), _pct(a["rob_acc"]["avg"]),
                  _pct(a["rob_acc"]["worst"]) + ci("worst"), _pct(a["rob_acc"]["gap"]) + ci("gap"),
                  _pct(a["rob_acc"]["sd"]), term(a["rob_acc"]["worst_group"]), f"{rep.chi2()['robust']['p_value']:.2g}")
    return t


def print_demo(console: Console, result) -> None:
    """The demo's closing screen: side-by-side class table, disparity figures, where files went."""
    reports = result.reports
    console.print(fit_table(console, side_by_side(reports, title=f"Class-wise accuracy on digits (test), L-inf "
                                                                 f"eps={result.eps:g}, attack {result.attack_label}; "
                                                                 "worst class in red")))
    for label, r in reports.items():
        legend = flag_legend(getattr(r, "probe", None), who=label)
        if legend:
            console.print(legend, soft_wrap=True)
    console.print()
    console.print(disparity_table(reports, title="Disparity (percent; 95% bootstrap CI)"))
    for label, r in reports.items():
        print_probe(console, r, who=label)
    console.print()
    for line in result.summary_lines:
        console.print(term(line))
    console.print(f"\nwrote {result.out}/ (checkpoints, audit.json, {result.plot.name})")


def fit_table(console: Console, table: Table, *, key_columns: int = 1) -> Table:
    """``table`` when it fits the console's width, else the same cells in long format -- one row per
    (row, column), the first ``key_columns`` repeated -- so nothing wraps over several lines."""
    if Measurement.get(console, console.options.update_width(10**5), table).maximum <= console.width:
        return table
    headers = [str(c.header) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    title = f"{table.title or ''} (long format: wider than the terminal's {console.width} columns)".strip()
    out = Table(title=title, title_justify="left", show_edge=False, pad_edge=False,
                min_width=min(console.width, len(title)))  # the title on one line, not wrapped to the table
    for h in headers[:key_columns]:
        out.add_column(h)
    out.add_column("column")
    out.add_column("value", justify="right")
    for r in range(table.row_count):
        for j in range(key_columns, len(headers)):
            out.add_row(*[cells[k][r] for k in range(key_columns)], headers[j], cells[j][r])
    return out
