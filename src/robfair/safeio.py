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
  results are never overwritten unless the user asks (``--overwrite``).
- What a run folder is and which of its files are results (``RUN_FILES``, :func:`is_run_folder`,
  :func:`holds_results`) and :func:`remove_orphan_temps` come from :mod:`robfair.runfolder`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Iterable

import yaml

from .errors import ConfigError, RobfairError
from .runfolder import CHECKPOINTS_DIR, RUN_FILES, RUN_MARKERS, holds_results, is_run_folder, is_study_folder
from .utils import input_file

__all__ = ["input_file", "read_bytes_capped", "read_text_capped", "read_json", "yaml_loads", "load_yaml",
           "check_output_file", "check_output_dir"]

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
                      alt: str | None = None) -> Path:
    """Check an output file before any computation (ConfigError, one line, when it cannot be used).

    Refused: a path below a file or in an unwritable folder, an existing folder or non-regular file
    (``/dev/full``), a wrong suffix, an existing file unless ``overwrite``, and any file a run folder
    owns (``RUN_FILES``, ``checkpoints/``) unless ``run_owned`` (the caller writes that very file
    of that very run) and ``overwrite``."""
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
                     allow: str | None = None, fix: str = "pass --overwrite to replace them, or choose another folder"
                     ) -> Path:
    """Check an output folder before any computation. Refused: a path below a file, an existing
    file, an unwritable location, and a folder that already holds results unless ``overwrite``.
    ``allow``: ``"study"`` lets a sweep continue in its own study folder, ``"run"`` lets ``train
    --resume`` continue a run folder."""
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
