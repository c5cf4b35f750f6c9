"""CIFAR-10/100 pickles in the real key layout; the safe unpickler refuses code."""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from robfair.data import load_dataset
from robfair.data.cifar import safe_unpickle
from robfair.errors import DataError

RNG = np.random.default_rng(0)
NAMES10 = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]


def batch(n: int, labels_key: bytes = b"labels", k: int = 10) -> dict:
    return {
        b"batch_label": b"testing batch 1 of 1",
        labels_key: [int(v) for v in RNG.integers(0, k, n)],
        b"data": RNG.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [b"img_%d.png" % i for i in range(n)],
    }


def dump(path: Path, obj, protocol: int = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)


def write_cifar10(d: Path) -> dict[str, dict]:
    batches = {f"data_batch_{i}": batch(2) for i in range(1, 6)}
    batches["test_batch"] = batch(3)
    for name, b in batches.items():
        dump(d / name, b)
    meta = {b"num_cases_per_batch": 10000, b"label_names": NAMES10, b"num_vis": 3072, b"empty": b""}
    dump(d / "batches.meta", meta)
    return batches


def write_cifar100(d: Path, k: int = 100) -> dict[str, dict]:
    parts = {}
    for split, n in (("train", 5), ("test", 4)):
        b = batch(n, b"fine_labels", k)
        b[b"coarse_labels"] = [v // 5 for v in b[b"fine_labels"]]
        dump(d / split, b)
        parts[split] = b
    fine = [b"class_%03d" % i for i in range(k)]
    dump(d / "meta", {b"fine_label_names": fine, b"coarse_label_names": [b"super_%d" % i for i in range(k // 5)]})
    return parts


def test_cifar10_train_and_test(tmp_path):
    batches = write_cifar10(tmp_path / "cifar-10-batches-py")
    tr = load_dataset(f"cifar10:{tmp_path}", split="train")  # parent folder is enough
    assert tr.x.shape == (10, 3, 32, 32) and tr.x.dtype == torch.uint8 and tr.name == "cifar10"
    data = np.concatenate([batches[f"data_batch_{i}"][b"data"] for i in range(1, 6)])
    labels = sum((batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), [])
    assert tr.y.tolist() == labels
    # row layout: 1024 red, 1024 green, 1024 blue, each row-major 32x32
    assert int(tr.x[3, 1, 0, 1]) == data[3, 1024 + 1]
    assert int(tr.x[7, 2, 5, 9]) == data[7, 2048 + 5 * 32 + 9]
    assert np.array_equal(tr.x.reshape(10, -1).numpy(), data)
    te = load_dataset("cifar-10", split="test", root=tmp_path / "cifar-10-batches-py")
    assert te.y.tolist() == batches["test_batch"][b"labels"] and len(te) == 3
    assert te.classes[0] == "airplane" and te.classes[3] == "cat" and te.num_classes == 10


def test_cifar100_fine_labels(tmp_path):
    parts = write_cifar100(tmp_path / "cifar-100-python")
    te = load_dataset(f"cifar100:{tmp_path}", split="test")
    assert te.y.tolist() == parts["test"][b"fine_labels"] and te.num_classes == 100
    assert te.classes[42] == "class_042"
    assert np.array_equal(te.x.reshape(4, -1).numpy(), parts["test"][b"data"])
    assert len(load_dataset(f"cifar100:{tmp_path}", split="train")) == 5


def test_python3_style_pickles_load_too(tmp_path):
    d = tmp_path / "c"
    batches = write_cifar10(d)
    str_keys = {k.decode(): v for k, v in batches["test_batch"].items()}
    dump(d / "test_batch", str_keys, protocol=pickle.HIGHEST_PROTOCOL)
    te = load_dataset(f"cifar10:{d}")
    assert te.y.tolist() == str_keys["labels"]


# A pickle written the way Python 2's cPickle wrote the real CIFAR files: py2 `str` (SHORT_BINSTRING /
# BINSTRING, bytes under encoding="bytes") and numpy.core.multiarray._reconstruct for arrays.
def py2_pickle(obj) -> bytes:
    out = bytearray(b"\x80\x02")

    def s(b: bytes):
        out.extend(b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b)

    def i(n: int):
        out.extend(b"J" + struct.pack("<i", n))

    def emit(o):
        if isinstance(o, dict):
            out.extend(b"}(")
            for k, v in o.items():
                emit(k)
                emit(v)
            out.extend(b"u")
        elif isinstance(o, list):
            out.extend(b"](")
            for v in o:
                emit(v)
            out.extend(b"e")
        elif isinstance(o, bytes):
            s(o)
        elif isinstance(o, int):
            i(o)
        elif isinstance(o, np.ndarray):
            out.extend(b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n")
            i(0)
            out.extend(b"\x85")
            s(b"b")
            out.extend(b"\x87R(")
            i(1)
            for dim in o.shape:
                i(dim)
            out.extend(b"\x86" if o.ndim == 2 else b"\x85")
            out.extend(b"cnumpy\ndtype\n")
            s(b"u1")
            i(0)
            i(1)
            out.extend(b"\x87R(")
            i(3)
            s(b"|")
            out.extend(b"NNN")
            i(-1)
            i(-1)
            i(0)
            out.extend(b"tb\x89")
            s(o.tobytes())
            out.extend(b"tb")
        else:
            raise TypeError(type(o))

    emit(obj)
    out.extend(b".")
    return bytes(out)


def test_python2_cpickle_layout(tmp_path):
    d = tmp_path / "cifar-10-batches-py"
    batches = write_cifar10(d)
    (d / "test_batch").write_bytes(py2_pickle(batches["test_batch"]))
    (d / "batches.meta").write_bytes(py2_pickle({b"label_names": NAMES10, b"num_vis": 3072}))
    te = load_dataset(f"cifar10:{tmp_path}")
    assert te.y.tolist() == batches["test_batch"][b"labels"]
    assert np.array_equal(te.x.reshape(3, -1).numpy(), batches["test_batch"][b"data"])
    assert te.classes[9] == "truck"


# ------------------------------------------------------------------ refused and corrupt pickles
class RunsShell:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class CallsEval:
    def __reduce__(self):
        return (eval, ("__import__('os').getpid()",))


def test_malicious_pickle_is_refused_without_running(tmp_path):
    d = tmp_path / "c"
    write_cifar10(d)
    marker = tmp_path / "pwned"
    b = batch(3)
    b[b"labels"] = RunsShell(marker)
    dump(d / "test_batch", b)
    with pytest.raises(DataError, match=r"asks to load (posix|nt|os)\.system.*refused"):
        load_dataset(f"cifar10:{d}")
    assert not marker.exists()
    dump(d / "batches.meta", {b"label_names": CallsEval()})
    with pytest.raises(DataError, match=r"(__builtin__|builtins)\.eval"):
        safe_unpickle(d / "batches.meta")


def test_codecs_other_than_latin1_refused(tmp_path):
    p = tmp_path / "p"
    p.write_bytes(b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x05\x00\x00\x00rot13\x86R.")
    with pytest.raises(DataError, match="encode with encoding 'rot13'"):
        safe_unpickle(p)


def test_truncated_and_wrong_pickles(tmp_path):
    d = tmp_path / "c"
    write_cifar10(d)
    p = d / "test_batch"
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match=r"test_batch is not a valid CIFAR pickle: .*re-download it"):
        load_dataset(f"cifar10:{d}")
    p.write_bytes(b"hello, I am a text file")
    with pytest.raises(DataError, match="not a valid CIFAR pickle"):
        load_dataset(f"cifar10:{d}")
    dump(p, [1, 2, 3])
    with pytest.raises(DataError, match="holds a list, not a dict"):
        load_dataset(f"cifar10:{d}")
    b = batch(3)
    b[b"data"] = b[b"data"][:, :100]
    dump(p, b)
    with pytest.raises(DataError, match=r"expected uint8 \(N, 3072\)"):
        load_dataset(f"cifar10:{d}")
    b = batch(3)
    b[b"labels"] = b[b"labels"][:2]
    dump(p, b)
    with pytest.raises(DataError, match="3 images but 2 labels"):
        load_dataset(f"cifar10:{d}")
    b = batch(3)
    del b[b"labels"]
    dump(p, b)
    with pytest.raises(DataError, match="keys 'data' and 'labels' expected"):
        load_dataset(f"cifar10:{d}")


def test_label_out_of_range_and_missing_files(tmp_path):
    d = tmp_path / "c"
    write_cifar10(d)
    b = batch(3)
    b[b"labels"] = [0, 10, 1]
    dump(d / "test_batch", b)
    with pytest.raises(DataError, match=r"label 10 at sample 1 is outside \[0, 10\)"):
        load_dataset(f"cifar10:{d}")
    (d / "batches.meta").unlink()
    with pytest.raises(DataError, match="no files found.*batches.meta"):
        load_dataset(f"cifar10:{d}")
    with pytest.raises(DataError, match=r"does not exist; it should hold cifar-100-python/"):
        load_dataset(f"cifar100:{tmp_path / 'absent'}")
