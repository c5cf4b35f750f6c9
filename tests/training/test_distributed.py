"""Two gloo processes on CPU under torchrun: synchronized weights, merged validation counts."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from robfair.attacks import get_attack
from robfair.metrics import GroupReport
from robfair.models import load_checkpoint
from robfair.training import TrainConfig, split_train_val

CFG = dict(data="digits", model="mlp", model_kwargs={"hidden": [32]}, method="pgd-at", attack_options={"steps": 2},
           eps=0.1, epochs=2, batch_size=64, lr=0.05, val_per_class=15, val_attack="fgsm", seed=2, device="cpu")


@pytest.mark.slow
def test_two_gloo_ranks(tmp_path, digits):
    out = tmp_path / "run"
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(f"""
        import os, torch
        from robfair.training import TrainConfig, train
        torch.set_num_threads(1)
        r = train(TrainConfig(**{CFG!r}, out={str(out)!r}))
        torch.save(r.model.state_dict(), {str(tmp_path)!r} + f"/rank{{os.environ['RANK']}}.pt")
    """))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    w0, w1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert all(torch.equal(w0[k], w1[k]) for k in w0)  # DDP kept the replicas identical
    recs = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in recs] == [1, 2]  # rank 0 alone wrote
    cfg = TrainConfig(**CFG)
    train_ds, val = split_train_val(digits, cfg)
    assert recs[-1]["train"]["n"] == len(train_ds) // 2 * 2  # both shards counted
    # the merged validation equals a single-process evaluation of the same weights (FGSM is deterministic)
    model, _ = load_checkpoint(out / "checkpoints" / "last.pt")
    assert all(torch.equal(model.state_dict()[k], w0[k]) for k in w0)
    x, y = val.images(), val.y
    with torch.no_grad():
        clean = model(x).argmax(1)
    adv = model(get_attack("fgsm")(model, x, y, 0.1)).argmax(1).detach()
    rep = GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=adv, class_names=val.classes)
    per = recs[-1]["val"]["per_group"]
    for name, row in rep.by_group.iterrows():
        assert per[name]["n"] == row["n"] == 15
        assert per[name]["clean_acc"] == pytest.approx(row["clean_acc"])
        assert per[name]["rob_acc"] == pytest.approx(row["rob_acc"])
