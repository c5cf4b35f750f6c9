"""Dataset names -> loaders, and ``load_dataset("NAME[:PATH]")``.

A loader is ``loader(root: Path | None, split: str) -> Dataset`` with ``split`` "train" or "test";
``root`` is the user's PATH (``~`` expanded) or None for the loader's default locations.
Default locations live under ``$ROBFAIR_DATA`` (default ``~/.robfair/data``), one folder per name.

Options: a spec may end with ``,KEY=VALUE`` items, e.g. ``utkface:~/UTKFace,task=gender,groups=race``
(``load_dataset(spec, groups="race", task="gender")`` is the same). A loader takes its options as
keyword-only arguments; ``load_dataset`` rejects an option the loader does not declare. ``groups``
selects the protected attribute: ``class`` (groups = classes) works everywhere, ``g`` keeps the group
ids of an ``npz`` file, and loaders that declare ``groups`` (utkface, celeba, imagefolder with a
groups CSV) name their own attributes. When groups are selected, every group must have samples in
the split (else a ``DataError``). Every dataset also takes ``limit=N`` (N samples in all) and
``per_class=N`` (N per class): a stratified subset drawn with ``sample_seed`` (default 0), in file order
(loaders that read only part of their files for ``limit``, such as celeba and utkface, apply their own).
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import torch

from ..errors import DataError
from ..registry import Registry
from ..utils import input_file
from .dataset import Dataset
from .coerce import subsample

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


#: options every dataset takes: a seeded, stratified subset (``limit=N`` in all, ``per_class=N``)
SUBSET_OPTIONS = ("limit", "per_class", "sample_seed")

_OPTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)=(.*)$", re.S)
#: ``groups`` values meaning "the groups are the classes"
CLASS_GROUPS = ("class", "classes", "label", "none")


def split_options(spec: str) -> tuple[str, dict[str, str]]:
    """``"utkface:~/U,task=age,age_bins=20,40,groups=race"`` -> ``("utkface:~/U", {"task": "age",
    "age_bins": "20,40", "groups": "race"})``.

    Options start at the first ``,KEY=VALUE`` item; a later item without ``=`` continues the previous
    value (so lists such as ``age_bins=20,40,60`` need no quoting). Values stay strings."""
    if not isinstance(spec, str):
        return spec, {}
    parts = spec.split(",")
    start = next((i for i in range(1, len(parts)) if _OPTION.match(parts[i].strip())), None)
    if start is None:
        return spec, {}
    opts: dict[str, str] = {}
    key = None
    for part in parts[start:]:
        m = _OPTION.match(part.strip())
        if m:
            key = m.group(1).replace("-", "_").lower()
            if key in opts:
                raise DataError(f"dataset option '{key}' is given twice in {spec!r}; give it once")
            opts[key] = m.group(2).strip()
        else:
            opts[key] = f"{opts[key]},{part.strip()}"  # type: ignore[index]
    return ",".join(parts[:start]), opts


def with_options(spec: str, **options: Any) -> str:
    """``spec`` with ``options`` set (replacing values already there); None values are skipped.

    ``with_options("utkface:~/U,task=age", groups="race")`` -> ``"utkface:~/U,task=age,groups=race"``."""
    base, opts = split_options(spec)
    opts.update({k: str(v) for k, v in options.items() if v is not None})
    return base + "".join(f",{k}={v}" for k, v in opts.items())


def parse_spec(spec: str) -> tuple[str, Path | None]:
    """``"cifar10:~/data"`` -> ``("cifar10", Path("/home/me/data"))``; ``"digits"`` -> ``("digits", None)``.
    Trailing ``,KEY=VALUE`` options are ignored here (see :func:`split_options`)."""
    if not isinstance(spec, str) or not spec.strip():
        raise DataError(f"dataset spec {spec!r} is empty; write NAME or NAME:PATH, e.g. cifar10:~/data/cifar10")
    spec, _ = split_options(spec)
    name, sep, path = spec.strip().partition(":")
    if sep and not path.strip():
        raise DataError(f"dataset spec {spec!r} has an empty path; write {name}:PATH or just {name}")
    return name.strip(), (Path(path.strip()).expanduser() if sep else None)


def loader_options(loader: Loader) -> list[str]:
    """The keyword options a loader declares (``groups`` included when it selects groups itself)."""
    params = inspect.signature(loader).parameters.values()
    return [p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY]


def load_dataset(spec: str, split: str = "test", root: str | os.PathLike | None = None, *,
                 groups: str | None = None, **options: Any) -> Dataset:
    """Load and validate a dataset: ``spec`` is ``"NAME"``, ``"NAME:PATH"`` or either with
    ``,KEY=VALUE`` options (``robfair datasets`` lists the names); ``split`` is "train" or "test";
    ``root`` is another way to give PATH; ``groups`` (or ``groups=`` in the spec) picks the
    protected attribute (``class``: the classes); other keyword ``options`` go to the loader.

    Raises ``DataError`` for an unknown name or option, a group attribute the dataset does not have,
    a selected group without samples in this split, a missing or corrupt file, or invalid contents."""
    if split not in SPLITS:
        raise DataError(f"split {split!r} is not valid; use 'train' or 'test'")
    name, path = parse_spec(spec)
    _, opts = split_options(spec)
    for key, value in (("groups", groups), *options.items()):
        if value is None:
            continue
        if key in opts and str(opts[key]).lower() != str(value).lower():
            raise DataError(f"dataset option '{key}' given twice ({opts[key]!r} in '{spec}' and {value!r}); give it once")
        opts[key] = value
    loader = DATASETS.get(name)
    canonical = DATASETS.canonical(name)
    if root is not None:
        root_path = Path(root).expanduser()
        if path is not None and path.resolve() != root_path.resolve():
            raise DataError(f"dataset path given twice ({path} in '{spec}' and root={root_path}); give it once")
        path = root_path
    if path is not None and path.exists() and not path.is_dir():
        input_file(path, f"--data {canonical}: path", error=DataError)  # a FIFO or device: refused, never opened
    accepted = loader_options(loader)
    subset = {k: opts.pop(k) for k in SUBSET_OPTIONS if k in opts and k not in accepted}
    selected = opts.pop("groups", None)
    selected = None if selected is None else str(selected).strip()
    for key in opts:
        if key not in accepted:
            valid = ", ".join(["groups", *(a for a in accepted if a != "groups"),
                               *(o for o in SUBSET_OPTIONS if o not in accepted)])
            raise DataError(f"dataset '{canonical}' has no option '{key}'; valid options: {valid} "
                            f"(options follow the spec: NAME[:PATH],KEY=VALUE)")
    as_classes = selected is not None and selected.lower() in CLASS_GROUPS
    if "groups" in accepted:
        ds = loader(path, split, groups="class" if as_classes else selected, **opts)
    else:
        ds = loader(path, split, **opts)
        if selected is not None and not as_classes:
            if ds.g is None or selected.lower() != "g":
                raise unknown_groups(canonical, selected, ["class"] + (["g"] if ds.g is not None else []))
    if as_classes:
        ds.g, ds.groups = None, None
    if not ds.name:
        ds.name = canonical
    ds.validate()
    if subset:
        ds = subsample(ds, limit=option_int(subset["limit"], "limit", minimum=1) if "limit" in subset else None,
                       per_class=option_int(subset["per_class"], "per_class", minimum=1) if "per_class" in subset else None,
                       seed=option_int(subset.get("sample_seed", 0), "sample_seed"))
    if ds.g is not None and (selected is not None or "groups" in accepted):
        check_groups_present(ds, split)
    return ds


def unknown_groups(dataset: str, attribute: str, available: Sequence[str]) -> DataError:
    """The error for ``--groups ATTRIBUTE`` on a dataset without that attribute."""
    return DataError(f"dataset '{dataset}' has no group attribute '{attribute}'; choose one of: "
                     f"{', '.join(available)} (or use a dataset that records it, e.g. utkface, celeba, "
                     "imagefolder with groups.csv, npz with g)")


def check_groups_present(ds: Dataset, split: str) -> None:
    """``DataError`` when a named group has no sample in this split (its metrics would be undefined)."""
    counts = torch.bincount(ds.group_ids.cpu(), minlength=ds.num_groups)
    empty = [ds.group_names[i] for i in range(ds.num_groups) if int(counts[i]) == 0]
    if empty:
        raise DataError(f"{len(empty)} group(s) of dataset '{ds.name}' have no samples in the {split} split "
                        f"({', '.join(empty)}); add samples of them, choose another groups attribute, "
                        "or merge the empty group into another")


def option_int(value: Any, what: str, *, minimum: int = 0) -> int:
    """A dataset option as an integer >= ``minimum`` (``DataError`` naming the option otherwise)."""
    try:
        v = int(str(value).strip())
    except ValueError:
        raise DataError(f"dataset option {what}={value!r} is not an integer; write e.g. {what}={max(minimum, 32)}") from None
    if v < minimum:
        raise DataError(f"dataset option {what}={v} must be >= {minimum}; pass a larger value")
    return v


def option_float(value: Any, what: str, *, low: float, high: float) -> float:
    """A dataset option as a float in the open interval (low, high)."""
    try:
        v = float(str(value).strip())
    except ValueError:
        raise DataError(f"dataset option {what}={value!r} is not a number; write e.g. {what}={(low + high) / 2:g}") from None
    if not low < v < high:
        raise DataError(f"dataset option {what}={v:g} must be in ({low:g}, {high:g}); pass e.g. {what}={(low + high) / 2:g}")
    return v


def option_choice(value: Any, what: str, choices: Sequence[str]) -> str:
    """A dataset option that must be one of ``choices`` (case-insensitive); returns the choice."""
    v = str(value).strip().lower()
    for c in choices:
        if c.lower() == v:
            return c
    raise DataError(f"dataset option {what}={value!r} is not valid; choose one of: {', '.join(choices)}")


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
