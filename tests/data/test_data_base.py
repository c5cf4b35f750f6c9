"""Dataset container and stratified_split: hand-built tensors, hand-computed expectations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robfair.data import Dataset, stratified_split
from robfair.errors import DataError, RobfairError


def make(n=10, k=3, dtype=torch.uint8, g=None, groups=None) -> Dataset:
    x = torch.arange(n * 2 * 2, dtype=torch.int64).reshape(n, 1, 2, 2)
    x = (x % 256).to(torch.uint8) if dtype == torch.uint8 else x.float() / (n * 4)
    y = torch.arange(n) % k
    return Dataset(x=x, y=y, classes=[f"c{i}" for i in range(k)], g=g, groups=groups, name="toy")


# ------------------------------------------------------------------ container
def test_properties_without_groups():
    ds = make()
    assert len(ds) == 10 and ds.num_classes == 3 and ds.in_shape == (1, 2, 2)
    assert torch.equal(ds.group_ids, ds.y)
    assert ds.group_names == ["c0", "c1", "c2"] and ds.num_groups == 3
    assert ds.class_counts().tolist() == [4, 3, 3]
    assert "n=10" in repr(ds) and "toy" in repr(ds)


def test_group_ids_and_default_group_names():
    g = torch.tensor([0, 1] * 5)
    ds = make(g=g)
    assert torch.equal(ds.group_ids, g)
    assert ds.group_names == ["0", "1"]
    ds2 = make(g=g, groups=["women", "men"])
    assert ds2.group_names == ["women", "men"]
    ds2.validate()


def test_numpy_inputs_are_converted():
    x = np.random.default_rng(0).random((4, 3, 5, 6))  # float64, channels first
    ds = Dataset(x=x, y=np.array([0, 1, 1, 0], dtype=np.int32), classes=("a", "b"), g=np.array([1, 0, 0, 1], np.uint8))
    assert ds.x.dtype == torch.float32 and ds.y.dtype == torch.int64 and ds.g.dtype == torch.int64
    assert ds.classes == ["a", "b"]
    assert torch.allclose(ds.x, torch.from_numpy(x).float())
    ds.validate()


def test_images_converts_uint8_exactly():
    x = torch.tensor([0, 51, 255, 102], dtype=torch.uint8).reshape(1, 1, 2, 2)
    ds = Dataset(x=x, y=torch.tensor([0]), classes=["only"])
    im = ds.images()
    assert im.dtype == torch.float32
    assert torch.equal(im.flatten(), torch.tensor([0.0, 0.2, 1.0, 0.4]))
    assert ds.x.dtype == torch.uint8  # storage untouched
    assert ds.images(0).shape == (1, 1, 2, 2)  # an int keeps the batch axis


def test_images_and_subset_indexing():
    ds = make(dtype=torch.float32, g=torch.arange(10) % 2)
    assert torch.equal(ds.images([3, 1]), ds.x[[3, 1]])
    sub = ds.subset([7, 2, 5])
    assert sub.y.tolist() == [1, 2, 2] and sub.g.tolist() == [1, 0, 1]
    assert torch.equal(sub.x, ds.x[[7, 2, 5]])
    assert sub.classes == ds.classes and sub.groups == ds.groups and sub.name == "toy"
    mask = ds.y == 0
    assert ds.subset(mask).y.tolist() == [0, 0, 0, 0]
    assert len(ds.subset(slice(2, 6))) == 4
    assert len(ds.subset(np.array([0, 9]))) == 2


def test_to_device_keeps_everything():
    ds = make(g=torch.arange(10) % 2).to("cpu")
    assert ds.x.device.type == "cpu" and ds.g is not None and ds.groups == ["0", "1"]


# ------------------------------------------------------------------ batches
def test_batches_in_order_cover_everything():
    ds = make(n=10, g=torch.arange(10) % 2)
    bs = list(ds.batches(4))
    assert [len(b[1]) for b in bs] == [4, 4, 2]
    xs, ys, gs = (torch.cat(t) for t in zip(*bs))
    assert xs.dtype == torch.float32 and float(xs.max()) <= 1.0
    assert torch.equal(xs, ds.images()) and torch.equal(ys, ds.y) and torch.equal(gs, ds.g)
    assert [len(b[1]) for b in ds.batches(4, drop_last=True)] == [4, 4]
    assert [len(b[1]) for b in ds.batches(5, drop_last=True)] == [5, 5]


def test_batches_group_ids_default_to_labels():
    ds = make(n=7)
    _, y, g = next(iter(ds.batches(7)))
    assert torch.equal(y, g)


def test_shuffled_batches_are_deterministic_under_generator():
    ds = make(n=50, k=5, dtype=torch.float32)  # every image is distinct

    def order(seed):
        gen = torch.Generator().manual_seed(seed)
        return torch.cat([x[:, 0, 0, 0] for x, _, _ in ds.batches(8, shuffle=True, generator=gen)])

    a, b, c = order(1), order(1), order(2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(a, ds.x[:, 0, 0, 0])  # actually shuffled
    assert torch.equal(a.sort().values, ds.x[:, 0, 0, 0].sort().values)  # a permutation
    # labels travel with their images
    gen = torch.Generator().manual_seed(3)
    for x, y, _ in ds.batches(8, shuffle=True, generator=gen):
        idx = torch.round(x[:, 0, 0, 0] * 200).long() // 4
        assert torch.equal(y, idx % 5)


def test_batches_rejects_bad_batch_size_at_call():
    with pytest.raises(DataError, match="batch_size"):
        make().batches(0)


def test_batch_by_index_is_what_batches_yield():
    ds = make(n=9, g=torch.arange(9) % 2, groups=["a", "b"])
    idx = torch.tensor([7, 0, 3])
    x, y, g = ds.batch(idx, torch.device("cpu"))
    assert x.dtype == torch.float32 and torch.equal(x, ds.images(idx))  # uint8 converted exactly
    assert y.tolist() == [1, 0, 0] and g.tolist() == [1, 0, 1]
    first = next(iter(ds.batches(3)))
    assert all(torch.equal(a, b) for a, b in zip(first, ds.batch(torch.arange(3), torch.device("cpu"))))


def test_place_keeps_a_dataset_already_on_the_device():
    ds = make()
    assert ds.place(torch.device("cpu")) is ds


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_place_and_batch_on_cuda():
    ds = make(n=9)
    on = ds.place(torch.device("cuda"))
    assert on.x.is_cuda and on.x.dtype == torch.uint8  # fits easily: moved, still uint8
    assert ds.place(torch.device("cuda"), fraction=0.0) is ds  # nothing fits in no memory: stays
    x, _, _ = ds.batch(torch.arange(9), torch.device("cuda"))
    assert x.is_cuda and torch.equal(x.cpu(), ds.images())  # the CPU's rounding on the GPU too


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_batches_on_cuda():
    ds = make(n=9, g=torch.arange(9) % 3)
    x, y, g = next(iter(ds.batches(4, device="cuda")))
    assert x.is_cuda and y.is_cuda and g.is_cuda and x.dtype == torch.float32
    assert torch.equal(x.cpu(), ds.images()[:4])
    every = Dataset(x=torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16), y=torch.tensor([0]), classes=["a"])
    assert torch.equal(every.to("cuda").images().cpu(), every.images())  # same rounding on both devices
    dev = ds.to("cuda")
    gen = torch.Generator().manual_seed(0)
    xs = torch.cat([b[0] for b in dev.batches(4, shuffle=True, generator=gen)])
    assert xs.is_cuda and xs.shape == (9, 1, 2, 2)


# ------------------------------------------------------------------ validate
def _bad(**changes):
    ds = make(dtype=torch.float32)
    for k, v in changes.items():
        setattr(ds, k, v)
    return ds


@pytest.mark.parametrize("ds, match", [
    (_bad(x=torch.full((10, 1, 2, 2), float("nan"))), "NaN or inf"),
    (_bad(x=torch.zeros(10, 1, 2, 2).index_fill_(0, torch.tensor([4]), float("inf"))), "first: sample 4"),
    (_bad(x=torch.full((10, 1, 2, 2), 2.0)), r"outside \[0, 1\]"),
    (_bad(x=torch.full((10, 1, 2, 2), -0.5)), r"outside \[0, 1\]"),
    (_bad(x=torch.zeros(10, 2, 2)), "add a channel axis"),
    (_bad(x=torch.zeros(10, 1, 2, 2, dtype=torch.int32)), "uint8"),
    (_bad(y=torch.tensor([0, 1, 2, 3, 0, 1, 2, 0, 1, 2])), r"label 3 at sample 3 is outside \[0, 3\)"),
    (_bad(y=torch.tensor([0, -1, 2, 0, 0, 1, 2, 0, 1, 2])), "label -1 at sample 1"),
    (_bad(y=torch.tensor([0, 1, 2])), "10 images but 3 labels"),
    (_bad(y=torch.zeros(10, 1, dtype=torch.long)), "1-D"),
    (_bad(y=torch.zeros(10)), "integer class indices"),
    (_bad(classes=["a", "a", "b"]), "not unique"),
    (_bad(classes=[]), "no class names"),
    (_bad(g=torch.tensor([0, 1, 5, 0, 0, 0, 0, 0, 0, 0]), groups=["p", "q"]), r"group id 5 at sample 2"),
    (_bad(g=torch.tensor([0, 1]), groups=["p", "q"]), "2 group ids for 10 samples"),
    (_bad(groups=["p", "q"]), "no group ids g"),
    (Dataset(x=torch.zeros(0, 1, 2, 2), y=torch.zeros(0, dtype=torch.long), classes=["a"]), "no samples"),
])
def test_validate_rejects(ds, match):
    with pytest.raises(DataError, match=match) as err:
        ds.validate()
    assert isinstance(err.value, RobfairError) and "\n" not in str(err.value) and ";" in str(err.value)


def test_validate_accepts_edges_and_returns_self():
    ds = make(dtype=torch.float32)
    ds.x[0] = 0.0
    ds.x[1] = 1.0
    assert ds.validate() is ds
    assert make().validate() is not None  # uint8


# ------------------------------------------------------------------ stratified_split
Y = torch.tensor([0] * 10 + [1] * 7 + [2] * 3)[torch.randperm(20, generator=torch.Generator().manual_seed(5))]


def _check_partition(tr, va, n):
    assert tr.dtype == va.dtype == torch.int64
    assert torch.equal(tr, tr.sort().values) and torch.equal(va, va.sort().values)
    assert torch.equal(torch.cat([tr, va]).sort().values, torch.arange(n))


def test_split_int_count_per_class():
    tr, va = stratified_split(Y, 2, seed=0)
    _check_partition(tr, va, 20)
    assert torch.bincount(Y[va]).tolist() == [2, 2, 2]
    assert torch.bincount(Y[tr]).tolist() == [8, 5, 1]


def test_split_fraction_rounds_and_keeps_every_class():
    tr, va = stratified_split(Y.numpy(), 0.3, seed=0)  # 3.0 -> 3, 2.1 -> 2, 0.9 -> 1
    _check_partition(tr, va, 20)
    assert torch.bincount(Y[va]).tolist() == [3, 2, 1]
    _, va = stratified_split(Y, 0.05, seed=0)  # 0.5, 0.35, 0.15 -> at least one each
    assert torch.bincount(Y[va]).tolist() == [1, 1, 1]
    _, va = stratified_split(Y, 0.25, seed=0)  # 2.5 -> 3 (half up), 1.75 -> 2, 0.75 -> 1
    assert torch.bincount(Y[va]).tolist() == [3, 2, 1]


def test_split_is_deterministic_and_seed_dependent():
    a = stratified_split(Y, 3, seed=7)
    b = stratified_split(Y, 3, seed=7)
    c = stratified_split(Y, 3, seed=8)
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert not torch.equal(a[1], c[1])


def test_split_is_pinned_across_versions():
    # numpy's legacy RandomState stream is frozen: RandomState(0).permutation(5) == [2, 0, 1, 3, 4]
    y = torch.tensor([0] * 5 + [1] * 5)
    _, va = stratified_split(y, 2, seed=0)
    # class 0 takes members[[2, 0]]; class 1 takes members[perm2[:2]] of the continuing stream
    assert va[:2].tolist() == [0, 2]
    assert va.tolist() == [0, 2, 5, 7]  # regression pin: a change here changes every saved split


def test_split_too_large_names_the_class():
    with pytest.raises(DataError, match=r"validation split larger than class 'cat' \(n=3"):
        stratified_split(Y, 4, seed=0, classes=["dog", "bird", "cat"])
    with pytest.raises(DataError, match="class '2'"):
        stratified_split(Y, 4, seed=0)


@pytest.mark.parametrize("bad", [1.0, 0.0, -3, True, "10"])
def test_split_rejects_bad_per_class(bad):
    with pytest.raises(DataError):
        stratified_split(Y, bad, seed=0)
