"""The in-memory dataset every robfair module consumes, and a stratified train/validation split.

A :class:`Dataset` is a handful of tensors: images ``x`` (N, C, H, W) stored as uint8 (0..255) or
float32 in [0, 1], labels ``y`` in [0, K), class names, and optional protected-group ids ``g`` with
their names. Without ``g`` the groups are the classes. Images always leave the dataset as float32
in [0, 1] (``images()``, ``batches()``); normalization belongs inside the model.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, Sequence, Union

import numpy as np
import torch

from ..errors import DataError
from ..utils import resolve_device

log = logging.getLogger(__name__)

Index = Union[int, slice, Sequence[int], np.ndarray, torch.Tensor]
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _as_tensor(a) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a
    a = np.asarray(a)
    if not a.flags.writeable or not a.flags.c_contiguous or not a.dtype.isnative:
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
    return torch.from_numpy(a)


def channels_first(x, where: object):
    """(N, C, H, W) from (N, C, H, W), (N, H, W, C) with C in (1, 3), or (N, H, W) (numpy or torch)."""
    if x.ndim == 3:
        return x[:, None]
    if x.ndim != 4:
        raise DataError(f"{where}: x has shape {tuple(x.shape)}; store images as (N, C, H, W), (N, H, W, C) or (N, H, W)")
    if x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        if isinstance(x, torch.Tensor):
            return x.permute(0, 3, 1, 2).contiguous()
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x


def _as_ids(a) -> torch.Tensor:
    t = _as_tensor(a)
    if t.dtype != torch.bool and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.int64:
        t = t.long()
    return t


def _to_float(x: torch.Tensor) -> torch.Tensor:
    # Divide by a 0-dim tensor on x's device, not by the number 255: CUDA turns a Python scalar
    # divisor into a multiplication by 1/255, which rounds 126 of the 256 values differently from CPU.
    if x.dtype != torch.uint8:
        return x
    return x.float().div_(torch.full((), 255.0, device=x.device))


@dataclass(repr=False, eq=False)
class Dataset:
    """Images, labels, class names and (optionally) protected groups, all as tensors.

    ``x``: (N, C, H, W), uint8 0..255 or float32 in [0, 1] (numpy arrays and other float dtypes are
    converted on construction). ``y``: (N,) int64 in [0, K) with ``K = len(classes)``.
    ``g``: (N,) int64 group ids in [0, G), or None when the groups are the classes; ``groups`` names
    them (defaults to "0", "1", ... when ``g`` is given without names).

    Indexing methods (``subset``, ``images``) may share storage with this dataset; do not modify
    the returned tensors in place. Call ``validate()`` after building one by hand.
    """

    x: torch.Tensor
    y: torch.Tensor
    classes: list[str]
    g: torch.Tensor | None = None
    groups: list[str] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        self.x = _as_tensor(self.x)
        if self.x.is_floating_point() and self.x.dtype != torch.float32:
            self.x = self.x.float()
        self.y = _as_ids(self.y)
        self.classes = [str(c) for c in self.classes]
        if self.g is not None:
            self.g = _as_ids(self.g)
        if self.groups is not None:
            self.groups = [str(s) for s in self.groups]
        elif self.g is not None and self.g.dtype == torch.int64 and self.g.numel():
            self.groups = [str(i) for i in range(max(int(self.g.max()) + 1, 0))]

    # ----------------------------------------------------------------- properties
    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def in_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one image."""
        return tuple(int(s) for s in self.x.shape[1:])  # type: ignore[return-value]

    @property
    def group_ids(self) -> torch.Tensor:
        """Per-sample group ids: ``g`` when given, else the labels."""
        return self.g if self.g is not None else self.y

    @property
    def group_names(self) -> list[str]:
        return list(self.groups) if self.groups is not None else list(self.classes)

    @property
    def num_groups(self) -> int:
        return len(self.group_names)

    @property
    def device(self) -> torch.device:
        return self.x.device

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __repr__(self) -> str:
        groups = "" if self.g is None else f", groups={self.num_groups}"
        return (f"Dataset(name={self.name!r}, n={len(self)}, in_shape={self.in_shape}, "
                f"dtype={str(self.x.dtype).replace('torch.', '')}, classes={self.num_classes}{groups}, "
                f"device={self.device})")

    def class_counts(self) -> torch.Tensor:
        """(K,) number of samples per class."""
        return torch.bincount(self.y.cpu(), minlength=self.num_classes)

    # ----------------------------------------------------------------- indexing
    def _index(self, idx: Index):
        if isinstance(idx, (int, np.integer)):
            return torch.tensor([int(idx)], device=self.x.device)
        if isinstance(idx, slice):
            return idx
        t = idx if isinstance(idx, torch.Tensor) else torch.as_tensor(np.asarray(idx))
        if t.dtype != torch.bool:
            t = t.long()
        return t.to(self.x.device)

    def images(self, idx: Index | None = None) -> torch.Tensor:
        """Images as float32 in [0, 1] (uint8 storage is converted on the fly).

        ``idx``: None (all), an int, a slice, a list/array of indices or a boolean mask. The result
        always has the batch axis."""
        return _to_float(self.x if idx is None else self.x[self._index(idx)])

    def subset(self, idx: Index) -> "Dataset":
        """The samples ``idx`` (indices, a slice or a boolean mask), same classes and groups."""
        i = self._index(idx)
        yi = i if isinstance(i, slice) else i.to(self.y.device)
        return Dataset(
            x=self.x[i],
            y=self.y[yi],
            classes=list(self.classes),
            g=None if self.g is None else self.g[yi],
            groups=None if self.groups is None else list(self.groups),
            name=self.name,
        )

    def to(self, device) -> "Dataset":
        """A dataset whose tensors live on ``device`` ("cpu", "cuda", "auto", torch.device)."""
        dev = resolve_device(device)
        return Dataset(
            x=self.x.to(dev),
            y=self.y.to(dev),
            classes=list(self.classes),
            g=None if self.g is None else self.g.to(dev),
            groups=None if self.groups is None else list(self.groups),
            name=self.name,
        )

    def place(self, device: torch.device, fraction: float = 0.25) -> "Dataset":
        """This dataset on ``device`` when it fits in ``fraction`` of the accelerator's free memory,
        else this dataset where it is (its batches are then copied to ``device`` one by one)."""
        if self.x.device == device:
            return self
        if device.type == "cuda":
            need = self.x.numel() * self.x.element_size()
            free, _ = torch.cuda.mem_get_info(device)
            if need > free * fraction:
                log.info("dataset %s (%.1f GB) stays on the %s; batches are copied to %s", self.name, need / 1e9,
                         self.x.device, device)
                return self
        return self.to(device)

    def batches(
        self,
        batch_size: int,
        *,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
        device=None,
        drop_last: bool = False,
    ) -> Iterator[Batch]:
        """Iterate ``(x, y, g)`` batches: x float32 in [0, 1], y labels, g group ids, on ``device``
        (default: where the dataset lives).

        Order is the stored order unless ``shuffle``; a shuffled order comes from ``generator``
        (a ``torch.Generator``; the global torch RNG when None), so a seeded generator gives the
        same batches every time. uint8 images are moved first and converted on the device."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise DataError(f"batch_size must be a positive integer, got {batch_size!r}; pass e.g. batch_size=256")
        dev = self.x.device if device is None else resolve_device(device)
        return self._iter_batches(int(batch_size), shuffle, generator, dev, drop_last)

    def _iter_batches(self, batch_size, shuffle, generator, dev, drop_last) -> Iterator[Batch]:
        n = len(self)
        if shuffle:
            gen_dev = generator.device if generator is not None else "cpu"
            order = torch.randperm(n, generator=generator, device=gen_dev)
        else:
            order = torch.arange(n)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            yield self.batch(order[start:start + batch_size], dev)

    def batch(self, idx: torch.Tensor, device: torch.device) -> Batch:
        """One batch ``(x, y, g)`` by an index tensor, on ``device``: x float32 in [0, 1] (uint8
        images travel as uint8 and are converted on ``device``), y labels, g group ids."""
        i = idx.to(self.x.device)
        x = _to_float(self.x[i].to(device, non_blocking=True))
        gid = self.group_ids
        return x, self.y[i.to(self.y.device)].to(device), gid[i.to(gid.device)].to(device)

    # ----------------------------------------------------------------- checks
    def validate(self) -> "Dataset":
        """Check shapes, dtypes, pixel range, labels and group ids; return self.

        Raises ``DataError`` naming the first problem and its fix."""
        who = f"dataset '{self.name}'" if self.name else "dataset"
        x, y, g = self.x, self.y, self.g
        if x.ndim != 4:
            fix = "add a channel axis (x[:, None])" if x.ndim == 3 else "store images as (N, C, H, W)"
            raise DataError(f"{who}: images must be (N, C, H, W), got shape {tuple(x.shape)}; {fix}")
        if x.dtype not in (torch.uint8, torch.float32):
            raise DataError(f"{who}: images have dtype {x.dtype}; store uint8 (0..255) or float32 in [0, 1]")
        if y.ndim != 1:
            raise DataError(f"{who}: labels must be a 1-D vector, got shape {tuple(y.shape)}; pass y as (N,) integers")
        if y.dtype != torch.int64:
            raise DataError(f"{who}: labels have dtype {y.dtype}; pass integer class indices 0..K-1")
        if x.shape[0] != y.shape[0]:
            raise DataError(f"{who}: {x.shape[0]} images but {y.shape[0]} labels; give one label per image")
        if not self.classes:
            raise DataError(f"{who}: no class names; pass classes=[...] with one name per class")
        if len(set(self.classes)) != len(self.classes):
            raise DataError(f"{who}: class names are not unique ({self.classes}); give each class its own name")
        if len(self) == 0:
            raise DataError(f"{who} has no samples; check the path and the split")
        if x.dtype == torch.float32:
            finite = torch.isfinite(x).flatten(1).all(1)
            if not bool(finite.all()):
                bad = torch.nonzero(~finite).flatten()
                raise DataError(f"{who}: {bad.numel()} images contain NaN or inf (first: sample {int(bad[0])}); "
                                "clean or drop those samples")
            lo, hi = float(x.min()), float(x.max())
            if lo < 0 or hi > 1:
                raise DataError(f"{who}: pixel values span [{lo:g}, {hi:g}], outside [0, 1]; scale images to [0, 1] "
                                "(e.g. divide by 255); normalization belongs inside the model")
        _check_ids(who, "label", y, self.num_classes, "fix the labels or list every class in classes")
        if g is not None:
            if g.ndim != 1 or g.dtype != torch.int64:
                raise DataError(f"{who}: group ids must be an (N,) integer vector, got {g.dtype} {tuple(g.shape)}; "
                                "pass g as integer ids 0..G-1")
            if g.shape[0] != y.shape[0]:
                raise DataError(f"{who}: {g.shape[0]} group ids for {y.shape[0]} samples; give one group id per sample")
            _check_ids(who, "group id", g, len(self.group_names), "fix g or list every group in groups")
        elif self.groups is not None and len(self.groups) != self.num_classes:
            raise DataError(f"{who}: {len(self.groups)} group names but no group ids g; pass g, or drop groups "
                            "to use the classes as groups")
        return self


def _check_ids(who: str, what: str, ids: torch.Tensor, k: int, fix: str) -> None:
    bad = torch.nonzero((ids < 0) | (ids >= k)).flatten()
    if bad.numel():
        i = int(bad[0])
        raise DataError(f"{who}: {what} {int(ids[i])} at sample {i} is outside [0, {k}) "
                        f"({bad.numel()} such samples); {fix}")


def stratified_split(y, per_class: int | float, seed: int, *,
                     classes: Sequence[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Split sample indices into (train_idx, val_idx), stratified by label.

    ``per_class``: an int (that many validation samples from every class) or a float in (0, 1)
    (that fraction of every class, rounded, at least one). Both index tensors are sorted int64 and
    together cover every sample exactly once. The draw uses numpy's legacy ``RandomState(seed)``,
    whose stream numpy keeps fixed, so a seed gives the same split across versions.
    Raises ``DataError`` when a class has fewer samples than asked. ``classes`` only names classes
    in that message."""
    labels = (y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)).reshape(-1)
    if isinstance(per_class, bool) or not isinstance(per_class, (int, float, np.integer, np.floating)):
        raise DataError(f"per_class must be an int count or a float fraction, got {per_class!r}; pass e.g. 100 or 0.1")
    is_frac = isinstance(per_class, (float, np.floating))
    if is_frac and not 0 < per_class < 1:
        raise DataError(f"validation fraction {per_class!r} is not in (0, 1); pass e.g. 0.1, or an int count per class")
    if not is_frac and per_class < 0:
        raise DataError(f"per_class must be >= 0, got {per_class}; pass the number of validation samples per class")
    rs = np.random.RandomState(int(seed) % 2**32)
    val = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        n = members.size
        k = max(1, int(np.floor(per_class * n + 0.5))) if is_frac else int(per_class)
        name = classes[int(c)] if classes is not None and 0 <= int(c) < len(classes) else str(int(c))
        if k > n:
            raise DataError(f"validation split larger than class '{name}' (n={n}, asked {k}); "
                            "lower per_class or use a fraction such as 0.1")
        if k == n:
            log.warning("class '%s' has all %d samples in validation and none left for training", name, n)
        val.append(members[rs.permutation(n)[:k]])
    val_idx = np.sort(np.concatenate(val)) if val else np.zeros(0, dtype=np.int64)
    train_idx = np.setdiff1d(np.arange(labels.size), val_idx)
    return torch.from_numpy(train_idx.astype(np.int64)), torch.from_numpy(val_idx.astype(np.int64))
