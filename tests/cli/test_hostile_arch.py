"""Researchers' model files as they are (issue 25 parts 1, 2 and 6), through the CLI and the Python API.

``--arch FILE.py:NAME`` for a file that imports a module beside it (``from blocks import ResBlock``),
for a file inside a package (``from .blocks import ResBlock``, ``from mypkg.nets.blocks import ...``),
``--arch package.module:NAME`` for an installed module and for a package in the current folder:
each audits with the predictions of its weights computed here by hand, and leaves ``sys.path``,
``sys.modules`` and the importer cache as they were (a second file with a ``blocks.py`` of its own
gets its own, in one process). A missing module, a relative import outside a package, a module
raising on import: one line naming the module and the folder searched, exit code 2, nothing written.

``--mean/--std``: every preset (cifar10, cifar100, imagenet; one given fills the other) gives the
predictions of the model on inputs normalized by hand and the Python API's ``mean=``; every wrong
value is one line about the normalization (never the data), exit code 2, nothing written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import robfair
from _shared import run_cli
from test_hostile import snapshot
from test_hostile_models import one_line
from robfair.auditing import AuditReport
from robfair.models import NORMALIZATION_PRESETS, load_any

AUDIT = ["audit", "--bootstrap", "0", "--attack", "fgsm", "--eps", "0.1", "--device", "cpu", "--probe", "0"]
CERTIFY = ["certify", "--n", "100", "--n0", "10", "--per-class", "1", "--device", "cpu", "--bootstrap", "0"]

BLOCKS = '''from torch import nn


class ResBlock(nn.Module):
    def __init__(self, k=10):
        super().__init__()
        self.lin = nn.Linear(64, k)

    def forward(self, x):
        return self.lin(x.flatten(1))
'''
#: another blocks.py with a ResBlock of the same name: other parameter names, negated logits
OTHER_BLOCKS = BLOCKS.replace("self.lin", "self.fc").replace("return self.fc(", "return -self.fc(")
NET = '''from torch import nn
from blocks import ResBlock


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = ResBlock()

    def forward(self, x):
        return self.b(x)
'''
#: a module inside a package: relative and absolute imports of its neighbour
WIDE = '''from torch import nn

from .blocks import ResBlock
from mypkg.nets.blocks import ResBlock as Same

assert Same is ResBlock


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = ResBlock()

    def forward(self, x):
        return 2 * self.b(x)
'''


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.w = {}  # weights file -> (W, b, sign)


def _weights(path: Path, prefix: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w, b = torch.randn(10, 64, generator=g) / 8, torch.randn(10, generator=g) / 8
    torch.save({f"{prefix}.weight": w, f"{prefix}.bias": b}, path)
    return w, b


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("arch_files")
    w = World(root)
    files = {
        "sib/net.py": NET, "sib/blocks.py": BLOCKS,
        "sib2/net.py": NET, "sib2/blocks.py": OTHER_BLOCKS,
        "pk/mypkg/__init__.py": "", "pk/mypkg/nets/__init__.py": "", "pk/mypkg/nets/blocks.py": BLOCKS,
        "pk/mypkg/nets/wide.py": WIDE,
        "pk/mypkg/bad.py": "raise ValueError('needs a CUDA build of my op')\n",
        "miss/net.py": "from torch import nn\nimport helpers\n\n\nclass Net(nn.Module):\n    pass\n",
        "pkm/mypkg2/__init__.py": "", "pkm/mypkg2/net.py": "from .gone import ResBlock\n",
        "rel/net.py": "from .blocks import ResBlock\n", "rel/blocks.py": BLOCKS,
        "elsewhere/blocks.py": "raise RuntimeError('this blocks.py must never be imported')\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    w.w["w_sib.pt"] = (*_weights(root / "w_sib.pt", "b.lin", 1), 1.0)
    w.w["w_sib2.pt"] = (*_weights(root / "w_sib2.pt", "b.fc", 2), -1.0)
    w.w["w_pkg.pt"] = (*_weights(root / "w_pkg.pt", "b.lin", 3), 2.0)
    torch.manual_seed(4)
    mlp = robfair.models.create("mlp", 10, (1, 8, 8), hidden=[8]).eval()
    torch.save(mlp.state_dict(), root / "w_mlp.pt")
    w.mlp = mlp
    _rgb_world(root)
    return w


def _digits():
    from robfair.data import load_dataset

    return load_dataset("digits", split="test")


def _expected(world: World, weights: str, x: torch.Tensor) -> np.ndarray:
    """The predictions of ``weights`` computed by hand: sign * (x W^T + b)."""
    w, b, sign = world.w[weights]
    return (sign * (x.flatten(1) @ w.T + b)).argmax(1).numpy()


def _state() -> tuple[list[str], set[str], set[str]]:
    return list(sys.path), set(sys.modules), set(sys.path_importer_cache)


def _assert_left_alone(before, world: World) -> None:
    path, mods, finders = before
    assert sys.path == path, "sys.path changed"
    new = set(sys.modules) - mods
    leaked = [n for n in new if str(world.root) in str(getattr(sys.modules[n], "__file__", None) or "")
              and not n.startswith("robfair_user_arch_")]
    assert leaked == [] and "blocks" not in new and not any(n.startswith("mypkg") for n in new), leaked
    assert not [k for k in set(sys.path_importer_cache) - finders if str(world.root) in str(k)]


def _fill(argv: list[str], world: World) -> list[str]:
    return [a.replace("{root}", str(world.root)) for a in argv]


# ---------------------------------------------------------------------------------------------- files that work
ARCH_OK = [
    ("sibling-import", "w_sib.pt", "{root}/sib/net.py:Net", []),
    ("another-blocks-py", "w_sib2.pt", "{root}/sib2/net.py:Net", []),
    ("inside-a-package", "w_pkg.pt", "{root}/pk/mypkg/nets/wide.py:Net", []),
]


@pytest.mark.parametrize("name,weights,spec,extra", ARCH_OK, ids=[c[0] for c in ARCH_OK])
def test_arch_file_audits_with_its_own_predictions(name, weights, spec, extra, world, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    before = _state()
    out = tmp_path / "a.json"
    code, text, err = run_cli(_fill(AUDIT + ["-m", "{root}/" + weights, "--arch", spec, *extra, "--out", str(out)],
                                    world), capsys)
    assert code == 0, err
    _assert_left_alone(before, world)
    ds = _digits()
    np.testing.assert_array_equal(AuditReport.load(out).outcomes.clean_pred, _expected(world, weights, ds.images()))


def test_two_arch_files_with_their_own_blocks_in_one_process(world, capsys, tmp_path, monkeypatch):
    """sib/ and sib2/ both import ``blocks``: each gets its own, audit after audit, then certify and a
    leaderboard, then the first again; a ``blocks`` imported before from a third folder is left in
    ``sys.modules`` and never used by either."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(world.root / "elsewhere"))
    fake = type(sys)("blocks")
    fake.__file__ = str(world.root / "elsewhere" / "blocks.py")
    monkeypatch.setitem(sys.modules, "blocks", fake)  # the user's own blocks, imported before
    ds = _digits()
    before = _state()
    for weights, spec in [("w_sib.pt", "sib"), ("w_sib2.pt", "sib2"), ("w_sib.pt", "sib")]:
        out = tmp_path / f"{spec}.json"
        out.unlink(missing_ok=True)
        code, _, err = run_cli(_fill(AUDIT + ["-m", "{root}/" + weights, "--arch", f"{{root}}/{spec}/net.py:Net",
                                              "--out", str(out)], world), capsys)
        assert code == 0, err
        np.testing.assert_array_equal(AuditReport.load(out).outcomes.clean_pred, _expected(world, weights, ds.images()))
        assert sys.modules["blocks"] is fake
    code, _, err = run_cli(_fill(CERTIFY + ["-m", "{root}/w_sib2.pt", "--arch", "{root}/sib2/net.py:Net",
                                            "--out", str(tmp_path / "c.json")], world), capsys)
    assert code == 0, err
    code, _, err = run_cli(_fill(["leaderboard", "{root}/w_sib.pt", "{root}/w_pkg.pt", "--arch",
                                  "{root}/pk/mypkg/nets/wide.py:Net", "--data", "digits,limit=60", "--eps", "0.1",
                                  "--attack", "fgsm", "--probe", "0", "--bootstrap", "0", "--no-figures", "--out",
                                  str(tmp_path / "lb.html")], world), capsys)
    # one --arch for both: w_sib.pt's keys fit wide.py's Net (b.lin.*), so both load and rank
    assert code == 0, err
    assert (tmp_path / "lb.html").is_file()
    _assert_left_alone(before, world)
    assert sys.modules["blocks"] is fake


