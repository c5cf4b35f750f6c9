"""Image folders of real PNG / JPEG files written with Pillow."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from robfair.data import load_dataset
from robfair.errors import DataError

RNG = np.random.default_rng(0)


def save(path, a: np.ndarray) -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(a).save(path)
    return a


def rgb(h=5, w=4):
    return RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_rgb_folder_values_and_class_indices(tmp_path):
    cat0 = save(tmp_path / "train/cat/b.png", rgb())
    cat1 = save(tmp_path / "train/cat/a.png", rgb())
    dog = save(tmp_path / "train/dog/x.png", rgb())
    rgba = RNG.integers(0, 256, (5, 4, 4), dtype=np.uint8)
    save(tmp_path / "train/dog/y.png", rgba)
    (tmp_path / "train/dog/notes.txt").write_text("not an image")
    save(tmp_path / "test/ant/t.png", rgb())  # a class only the test split has
    tr = load_dataset(f"imagefolder:{tmp_path}", split="train")
    assert tr.classes == ["ant", "cat", "dog"]  # both splits' folders: indices agree across splits
    assert tr.y.tolist() == [1, 1, 2, 2] and tr.x.dtype == torch.uint8 and tr.x.shape == (4, 3, 5, 4)
    assert np.array_equal(tr.x[0].numpy(), cat1.transpose(2, 0, 1))  # files sorted by name
    assert np.array_equal(tr.x[1].numpy(), cat0.transpose(2, 0, 1))
    assert np.array_equal(tr.x[2].numpy(), dog.transpose(2, 0, 1))
    assert np.array_equal(tr.x[3].numpy(), rgba[..., :3].transpose(2, 0, 1))  # alpha dropped
    te = load_dataset(f"imagefolder:{tmp_path}", split="test")
    assert te.classes == tr.classes and te.y.tolist() == [0]
    assert te.name == tmp_path.name


def test_grayscale_one_channel_and_mixed_promoted(tmp_path):
    g = save(tmp_path / "train/a/g.png", RNG.integers(0, 256, (6, 6), dtype=np.uint8))
    save(tmp_path / "test/a/g.png", g)
    ds = load_dataset(f"imagefolder:{tmp_path}", split="test")
    assert ds.x.shape == (1, 1, 6, 6) and np.array_equal(ds.x[0, 0].numpy(), g)
    c = save(tmp_path / "train/b/c.png", rgb(6, 6))
    tr = load_dataset(f"imagefolder:{tmp_path}", split="train")
    assert tr.x.shape == (2, 3, 6, 6)
    assert all(np.array_equal(tr.x[0, i].numpy(), g) for i in range(3))
    assert np.array_equal(tr.x[1].numpy(), c.transpose(2, 0, 1))


def test_jpeg_and_val_folder_for_test(tmp_path):
    save(tmp_path / "train/a/1.jpg", rgb(8, 8))
    save(tmp_path / "val/a/2.JPEG", rgb(8, 8))
    ds = load_dataset(f"imagefolder:{tmp_path}", split="test")
    assert ds.x.shape == (1, 3, 8, 8)


def test_mixed_sizes_name_the_file(tmp_path):
    save(tmp_path / "train/a/1.png", rgb(5, 4))
    save(tmp_path / "train/b/2.png", rgb(7, 4))
    with pytest.raises(DataError, match=r"b/2.png is 4x7 but .*a/1.png is 4x5; .*resize them first"):
        load_dataset(f"imagefolder:{tmp_path}", split="train")


def test_bad_layouts(tmp_path):
    with pytest.raises(DataError, match="needs a path"):
        load_dataset("imagefolder")
    with pytest.raises(DataError, match="is not a folder"):
        load_dataset(f"imagefolder:{tmp_path / 'missing'}")
    save(tmp_path / "flat/cat/1.png", rgb())
    msg = r"flat/train does not exist .*move them into train/ and test/.*PATH/train/<class>"
    with pytest.raises(DataError, match=msg):
        load_dataset(f"imagefolder:{tmp_path / 'flat'}", split="train")
    (tmp_path / "empty/test").mkdir(parents=True)
    with pytest.raises(DataError, match="no class folders"):
        load_dataset(f"imagefolder:{tmp_path / 'empty'}")
    (tmp_path / "empty/test/cls").mkdir()
    (tmp_path / "empty/test/cls/readme.md").write_text("x")
    with pytest.raises(DataError, match="no images"):
        load_dataset(f"imagefolder:{tmp_path / 'empty'}")


def test_corrupt_image(tmp_path):
    save(tmp_path / "test/a/ok.png", rgb())
    (tmp_path / "test/a/zz.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(20))
    with pytest.raises(DataError, match="zz.png is not a readable image.*fix or delete it"):
        load_dataset(f"imagefolder:{tmp_path}")
