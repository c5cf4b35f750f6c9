"""The one family of user-facing errors.

A ``RobfairError`` message is a single line that names the problem *and* the fix. The CLI prints
it and exits with status 2; library callers can catch it like any exception.
"""

from __future__ import annotations


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
