"""The contract every registered architecture keeps, parametrized over the registry (as timm's
model tests): a new model file gets these tests with no edit here.

Logits of shape (N, K) in fp32 and finite; eval mode is deterministic; channels_last gives the same
logits and predictions, bf16 autocast close logits (per-channel normalization statistics, so the
normalization layer is in the check); input gradients flow; the checkpoint round trip
(``save_checkpoint`` / ``load_checkpoint``) and a plain state-dict round trip reproduce the logits
exactly. A registration may state ``contract_shape=(C, H, W)`` and ``contract_kwargs={...}`` (default
``(3, 16, 16)``, none). ``test_architectures.py`` runs every registration at several input shapes.
"""

from __future__ import annotations

import pytest
import torch

from robfair.models import MODELS, create, load_checkpoint, save_checkpoint

K = 5


def _stats(shape) -> dict:
    """Distinct per-channel normalization statistics (a channel mix-up changes the logits)."""
    return {"mean": [0.4 + 0.1 * c for c in range(shape[0])], "std": [0.2 + 0.05 * c for c in range(shape[0])]}


def check_model_contract(name: str, tmp_path, shape=(3, 16, 16), **kwargs) -> None:
    torch.manual_seed(0)
    model = create(name, K, shape, **_stats(shape), **kwargs).eval()
    x = torch.rand(3, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        z = model(x)
        assert z.shape == (3, K) and z.dtype == torch.float32 and torch.isfinite(z).all(), name
        assert torch.equal(model(x), z), f"{name}: eval mode is not deterministic"
    # input gradients flow (train mode too: BatchNorm / dropout run)
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model.train()(xg).logsumexp(1).sum(), xg)
    assert g.shape == x.shape and torch.isfinite(g).all() and g.abs().sum() > 0, name
    model.eval()
    with torch.no_grad():
        z = model(x)  # after a train-mode forward (BN running stats moved): the reference
    # state-dict round trip into a fresh build of the same spec, and the checkpoint file round trip
    torch.manual_seed(123)
    fresh = create(name, K, shape, **_stats(shape), **kwargs)
    fresh.load_state_dict(model.state_dict())
    save_checkpoint(tmp_path / "m.pt", model, classes=[f"c{k}" for k in range(K)])
    loaded, meta = load_checkpoint(tmp_path / "m.pt")
    assert meta["classes"] == [f"c{k}" for k in range(K)]
    with torch.no_grad():
        assert torch.equal(fresh.eval()(x), z), f"{name}: the state dict does not rebuild the model"
        assert torch.equal(loaded(x), z), f"{name}: the checkpoint does not rebuild the model"
        # channels_last: the same logits up to float reordering, the same predictions where decided
        cl = model.to(memory_format=torch.channels_last)
        z_cl = cl(x.contiguous(memory_format=torch.channels_last))
    assert torch.allclose(z_cl, z, rtol=1e-4, atol=1e-5), f"{name}: channels_last changes the logits"
    top2 = z.topk(2, 1).values
    decided = (top2[:, 0] - top2[:, 1]) > 1e-4
    assert torch.equal(z_cl.argmax(1)[decided], z.argmax(1)[decided]), name
    # bf16 autocast (the audit's --precision bf16) runs and stays close: an 8-bit mantissa, so
    # agreement to a few percent of the logit scale
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        z_bf = cl(x.contiguous(memory_format=torch.channels_last))
    assert z_bf.shape == (3, K) and torch.isfinite(z_bf).all(), f"{name}: bf16 autocast gives no finite logits"
    assert (z_bf.float() - z).abs().max() <= 0.05 * z.abs().max() + 1e-2, f"{name}: bf16 autocast is far from fp32"


def registered_models() -> list:
    return [pytest.param(e.name, e.meta.get("contract_shape", (3, 16, 16)), e.meta.get("contract_kwargs", {}), id=e.name)
            for e in MODELS]


@pytest.mark.parametrize("name,shape,kwargs", registered_models())
def test_every_registered_model_keeps_the_contract(name, shape, kwargs, tmp_path):
    check_model_contract(name, tmp_path, shape, **kwargs)


DUMMY = '''
from torch import nn

from robfair.models.parts import MODELS


@MODELS.register("dummy-linear", help="test only: a linear layer", contract_shape=(1, 4, 4))
def dummy_linear(num_classes, in_shape, *, bias: bool = True):
    c, h, w = in_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, num_classes, bias=bias))
'''


def test_a_new_model_file_registers_itself_and_gets_the_contract(monkeypatch, tmp_path):
    from _shared import drop_in

    from robfair.models import describe_models

    assert drop_in(monkeypatch, tmp_path, "robfair.models", MODELS, "dummy_linear.py", DUMMY) == ["dummy-linear"]
    assert "dummy-linear" in str(describe_models())
    entry = MODELS.entry("dummy-linear")
    check_model_contract("dummy-linear", tmp_path, entry.meta["contract_shape"], bias=False)
    # the contract can fail: a model whose eval-mode forward is random
    with pytest.raises(AssertionError, match="deterministic"):
        class Noisy(torch.nn.Module):
            def __init__(self, num_classes, in_shape):
                super().__init__()
                self.lin = torch.nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], num_classes)

            def forward(self, x):
                return self.lin(x.flatten(1)) + torch.randn(x.shape[0], 1)

        MODELS.add("dummy-noisy", Noisy)
        check_model_contract("dummy-noisy", tmp_path, (1, 4, 4))
