"""A sharded audit (``torchrun -m robfair audit``, 2 gloo ranks on the CPU) writes the same audit.json
and outcomes file as one process: whole batches per rank, no padding, the probe's AutoAttack chunks
spread over the ranks, rank 0 alone writing; a refusal ends every rank with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from _shared import run_cli
from robfair.auditing.distributed import RankFailed, settle, shard_batches
from robfair.distributed import DistInfo

#: per-run fields: wall times, and which ranks ran (the device string names this rank's device), the digests
#: of the sidecars (their headers hold the wall times; the sidecars are compared array by array) and
#: outcomes.npz's seal (it covers its header)
PER_RUN = {"seconds", "attack_seconds", "shard_seconds", "distributed", "device", "time", "files", "sha256"}
SRC = Path(__file__).resolve().parents[2] / "src"


def _strip(d):
    if isinstance(d, dict):
        return {k: _strip(v) for k, v in d.items() if k not in PER_RUN}
    if isinstance(d, list):
        return [_strip(v) for v in d]
    return d


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> Path:
    """An MLP fitted on digits for a few full-batch steps (98% train accuracy): some samples robust
    at eps 0.1, some not, so random starts and batch cuts can move the outcomes."""
    from robfair.data import load_dataset
    from robfair.models import create, save_checkpoint

    torch.manual_seed(0)
    ds = load_dataset("digits", split="train")
    net = create("mlp", 10, tuple(ds.in_shape), hidden=[32])
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(60):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(ds.x), ds.y).backward()
        opt.step()
    path = tmp_path_factory.mktemp("dist") / "mlp.pt"
    save_checkpoint(path, net, classes=ds.classes)
    return path


def _torchrun(args, ranks: int = 2, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1", "ROBFAIR_LOG_DIR": str(Path(args[args.index("--out") + 1]).parent)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
           "-m", "robfair", *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def _assert_same_audit(one: Path, two: Path, ranks: int) -> dict:
    a, b = (json.loads((p / "audit.json").read_text()) for p in (one, two))
    assert b["meta"]["distributed"]["world_size"] == ranks and "distributed" not in a["meta"]
    assert len(b["meta"]["distributed"]["shard_seconds"]) == ranks  # every rank ran a part
    assert _strip(a) == _strip(b)
    for name in ("outcomes.npz", "examples.npz"):  # the examples: regenerated on rank 0 alone
        za, zb = (np.load(p / name) for p in (one, two))
        assert sorted(za.files) == sorted(zb.files) and za["index"].size > 0
        for key in za.files:
            if key != "header":
                assert np.array_equal(za[key], zb[key]), (name, key)
        ha, hb = (json.loads(bytes(z["header"]).decode()) for z in (za, zb))
        assert _strip(ha) == _strip(hb)
    # rank 0 wrote these, no one else anything
    assert sorted(os.listdir(two)) == ["audit.json", "examples.npz", "outcomes.npz"]
    return a


AUDIT = ["audit", "--data", "digits,limit=150", "-a", "fgsm", "-a", "pgd10", "--eps", "0.1", "--bootstrap", "50"]
PGD_FIRST = ["audit", "--data", "digits,limit=150", "-a", "pgd10", "-a", "fgsm", "--eps", "0.1", "--bootstrap", "50"]


def test_two_ranks_write_the_same_audit_as_one_process(model_path, tmp_path, capsys):
    # 150 samples in batches of 32: 4 full batches and one of 22, split 3 / 2 between the ranks; the
    # distances bisect with the first attack, pgd10 (random starts, so the seeding of each batch counts)
    args = [*PGD_FIRST, "-m", model_path, "--batch-size", "32", "--probe", "0", "--eps-sweep", "0:0.2:3",
            "--distances"]
    code, _, err = run_cli([*args, "--out", tmp_path / "one"], capsys)
    assert code == 0, err
    res = _torchrun([*args, "--out", tmp_path / "two"])
    assert res.returncode == 0, res.stderr[-3000:]
    a = _assert_same_audit(tmp_path / "one", tmp_path / "two", 2)
    assert a["meta"]["n"] == 150 and 0 < a["reports"]["pgd10"]["overall"]["rob_acc"] < 1
    assert "eps_sweep" in a
    d = a["distances"]
    assert d["method"] == "bisection" and d["meta"]["attack"] == "pgd10" and d["meta"]["seeding"] == "per batch"
    finite = [v for v in d["distance"] if v is not None]
    assert len(d["distance"]) == 150 and len(finite) > 100 and len(set(finite)) > 5
    z = np.load(tmp_path / "two" / "outcomes.npz")
    header = json.loads(bytes(z["header"]).decode())
    j = header["min_eps"].index("distance")
    assert np.array_equal(np.where(np.isfinite(z[f"min_eps_{j}"]), z[f"min_eps_{j}"], -1.0),
                          [-1.0 if v is None else v for v in d["distance"]])
    assert res.stdout.count("wrote ") == 1  # the tables and lines come from rank 0 only
    # the equality is not one a wrong cut could keep: batches of 30 start other random draws
    code, _, err = run_cli([*PGD_FIRST, "-m", model_path, "--batch-size", "30", "--probe", "0", "--distances",
                            "--out", tmp_path / "other"], capsys)
    assert code == 0, err
    other, one = (np.load(tmp_path / name / "outcomes.npz") for name in ("other", "one"))
    assert not np.array_equal(other["adv_pred_0"], one["adv_pred_0"])  # pgd10
    assert json.loads((tmp_path / "other" / "audit.json").read_text())["distances"]["distance"] != d["distance"]


def test_bisection_distances_of_a_batch_do_not_depend_on_the_batches_before(model_path):
    """What makes the sharded distances equal one process's: each batch's bisection draws from its
    own generator (seeded from its first sample's dataset index). The scheme before, one generator
    drawn across the batches in order, gives other distances to a rank that starts mid-way."""
    from robfair.auditing.distances import boundary_distances, minimal_eps
    from robfair.seeding import attack_generator
    from robfair.data import load_dataset
    from robfair.models import load_any

    ds = load_dataset("digits,limit=150", split="test")
    net, _ = load_any(model_path)
    kw = dict(attack="pgd10", eps_max=0.2, batch_size=32, device="cpu", seed=0)
    full = boundary_distances(net, ds, "bisection", **kw)
    mine = shard_batches(np.arange(150), 32, DistInfo(1, 2))  # rank 1 of 2: batches 1 and 3
    part = boundary_distances(net, ds, "bisection", indices=mine, **kw)
    assert np.array_equal(part.distance, full.distance[mine]) and np.array_equal(part.lower, full.lower[mine])
    assert np.array_equal(part.y, full.y[mine]) and np.array_equal(part.pred, full.pred[mine])
    # the old scheme, one generator over all batches: rank 1 alone draws other starts for its batches
    x = ds.images()
    cuts = [slice(s, s + 32) for s in range(0, 150, 32)]

    def old(batches):
        gen = attack_generator(torch.device("cpu"), 0, "pgd10", "bisection")
        return np.concatenate([minimal_eps(net, x[c], "pgd10", eps_max=0.2, generator=gen)[1].numpy() for c in batches])

    one_process, rank1 = old(cuts), old(cuts[1::2])
    assert not np.array_equal(one_process[mine], rank1)


@pytest.mark.slow
def test_two_ranks_share_the_probe_chunks(model_path, tmp_path, capsys):
    """The reliability probe (official AutoAttack) at twice the audit's compute, its rounds in
    chunks of the batch size 16 spread over the ranks: the joined record (samples, outcomes, units
    spent, verdict) equals one process's (AutoAttack's seed comes from each chunk's generator)."""
    args = [*AUDIT, "-m", model_path, "--batch-size", "16", "--probe", "2"]
    code, _, err = run_cli([*args, "--out", tmp_path / "one"], capsys)
    assert code == 0, err
    state = tmp_path / "state" / "aa.json"
    res = _torchrun([*args, "--out", tmp_path / "two", "--autoattack-state", state])
    assert res.returncode == 0, res.stderr[-3000:]
    a = _assert_same_audit(tmp_path / "one", tmp_path / "two", 2)
    p = a["probe"]
    assert p["attack"] == "autoattack" and p["overall"]["first_attacked"] > 16 and len(p["rounds"]) >= 2
    # each rank that attacked a chunk (rank 1: a round of more than 16 samples) kept the official
    # state of its last one in its own file
    ranks = [0] + ([1] if max(r["samples"] for r in p["rounds"]) > 16 else [])
    assert sorted(os.listdir(state.parent)) == [f"aa.rank{r}.json" for r in ranks]


def test_autoattack_state_file_is_fresh_per_run(model_path, tmp_path):
    """``state_file``: each AutoAttack run writes the official evaluation state there, replacing the
    previous run's (never restoring it: a restored run returns clean inputs for samples fooled earlier)."""
    pytest.importorskip("pyautoattack")
    from robfair.attacks.autoattack import state_file
    from robfair.auditing.engine import evaluate
    from robfair.data import load_dataset
    from robfair.models import load_any

    ds = load_dataset("digits,limit=12", split="test")
    net, _ = load_any(model_path)
    path = tmp_path / "aa.json"
    with state_file(path):
        first = evaluate(net, ds, ["autoattack"], 0.3, device="cpu", batch_size=8)
        st = json.loads(path.read_text())
        again = evaluate(net, ds, ["autoattack"], 0.3, device="cpu", batch_size=8)
    assert len(st["_robust_flags"]) == 4 and "apgd-ce" in str(st["_attacks_to_run"])  # the last batch's
    assert np.array_equal(first.adv_pred["autoattack"], again.adv_pred["autoattack"])  # nothing was restored
    assert (first.clean_pred == first.y).sum() >= 10 and (first.adv_pred["autoattack"] != first.y).all()
    path.unlink()
    evaluate(net, ds, ["autoattack"], 0.3, device="cpu", batch_size=8)
    assert not path.exists()  # outside the block nothing is written


def test_a_refusal_ends_every_rank_with_one_line(model_path, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "audit.json").write_text("{}")
    res = _torchrun([*AUDIT, "-m", model_path, "--probe", "0", "--out", out])
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "already exists" in lines[0] and "--overwrite" in lines[0], res.stderr[-2000:]
    assert "exitcode" not in res.stderr or "exitcode  : 2" in res.stderr or "exitcode: 2" in res.stderr
    assert (out / "audit.json").read_text() == "{}" and sorted(os.listdir(out)) == ["audit.json"]


# ------------------------------------------------------------------------------ the pieces, in-process
@pytest.mark.parametrize("n,bs,world", [(150, 32, 2), (150, 32, 3), (10, 4, 5), (64, 32, 2), (1, 8, 2)])
def test_shards_are_whole_batches_without_padding(n, bs, world):
    order = np.random.default_rng(0).permutation(n)
    parts = [shard_batches(order, bs, DistInfo(r, world)) for r in range(world)]
    joined = np.concatenate(parts)
    assert np.array_equal(np.sort(joined), np.arange(n))  # each sample once
    batches = [order[s:s + bs] for s in range(0, n, bs)]
    for r, part in enumerate(parts):
        assert np.array_equal(part, np.concatenate(batches[r::world]) if batches[r::world] else part[:0])
    assert np.array_equal(shard_batches(order, bs, DistInfo()), order)


def test_a_failed_rank_is_named_on_every_other_rank():
    ok = {"ok": True}
    bad = {"ok": False, "error": "DataError", "message": "the dataset is empty; check the path", "user": True}
    settle([ok, ok], 0)  # nobody failed: nothing raised
    with pytest.raises(RankFailed, match=r"^rank 1 failed: the dataset is empty; check the path$"):
        settle([ok, bad], 0)
    own = ValueError("mine")
    with pytest.raises(ValueError, match="mine"):
        settle([ok, bad], 1, own)
    bug = {"ok": False, "error": "ZeroDivisionError", "message": "division by zero", "user": False}
    with pytest.raises(RankFailed, match=r"rank 1 failed \(and 1 more rank\): ZeroDivisionError: division by zero"):
        settle([ok, bug, bad], 0)


# ------------------------------------------------------------------------------ devices (a CUDA stub, no GPU here)
@pytest.fixture
def cuda_stub(monkeypatch):
    """torchrun's environment for local rank 1 of 2 on a node that claims 2 GPUs; records the calls."""
    import torch.distributed as dist

    import robfair.distributed as D

    calls: dict = {"set_device": [], "init": []}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls["set_device"].append(torch.device(d)))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: calls["init"].append(kw))
    return D, calls


