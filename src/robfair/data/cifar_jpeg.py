"""CIFAR-10 from the JPEG export ``cifar10-jpeg.tar.gz``, read straight from the archive, decoded once.

    load_dataset("cifar10-jpeg", split="test")                      # the shared archive, found by itself
    load_dataset("cifar10-jpeg:/data/cifar10-jpeg.tar.gz,per_class=1000,test_per_class=200", "train")

The archive holds ``cifar10-jpeg/{train,test}/<class>/<NNNN>.jpg`` (5000 / 1000 images per class;
``test/<c>/<k>.jpg`` is the k-th test image of class c in the official order). Images are stored
class by class, in file-name order within a class; class names are the sorted folder names
(airplane ... truck, the official CIFAR-10 order).

**Lossy.** The export is baseline JPEG at quality 75: against the original pixels the mean |error|
is about 6/255, as large as the usual L-inf eps. Use it for class rankings and comparisons between
methods, not to match published CIFAR-10 numbers (``cifar10`` reads the lossless pickles).

**Decoded once, cached.** Decoded pixels depend on the decoder, so the first load decodes every
image of both splits with Pillow and writes uint8 arrays to
``$ROBFAIR_CACHE`` (default ``$XDG_CACHE_HOME/robfair`` or ``~/.cache/robfair``)
``/cifar10-jpeg/<archive md5>-<key>-<split>.npz``; the key covers the archive's md5 and size, the
decoder (Pillow and its libjpeg version) and this cache format, so a new archive or decoder
decodes again. Files are written atomically (temporary file, then rename); an unwritable cache only
costs the decoding next time. When a ``MD5SUMS`` file lies beside the archive, the archive is
checked against it.

**Where PATH defaults to**: ``$ROBFAIR_CIFAR10_JPEG``, then ``$ROBFAIR_DATA/cifar10-jpeg/``
(``~/.robfair/data``), then ``shared/data/`` in the current folder, the repository or a folder
above them (a clone with ``shared/`` beside it finds it). PATH may be the archive or a folder
holding it.

**Subsets** (seeded and stratified, in stored order): ``per_class=N`` keeps N images of every
class; ``limit=N`` keeps N images, split over the classes in proportion to their counts (largest
remainders); ``seed=S`` or ``sample_seed=S`` (default 0) picks which. ``test_per_class=`` / ``test_limit=`` take their
place for the test split, so a study can train on 1000 images per class and audit 200 per class.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch.utils.data as tud

from ..errors import DataError
from ..utils import atomic_path
from .dataset import Dataset
from .coerce import subsample
from .loading import SPLITS, data_home, option_int, register_dataset

log = logging.getLogger(__name__)

NAME = "cifar10-jpeg"
ARCHIVE = "cifar10-jpeg.tar.gz"
ENV_PATH = "ROBFAIR_CIFAR10_JPEG"
ENV_CACHE = "ROBFAIR_CACHE"
#: bump when the cached arrays' layout or the decoding changes
CACHE_FORMAT = 1
_MEMBER = re.compile(r"^(?:.*/)?(train|test)/([^/]+)/([^/]+\.jpe?g)$", re.I)


# ---------------------------------------------------------------- where things are
def cache_home() -> Path:
    """``$ROBFAIR_CACHE``, else ``$XDG_CACHE_HOME/robfair``, else ``~/.cache/robfair``."""
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path("~/.cache").expanduser()) / "robfair"


def _shared_candidates() -> list[Path]:
    """``shared/data/ARCHIVE`` in the current folder, the repository (this file's checkout) and up to
    three folders above each."""
    starts = [Path.cwd(), Path(__file__).resolve().parents[3]]
    out: list[Path] = []
    for s in starts:
        for d in [s, *list(s.parents)[:3]]:
            out.append(d / "shared" / "data" / ARCHIVE)
    return list(dict.fromkeys(out))


def find_archive(root: Path | None) -> Path:
    """The archive for PATH (the file, or a folder holding it), or the first default that exists."""
    if root is not None:
        if root.is_file():
            return root
        if root.is_dir():
            for p in (root / ARCHIVE, root / NAME / ARCHIVE):
                if p.is_file():
                    return p
            if (root / "train").is_dir() or (root / NAME / "train").is_dir():
                raise DataError(f"{NAME}: {root} is an extracted folder; read it with imagefolder:{root} "
                                f"(no cache), or pass the archive {ARCHIVE}")
            raise DataError(f"{NAME}: no {ARCHIVE} in {root}; pass {NAME}:PATH/{ARCHIVE}")
        raise DataError(f"{NAME}: path {root} does not exist; pass {NAME}:PATH/{ARCHIVE}")
    searched: list[Path] = []
    env = os.environ.get(ENV_PATH)
    if env:
        p = Path(env).expanduser()
        p = p / ARCHIVE if p.is_dir() else p
        if not p.is_file():
            raise DataError(f"{NAME}: ${ENV_PATH}={env} is not the archive; point it at {ARCHIVE} or unset it")
        return p
    for p in [data_home() / NAME / ARCHIVE, data_home() / ARCHIVE, *_shared_candidates()]:
        searched.append(p)
        if p.is_file():
            return p
    raise DataError(f"{NAME}: {ARCHIVE} not found (looked in {', '.join(str(p.parent) for p in searched[:4])} "
                    f"and shared/data/ above the repository); pass {NAME}:PATH/{ARCHIVE} or set ${ENV_PATH}")


def file_md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_md5sums(path: Path, md5: str) -> None:
    sums = path.parent / "MD5SUMS"
    if not sums.is_file():
        return
    try:
        lines = sums.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == path.name and parts[0].lower() != md5:
            raise DataError(f"{NAME}: {path} has md5 {md5} but {sums} says {parts[0]}; the copy is damaged, "
                            "copy the archive again")


# ---------------------------------------------------------------- decoding
def decoder_info() -> dict[str, str]:
    """The decoder that turns JPEG bytes into pixels: Pillow's version and its libjpeg's."""
    import PIL  # lazy: import time (Pillow, ~85 ms here, on every `import robfair.data`; only image files need it)
    from PIL import features

    return {"decoder": "Pillow", "decoder_version": PIL.__version__,
            "libjpeg": str(features.version("jpg") or "unknown")}


def decode_jpeg(data: bytes, where: str) -> np.ndarray:
    """One JPEG as uint8 (3, H, W), RGB."""
    from PIL import Image, UnidentifiedImageError  # lazy: import time (Pillow, ~85 ms here, on every `import robfair.data`; only image files need it)

    try:
        with Image.open(io.BytesIO(data)) as im:
            a = np.asarray(im.convert("RGB"))
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as e:
        raise DataError(f"{NAME}: {where} is not a readable JPEG ({type(e).__name__}: {e}); copy the archive again") from None
    return np.ascontiguousarray(a.transpose(2, 0, 1))


def _decode_batch(items: list[tuple[str, str, str, bytes, str]]) -> list[tuple[str, str, str, np.ndarray]]:
    """A DataLoader worker's share: (split, class, file name, pixels) of each (split, class, name, bytes, where)."""
    return [(split, cls, fname, decode_jpeg(data, where)) for split, cls, fname, data, where in items]


def read_members(path: Path, limit: int | None = None) -> list[tuple[str, str, str, bytes, str]]:
    """The archive's images as (split, class, file name, JPEG bytes, where), in archive order (``limit``: the first)."""
    out: list[tuple[str, str, str, bytes, str]] = []
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                if limit is not None and len(out) >= limit:
                    break
                if not m.isfile():
                    continue
                match = _MEMBER.match(m.name)
                if match is None:
                    continue
                f = tar.extractfile(m)
                if f is None:
                    continue
                out.append((match.group(1).lower(), match.group(2), match.group(3), f.read(), f"{path.name}:{m.name}"))
    except (tarfile.TarError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"{NAME}: {path} is not a readable tar archive ({type(e).__name__}: {e}); "
                        "copy it again") from None
    return out


def decode_members(members: list[tuple[str, str, str, bytes, str]], workers: int = 0) -> list[tuple[str, str, str, np.ndarray]]:
    """Decode :func:`read_members`' images, in ``workers`` DataLoader worker processes (0: here), in order."""
    if workers <= 0 or len(members) < 2:
        return _decode_batch(members)
    chunk = max(1, min(1024, -(-len(members) // (4 * workers))))
    loader = tud.DataLoader(members, batch_size=chunk, num_workers=workers, collate_fn=_decode_batch)
    return [item for part in loader for item in part]


def decode_archive(path: Path, workers: int = 0) -> dict[str, Any]:
    """Both splits of the archive: ``{"classes": [...], "train": (x, y), "test": (x, y)}``, images in
    class order and, within a class, in file-name order (``workers``: DataLoader worker processes that
    decode the JPEGs; 0: this process)."""
    found: dict[str, dict[str, list[tuple[str, np.ndarray]]]] = {s: {} for s in SPLITS}
    shape = None
    for split, cls, fname, a in decode_members(read_members(path), workers):
        if shape is None:
            shape = a.shape
        elif a.shape != shape:
            raise DataError(f"{NAME}: {cls}/{fname} is {a.shape[2]}x{a.shape[1]} but the other images are "
                            f"{shape[2]}x{shape[1]}; this is not the CIFAR-10 JPEG export")
        found[split].setdefault(cls, []).append((fname, a))
    missing = [s for s in SPLITS if not found[s]]
    if missing:
        raise DataError(f"{NAME}: {path} has no {' or '.join(missing)} images; expected "
                        "cifar10-jpeg/{train,test}/<class>/<NNNN>.jpg inside")
    classes = sorted(set(found["train"]) | set(found["test"]))
    out: dict[str, Any] = {"classes": classes}
    for split in SPLITS:
        xs, ys = [], []
        for k, cls in enumerate(classes):
            items = sorted(found[split].get(cls, []), key=lambda t: _name_key(t[0]))
            xs += [a for _, a in items]
            ys += [k] * len(items)
        out[split] = (np.stack(xs), np.asarray(ys, dtype=np.int64))
    return out


def _name_key(fname: str) -> tuple[int, str]:
    stem = fname.rsplit(".", 1)[0]
    return (int(stem), fname) if stem.isdigit() else (1 << 62, fname)


# ---------------------------------------------------------------- the cache
def cache_key(md5: str, size: int) -> dict[str, Any]:
    """What the decoded arrays depend on; any change means decoding again."""
    return {"format": CACHE_FORMAT, "archive_md5": md5, "archive_size": size, **decoder_info()}


def cache_path(key: dict[str, Any], split: str) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_home() / NAME / f"{key['archive_md5'][:12]}-{digest}-{split}.npz"


def _read_cache(path: Path, key: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if json.loads(str(z["key"])) != key:
                log.warning("%s: cache %s was made with another key; decoding again", NAME, path)
                return None
            return z["x"], z["y"].astype(np.int64), [str(c) for c in z["classes"].tolist()]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        log.warning("%s: cache %s is unreadable (%s); decoding again", NAME, path, e)
        return None


def _write_cache(path: Path, key: dict[str, Any], x: np.ndarray, y: np.ndarray, classes: list[str]) -> None:
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:  # a file object: savez adds no ".npz"
            np.savez(f, x=x, y=y, classes=np.asarray(classes, dtype=str), key=np.asarray(json.dumps(key, sort_keys=True)))
    except OSError as e:
        log.warning("%s: could not write the cache %s (%s); the archive will be decoded again next time", NAME, path, e)


def load_arrays(archive: Path, split: str, workers: int = 0) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(x uint8 (N, 3, 32, 32), y int64 (N,), classes) of ``split``, from the cache or decoded now (by
    ``workers`` DataLoader worker processes)."""
    md5 = file_md5(archive)
    _check_md5sums(archive, md5)
    key = cache_key(md5, archive.stat().st_size)
    hit = _read_cache(cache_path(key, split), key)
    if hit is not None:
        return hit
    log.info("%s: decoding %s once (cached under %s)", NAME, archive, cache_path(key, split).parent)
    decoded = decode_archive(archive, workers)
    for s in SPLITS:
        _write_cache(cache_path(key, s), key, *decoded[s], decoded["classes"])
    return (*decoded[split], decoded["classes"])


# ---------------------------------------------------------------- subsets
def check_subset(y: np.ndarray, *, per_class: int | None, limit: int | None, classes: list[str],
                 split: str = "train", inherited: bool = False) -> None:
    """Refuse a subset this split cannot give (the draw itself is :func:`robfair.data.coerce.subsample`).
    ``inherited``: the test split took the training split's ``per_class`` / ``limit`` (no ``test_*``
    option given), so the refusal names ``test_per_class`` / ``test_limit`` as the fix."""
    if per_class is not None and limit is not None:
        raise DataError(f"{NAME}: per_class and limit are both given; give one of them")
    counts = np.bincount(y, minlength=len(classes))
    if per_class is not None:
        short = [f"{classes[c]} ({int(counts[c])})" for c in range(len(classes)) if counts[c] < per_class]
        if short and inherited:
            raise DataError(f"{NAME}: per_class={per_class} applies to the {split} split too, which has "
                            f"{int(counts.min())} images per class; add test_per_class={int(counts.min())} "
                            "(all of them) or a smaller test_per_class")
        if short:
            raise DataError(f"{NAME}: per_class={per_class} but the {split} split's class {', '.join(short)} has "
                            f"fewer images; lower per_class to at most {int(counts.min())}")
    if limit is not None and limit > y.size:
        fix = (f"add test_limit={y.size} (all of it) or a smaller test_limit" if inherited else "lower limit")
        raise DataError(f"{NAME}: limit={limit} but the {split} split has {y.size} images; {fix}")


@register_dataset(NAME, help="CIFAR-10 as JPEG (quality 75, lossy at the scale of eps), read from the archive, "
                  "decoded once and cached", location=f"${ENV_PATH}, ~/.robfair/data/{NAME}, shared/data/",
                  formats=f"{ARCHIVE}; options per_class=, limit=, seed= (or sample_seed=), test_per_class=, test_limit=, "
                  "workers= (DataLoader processes decoding it the first time)",
                  aliases=("cifar-10-jpeg",))
def load_cifar10_jpeg(root: Path | None, split: str, *, per_class: Any = None, limit: Any = None, seed: Any = None,
                      sample_seed: Any = None, test_per_class: Any = None, test_limit: Any = None,
                      workers: Any = None) -> Dataset:
    """CIFAR-10 (JPEG export) from the archive at PATH or a default location (see the module docstring).
    ``sample_seed`` (the name every dataset's subset seed has) is the same as ``seed``."""
    if seed is not None and sample_seed is not None:
        raise DataError(f"{NAME}: seed and sample_seed are the same option; give one of them")
    seed = seed if seed is not None else sample_seed
    inherited = split == "test" and test_per_class is None and test_limit is None
    if split == "test" and not inherited:
        per_class, limit = test_per_class, test_limit
    pc = option_int(per_class, "per_class", minimum=1) if per_class is not None else None
    lim = option_int(limit, "limit", minimum=1) if limit is not None else None
    s = option_int(seed, "seed") if seed is not None else 0
    w = option_int(workers, "workers", minimum=0) if workers is not None else 0
    x, y, classes = load_arrays(find_archive(root), split, w)
    check_subset(y, per_class=pc, limit=lim, classes=classes, split=split,
                 inherited=inherited and (pc is not None or lim is not None))
    return subsample(Dataset(x=x, y=y, classes=classes, name=NAME), limit=lim, per_class=pc, seed=s)
