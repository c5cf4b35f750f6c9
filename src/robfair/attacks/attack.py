"""What every attack shares: input checks, per-sample epsilon, eval mode, precision, losses.

An attack is a callable ``attack(model, x, y, eps, *, generator=None, early_exit=False) -> x_adv``:

- ``x`` is a float batch in [0, 1] (normalization lives inside the model), ``y`` the int64 **true**
  labels (a targeted attack picks its targets by a stated rule, never ``y``), ``eps`` a float or an
  (N,) tensor (one radius per sample), checked by :func:`as_eps`, or a
  :class:`~robfair.attacks.radius.Radius` (checked where it entered robfair, trusted here).
- ``attack.run(...)`` returns an :class:`AttackResult` (``x_adv``, the prediction there from the
  attack's own logits, the step of first success); ``attack(...)`` returns ``x_adv`` only.
- ``x_adv`` is detached, in [0, 1], and within each sample's own ball: ``||x_adv_i - x_i|| <= eps_i``.
- Gradients are taken with ``torch.autograd.grad(loss, x_adv)`` only (never a backward pass on the loss):
  no parameter ``.grad`` is ever created and parameter flags are never touched (thread-safe, and the
  weight-gradient half of the backward pass is skipped).
- The model runs in eval mode while it is attacked; every submodule's training flag is restored
  afterwards, mixed train/eval models included. A ``DistributedDataParallel`` wrapper is bypassed
  (its ``.module`` is attacked): input gradients need no gradient sync.
"""

from __future__ import annotations

import contextlib
import contextvars
import numbers
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import AttackError
from .radius import Radius

PRECISIONS = ("fp32", "bf16", "fp16")
_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
LOSSES = ("ce", "cw")
NORMS = ("linf", "l2")


#: what one sample's pass through the model costs, in forward passes: a forward alone is 1, a forward
#: with the input gradient 2 (the backward to the input costs about one forward; measured 1.3-2.5x
#: per row on this project's CPU models). The audit's and the reliability probe's costs are counted
#: in these units (:func:`count_passes`).
GRADIENT_PASS_UNITS = 2


@dataclass
class PassCount:
    """Rows that went through a model inside :func:`count_passes`: ``forward`` without an input
    gradient, ``gradient`` with one (a leaf input that requires grad, grad mode on)."""

    forward: int = 0
    gradient: int = 0
    on_pass: Callable[["PassCount"], None] | None = None

    @property
    def units(self) -> int:
        return self.forward + GRADIENT_PASS_UNITS * self.gradient


_COUNTS: contextvars.ContextVar[tuple[PassCount, ...]] = contextvars.ContextVar("robfair_pass_counts", default=())


@contextlib.contextmanager
def count_passes(on_pass: Callable[[PassCount], None] | None = None) -> Iterator[PassCount]:
    """Count every pass an attack makes through the model (:meth:`Attack.logits` and
    :meth:`Attack.logits_fp32`, which every robfair attack uses, AutoAttack's official code
    included) inside the block; blocks nest, each counting what runs inside it. ``on_pass`` is
    called after each counted pass (progress)."""
    c = PassCount(on_pass=on_pass)
    token = _COUNTS.set(_COUNTS.get() + (c,))
    try:
        yield c
    finally:
        _COUNTS.reset(token)


def _tally(x: torch.Tensor) -> None:
    counts = _COUNTS.get()
    if not counts:
        return
    rows = int(x.shape[0]) if x.dim() else 1
    grad = torch.is_grad_enabled() and x.requires_grad
    for c in counts:
        if grad:
            c.gradient += rows
        else:
            c.forward += rows
        if c.on_pass is not None:
            c.on_pass(c)


