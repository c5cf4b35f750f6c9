"""save_checkpoint / load_checkpoint: exact round trips, wrappers, weights_only safety, every error."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
from torch import nn

from robfair.errors import ModelError
from robfair.models import create, load_checkpoint, save_checkpoint

CLASSES = ["a", "b", "c"]


def _trained_cnn() -> nn.Module:
    """cifar-cnn with non-trivial BN running statistics and normalization."""
    torch.manual_seed(0)
    model = create("cifar-cnn", 3, (3, 8, 8), mean=(0.4, 0.5, 0.6), std=(0.2, 0.3, 0.4))
    model.train()
    with torch.no_grad():
        model(torch.rand(8, 3, 8, 8) * 0.5 + 0.3)
    return model.eval()


def test_round_trip_identical_logits(tmp_path):
    model = _trained_cnn()
    x = torch.rand(5, 3, 8, 8)
    extra = {"epoch": 3, "lr": 0.1, "best": None, "ok": True, "hist": [1.0, 2.0], "opt": {0: {"m": torch.ones(2)}}, "t": (1, "x")}
    save_checkpoint(tmp_path / "ck.pt", model, classes=CLASSES, extra=extra)
    loaded, meta = load_checkpoint(tmp_path / "ck.pt")
    assert not loaded.training
    assert torch.equal(loaded(x), model(x))
    assert meta["format"] == "robfair-checkpoint" and meta["version"] == 1
    assert meta["classes"] == CLASSES and meta["spec"] == model.robfair_spec
    assert meta["extra"]["epoch"] == 3 and torch.equal(meta["extra"]["opt"][0]["m"], torch.ones(2))
    assert meta["extra"]["t"] == (1, "x")
    # a real, trainable model on the CPU (nothing left on the meta device)
    assert all(t.device.type == "cpu" for t in list(loaded.parameters()) + list(loaded.buffers()))
    assert all(p.requires_grad for p in loaded.parameters())
    # and it can be saved again
    save_checkpoint(tmp_path / "ck2.pt", loaded, classes=meta["classes"])
    assert torch.equal(load_checkpoint(tmp_path / "ck2.pt")[0](x), model(x))


def test_file_holds_only_plain_types_and_contiguous_tensors(tmp_path):
    model = _trained_cnn().to(memory_format=torch.channels_last)
    save_checkpoint(tmp_path / "ck.pt", model, classes=CLASSES)
    raw = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert set(raw) == {"format", "version", "spec", "classes", "state_dict", "extra"}
    assert raw["extra"] == {}
    assert all(v.is_contiguous() for v in raw["state_dict"].values())
    loaded, _ = load_checkpoint(tmp_path / "ck.pt")
    x = torch.rand(2, 3, 8, 8)
    assert torch.allclose(loaded(x), model(x.contiguous(memory_format=torch.channels_last)), atol=1e-5)


def test_wrappers_are_peeled(tmp_path):
    model = _trained_cnn()
    x = torch.rand(2, 3, 8, 8)
    ema = torch.optim.swa_utils.AveragedModel(model)
    for i, wrapped in enumerate([ema, nn.DataParallel(model)]):
        save_checkpoint(tmp_path / f"w{i}.pt", wrapped, classes=CLASSES)
        keys = torch.load(tmp_path / f"w{i}.pt", weights_only=True)["state_dict"].keys()
        assert not any(k.startswith(("module.", "_orig_mod.")) for k in keys) and "n_averaged" not in keys
        assert torch.equal(load_checkpoint(tmp_path / f"w{i}.pt")[0](x), model(x))


class _Payload:
    """Pickles as a call to os.mkdir(marker): what a malicious checkpoint does."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_payload_would_run_under_plain_pickle(tmp_path):
    # sanity check of the attack used below: unrestricted unpickling runs it
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("writer", ["torch", "pickle"])
def test_pickled_code_is_refused_and_never_runs(tmp_path, writer):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    obj = {"format": "robfair-checkpoint", "x": _Payload(marker)}
    if writer == "torch":
        torch.save(obj, path)
    else:
        path.write_bytes(pickle.dumps(obj))
    with pytest.raises(ModelError, match=r"refusing to load .*evil\.pt: it holds pickled code \(posix\.mkdir\).*pass --arch FILE\.py:NAME"):
        load_checkpoint(path)
    assert not marker.exists()


def test_pickled_module_is_refused(tmp_path):
    torch.save(create("mlp", 3, (1, 4, 4)), tmp_path / "whole.pt")  # torch.save(model): pickled classes
    with pytest.raises(ModelError, match=r"refusing to load .*pickled code \(robfair\.models\.parts\.Normalized"):
        load_checkpoint(tmp_path / "whole.pt")


def test_bare_state_dict_refused(tmp_path):
    model = create("mlp", 3, (1, 4, 4))
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    with pytest.raises(ModelError, match=r"bare state_dict.*robfair\.models\.create\(.*load_state_dict.*save_checkpoint"):
        load_checkpoint(tmp_path / "sd.pt")


