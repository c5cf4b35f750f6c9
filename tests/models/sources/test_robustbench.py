"""``robustbench:NAME`` from a file in RobustBench's layout, without the robustbench package (robfair's
own WRN / PreAct-ResNet-18 with the key mapping) and with it (a stand-in package here). The test
defines RobustBench-style architectures itself (their module and parameter names) with random weights."""

from __future__ import annotations

import enum
import json
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from _shared import run_cli
from robfair.errors import ModelError
from robfair.models import create, load_any
from robfair.models.sources import robustbench_keys


# ------------------------------------------------------------------ RobustBench-style definitions
class RBWideBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2, self.relu2 = nn.BatchNorm2d(cout), nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.equal = cin == cout
        self.convShortcut = None if self.equal else nn.Conv2d(cin, cout, 1, stride, 0, bias=False)

    def forward(self, x):
        if not self.equal:
            x = self.relu1(self.bn1(x))
            out = x
        else:
            out = self.relu1(self.bn1(x))
        out = self.conv2(self.relu2(self.bn2(self.conv1(out))))
        return (x if self.equal else self.convShortcut(x)) + out


class RBNetworkBlock(nn.Module):
    def __init__(self, n, cin, cout, stride):
        super().__init__()
        self.layer = nn.Sequential(*[RBWideBlock(cin if i == 0 else cout, cout, stride if i == 0 else 1) for i in range(n)])

    def forward(self, x):
        return self.layer(x)


class RBWideResNet(nn.Module):
    def __init__(self, depth=10, widen=2, num_classes=10, sub_block1=True):
        super().__init__()
        ch = [16, 16 * widen, 32 * widen, 64 * widen]
        n = (depth - 4) // 6
        self.conv1 = nn.Conv2d(3, ch[0], 3, 1, 1, bias=False)
        self.block1 = RBNetworkBlock(n, ch[0], ch[1], 1)
        if sub_block1:
            self.sub_block1 = RBNetworkBlock(n, ch[0], ch[1], 1)
        self.block2 = RBNetworkBlock(n, ch[1], ch[2], 2)
        self.block3 = RBNetworkBlock(n, ch[2], ch[3], 2)
        self.bn1, self.relu = nn.BatchNorm2d(ch[3]), nn.ReLU()
        self.fc = nn.Linear(ch[3], num_classes)
        self.c = ch[3]

    def forward(self, x):
        out = self.block3(self.block2(self.block1(self.conv1(x))))
        out = F.avg_pool2d(self.relu(self.bn1(out)), 8)
        return self.fc(out.view(-1, self.c))


class RBPreActBlockV2(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False))

    def forward(self, x):
        out = F.relu(self.bn1(x))
        sc = self.shortcut(out) if hasattr(self, "shortcut") else x
        return self.conv2(F.relu(self.bn2(self.conv1(out)))) + sc


class RBRice2020L2(nn.Module):
    """PreActResNet(PreActBlockV2, [2, 2, 2, 2], bn_before_fc=True) with CIFAR-10 normalization."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        cin = 64
        for i, planes in enumerate((64, 128, 256, 512)):
            blocks = [RBPreActBlockV2(cin if j == 0 else planes, planes, (1 if i == 0 else 2) if j == 0 else 1) for j in range(2)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
            cin = planes
        self.bn = nn.BatchNorm2d(512)
        self.linear = nn.Linear(512, 10)
        self.register_buffer("mu", torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1))
        self.register_buffer("sigma", torch.tensor([0.2471, 0.2435, 0.2616]).view(1, 3, 1, 1))

    def forward(self, x):
        out = self.conv1((x - self.mu) / self.sigma)
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.avg_pool2d(F.relu(self.bn(out)), 4)
        return self.linear(out.view(out.size(0), -1))


def _randomize(net):
    torch.manual_seed(0)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
    return net.eval()


def test_wrn_keys_map_exactly():
    rb = _randomize(RBWideResNet(depth=10, widen=2))
    ours = create("wrn", 10, (3, 32, 32), depth=10, widen=2).eval()
    ours.load_state_dict(robustbench_keys(rb.state_dict(), "wrn") | {"mean": ours.mean, "std": ours.std})
    x = torch.rand(3, 3, 32, 32)
    torch.testing.assert_close(ours(x), rb(x))


@pytest.fixture(scope="module")
def rice(tmp_path_factory):
    """RobustBench's cifar10/L2/Rice2020Overfitting layout with random weights (nested, module.-prefixed)."""
    root = tmp_path_factory.mktemp("rb") / "models"
    net = _randomize(RBRice2020L2())
    f = root / "cifar10" / "L2" / "Rice2020Overfitting.pt"
    f.parent.mkdir(parents=True)
    torch.save({"state_dict": {f"module.{k}": v for k, v in net.state_dict().items() if k not in ("mu", "sigma")}}, f)
    return root, net


def test_robustbench_builtin_matches_the_definition(rice, monkeypatch):
    root, net = rice
    monkeypatch.setitem(sys.modules, "robustbench", None)  # not importable, even where installed
    model, meta = load_any("robustbench:Rice2020Overfitting", model_dir=root)
    assert meta["source"] == "robustbench" and meta["architecture"] == "robfair preact-resnet18"
    assert meta["classes"][:2] == ["airplane", "automobile"]
    x = torch.rand(4, 3, 32, 32)
    torch.testing.assert_close(model(x), net(x))
    model2, _ = load_any("robustbench:cifar10/L2/Rice2020Overfitting", model_dir=root)
    torch.testing.assert_close(model2(x), net(x))


