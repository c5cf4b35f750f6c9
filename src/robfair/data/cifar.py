"""CIFAR-10 and CIFAR-100 from the official python pickles, unpickled safely.

The pickles are read by an ``Unpickler`` that can build numpy arrays and nothing else: a file that
asks for any other callable (``os.system``, ``builtins.eval``, ...) is refused before it runs.
"""

from __future__ import annotations

import codecs
import importlib
import pickle
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import DataError
from .dataset import Dataset
from .loading import candidate_dirs, not_found, register_dataset


class _Refused(pickle.UnpicklingError):
    pass


def _numpy_attr(submodule: str, name: str) -> Callable[[], Any]:
    def get() -> Any:
        for mod in (f"numpy._core.{submodule}", f"numpy.core.{submodule}"):
            try:
                return getattr(importlib.import_module(mod), name)
            except (ImportError, AttributeError):
                continue
        raise _Refused(f"numpy.{submodule}.{name} (not available in this numpy)")

    return get


def _latin1_encode(obj: str, encoding: str = "latin1") -> bytes:
    # protocol-2 pickles from Python 3 store bytes as _codecs.encode(text, "latin1")
    if encoding not in ("latin1", "latin-1"):
        raise _Refused(f"_codecs.encode with encoding {encoding!r}")
    return codecs.encode(obj, "latin1")


def _empty_bytes(*args: Any) -> bytes:
    if args:
        raise _Refused("builtins.bytes with arguments")
    return b""


_ALLOWED: dict[tuple[str, str], Callable[[], Any]] = {
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
    ("_codecs", "encode"): lambda: _latin1_encode,
    ("builtins", "bytes"): lambda: _empty_bytes,  # protocol 2 writes b"" as bytes()
    ("__builtin__", "bytes"): lambda: _empty_bytes,
}
for _pkg in ("numpy.core", "numpy._core"):
    _ALLOWED[(f"{_pkg}.multiarray", "_reconstruct")] = _numpy_attr("multiarray", "_reconstruct")
    _ALLOWED[(f"{_pkg}.multiarray", "scalar")] = _numpy_attr("multiarray", "scalar")
    _ALLOWED[(f"{_pkg}.numeric", "_frombuffer")] = _numpy_attr("numeric", "_frombuffer")


class SafeUnpickler(pickle.Unpickler):
    """Loads dicts, lists, strings, numbers and numpy arrays; refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        get = _ALLOWED.get((module, name))
        if get is None:
            raise _Refused(f"{module}.{name}")
        return get()


def safe_unpickle(path: Path) -> Any:
    """Unpickle ``path`` (``encoding="bytes"``, as the CIFAR pickles from Python 2 need) with
    :class:`SafeUnpickler`; any failure is a ``DataError`` that names the file."""
    try:
        with open(path, "rb") as f:
            return SafeUnpickler(f, encoding="bytes").load()
    except _Refused as e:
        raise DataError(f"{path} is not a valid CIFAR pickle: it asks to load {e}, which could run code; "
                        "refused — re-download it from the official source") from None
    except Exception as e:  # corrupt pickles raise almost anything (EOFError, ValueError, KeyError, ...)
        raise DataError(f"{path} is not a valid CIFAR pickle: {type(e).__name__}: {e}; re-download it") from None


def _load_dict(path: Path) -> dict[str, Any]:
    obj = safe_unpickle(path)
    if not isinstance(obj, dict):
        raise DataError(f"{path} is not a valid CIFAR pickle: holds a {type(obj).__name__}, not a dict; re-download it")
    return {(k.decode("latin1") if isinstance(k, bytes) else str(k)): v for k, v in obj.items()}


def _read_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    d = _load_dict(path)
    data, labels = d.get("data"), d.get(label_key)
    if not isinstance(data, np.ndarray) or labels is None:
        raise DataError(f"{path} is not a valid CIFAR pickle: keys 'data' and '{label_key}' expected, found "
                        f"{sorted(d)}; re-download it")
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataError(f"{path} is not a valid CIFAR pickle: data is {data.dtype} {data.shape}, expected uint8 "
                        "(N, 3072); re-download it")
    try:
        y = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise DataError(f"{path} is not a valid CIFAR pickle: labels are not integers ({e}); re-download it") from None
    if y.size != data.shape[0]:
        raise DataError(f"{path} is not a valid CIFAR pickle: {data.shape[0]} images but {y.size} labels; "
                        "re-download it")
    return data.reshape(-1, 3, 32, 32), y


def _names(path: Path, key: str) -> list[str]:
    names = _load_dict(path).get(key)
    if not isinstance(names, (list, tuple)) or not names:
        raise DataError(f"{path} is not a valid CIFAR pickle: no '{key}' list; re-download it")
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]


def _load(name: str, root: Path | None, split: str, *, folder: str, files: dict[str, list[str]],
          meta: str, names_key: str, label_key: str) -> Dataset:
    needed = [*files[split], meta]
    searched = candidate_dirs(name, root, (folder,))
    d = next((d for d in searched if all((d / f).is_file() for f in needed)), None)
    if d is None:
        expected = f"{folder}/ or its files " + ", ".join(dict.fromkeys([*files["train"], *files["test"], meta]))
        raise not_found(name, root, searched, expected)
    parts = [_read_batch(d / f, label_key) for f in files[split]]
    x = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    y = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    return Dataset(x=x, y=y, classes=_names(d / meta, names_key), name=name)


@register_dataset("cifar10", help="CIFAR-10, 32x32 colour, 10 classes", location="~/.robfair/data/cifar10",
                  formats="python pickles (cifar-10-batches-py)", aliases=("cifar-10",))
def load_cifar10(root: Path | None, split: str) -> Dataset:
    """CIFAR-10 from PATH or PATH/cifar-10-batches-py (data_batch_1..5, test_batch, batches.meta)."""
    return _load("cifar10", root, split, folder="cifar-10-batches-py",
                 files={"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
                 meta="batches.meta", names_key="label_names", label_key="labels")


@register_dataset("cifar100", help="CIFAR-100 (fine labels), 32x32 colour, 100 classes",
                  location="~/.robfair/data/cifar100", formats="python pickles (cifar-100-python)",
                  aliases=("cifar-100",))
def load_cifar100(root: Path | None, split: str) -> Dataset:
    """CIFAR-100 fine labels from PATH or PATH/cifar-100-python (train, test, meta)."""
    return _load("cifar100", root, split, folder="cifar-100-python", files={"train": ["train"], "test": ["test"]},
                 meta="meta", names_key="fine_label_names", label_key="fine_labels")
