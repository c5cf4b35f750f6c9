"""Data in the forms researchers already have -> :class:`Dataset`, seeded stratified subsets, and
stating a model's class order.

    as_dataset(ds)                       # a robfair Dataset (returned as is)
    as_dataset((x, y)) / as_dataset((x, y, g))        # tensors or numpy arrays
    as_dataset(TensorDataset(x, y)) / as_dataset(DataLoader(...))   # torch.utils.data (dict batches too)
    subsample(ds, per_class=100, seed=0) / subsample(ds, limit=1000, seed=0)
    with_class_order(ds, ["cat", "dog", ...])   # re-index labels to a model's output order
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import yaml
from torch.utils.data import DataLoader, Dataset as TorchDataset, TensorDataset

from ..errors import DataError
from ..safeio import load_yaml
from .dataset import Dataset, channels_first

log = logging.getLogger(__name__)

FORMS = "a robfair Dataset, (x, y) or (x, y, g) tensors/arrays, a torch TensorDataset, a DataLoader or a map-style torch Dataset"


def _names(classes: Any, k: int) -> list[str]:
    if classes is None:
        return [str(i) for i in range(k)]
    if isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
        return [str(i) for i in range(int(classes))]
    if isinstance(classes, str):
        raise DataError(f"classes must be a list of names, got the string {classes!r}; pass e.g. ['cat', 'dog']")
    return [str(c) for c in classes]


def _from_arrays(parts: Sequence[Any], classes: Any, groups: Any, name: str) -> Dataset:
    if len(parts) not in (2, 3):
        raise DataError(f"pass (x, y) or (x, y, g), got a sequence of {len(parts)} items")
    x, y = parts[0], parts[1]
    g = parts[2] if len(parts) == 3 else None
    if not isinstance(x, torch.Tensor):
        x = np.asarray(x)
        if x.dtype.kind == "f" and x.dtype != np.float32:
            x = x.astype(np.float32)
    x = channels_first(x, "images")
    y_t = y.detach() if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y))
    if y_t.ndim != 1:
        raise DataError(f"labels have shape {tuple(y_t.shape)}; pass one integer class id per image (not one-hot: use y.argmax(1))")
    if y_t.is_floating_point():
        if not bool(torch.all(y_t == y_t.round())):
            raise DataError("labels are not integers; pass class ids 0..K-1")
        y_t = y_t.long()
    k = int(y_t.max()) + 1 if y_t.numel() else 0
    names = _names(classes, k)
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.is_floating_point() and x.dtype != torch.float32:
            x = x.float()
    ds = Dataset(x=x, y=y_t, classes=names, g=g, groups=None if groups is None else [str(s) for s in groups], name=name)
    return ds


#: the keys a dict batch names its images, labels and group ids by (the first one present is used)
BATCH_KEYS = {"x": ("x", "image", "images", "img", "input", "inputs", "pixel_values"),
              "y": ("y", "label", "labels", "target", "targets"),
              "g": ("g", "group", "groups")}
_BATCH_FORMS = ("(x, y) or (x, y, g) tuples, or dicts with an image key (" + "/".join(BATCH_KEYS["x"]) + ") and a label "
                "key (" + "/".join(BATCH_KEYS["y"]) + "), optionally a group key (" + "/".join(BATCH_KEYS["g"]) + ")")


def _batch_parts(batch: Any, b: int) -> list[Any]:
    """(x, y[, g]) of DataLoader batch ``b``: a tuple/list of 2 or 3 items, or a dict naming them by a
    key of :data:`BATCH_KEYS` (its other fields, file names or ids, are not audited); one-line
    ``DataError`` naming what the batch holds otherwise."""
    if isinstance(batch, dict):
        found = [str(k) for k in batch]
        pick = {part: next((k for k in keys if k in batch), None) for part, keys in BATCH_KEYS.items()}
        if pick["x"] is None or pick["y"] is None:
            missing = "an image key" if pick["x"] is None else "a label key"
            raise DataError(f"DataLoader batch {b} is a dict with keys {found}, without {missing}; expected "
                            f"{_BATCH_FORMS} - rename its keys or wrap the data as TensorDataset(x, y)")
        return [batch[pick[k]] for k in ("x", "y", "g") if pick[k] is not None]
    if not isinstance(batch, (list, tuple)) or len(batch) not in (2, 3):
        what = f"a {len(batch)}-item {type(batch).__name__}" if isinstance(batch, (list, tuple)) else f"a {type(batch).__name__}"
        raise DataError(f"DataLoader batch {b} is {what}; expected {_BATCH_FORMS} - return (x, y) from the "
                        "dataset's __getitem__ or wrap the data as TensorDataset(x, y)")
    return list(batch)


def _batches(loader: Any) -> Any:
    """The loader's batches; an exception the loader itself raises (its dataset's ``__getitem__``, its
    ``collate_fn``) is a one-line ``DataError`` naming it: the fault is in the data, not in robfair."""
    it = iter(loader)
    b = 0
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except Exception as e:  # noqa: BLE001 - the user's dataset or collate_fn
            first = str(e).splitlines()[0][:160] if str(e) else ""
            raise DataError(f"the DataLoader failed on batch {b} ({type(e).__name__}: {first}); fix its dataset or "
                            "collate_fn (images of one size, numeric labels), or pass (x, y) tensors") from None
        yield batch
        b += 1


def _collect(loader: Any) -> list[torch.Tensor]:
    cols: list[list[torch.Tensor]] | None = None
    for b, batch in enumerate(_batches(loader)):
        parts = _batch_parts(batch, b)
        if cols is None:
            cols = [[] for _ in parts]
        elif len(parts) != len(cols):
            raise DataError(f"DataLoader batch {b} has {len(parts)} parts but batch 0 had {len(cols)}; yield the same "
                            "(x, y) or (x, y, g) in every batch")
        for c, t, name in zip(cols, parts, ("images", "labels", "group ids")):
            try:
                c.append(torch.as_tensor(t))
            except (TypeError, ValueError, RuntimeError) as e:
                raise DataError(f"DataLoader batch {b}: its {name} are a {type(t).__name__} that is not numeric "
                                f"({str(e).splitlines()[0][:80]}); expected {_BATCH_FORMS}") from None
    if not cols:
        raise DataError("the DataLoader yielded no batches; check its dataset")
    for c, name in zip(cols, ("images", "labels", "group ids")):
        if len({tuple(t.shape[1:]) for t in c}) > 1:
            raise DataError(f"the DataLoader's {name} change shape between batches ({sorted({tuple(t.shape[1:]) for t in c})[:3]}); "
                            "resize the images to one size in the dataset's transform")
    return [torch.cat(c) for c in cols]


def as_dataset(data: Any, *, classes: Any = None, groups: Sequence[str] | None = None, name: str = "") -> Dataset:
    """Turn ``data`` into a validated :class:`Dataset`.

    Accepts a robfair ``Dataset``; ``(x, y)`` or ``(x, y, g)`` as torch tensors or numpy arrays (images
    (N, C, H, W), (N, H, W, C) or (N, H, W), float in [0, 1] or uint8); a ``TensorDataset``; a
    ``DataLoader`` (iterated once, in its order) or any map-style torch dataset whose batches are
    ``(x, y)`` / ``(x, y, g)`` or dicts naming them by a key of :data:`BATCH_KEYS` (``image`` /
    ``label`` ...; other fields such as file names are not audited). Any other batch, or a loader that
    fails, is a one-line ``DataError`` naming what it holds and what is expected.
    ``classes``: class names (or a count; default "0".."K-1"); ``groups``: names of the group ids ``g``."""
    if isinstance(data, Dataset):
        ds = data
        if classes is not None and _names(classes, ds.num_classes) != list(ds.classes):
            raise DataError(f"classes {list(classes)} given for a dataset that names its classes {ds.classes}; "
                            "drop classes= or state the model's order with audit(..., classes=)")
    elif isinstance(data, (tuple, list)):
        ds = _from_arrays(list(data), classes, groups, name)
    elif isinstance(data, TensorDataset):
        ds = _from_arrays(list(data.tensors), classes, groups, name)
    elif isinstance(data, DataLoader):
        ds = _from_arrays(_collect(data), classes, groups, name)
    elif isinstance(data, TorchDataset) and hasattr(data, "__len__"):
        ds = _from_arrays(_collect(DataLoader(data, batch_size=256, shuffle=False)), classes, groups, name)
    else:
        raise DataError(f"cannot audit a {type(data).__name__}; pass {FORMS}")
    return ds.validate()


# ---------------------------------------------------------------------------------------------- subsets
def subsample(ds: Dataset, *, limit: int | None = None, per_class: int | None = None, seed: int = 0) -> Dataset:
    """A seeded, stratified subset, in the dataset's order.

    ``per_class=N``: N samples of every class (all of a smaller class); ``limit=N``: N samples in all,
    spread over the classes in proportion to their sizes (largest remainders get the extra ones).
    Draws use numpy's ``RandomState(seed)``, so a seed gives the same subset across versions."""
    if limit is None and per_class is None:
        return ds
    labels = ds.y.cpu().numpy()
    classes = np.unique(labels)
    members = {int(c): np.flatnonzero(labels == c) for c in classes}
    rs = np.random.RandomState(int(seed) % 2**32)
    order = {c: m[rs.permutation(m.size)] for c, m in members.items()}
    take = {c: m.size for c, m in members.items()}
    if per_class is not None:
        take = {c: min(int(per_class), n) for c, n in take.items()}
        small = [ds.classes[c] for c, n in members.items() if n.size < int(per_class)]
        if small:
            log.info("per_class=%d: classes %s have fewer samples; all of them are kept", per_class, small)
    if limit is not None and int(limit) < sum(take.values()):
        total = sum(take.values())
        quota = {c: int(limit) * n / total for c, n in take.items()}
        alloc = {c: int(np.floor(q)) for c, q in quota.items()}
        rest = int(limit) - sum(alloc.values())
        for c in sorted(quota, key=lambda c: (-(quota[c] - alloc[c]), c))[:rest]:
            alloc[c] += 1
        take = alloc
    idx = np.sort(np.concatenate([order[c][:take[c]] for c in order])) if order else np.zeros(0, dtype=np.int64)
    return ds.subset(torch.from_numpy(idx.astype(np.int64)))