def test_robustbench_cli_equals_torchscript_of_the_same_weights(rice, tmp_path, capsys, monkeypatch):
    root, net = rice
    monkeypatch.setitem(sys.modules, "robustbench", None)
    rng = np.random.default_rng(0)
    x = rng.random((8, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        y = net(torch.from_numpy(x)).argmax(1).numpy()
    y[::2] = (y[::2] + 1) % 10
    data = tmp_path / "c.npz"
    np.savez(data, x=x, y=y, classes=np.array(["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                               "horse", "ship", "truck"]))
    ts = tmp_path / "rice.ts"
    torch.jit.save(torch.jit.trace(net, torch.from_numpy(x[:2])), ts)
    res = {}
    for name, args in (("rb", ["robustbench:Rice2020Overfitting", "--model-dir", root]), ("ts", [ts])):
        out = tmp_path / f"{name}.json"
        code, _, err = run_cli(["audit", "-m", *args, "--data", f"npz:{data}", "--attack", "fgsm", "--eps", "2/255",
                                "--bootstrap", "0", "--device", "cpu", "-o", out], capsys)
        assert code == 0, err
        res[name] = json.loads(out.read_text())["reports"]["fgsm"]["counts"]
    assert res["rb"] == res["ts"]
    assert sum(map(sum, res["rb"]["clean"])) == 4


def test_robustbench_errors(rice, tmp_path, monkeypatch):
    root, _ = rice
    monkeypatch.setitem(sys.modules, "robustbench", None)
    with pytest.raises(ModelError, match="robfair never downloads"):
        load_any("robustbench:Carmon2019Unlabeled", model_dir=root)
    other = root / "cifar10" / "Linf" / "Gowal2020Uncovering.pt"
    other.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"w": torch.zeros(1)}, other)
    with pytest.raises(ModelError, match=r"needs the robustbench package.*cifar10/Linf/Standard"):
        load_any("robustbench:Gowal2020Uncovering", model_dir=root)


def test_robustbench_package_definition_is_used_when_importable(rice, monkeypatch):
    """With robustbench importable, its model zoo entry builds the architecture (a stand-in package)."""
    root, net = rice

    class BenchmarkDataset(enum.Enum):
        cifar_10 = "cifar10"

    class ThreatModel(enum.Enum):
        Linf = "Linf"
        L2 = "L2"

    zoo = {BenchmarkDataset.cifar_10: {ThreatModel.L2: {"Rice2020Overfitting": {"model": RBRice2020L2}}}}
    pkg = types.ModuleType("robustbench")
    mz = types.ModuleType("robustbench.model_zoo")
    enums = types.ModuleType("robustbench.model_zoo.enums")
    models = types.ModuleType("robustbench.model_zoo.models")
    enums.BenchmarkDataset, enums.ThreatModel, models.model_dicts = BenchmarkDataset, ThreatModel, zoo
    for name, mod in (("robustbench", pkg), ("robustbench.model_zoo", mz), ("robustbench.model_zoo.enums", enums),
                      ("robustbench.model_zoo.models", models)):
        monkeypatch.setitem(sys.modules, name, mod)
    model, meta = load_any("robustbench:Rice2020Overfitting", model_dir=root)
    assert meta["architecture"] == "robustbench" and isinstance(model, RBRice2020L2)
    x = torch.rand(2, 3, 32, 32)
    torch.testing.assert_close(model(x), net(x))


def test_robustbench_model_fine_tunes_and_its_run_reads_back(rice, tmp_path, capsys, monkeypatch):
    """robfair train --model robustbench:NAME (issue 22): the file in RobustBench's layout trains, its
    run records the source, and best.pt is a robfair checkpoint audit reads."""
    root, net = rice
    monkeypatch.setitem(sys.modules, "robustbench", None)
    rng = np.random.default_rng(1)
    x = rng.random((60, 3, 32, 32)).astype(np.float32)
    y = np.arange(60) % 10
    data = tmp_path / "c.npz"
    names = np.array(["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"])
    np.savez(data, x=x, y=y, classes=names)
    out = tmp_path / "run"
    code, _, err = run_cli(["train", "--model", "robustbench:Rice2020Overfitting", "--model-dir", root, "--data",
                            f"npz:{data}", "--method", "standard", "--epochs", "1", "--batch-size", "16", "--lr", "0.01",
                            "--set", "val_per_class=0", "--set", "select=last", "--device", "cpu", "--audit-attack",
                            "none", "--out", out], capsys)
    assert code == 0, err
    import yaml

    src = yaml.safe_load((out / "config.yaml").read_text())["model_source"]
    assert src["format"] == "robustbench" and src["model"] == "robustbench:Rice2020Overfitting"
    assert len(src["sha256"]) == 64
    trained, meta = load_any(out / "checkpoints" / "best.pt")
    assert meta["spec"]["name"] == "preact-resnet18"  # robfair's own definition of this entry: a plain checkpoint
    assert not torch.equal(trained.state_dict()["net.conv1.weight"], net.state_dict()["conv1.weight"])  # it trained
    # best.weights.pt: the trained weights under RobustBench's own key names, loaded by its own class strictly
    own = torch.load(out / "checkpoints" / "best.weights.pt", weights_only=True)
    theirs = RBRice2020L2()
    mu_sigma = {k: theirs.state_dict()[k] for k in ("mu", "sigma")}  # constants the file never held
    theirs.load_state_dict({**own, **mu_sigma}, strict=True)
    assert set(own) | set(mu_sigma) == set(theirs.state_dict())
    theirs.eval()
    x = torch.rand(4, 3, 32, 32)
    torch.testing.assert_close(theirs(x), trained.eval()(x))
