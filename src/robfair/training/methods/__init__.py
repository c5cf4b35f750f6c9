"""Training methods: one file per method, one registry line each (see ``base.py``)."""

from .base import METHODS, Method, TrainContext, build_method
from . import pgd_at, standard, trades  # noqa: F401  (register the built-in methods)
from .pgd_at import PGDAT
from .standard import Standard
from .trades import TRADES

__all__ = ["METHODS", "Method", "TrainContext", "build_method", "Standard", "PGDAT", "TRADES"]
