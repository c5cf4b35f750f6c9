"""CelebA (Liu et al. 2015): aligned face images with 40 binary attributes.

    load_dataset("celeba:~/celeba")                                 # label Smiling, groups Male
    load_dataset("celeba:~/celeba,label=Attractive,groups=Young,size=64")

Files under PATH (the official layout and Kaggle's CSV layout both work):

- attributes: ``list_attr_celeba.txt`` (line 1: count, line 2: the 40 names, then
  ``<file> <v1> ... <v40>`` with -1/1) or ``list_attr_celeba.csv`` (header ``image_id,<names>``);
  also looked for in ``Anno/``;
- partition: ``list_eval_partition.txt`` (``<file> 0|1|2``) or ``.csv`` (``image_id,partition``);
  also looked for in ``Eval/``. 0 = train, 1 = the official validation, 2 = test;
- images: ``img_align_celeba/`` (or ``img_align_celeba/img_align_celeba/``).

Options: ``label`` (the class attribute; default ``Smiling``; classes ``not <label>``, ``<label>``),
``groups`` (another attribute, default ``Male``; ``class`` for none), ``size`` (default 64: the
178 x 218 images are centre-cropped to 178 x 178 and resized), ``partition`` (which official
partition is robfair's test split: ``test`` (2, default) or ``val`` (1); train is always 0),
``limit`` (the first N images of the split, in file order). Attribute names are case-insensitive.
"""

from __future__ import annotations

import csv
import difflib
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from .dataset import Dataset
from .imagefolder import read_image
from .loading import (candidate_dirs, not_found, option_choice, option_int, register_dataset,
                       unknown_groups)

DEFAULT_SIZE = 64
EXPECTED = "list_attr_celeba.txt (or .csv), list_eval_partition.txt (or .csv) and img_align_celeba/"


def _first(dirs: list[Path], names: tuple[str, ...]) -> Path | None:
    for d in dirs:
        for n in names:
            if (d / n).is_file():
                return d / n
    return None


def _rows(path: Path) -> list[list[str]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path} could not be read ({type(e).__name__}: {e}); download it again") from None
    if path.suffix.lower() == ".csv":
        return [[c.strip() for c in r] for r in csv.reader(text.splitlines()) if r]
    return [line.split() for line in text.splitlines() if line.strip()]


def read_attributes(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    """``(attribute names, file names, values (N, A) int8 in {0, 1})`` from either format."""
    rows = _rows(path)
    if path.suffix.lower() == ".csv":
        header, body = rows[0][1:] if rows else [], rows[1:]
    else:  # line 1: count; line 2: names (one fewer field than the rows)
        if len(rows) < 2:
            raise DataError(f"{path} is too short; expected a count line, a names line and one line per image")
        header, body = rows[1], rows[2:]
        if header and header[0].lower() in ("image_id", "file", "filename"):
            header = header[1:]
    if not header or not body:
        raise DataError(f"{path} holds no attributes; expected {EXPECTED}")
    files = [r[0] for r in body]
    try:
        vals = np.array([[int(v) for v in r[1:]] for r in body], dtype=np.int64)
    except ValueError:
        raise DataError(f"{path} has a non-integer attribute value; values must be -1/1 (or 0/1)") from None
    if vals.ndim != 2 or vals.shape[1] != len(header):
        raise DataError(f"{path}: {len(header)} attribute names but rows with another number of values; "
                        "download the file again")
    if not np.isin(vals, (-1, 0, 1)).all():
        raise DataError(f"{path}: attribute values must be -1/1 (or 0/1); download the file again")
    return header, files, (vals > 0).astype(np.int8)


def read_partition(path: Path) -> dict[str, int]:
    """``{file name: partition}`` (0 train, 1 validation, 2 test)."""
    rows = _rows(path)
    if rows and not rows[0][-1].strip().isdigit():
        rows = rows[1:]  # a CSV header
    try:
        return {r[0]: int(r[1]) for r in rows}
    except (IndexError, ValueError):
        raise DataError(f"{path} is not '<file> <0|1|2>' lines; download it again") from None


def _attribute(names: list[str], wanted: str, what: str) -> int:
    lower = [n.lower() for n in names]
    if wanted.lower() in lower:
        return lower.index(wanted.lower())
    if what == "groups":
        raise unknown_groups("celeba", wanted, ["class", *names])
    close = difflib.get_close_matches(wanted, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise DataError(f"celeba has no attribute '{wanted}'{hint}; choose {what} from: {', '.join(names)}")


@register_dataset("celeba", help="CelebA faces; label and groups are binary attributes (default Smiling / Male)",
                  location="$ROBFAIR_DATA/celeba or PATH",
                  formats="list_attr_celeba.txt/.csv, list_eval_partition, img_align_celeba/; options label=, "
                          "groups=, size=, partition=, limit=")
def load_celeba(root: Path | None, split: str, *, label: str = "Smiling", groups: str | None = None,
                size: Any = DEFAULT_SIZE, partition: str = "test", limit: Any = None) -> Dataset:
    """CelebA as uint8 (N, 3, size, size), labels from ``label``, group ids from ``groups``."""
    side = option_int(size, "size", minimum=1)
    part = option_choice(partition, "partition", ("test", "val"))
    cap = option_int(limit, "limit", minimum=1) if limit is not None else None
    dirs = candidate_dirs("celeba", root, subdirs=("Anno", "Eval", "celeba"))
    attr_file = _first(dirs, ("list_attr_celeba.txt", "list_attr_celeba.csv"))
    part_file = _first(dirs, ("list_eval_partition.txt", "list_eval_partition.csv"))
    if attr_file is None or part_file is None:
        raise not_found("celeba", root, dirs, EXPECTED)
    names, files, values = read_attributes(attr_file)
    yi = _attribute(names, str(label), "label")
    gname = "Male" if groups is None else groups
    gi = None if gname == "class" else _attribute(names, gname, "groups")
    parts = read_partition(part_file)
    want = 0 if split == "train" else (2 if part == "test" else 1)
    idx = np.array([i for i, f in enumerate(files) if parts.get(f) == want], dtype=np.int64)
    if not any(f in parts for f in files):
        raise DataError(f"none of the files in {attr_file.name} is listed in {part_file}; use the matching files")
    if cap is not None:
        idx = idx[:cap]
    if idx.size == 0:
        raise DataError(f"celeba: no image in the {split} split (partition {want}) of {part_file}; check the file")
    img_dir = next((d for base in dirs for d in (base / "img_align_celeba" / "img_align_celeba", base / "img_align_celeba")
                    if d.is_dir()), None)
    if img_dir is None:
        raise DataError(f"celeba: no img_align_celeba/ folder next to {attr_file}; extract img_align_celeba.zip there")
    x = []
    for i in idx:
        f = img_dir / files[i]
        if not f.is_file():
            raise DataError(f"celeba: image {f} is listed in {attr_file.name} but missing; extract img_align_celeba.zip again")
        a = read_image(f, side, crop=True)
        x.append(np.repeat(a, 3, axis=0) if a.shape[0] == 1 else a)
    lab = names[yi]
    return Dataset(x=np.stack(x), y=values[idx, yi].astype(np.int64), classes=[f"not {lab}", lab],
                   g=None if gi is None else values[idx, gi].astype(np.int64),
                   groups=None if gi is None else [f"not {names[gi]}", names[gi]], name="celeba")
