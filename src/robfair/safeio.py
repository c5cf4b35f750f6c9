"""Bounded, hostile-input-safe file handling shared by every command.

- :func:`input_file`: the one door of every input (models, audit.json, outcomes.npz, examples.npz,
  configs, metrics.jsonl, data files): a regular file, or a one-line error at once (a FIFO named
  ``outcomes.npz`` never blocks, ``--model /dev/zero`` is never read). It lives in
  :mod:`robfair.utils`, so the ground floor (:mod:`robfair.runfolder`) reads through it too;
- :func:`read_text_capped` / :func:`read_bytes_capped`: read a regular file up to a size limit
  (a 50 GB "config" never reads forever).
- :func:`load_yaml` / :func:`yaml_loads`: the one YAML loader: ``yaml.safe_load`` (no Python
  objects) behind a size cap, with aliases limited: a document whose aliases expand to more than
  :data:`YAML_MAX_ITEMS` values (a "billion laughs" bomb) or refer to themselves is refused.
- :func:`check_output_file` / :func:`check_output_dir`: the output guard every writing command
  calls *before* it computes anything: the location must be creatable and writable, and a run's
  results are never overwritten unless the user asks (``--overwrite``); with ``claim=True`` the
  output is also claimed for this process (:func:`claim_outputs`) and checked again under the claim.
- :func:`claim_outputs` / :class:`Claim`: exclusive claims of output paths (a lock file, ``flock``),
  taken before the computation: a second robfair process writing the same output is refused in one
  line naming the first, ``--overwrite`` or not.
- :class:`ResultSet`: a result of several files written whole or not at all (staged beside their
  places, moved in together, the primary last, the old set kept on any failure).
- What a run folder is and which of its files are results (``RUN_FILES``, :func:`is_run_folder`,
  :func:`holds_results`) and :func:`remove_orphan_temps` come from :mod:`robfair.runfolder`.

Why one module: every read of an input and write of an output goes through one door
(capped reads, the output guard, claims, result sets), and they share the locking.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from .errors import ConfigError, RobfairError, WriteError
from .runfolder import CHECKPOINTS_DIR, RUN_FILES, RUN_MARKERS, holds_results, is_run_folder, is_study_folder
from .utils import _umask, input_file, names_output, signals_held

__all__ = ["input_file", "read_bytes_capped", "read_text_capped", "read_json", "yaml_loads", "load_yaml",
           "check_output_file", "check_output_dir", "claim_outputs", "release_claims", "Claim", "ResultSet",
           "lock_file", "file_digest", "matches_digest"]

log = logging.getLogger(__name__)

#: text inputs (configs, studies, run files, JSON results) larger than this are refused
MAX_TEXT_BYTES = 32 << 20
#: values a YAML document may hold once its aliases are expanded
YAML_MAX_ITEMS = 200_000


# ================================================================================ capped reads
def read_bytes_capped(path: str | os.PathLike, what: str = "file", *, limit: int = MAX_TEXT_BYTES,
                      error: type[RobfairError] = RobfairError) -> bytes:
    """The bytes of the regular file ``path``; ``error`` (one line) when it is not a regular file
    (:func:`input_file`) or larger than ``limit`` bytes (FileNotFoundError / IsADirectoryError as
    ``open``). Reads at most ``limit + 1`` bytes whatever the file claims."""
    p = input_file(path, what, error=error)
    with open(p, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise error(f"{what} {p} is larger than {limit >> 20} MiB; pass the right file")
    return data


def read_text_capped(path: str | os.PathLike, what: str = "file", *, limit: int = MAX_TEXT_BYTES,
                     error: type[RobfairError] = RobfairError) -> str:
    """:func:`read_bytes_capped` decoded as UTF-8 (one-line ``error`` when it is not text)."""
    data = read_bytes_capped(path, what, limit=limit, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} {Path(path).expanduser()} is not UTF-8 text (a binary file?); pass the right file") from None


def read_json(path: str | os.PathLike, what: str = "file", *, error: type[RobfairError] = RobfairError,
              limit: int = MAX_TEXT_BYTES) -> Any:
    """A JSON file read with :func:`read_text_capped`; ``error`` (one line) when it is truncated,
    not JSON, not text or nested deeper than Python can parse. FileNotFoundError passes."""
    text = read_text_capped(path, what, limit=limit, error=error)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise error(f"{what} {Path(path).expanduser()} is truncated or not JSON") from None


# ================================================================================ YAML
def _expanded_size(obj: Any, limit: int) -> int:
    """How many values ``obj`` holds with shared (aliased) containers counted once per use; raises
    ValueError on a reference cycle and stops counting past ``limit``. Linear in the distinct nodes."""
    memo: dict[int, int] = {}
    active: set[int] = set()

    def size(o: Any) -> int:
        if not isinstance(o, (dict, list, tuple, set)):
            return 1
        key = id(o)
        if key in memo:
            return memo[key]
        if key in active:
            raise ValueError("cycle")
        active.add(key)
        total = 1
        items: Iterable[Any] = (v for kv in o.items() for v in kv) if isinstance(o, dict) else o
        for v in items:
            total += size(v)
            if total > limit:
                break
        active.discard(key)
        memo[key] = total
        return total

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20_000))
    try:
        return size(obj)
    except RecursionError:
        raise ValueError("too deep") from None
    finally:
        sys.setrecursionlimit(old)


def read_yaml_file(path: str | os.PathLike, what: str, *, missing: str = "check the path",
                   folder: str = "pass a .yaml file") -> Any:
    """The one YAML file reader (study files, training configs): :func:`yaml_loads` of the capped text,
    every failure one :class:`ConfigError` line naming ``what``, the file and the fix (a missing file:
    ``missing``; a folder: ``folder``; a syntax error: its line)."""
    p = Path(path).expanduser()
    try:
        return yaml_loads(read_text_capped(p, what, error=ConfigError), f"{what} {str(p)!r}")
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(p)!r} does not exist; {missing}") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {str(p)!r} is a folder; {folder}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"{what} {str(p)!r} is not valid YAML{at}; fix the syntax") from None


def yaml_loads(text: str, what: str = "YAML", *, error: type[RobfairError] = ConfigError,
               max_items: int = YAML_MAX_ITEMS) -> Any:
    """``yaml.safe_load(text)`` with the alias limits; YAML syntax errors are ``yaml.YAMLError``
    (callers name the file and line), alias bombs and cycles a one-line ``error``."""
    if len(text) > MAX_TEXT_BYTES:
        raise error(f"{what} is larger than {MAX_TEXT_BYTES >> 20} MiB; pass the right file")
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise error(f"{what} is nested too deeply; write a flat mapping of keys to values") from None
    try:
        n = _expanded_size(data, max_items)
    except ValueError as e:
        why = "refers to itself through an alias" if str(e) == "cycle" else "is nested too deeply"
        raise error(f"{what} {why}; write the values out instead of using recursive anchors (&) and aliases (*)") from None
    if n > max_items:
        raise error(f"{what} expands to more than {max_items} values through its aliases (&/* - a 'billion laughs' "
                    "file?); write the values out or use fewer aliases")
    return data


def load_yaml(path: str | os.PathLike, what: str = "YAML file", *, error: type[RobfairError] = ConfigError) -> Any:
    """Read a YAML file (capped, see :func:`read_text_capped`) and parse it with :func:`yaml_loads`.
    FileNotFoundError / IsADirectoryError and ``yaml.YAMLError`` pass (callers name the file and line)."""
    text = read_text_capped(path, what, error=error)
    return yaml_loads(text, f"{what} {Path(path).expanduser()}", error=error)


# ================================================================================ output guard
def _check_creatable(path: Path, what: str) -> None:
    """``path`` (file or folder, existing or not) can be created/written: no file on the way to it,
    and the closest existing folder is writable."""
    anc = path if path.is_dir() else path.parent
    while not anc.exists():
        if anc.is_symlink():
            raise ConfigError(f"{what} {path}: {anc} is a broken symbolic link; fix it or choose another path")
        anc = anc.parent
    if not anc.is_dir():
        raise ConfigError(f"{what} {path} cannot be created: {anc} is a file, not a folder; choose another path")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {path} cannot be written: {anc} is not writable (permission denied or a "
                          "read-only file system); choose another path")


def check_output_file(path: str | os.PathLike, what: str = "--out", *, overwrite: bool = False,
                      suffixes: tuple[str, ...] | None = None, run_owned: bool = False,
                      alt: str | None = None, claim: bool = False) -> Path:
    """Check an output file before any computation (ConfigError, one line, when it cannot be used).

    Refused: a path below a file or in an unwritable folder, an existing folder or non-regular file
    (``/dev/full``), a wrong suffix, an existing file unless ``overwrite``, and any file a run folder
    owns (``RUN_FILES``, ``checkpoints/``) unless ``run_owned`` (the caller writes that very file
    of that very run) and ``overwrite``. ``claim``: then claim it (:func:`claim_outputs`) and check
    again, so a writer that finished in between is not overwritten."""
    kw = dict(overwrite=overwrite, suffixes=suffixes, run_owned=run_owned, alt=alt)
    p = _check_output_file(path, what, **kw)
    if claim:
        claim_outputs([p], what)
        _check_output_file(p, what, **kw)
    return p


def _check_output_file(path: str | os.PathLike, what: str, *, overwrite: bool, suffixes: tuple[str, ...] | None,
                       run_owned: bool, alt: str | None) -> Path:
    p = Path(path).expanduser()
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise ConfigError(f"{what} {p} must end in {' or '.join(suffixes)}")
    if p.is_dir():
        raise ConfigError(f"{what} {p} is a folder; pass a file name inside it")
    if p.exists() and not p.is_file():
        raise ConfigError(f"{what} {p} is not a regular file (a device or pipe); choose a file path")
    _check_creatable(p, what)
    parent = p.parent
    if is_run_folder(parent) and (p.name in RUN_FILES or parent.name == CHECKPOINTS_DIR):
        if run_owned and not overwrite:
            raise ConfigError(f"{what} {p} is the result of the run in {parent}; pass --overwrite to replace it with "
                              f"this audit of the same checkpoint and split, or write elsewhere, e.g. {what} {alt}")
        if not run_owned:
            alt = alt or str(parent / f"{p.stem}-2{p.suffix}")
            raise ConfigError(f"{what} {p} is a result of the run in {parent}; it is never replaced by another "
                              f"command - write elsewhere, e.g. {what} {alt}")
    if parent.name == CHECKPOINTS_DIR and is_run_folder(parent.parent):
        raise ConfigError(f"{what} {p} is inside the checkpoints of the run in {parent.parent}; write elsewhere")
    if p.exists() and not overwrite:
        raise ConfigError(f"{what} {p} already exists; pass --overwrite to replace it, or choose another path")
    return p


def check_output_dir(path: str | os.PathLike, what: str = "--out", *, overwrite: bool = False,
                     allow: str | None = None, fix: str = "pass --overwrite to replace them, or choose another folder",
                     claim: bool = False) -> Path:
    """Check an output folder before any computation. Refused: a path below a file, an existing
    file, an unwritable location, and a folder that already holds results unless ``overwrite``.
    ``allow``: ``"study"`` lets a sweep continue in its own study folder, ``"run"`` lets ``train
    --resume`` continue a run folder. ``claim``: then claim the folder, written in place (its lock
    file inside it; the folder is made, and removed again if nothing is written), and check again."""
    kw = dict(overwrite=overwrite, allow=allow, fix=fix)
    p = _check_output_dir(path, what, **kw)
    if claim:
        claim_outputs([p], what, inside=True)
        _check_output_dir(p, what, **kw)
    return p


def _check_output_dir(path: str | os.PathLike, what: str, *, overwrite: bool, allow: str | None, fix: str) -> Path:
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{what} {p} is a file, not a folder; choose a folder path")
    _check_creatable(p, what)
    if not p.exists() or overwrite:
        return p
    if allow == "study":
        if is_run_folder(p):
            raise ConfigError(f"{what} {p} holds a single run (it has {'/'.join(m for m in RUN_MARKERS if (p / m).exists())}), "
                              "not a study; choose another --out for the sweep")
        return p
    if allow == "run":
        if is_study_folder(p):
            raise ConfigError(f"{what} {p} is a study folder (it has an index of runs); pass one of its run folders")
        return p
    if holds_results(p):
        raise ConfigError(f"{what} {p} already holds results; {fix}")
    return p


# ================================================================================ claims
#: the lock file of a claimed output: ``.NAME.robfair-lock`` beside a file (or a folder replaced
#: whole), ``.robfair-lock`` inside a folder a command writes in place (a run folder, a demo)
LOCK_NAME = ".robfair-lock"
#: this process's claims: lock file -> [its descriptor, times claimed] (a claim is re-entrant)
_HELD: dict[str, list[int]] = {}
#: the claims :func:`release_claims` gives back (every :class:`Claim` not released yet)
_OPEN: list["Claim"] = []


def _forget_claims() -> None:
    """In a forked child: the parent's claims are not the child's (its copies of the descriptors are
    left open; closing them would release nothing and unlinking would take the parent's lock files)."""
    _HELD.clear()
    _OPEN.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_claims)