# ---------------------------------------------------------------------------------------------- class order
def default_names(names: Sequence[str]) -> bool:
    return list(names) == [str(i) for i in range(len(names))]


def check_class_order(model_classes: Sequence[str] | None, data_classes: Sequence[str], *, what: str = "the model") -> None:
    """``DataError`` when a model's stored class names differ from the dataset's (order included).
    Unnamed classes ("0", "1", ...) on either side cannot be checked and pass."""
    if model_classes is None or default_names(model_classes) or default_names(data_classes):
        return
    if list(model_classes) != list(data_classes):
        same = sorted(model_classes) == sorted(data_classes)
        raise DataError(f"{what} predicts classes {list(model_classes)} but the dataset's labels are "
                        f"{list(data_classes)}{' (same names, other order)' if same else ''}; state the mapping with "
                        "--class-map (Python: audit(..., classes=[...])) or pick the matching data")


def class_order(model_classes: Sequence[str] | None, data_classes: Sequence[str], *, stated: bool = False,
                what: str = "the model") -> dict[str, Any]:
    """How the dataset's labels were matched to the model's outputs, for ``audit.json``'s
    ``meta.class_order``: ``{"status": "checked"}`` (the names the model stores equal the dataset's,
    order included; a mismatch is :func:`check_class_order`'s ``DataError``), ``{"status": "stated"}``
    (``--class-map`` / ``classes=`` gave the order) or ``{"status": "unchecked", "note": ...}``: the
    model stores no class names (or only unnamed ones), said once so that a silent skip never passes
    for a check."""
    if stated:
        return {"status": "stated"}
    check_class_order(model_classes, data_classes, what=what)
    if model_classes is not None and list(model_classes) == list(data_classes):
        return {"status": "checked"}
    shown = ", ".join(list(data_classes)[:4]) + (", ..." if len(data_classes) > 4 else "")
    why = ("stores no class names" if model_classes is None else
           "stores only unnamed classes (0, 1, ...)" if default_names(model_classes) else
           "names its classes but the dataset's are unnamed (0, 1, ...)")
    return {"status": "unchecked",
            "note": f"{what} {why}, so its class order was not checked: output k is taken to be the dataset's "
                    f"class k ({shown}); store the names in the model file or state them with --class-map "
                    "(Python: classes=[...])"}


