"""Models for robfair: images in [0, 1] in, logits out, normalization inside the model.

    from robfair.models import create, save_checkpoint, load_checkpoint
    model = create("preact-resnet18", num_classes=10, in_shape=(3, 32, 32), mean=(0.4914, 0.4822, 0.4465),
                   std=(0.2471, 0.2435, 0.2616))
    save_checkpoint("best.pt", model, classes=dataset.classes, extra={"epoch": 3})
    model, meta = load_checkpoint("best.pt")          # torch.load(weights_only=True) only

Architectures (``describe_models()`` lists them with their arguments): ``mlp``, ``smallcnn`` (adapts to
8x8 / 28x28 / 32x32 and any channel count), ``cifar-cnn`` (~51 MFLOP per 32x32x3 image),
``preact-resnet18``, ``wrn`` (``depth``, ``widen``, ``dropout``) and the presets ``wrn-34-10``, ``wrn-28-10``.
Any model file (TorchScript, torch.export, state dict + your class, safetensors, RobustBench):
``load_any(spec, arch=..., arch_kwargs=...)`` (see ``robfair.models.sources``); a model that expects
normalized inputs: ``with_normalization(model, "cifar10")`` (= ``Normalized(model, mean, std)``).
Add your own with ``@MODELS.register("name")`` on a ``factory(num_classes, in_shape, *, ...)``: a
new file in this package is enough (every module of the package is imported here); the model
contract tests (``tests/models/test_model_contract.py``) then run on it. A registration may state
``contract_shape=(C, H, W)`` / ``contract_kwargs={...}``: the input shape / arguments those tests
use (default ``(3, 16, 16)``, no arguments).
"""

from __future__ import annotations

from ..registry import import_submodules
from .parts import MODELS, NORMALIZATION_PRESETS, Normalized, resolve_normalization, with_normalization
from .checkpoint import load_checkpoint, save_checkpoint
from .factory import ModelInfo, check_model_data, count_flops, create, describe_models, unwrap_model
from .sources import detect_format, load_any, model_classes

import_submodules(__name__, __path__)

__all__ = [
    "MODELS",
    "NORMALIZATION_PRESETS",
    "detect_format",
    "load_any",
    "model_classes",
    "resolve_normalization",
    "with_normalization",
    "ModelInfo",
    "Normalized",
    "check_model_data",
    "count_flops",
    "create",
    "describe_models",
    "load_checkpoint",
    "save_checkpoint",
    "unwrap_model",
]
