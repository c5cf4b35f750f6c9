"""The contract every registered dataset keeps, parametrized over the registry: a new dataset file
gets these tests with no edit here.

Each dataset is built from a tiny file in its format written here (``WRITERS``, reusing the format
tests' writers), else from its default location (digits is embedded); a dataset with neither is
skipped with the loader's own one-line reason. Both splits load
and validate; images are (N, C, H, W) in [0, 1], labels int64 in [0, K) with K class names, the same
image shape and classes in both splits; loading twice gives the same tensors; ``limit`` and
``per_class`` draw the subset they promise.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

from robfair.data import DATASETS, load_dataset
from robfair.errors import DataError


def _npz(d: Path) -> str:
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("test", 8)):
        np.savez(d / f"{split}.npz", x=rng.integers(0, 256, (n, 6, 6, 1), dtype=np.uint8), y=np.arange(n) % 3)
    return f"npz:{d}"


def _imagefolder(d: Path) -> str:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for cls in ("cat", "dog"):
            for i in range(3):
                p = d / split / cls / f"{i}.png"
                p.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (5, 4, 3), dtype=np.uint8)).save(p)
    return f"imagefolder:{d}"


def _writer(module: str, func: str, name: str, options: str = ""):
    """A writer from a format test's module: ``module.func(folder)``, then the spec ``name:folder``."""
    def write(d: Path) -> str:
        getattr(importlib.import_module(module), func)(d)
        return f"{name}:{d}{options}"

    return write


def _svhn(d: Path) -> str:
    from test_data_svhn import write_svhn

    write_svhn(d, name="train_32x32.mat")
    write_svhn(d, n=4, labels=(10, 2, 3, 4), name="test_32x32.mat")
    return f"svhn:{d}"


def _cifar10_jpeg(d: Path) -> str:
    from test_data_cifar_jpeg import synthetic

    synthetic(d / "cifar10-jpeg.tar.gz")
    return f"cifar10-jpeg:{d / 'cifar10-jpeg.tar.gz'}"


#: name -> writer(folder) -> spec: a tiny instance of the format, for datasets with no local copy
WRITERS = {"npz": _npz, "imagefolder": _imagefolder, "svhn": _svhn, "cifar10-jpeg": _cifar10_jpeg,
           "cifar10": _writer("test_data_cifar", "write_cifar10", "cifar10"),
           "cifar100": _writer("test_data_cifar", "write_cifar100", "cifar100"),
           "mnist": _writer("test_data_idx", "write_mnist", "mnist"),
           "fashion-mnist": _writer("test_data_idx", "write_mnist", "fashion-mnist"),
           "celeba": _writer("test_data_groups", "write_celeba", "celeba", ",size=5"),
           "utkface": _writer("test_data_groups", "write_utkface", "utkface", ",size=6")}


def check_dataset_contract(spec: str) -> None:
    tr, te = (load_dataset(spec, split=s) for s in ("train", "test"))
    for ds in (tr, te):
        ds.validate()
        x = ds.images()
        assert x.dim() == 4 and x.dtype.is_floating_point and x.min() >= 0 and x.max() <= 1, spec
        assert ds.y.dtype == torch.int64 and len(ds.y) == len(ds) == x.shape[0] > 0, spec
        k = len(ds.classes)
        assert int(ds.y.min()) >= 0 and int(ds.y.max()) < k and ds.num_classes == k, spec
    assert tr.x.shape[1:] == te.x.shape[1:] and tr.classes == te.classes, spec
    again = load_dataset(spec, split="test")
    assert torch.equal(again.x, te.x) and torch.equal(again.y, te.y), f"{spec}: two loads differ"
    if te.g is not None:  # a subset that empties a protected group is refused by design: subset by class only
        spec = f"{spec},groups=none"
        te = load_dataset(spec, split="test")
        assert te.g is None, spec
    small = load_dataset(f"{spec},limit=2", split="test")
    assert len(small) == 2, spec
    one = load_dataset(f"{spec},per_class=1", split="test")
    present = te.y.unique()
    assert torch.equal(one.y.sort().values, present), f"{spec}: per_class=1 is not one sample of each class"


def _spec_for(name: str, tmp_path: Path) -> str:
    if name in WRITERS:
        d = tmp_path / name
        d.mkdir()
        return WRITERS[name](d)
    spec = name
    try:
        load_dataset(spec, split="test")
    except DataError as e:
        pytest.skip(f"{name}: no files here and no writer in WRITERS ({e})")
    return spec


@pytest.mark.parametrize("name", DATASETS.names())
def test_every_registered_dataset_keeps_the_contract(name, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBFAIR_DATA", str(tmp_path / "home"))  # no user data decides the outcome
    monkeypatch.setenv("ROBFAIR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ROBFAIR_CIFAR10_JPEG", raising=False)
    check_dataset_contract(_spec_for(name, tmp_path))


DUMMY = '''
import torch

from robfair.data.dataset import Dataset
from robfair.data.loading import register_dataset


@register_dataset("dummy-stripes", help="test only: 2-class stripes, generated", location="(generated)",
                  formats="none")
def load_stripes(root, split, *, n: int = 6):
    n = int(n) + (2 if split == "test" else 0)
    y = torch.arange(n) % 2
    x = (y.view(-1, 1, 1, 1) * torch.ones(n, 1, 4, 4) * 200).to(torch.uint8)
    return Dataset(x=x, y=y, classes=["dark", "light"], name="dummy-stripes")
'''


def test_a_new_dataset_file_registers_itself_and_gets_the_contract(monkeypatch, tmp_path):
    from _shared import drop_in

    from robfair.data import describe_datasets

    assert drop_in(monkeypatch, tmp_path, "robfair.data", DATASETS, "dummy_stripes.py", DUMMY) == ["dummy-stripes"]
    assert "dummy-stripes" in [row.name for row in describe_datasets()]
    check_dataset_contract("dummy-stripes")
    check_dataset_contract("dummy-stripes,n=4")
    # the contract can fail: a loader whose test split has other classes
    bad = DUMMY.replace('"dummy-stripes"', '"dummy-bad"').replace('classes=["dark", "light"]',
                                                                   'classes=["dark", "light"] if split == "train" else ["a", "b"]')
    drop_in(monkeypatch, tmp_path, "robfair.data", DATASETS, "dummy_bad.py", bad)
    with pytest.raises(AssertionError):
        check_dataset_contract("dummy-bad")
