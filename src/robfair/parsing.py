"""A number a user writes: ``0.1``, ``8/255``, ``2*4/255`` (arithmetic only, never ``eval``), checked
in one place. No torch, no numpy: ``robfair --help`` and the attacks' radius (:mod:`robfair.attacks.radius`)
both stand on it."""

from __future__ import annotations

import ast
import math
import operator

from .errors import RobfairError

#: longer "numbers" are refused before parsing (a 400-digit or deeply nested eps)
MAX_NUMBER_CHARS = 64
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def parse_number(text: str | float | int, what: str = "value", *, minimum: float | None = 0.0) -> float:
    """Parse ``"8/255"``, ``"0.1"``, ``"2*4/255"`` or a number; arithmetic only, never ``eval``.

    Raises a one-line ``RobfairError`` for text that is not a number or is below ``minimum``."""
    if isinstance(text, bool):
        raise RobfairError(f"{what} must be a number, got {text!r}; write e.g. 0.1 or 8/255")
    if isinstance(text, (int, float)):
        try:
            value = float(text)
        except OverflowError:
            raise RobfairError(f"{what} is too large; write e.g. 0.1 or 8/255") from None
    else:
        s = str(text).strip()
        if len(s) > MAX_NUMBER_CHARS:
            raise RobfairError(f"{what} is {len(s)} characters long; write a number such as 0.1 or 8/255")
        try:
            value = float(_eval_arith(ast.parse(s, mode="eval").body))
        except (SyntaxError, ValueError, TypeError, ZeroDivisionError, RecursionError, MemoryError):
            raise RobfairError(f"{what} {s!r} is not a number; write e.g. 0.1 or 8/255") from None
        except OverflowError:
            raise RobfairError(f"{what} {s[:40]!r} is too large; write e.g. 0.1 or 8/255") from None
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