def as_eps(eps: float | int | torch.Tensor | Radius, x: torch.Tensor, what: str = "epsilon") -> torch.Tensor:
    """A radius per sample, shaped ``(N, 1, ..., 1)`` to broadcast against ``x`` (``(N,1,1,1)`` for
    images), on ``x``'s device and dtype. ``eps`` is a number or an (N,) / scalar tensor, checked here
    (an attack called directly), or a :class:`~robfair.attacks.radius.Radius`, checked where it
    entered and trusted here (what the engine passes: no check, no device sync).

    Raises ``AttackError`` for a negative, NaN/inf or wrongly shaped epsilon."""
    if isinstance(eps, Radius):
        return eps.broadcast(x, what)
    n = x.shape[0]
    shape = (n,) + (1,) * (x.dim() - 1)
    if isinstance(eps, bool) or not isinstance(eps, (numbers.Real, torch.Tensor)):
        raise AttackError(f"{what} must be a number or an (N,) tensor, got {type(eps).__name__}; pass e.g. 8/255")
    if isinstance(eps, torch.Tensor):
        e = eps.detach().to(device=x.device, dtype=x.dtype)
    else:  # straight to x's dtype: 0.3 must not pass through float32 on its way to a float64 batch
        e = torch.tensor(float(eps), device=x.device, dtype=x.dtype)
    if e.dim() > 1 and e.numel() == n:
        e = e.reshape(n)
    if e.dim() == 0:
        e = e.expand(n)
    elif e.shape != (n,):
        raise AttackError(f"{what} has shape {tuple(e.shape)} but the batch has {n} samples; pass a float or an ({n},) tensor")
    if n and not bool(((e >= 0) & torch.isfinite(e)).all()):  # one device sync for both checks
        if not bool(torch.isfinite(e).all()):
            raise AttackError(f"{what} holds NaN or inf; pass finite values such as 8/255")
        raise AttackError(f"{what} must be >= 0, got min {float(e.min()):g}; pass non-negative values such as 8/255")
    return e.reshape(shape)


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put every submodule in eval mode; restore each one's own ``training`` flag on exit
    (exactly, even for a model that mixes train and eval submodules, and on error)."""
    if not isinstance(model, nn.Module):
        yield model
        return
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, flag in flags:
            m.training = flag


def _batch_view(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return v.reshape((v.shape[0],) + (1,) * (x.dim() - 1))


def per_sample_loss(logits: torch.Tensor, y: torch.Tensor, loss: str = "ce", *, targeted: bool = False,
                    target: torch.Tensor | None = None, temperature: float = 1.0) -> torch.Tensor:
    """The (N,) loss an attack *maximizes*.

    ``y`` is the true label. Untargeted: ``ce`` is the cross-entropy of ``logits / temperature``,
    ``cw`` the margin ``max_{k!=y} z_k - z_y`` (positive exactly when the sample is misclassified).
    With ``target`` (an (N,) class per sample): ``ce`` is minus the CE to the target, ``cw`` the
    targeted margin ``z_t - z_y`` (as APGD-T's targeted DLR numerator).

    ``targeted=True`` without ``target`` is the older convention where ``y`` *holds* the targets:
    ``-CE(z, y)`` and ``z_y - max_{k!=y} z_k``."""
    z = logits / temperature if temperature != 1.0 else logits
    if target is not None:
        if loss == "ce":
            return -F.cross_entropy(z, target, reduction="none")
        return z.gather(1, target[:, None]).squeeze(1) - z.gather(1, y[:, None]).squeeze(1)
    if loss == "ce":
        ce = F.cross_entropy(z, y, reduction="none")
        return -ce if targeted else ce
    z_y = z.gather(1, y[:, None]).squeeze(1)
    others = z.scatter(1, y[:, None], float("-inf")).amax(1)
    return z_y - others if targeted else others - z_y


#: ``fooled_step`` of a sample no iterate fooled.
NEVER = -1
#: ``fooled_step`` of a fooled sample whose attack does not record steps (AutoAttack, TRADES-KL).
STEP_UNKNOWN = -2


@dataclass
class AttackResult:
    """What :meth:`Attack.run` returns.

    x_adv: the adversarial batch (detached, in [0, 1], inside each sample's ball).
    adv_pred: (N,) int64, the model's prediction at ``x_adv``, taken from the logits the attack
        itself computed (no second forward). Under ``bf16`` / ``fp16`` every prediction that decides
        success is confirmed in fp32 (the model at its own dtype, autocast off), so reduced precision
        never counts a sample as fooled that fp32 would not.
    fooled: (N,) bool, the attack's success criterion held at ``x_adv`` (untargeted: ``adv_pred != y``).
    fooled_step: (N,) int64, the iterate at which the sample was first fooled (0 = the start,
        ``k`` = after k steps), :data:`NEVER` (-1) if never, :data:`STEP_UNKNOWN` (-2) for a fooled
        sample of an attack that does not record steps.
    fooled_run: (N,) int64, the restart (or target run) that fooled the sample, -1 if none/unknown.
    warnings: messages the attack raised about its own reliability (e.g. AutoAttack's flags).
    """

    x_adv: torch.Tensor
    adv_pred: torch.Tensor
    fooled: torch.Tensor
    fooled_step: torch.Tensor
    fooled_run: torch.Tensor
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.x_adv.shape[0])


class Attack:
    """Base class: validates inputs, converts epsilon, enters eval mode and enables gradients, then
    calls :meth:`perturb`. Subclasses implement ``perturb(model, x, y, eps, *, generator, early_exit)``
    with ``eps`` already shaped ``(N, 1, ..., 1)``.

    precision: ``"fp32"`` adds no autocast (the model runs at its own dtype; an autocast the caller
    entered still applies), ``"bf16"`` / ``"fp16"`` run the forward under ``torch.autocast`` on the
    input's device type (bf16 is the safer choice: fp16 input gradients can underflow); losses are
    computed in fp32. A success seen at reduced precision is confirmed in fp32 (see :class:`AttackResult`).
    """

    name: str = "attack"
    norm: str = "linf"

    def __init__(self, *, precision: str = "fp32") -> None:
        self.precision = precision

    # -- configuration -------------------------------------------------------------------------
    @property
    def precision(self) -> str:
        return self._precision

    @precision.setter
    def precision(self, value: str) -> None:
        value = str(value).lower()
        if value not in PRECISIONS:
            raise AttackError(f"unknown precision '{value}'; choose one of: {', '.join(PRECISIONS)}")
        self._precision = value

    # -- the call ------------------------------------------------------------------------------
    def __call__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float | torch.Tensor, *,
                 generator: torch.Generator | None = None, early_exit: bool = False,
                 model_mode: str = "eval", targets: torch.Tensor | None = None) -> torch.Tensor:
        """Return ``x_adv`` (detached, in [0, 1], ``||x_adv_i - x_i|| <= eps_i``). Use :meth:`run`
        for the predictions and the step of first success as well. ``model_mode="train"`` attacks the
        model in the mode it is in (e.g. CFA's official PGD-AT base attacks with batch-norm batch
        statistics, which also updates the running statistics); the default is eval mode."""
        return self._execute(model, x, y, eps, generator=generator, early_exit=early_exit, predict=False,
                             model_mode=model_mode, targets=targets).x_adv

    def run(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float | torch.Tensor, *,
            generator: torch.Generator | None = None, early_exit: bool = False,
            targets: torch.Tensor | None = None) -> AttackResult:
        """Attack the batch and return an :class:`AttackResult`: ``x_adv``, the prediction there
        (from the attack's own logits, confirmed in fp32 under reduced precision), whether the
        sample was fooled and at which step. ``y`` is always the true label; a targeted attack
        picks its targets by its rule, or takes explicit ``targets`` ((N,) or (N, k), never ``y``)."""
        return self._execute(model, x, y, eps, generator=generator, early_exit=early_exit, predict=True,
                             targets=targets)

    def stream(self, model: nn.Module, chunks, *, generator: torch.Generator | None = None,
               early_exit: bool = True, batch_size: int | None = None, predict: bool = True):
        """Attack a sequence of chunks (``(x, y, eps[, clean_logits])`` tuples or
        :class:`~robfair.attacks.pgd.Chunk`) and yield one :class:`AttackResult` per chunk, in
        order. The default runs :meth:`run` chunk by chunk; PGD refills its active batch across
        chunks (``batch_size``) so early exit keeps the batch full."""
        for item in chunks:
            x, y, eps = (item.x, item.y, item.eps) if hasattr(item, "x") else tuple(item)[:3]
            targets = getattr(item, "targets", None)
            yield self._execute(model, x, y, eps, generator=generator, early_exit=early_exit, predict=predict,
                                targets=targets)

    def _execute(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float | torch.Tensor, *,
                 generator: torch.Generator | None, early_exit: bool, predict: bool,
                 model_mode: str = "eval", targets: torch.Tensor | None = None) -> AttackResult:
        if model_mode not in ("eval", "train"):
            raise AttackError(f"model_mode must be 'eval' or 'train', got {model_mode!r}")
        if targets is not None and not getattr(self, "targeted", False):
            raise AttackError(f"attack '{getattr(self, 'name', type(self).__name__)}' is untargeted but targets "
                              "were given; use a -t attack")
        x, y = check_inputs(x, y)
        eps_t = as_eps(eps, x)
        if x.shape[0] == 0:
            empty = torch.empty(0, dtype=torch.long, device=x.device)
            return AttackResult(x.clone(), empty, empty.bool(), empty, empty.clone())
        if torch.is_inference_mode_enabled():
            raise AttackError("attacks need input gradients; call the attack outside torch.inference_mode()")
        if isinstance(model, nn.parallel.DistributedDataParallel):
            # input gradients need no gradient sync, and a DDP forward can be a collective (buffer
            # broadcast): ranks that exit early after different numbers of steps would deadlock
            model = model.module
        with (eval_mode(model) if model_mode == "eval" else contextlib.nullcontext(model)), torch.enable_grad():
            kw = {} if targets is None else {"targets": targets}
            res = self.perturb_result(model, x, y, eps_t, generator=generator, early_exit=early_exit,
                                      predict=predict, **kw)
        res.x_adv = res.x_adv.detach()
        return res

    def perturb_result(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: torch.Tensor, *,
                       generator: torch.Generator | None, early_exit: bool, predict: bool) -> AttackResult:
        """The attack proper (inputs validated, eval mode, gradients on). The default runs
        :meth:`perturb` and, when ``predict``, one fp32 forward at ``x_adv``; attacks that see their
        own logits (PGD) override it. Without ``predict`` only ``x_adv`` is meaningful."""
        x_adv = self.perturb(model, x, y, eps, generator=generator, early_exit=early_exit)
        n = x.shape[0]
        if not predict:
            none = torch.full((n,), NEVER, dtype=torch.long, device=x.device)
            return AttackResult(x_adv, none, none.bool(), none, none.clone())
        with torch.no_grad():
            pred = self.logits_fp32(model, x_adv).argmax(1)
        fooled = self.success(pred, y)
        step = torch.where(fooled, STEP_UNKNOWN, NEVER).long()
        return AttackResult(x_adv, pred, fooled, step, torch.full_like(step, NEVER), list(self._warnings()))

    def perturb(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: torch.Tensor, *,
                generator: torch.Generator | None, early_exit: bool) -> torch.Tensor:
        raise NotImplementedError

    def success(self, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(N,) bool: the attack succeeded given the predictions: misclassified (``y`` is the true
        label, targeted attacks included)."""
        return pred != y

    def _warnings(self) -> list[str]:
        return []

    # -- helpers for subclasses ------------------------------------------------------------------
    def logits(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``model(x)`` under the configured precision; half-precision logits come back as fp32."""
        _tally(x)
        if self._precision == "fp32":
            z = model(x)
        else:
            with torch.autocast(device_type=x.device.type, dtype=_AMP_DTYPES[self._precision]):
                z = model(x)
        if z.dtype in (torch.float16, torch.bfloat16):
            z = z.float()
        return z

    def logits_fp32(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``model(x)`` at the model's own dtype with autocast off (an autocast the caller entered
        included): the precision that confirms success under bf16 / fp16."""
        _tally(x)
        with torch.autocast(device_type=x.device.type, enabled=False):
            z = model(x)
        return z.float() if z.dtype in (torch.float16, torch.bfloat16) else z

    def __repr__(self) -> str:
        keys = [k for k in vars(self) if not k.startswith("_") and k != "family"] + ["precision"]
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in keys)
        return f"{type(self).__name__}({args})"


def check_inputs(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a batch: float ``x`` of shape (N, ...) with values in [0, 1] and (N,) integer ``y``."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 2:
        raise AttackError("x must be a float tensor of shape (N, ...) with pixels in [0, 1]; "
                          "convert uint8 images with x.float() / 255")
    if not isinstance(y, torch.Tensor) or y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise AttackError("y must be an int64 tensor of the true labels; "
                          "pass torch.as_tensor(y, dtype=torch.long)")
    if y.shape != (x.shape[0],):
        raise AttackError(f"y has shape {tuple(y.shape)} but x holds {x.shape[0]} samples; pass one label per sample")
    if x.shape[0]:
        lo, hi = torch.aminmax(x.detach())
        if not (bool(lo >= 0) and bool(hi <= 1)):
            raise AttackError(f"x must lie in [0, 1] (got min {float(lo):g}, max {float(hi):g}); "
                              "feed unnormalized images and normalize inside the model")
    return x.detach(), y.to(device=x.device, dtype=torch.long)


# -- geometry shared by the gradient attacks ----------------------------------------------------------
def noise(kind: str, shape: tuple[int, ...], x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Uniform [0, 1) or standard normal noise of ``shape`` in ``x``'s dtype, drawn with ``generator``
    on the generator's own device (so a CPU generator also drives a GPU attack), then moved to ``x``.
    Noise shaped like ``x`` gets ``x``'s exact memory layout (channels_last, 1-channel images
    included), so every later step runs in the layout the caller chose; the values are the same."""
    dev = generator.device if generator is not None else x.device
    fn = torch.rand if kind == "uniform" else torch.randn
    out = fn(shape, generator=generator, device=dev, dtype=x.dtype)
    if tuple(shape) == tuple(x.shape) and out.stride() != x.stride():
        return torch.empty_like(x).copy_(out)
    return out.to(x.device)


def random_start(x: torch.Tensor, eps: torch.Tensor, norm: str, generator: torch.Generator | None) -> torch.Tensor:
    """A uniform random point inside each sample's own ball, clamped to [0, 1].

    L-inf: ``x + U(-eps_i, eps_i)`` per coordinate. L2: uniform in the L2 ball of radius ``eps_i``
    (Gaussian direction, radius ``eps_i * U^(1/d)``). A sample with ``eps_i = 0`` stays exactly ``x_i``."""
    if norm == "linf":
        delta = (2 * noise("uniform", x.shape, x, generator) - 1) * eps
    else:
        z = noise("normal", x.shape, x, generator)
        u = noise("uniform", (x.shape[0],), x, generator)
        r = eps.reshape(-1) * u.pow(1.0 / z[0].numel())
        delta = z * _batch_view(r / _l2(z).clamp_min(torch.finfo(z.dtype).tiny), x)
    return _add_like(x, delta).clamp_(0, 1)


def _add_like(x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``x + delta`` in ``x``'s exact memory layout (elementwise ops may pick another one when the
    strides are ambiguous, e.g. channels_last 1-channel images)."""
    return torch.add(x, delta, out=torch.empty_like(x))


def _l2(t: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(t.flatten(1), dim=1)


def project(x_adv: torch.Tensor, x: torch.Tensor, eps: torch.Tensor, norm: str) -> torch.Tensor:
    """Project ``x_adv`` onto each sample's ball around ``x``, then clamp to [0, 1]."""
    delta = x_adv - x
    if norm == "linf":
        delta = torch.minimum(torch.maximum(delta, -eps), eps)
    else:
        n = _batch_view(_l2(delta), x)
        factor = torch.where(n > eps, eps / n.clamp_min(torch.finfo(n.dtype).tiny), torch.ones_like(n))
        delta = delta * factor
    return _add_like(x, delta).clamp_(0, 1)


def ascent_step(x_adv: torch.Tensor, grad: torch.Tensor, step: torch.Tensor, norm: str) -> torch.Tensor:
    """One steepest-ascent step: ``step_i * sign(g)`` (L-inf) or ``step_i * g / ||g||_2`` (L2; a
    zero gradient gives a zero step)."""
    if norm == "linf":
        return x_adv + step * grad.sign()
    n = _batch_view(_l2(grad), grad)
    return x_adv + step * torch.where(n > 0, grad / n.clamp_min(torch.finfo(n.dtype).tiny), torch.zeros_like(grad))


def check_choice(value: str, choices: tuple[str, ...], what: str) -> str:
    v = str(value).lower()
    if v not in choices:
        raise AttackError(f"unknown {what} '{value}'; choose one of: {', '.join(choices)}")
    return v
