"""The one evaluation engine: seeds by attack name, per-sample outcomes and their file, GPU-resident
datasets (a device stub on the CPU), the sanity checks every path gets."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from robfair.auditing import AuditReport, Outcomes, audit, evaluate, model_state
from robfair.auditing.distances import boundary_distances
from robfair.auditing.distributed import evaluate_sharded
from robfair.auditing.eps_sweep import eps_sweep
from robfair.data import Dataset
from robfair.errors import DataError, RobfairError


def mlp_problem(n=240, k=4, seed=0, groups=True):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 24), nn.Tanh(), nn.Linear(24, k)).eval()
    with torch.no_grad():  # hidden units centred on the data, so every class is predicted somewhere
        model[1].weight.mul_(4)
        model[1].bias.copy_(-model[1].weight @ torch.full((16,), 0.5))
        model[3].bias.zero_()
    x = 0.2 + 0.6 * torch.rand(n, 1, 4, 4, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    y[::9] = (y[::9] + 1) % k  # clean mistakes
    gid = (torch.arange(n) % 3 == 0).long() if groups else None
    return model, Dataset(x=x, y=y, classes=[f"c{i}" for i in range(k)], g=gid,
                          groups=["major", "minor"] if groups else None, name="mlp")


def test_attack_seed_comes_from_its_name_not_its_position():
    model, ds = mlp_problem()
    alone = evaluate(model, ds, ["pgd5"], 0.05, device="cpu", seed=3, batch_size=64)
    after = evaluate(model, ds, ["fgsm", "pgd5"], 0.05, device="cpu", seed=3, batch_size=64)
    assert np.array_equal(alone.adv_pred["pgd5"], after.adv_pred["pgd5"])
    assert alone.report("pgd5") == after.report("pgd5")
    # the random starts matter here: another generator changes outcomes, so a seed that moved with
    # the attack's position would have broken the equality above
    other = evaluate(model, ds, ["pgd5"], 0.05, device="cpu", seed=4, batch_size=64)
    assert (other.adv_pred["pgd5"] != alone.adv_pred["pgd5"]).sum() > 0


def test_per_batch_seeds_make_a_sharded_audit_equal_to_one_process():
    """A torchrun audit gives each rank whole batches (``evaluate(indices=...)``); the generators
    are seeded per batch from the dataset index of its first sample, so the joined parts equal
    one process, random starts included, single radius and sweep alike."""
    model, ds = mlp_problem()
    bs = 50
    whole = evaluate(model, ds, ["pgd5"], 0.05, device="cpu", seed=3, batch_size=bs)
    sweep = evaluate(model, ds, ["pgd5"], [0.03, 0.06], device="cpu", seed=3, batch_size=bs)
    batches = [np.arange(s, min(s + bs, len(ds))) for s in range(0, len(ds), bs)]
    for ranks in (2, 3):
        shards = [np.concatenate(batches[r::ranks]) for r in range(ranks)]
        joined = Outcomes.concat([evaluate(model, ds, ["pgd5"], 0.05, device="cpu", seed=3, batch_size=bs,
                                           indices=s) for s in shards])
        assert np.array_equal(joined.index, whole.index)
        assert np.array_equal(joined.adv_pred["pgd5"], whole.adv_pred["pgd5"])
        assert np.array_equal(joined.first_step["pgd5"], whole.first_step["pgd5"])
        joined = Outcomes.concat([evaluate(model, ds, ["pgd5"], [0.03, 0.06], device="cpu", seed=3, batch_size=bs,
                                           indices=s) for s in shards])
        assert np.array_equal(joined.adv_pred["pgd5"], sweep.adv_pred["pgd5"])
        assert np.array_equal(joined.min_eps["sweep:pgd5"], sweep.min_eps["sweep:pgd5"])
    # the seed is the batch's: batches cut elsewhere draw other starts, and the outcomes move
    # (so the equality above is not one the random starts could never break)
    shifted = evaluate(model, ds, ["pgd5"], 0.05, device="cpu", seed=3, batch_size=bs,
                       indices=np.r_[np.arange(25, len(ds)), np.arange(25)])
    order = np.argsort(shifted.index)
    assert (shifted.adv_pred["pgd5"][:, order] != whole.adv_pred["pgd5"]).sum() > 0


def _conv_problem(n=150, k=3):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, k)).eval()
    x = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y = model(x).argmax(1)
    y[::7] = (y[::7] + 1) % k
    return model, Dataset(x=x, y=y, classes=[f"c{i}" for i in range(k)], name="conv")


@pytest.mark.parametrize("case", ["single", "several", "per-sample", "sweep", "sweep-not-monotone", "indices", "conv"])
def test_refilled_pgd_gives_the_batch_by_batch_outcomes_in_fewer_fuller_passes(case):
    """PGD runs through ``PGD.stream`` (the active batch refills from the batches still to come);
    each batch keeps its own generator, so every outcome equals the batch-by-batch path's."""
    model, ds = _conv_problem() if case == "conv" else mlp_problem()
    attacks, eps, kw = {
        "single": (["pgd10"], 0.05, {}),
        "several": (["fgsm", "pgd10-r2", "pgd5-t2", "pgd4-trand"], 0.05, {}),
        "per-sample": (["pgd6"], torch.linspace(0.0, 0.1, len(ds)), {}),
        "sweep": (["pgd5", "fgsm", "pgd6-cw"], [0.0, 0.03, 0.06], {}),
        "sweep-not-monotone": (["pgd5"], [0.03, 0.06], {"monotone": False}),
        "indices": (["pgd8"], 0.05, {"indices": np.arange(7, 200, 2)}),
        "conv": (["pgd10"], 0.1, {"channels_last": True}),
    }[case]
    sizes: list[int] = []
    first = next(m for m in model if isinstance(m, (nn.Linear, nn.Conv2d)))
    hook = first.register_forward_hook(lambda m, i, o: sizes.append(i[0].shape[0]))
    runs = {}
    for refill in (False, True):
        sizes.clear()
        seen: list[tuple[int, int]] = []
        keep = not isinstance(eps, list)  # the adversarial inputs too (single radius only)
        runs[refill] = evaluate(model, ds, attacks, eps, device="cpu", seed=5, batch_size=32, refill=refill,
                                progress=lambda _s, d, t: seen.append((d, t)), keep_adv=keep, **kw)
        runs[refill].meta["forwards"] = list(sizes)
        assert seen and seen[-1][0] == seen[-1][1] and [d for d, _ in seen] == list(range(1, len(seen) + 1))
    hook.remove()
    a, b = runs[True], runs[False]
    assert a.meta["refilled"] == [x for x in attacks if x.startswith("pgd")] and b.meta["refilled"] == []
    assert a.meta["attacked_samples"] == b.meta["attacked_samples"]
    for name in attacks:
        assert np.array_equal(a.adv_pred[name], b.adv_pred[name]), name
        assert np.array_equal(a.first_step[name], b.first_step[name]), name
    assert a.min_eps.keys() == b.min_eps.keys()
    assert all(np.array_equal(a.min_eps[k], b.min_eps[k]) for k in a.min_eps)
    assert a.warnings == b.warnings
    if not isinstance(eps, list):
        for name in attacks:
            assert a.adv_inputs[name].shape == (a.n, *ds.x.shape[1:])
            assert torch.allclose(a.adv_inputs[name], b.adv_inputs[name], atol=1e-6, rtol=0), name
    # the same per-sample work in fewer passes: the active batch stays full
    assert sum(a.meta["forwards"]) == sum(b.meta["forwards"])
    assert len(a.meta["forwards"]) < len(b.meta["forwards"])
    # and the attacks did something the seeds decide (so the equalities above could fail)
    pgd = [x for x in attacks if x.startswith("pgd")][0]
    assert (a.adv_pred[pgd] != a.y).any()


