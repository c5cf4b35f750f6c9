"""cifar10-jpeg: read from the tar archive, decoded once, cached by a key, subsets.

Most tests build a small archive in the real layout from a few members of the shared archive
(``shared/data/cifar10-jpeg.tar.gz`` beside the repository) and skip when it is not there; the
cache and error tests use JPEGs written here. One slow test reads the whole shared archive.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robfair.data import cifar_jpeg, load_dataset
from robfair.errors import DataError

CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
RNG = np.random.default_rng(0)


def shared_archive() -> Path | None:
    return next((p for p in cifar_jpeg._shared_candidates() if p.is_file()), None)


SHARED = shared_archive()
needs_shared = pytest.mark.skipif(SHARED is None, reason="shared/data/cifar10-jpeg.tar.gz is not beside the "
                                  "repository (it lies in the project's shared folder)")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """A private cache per test; no default archive from the environment."""
    d = tmp_path / "cache"
    monkeypatch.setenv("ROBFAIR_CACHE", str(d))
    monkeypatch.delenv("ROBFAIR_CIFAR10_JPEG", raising=False)
    return d


def jpeg_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="JPEG", quality=75)
    return buf.getvalue()


def write_tar(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def synthetic(path: Path, classes=("cat", "dog"), n_train=3, n_test=2) -> dict[str, bytes]:
    members = {}
    for split, n in (("train", n_train), ("test", n_test)):
        for c in classes:
            for k in range(n):
                members[f"cifar10-jpeg/{split}/{c}/{k:04d}.jpg"] = jpeg_bytes(RNG.integers(0, 256, (32, 32, 3), dtype=np.uint8))
    write_tar(path, members)
    return members


def pil_decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB")).transpose(2, 0, 1)


@pytest.fixture(scope="module")
def few_real(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    """A small archive of real members: test images 0-3 and train images 0-2 of every class."""
    if SHARED is None:
        pytest.skip("shared/data/cifar10-jpeg.tar.gz is not beside the repository")
    keep = {f"cifar10-jpeg/test/{c}/{k:04d}.jpg" for c in CIFAR10 for k in range(4)}
    keep |= {f"cifar10-jpeg/train/{c}/{k:04d}.jpg" for c in CIFAR10 for k in range(3)}
    members = {}
    with tarfile.open(SHARED, "r:gz") as tar:
        for m in tar:
            if m.name in keep:
                members[m.name] = tar.extractfile(m).read()
    assert set(members) == keep, sorted(keep - set(members))[:3]
    # stored in a shuffled member order: the loader must not depend on the archive's order
    order = list(members)
    np.random.default_rng(1).shuffle(order)
    path = write_tar(tmp_path_factory.mktemp("few") / "cifar10-jpeg.tar.gz", {k: members[k] for k in order})
    return path, members


# ---------------------------------------------------------------- real images
def test_test_image_k_of_class_c_is_the_archive_member(few_real):
    path, members = few_real
    ds = load_dataset(f"cifar10-jpeg:{path}", split="test")
    assert ds.classes == CIFAR10 and ds.name == "cifar10-jpeg"
    assert ds.x.dtype == torch.uint8 and ds.x.shape == (40, 3, 32, 32)
    assert ds.class_counts().tolist() == [4] * 10
    for c, k in ((3, 2), (0, 0), (9, 3), (1, 1)):
        i = c * 4 + k  # class by class, in file-name order within a class
        want = pil_decode(members[f"cifar10-jpeg/test/{CIFAR10[c]}/{k:04d}.jpg"])
        assert int(ds.y[i]) == c
        assert np.array_equal(ds.x[i].numpy(), want), (c, k)
    tr = load_dataset(f"cifar10-jpeg:{path}", split="train")
    assert len(tr) == 30 and tr.classes == CIFAR10
    assert np.array_equal(tr.x[3 * 5 + 1].numpy(), pil_decode(members["cifar10-jpeg/train/dog/0001.jpg"]))


def test_subsets_are_stratified_seeded_and_real_images(few_real):
    path, members = few_real
    full = load_dataset(f"cifar10-jpeg:{path}", split="test")
    a = load_dataset(f"cifar10-jpeg:{path},per_class=2", split="test")
    assert a.class_counts().tolist() == [2] * 10 and a.classes == CIFAR10
    b = load_dataset(f"cifar10-jpeg:{path},per_class=2", split="test")
    assert torch.equal(a.x, b.x)  # seeded: the same subset every time
    c = load_dataset(f"cifar10-jpeg:{path},per_class=2,seed=5", split="test")
    assert not torch.equal(a.x, c.x)
    # sample_seed, the name the generic subset options use, is the same seed
    assert torch.equal(load_dataset(f"cifar10-jpeg:{path},per_class=2,sample_seed=5", split="test").x, c.x)
    with pytest.raises(DataError, match="seed and sample_seed are the same option"):
        load_dataset(f"cifar10-jpeg:{path},per_class=2,seed=1,sample_seed=5", split="test")
    # every kept image is one of the full split's images, with its label
    for i in range(len(a)):
        j = [k for k in range(len(full)) if torch.equal(full.x[k], a.x[i])]
        assert len(j) == 1 and int(full.y[j[0]]) == int(a.y[i])
    lim = load_dataset(f"cifar10-jpeg:{path},limit=15", split="test")
    assert len(lim) == 15 and sorted(lim.class_counts().tolist()) == [1] * 5 + [2] * 5
    # test_* options take the place of per_class / limit for the test split only
    spec = f"cifar10-jpeg:{path},per_class=3,test_per_class=1"
    assert load_dataset(spec, "train").class_counts().tolist() == [3] * 10
    assert load_dataset(spec, "test").class_counts().tolist() == [1] * 10
    assert len(load_dataset(f"cifar10-jpeg:{path},per_class=3,test_limit=7", "test")) == 7


@needs_shared
def test_default_location_finds_the_shared_archive(monkeypatch, tmp_path):
    monkeypatch.setenv("ROBFAIR_DATA", str(tmp_path / "nothing-here"))
    assert cifar_jpeg.find_archive(None).resolve() == SHARED.resolve()
    monkeypatch.setenv("ROBFAIR_CIFAR10_JPEG", str(tmp_path / "missing.tar.gz"))
    with pytest.raises(DataError, match=r"ROBFAIR_CIFAR10_JPEG=.* is not the archive"):
        cifar_jpeg.find_archive(None)


@pytest.mark.slow
@needs_shared
def test_whole_shared_archive(monkeypatch):
    """All 60,000 images (decodes for ~20 s into the test's cache): counts, classes, and one member."""
    monkeypatch.setenv("ROBFAIR_DATA", "/nonexistent")
    te = load_dataset("cifar10-jpeg", split="test")
    tr = load_dataset("cifar10-jpeg", split="train")
    assert te.classes == tr.classes == CIFAR10
    assert te.class_counts().tolist() == [1000] * 10 and tr.class_counts().tolist() == [5000] * 10
    with tarfile.open(SHARED, "r:gz") as tar:
        f = tar.extractfile("cifar10-jpeg/test/cat/0999.jpg")
        assert np.array_equal(te.x[3 * 1000 + 999].numpy(), pil_decode(f.read()))


# ---------------------------------------------------------------- the cache
class CountDecodes:
    def __init__(self, monkeypatch):
        self.calls = 0
        real = cifar_jpeg.decode_archive

        def counted(path, workers=0):
            self.calls += 1
            return real(path, workers)

        monkeypatch.setattr(cifar_jpeg, "decode_archive", counted)


def test_cache_is_reused_and_invalidated_on_key_change(tmp_path, cache, monkeypatch):
    path = tmp_path / "a" / "cifar10-jpeg.tar.gz"
    synthetic(path)
    n = CountDecodes(monkeypatch)
    first = load_dataset(f"cifar10-jpeg:{path}", "test")
    assert n.calls == 1
    files = sorted(p.name for p in (cache / "cifar10-jpeg").iterdir())
    assert len(files) == 2 and all(f.endswith(("-train.npz", "-test.npz")) for f in files)  # both splits, no temp files
    again = load_dataset(f"cifar10-jpeg:{path}", "test")
    load_dataset(f"cifar10-jpeg:{path}", "train")
    assert n.calls == 1 and torch.equal(first.x, again.x)  # reused
    # another decoder version: another key, decoded again, into another file
    real_info = cifar_jpeg.decoder_info
    monkeypatch.setattr(cifar_jpeg, "decoder_info", lambda: {**real_info(), "decoder_version": "0.0-test"})
    load_dataset(f"cifar10-jpeg:{path}", "test")
    assert n.calls == 2 and len(list((cache / "cifar10-jpeg").iterdir())) == 4
    monkeypatch.setattr(cifar_jpeg, "decoder_info", real_info)
    # another archive content (same path): another md5, decoded again
    synthetic(path, n_test=1)
    assert len(load_dataset(f"cifar10-jpeg:{path}", "test")) == 2 and n.calls == 3


def test_stale_or_corrupt_cache_file_is_decoded_again(tmp_path, cache, monkeypatch):
    path = tmp_path / "cifar10-jpeg.tar.gz"
    synthetic(path)
    n = CountDecodes(monkeypatch)
    want = load_dataset(f"cifar10-jpeg:{path}", "test")
    test_file = next((cache / "cifar10-jpeg").glob("*-test.npz"))
    # a file at the right name whose recorded key differs (e.g. a hash collision, a hand-copied cache)
    with np.load(test_file) as z:
        parts = {k: z[k] for k in z.files}
    np.savez(test_file, **{**parts, "key": np.asarray('{"format": -1}'), "x": np.zeros_like(parts["x"])})
    assert torch.equal(load_dataset(f"cifar10-jpeg:{path}", "test").x, want.x) and n.calls == 2
    test_file.write_bytes(b"not a zip file")
    assert torch.equal(load_dataset(f"cifar10-jpeg:{path}", "test").x, want.x) and n.calls == 3


def test_unwritable_cache_still_loads(tmp_path, monkeypatch):
    path = tmp_path / "cifar10-jpeg.tar.gz"
    synthetic(path)
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    monkeypatch.setenv("ROBFAIR_CACHE", str(blocker / "cache"))
    ds = load_dataset(f"cifar10-jpeg:{path}", "train")
    assert len(ds) == 6 and ds.classes == ["cat", "dog"]


def test_cache_home_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("ROBFAIR_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cifar_jpeg.cache_home() == tmp_path / "xdg" / "robfair"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cifar_jpeg.cache_home() == Path("~/.cache/robfair").expanduser()


def test_key_names_the_decoder_and_archive(tmp_path):
    key = cifar_jpeg.cache_key("0" * 32, 123)
    assert key["archive_md5"] == "0" * 32 and key["archive_size"] == 123
    assert key["decoder"] == "Pillow" and key["decoder_version"] == Image.__version__ and key["libjpeg"]


# ---------------------------------------------------------------- bad input
def test_paths_and_archives_that_are_wrong(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_dataset(f"cifar10-jpeg:{tmp_path / 'missing.tar.gz'}")
    with pytest.raises(DataError, match=r"no cifar10-jpeg.tar.gz in"):
        load_dataset(f"cifar10-jpeg:{tmp_path}")
    (tmp_path / "x" / "train").mkdir(parents=True)
    with pytest.raises(DataError, match=r"extracted folder; read it with imagefolder:"):
        load_dataset(f"cifar10-jpeg:{tmp_path / 'x'}")
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataError, match="is not a readable tar archive"):
        load_dataset(f"cifar10-jpeg:{junk}")
    only_train = write_tar(tmp_path / "t.tar.gz", {"cifar10-jpeg/train/a/0000.jpg": jpeg_bytes(np.zeros((32, 32, 3), np.uint8))})
    with pytest.raises(DataError, match="has no test images"):
        load_dataset(f"cifar10-jpeg:{only_train}")
    bad = write_tar(tmp_path / "b.tar.gz", {"cifar10-jpeg/train/a/0000.jpg": b"not a jpeg",
                                            "cifar10-jpeg/test/a/0000.jpg": b"not a jpeg"})
    with pytest.raises(DataError, match=r"0000.jpg is not a readable JPEG"):
        load_dataset(f"cifar10-jpeg:{bad}")
    sizes = write_tar(tmp_path / "s.tar.gz", {"cifar10-jpeg/train/a/0000.jpg": jpeg_bytes(np.zeros((32, 32, 3), np.uint8)),
                                              "cifar10-jpeg/test/a/0000.jpg": jpeg_bytes(np.zeros((16, 32, 3), np.uint8))})
    with pytest.raises(DataError, match=r"is 32x16 but the other images are 32x32"):
        load_dataset(f"cifar10-jpeg:{sizes}")


def test_damaged_copy_is_caught_by_md5sums(tmp_path):
    path = tmp_path / "cifar10-jpeg.tar.gz"
    synthetic(path)
    (tmp_path / "MD5SUMS").write_text(f"{'0' * 32}  cifar10-jpeg.tar.gz\n")
    with pytest.raises(DataError, match=r"has md5 [0-9a-f]{32} but .*MD5SUMS says 0+; the copy is damaged"):
        load_dataset(f"cifar10-jpeg:{path}")
    (tmp_path / "MD5SUMS").write_text(f"{cifar_jpeg.file_md5(path)}  cifar10-jpeg.tar.gz\n")
    assert len(load_dataset(f"cifar10-jpeg:{path}")) == 4


def test_bad_subset_options(tmp_path):
    path = tmp_path / "cifar10-jpeg.tar.gz"
    synthetic(path)
    with pytest.raises(DataError, match=r"per_class=5 but the train split's class cat \(3\), dog \(3\) has fewer images; "
                                        r"lower per_class to at most 3"):
        load_dataset(f"cifar10-jpeg:{path},per_class=5", "train")
    # the test split takes per_class too when no test_per_class is given: the refusal names that option
    assert len(load_dataset(f"cifar10-jpeg:{path},per_class=3,test_per_class=2", "test")) == 4
    with pytest.raises(DataError, match=r"per_class=3 applies to the test split too, which has 2 images per class; "
                                        r"add test_per_class=2 \(all of them\)"):
        load_dataset(f"cifar10-jpeg:{path},per_class=3", "test")
    with pytest.raises(DataError, match=r"limit=5 but the test split has 4 images; add test_limit=4"):
        load_dataset(f"cifar10-jpeg:{path},limit=5", "test")
    with pytest.raises(DataError, match="per_class and limit are both given"):
        load_dataset(f"cifar10-jpeg:{path},per_class=1,limit=2", "train")
    with pytest.raises(DataError, match="limit=9 but the train split has 6 images; lower limit"):
        load_dataset(f"cifar10-jpeg:{path},limit=9", "train")
    with pytest.raises(DataError, match="per_class=0 must be >= 1"):
        load_dataset(f"cifar10-jpeg:{path},per_class=0", "train")
    with pytest.raises(DataError, match="has no option 'per_clas'"):
        load_dataset(f"cifar10-jpeg:{path},per_clas=1", "train")


def test_listed_by_robfair_datasets():
    from robfair.data import describe_datasets

    row = next(r for r in describe_datasets() if r.name == "cifar10-jpeg")
    assert "lossy" in row.description and "per_class=" in row.formats


def test_decoding_in_dataloader_workers_gives_the_same_arrays(tmp_path, cache):
    """workers=N decodes in DataLoader worker processes (the GPU script's first load): same pixels, same order."""
    arch = tmp_path / "w" / cifar_jpeg.ARCHIVE
    arch.parent.mkdir()
    members = synthetic(arch, classes=("cat", "dog", "frog"), n_train=5, n_test=3)
    here = cifar_jpeg.decode_archive(arch)
    there = cifar_jpeg.decode_archive(arch, workers=2)
    assert here["classes"] == there["classes"] == ["cat", "dog", "frog"]
    for split in ("train", "test"):
        assert np.array_equal(here[split][0], there[split][0]) and np.array_equal(here[split][1], there[split][1])
    first = cifar_jpeg.read_members(arch, limit=4)
    assert len(first) == 4 and all(data == members[where.split(":", 1)[1]] for *_, data, where in first)
    ds = load_dataset(f"cifar10-jpeg:{arch},workers=2", "test")
    assert torch.equal(ds.x, torch.from_numpy(here["test"][0]))
    with pytest.raises(DataError, match="workers=-1 must be >= 0"):
        load_dataset(f"cifar10-jpeg:{arch},workers=-1", "test")
