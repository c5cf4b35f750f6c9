"""Small shared helpers: parsing user numbers, devices, seeds, atomic files, allocator tuning."""

from __future__ import annotations

import ast
import contextlib
import ctypes
import json
import math
import operator
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .errors import RobfairError

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def parse_number(text: str | float | int, what: str = "value", *, minimum: float | None = 0.0) -> float:
    """Parse ``"8/255"``, ``"0.1"``, ``"2*4/255"`` or a number; arithmetic only, never ``eval``.

    Raises a one-line ``RobfairError`` for text that is not a number or is below ``minimum``."""
    if isinstance(text, bool):
        raise RobfairError(f"{what} must be a number, got {text!r}; write e.g. 0.1 or 8/255")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = str(text).strip()
        try:
            value = float(_eval_arith(ast.parse(s, mode="eval").body))
        except (SyntaxError, ValueError, TypeError, ZeroDivisionError, RecursionError):
            raise RobfairError(f"{what} {s!r} is not a number; write e.g. 0.1 or 8/255") from None
    if not math.isfinite(value):
        raise RobfairError(f"{what} must be finite, got {text!r}; write e.g. 0.1 or 8/255")
    if minimum is not None and value < minimum:
        raise RobfairError(f"{what} must be >= {minimum:g}, got {text!r}; pass a non-negative value such as 8/255")
    return value


def _eval_arith(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval_arith(node.left), _eval_arith(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval_arith(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    raise ValueError("not arithmetic")


def parse_eps(text: str | float | int, what: str = "epsilon") -> float:
    """An attack radius: a non-negative number, fractions like ``8/255`` allowed."""
    return parse_number(text, what, minimum=0.0)


def resolve_device(device: str | None = "auto"):
    """``auto`` -> cuda if available, else mps, else cpu. Anything else is passed to ``torch.device``."""
    import torch

    if device is None or str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise RobfairError(f"device {device!r} is not a torch device; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RobfairError(f"device {device!r} was asked for but CUDA is not available; use --device cpu or auto")
    return dev


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


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
    On error the temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