def test_a_refill_without_the_batches_own_generators_would_change_the_outcomes():
    """The refill path needs each batch's own generator (``Chunk.generator``): one generator drawn
    across the batches gives other random starts and other outcomes (what the test above guards)."""
    from robfair.attacks import Chunk, get_attack
    from robfair.seeding import batch_generator

    model, ds = mlp_problem()
    ref = evaluate(model, ds, ["pgd5"], 0.05, device="cpu", seed=3, batch_size=32)
    atk = get_attack("pgd5")
    batches = [(pos, x, y) for pos, (x, y, _g) in zip(range(0, len(ds), 32), ds.batches(32))]
    own = torch.cat([r.adv_pred for r in atk.stream(model, [Chunk(x, y, 0.05, generator=batch_generator(
        torch.device("cpu"), 3, "pgd5", pos)) for pos, x, y in batches], batch_size=32)]).numpy()
    shared = torch.cat([r.adv_pred for r in atk.stream(model, [Chunk(x, y, 0.05) for _, x, y in batches],
                                                       generator=batch_generator(torch.device("cpu"), 3, "pgd5", 0),
                                                       batch_size=32)]).numpy()
    assert np.array_equal(own, ref.adv_pred["pgd5"][0])
    assert (shared != ref.adv_pred["pgd5"][0]).sum() > 0