def lock_file(path: str | os.PathLike, *, inside: bool = False) -> Path:
    """The lock file that claims ``path`` (see :data:`LOCK_NAME`); folders on the way are resolved,
    so two spellings of one place (a symbolic link to a folder, ``..``) share one claim."""
    p = Path(os.path.abspath(Path(path).expanduser()))
    if inside:
        return Path(os.path.realpath(p)) / LOCK_NAME
    return Path(os.path.realpath(p.parent)) / f".{p.name}{LOCK_NAME}"


def _holder(fd: int) -> str:
    """Who holds a lock file, from what its holder wrote in it: ``pid N, started T`` (and the host)."""
    try:
        rec = json.loads(os.pread(fd, 4096, 0).decode("utf-8", errors="replace") or "{}")
    except (OSError, ValueError):
        rec = {}
    if not isinstance(rec, dict) or "pid" not in rec:
        return "pid unknown"
    host = "" if rec.get("host") in (None, socket.gethostname()) else f" on {rec['host']}"
    since = f", started {rec['since']}" if rec.get("since") else ""
    return f"pid {rec['pid']}{host}{since}"


def _busy(what: str, path: Path, holder: str) -> ConfigError:
    option = what.split()[0] if what.startswith("-") else "output path"
    return ConfigError(f"{what} {path} is being written by another robfair process ({holder}); wait for it to "
                       f"finish or choose another {option}")


