"""The page shell every HTML report shares: its parts (figures, run sections, the probe's lines), the
matplotlib settings figures are drawn under and their PNG encoding, and the Jinja2 template that
renders a page from its parts. :mod:`robfair.report.html` (the runs' page) and
:mod:`robfair.report.certify` (the certify page) both build on it; neither imports the other's
private names.

Every label goes through Jinja2 autoescaping (and :func:`robfair.inert.visible` first: no control,
format or bidi characters), so a class named ``<script>`` is shown as text.
"""

from __future__ import annotations

import base64
import contextlib
import html as _html
import io
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from markupsafe import Markup

from ..inert import mpl_rc, visible
from .tables import Table

DPI = 80


@dataclass
class Figure:
    title: str
    b64: str
    alt: str = ""
    caption: str = ""


@dataclass
class StripCell:
    """One image of the example strip (a PNG as base64) with its label."""

    b64: str
    label: str
    alt: str


@dataclass
class Strip:
    """The weakest class's examples: one row of clean images, one of their adversarial versions,
    one of the perturbations (amplified); every label is text, escaped by the template."""

    title: str
    rows: list[tuple[str, list[StripCell]]]
    caption: str


@dataclass
class ProbeLine:
    """A run's reliability-probe verdict for the page: ``status`` (passed, flagged, skipped,
    inconclusive: the CSS class of its badge), the one line, AutoAttack's own flags."""

    run: str
    status: str
    line: str
    flags: list[str] = field(default_factory=list)


@dataclass
class RunSection:
    name: str
    lines: list[str]
    figures: list[Figure]
    config: list[tuple[str, str]] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    strip: Strip | None = None
    probe: ProbeLine | None = None
    tables: list[Table] = field(default_factory=list)



@contextlib.contextmanager
def matplotlib_context() -> Iterator[Any]:
    import matplotlib  # lazy: start-up time (matplotlib: ~0.4 s)

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # lazy: start-up time (matplotlib: ~0.4 s)

    with matplotlib.rc_context({**mpl_rc(), "svg.fonttype": "none"}):
        yield plt


def to_png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    import matplotlib.pyplot as plt  # lazy: start-up time (matplotlib: ~0.4 s)

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


_CI = re.compile(r"^(.*?) (\[[^\]]*\])(.*)$")


def _cell(text: Any) -> Markup:
    """A table cell: ``value [lo, hi]`` as the value with the interval on a second, smaller line
    (tables stay narrow); everything escaped."""
    s = str(text)
    m = _CI.match(s)
    if not m:
        return Markup.escape(s)
    return Markup('{}<span class="ci">{}{}</span>').format(m.group(1), m.group(2), m.group(3))


def display_table(t: Table, max_columns: int = 14) -> Table:
    """``t`` for the page: transposed (one row per column of ``t``) when it has more than
    ``max_columns`` columns and fewer rows than columns, e.g. per-class tables of CIFAR-100."""
    if len(t.columns) <= max_columns or len(t.rows) >= len(t.columns) - 1:
        return t
    head = [t.columns[0]] + [r[0] for r in t.rows]
    rows = [[c] + [r[j] for r in t.rows] for j, c in enumerate(t.columns) if j > 0]
    emph = [[False] + [em[j] for em in t.emph] for j in range(1, len(t.columns))]
    good = [[False] + [g[j] for g in t.good] for j in range(1, len(t.columns))]
    label = t.columns[0]
    return Table(t.key, t.title, [f"{label} →"] + head[1:], rows, t.data,
                 (t.note + " " if t.note else "") + f"Transposed: one row per {'class' if t.key.startswith('benz') else 'column'}.",
                 emph, good)


def _visible(value: Any) -> Any:
    """Every value the page shows, before it is escaped: text without control, format or bidi
    characters (:func:`robfair.inert.visible`; a class name with a right-to-left override never
    reorders the page), numbers as they are."""
    if isinstance(value, Markup):
        return Markup(visible(str(value)))
    return visible(value) if isinstance(value, str) else value


def render_html(*, title: str, description: str, meta: list[tuple[str, str]], tables: Sequence[Table],
                figures: Sequence[Figure], runs: Sequence[RunSection], warnings: Sequence[tuple[str, str]],
                statements: Sequence[tuple[str, str]] = (), probes: Sequence[ProbeLine] = (),
                lead: Sequence[Table] = ()) -> str:
    """The page from its parts (Jinja2, autoescape on); ``lead`` tables open it, above the
    statements, the probe's verdicts and the figures (the leaderboard's ranking)."""
    import jinja2  # lazy: start-up time (jinja2, ~0.1 s, only when a page is rendered)

    env = jinja2.Environment(loader=jinja2.PackageLoader("robfair.report", "templates"), finalize=_visible,
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["cell"] = _cell
    return env.get_template("report.html.j2").render(title=title, description=description, meta=meta,
                                                      tables=[display_table(t) for t in tables], figures=figures,
                                                      runs=runs, warnings=warnings, statements=statements,
                                                      probes=probes, lead=[display_table(t) for t in lead])


def escape(s: Any) -> str:
    """HTML-escape (for callers building snippets outside the template)."""
    return _html.escape(str(s))
