"""UTKFace (Zhang, Song, Qi 2017): face images whose file names carry age, gender and race.

File names are ``<age>_<gender>_<race>_<date>.jpg`` (the aligned-and-cropped release adds
``.chip.jpg``): gender 0 = Male, 1 = Female; race 0 = White, 1 = Black, 2 = Asian, 3 = Indian,
4 = Others. A handful of files in the public release lack a field; they are skipped (logged).

    load_dataset("utkface:~/UTKFace")                               # task gender, groups race
    load_dataset("utkface:~/UTKFace,task=age,groups=gender,size=64")

Options (``utkface:PATH,KEY=VALUE,...``; the CLI's ``--groups`` sets ``groups``):

- ``task``: the class label, ``gender`` (default; 2 classes), ``race`` (5) or ``age`` (buckets).
- ``groups``: the protected attribute, ``race`` (default, or ``gender`` when task=race), ``gender``,
  ``age`` (the same buckets) or ``class``.
- ``age_bins``: bucket edges for ``age``, default ``20,40,60`` -> classes 0-19, 20-39, 40-59, 60+.
- ``size``: images are resized to size x size (default 32; the files are 200 x 200; ``size=200``
  keeps them). RGB uint8.
- ``test_frac`` (default 0.2) and ``split_seed`` (default 0): UTKFace ships no split, so robfair
  fixes one: the file names are sorted, and ``test_frac`` of every (gender, race) cell goes to test,
  drawn with ``stratified_split`` (numpy's frozen legacy RNG). The split does not depend on
  ``task``, ``groups``, ``size`` or ``limit``, so every task is evaluated on the same test faces.
- ``limit``: keep N samples of the split (a random subset drawn with ``split_seed``, kept in
  file-name order), for quick runs.

PATH is the folder holding the images (or a parent with ``UTKFace/``); default
``$ROBFAIR_DATA/utkface``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from .dataset import Dataset, stratified_split
from .imagefolder import read_image
from .loading import (candidate_dirs, not_found, option_choice, option_float, option_int, register_dataset,
                       unknown_groups)

log = logging.getLogger(__name__)

RACES = ("White", "Black", "Asian", "Indian", "Others")
GENDERS = ("Male", "Female")
ATTRIBUTES = ("gender", "race", "age")
DEFAULT_AGE_BINS = (20, 40, 60)
DEFAULT_SIZE = 32
EXPECTED = "UTKFace images named <age>_<gender>_<race>_<date>.jpg[.chip.jpg]"
_NAME = re.compile(r"^(\d{1,3})_([01])_([0-4])_[^/]*\.(?:jpe?g|png)$", re.IGNORECASE)
_LOOKS_LIKE = re.compile(r"^\d+_.*\.(?:jpe?g|png)$", re.IGNORECASE)


def parse_name(name: str) -> tuple[int, int, int] | None:
    """``"25_1_3_20170119.jpg.chip.jpg"`` -> ``(25, 1, 3)`` (age, gender, race); None if malformed."""
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def parse_age_bins(value: Any) -> tuple[int, ...]:
    """Bucket edges from ``"20,40,60"`` (strictly increasing positive integers)."""
    if value is None:
        return DEFAULT_AGE_BINS
    parts = [p for p in str(value).replace(" ", "").split(",") if p]
    try:
        edges = tuple(int(p) for p in parts)
    except ValueError:
        raise DataError(f"age_bins={value!r} must be increasing integers such as 20,40,60; fix the option") from None
    if not edges or any(e <= 0 for e in edges) or list(edges) != sorted(set(edges)):
        raise DataError(f"age_bins={value!r} must be increasing positive integers such as 20,40,60; fix the option")
    return edges


def age_names(edges: tuple[int, ...]) -> list[str]:
    lows = (0, *edges)
    return [f"{lo}-{hi - 1}" for lo, hi in zip(lows, edges)] + [f"{edges[-1]}+"]


def _find_files(root: Path | None) -> tuple[Path, list[str]]:
    searched = candidate_dirs("utkface", root, subdirs=("UTKFace", "utkface", "crop_part1"))
    for d in searched:
        if d.is_dir():
            names = sorted(p.name for p in d.iterdir() if _LOOKS_LIKE.match(p.name) and p.is_file())
            if names:
                return d, names
    raise not_found("utkface", root, searched, EXPECTED)


@register_dataset("utkface", help="UTKFace faces; labels and groups from the file names (age, gender, race)",
                  location="$ROBFAIR_DATA/utkface or PATH",
                  formats="<age>_<gender>_<race>_<date>.jpg; options task=, groups=, size=, age_bins=, test_frac=, "
                          "split_seed=, limit=")
def load_utkface(root: Path | None, split: str, *, task: str = "gender", groups: str | None = None,
                 age_bins: Any = None, size: Any = DEFAULT_SIZE, test_frac: Any = 0.2, split_seed: Any = 0,
                 limit: Any = None) -> Dataset:
    """UTKFace as uint8 (N, 3, size, size) with labels from ``task`` and group ids from ``groups``."""
    task = option_choice(task, "task", ATTRIBUTES)
    edges = parse_age_bins(age_bins)
    side = option_int(size, "size", minimum=1)
    frac = option_float(test_frac, "test_frac", low=0.0, high=1.0)
    seed = option_int(split_seed, "split_seed")
    cap = option_int(limit, "limit", minimum=1) if limit is not None else None
    if groups is None:
        groups = "gender" if task == "race" else "race"
    if groups != "class" and groups.lower() not in ATTRIBUTES:
        raise unknown_groups("utkface", groups, ["race", "gender", "age", "class"])

    folder, names = _find_files(root)
    parsed = [(n, parse_name(n)) for n in names]
    bad = [n for n, p in parsed if p is None]
    if bad:
        log.warning("utkface: skipped %d files whose names do not follow age_gender_race_date (first: %s)",
                    len(bad), bad[0])
    kept = [(n, p) for n, p in parsed if p is not None]
    if not kept:
        raise DataError(f"utkface: no file in {folder} is named <age>_<gender>_<race>_<date>.jpg; expected {EXPECTED}")
    files = [n for n, _ in kept]
    meta = np.array([p for _, p in kept], dtype=np.int64)  # (N, 3): age, gender, race
    cell = meta[:, 1] * len(RACES) + meta[:, 2]
    train_idx, test_idx = stratified_split(cell, frac, seed, classes=[f"{g}/{r}" for g in GENDERS for r in RACES])
    idx = (train_idx if split == "train" else test_idx).numpy()
    if cap is not None and cap < idx.size:  # a seeded random subset, kept in file order
        idx = np.sort(np.random.RandomState(seed).permutation(idx)[:cap])
    if idx.size == 0:
        raise DataError(f"utkface: the {split} split is empty ({len(files)} files); use more files or another test_frac")

    def column(attr: str) -> tuple[np.ndarray, list[str]]:
        if attr == "gender":
            return meta[idx, 1], list(GENDERS)
        if attr == "race":
            return meta[idx, 2], list(RACES)
        return np.searchsorted(np.asarray(edges), meta[idx, 0], side="right").astype(np.int64), age_names(edges)

    y, classes = column(task)
    g, group_names = (None, None) if groups == "class" else column(groups.lower())
    x = np.stack([_rgb(read_image(folder / files[i], side)) for i in idx])
    return Dataset(x=x, y=y, classes=classes, g=g, groups=group_names, name="utkface")


def _rgb(a: np.ndarray) -> np.ndarray:
    return np.repeat(a, 3, axis=0) if a.shape[0] == 1 else a
