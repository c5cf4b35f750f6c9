"""``robfair.audit`` on every data form, the notebook/ecosystem views of reports, and the data
options (limit / per_class, a single-file npz split for training)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import robfair
from _shared import run_cli
from robfair.data import Dataset, as_dataset, load_dataset, subsample
from robfair.errors import DataError


@pytest.fixture(scope="module")
def arrays(tiny):
    _, net = tiny
    g = torch.Generator().manual_seed(3)
    x = torch.rand(40, 1, 8, 8, generator=g)
    with torch.no_grad():
        y = net(x).argmax(1)
    y[::4] = (y[::4] + 1) % 3
    return x, y


def test_every_input_form_gives_the_same_report(tiny, arrays):
    _, net = tiny
    x, y = arrays
    kw = dict(attacks=["fgsm"], eps=0.03, device="cpu", batch_size=16)
    ref = robfair.audit(net, Dataset(x=x, y=y, classes=["0", "1", "2"]), **kw).main
    forms = {
        "tensors": (x, y),
        "numpy": (x.numpy(), y.numpy()),
        "numpy NHWC": (x.numpy().transpose(0, 2, 3, 1), y.numpy()),
        "list": [x, y],
        "TensorDataset": TensorDataset(x, y),
        "DataLoader": DataLoader(TensorDataset(x, y), batch_size=7),
    }
    for name, data in forms.items():
        rep = robfair.audit(net, data, **kw).main
        assert rep.counts == ref.counts, name
        assert rep.class_names == ("0", "1", "2"), name
    assert 0 < ref.overall["rob_acc"] < ref.overall["clean_acc"] < 1
    # (x, y, g): groups
    g = (torch.arange(40) % 2)
    rep = robfair.audit(net, (x, y, g), **kw)
    assert list(rep.by_group.index) == ["0", "1"] and rep.by_group["n"].tolist() == [20, 20]
    # classes= names the model's outputs; a model with more outputs than labels seen gets empty classes
    named = robfair.audit(net, (x, y), classes=["cat", "dog", "emu"], **kw).main
    assert named.class_names == ("cat", "dog", "emu") and named.counts == ref.counts
    few = robfair.audit(net, (x[y < 2], y[y < 2]), **kw).main
    assert few.num_classes == 3 and int(few.by_class["n"].iloc[2]) == 0


def test_bad_data_forms_one_line(tiny):
    _, net = tiny
    with pytest.raises(DataError, match="cannot audit a str; pass a robfair Dataset"):
        robfair.audit(net, "not data", attacks=["fgsm"], device="cpu")
    with pytest.raises(DataError, match=r"outside \[0, 1\]"):
        robfair.audit(net, (torch.rand(4, 1, 8, 8) * 255, torch.zeros(4, dtype=torch.long)), attacks=["fgsm"])
    with pytest.raises(DataError, match="one-hot"):
        as_dataset((torch.rand(4, 1, 8, 8), torch.eye(4)))


def test_audit_signature_is_explicit_and_typed():
    import inspect

    sig = inspect.signature(robfair.audit)
    assert {"mean", "std", "classes", "attacks", "eps"} <= set(sig.parameters)
    assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values())
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())


def test_mean_std_presets_and_double_normalization(tiny, arrays):
    from robfair.errors import ModelError
    from robfair.models import NORMALIZATION_PRESETS, create, resolve_normalization

    assert resolve_normalization("cifar10", None) == NORMALIZATION_PRESETS["cifar10"]
    assert resolve_normalization(None, "imagenet") == NORMALIZATION_PRESETS["imagenet"]
    with pytest.raises(ModelError, match="pass std too"):
        resolve_normalization((0.5,), None)
    with pytest.raises(ModelError, match="'mnist' is not a number or a known preset"):
        resolve_normalization("mnist", None)
    m = create("smallcnn", 3, (3, 8, 8), mean="cifar10")
    assert m.robfair_spec["std"] == list(NORMALIZATION_PRESETS["cifar10"][1])
    x = torch.rand(4, 3, 8, 8)
    with pytest.raises(ModelError, match="already normalizes"):
        robfair.audit(m, (x, torch.zeros(4, dtype=torch.long)), attacks=["fgsm"], mean="cifar10")


def test_report_views(tiny, arrays):
    _, net = tiny
    x, y = arrays
    rep = robfair.audit(net, (x, y), attacks=["fgsm", "pgd5"], eps=0.03, device="cpu", classes=["a", "<b>", "c"])
    page = rep._repr_html_()
    assert "<table>" in page and "&lt;b&gt;" in page and "<b>AuditReport</b>" in page
    assert "worst-case" in page
    assert rep["fgsm"]._repr_html_().count("<tr>") == 4
    frame = rep.aggregates_frame()
    assert isinstance(frame, pd.DataFrame)
    assert frame.loc[("worst-case", "rob_acc"), "worst"] == rep.aggregates()["rob_acc"]["worst"]
    assert set(frame.index.get_level_values("attack")) == {"fgsm", "pgd5", "worst-case"}
    import matplotlib

    matplotlib.use("Agg", force=True)
    ax = rep.plot()
    assert len(ax.patches) == 6 and "worst" in ax.get_title(loc="left")
    ax2 = rep["fgsm"].plot(by="class")
    assert [t.get_text() for t in ax2.get_xticklabels()] == ["a", "<b>", "c"]


def test_to_metricframe_by_group_equals_robfair_exactly(tiny, arrays):
    pytest.importorskip("fairlearn")
    _, net = tiny
    x, y = arrays
    g = torch.tensor([0, 1, 2, 1] * 10)
    rep = robfair.audit(net, (x, y, g), attacks=["fgsm", "pgd5"], eps=0.03, device="cpu")
    for r in (rep, rep["fgsm"]):
        mf = r.to_metricframe()
        ours = r._headline().by_group
        for col in ("clean_acc", "rob_acc", "std_err", "bndy_err", "rob_err", "adv_acc"):
            theirs = mf.by_group[col]
            assert list(theirs.index) == list(ours.index)
            assert theirs.to_numpy().tolist() == ours[col].to_numpy().tolist(), col  # bit-identical
            assert mf.overall[col] == r._headline().overall[col]
    # its own aggregates agree with robfair's (difference = max - min over groups)
    mf = rep.to_metricframe()
    assert mf.difference()["rob_acc"] == rep.aggregates()["rob_acc"]["difference"]


# ------------------------------------------------------------------ data options
def test_limit_and_per_class_are_seeded_and_stratified(tmp_path):
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], [50, 30, 20])
    np.savez(tmp_path / "d.npz", x=rng.random((100, 1, 4, 4)).astype(np.float32), y=y)
    spec = f"npz:{tmp_path / 'd.npz'}"
    pc = load_dataset(spec + ",per_class=10")
    assert pc.class_counts().tolist() == [10, 10, 10]
    lim = load_dataset(spec + ",limit=10")
    assert lim.class_counts().tolist() == [5, 3, 2]
    assert torch.equal(load_dataset(spec + ",limit=10").x, lim.x)  # seeded: same draw
    other = load_dataset(spec + ",limit=10,sample_seed=1")
    assert not torch.equal(other.x, lim.x) and other.class_counts().tolist() == [5, 3, 2]
    both = load_dataset(spec + ",per_class=25,limit=12")
    assert len(both) == 12
    ds = load_dataset(spec)
    sub = subsample(ds, per_class=40)
    assert sub.class_counts().tolist() == [40, 30, 20]  # a smaller class is kept whole
    with pytest.raises(DataError, match="limit=0 must be >= 1"):
        load_dataset(spec + ",limit=0")
    with pytest.raises(DataError, match="valid options: groups, holdout, split_seed, limit, per_class"):
        load_dataset(spec + ",limt=3")


def test_single_file_npz_is_split_for_training(tmp_path, capsys, caplog):
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 50)
    np.savez(tmp_path / "one.npz", x=rng.random((100, 1, 8, 8)).astype(np.float32), y=y)
    spec = f"npz:{tmp_path / 'one.npz'}"
    tr, te = load_dataset(spec + ",holdout=0.2", "train"), load_dataset(spec + ",holdout=0.2", "test")
    assert (len(tr), len(te)) == (80, 20) and te.class_counts().tolist() == [10, 10]
    seen = {tuple(r.flatten()[:4].tolist()) for r in tr.x}
    assert not any(tuple(r.flatten()[:4].tolist()) in seen for r in te.x)  # disjoint
    assert len(load_dataset(spec, "test")) == 100  # audit: the whole file, as before
    run = tmp_path / "run"
    code, out, err = run_cli(["train", "--data", spec, "--model", "mlp", "--method", "standard", "--epochs", "1",
                              "--set", "val_per_class=0", "--set", "select=last", "--out", run,
                              "--audit-attack", "fgsm", "--eps", "0.1"], capsys)
    assert code == 0, err
    notice = caplog.text  # a WARNING log line; the CLI's logging prints it on stderr
    assert "holds one set of arrays" in notice and "split_seed=0" in notice and "held-out 20%" in notice
    audit = json.loads((run / "audit.json").read_text())
    assert audit["meta"]["n"] == 20  # the test audit ran on the held-out 20%, not on the training data
