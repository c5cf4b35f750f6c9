"""The ``robfair`` command line (typer + rich). Library code never prints; this layer does.

One module per command group: ``app`` (audit, demo, listings), ``train``, ... each adds its
commands to the shared typer ``app``. Every user error is a :class:`robfair.errors.RobfairError`:
printed as one line, exit code 2, and no output file is left half-written.
"""

from __future__ import annotations

import logging
import sys
from typing import Optional

try:  # typer >= 0.20 bundles its own click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_exc

from rich.markup import escape

from ..errors import RobfairError
from ..utils import tune_allocator
from .app import app, err_console

# Command modules register themselves on `app` when imported.
from . import train as _train  # noqa: F401,E402
from . import study as _study  # noqa: F401,E402
from . import theory as _theory  # noqa: F401,E402
from . import certify as _certify  # noqa: F401,E402

__all__ = ["app", "main"]


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point: tune the allocator, run the command, turn user errors into exit code 2."""
    tune_allocator()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="robfair")
    except RobfairError as e:
        err_console.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except click_exc.UsageError as e:
        msg = e.format_message().replace("\n", " ")
        hint = f" (see `robfair {e.ctx.info_name} --help`)" if e.ctx is not None and e.ctx.info_name != "robfair" else " (see `robfair --help`)"
        err_console.print(f"[red]error:[/red] {escape(msg)}{escape(hint)}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except click_exc.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
