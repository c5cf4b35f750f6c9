"""as_eps, eval_mode, input validation, per-sample losses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from robfair.attacks import PGD, as_eps, eval_mode, per_sample_loss
from robfair.errors import AttackError, RobfairError


def test_as_eps_shapes_dtype_and_errors():
    x = torch.rand(3, 2, 4, 4, dtype=torch.float64)
    e = as_eps(8 / 255, x)
    assert e.shape == (3, 1, 1, 1) and e.dtype == torch.float64 and torch.all(e == 8 / 255)  # no float32 detour
    assert torch.equal(as_eps(torch.tensor([0.0, 0.1, 0.2]), x).flatten(), torch.tensor([0.0, 0.1, 0.2]).double())
    assert as_eps(np.float32(0.5), x).shape == (3, 1, 1, 1)
    assert as_eps(torch.tensor(0.1), x[:, 0, 0]).shape == (3, 1)  # any input rank
    for bad, msg in [(-0.1, ">= 0"), (torch.tensor([0.1, -1e-9, 0.0]), ">= 0"), (float("nan"), "NaN"),
                     (torch.tensor([0.1, 0.2]), "shape"), ("8/255", "number"), (True, "number")]:
        with pytest.raises(AttackError, match=msg) as info:
            as_eps(bad, x)
        assert isinstance(info.value, RobfairError) and "\n" not in str(info.value)


def test_eval_mode_restores_mixed_flags_even_on_error():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.BatchNorm1d(2), nn.Dropout()), nn.Linear(2, 2))
    model.train()
    model[1][0].eval()
    model[2].eval()
    before = [m.training for m in model.modules()]
    with pytest.raises(RuntimeError), eval_mode(model):
        assert not any(m.training for m in model.modules())
        raise RuntimeError("boom")
    assert [m.training for m in model.modules()] == before


def test_input_validation_messages():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    atk = PGD(1)
    x, y = torch.rand(2, 4), torch.zeros(2, dtype=torch.long)
    with pytest.raises(AttackError, match=r"\[0, 1\]"):
        atk(model, x * 255, y, 0.1)
    with pytest.raises(AttackError, match="labels"):
        atk(model, x, y.float(), 0.1)
    with pytest.raises(AttackError, match="one label per sample"):
        atk(model, x, torch.zeros(3, dtype=torch.long), 0.1)
    with pytest.raises(AttackError, match="float tensor"):
        atk(model, (x * 255).to(torch.uint8), y, 0.1)
    assert atk(model, x[:0], y[:0], 0.1).shape == (0, 4)
    with pytest.raises(AttackError, match="precision"):
        PGD(1, precision="int8")
    with pytest.raises(AttackError, match="norm"):
        PGD(1, norm="l1")


def test_per_sample_losses_by_hand():
    z = torch.tensor([[2.0, 0.5, 1.0], [0.0, 3.0, -1.0]], dtype=torch.float64)
    y = torch.tensor([0, 2])
    ce = -torch.log_softmax(z, 1)[[0, 1], [0, 2]]
    assert torch.allclose(per_sample_loss(z, y, "ce"), ce)
    assert torch.allclose(per_sample_loss(z, y, "ce", targeted=True), -ce)
    assert torch.allclose(per_sample_loss(z, y, "ce", temperature=2.0), -torch.log_softmax(z / 2, 1)[[0, 1], [0, 2]])
    # CW: max_{k != y} z_k - z_y ; targeted: z_t - max_{k != t} z_k
    assert torch.allclose(per_sample_loss(z, y, "cw"), torch.tensor([1.0 - 2.0, 3.0 - (-1.0)], dtype=torch.float64))
    assert torch.allclose(per_sample_loss(z, y, "cw", targeted=True), torch.tensor([2.0 - 1.0, -1.0 - 3.0], dtype=torch.float64))
    # with the true label y and a target t: -CE(z, t) and the targeted margin z_t - z_y
    t = torch.tensor([1, 1])
    assert torch.allclose(per_sample_loss(z, y, "ce", target=t), torch.log_softmax(z, 1)[[0, 1], [1, 1]])
    assert torch.allclose(per_sample_loss(z, y, "cw", target=t), torch.tensor([0.5 - 2.0, 3.0 - (-1.0)], dtype=torch.float64))


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")
def test_ddp_wrapped_model_is_attacked_through_its_module(tmp_path):
    """A DDP forward may be a collective (buffer broadcast); with early exit, ranks take different
    numbers of steps and would deadlock. The attack must bypass the wrapper (no gradient sync is
    needed for input gradients), and training through DDP must still work afterwards."""
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        net = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.BatchNorm1d(3)))
        wrapper_calls = []
        net.register_forward_pre_hook(lambda m, a: wrapper_calls.append(1))
        x, y = torch.rand(5, 4), torch.zeros(5, dtype=torch.long)
        for _ in range(2):
            x_adv = PGD(2)(net, x, y, 0.1, early_exit=True)
            assert not wrapper_calls
            nn.functional.cross_entropy(net(x_adv), y).backward()  # a training step after the attack
            wrapper_calls.clear()
        assert all(p.grad is not None for p in net.parameters())
    finally:
        dist.destroy_process_group()