def _lock(lock: Path, what: str, path: Path) -> int:
    """Take the exclusive lock of ``lock`` (made if missing) and write this process into it; a
    one-line ConfigError naming the holder when another process has it. The kernel drops the lock
    of a process that dies, however it dies: a lock file left behind holds nothing."""
    for _ in range(20):
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise _busy(what, path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        try:  # the holder before us may have removed the file since we opened it (and another made it anew)
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            rec = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                   "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:2]])[:200]}
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, (json.dumps(rec) + "\n").encode(), 0)
            except OSError:  # a full disk: the lock holds all the same, only its holder reads as unknown
                pass
            return fd
        os.close(fd)
    raise _busy(what, path, "its lock file keeps changing")  # pragma: no cover


def _made_folders(folder: Path) -> list[Path]:
    """Make ``folder`` and the missing folders above it; the ones made, outermost first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            pass
    return list(reversed(missing))


def _remove_leftovers(path: Path) -> None:
    """The temporaries a killed writer of ``path`` left beside it (``.NAME.XXXX.tmp`` files of
    :func:`robfair.utils.atomic_path`, ``.NAME.set-XXXX.tmp`` folders of :class:`ResultSet`): whoever
    wrote them held this claim, so they are no one's now."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(set-)?[a-z0-9_]+\.tmp")
    for p in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if not pattern.fullmatch(p.name):
            continue
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        except OSError:
            pass