def test_other_torch_file_refused(tmp_path):
    torch.save({"model": {"w": torch.ones(1)}, "epoch": 3}, tmp_path / "other.pt")
    with pytest.raises(ModelError, match=r"not a robfair checkpoint \(it holds a dict with keys \['epoch', 'model'\]\)"):
        load_checkpoint(tmp_path / "other.pt")
    torch.save(torch.ones(3), tmp_path / "t.pt")
    with pytest.raises(ModelError, match="not a robfair checkpoint"):
        load_checkpoint(tmp_path / "t.pt")


def test_corrupt_files(tmp_path):
    save_checkpoint(tmp_path / "ok.pt", create("mlp", 3, (1, 4, 4)), classes=CLASSES)
    data = (tmp_path / "ok.pt").read_bytes()
    cases = {"trunc.pt": data[: len(data) // 2], "empty.pt": b"", "noise.pt": bytes(range(256)) * 4, "text.pt": b"hello world"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ModelError, match=r"cannot read .* as a torch checkpoint.*corrupt or not a torch file"):
            load_checkpoint(tmp_path / name)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ModelError, match=r"nope\.pt does not exist; check the path"):
        load_checkpoint(tmp_path / "nope.pt")
    with pytest.raises(ModelError, match="is a directory"):
        load_checkpoint(tmp_path)


def _doctored(tmp_path, edit):
    save_checkpoint(tmp_path / "ck.pt", create("mlp", 3, (1, 4, 4), hidden=[5]), classes=CLASSES)
    raw = torch.load(tmp_path / "ck.pt", weights_only=True)
    edit(raw)
    torch.save(raw, tmp_path / "bad.pt")
    return tmp_path / "bad.pt"


def test_unknown_architecture(tmp_path):
    path = _doctored(tmp_path, lambda r: r["spec"].update(name="resnet9000"))
    with pytest.raises(ModelError, match=r"architecture 'resnet9000', which this robfair does not know; choose one of: .*mlp"):
        load_checkpoint(path)


def test_state_dict_mismatch(tmp_path):
    def edit(r):
        del r["state_dict"]["net.1.bias"]
        r["state_dict"]["net.3.weight"] = torch.zeros(3, 6)
        r["state_dict"]["junk"] = torch.zeros(1)

    with pytest.raises(ModelError, match=r"do not match architecture 'mlp' \(1 missing \(e\.g\. 'net\.1\.bias'\), 1 unexpected .*1 wrong-shape"):
        load_checkpoint(_doctored(tmp_path, edit))


def test_newer_version_and_bad_spec(tmp_path):
    with pytest.raises(ModelError, match="newer robfair"):
        load_checkpoint(_doctored(tmp_path, lambda r: r.update(version=2)))
    with pytest.raises(ModelError, match="incomplete model spec"):
        load_checkpoint(_doctored(tmp_path, lambda r: r["spec"].pop("in_shape")))
    with pytest.raises(ModelError, match=r"bad\.pt: model 'mlp' has no argument 'depth'"):
        load_checkpoint(_doctored(tmp_path, lambda r: r["spec"]["kwargs"].update(depth=3)))


def test_unserializable_extra_leaves_no_file(tmp_path):
    import numpy as np

    model = create("mlp", 3, (1, 4, 4))
    for bad in ({"rng": np.zeros(3)}, {"f": lambda: 0}, {"nested": [{"s": {1, 2}}]}, {("a", 1): 2}):
        with pytest.raises(ModelError, match=r"extra.*(convert it|use str or int keys)"):
            save_checkpoint(tmp_path / "ck.pt", model, classes=CLASSES, extra=bad)
    assert list(tmp_path.iterdir()) == []
    # an existing checkpoint survives a failed save untouched
    save_checkpoint(tmp_path / "ck.pt", model, classes=CLASSES, extra={"epoch": 1})
    before = (tmp_path / "ck.pt").read_bytes()
    with pytest.raises(ModelError):
        save_checkpoint(tmp_path / "ck.pt", model, classes=CLASSES, extra={"epoch": np.int64(2)})
    assert (tmp_path / "ck.pt").read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["ck.pt"]


def test_save_errors(tmp_path):
    with pytest.raises(ModelError, match=r"no robfair_spec; build it with robfair\.models\.create"):
        save_checkpoint(tmp_path / "x.pt", nn.Linear(2, 2), classes=["a", "b"])
    with pytest.raises(ModelError, match="classes has 2 names but the model predicts 3"):
        save_checkpoint(tmp_path / "x.pt", create("mlp", 3, (1, 4, 4)), classes=["a", "b"])
    with pytest.raises(ModelError, match="extra must be a dict"):
        save_checkpoint(tmp_path / "x.pt", create("mlp", 3, (1, 4, 4)), classes=CLASSES, extra=[1])
    assert not (tmp_path / "x.pt").exists()