def test_python_api_arch_and_the_model_after_loading(world):
    """``load_any(arch=...)``: the two blocks.py side by side in one process, the package file, and the
    loaded model still scriptable (its neighbours' source is found though they left sys.modules)."""
    before = _state()
    x = _digits().images()
    nets = {}
    for weights, spec in [("w_sib.pt", "sib/net.py"), ("w_sib2.pt", "sib2/net.py"), ("w_pkg.pt", "pk/mypkg/nets/wide.py")]:
        net, meta = load_any(world.root / weights, arch=f"{world.root / spec}:Net")
        with torch.no_grad():
            np.testing.assert_array_equal(net(x).argmax(1).numpy(), _expected(world, weights, x))
        nets[weights] = net
    assert type(nets["w_sib.pt"].b) is not type(nets["w_sib2.pt"].b)
    _assert_left_alone(before, world)
    scripted = torch.jit.script(nets["w_pkg.pt"])
    with torch.no_grad():
        np.testing.assert_array_equal(scripted(x).argmax(1).numpy(), _expected(world, "w_pkg.pt", x))


def test_dotted_installed_module(world, capsys, tmp_path):
    """``--arch robfair.models:create`` (an installed module; its arguments by --arch-kwargs)."""
    out = tmp_path / "a.json"
    code, _, err = run_cli(_fill(AUDIT + ["-m", "{root}/w_mlp.pt", "--arch", "robfair.models:create", "--arch-kwargs",
                                          "{name: mlp, num_classes: 10, in_shape: [1, 8, 8], hidden: [8]}",
                                          "--out", str(out)], world), capsys)
    assert code == 0, err
    with torch.no_grad():
        want = world.mlp(_digits().images()).argmax(1).numpy()
    np.testing.assert_array_equal(AuditReport.load(out).outcomes.clean_pred, want)