def test_outcomes_file_rebuilds_every_report_exactly(tmp_path):
    model, ds = mlp_problem()
    rep = audit(model, ds, ["fgsm", "pgd20"], eps=0.08, device="cpu", batch_size=64, probe=0)
    path = rep.save(tmp_path / "run", bootstrap=0)
    assert path == tmp_path / "run" / "audit.json" and (tmp_path / "run" / "outcomes.npz").exists()
    stored = AuditReport.from_json(json.loads(path.read_text()))
    out = Outcomes.load(tmp_path / "run" / "outcomes.npz")
    assert set(out.reports()) == set(stored.reports) == {"fgsm", "pgd20", "worst-case"}
    for name, r in out.reports().items():
        assert r == stored.reports[name], name
        assert r.counts == stored.reports[name].counts
    assert np.array_equal(out.index, np.arange(len(ds))) and np.array_equal(out.y, ds.y.numpy())
    assert np.array_equal(out.group, ds.g.numpy())
    # step first fooled: -1 exactly where not fooled (or not recorded)
    for name in out.attacks:
        assert out.first_step[name].shape == (1, len(ds))
    loaded = AuditReport.load(path)
    assert loaded.outcomes is not None and loaded["worst-case"] == rep["worst-case"]
    # a broken outcomes file is one line naming the fix
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(RobfairError, match="re-run the audit"):
        Outcomes.load(tmp_path / "bad.npz")


def test_outcomes_of_shards_concatenate_to_the_whole():
    model, ds = mlp_problem()
    whole = evaluate(model, ds, ["fgsm"], 0.08, device="cpu", batch_size=50)
    parts = [evaluate(model, ds, ["fgsm"], 0.08, device="cpu", batch_size=50, indices=np.arange(r, len(ds), 3))
             for r in range(3)]
    joined = Outcomes.concat(parts)  # FGSM is deterministic: the same per-sample outcomes
    assert np.array_equal(joined.index, whole.index)
    assert np.array_equal(joined.adv_pred["fgsm"], whole.adv_pred["fgsm"])
    assert joined.report("fgsm") == whole.report("fgsm")
    with pytest.raises(RobfairError, match="overlap"):
        Outcomes.concat([parts[0], parts[0]])


@pytest.mark.parametrize("bad", [[-1, 0], [0, 240]])
def test_indices_outside_the_dataset_are_refused_in_one_line_on_every_path(bad):
    # a negative index would otherwise wrap round to the end silently; the sharded audit and the
    # distances read the same indices through the same helper
    model, ds = mlp_problem()
    for run in (lambda: evaluate(model, ds, ["fgsm"], 0.08, device="cpu", indices=bad),
                lambda: evaluate_sharded(model, ds, ["fgsm"], 0.08, device="cpu", indices=bad),
                lambda: boundary_distances(model, ds, method="bisection", attack="fgsm", eps_max=0.2,
                                           device="cpu", indices=bad)):
        with pytest.raises(DataError, match=r"indices must lie in 0\.\.239"):
            run()
    ok = evaluate(model, ds, ["fgsm"], 0.08, device="cpu", indices=torch.tensor([239, 0]))
    assert ok.index.tolist() == [239, 0]