class Claim:
    """This process's exclusive claims of output paths, from before the computation to the last
    file written (:func:`claim_outputs`). A second robfair process that claims one of them is
    refused in one line naming the holder, ``--overwrite`` or not; within one process a claim is
    re-entrant. :meth:`release` gives them back (removing the lock files and the folders made for
    them, when empty)."""

    def __init__(self) -> None:
        self.locks: list[str] = []
        self.made: list[Path] = []
        _OPEN.append(self)

    def add(self, paths: Iterable[str | os.PathLike | None], what: str = "output", *,
            inside: bool = False) -> "Claim":
        """Claim each path (None skipped); ``inside``: folders written in place (the lock file inside them)."""
        for path in paths:
            if path is None:
                continue
            p = Path(os.path.abspath(Path(path).expanduser()))
            lock = lock_file(p, inside=inside)
            key = str(lock)
            if key in _HELD:
                _HELD[key][1] += 1
            else:
                try:
                    self.made += _made_folders(lock.parent)
                    _HELD[key] = [_lock(lock, what, Path(path).expanduser()), 1]
                except OSError as e:  # an unwritable or full place: named by the output, not its lock file
                    raise WriteError(Path(path).expanduser(), e) from None
                if not inside:
                    _remove_leftovers(p)
            self.locks.append(key)
        return self

    def release(self) -> None:
        while self.locks:
            key = self.locks.pop()
            held = _HELD.get(key)
            if held is None:
                continue
            held[1] -= 1
            if held[1] <= 0:
                del _HELD[key]
                try:  # removed while still locked, so no other process takes a lock on a file about to go
                    os.unlink(key)
                except OSError:
                    pass
                os.close(held[0])
        for d in reversed(self.made):
            try:
                d.rmdir()
            except OSError:
                pass
        self.made = []
        if self in _OPEN:
            _OPEN.remove(self)

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def claim_outputs(paths: Iterable[str | os.PathLike | None], what: str = "output", *, inside: bool = False) -> Claim:
    """Claim output paths for this process before anything is computed (:class:`Claim`); nothing
    stays claimed when one of them is refused. Released by ``Claim.release`` or, for the CLI, at
    the end of the command (:func:`release_claims`)."""
    claim = Claim()
    try:
        return claim.add(paths, what, inside=inside)
    except BaseException:
        claim.release()
        raise


