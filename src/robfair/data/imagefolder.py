"""A folder of images, one sub-folder per class: ``PATH/train/<class>/*.png`` and ``PATH/test/<class>/*``.

Class names are the sorted folder names of both splits together, so a class index means the same
class in train and test even when one split lacks a class. ``PATH/val`` is used for the test split
when ``PATH/test`` is absent. Images are read with Pillow (a dependency of matplotlib): grayscale
stays one channel, alpha is dropped, palettes and CMYK become RGB; if a split mixes grayscale and
colour, grayscale images are repeated to three channels. All images must have the same size.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np

from ..errors import DataError
from .base import Dataset
from .registry import register_dataset

log = logging.getLogger(__name__)

EXTENSIONS = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp"}
_GRAY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}
LAYOUT = "PATH/train/<class>/*.png and PATH/test/<class>/*.png (jpg, bmp, ... also read)"


def read_image(path: Path) -> np.ndarray:
    """One image as uint8 (C, H, W), C = 1 (grayscale) or 3 (colour)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            if im.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):  # high bit depth grayscale
                a = np.asarray(im, dtype=np.float64)
                a = np.clip(a / (65535.0 if a.max() > 255 else 255.0), 0, 1)
                return np.round(a * 255).astype(np.uint8)[None]
            gray = im.mode in _GRAY_MODES
            a = np.asarray(im.convert("L" if gray else "RGB"))
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError, EOFError, struct.error,
            Image.DecompressionBombError) as e:  # what Pillow raises for broken or hostile files
        raise DataError(f"{path} is not a readable image ({type(e).__name__}: {e}); fix or delete it") from None
    return a[None] if gray else np.ascontiguousarray(a.transpose(2, 0, 1))


def _class_dirs(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))


def _split_dir(root: Path, split: str) -> Path | None:
    for name in ((split,) if split == "train" else ("test", "val")):
        if (root / name).is_dir():
            return root / name
    return None


@register_dataset("imagefolder", help="your images, one folder per class, under PATH/train and PATH/test",
                  location="PATH (required)", formats="png, jpg, bmp, gif, tiff, webp", aliases=("folder",))
def load_imagefolder(root: Path | None, split: str) -> Dataset:
    """Images from ``PATH/<split>/<class>/``; classes are the sorted folder names of both splits."""
    if root is None:
        raise DataError(f"imagefolder needs a path; write imagefolder:PATH with {LAYOUT}")
    if not root.is_dir():
        raise DataError(f"imagefolder: path {root} is not a folder; it should hold {LAYOUT}")
    split_dir = _split_dir(root, split)
    if split_dir is None:
        flat = " (it holds class folders directly: move them into train/ and test/)" if _class_dirs(root) else ""
        raise DataError(f"imagefolder: {root / split} does not exist{flat}; expected {LAYOUT}")
    classes = sorted(set().union(*(_class_dirs(d) for d in (_split_dir(root, s) for s in ("train", "test")) if d)))
    if not classes:
        raise DataError(f"imagefolder: no class folders in {split_dir}; expected {LAYOUT}")
    images: list[np.ndarray] = []
    labels: list[int] = []
    first: tuple[Path, tuple[int, int]] | None = None
    for k, cls in enumerate(classes):
        folder = split_dir / cls
        if not folder.is_dir():
            continue
        for f in sorted(p for p in folder.iterdir() if p.suffix.lower() in EXTENSIONS and p.is_file()):
            a = read_image(f)
            if first is None:
                first = (f, a.shape[1:])
            elif a.shape[1:] != first[1]:
                (h0, w0), (h, w) = first[1], a.shape[1:]
                raise DataError(f"imagefolder: {f} is {w}x{h} but {first[0]} is {w0}x{h0}; all images must have "
                                f"the same size, resize them first (e.g. to {w0}x{h0})")
            images.append(a)
            labels.append(k)
    if not images:
        raise DataError(f"imagefolder: no images ({', '.join(sorted(EXTENSIONS))}) in {split_dir}/<class>/; "
                        f"expected {LAYOUT}")
    channels = {a.shape[0] for a in images}
    if len(channels) > 1:
        log.info("imagefolder %s: mixing grayscale and colour images; grayscale repeated to 3 channels", split_dir)
        images = [np.repeat(a, 3, axis=0) if a.shape[0] == 1 else a for a in images]
    return Dataset(x=np.stack(images), y=np.asarray(labels, dtype=np.int64), classes=classes,
                   name=root.resolve().name)
