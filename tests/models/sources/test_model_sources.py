"""Every form ``--model`` accepts, end to end through the CLI, on an architecture the test defines
itself (TinyNet, see conftest): the same weights give the same counts whatever the file form."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from _shared import run_cli
from robfair.errors import ModelError
from robfair.models import MODELS, Normalized, detect_format, load_any, save_checkpoint

AUDIT = ["audit", "--attack", "fgsm", "--attack", "pgd5", "--eps", "0.03", "--bootstrap", "0", "--device", "cpu"]


def _register_tiny(mod):
    """The tests' TinyNet as a robfair architecture, so that a robfair checkpoint can name it."""
    if "test-tinynet" not in MODELS:
        @MODELS.register("test-tinynet", help="the tests' TinyNet")
        def _factory(num_classes, in_shape, *, width: int = 6):
            return mod.TinyNet(width=width, classes=num_classes)


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny):
    """The same TinyNet weights saved in every form."""
    mod, net = tiny
    d = tmp_path_factory.mktemp("forms")
    x = torch.rand(4, 1, 8, 8)
    out = {}
    _register_tiny(mod)
    from robfair.models import create

    robfair_model = create("test-tinynet", 3, (1, 8, 8), width=5)
    robfair_model.net.load_state_dict(net.state_dict())
    save_checkpoint(d / "robfair.pt", robfair_model, classes=["a", "b", "c"])
    out["robfair"] = [d / "robfair.pt"]
    torch.jit.save(torch.jit.script(net), d / "scripted.pt")
    out["jit.script"] = [d / "scripted.pt"]
    torch.jit.save(torch.jit.trace(net, x), d / "traced.bin")  # extension says nothing: content decides
    out["jit.trace"] = [d / "traced.bin"]
    ep = torch.export.export(net, (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=4096)},))
    torch.export.save(ep, d / "dynamic.pt2")
    out["export"] = [d / "dynamic.pt2"]
    torch.export.save(torch.export.export(net, (x,)), d / "static.pt2")  # exported for batch 4 only
    out["export (fixed batch)"] = [d / "static.pt2"]
    nested = {"epoch": 3, "state_dict": {f"module.{k}": v for k, v in net.state_dict().items()}}
    torch.save(nested, d / "weights.pt")
    out["state dict"] = [d / "weights.pt", "--arch", f"{mod.__file__}:TinyNet", "--arch-kwargs", '{"width": 5}']
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, d / "weights.safetensors")
    out["safetensors"] = [d / "weights.safetensors", "--arch", f"{mod.__file__}:build", "--arch-kwargs", "width: 5"]
    yield out
    MODELS._entries.pop("test-tinynet", None)  # leave the registry as the other test modules expect it


def _audit(capsys, tmp_path, model_args, data, *extra):
    out = tmp_path / "a.json"
    if out.exists():
        out.unlink()
    code, stdout, err = run_cli(AUDIT + ["-m", *model_args, "--data", f"npz:{data}", "-o", out, *extra], capsys)
    assert code == 0, err
    return json.loads(out.read_text())


def test_detect_format_from_content(files):
    kinds = {name: detect_format(args[0]) for name, args in files.items()}
    assert kinds == {"robfair": "torch", "jit.script": "torchscript", "jit.trace": "torchscript", "export": "export",
                     "export (fixed batch)": "export", "state dict": "torch", "safetensors": "safetensors"}


def test_every_source_gives_the_same_numbers(files, data_npz, tmp_path, capsys, tiny):
    counts = {}
    for name, args in files.items():
        d = _audit(capsys, tmp_path, [str(a) for a in args], data_npz)
        counts[name] = {k: v["counts"] for k, v in d["reports"].items()}
        assert d["meta"]["n"] == 60
    ref = counts["robfair"]
    # the reference numbers themselves: clean accuracy of the net on its own (2/3 relabelled) data
    _, net = tiny
    z = np.load(data_npz)
    with torch.no_grad():
        clean = (net(torch.from_numpy(z["x"])).argmax(1).numpy() == z["y"]).mean()
    assert sum(map(sum, ref["fgsm"]["clean"])) / 60 == pytest.approx(clean)
    assert 0 < sum(map(sum, ref["pgd5"]["robust"])) < sum(map(sum, ref["pgd5"]["clean"]))  # the attack does work
    for name, c in counts.items():
        assert c == ref, f"{name} differs from the robfair checkpoint"


def test_load_any_python_outputs_match(files, tiny):
    _, net = tiny
    x = torch.rand(7, 1, 8, 8)
    want = net(x)
    for name, args in files.items():
        kw = {}
        if "--arch" in args:
            kw = {"arch": args[args.index("--arch") + 1], "arch_kwargs": {"width": 5}}
        model, meta = load_any(args[0], **kw)
        torch.testing.assert_close(model(x), want, msg=name)
        assert meta["source"] in ("robfair-checkpoint", "torchscript", "export", "state-dict", "safetensors")