def release_claims() -> None:
    """Give back every claim this process still holds (the CLI's boundary at the end of a command,
    and any process at exit)."""
    for claim in list(reversed(_OPEN)):
        claim.release()


atexit.register(release_claims)


# ================================================================================ result sets
def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a file, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def matches_digest(path: str | os.PathLike, record: Any) -> bool:
    """``path`` is the file a manifest entry (``{"sha256": ..., "bytes": ...}``, see
    :meth:`ResultSet.digest`) describes."""
    try:
        return (isinstance(record, dict) and Path(path).stat().st_size == record.get("bytes")
                and file_digest(path) == record.get("sha256"))
    except OSError:
        return False


class ResultSet:
    """The files of one result, written whole or not at all (docs/architecture.md, "Nothing is lost").

        with ResultSet() as rs:                      # claims each member as it is added
            with rs.file("out/x.outcomes.npz") as tmp:
                write(tmp)                           # tmp is in a staging folder beside the file
            rs.remove("out/x.examples.npz")         # an old member this result has none of
            with rs.folder("out/x_tables") as d:    # a folder replaced whole
                write_csvs(d)
            with rs.file("out/x.json", last=True) as tmp:
                write(tmp)                           # the primary, moved into place after the others
        # leaving the block moves every member into place (commit); an error removes the staging
        # folders and leaves whatever was there before untouched

    Each member is staged in a ``.NAME.set-XXXX.tmp`` folder beside its final place (same file
    system, so moving it in is a rename). :meth:`commit` moves them in, the ``last`` ones after
    the others, with Ctrl-C and SIGTERM held back; each file is replaced atomically (a reader sees
    the old or the new file, never a mix), and if a move fails the members already moved are put
    back (the old files were hard-linked aside first). Only a hard kill (SIGKILL, power loss)
    between two renames can leave old and new members side by side, which is why the primary is
    last and records its members' digests (:meth:`digest`) for its readers to check. An OS error
    while writing a member is a :class:`~robfair.errors.WriteError` naming that member."""

    def __init__(self) -> None:
        self._items: list[tuple[str, Path, Path | None, bool]] = []  # (kind, final, staged, last)
        self._stages: dict[Path, Path] = {}
        self._claim = Claim()

    def __enter__(self) -> "ResultSet":
        return self

    def __exit__(self, typ: Any, *exc: Any) -> None:
        if typ is None:
            self.commit()
        else:
            self.discard()

    # ---------------------------------------------------------------- staging
    def _member(self, path: str | os.PathLike) -> tuple[Path, Path]:
        """Claim a member: (its final path, where it is staged)."""
        final = Path(os.path.abspath(Path(path).expanduser()))
        self._claim.add([final])
        self._items = [i for i in self._items if i[1] != final]
        folder = final.parent
        if folder not in self._stages:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                self._stages[folder] = Path(tempfile.mkdtemp(prefix=f".{final.name}.set-", suffix=".tmp", dir=folder))
            except OSError as e:
                raise WriteError(final, e) from None
        return final, self._stages[folder] / final.name

    def file(self, path: str | os.PathLike, *, last: bool = False) -> contextlib.AbstractContextManager[Path]:
        """Write one member: yields the staging path to write it to."""
        return self._write(path, "file", last)

    def folder(self, path: str | os.PathLike, *, last: bool = False) -> contextlib.AbstractContextManager[Path]:
        """A member that is a folder, replaced whole: yields an empty staging folder to fill."""
        return self._write(path, "dir", last)

    @contextlib.contextmanager
    def _write(self, path: str | os.PathLike, kind: str, last: bool) -> Iterator[Path]:
        final, staged = self._member(path)
        with names_output(final, staged.parent):
            if kind == "dir":
                staged.mkdir()
                os.chmod(staged, 0o777 & ~_umask())
            yield staged
        if kind == "file" and not staged.is_file():
            raise RuntimeError(f"the writer of {final} wrote nothing to {staged}")
        self._items.append((kind, final, staged, last))

    def remove(self, path: str | os.PathLike) -> None:
        """A file this result has none of: deleted when the set is committed (an old member would
        not match the new ones)."""
        final, _ = self._member(path)
        self._items.append(("remove", final, None, False))

    def digest(self, path: str | os.PathLike) -> dict[str, Any]:
        """``{"sha256": ..., "bytes": ...}`` of a staged file member, for the primary's manifest."""
        final = Path(os.path.abspath(Path(path).expanduser()))
        staged = next(s for kind, f, s, _ in self._items if f == final and kind == "file")
        return {"sha256": file_digest(staged), "bytes": staged.stat().st_size}

    # ---------------------------------------------------------------- commit
    def _set_aside(self, kind: str, final: Path) -> tuple[Path | None, bool]:
        """Keep the old ``final`` in the staging folder until the set is in place: (where, existed).
        A file is hard-linked (it stays in place until the new one replaces it atomically); a
        folder, and a file to remove, is moved."""
        if not os.path.lexists(final):
            return None, False
        backup = self._stages[final.parent] / f".old.{final.name}"
        if kind == "file":
            try:
                os.link(final, backup, follow_symlinks=False)
            except OSError:  # no hard links here (FAT, some network file systems): replaced without a way back
                return None, True
        else:
            os.rename(final, backup)
        return backup, True

    def commit(self) -> list[Path]:
        """Move every member into place, the ``last`` ones after the others; on a failure put back
        what was moved and raise a :class:`~robfair.errors.WriteError` naming the member. Returns
        the paths written."""
        order = [i for i in self._items if not i[3]] + [i for i in self._items if i[3]]
        done: list[tuple[str, Path, Path | None, bool]] = []
        with signals_held():
            try:
                for kind, final, staged, _ in order:
                    try:
                        old, existed = self._set_aside(kind, final)
                    except OSError as e:
                        raise WriteError(final, e) from None
                    try:
                        if kind == "file":
                            os.replace(staged, final)
                        elif kind == "dir":
                            os.rename(staged, final)
                    except OSError as e:
                        if kind == "dir" and old is not None:
                            os.rename(old, final)
                        raise WriteError(final, e) from None
                    done.append((kind, final, old, existed))
            except BaseException:
                self._undo(done)
                self.discard()
                raise
            self.discard()
        return [final for kind, final, _, _ in order if kind != "remove"]

    @staticmethod
    def _undo(done: list[tuple[str, Path, Path | None, bool]]) -> None:
        for kind, final, old, existed in reversed(done):
            try:
                if kind == "dir":
                    shutil.rmtree(final)
                if old is not None:
                    os.replace(old, final)
                elif kind == "file" and not existed:
                    os.unlink(final)
                elif kind == "file":
                    log.warning("%s could not be put back as it was (no hard links on this file system)", final)
            except OSError as e:
                log.warning("%s could not be put back as it was: %s", final, e)

    def discard(self) -> None:
        """Remove the staging folders (what was staged, and the old members kept aside) and give the claims back."""
        for stage in self._stages.values():
            shutil.rmtree(stage, ignore_errors=True)
        self._stages = {}
        self._claim.release()
