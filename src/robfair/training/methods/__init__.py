"""Training methods: one file per method, one registry line each (see ``method.py``).

Every module in this package is imported here, so a new method is one new file whose class is
decorated with ``@METHODS.register("name")``.
"""

from ...registry import import_submodules
from .method import METHODS, Method, TrainContext, build_method, describe_method, describe_methods

import_submodules(__name__, __path__, skip=("method",))

from .pgd_at import PGDAT  # noqa: E402
from .standard import Standard  # noqa: E402
from .trades import TRADES  # noqa: E402

__all__ = ["METHODS", "Method", "TrainContext", "build_method", "describe_method", "describe_methods", "Standard", "PGDAT", "TRADES"]
