"""Untrusted text made inert wherever it is shown.

Dataset class names (npz ``classes``, folder names, CSV columns), group names, run and study names
come from files robfair did not write. Shown raw they can drive the terminal (ESC / OSC sequences:
move the cursor, retitle the window, plant hyperlinks), be read as rich markup (``[bold]``,
``[link=...]``), as matplotlib math text (``$\\frac{`` crashes the figure), as Markdown or HTML, or as
a spreadsheet formula (``=HYPERLINK(...)`` in a CSV).

- :func:`plain`: escape sequences, control and format characters (bidirectional marks, embeddings,
  overrides and isolates included) removed, line breaks and tabs turned into spaces -- the one-line
  printable text of a name; :func:`visible`: the same, line by line (multi-line text);
- :func:`term`: :func:`plain`, then rich markup escaped -- for every console line and table cell;
- :func:`csv_cell`: :func:`plain`, and a leading ``= + - @`` neutralized with a quote -- for CSV cells;
- matplotlib: figures turn math text off (``text.parse_math``) and use :func:`plain` labels; HTML is
  escaped by jinja2 autoescaping after :func:`visible` (the environment's ``finalize``); Markdown
  cells by ``report.tables._md_cell`` on :func:`plain` text, its paragraphs on :func:`visible` text.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), DCS/SOS/PM/APC (ESC P|X|^|_ ... ST), other ESC x,
# and their 8-bit C1 forms
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x1b\x9c]*(?:\x1b\\|\x9c)?"
    r"|\x1b[\x20-\x7e]?"
)
# C0 controls, DEL, C1 controls, bidi embeddings/overrides/isolates, zero-width joiners and BOM
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_SPACES = re.compile(r"[\t\n\r\x0b\x0c\u2028\u2029]+")


def plain(text: Any) -> str:
    """``str(text)`` on one line with escape sequences removed, and every control and format character
    (Unicode categories C*: the bidi marks LRM/RLM/ALM, embeddings, overrides and isolates, zero-width
    characters, soft hyphens, unassigned code points) dropped; other spaces (no-break ...) become ' '."""
    s = str(text)
    if s.isprintable() and "\x1b" not in s:
        return s
    s = _SPACES.sub(" ", s)
    s = _CONTROLS.sub("", _ESCAPES.sub("", s))
    if s.isprintable():
        return s
    return "".join(" " if unicodedata.category(c) == "Zs" else c for c in s if unicodedata.category(c)[0] != "C")


def visible(text: Any) -> str:
    """:func:`plain` line by line, the line breaks kept: text of several lines (a Markdown paragraph,
    an HTML page's values)."""
    s = str(text)
    if "\x1b" not in s and s.replace("\n", "").isprintable():
        return s
    return "\n".join(plain(line) for line in s.split("\n"))


def term(text: Any) -> str:
    """Text for the rich console: :func:`plain`, with rich markup (``[bold]``) escaped."""
    from rich.markup import escape  # lazy: start-up time (rich, ~20 ms; report and metrics use inert without it)

    return escape(plain(text))


def csv_cell(text: Any) -> str:
    """A CSV text cell that no spreadsheet runs as a formula (OWASP: prefix ``'``)."""
    s = plain(text)
    if s[:1] in ("=", "+", "@") or (s[:1] == "-" and not _NUMBER.fullmatch(s)):
        return "'" + s
    return s


_NUMBER = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def mpl_rc() -> dict[str, Any]:
    """matplotlib rc settings for figures with untrusted labels: no math text."""
    return {"text.parse_math": False, "text.usetex": False}


__all__ = ["plain", "visible", "term", "csv_cell", "mpl_rc"]
