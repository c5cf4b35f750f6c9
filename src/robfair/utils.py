"""Small shared helpers: devices, atomic files, allocator tuning (seeds: :mod:`robfair.seeding`)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import json
import math
import os
import signal
import stat
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from .errors import RobfairError, WriteError
from .parsing import MAX_NUMBER_CHARS, parse_eps, parse_number  # noqa: F401 - re-exported: the numbers users pass

#: bootstrap resamples a command may ask for (1e8 draws of a 10-class compare is 30 GiB)
MAX_BOOTSTRAP = 100_000
#: largest seed (numpy / torch accept 64 bits; beyond them the seed is an error deep in a run)
MAX_SEED = 2**63 - 1


def input_file(path: str | os.PathLike, what: str = "file", *, error: type[RobfairError] = RobfairError) -> Path:
    """The one door of every input robfair opens: ``path`` (``~`` expanded) when it is a regular file
    or a link to one. A FIFO, socket or device is a one-line ``error`` at once, so nothing ever blocks
    on a pipe or reads a device without end; FileNotFoundError and IsADirectoryError pass, as ``open``
    raises them (callers word them; the CLI's boundary says ``cannot access PATH: ...``). Only a
    ``stat``: nothing is opened."""
    p = Path(path).expanduser()
    st = p.stat()
    if stat.S_ISREG(st.st_mode):
        return p
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(p))
    kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a special file")
    raise error(f"{what} {p} is {kind}, not a regular file; pass a regular file")


def resolve_device(device: str | None = "auto"):
    """``auto`` -> cuda if available, else mps, else cpu. Anything else is passed to ``torch.device``."""
    import torch  # lazy: start-up time (`robfair --help` loads utils, not torch/numpy)

    if device is None or str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    text = str(device).strip()
    try:
        dev = torch.device(text)
    except (RuntimeError, TypeError, ValueError):
        raise RobfairError(f"device {text[:40]!r} is not a torch device; use auto, cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda", "mps", "xpu"):
        raise RobfairError(f"device {text[:40]!r} cannot run robfair; use auto, cpu, cuda or cuda:N")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RobfairError(f"device {text!r} was asked for but CUDA is not available; use --device cpu or auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise RobfairError(f"device {text!r}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                               f"(cuda:0 to cuda:{torch.cuda.device_count() - 1}); pick one of them or use auto")
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise RobfairError(f"device {text!r} was asked for but MPS (Apple GPU) is not available on this "
                               "machine; use --device cpu or auto")
    if dev.type == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise RobfairError(f"device {text!r} was asked for but no Intel XPU is available; use --device cpu or auto")
    return dev


def tune_allocator() -> bool:
    """Stop glibc from returning memory to the OS after every large free (it page-faults each step).

    M_MMAP_MAX=0, a large trim threshold and top pad. Measured 1.13-1.38x faster CPU training steps;
    numerics are untouched. Returns True when applied (glibc only)."""
    if not sys.platform.startswith("linux") or os.environ.get("ROBFAIR_NO_MALLOPT"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
    big = 1 << 30
    ok = libc.mallopt(M_MMAP_MAX, 0) == 1
    ok &= libc.mallopt(M_TRIM_THRESHOLD, big) == 1
    ok &= libc.mallopt(M_TOP_PAD, 256 << 20) == 1
    return bool(ok)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path`` (atomic on POSIX).
    On error the temporary file is removed and ``path`` is untouched; an OS error of the write (a
    full disk, a file-size limit, an I/O error) is a :class:`~robfair.errors.WriteError` naming ``path``.
    A Ctrl-C that lands where no ``finally`` can catch it (between ``mkstemp`` and the ``try``, or in
    the context manager's own exit) still leaves nothing: the file is made with signals held and
    registered, and :func:`remove_live_temps` (at exit, and the CLI's boundary) removes what is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with names_output(path, path.parent / f".{path.name}."):
        with signals_held():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            tmp_path = Path(tmp)
            _LIVE_TEMPS.add(tmp_path)
        try:  # mkstemp creates 0600; the result must honour the umask like any other new file
            os.fchmod(fd, 0o666 & ~_umask())
        finally:
            os.close(fd)
        try:
            yield tmp_path
            os.replace(tmp_path, path)
        finally:
            with signals_held():
                if tmp_path.exists():
                    tmp_path.unlink()
                _LIVE_TEMPS.discard(tmp_path)


#: the temporary files of :func:`atomic_path` still being written by this process
_LIVE_TEMPS: set[Path] = set()


def remove_live_temps() -> None:
    """Remove the temporary files of :func:`atomic_path` this process has not finished (an interrupt
    that landed outside their ``finally``); run at exit and by the CLI's boundary."""
    for p in list(_LIVE_TEMPS):
        try:
            p.unlink()
        except OSError:
            pass
        _LIVE_TEMPS.discard(p)


atexit.register(remove_live_temps)
if hasattr(os, "register_at_fork"):  # a forked worker's copies are its parent's files, not its own
    os.register_at_fork(after_in_child=_LIVE_TEMPS.clear)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the block is done (main thread; elsewhere nothing to hold)."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def names_output(path: str | os.PathLike, *inner: str | os.PathLike) -> Iterator[None]:
    """Around the writing of the output ``path`` through temporary files: an OS error that names no
    file (``write`` on a full disk names none) or one whose name starts with an ``inner`` prefix (the
    temporary files) is re-raised as a :class:`~robfair.errors.WriteError` naming ``path``, so the
    user reads the output they asked for. Errors naming other files (an input) pass unchanged."""
    prefixes = tuple(str(p) for p in inner)
    try:
        yield
    except WriteError as e:
        if not e.path.startswith(prefixes):
            raise
        raise WriteError(path, OSError(e.errno, e.strerror)) from None
    except OSError as e:
        if e.filename is not None and not str(e.filename).startswith(prefixes):
            raise
        raise WriteError(path, e) from None


def _umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def to_jsonable(obj: Any, *, strict: bool = True) -> Any:
    """The one JSON sanitizer: plain JSON types from dicts (keys become strings), lists, tuples,
    numpy arrays and scalars, tensors (anything with ``detach``/``tolist``, no torch import) and
    paths (strings). ``strict``: NaN and infinities become ``None`` so the output is strict JSON;
    otherwise they stay floats. Other objects are returned unchanged."""
    import numpy as np  # lazy: start-up time (`robfair --help` loads utils, not torch/numpy)

    if isinstance(obj, dict):
        return {str(k): to_jsonable(v, strict=strict) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, strict=strict) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if not strict or math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "detach") and hasattr(obj, "tolist"):  # a torch tensor, on any device
        return to_jsonable(obj.detach().cpu().tolist(), strict=strict)
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist(), strict=strict)
    return obj


def _json_default(o: Any) -> Any:
    """``json.dumps`` hook of :func:`write_json`: :func:`to_jsonable` (non-strict) of what json cannot write."""
    out = to_jsonable(o, strict=False)
    if out is o:
        raise TypeError(f"not JSON serializable: {type(o).__name__}")
    return out
