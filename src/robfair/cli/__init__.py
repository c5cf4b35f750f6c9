"""The ``robfair`` command line (typer + rich). Library code never prints; this layer does.

One module per command group: ``audit``, ``demo`` (with the listings), ``train``, ... each adds its
commands to the shared typer ``app`` (``app.py``: the app, consoles, progress); ``options.py`` holds
the options several commands share.

The error boundary (:func:`main`): every failure ends in exactly one line on stderr, never a
traceback on the terminal, and no output file is left half-written (files are written atomically, a
result of several files as one :class:`robfair.safeio.ResultSet`); the outputs a command claimed
(:func:`robfair.safeio.claim_outputs`) are given back when it ends, however it ends:

- a :class:`robfair.errors.RobfairError` (bad input), a usage error, an OS error on an input or
  output (permission denied, a path below a file, a read-only or full disk), a file that cannot be
  decoded: ``error: ...`` naming the problem and the fix, exit code 2;
- Ctrl-C: ``interrupted ...`` with the command that resumes (or re-runs) it, exit code 130;
- anything else is a bug: ``internal error ...`` naming a log file that holds the traceback, exit 1.

Lazy imports: start-up time. Every import of the library inside a command function of this package
(``robfair.cli.*``) is lazy so that ``robfair --help`` and a mistyped command load no torch, numpy,
scipy, scikit-learn, pandas or matplotlib (tests/cli/test_startup.py; benchmarks/bench_startup.py);
the rest of the package imports at module top, except the lines marked ``# lazy:`` with their reason.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Optional

try:  # typer >= 0.20 bundles its own click (without Abort: typer defines it)
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_exc
try:
    from typer import Abort as _Abort
except ImportError:  # pragma: no cover
    _Abort = getattr(click_exc, "Abort", None)

from rich.markup import escape

from ..errors import RobfairError, os_fix
from ..safeio import release_claims
from ..utils import remove_live_temps, tune_allocator
from .app import RESUME_FROM, app, err_console

# Command modules register themselves on `app` when imported (in the order --help lists them).
from . import audit as _audit  # noqa: F401,E402
from . import demo as _demo  # noqa: F401,E402
from . import train as _train  # noqa: F401,E402
from . import study as _study  # noqa: F401,E402
from . import theory as _theory  # noqa: F401,E402
from . import certify as _certify  # noqa: F401,E402
from . import leaderboard as _leaderboard  # noqa: F401,E402
from . import doctor as _doctor  # noqa: F401,E402
from . import fix as _fix  # noqa: F401,E402

__all__ = ["app", "main", "error_line"]

#: exit codes of the boundary
EXIT_USER, EXIT_BUG, EXIT_INTERRUPTED = 2, 1, 130
_ABORTS = tuple(c for c in (_Abort, getattr(click_exc, "Abort", None)) if isinstance(c, type))


def os_error_line(e: OSError) -> str:
    """One line for an OS error on an input or output: what, which path, and the fix."""
    what = e.strerror or type(e).__name__
    where = f" {e.filename}" if e.filename is not None else ""
    if getattr(e, "filename2", None) is not None:
        where += f" -> {e.filename2}"
    return f"cannot access{where}: {what}; {os_fix(e.errno)}"


class _Interrupt:
    """SIGINT handler that remembers the interrupt (typer turns KeyboardInterrupt into a silent exit
    code 130 in non-standalone mode; the boundary needs to know it was Ctrl-C to say so).

    The first Ctrl-C raises KeyboardInterrupt; a second one while the command winds down (a sweep
    giving its claims back, a checkpoint being closed) is ignored so the clean-up is never cut
    short; a third one ends the process at once."""

    def __init__(self) -> None:
        self.presses = 0

    @property
    def hit(self) -> bool:
        return self.presses > 0

    def __call__(self, signum: int, frame) -> None:
        self.presses += 1
        if self.presses == 1:
            signal.default_int_handler(signum, frame)
        elif self.presses >= 3:
            os._exit(EXIT_INTERRUPTED)


def _resume_hint(argv: list[str], checkpoint: Path | None = None) -> str:
    """What to type to continue: train resumes from last.pt, certify from its partial file, a sweep
    skips what is done, the rest re-run. A checkpoint is named only when ``checkpoint`` (the file the
    command said it resumes from) exists: an interrupt before the first one is written says so."""
    cmd = next((a for a in argv if not a.startswith("-")), "")
    line = ["robfair", *argv]
    kept = checkpoint is not None and Path(checkpoint).is_file()
    if cmd == "train":
        if "--resume" not in argv:
            line.append("--resume")
        if kept:
            return f"interrupted; the run keeps its finished epochs (in {checkpoint}) - resume with: {shlex.join(line)}"
        return ("interrupted before the first epoch was saved, so there is no checkpoint yet - start it again "
                f"with: {shlex.join(line)}")
    if cmd == "certify" and kept:
        return (f"interrupted; the certified samples are kept in the checkpoint {checkpoint} - resume with: "
                f"{shlex.join(line)}")
    if cmd == "certify" and ("--out" in argv or "-o" in argv or any(a.startswith("--out=") for a in argv)):
        return ("interrupted before the first samples were certified, so no checkpoint was written - run it again "
                f"with: {shlex.join(line)}")
    if cmd == "demo":
        return (f"interrupted; the run folders finished so far are kept - delete --out (or pick another) and run "
                f"again: {shlex.join(line)}")
    if cmd == "sweep":
        return (f"interrupted; finished runs are kept and interrupted ones resume - continue with: "
                f"{shlex.join(line)}")
    return f"interrupted; nothing was written - run it again with: {shlex.join(line)}"


def _interrupt_line(argv: list[str]) -> str:
    return _resume_hint(argv, RESUME_FROM[0] if RESUME_FROM else None)


def _log_dir() -> Path:
    return Path(os.environ.get("ROBFAIR_LOG_DIR") or tempfile.gettempdir())


def write_crash_log(exc: BaseException, argv: list[str]) -> Path | None:
    """Write the traceback of an unexpected exception to a log file; return its path (None if not writable)."""
    from .. import __version__

    name = f"robfair-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        d = _log_dir()
        d.mkdir(parents=True, exist_ok=True)
        path = d / name
        with open(path, "w") as f:
            f.write(f"robfair {__version__}, python {sys.version.split()[0]}\n")
            f.write(f"command: {shlex.join(['robfair', *argv])}\n\n")
            f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return path
    except OSError:
        return None


def error_line(exc: BaseException) -> tuple[str, int] | None:
    """The one line and exit code of an expected failure, None for a bug."""
    import json
    import pickle
    import zipfile

    if isinstance(exc, RobfairError):
        return str(exc), EXIT_USER
    if isinstance(exc, click_exc.UsageError):
        msg = exc.format_message().replace("\n", " ")
        ctx = exc.ctx
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else " (see `robfair --help`)"
        return msg + hint, EXIT_USER
    if isinstance(exc, click_exc.ClickException):
        return exc.format_message().replace("\n", " "), EXIT_USER
    if isinstance(exc, OSError):
        return os_error_line(exc), EXIT_USER
    if isinstance(exc, UnicodeDecodeError):
        return (f"an input is not text in the expected encoding ({exc.encoding}: {exc.reason}); "
                "check that the files passed are the right ones and not binary or damaged"), EXIT_USER
    if isinstance(exc, (json.JSONDecodeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError)):
        return (f"an input file is truncated or not in the expected format ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:160] if str(exc) else ''}); check the paths passed or re-create the file"), EXIT_USER
    try:
        import yaml

        if isinstance(exc, yaml.YAMLError):
            return "a YAML input is not valid YAML; fix its syntax", EXIT_USER
    except ImportError:  # pragma: no cover
        pass
    if isinstance(exc, MemoryError):
        return "out of memory; use a smaller --batch-size or fewer samples / bootstrap draws", EXIT_USER
    return None


def _say(line: str, *, kind: str = "error") -> None:
    """Print one line to stderr (never wrapped: a machine reading it gets one line)."""
    prefix = {"error": "[red]error:[/red] ", "internal": "[red]internal error:[/red] ", "plain": ""}[kind]
    try:
        err_console.print(prefix + escape(" ".join(line.split())), highlight=False, soft_wrap=True)
    except Exception:  # pragma: no cover - stderr itself is broken
        pass


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point: tune the allocator, run the command, turn every failure into one line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tune_allocator()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if "--help" in argv or sum(not a.startswith("-") for a in argv) <= 1:  # help may be printed (`robfair`,
        from .helpfmt import install  # lazy: start-up time (typer's rich help module, ~30 ms, for help only)

        install()  # `robfair theory`, `X --help`): its options laid out to fit 80 columns
    interrupt = _Interrupt()
    RESUME_FROM.clear()  # set again by the command that runs now
    in_main = __import__("threading").current_thread() is __import__("threading").main_thread()
    old_handler = signal.signal(signal.SIGINT, interrupt) if in_main else None
    code = 0
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="robfair")
        code = rv if isinstance(rv, int) else 0
        if interrupt.hit and code == EXIT_INTERRUPTED:  # typer turned our KeyboardInterrupt into Exit(130)
            _say(_interrupt_line(argv), kind="plain")
    except KeyboardInterrupt:
        _say(_interrupt_line(argv), kind="plain")
        code = EXIT_INTERRUPTED
    except _ABORTS:  # typer's Abort (EOF on a prompt, ...)
        _say(_interrupt_line(argv), kind="plain")
        code = EXIT_INTERRUPTED
    except BrokenPipeError:  # `robfair ... | head`: the reader went away; say nothing
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        code = EXIT_BUG
    except SystemExit:
        raise
    except click_exc.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # plain `robfair`: the help is printed; nothing is wrong
            code = 0
        else:
            _say(error_line(e)[0])
            code = EXIT_USER
    except BaseException as e:  # noqa: BLE001 - the boundary: everything ends here
        known = error_line(e)
        if known is not None:
            _say(known[0])
            code = known[1]
        else:
            log = write_crash_log(e, argv)
            err_console.quiet = False  # a bug is said on every rank of a torchrun command, quiet or not
            where = f"the traceback is in {log}" if log else "the traceback could not be written to a log file"
            first = str(e).splitlines()[0][:200] if str(e) else ""
            _say(f"{type(e).__name__}{': ' + first if first else ''}; this is a bug in robfair - {where}; "
                 "please report it with that file", kind="internal")
            code = EXIT_BUG
    finally:
        remove_live_temps()  # an atomic write an interrupt cut where its own clean-up could not run
        release_claims()  # the outputs this command claimed (lock files; a folder made for one and left empty)
        if in_main:  # after an interrupt, further presses must not turn the exit into a traceback
            signal.signal(signal.SIGINT, signal.SIG_IGN if interrupt.hit else old_handler)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
