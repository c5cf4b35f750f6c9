"""Help that fits a terminal of 80 columns: each option's names whole with a short metavar (none on
a flag: ``--overwrite``, ``--figures/--no-figures``; ``--data TEXT``, ``--seed INT``, the option's
own metavar where it names one: ``--probe B``), its help wrapped beside them, or on the lines below
when the names are long. typer's rich help lays an option out in six columns and, at 80 columns,
cuts the names (``--allow-large-…``) and shows ``<bool>`` on flags; this replaces that one panel of
typer's help (:func:`install`, on typer's ``rich_utils``) and leaves the rest (usage, the
command's text, the commands panel) to typer. With a typer that lays its help out otherwise, the
help stays typer's own.
"""

from __future__ import annotations

import enum
import typing
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

#: names longer than this put their help on the lines below them
NAMES_WIDTH = 28
_WORDS = {str: "TEXT", int: "INT", float: "FLOAT", Path: "PATH", bool: "BOOL"}
_CLICK_WORDS = {"text": "TEXT", "integer": "INT", "integer range": "INT", "float": "FLOAT", "float range": "FLOAT",
                "path": "PATH", "filename": "FILE", "directory": "DIR", "boolean": "BOOL"}


def _annotation_word(ann: Any) -> str:
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) in (list, tuple, typing.Union) and args:
        return _annotation_word(args[0])  # List[str] -> TEXT (repeat the option), Optional[int] -> INT
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return "{" + "|".join(str(m.value) for m in ann) + "}"
    for t, word in _WORDS.items():
        if isinstance(ann, type) and issubclass(ann, t):
            return word
    return "VALUE"


def metavar(param: Any) -> str:
    """The short placeholder of ``param``'s value: its own metavar, none for a flag, else the
    value's kind in capitals (TEXT, INT, FLOAT, PATH, {a|b}); an argument's is its name."""
    if getattr(param, "param_type_name", "") == "argument":
        word = str(param.metavar or param.name.upper())
        return word + ("..." if getattr(param, "nargs", 1) != 1 and not word.endswith("...") else "")
    if getattr(param, "metavar", None):
        return str(param.metavar)
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    ann = getattr(getattr(param, "type_descriptor", None), "annotation", None)  # typer >= 0.20
    if ann is not None:
        return _annotation_word(ann)
    kind = getattr(param, "type", None)  # older typer: click's parameter types
    choices = getattr(kind, "choices", None)
    if choices:
        return "{" + "|".join(map(str, choices)) + "}"
    return _CLICK_WORDS.get(str(getattr(kind, "name", "")).lower(), "VALUE")


def names(param: Any) -> str:
    """``-d, --data TEXT``, ``--figures/--no-figures``, ``MODEL...``: every name of ``param``, whole."""
    if getattr(param, "param_type_name", "") == "argument":
        return metavar(param)
    short = [o for o in param.opts if not o.startswith("--")]
    long = [o for o in param.opts if o.startswith("--")]
    if param.secondary_opts:
        long = ["/".join([*long, *param.secondary_opts])]
    mv = metavar(param)
    return ", ".join([*short, *long]) + (f" {mv}" if mv else "")


def _range(param: Any) -> str | None:
    try:
        if hasattr(param, "_get_number_range_help_str"):  # typer >= 0.20
            return param._get_number_range_help_str()
        describe = getattr(getattr(param, "type", None), "_describe_range", None)  # click's IntRange / FloatRange
        return describe() if describe is not None else None
    except Exception:  # noqa: BLE001 - a range we cannot describe is left out of the help, never an error
        return None


def options_panel(rich_utils: Any, *, name: str, params: list, ctx: Any, markup_mode: Any, console: Any) -> None:
    """The Arguments / Options panel: one row per parameter, its names whole (a required one marked
    ``*``), its help (typer's, with its default and ``[required]``) wrapped beside or below them."""
    if not params:
        return
    rows = [(names(p), p) for p in params]
    width = min(NAMES_WIDTH, max(len(n) for n, _ in rows)) + 1  # two spaces before the help
    star = any(getattr(p, "required", False) for p in params)
    blocks = []
    for text, p in rows:
        help_ = rich_utils._get_parameter_help(param=p, ctx=ctx, markup_mode=markup_mode)
        rng = _range(p)
        if rng:  # beside the default
            more = Text(f"[{rng}]", style="dim")
            if hasattr(help_, "add_renderable"):  # typer's help is rich Columns
                help_.add_renderable(more)
            else:  # pragma: no cover - another renderable: the range below it
                help_ = Group(help_, more)
        mark = Text("*" if getattr(p, "required", False) else " ", style="red") if star else None
        label = Text(text, style="bold cyan")
        grid = Table.grid(padding=(0, 1))
        if mark is not None:
            grid.add_column(width=1)
        if len(text) <= width:
            grid.add_column(width=width, no_wrap=True)
            grid.add_column(ratio=1)
            grid.add_row(*([mark] if mark is not None else []), label, help_)
            blocks.append(grid)
        else:  # long names on their own line, the help below them at the help column
            grid.add_column(ratio=1, no_wrap=True)
            grid.add_row(*([mark] if mark is not None else []), label)
            blocks += [grid, Padding(help_, (0, 0, 0, width + 1 + (2 if star else 0)))]
    console.print(Panel(Group(*blocks), border_style="dim", title=name, title_align="left"))


def install() -> None:
    """Lay out typer's options panels with :func:`options_panel` (typer's own help where its help
    module has another shape)."""
    try:
        from typer import rich_utils  # lazy: start-up time (typer's rich help, for help only)
    except ImportError:  # pragma: no cover - typer without rich: click's plain help, which fits
        return
    if not (callable(getattr(rich_utils, "_print_options_panel", None))
            and callable(getattr(rich_utils, "_get_parameter_help", None))):
        return  # pragma: no cover - another typer: its own layout

    def panel(*, name, params, ctx, markup_mode, console, **_: Any) -> None:
        options_panel(rich_utils, name=name, params=params, ctx=ctx, markup_mode=markup_mode, console=console)

    rich_utils._print_options_panel = panel
    from typer import core  # lazy: start-up time (loaded with typer already; kept beside its one use)

    if callable(getattr(core.TyperArgument, "_usage_display_name", None)):  # typer >= 0.20 writes {name}
        core.TyperArgument._usage_display_name = usage_name


def usage_name(param: Any) -> str:
    """An argument on the usage line as click writes it: ``STUDY`` (required), ``[NAME]``,
    ``RUN...``, ``[MODEL]...`` (typer >= 0.20 writes a required one ``{study_file}``)."""
    word = str(param.metavar or param.name.upper())
    word = word if param.required else f"[{word}]"
    return word + ("..." if param.nargs != 1 else "")
