"""A folder of images, one sub-folder per class: ``PATH/train/<class>/*.png`` and ``PATH/test/<class>/*``.

Class names are the sorted folder names of both splits together, so a class index means the same
class in train and test even when one split lacks a class. ``PATH/val`` is used for the test split
when ``PATH/test`` is absent. Images are read with Pillow (a dependency of matplotlib): grayscale
stays one channel, alpha is dropped, palettes and CMYK become RGB; if a split mixes grayscale and
colour, grayscale images are repeated to three channels. All images must have the same size
(or pass ``size=N`` to resize every image to N x N).

Protected groups come from a CSV file, ``PATH/groups.csv`` by default (``groups_csv=FILE`` for
another), with a header row: ``filename,<attribute>[,<attribute>...]``, e.g.::

    filename,skin
    train/cat/001.png,dark
    cat/002.png,light          # relative to the split folder works too
    003.png,light              # a bare file name works when it is unique

``groups=ATTRIBUTE`` picks the column (default: the first one); ``groups=class`` ignores the file.
Group names are the sorted values of that column over the whole file, so ids agree across splits;
every image of the split must have a row.
"""

from __future__ import annotations

import csv
import logging
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from .dataset import Dataset
from .loading import option_int, register_dataset, unknown_groups

log = logging.getLogger(__name__)

EXTENSIONS = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp"}
_GRAY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}
LAYOUT = "PATH/train/<class>/*.png and PATH/test/<class>/*.png (jpg, bmp, ... also read)"


def read_image(path: Path, size: int | None = None, *, crop: bool = False) -> np.ndarray:
    """One image as uint8 (C, H, W), C = 1 (grayscale) or 3 (colour).

    ``size``: resize to ``size x size`` (bilinear with antialiasing; JPEGs are decoded at a reduced
    scale first, which is much faster); ``crop``: centre-crop to a square before resizing."""
    from PIL import Image, UnidentifiedImageError  # lazy: import time (Pillow, ~85 ms here, on every `import robfair.data`; only image files need it)

    try:
        with Image.open(path) as im:
            if im.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):  # high bit depth grayscale
                a = np.asarray(im, dtype=np.float64)
                a = np.clip(a / (65535.0 if a.max() > 255 else 255.0), 0, 1)
                out = np.round(a * 255).astype(np.uint8)
                if size:
                    out = np.asarray(_resize(Image.fromarray(out), size, crop))
                return out[None]
            gray = im.mode in _GRAY_MODES
            if size and im.format == "JPEG":
                im.draft("L" if gray else "RGB", (size, size))
            im2 = im.convert("L" if gray else "RGB")
            a = np.asarray(_resize(im2, size, crop) if size else im2)
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError, EOFError, struct.error,
            Image.DecompressionBombError) as e:  # what Pillow raises for broken or hostile files
        raise DataError(f"{path} is not a readable image ({type(e).__name__}: {e}); fix or delete it") from None
    return a[None] if gray else np.ascontiguousarray(a.transpose(2, 0, 1))


def _resize(im: Any, size: int, crop: bool) -> Any:
    from PIL import Image  # lazy: import time (Pillow, ~85 ms here, on every `import robfair.data`; only image files need it)

    if crop and im.width != im.height:
        s = min(im.width, im.height)
        left, top = (im.width - s) // 2, (im.height - s) // 2
        im = im.crop((left, top, left + s, top + s))
    if im.size == (size, size):
        return im
    return im.resize((size, size), Image.Resampling.BILINEAR)


def _class_dirs(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))


def _split_dir(root: Path, split: str) -> Path | None:
    for name in ((split,) if split == "train" else ("test", "val")):
        if (root / name).is_dir():
            return root / name
    return None


@register_dataset("imagefolder", help="your images, one folder per class, under PATH/train and PATH/test "
                  "(groups from PATH/groups.csv)", location="PATH (required)",
                  formats="png, jpg, bmp, gif, tiff, webp; options groups=, groups_csv=, size=", aliases=("folder",))
