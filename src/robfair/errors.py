"""The one family of user-facing errors.

A ``RobfairError`` message is a single line that names the problem *and* the fix. The CLI prints
it and exits with status 2; library callers can catch it like any exception. :func:`one_line`
turns a pydantic validation error into such a line (no pydantic import here).
"""

from __future__ import annotations

import difflib
import errno
import os
import types
import typing
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError  # lazy: typing only (annotations)


class RobfairError(Exception):
    """Bad input from the user: one line, naming the problem and how to fix it."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # Keep it one line, whatever the caller passed.
        super().__init__(" ".join(str(message).split()))


class DataError(RobfairError):
    """A dataset that is missing, corrupt, or inconsistent (labels, NaNs, shapes)."""


class ModelError(RobfairError):
    """An unknown architecture, a bad checkpoint, or a model/data mismatch."""


class AttackError(RobfairError):
    """An unknown attack, a bad epsilon, or a missing optional attack backend."""


class ConfigError(RobfairError):
    """A configuration value or key that is not valid."""


#: the fix of an OS error, by errno (the CLI's one line for an OS error on an input or output ends in it)
OS_FIXES = {
    errno.EACCES: "check the permissions, or choose another path",
    errno.EPERM: "check the permissions, or choose another path",
    errno.EROFS: "the file system is read-only; choose another path",
    errno.ENOSPC: "the disk is full; free some space and run the command again",
    errno.EDQUOT: "the disk quota is exceeded; free some space and run the command again",
    errno.EFBIG: "the file is larger than the file-size limit (`ulimit -f`) or the file system allows; raise the "
                 "limit or choose another path",
    errno.EIO: "the disk reported an I/O error; check the disk (or the network file system) and run the command again",
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another path",
    errno.EISDIR: "it is a folder; pass a file",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.ELOOP: "the path has a symbolic-link loop; fix the link",
    errno.EMFILE: "too many open files; raise `ulimit -n`",
}


def os_fix(code: int | None) -> str:
    """The fix of an OS error number (:data:`OS_FIXES`; a general one for the others)."""
    return OS_FIXES.get(code if code is not None else -1, "check the path and run the command again")


class WriteError(RobfairError):
    """An output that could not be written (a full disk, a file-size limit, an I/O error, permission
    denied): names the output the user asked for (never a temporary file), the system's reason and
    the fix. Raised by the atomic writers (``utils.atomic_path``, ``safeio.ResultSet``), which leave
    nothing of the new output and what was there before unchanged."""

    def __init__(self, path: str | os.PathLike, error: OSError) -> None:
        self.path = str(path)
        self.errno = error.errno
        self.strerror = error.strerror or type(error).__name__
        super().__init__(f"cannot write {self.path}: {self.strerror} (nothing was written; what was there is "
                         f"kept); {os_fix(self.errno)}")


def one_line(e: "ValidationError", model: "type[BaseModel]", *, unknown: str = "unknown config key '{key}'",
             invalid: str = "config key '{key}'", valid: str = "valid keys",
             fix: str = "fix '{key}' in the config", root: str = "config") -> str:
    """The one converter from a pydantic ``ValidationError`` of ``model`` to a one-line message
    naming the problem and the fix (its first error), for every config layer (training configs,
    method options, study files and run files).

    An unknown key gives ``"<unknown>; did you mean '<close>'? <valid>: a, b, c"`` (the keys of
    the nested model it belongs to); a bad value ``"<invalid> = <input> is invalid: <message>;
    <fix>"`` (no fix appended when pydantic's message already names one after a ';').
    ``unknown``, ``invalid`` and ``fix`` are formatted with ``key`` (the dotted location). A union's
    branch tag pydantic appends ('val_per_class.int') is dropped from the key; an error of the
    whole model (no location) is reported under ``root``."""
    err = e.errors()[0]
    loc = [str(p) for p in err["loc"]]
    extra = err["type"] == "extra_forbidden"
    sub: Any = model
    keep: list[str] = []
    for i, part in enumerate(loc):
        fields = getattr(sub, "model_fields", None)
        if fields is None or part not in fields:  # an item, a dict key or the unknown key itself
            keep += loc[i:]
            break
        keep.append(part)
        ann = getattr(fields[part], "annotation", None)
        if not extra and typing.get_origin(ann) in (typing.Union, types.UnionType):
            break  # what follows is the name of the union branch pydantic tried
        sub = ann if isinstance(ann, type) and hasattr(ann, "model_fields") else None
    key = ".".join(keep) or root
    if extra:
        owner: Any = model
        for part in loc[:-1]:
            field = getattr(owner, "model_fields", {}).get(part)
            ann = getattr(field, "annotation", None)
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                owner = ann
        names = list(getattr(owner, "model_fields", {}))
        close = difflib.get_close_matches(loc[-1] if loc else "", names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"{unknown.format(key=key)}; {hint}{valid}: {', '.join(names) or 'none'}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    tail = "" if ";" in msg else f"; {fix.format(key=key)}"
    return f"{invalid.format(key=key)} = {err.get('input')!r} is invalid: {msg}{tail}"