def parse_class_map(text: str, model_classes: Sequence[str] | None) -> tuple[list[str], dict[str, str]]:
    """``--class-map``: ``model`` (use the model's stored order), ``DATA=MODEL,...`` renames (then the
    model's order), a comma list of the model's classes in output order, or a .json/.yaml file with
    such a list or mapping. Returns (model classes in output order, renames dataset->model)."""
    value: Any = text
    p = Path(str(text)).expanduser()
    if p.suffix.lower() in (".json", ".yaml", ".yml") and p.exists() and not p.is_dir():  # a FIFO: refused by the reader
        try:
            value = load_yaml(p, "--class-map file", error=DataError)
        except yaml.YAMLError as e:
            raise DataError(f"--class-map file {p} is not valid YAML/JSON ({str(e).splitlines()[0]}); write a list or mapping") from None
    elif isinstance(text, str) and text.strip().lower() == "model":
        value = None
    elif isinstance(text, str) and "=" in text:
        value = dict(item.split("=", 1) for item in text.split(",") if item.strip())
        value = {k.strip(): v.strip() for k, v in value.items()}
    elif isinstance(text, str):
        value = [s.strip() for s in text.split(",") if s.strip()]
    renames: dict[str, str] = {}
    if isinstance(value, Mapping):
        renames = {str(k): str(v) for k, v in value.items()}
        value = None
    if value is None:
        if model_classes is None:
            raise DataError("--class-map needs the model's class names, but the model file does not store them; "
                            "list them in output order, e.g. --class-map cat,dog,frog")
        return list(model_classes), renames
    if not isinstance(value, list) or not value:
        raise DataError(f"--class-map {text!r} is not valid; write 'model', DATA=MODEL pairs, or the model's classes in order")
    return [str(v) for v in value], renames


def with_class_order(ds: Dataset, classes: Sequence[str], renames: Mapping[str, str] | None = None) -> Dataset:
    """``ds`` with labels re-indexed to ``classes`` (a model's output order), matching class names
    after applying ``renames`` (dataset name -> model name). Every dataset class must be in ``classes``."""
    classes = [str(c) for c in classes]
    if len(set(classes)) != len(classes):
        raise DataError(f"classes {classes} are not unique; give each output its own name")
    renames = dict(renames or {})
    unknown = [k for k in renames if k not in ds.classes]
    if unknown:
        raise DataError(f"class map renames {unknown}, which the dataset does not have; its classes are {ds.classes}")
    names = [renames.get(c, c) for c in ds.classes]
    missing = [c for c in names if c not in classes]
    if missing:
        raise DataError(f"dataset classes {missing} are not among the model's classes {classes}; map them with "
                        "--class-map DATA=MODEL (Python: classes=[...] in the model's output order)")
    if names == classes:
        return ds
    lut = torch.tensor([classes.index(c) for c in names], dtype=torch.int64, device=ds.y.device)
    return Dataset(x=ds.x, y=lut[ds.y], classes=classes, g=ds.g, groups=ds.groups, name=ds.name).validate()