def load_imagefolder(root: Path | None, split: str, *, groups: str | None = None, groups_csv: str | None = None,
                     size: Any = None) -> Dataset:
    """Images from ``PATH/<split>/<class>/``; classes are the sorted folder names of both splits;
    optional group ids from a groups CSV (see the module docstring)."""
    if root is None:
        raise DataError(f"imagefolder needs a path; write imagefolder:PATH with {LAYOUT}")
    if not root.is_dir():
        raise DataError(f"imagefolder: path {root} is not a folder; it should hold {LAYOUT}")
    side = option_int(size, "size", minimum=1) if size is not None else None
    split_dir = _split_dir(root, split)
    if split_dir is None:
        flat = " (it holds class folders directly: move them into train/ and test/)" if _class_dirs(root) else ""
        raise DataError(f"imagefolder: {root / split} does not exist{flat}; expected {LAYOUT}")
    classes = sorted(set().union(*(_class_dirs(d) for d in (_split_dir(root, s) for s in ("train", "test")) if d)))
    if not classes:
        raise DataError(f"imagefolder: no class folders in {split_dir}; expected {LAYOUT}")
    images: list[np.ndarray] = []
    labels: list[int] = []
    files: list[Path] = []
    first: tuple[Path, tuple[int, int]] | None = None
    for k, cls in enumerate(classes):
        folder = split_dir / cls
        if not folder.is_dir():
            continue
        for f in sorted(p for p in folder.iterdir() if p.suffix.lower() in EXTENSIONS and p.is_file()):
            a = read_image(f, side)
            if first is None:
                first = (f, a.shape[1:])
            elif a.shape[1:] != first[1]:
                (h0, w0), (h, w) = first[1], a.shape[1:]
                raise DataError(f"imagefolder: {f} is {w}x{h} but {first[0]} is {w0}x{h0}; all images must have "
                                f"the same size: resize them first or pass size={w0} (e.g. imagefolder:PATH,size={w0})")
            images.append(a)
            labels.append(k)
            files.append(f)
    if not images:
        raise DataError(f"imagefolder: no images ({', '.join(sorted(EXTENSIONS))}) in {split_dir}/<class>/; "
                        f"expected {LAYOUT}")
    channels = {a.shape[0] for a in images}
    if len(channels) > 1:
        log.info("imagefolder %s: mixing grayscale and colour images; grayscale repeated to 3 channels", split_dir)
        images = [np.repeat(a, 3, axis=0) if a.shape[0] == 1 else a for a in images]
    g, group_names = _groups(root, split_dir, files, groups, groups_csv)
    return Dataset(x=np.stack(images), y=np.asarray(labels, dtype=np.int64), classes=classes, g=g,
                   groups=group_names, name=root.resolve().name)


def read_groups_csv(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """``(attributes, {filename: [value per attribute]})`` of a groups CSV with a header row."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"{path} could not be read as CSV ({type(e).__name__}: {e}); write it as UTF-8 "
                        "'filename,group' lines") from None
    if not rows or rows[0][0].strip().lower() not in ("filename", "file", "path", "image", "image_id") or len(rows[0]) < 2:
        raise DataError(f"{path} must start with a header row 'filename,<attribute>' (e.g. filename,group); "
                        "add that line")
    attrs = [c.strip() for c in rows[0][1:]]
    table: dict[str, list[str]] = {}
    for i, r in enumerate(rows[1:], start=2):
        if len(r) != len(rows[0]):
            raise DataError(f"{path} line {i} has {len(r)} fields but the header has {len(rows[0])}; "
                            "give every file one value per attribute")
        key = r[0].strip().replace("\\", "/")
        key = key[2:] if key.startswith("./") else key
        if key in table:
            raise DataError(f"{path} lists {key} twice (line {i}); keep one row per file")
        table[key] = [c.strip() for c in r[1:]]
    return attrs, table


def _groups(root: Path, split_dir: Path, files: list[Path], groups: str | None,
            groups_csv: str | None) -> tuple[np.ndarray | None, list[str] | None]:
    """Group ids of ``files`` from the groups CSV (None, None when groups are the classes)."""
    if groups == "class":
        return None, None
    path = Path(groups_csv).expanduser() if groups_csv else root / "groups.csv"
    if not path.is_absolute() and groups_csv:
        path = root / path if (root / path).is_file() else path
    if not path.is_file():
        if groups is None and not groups_csv:
            return None, None
        raise DataError(f"imagefolder: no groups file {path}; write one with a header 'filename,{groups or 'group'}' "
                        "and one row per image, or drop the groups option")
    attrs, table = read_groups_csv(path)
    if groups is None:
        col = 0
    else:
        lower = [a.lower() for a in attrs]
        if groups.lower() not in lower:
            raise unknown_groups("imagefolder", groups, ["class", *attrs])
        col = lower.index(groups.lower())
    names = sorted({v[col] for v in table.values()})
    index = {n: i for i, n in enumerate(names)}
    by_base: dict[str, list[str] | None] = {}
    for key, v in table.items():
        base = key.rsplit("/", 1)[-1]
        by_base[base] = None if base in by_base else v  # None: ambiguous bare name
    ids = np.empty(len(files), dtype=np.int64)
    for i, f in enumerate(files):
        row = table.get(f.relative_to(root).as_posix()) or table.get(f.relative_to(split_dir).as_posix())
        if row is None:
            row = table.get(f.name) or by_base.get(f.name)
        if row is None:
            raise DataError(f"imagefolder: {f.relative_to(root).as_posix()} has no row in {path}; add "
                            f"'{f.relative_to(root).as_posix()},<{attrs[col]}>' to it")
        ids[i] = index[row[col]]
    return ids, names