def test_dotted_module_in_the_current_folder(world, capsys, tmp_path, monkeypatch):
    """``--arch mypkg.nets.wide:Net`` run from the folder holding mypkg/ (as ``python -m``)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.chdir(world.root / "pk")
    before = _state()
    out = tmp_path / "a.json"
    code, _, err = run_cli(_fill(AUDIT + ["-m", "{root}/w_pkg.pt", "--arch", "mypkg.nets.wide:Net", "--out", str(out)],
                                 world), capsys)
    assert code == 0, err
    _assert_left_alone(before, world)
    np.testing.assert_array_equal(AuditReport.load(out).outcomes.clean_pred,
                                  _expected(world, "w_pkg.pt", _digits().images()))


# ---------------------------------------------------------------------------------------------- imports that fail
ARCH_BAD = [
    ("audit-missing-sibling", AUDIT + ["-m", "{root}/w_sib.pt", "--arch", "{root}/miss/net.py:Net"],
     ["no module named 'helpers'", "net.py line 2", "{root}/miss", "put helpers.py"]),
    ("certify-missing-sibling", CERTIFY + ["-m", "{root}/w_sib.pt", "--arch", "{root}/miss/net.py:Net"],
     ["no module named 'helpers'", "{root}/miss"]),
    ("leaderboard-missing-sibling", ["leaderboard", "{root}/w_sib.pt", "{root}/w_sib.pt", "--arch",
                                     "{root}/miss/net.py:Net", "--data", "digits", "--eps", "0.1", "--out",
                                     "{root}/lb.html"], ["no module named 'helpers'", "{root}/miss"]),
    ("audit-missing-in-package", AUDIT + ["-m", "{root}/w_sib.pt", "--arch", "{root}/pkm/mypkg2/net.py:Net"],
     ["no module named 'mypkg2.gone'", "package root {root}/pkm/mypkg2 and {root}/pkm", "put gone.py",
      "in {root}/pkm/mypkg2"]),
    ("audit-relative-import-without-init", AUDIT + ["-m", "{root}/w_sib.pt", "--arch", "{root}/rel/net.py:Net"],
     ["relative import", "{root}/rel/__init__.py"]),
    ("audit-dotted-missing", AUDIT + ["-m", "{root}/w_sib.pt", "--arch", "nosuchpkg.nets:Net"],
     ["--arch module 'nosuchpkg.nets'", "no module named 'nosuchpkg'", "current folder"]),
    ("audit-dotted-raises-on-import", AUDIT + ["-m", "{root}/w_sib.pt", "--arch", "mypkg.bad:Net"],
     ["mypkg.bad", "ValueError: needs a CUDA build of my op", "bad.py line 1"]),
    ("audit-dotted-not-a-name", AUDIT + ["-m", "{root}/w_sib.pt", "--arch", "my-nets.x:Net"],
     ["neither an existing .py file nor a module name"]),
    ("audit-dotted-no-such-class", AUDIT + ["-m", "{root}/w_sib.pt", "--arch", "mypkg.nets.wide:Wide"],
     ["no class or function 'Wide'", "it defines: Net"]),
]


@pytest.mark.parametrize("name,template,needles", ARCH_BAD, ids=[c[0] for c in ARCH_BAD])
def test_arch_import_fails_in_one_line(name, template, needles, world, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBFAIR_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.chdir(world.root / "pk")  # mypkg.* resolve from the current folder
    before, files = _state(), snapshot(world.root)
    code, out, err = run_cli(_fill(template, world), capsys)
    one_line(code, out, err, _fill(needles, world))
    assert snapshot(world.root) == files and not (tmp_path / "logs").exists()
    _assert_left_alone(before, world)


# ---------------------------------------------------------------------------------------------- --mean / --std
class Lin3(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.lin = nn.Linear(3 * 64, 10)

    def forward(self, x):
        return self.lin(x.flatten(1))


def _rgb_world(root: Path) -> None:
    """rgb.npz: 200 colour 8x8 images in 10 classes; lin3.ts: a linear model on them (TorchScript)."""
    g = torch.Generator().manual_seed(6)
    x = torch.rand(200, 3, 8, 8, generator=g)
    np.savez(root / "rgb.npz", x=x.numpy(), y=(torch.arange(200) % 10).numpy())
    torch.jit.save(torch.jit.script(Lin3().eval()), str(root / "lin3.ts"))


def _rgb_pred(world: World, mean, std) -> np.ndarray:
    from robfair.data import load_dataset

    x = load_dataset(f"npz:{world.root / 'rgb.npz'}", split="test").images()
    m, s = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)
    with torch.no_grad():
        return torch.jit.load(str(world.root / "lin3.ts"))((x - m) / s).argmax(1).numpy()


PRESETS = [
    ("mean-cifar10", ["--mean", "cifar10"], "cifar10"),
    ("mean-cifar100", ["--mean", "cifar100"], "cifar100"),
    ("mean-imagenet", ["--mean", "imagenet"], "imagenet"),
    ("std-cifar100-alone", ["--std", "cifar100"], "cifar100"),
    ("both-cifar10-spelled-CIFAR-10", ["--mean", "CIFAR-10", "--std", "cifar10"], "cifar10"),
]


@pytest.mark.parametrize("name,opts,preset", PRESETS, ids=[c[0] for c in PRESETS])
def test_normalization_presets_from_the_cli(name, opts, preset, world, capsys, tmp_path):
    out = tmp_path / "a.json"
    code, _, err = run_cli(_fill(AUDIT + ["-m", "{root}/lin3.ts", "--data", "npz:{root}/rgb.npz", *opts,
                                          "--out", str(out)], world), capsys)
    assert code == 0, err
    got = AuditReport.load(out).outcomes.clean_pred
    mean, std = NORMALIZATION_PRESETS[preset]
    want = _rgb_pred(world, mean, std)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(want, _rgb_pred(world, (0.0,) * 3, (1.0,) * 3))  # the normalization matters here
    # exactly as in the Python API
    from robfair.data import load_dataset

    ds = load_dataset(f"npz:{world.root / 'rgb.npz'}", split="test")
    net, _ = load_any(world.root / "lin3.ts")
    rep = robfair.audit(net, ds, attacks=["fgsm"], eps=0.1, device="cpu", probe=0, examples=0, mean=preset)
    np.testing.assert_array_equal(rep.outcomes.clean_pred, got)


def test_numbers_on_one_side_and_a_preset_on_the_other(world, capsys, tmp_path):
    out = tmp_path / "a.json"
    code, _, err = run_cli(_fill(AUDIT + ["-m", "{root}/lin3.ts", "--data", "npz:{root}/rgb.npz", "--mean",
                                          "0.5,0.4,0.3", "--std", "imagenet", "--out", str(out)], world), capsys)
    assert code == 0, err
    np.testing.assert_array_equal(AuditReport.load(out).outcomes.clean_pred,
                                  _rgb_pred(world, (0.5, 0.4, 0.3), NORMALIZATION_PRESETS["imagenet"][1]))


RGB = ["-m", "{root}/lin3.ts", "--data", "npz:{root}/rgb.npz"]
DIGITS = ["-m", "{root}/w_sib.pt", "--arch", "{root}/sib/net.py:Net"]
PRESET_LIST = "a preset: cifar10, cifar100, imagenet"
NORM_BAD = [
    ("two-values-three-channels", RGB + ["--mean", "0.5,0.5", "--std", "0.2,0.2"],
     ["--mean/--std", "2 values", "3 channels", "pass 1 or 3 values"]),
    ("four-values-three-channels", RGB + ["--mean", "0.5,0.5,0.5,0.5", "--std", "1"], ["--mean/--std", "4 values"]),
    ("rgb-preset-on-one-channel", DIGITS + ["--mean", "cifar10"], ["--mean/--std", "3 values", "1 channel"]),
    ("std-of-three-on-one-channel", DIGITS + ["--mean", "0.5", "--std", "1,2,3"],
     ["--mean/--std", "3 values", "1 channel"]),
    ("mean-and-std-of-other-lengths", RGB + ["--mean", "0.1,0.2", "--std", "1,2,3"],
     ["mean has 2 values but std has 3", "--mean/--std"]),
    ("not-numbers", RGB + ["--mean", "a,b", "--std", "1"], ["--mean 'a,b'", "neither numbers nor", PRESET_LIST]),
    ("unknown-preset", RGB + ["--mean", "cifar11"], ["--mean 'cifar11'", "did you mean cifar10?"]),
    ("unknown-preset-std", RGB + ["--std", "mnist"], ["--std 'mnist'", "normalization preset"]),
    ("nan", RGB + ["--mean", "nan", "--std", "1"], ["--mean 'nan'", "finite numbers"]),
    ("inf-std", RGB + ["--mean", "0.5", "--std", "inf"], ["--std 'inf'", "finite numbers"]),
    ("std-zero", RGB + ["--mean", "0.5", "--std", "0"], ["--std '0'", "must be positive"]),
    ("std-negative", RGB + ["--mean", "0.5", "--std", "-1"], ["--std '-1'", "must be positive"]),
    ("std-one-zero-channel", RGB + ["--mean", "cifar10", "--std", "0.2,0,0.2"], ["--std '0.2,0,0.2'", "positive"]),
    ("empty-item", RGB + ["--mean", "0.5,,0.5", "--std", "1"], ["--mean '0.5,,0.5'", "empty value"]),
    ("empty", RGB + ["--mean", "", "--std", "1"], ["--mean ''", "empty value"]),
    ("mean-without-std", RGB + ["--mean", "0.5"], ["needs both mean and std", "--std", "pass std too"]),
    ("certify-two-values", ["certify", "--n", "100", "--n0", "10", "--device", "cpu"] + RGB
     + ["--mean", "0.5,0.5", "--std", "1"], ["--mean/--std", "2 values", "3 channels"]),
    ("certify-cifar11", ["certify", "--device", "cpu"] + RGB + ["--mean", "cifar11"], ["did you mean cifar10?"]),
    ("leaderboard-two-values", ["leaderboard", "{root}/lin3.ts", "{root}/lin3.ts", "--data", "npz:{root}/rgb.npz",
                                "--eps", "0.1", "--out", "{root}/lb.html", "--mean", "0.5,0.5", "--std", "1"],
     ["--mean/--std", "2 values", "3 channels"]),
    ("leaderboard-std-zero", ["leaderboard", "{root}/lin3.ts", "{root}/lin3.ts", "--data", "npz:{root}/rgb.npz",
                              "--eps", "0.1", "--out", "{root}/lb.html", "--mean", "0.5", "--std", "0"],
     ["--std '0'", "must be positive"]),
]


def test_norm_corpus_size():
    assert len(NORM_BAD) >= 15 and len({c[0] for c in NORM_BAD}) == len(NORM_BAD)
    assert len(ARCH_BAD) >= 8 and len({c[0] for c in ARCH_BAD}) == len(ARCH_BAD)


@pytest.mark.parametrize("name,template,needles", NORM_BAD, ids=[c[0] for c in NORM_BAD])
def test_wrong_mean_std_is_about_the_normalization(name, template, needles, world, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBFAIR_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    if template[0] not in ("certify", "leaderboard"):
        template = AUDIT + template
    files = snapshot(world.root)
    code, out, err = run_cli(_fill(template, world) + (["--out", str(tmp_path / "o.json")]
                                                       if template[0] != "leaderboard" else []), capsys)
    line = one_line(code, out, err, needles)
    assert "--data" not in line and "dataset" not in line.lower() and "{what}" not in line, line
    assert snapshot(world.root) == files and list(tmp_path.iterdir()) == []
