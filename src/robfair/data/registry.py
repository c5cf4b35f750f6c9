"""Dataset names -> loaders, and ``load_dataset("NAME[:PATH]")``.

A loader is ``loader(root: Path | None, split: str) -> Dataset`` with ``split`` "train" or "test";
``root`` is the user's PATH (``~`` expanded) or None for the loader's default locations.
Default locations live under ``$ROBFAIR_DATA`` (default ``~/.robfair/data``), one folder per name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from ..errors import DataError
from ..registry import Registry
from .base import Dataset

Loader = Callable[[Path | None, str], Dataset]
SPLITS = ("train", "test")

DATASETS: Registry[Loader] = Registry("dataset", DataError)


class DatasetInfo(NamedTuple):
    """One row of ``robfair datasets``."""

    name: str
    description: str
    location: str
    formats: str


_INFO: dict[str, DatasetInfo] = {}


def register_dataset(name: str, *, help: str, location: str, formats: str,
                     aliases: tuple[str, ...] = ()) -> Callable[[Loader], Loader]:
    """Register ``loader`` under ``name`` with the text shown by ``robfair datasets``."""

    def deco(loader: Loader) -> Loader:
        DATASETS.add(name, loader, help=help, aliases=aliases)
        _INFO[name.lower()] = DatasetInfo(name.lower(), help, location, formats)
        return loader

    return deco


def describe_datasets() -> list[DatasetInfo]:
    """Rows (name, description, default location, formats), sorted by name."""
    return [_INFO.get(e.name, DatasetInfo(e.name, e.help, "", "")) for e in DATASETS]


def data_home() -> Path:
    """Where datasets are looked for by default: ``$ROBFAIR_DATA`` or ``~/.robfair/data``."""
    return Path(os.environ.get("ROBFAIR_DATA") or "~/.robfair/data").expanduser()


def parse_spec(spec: str) -> tuple[str, Path | None]:
    """``"cifar10:~/data"`` -> ``("cifar10", Path("/home/me/data"))``; ``"digits"`` -> ``("digits", None)``."""
    if not isinstance(spec, str) or not spec.strip():
        raise DataError(f"dataset spec {spec!r} is empty; write NAME or NAME:PATH, e.g. cifar10:~/data/cifar10")
    name, sep, path = spec.strip().partition(":")
    if sep and not path.strip():
        raise DataError(f"dataset spec {spec!r} has an empty path; write {name}:PATH or just {name}")
    return name.strip(), (Path(path.strip()).expanduser() if sep else None)


def load_dataset(spec: str, split: str = "test", root: str | os.PathLike | None = None) -> Dataset:
    """Load and validate a dataset: ``spec`` is ``"NAME"`` or ``"NAME:PATH"`` (``robfair datasets``
    lists the names); ``split`` is "train" or "test"; ``root`` is another way to give PATH.

    Raises ``DataError`` for an unknown name, a missing or corrupt file, or invalid contents."""
    if split not in SPLITS:
        raise DataError(f"split {split!r} is not valid; use 'train' or 'test'")
    name, path = parse_spec(spec)
    loader = DATASETS.get(name)
    canonical = DATASETS.canonical(name)
    if root is not None:
        root_path = Path(root).expanduser()
        if path is not None and path.resolve() != root_path.resolve():
            raise DataError(f"dataset path given twice ({path} in '{spec}' and root={root_path}); give it once")
        path = root_path
    ds = loader(path, split)
    if not ds.name:
        ds.name = canonical
    return ds.validate()


# ---------------------------------------------------------------- helpers for loaders
def candidate_dirs(name: str, root: Path | None, subdirs: Sequence[str] = (),
                   system: Sequence[str | Path] = ()) -> list[Path]:
    """Folders to search, in order: ``root`` (or the defaults ``data_home()/name`` and ``system``),
    each followed by its ``subdirs``."""
    bases = [root] if root is not None else [data_home() / name, *(Path(s) for s in system)]
    return [d for b in bases for d in (b, *(b / s for s in subdirs))]


def not_found(name: str, root: Path | None, searched: Sequence[Path], expected: str) -> DataError:
    """The error for files that are not where we looked."""
    if root is not None and not root.exists():
        return DataError(f"{name}: path {root} does not exist; it should hold {expected}")
    where = ", ".join(str(p) for p in dict.fromkeys(searched))
    return DataError(f"{name}: no files found in {where}; expected {expected} there "
                     f"(download them, then pass {name}:PATH)")