def test_each_rank_takes_its_local_gpu_and_nccl(cuda_stub, monkeypatch):
    D, calls = cuda_stub
    info, dev, owns = D.setup("auto")
    assert (info.rank, info.world_size, info.local_rank, owns) == (1, 2, 1, True)
    assert dev == torch.device("cuda", 1) and calls["set_device"] == [torch.device("cuda", 1)]
    assert calls["init"][0]["backend"] == "nccl" and calls["init"][0]["timeout"].total_seconds() == 3600
    calls["init"].clear(), calls["set_device"].clear()
    info, dev, _ = D.setup("cuda:0")  # an explicit GPU is still this rank's own: one process per GPU
    assert dev == torch.device("cuda", 1) and calls["set_device"] == [dev]
    calls["init"].clear(), calls["set_device"].clear()
    monkeypatch.setenv("ROBFAIR_DIST_TIMEOUT", "5")
    info, dev, _ = D.setup("cpu")  # the CPU: gloo, no GPU touched
    assert dev == torch.device("cpu") and calls["set_device"] == []
    assert calls["init"][0]["backend"] == "gloo" and calls["init"][0]["timeout"].total_seconds() == 300


def test_more_local_ranks_than_gpus_is_refused(cuda_stub, monkeypatch):
    from robfair.errors import ConfigError

    D, calls = cuda_stub
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ConfigError, match=r"local rank 2 but this node has 2 GPUs; pass --nproc-per-node 2"):
        D.setup("auto")
    assert calls["init"] == [] and calls["set_device"] == []
    monkeypatch.setenv("LOCAL_RANK", "0")
    for bad in ("0", "-3", "soon", "inf"):
        monkeypatch.setenv("ROBFAIR_DIST_TIMEOUT", bad)
        with pytest.raises(ConfigError, match="ROBFAIR_DIST_TIMEOUT must be a positive number of minutes"):
            D.setup("auto")
