"""Training methods: one file per method, one registry line each (see ``base.py``).

Every module in this package is imported here, so a new method is one new file whose class is
decorated with ``@METHODS.register("name")``.
"""

import importlib
import pkgutil

from .base import METHODS, Method, TrainContext, build_method, describe_method, describe_methods

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _m != "base" and not _m.startswith("_"):
        importlib.import_module(f"{__name__}.{_m}")

from .pgd_at import PGDAT  # noqa: E402
from .standard import Standard  # noqa: E402
from .trades import TRADES  # noqa: E402

__all__ = ["METHODS", "Method", "TrainContext", "build_method", "describe_method", "describe_methods", "Standard", "PGDAT", "TRADES"]