def test_normalized_model_wrong_without_mean_std_right_with(tmp_path, capsys, tiny, calibrate):
    """A model trained on normalized inputs: audited raw it is wrong, with --mean/--std it is right."""
    import copy

    mean, std = (0.5,), (0.1,)
    rng = np.random.default_rng(1)
    x = rng.random((48, 1, 8, 8)).astype(np.float32)
    gen = torch.Generator().manual_seed(5)
    net = calibrate(copy.deepcopy(tiny[1]), (torch.rand(200, 1, 8, 8, generator=gen) - 0.5) / 0.1)  # "trained" on normalized inputs
    with torch.no_grad():
        y = Normalized(net, mean, std)(torch.from_numpy(x)).argmax(1).numpy()
    data = tmp_path / "norm.npz"
    np.savez(data, x=x, y=y, classes=np.array(["a", "b", "c"]))
    ts = tmp_path / "net.ts"
    torch.jit.save(torch.jit.script(net), ts)
    right = _audit(capsys, tmp_path, [str(ts)], data, "--mean", "0.5", "--std", "0.1")
    wrong = _audit(capsys, tmp_path, [str(ts)], data)
    acc = lambda d: d["reports"]["fgsm"]["overall"]["clean_acc"]  # noqa: E731
    assert acc(right) == 1.0  # labels are the normalized model's own predictions
    assert acc(wrong) < 0.7
    assert len(set(y.tolist())) == 3
    from robfair import audit

    py = audit(net, (torch.from_numpy(x), torch.from_numpy(y)), attacks=["fgsm"], eps=0.1, mean=0.5, std=0.1,
               device="cpu")
    assert py.main.overall["clean_acc"] == 1.0
    assert py.main.counts == audit(Normalized(net, mean, std), (x, y), attacks=["fgsm"], eps=0.1, device="cpu").main.counts


def test_class_order_mismatch_is_an_error_naming_both_lists(files, data_npz, tmp_path, capsys):
    z = dict(np.load(data_npz))
    swapped = tmp_path / "swapped.npz"
    # the same images with classes 'a' and 'b' renamed into each other's position (image-folder rename)
    np.savez(swapped, x=z["x"], y=np.array([{0: 1, 1: 0}.get(int(v), int(v)) for v in z["y"]]),
             classes=np.array(["b", "a", "c"]))
    out = tmp_path / "x.json"
    code, _, err = run_cli(AUDIT + ["-m", files["robfair"][0], "--data", f"npz:{swapped}", "-o", out], capsys)
    assert code == 2 and not out.exists()
    line = err.strip()
    assert len(line.splitlines()) == 1
    assert "['a', 'b', 'c']" in line and "['b', 'a', 'c']" in line and "--class-map" in line
    # stating the mapping: the labels are re-indexed by name and the numbers equal the original data's
    fixed = _audit(capsys, tmp_path, [str(files["robfair"][0])], swapped, "--class-map", "model")
    ref = _audit(capsys, tmp_path, [str(files["robfair"][0])], data_npz)
    assert fixed["reports"]["fgsm"]["counts"] == ref["reports"]["fgsm"]["counts"]


def test_unknown_file_lists_the_forms(tmp_path, capsys):
    junk = tmp_path / "model.pt"
    junk.write_bytes(b"\x00garbage" * 10)
    code, _, err = run_cli(AUDIT + ["-m", junk], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    for form in ("robfair checkpoint", "TorchScript", "torch.export", "--arch", "robustbench:NAME"):
        assert form in err


def test_state_dict_errors(files, tmp_path, tiny):
    mod, _ = tiny
    with pytest.raises(ModelError, match="state dict .*--arch"):
        load_any(files["state dict"][0])
    with pytest.raises(ModelError, match=r"do not match.*wrong-shape.*--arch-kwargs"):
        load_any(files["state dict"][0], arch=f"{mod.__file__}:TinyNet", arch_kwargs={"width": 7})
    with pytest.raises(ModelError, match="has no class or function 'Nope'.*TinyNet"):
        load_any(files["state dict"][0], arch=f"{mod.__file__}:Nope")
    with pytest.raises(ModelError, match="drop --arch"):
        load_any(files["jit.script"][0], arch=f"{mod.__file__}:TinyNet")


def test_class_order_in_python(files, data_npz):
    """load_any tags the model with its stored classes; audit() refuses another order unless classes= states it."""
    from robfair import audit
    from robfair.data import Dataset, load_dataset
    from robfair.errors import DataError

    model, meta = load_any(files["robfair"][0])
    assert meta["classes"] == ["a", "b", "c"]
    ds = load_dataset(f"npz:{data_npz}")
    swap = torch.tensor([1, 0, 2])
    renamed = Dataset(x=ds.x, y=swap[ds.y], classes=["b", "a", "c"])
    with pytest.raises(DataError, match=r"\['a', 'b', 'c'\].*\['b', 'a', 'c'\]"):
        audit(model, renamed, attacks=["fgsm"], eps=0.03, device="cpu")
    ok = audit(model, renamed, attacks=["fgsm"], eps=0.03, device="cpu", classes=["a", "b", "c"])
    ref = audit(model, ds, attacks=["fgsm"], eps=0.03, device="cpu")
    assert ok.main.counts == ref.main.counts and ok.main.class_names == ("a", "b", "c")