class FakeAccelerator(torch.Tensor):
    """A CPU tensor that behaves like one on an accelerator where it matters here: ``.numpy()`` (and
    ``np.asarray``) fail until it is moved with ``.cpu()`` / ``.to("cpu")``."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.numpy:
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                            "to host memory first.")
        out = super().__torch_function__(func, types, args, kwargs)
        if func in (torch.Tensor.cpu, torch.Tensor.to) and isinstance(out, torch.Tensor):
            return out.as_subclass(torch.Tensor)
        return out


def _on_fake_accelerator(ds: Dataset) -> Dataset:
    fake = Dataset(x=ds.x.as_subclass(FakeAccelerator), y=ds.y.as_subclass(FakeAccelerator),
                   g=ds.g.as_subclass(FakeAccelerator), classes=ds.classes, groups=ds.groups, name=ds.name)
    with pytest.raises(TypeError, match="cpu"):  # the stub bites
        fake.g.numpy()
    return fake


def test_gpu_resident_dataset_works_on_every_path():
    model, ds = mlp_problem()
    fake = _on_fake_accelerator(ds)
    a, b = (audit(model, d, ["fgsm"], eps=0.08, device="cpu", batch_size=64, probe=0) for d in (ds, fake))
    assert a["fgsm"] == b["fgsm"]
    s1, s2 = (eps_sweep(model, d, "fgsm", [0.0, 0.05, 0.1], device="cpu", batch_size=64) for d in (ds, fake))
    assert all(r1 == r2 for r1, r2 in zip(s1.reports, s2.reports))
    d1, d2 = (boundary_distances(model, d, "bisection", attack="fgsm", eps_max=0.2, device="cpu") for d in (ds, fake))
    assert np.array_equal(d1.distance, d2.distance) and np.array_equal(d1.groups, d2.groups)
    from robfair.training import TrainConfig, Trainer

    cfg = TrainConfig(data="digits", model="mlp", method="standard", eps=0.08, epochs=1, val_attack="fgsm",
                      select="last", device="cpu", batch_size=64)
    tr = Trainer(model, fake, fake, cfg=cfg)
    assert tr._validate(0) == Trainer(model, ds, ds, cfg=cfg)._validate(0)


def test_collapsed_and_chance_level_models_are_named():
    _, ds = mlp_problem(groups=False)
    const = nn.Sequential(nn.Flatten(), nn.Linear(16, 4))
    with torch.no_grad():
        const[1].weight.zero_()
        const[1].bias.copy_(torch.tensor([0.0, 3.0, 0.0, 0.0]))
    rep = audit(const, ds, ["fgsm"], eps=0.05, device="cpu", probe=0)
    assert model_state(rep.main)["state"] == "collapsed"
    assert any("collapsed" in w and "'c1'" in w for w in rep.warnings)
    # random labels: a working model scores about 1/K
    g = torch.Generator().manual_seed(1)
    noise = Dataset(x=ds.x, y=torch.randint(0, 4, (len(ds),), generator=g), classes=ds.classes)
    model, _ = mlp_problem(groups=False)
    rep = audit(model, noise, ["fgsm"], eps=0.05, device="cpu", probe=0)
    assert model_state(rep.main)["state"] == "chance"
    assert any("chance level" in w for w in rep.warnings)
    # a working model: no such warning
    model, ds = mlp_problem()
    rep = audit(model, ds, ["fgsm"], eps=0.05, device="cpu", probe=0)
    assert model_state(rep.main) is None and not any("collapsed" in w or "chance" in w for w in rep.warnings)


def test_probe_argument_is_checked():
    model, ds = mlp_problem()
    with pytest.raises(RobfairError, match="probe"):
        audit(model, ds, ["fgsm"], eps=0.05, device="cpu", probe=-1)


def test_final_test_audit_after_training_honours_channels_last_and_precision(tmp_path, capsys):
    from _shared import run_cli

    out = tmp_path / "run"
    code, _, err = run_cli(["train", "--data", "digits", "--model", "smallcnn", "--method", "standard", "--epochs", "1",
                            "--channels-last", "--eps", "0.1", "--audit-attack", "fgsm", "--set", "val_per_class=5",
                            "--out", out], capsys)
    assert code == 0, err
    meta = json.loads((out / "audit.json").read_text())["meta"]
    assert meta["channels_last"] is True and meta["precision"] == "fp32"
    assert Outcomes.load(out / "outcomes.npz").report("fgsm") == AuditReport.load(out)["fgsm"]
