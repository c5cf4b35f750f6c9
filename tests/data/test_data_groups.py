"""Protected groups in the data: spec options, UTKFace file names, CelebA attribute files, image
folders with a groups CSV, npz, and the errors for attributes or groups that are not there."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from robfair.data import load_dataset, split_options, with_options
from robfair.data.loading import parse_spec
from robfair.data.utkface import RACES, parse_age_bins, parse_name
from robfair.errors import DataError


# ------------------------------------------------------------------ spec options
def test_split_options_keeps_lists_and_paths():
    assert split_options("digits") == ("digits", {})
    assert split_options("utkface:~/U,task=age,age_bins=20,40,60,groups=race") == (
        "utkface:~/U", {"task": "age", "age_bins": "20,40,60", "groups": "race"})
    assert split_options("npz:/a,b/c.npz,groups=g") == ("npz:/a,b/c.npz", {"groups": "g"})  # comma inside the path
    assert parse_spec("utkface:/data/U,groups=race") == ("utkface", __import__("pathlib").Path("/data/U"))
    assert with_options("utkface:/U,task=age", groups="race", size=None) == "utkface:/U,task=age,groups=race"
    assert with_options("utkface:/U,groups=gender", groups="race") == "utkface:/U,groups=race"
    with pytest.raises(DataError, match="given twice"):
        split_options("utkface:/U,task=age,task=race")


def test_generic_groups_on_loaders_without_attributes(tmp_path):
    assert load_dataset("digits,groups=class").g is None
    with pytest.raises(DataError, match=r"dataset 'digits' has no group attribute 'race'; choose one of: class"):
        load_dataset("digits", groups="race")
    with pytest.raises(DataError, match=r"dataset 'digits' has no option 'size'; valid options: groups"):
        load_dataset("digits,size=3")
    x = np.zeros((6, 1, 2, 2), np.uint8)
    np.savez(tmp_path / "a.npz", x=x, y=np.array([0, 1, 0, 1, 0, 1]), g=np.array([0, 0, 1, 1, 2, 2]),
             groups=np.array(["a", "b", "c"]))
    ds = load_dataset(f"npz:{tmp_path / 'a.npz'}", groups="g")
    assert ds.g.tolist() == [0, 0, 1, 1, 2, 2] and ds.group_names == ["a", "b", "c"]
    assert load_dataset(f"npz:{tmp_path / 'a.npz'},groups=class").g is None
    with pytest.raises(DataError, match="choose one of: class, g"):
        load_dataset(f"npz:{tmp_path / 'a.npz'}", groups="race")
    with pytest.raises(DataError, match="given twice"):
        load_dataset(f"npz:{tmp_path / 'a.npz'},groups=g", groups="class")
    # an explicitly selected group without samples in the split is an error
    np.savez(tmp_path / "b.npz", x=x, y=np.array([0, 1, 0, 1, 0, 1]), g=np.array([0, 0, 1, 1, 1, 1]),
             groups=np.array(["a", "b", "c"]))
    with pytest.raises(DataError, match=r"1 group\(s\) of dataset 'b' have no samples in the test split \(c\)"):
        load_dataset(f"npz:{tmp_path / 'b.npz'}", groups="g")
    assert load_dataset(f"npz:{tmp_path / 'b.npz'}").g is not None  # not selected: kept as before


# ------------------------------------------------------------------ UTKFace
def _face(path, idx: int, side: int = 6):
    """A tiny PNG (lossless) whose first pixel encodes the file index."""
    a = np.full((side, side, 3), 7, np.uint8)
    a[0, 0, 0] = idx
    Image.fromarray(a).save(path, format="PNG")


def write_utkface(tmp_path):
    """A tiny UTKFace folder (tmp_path/UTKFace: 50 faces, 5 per (gender, race) cell, one malformed
    name, one stray file); returns (tmp_path, [(index, age, gender, race), ...])."""
    root = tmp_path / "UTKFace"
    root.mkdir()
    rng = np.random.default_rng(0)
    files = []
    i = 0
    for gender in (0, 1):
        for race in range(5):
            for _ in range(5):  # 5 per (gender, race) cell: 1 goes to test at test_frac=0.2
                age = int(rng.integers(1, 90))
                name = f"{age}_{gender}_{race}_2017011{i:09d}.jpg.chip.jpg"
                _face(root / name, i)
                files.append((i, age, gender, race))
                i += 1
    Image.fromarray(np.zeros((6, 6, 3), np.uint8)).save(root / "39_1_20170116174525125.jpg.chip.jpg", format="PNG")
    (root / "notes.txt").write_text("not a face")
    return tmp_path, files


@pytest.fixture
def utk(tmp_path):
    return write_utkface(tmp_path)


def test_utkface_names():
    assert parse_name("25_1_3_20170119.jpg.chip.jpg") == (25, 1, 3)
    assert parse_name("100_0_0_20170112213500903.jpg") == (100, 0, 0)
    assert parse_name("39_1_20170116174525125.jpg.chip.jpg") is None  # the release's malformed names
    assert parse_age_bins("20,40") == (20, 40)
    with pytest.raises(DataError, match="increasing"):
        parse_age_bins("40,20")


def test_utkface_labels_groups_and_split(utk):
    tmp_path, files = utk
    meta = {i: (a, g, r) for i, a, g, r in files}
    tr = load_dataset(f"utkface:{tmp_path},size=6", "train")
    te = load_dataset(f"utkface:{tmp_path},size=6", "test")
    assert tr.classes == ["Male", "Female"] and tr.group_names == list(RACES)  # task gender, groups race
    assert tr.x.shape[1:] == (3, 6, 6) and tr.x.dtype == torch.uint8
    ids_tr, ids_te = tr.x[:, 0, 0, 0].tolist(), te.x[:, 0, 0, 0].tolist()
    assert sorted(ids_tr + ids_te) == list(range(50)) and not set(ids_tr) & set(ids_te)  # malformed file skipped
    assert len(ids_te) == 10  # 20% of every (gender, race) cell
    assert sorted((meta[i][1], meta[i][2]) for i in ids_te) == [(g, r) for g in (0, 1) for r in range(5)]
    for ds, ids in ((tr, ids_tr), (te, ids_te)):
        assert ds.y.tolist() == [meta[i][1] for i in ids] and ds.g.tolist() == [meta[i][2] for i in ids]
    # the split does not depend on the task, the groups or the size
    age = load_dataset(f"utkface:{tmp_path},task=age,age_bins=20,40,groups=gender,size=6", "test")
    assert age.x[:, 0, 0, 0].tolist() == ids_te
    assert age.classes == ["0-19", "20-39", "40+"] and age.group_names == ["Male", "Female"]
    assert age.y.tolist() == [int(np.searchsorted([20, 40], meta[i][0], side="right")) for i in ids_te]
    assert load_dataset(f"utkface:{tmp_path},task=race,size=6", "test").group_names == ["Male", "Female"]
    assert load_dataset(f"utkface:{tmp_path},size=3", "test").x.shape[1:] == (3, 3, 3)
    few = load_dataset(f"utkface:{tmp_path},size=6,limit=4,groups=class", "train")
    assert len(few) == 4 and set(few.x[:, 0, 0, 0].tolist()) <= set(ids_tr)
    other = load_dataset(f"utkface:{tmp_path},size=6,split_seed=1", "test").x[:, 0, 0, 0].tolist()
    assert other != ids_te and len(other) == 10


def test_utkface_bad_groups_and_empty_groups(utk, tmp_path):
    root, _ = utk
    with pytest.raises(DataError, match=r"dataset 'utkface' has no group attribute 'religion'; choose one of: race, gender"):
        load_dataset(f"utkface:{root}", "test", groups="religion")
    with pytest.raises(DataError, match="task='eyes' is not valid; choose one of: gender, race, age"):
        load_dataset(f"utkface:{root},task=eyes", "test")
    # one 'Others' face only: stratification puts it in test, so train has no 'Others'
    d = tmp_path / "few"
    d.mkdir()
    for i, race in enumerate([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 4]):
        _face(d / f"30_{i % 2}_{race}_20170101{i:05d}.jpg", i)
    with pytest.raises(DataError, match=r"3 group\(s\) .* no samples in the train split \(Asian, Indian, Others\)"):
        load_dataset(f"utkface:{d},size=6", "train")
    with pytest.raises(DataError, match="does not exist; it should hold UTKFace images"):
        load_dataset(f"utkface:{tmp_path / 'nothing'}", "test")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no files found in .*empty"):
        load_dataset(f"utkface:{tmp_path / 'empty'}", "test")


# ------------------------------------------------------------------ CelebA
ATTRS = ["Smiling", "Male", "Young"]


def write_celeba(root, csv: bool = False, nested: bool = False):
    """A tiny CelebA folder (12 images 7x5, 3 attributes, 4 per partition); returns (values, partitions)."""
    rng = np.random.default_rng(1)
    n = 12
    vals = rng.choice([-1, 1], size=(n, 3))
    for start in (0, 4, 8):  # both values of Smiling and Male in every partition
        vals[start:start + 2, :2] = [[-1, 1], [1, -1]]
    part = [0] * 4 + [1] * 4 + [2] * 4
    img = root / "img_align_celeba" / ("img_align_celeba" if nested else "")
    img.mkdir(parents=True)
    names = [f"{i + 1:06d}.jpg" for i in range(n)]
    for i, f in enumerate(names):
        a = np.full((7, 5, 3), 50, np.uint8)  # non-square: centre-cropped to 5x5
        a[1:6, :, 0] = 10 * i
        Image.fromarray(a).save(img / f, format="PNG")
    if csv:
        (root / "list_attr_celeba.csv").write_text(
            "image_id," + ",".join(ATTRS) + "\n" + "".join(f"{f}," + ",".join(map(str, v)) + "\n" for f, v in zip(names, vals)))
        (root / "list_eval_partition.csv").write_text(
            "image_id,partition\n" + "".join(f"{f},{p}\n" for f, p in zip(names, part)))
    else:
        (root / "list_attr_celeba.txt").write_text(
            f"{n}\n" + " ".join(ATTRS) + "\n" + "".join(f"{f} " + "  ".join(f"{x:2d}" for x in v) + "\n" for f, v in zip(names, vals)))
        (root / "list_eval_partition.txt").write_text("".join(f"{f} {p}\n" for f, p in zip(names, part)))
    return vals, part


@pytest.mark.parametrize("csv,nested", [(False, False), (True, True)])
def test_celeba_attributes_partitions_and_crop(tmp_path, csv, nested):
    vals, part = write_celeba(tmp_path, csv=csv, nested=nested)
    te = load_dataset(f"celeba:{tmp_path},size=5", "test")
    assert te.classes == ["not Smiling", "Smiling"] and te.group_names == ["not Male", "Male"]
    assert te.y.tolist() == [int(v > 0) for v in vals[8:, 0]] and te.g.tolist() == [int(v > 0) for v in vals[8:, 1]]
    assert te.x.shape == (4, 3, 5, 5)
    assert te.x[:, 0, 0, 0].tolist() == [10 * i for i in range(8, 12)]  # rows 1..5 of 7 kept: centre crop
    tr = load_dataset(f"celeba:{tmp_path},label=young,groups=smiling,size=5", "train")
    assert tr.classes == ["not Young", "Young"] and tr.y.tolist() == [int(v > 0) for v in vals[:4, 2]]
    assert tr.g.tolist() == [int(v > 0) for v in vals[:4, 0]] and tr.group_names == ["not Smiling", "Smiling"]
    val = load_dataset(f"celeba:{tmp_path},partition=val,size=5", "test")
    assert val.x[:, 0, 0, 0].tolist() == [10 * i for i in range(4, 8)]
    assert load_dataset(f"celeba:{tmp_path},size=2", "test").x.shape[2:] == (2, 2)


def test_celeba_errors(tmp_path):
    write_celeba(tmp_path)
    with pytest.raises(DataError, match=r"celeba has no attribute 'Smilling' \(did you mean 'Smiling'\?\)"):
        load_dataset(f"celeba:{tmp_path},label=Smilling", "test")
    with pytest.raises(DataError, match=r"dataset 'celeba' has no group attribute 'race'; choose one of: class, Smiling"):
        load_dataset(f"celeba:{tmp_path}", "test", groups="race")
    with pytest.raises(DataError, match="no files found|expected list_attr"):
        load_dataset(f"celeba:{tmp_path / 'img_align_celeba'}", "test")


# ------------------------------------------------------------------ image folders with groups.csv
def _img(path, v):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((4, 4), v, np.uint8)).save(path)


def test_imagefolder_groups_csv(tmp_path):
    _img(tmp_path / "train/cat/a.png", 1)
    _img(tmp_path / "train/cat/b.png", 2)
    _img(tmp_path / "train/dog/c.png", 3)
    _img(tmp_path / "test/cat/d.png", 4)
    _img(tmp_path / "test/dog/e.png", 5)
    (tmp_path / "groups.csv").write_text(
        "filename,skin,age\ntrain/cat/a.png,dark,old\ncat/b.png,light,young\nc.png,light,old\n"
        "test/cat/d.png,dark,young\ntest/dog/e.png,light,old\n")
    tr = load_dataset(f"imagefolder:{tmp_path}", "train")
    assert tr.group_names == ["dark", "light"] and tr.g.tolist() == [0, 1, 1]  # first column by default
    te = load_dataset(f"imagefolder:{tmp_path},groups=age", "test")
    assert te.group_names == ["old", "young"] and te.g.tolist() == [1, 0]
    assert load_dataset(f"imagefolder:{tmp_path},groups=class", "test").g is None
    with pytest.raises(DataError, match=r"no group attribute 'race'; choose one of: class, skin, age"):
        load_dataset(f"imagefolder:{tmp_path}", "test", groups="race")
    (tmp_path / "groups.csv").write_text("filename,skin\ntrain/cat/a.png,dark\ncat/b.png,light\nc.png,light\n"
                                         "test/cat/d.png,dark\n")
    with pytest.raises(DataError, match=r"test/dog/e.png has no row in .*groups.csv; add 'test/dog/e.png,<skin>'"):
        load_dataset(f"imagefolder:{tmp_path}", "test")
    (tmp_path / "groups.csv").write_text("filename,skin\ntrain/cat/a.png,dark\ncat/b.png,dark\nc.png,dark\n"
                                         "d.png,light\ne.png,light\n")
    with pytest.raises(DataError, match=r"no samples in the train split \(light\)"):
        load_dataset(f"imagefolder:{tmp_path}", "train")
    (tmp_path / "groups.csv").write_text("a.png,dark\n")
    with pytest.raises(DataError, match="header row"):
        load_dataset(f"imagefolder:{tmp_path}", "train")
    (tmp_path / "groups.csv").unlink()
    assert load_dataset(f"imagefolder:{tmp_path}", "train").g is None
    with pytest.raises(DataError, match="no groups file"):
        load_dataset(f"imagefolder:{tmp_path},groups=skin", "train")
    assert load_dataset(f"imagefolder:{tmp_path},size=2", "train").x.shape == (3, 1, 2, 2)
