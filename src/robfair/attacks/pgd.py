"""PGD (Madry et al. 2018) and FGSM / RS-FGSM, L-inf or L2, CE or CW loss, restarts, targeted.

Evaluation semantics (``keep="first-success"``, the default)
    Every iterate is checked, the random start included. A sample that is misclassified by some
    iterate (predicted == target when targeted) is *fooled*, and the returned ``x_adv`` is its
    **first** fooling iterate, frozen. A sample never fooled gets its final iterate. With restarts,
    the first restart that fools a sample wins, and a sample no restart fools gets the final iterate
    of the restart with the highest loss. Success is judged on the logits the attack computes
    itself: :meth:`~robfair.attacks.Attack.run` returns them as ``adv_pred`` with the step and
    restart of first success (no second forward). Under ``bf16`` / ``fp16`` a success is confirmed
    in fp32 before it counts, and the last iterate is checked in fp32.

    The check at iterate ``t`` reuses the logits of the forward pass that computes the gradient at
    ``t``; only the last iterate needs one extra forward. PGD-k therefore costs k forward+input-grad
    passes plus one forward.

    ``early_exit=True`` removes fooled samples from the active batch (they are indexed out, never
    computed again), so later steps get cheaper. The per-sample computation of the samples still
    active is the same with and without it (every sample's gradient depends only on itself in eval
    mode, and the random starts are always drawn for the full batch), so the outcome per sample is
    identical to ``early_exit=False`` with the same generator seed.

Training semantics (``keep="last"``)
    Returns the plain last iterate (the usual adversarial-training input) and skips the success
    checks and the final forward. With restarts, per sample the restart whose last iterate fools
    (else the highest loss). ``early_exit`` is refused: it would freeze samples at their first success.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import AttackError
from .base import (LOSSES, NEVER, NORMS, Attack, AttackResult, as_eps, ascent_step, check_choice,
                   per_sample_loss, project, random_start)

KEEPS = ("first-success", "last")


class PGD(Attack):
    """PGD: k steps of projected steepest ascent from a random start in each sample's own ball.

    Args:
        steps: number of gradient steps k (0 returns the start).
        norm: ``"linf"`` (sign steps) or ``"l2"`` (normalized-gradient steps).
        step: absolute step size, a float or an (N,) tensor; ``None`` (default) uses
            ``rel_step * eps_i`` per sample.
        rel_step: step relative to each sample's epsilon; 0.25 gives the standard 2/255 at 8/255.
        random_start: start uniformly inside each sample's ball (L-inf: U(-eps_i, eps_i) per pixel;
            L2: uniform in the L2 ball of radius eps_i); otherwise start at x.
        restarts: independent random starts; per sample the first that fools wins, else the
            highest final loss.
        loss: ``"ce"`` (cross-entropy) or ``"cw"`` (Carlini-Wagner margin).
        targeted: ``y`` holds target classes; success means predicted == target.
        temperature: logits are divided by it inside the loss (temperature-scaled PGD).
        keep: ``"first-success"`` (evaluation, default; alias ``"best"``) or ``"last"`` (training);
            see the module doc.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` autocast for the forward passes.
    """

    family = "pgd"

    def __init__(self, steps: int = 10, *, norm: str = "linf", step: float | torch.Tensor | None = None,
                 rel_step: float = 0.25, random_start: bool = True, restarts: int = 1, loss: str = "ce",
                 targeted: bool = False, temperature: float = 1.0, keep: str = "first-success",
                 precision: str = "fp32", name: str | None = None) -> None:
        super().__init__(precision=precision)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise AttackError(f"PGD steps must be an integer >= 0, got {steps!r}; use e.g. steps=10")
        if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 1:
            raise AttackError(f"PGD restarts must be an integer >= 1, got {restarts!r}; use e.g. restarts=5")
        if not rel_step > 0:
            raise AttackError(f"rel_step must be > 0, got {rel_step!r}; use e.g. 0.25 (2/255 at 8/255)")
        if not temperature > 0:
            raise AttackError(f"temperature must be > 0, got {temperature!r}; use 1.0 for plain logits")
        if step is not None and not isinstance(step, torch.Tensor) and not float(step) >= 0:
            raise AttackError(f"step must be >= 0, got {step!r}; use e.g. 2/255 or leave it None for eps/4")
        self.steps = steps
        self.norm = check_choice(norm, NORMS, "norm")
        self.step = step
        self.rel_step = float(rel_step)
        self.random_start = bool(random_start)
        self.restarts = restarts
        self.loss = check_choice(loss, LOSSES, "loss")
        self.targeted = bool(targeted)
        self.temperature = float(temperature)
        self.keep = check_choice("first-success" if keep == "best" else keep, KEEPS, "keep")
        self.name = name or self._default_name()

    def _default_name(self) -> str:
        parts = [f"{self.family}{self.steps}" if self.family == "pgd" else self.family]
        if self.norm == "l2":
            parts.append("l2")
        if self.loss == "cw":
            parts.append("cw")
        if self.restarts > 1:
            parts.append(f"r{self.restarts}")
        if self.targeted:
            parts.append("t")
        return "-".join(parts)

    def step_sizes(self, eps: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Per-sample step sizes shaped like ``eps``: ``step`` if given, else ``rel_step * eps_i``."""
        if self.step is None:
            return eps * self.rel_step
        return as_eps(self.step, x, what="step")

    # -- the attack ----------------------------------------------------------------------------
    def perturb(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: torch.Tensor, *,
                generator: torch.Generator | None, early_exit: bool) -> torch.Tensor:
        return self.perturb_result(model, x, y, eps, generator=generator, early_exit=early_exit, predict=False).x_adv

    def perturb_result(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: torch.Tensor, *,
                       generator: torch.Generator | None, early_exit: bool, predict: bool) -> AttackResult:
        if early_exit and self.keep == "last":
            raise AttackError("early_exit freezes samples at their first success, which keep='last' does not want; "
                              "use early_exit=False for training or keep='first-success' for evaluation")
        step = self.step_sizes(eps, x)
        n = x.shape[0]
        st = _State(x, n)
        for r in range(self.restarts):
            # Always drawn for the full batch: the same starts (and generator state afterwards)
            # whichever samples are still active.
            start = random_start(x, eps, self.norm, generator) if self.random_start else x
            idx = None
            if early_exit:
                idx = (~st.done).nonzero().squeeze(1)
                if idx.numel() == 0:
                    continue
            self._restart(model, x, y, eps, step, start, idx, st, r)
        if predict and self.keep == "last" and self.restarts == 1:  # training path asked for predictions
            with torch.no_grad():
                st.pred.copy_(self.logits_fp32(model, st.out).argmax(1))
            fooled = self.success(st.pred, y)
            st.done.copy_(fooled)
            st.step.copy_(torch.where(fooled, self.steps, NEVER))
            st.run.copy_(torch.where(fooled, 0, NEVER))
        return AttackResult(st.out, st.pred, st.done, st.step, st.run)

    def _confirmed(self, model: nn.Module, xa: torch.Tensor, y: torch.Tensor, z: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """(fooled, pred) from the attack's logits ``z`` at ``xa``; under bf16 / fp16 the samples
        that look fooled are re-checked in fp32 and count only if fp32 agrees."""
        pred = z.argmax(1)
        fooled = self.success(pred, y)
        if self.precision != "fp32" and bool(fooled.any()):
            cand = fooled.nonzero().squeeze(1)
            with torch.no_grad():
                p32 = self.logits_fp32(model, xa[cand]).argmax(1)
            pred = pred.clone()
            pred[cand] = p32
            fooled = fooled.clone()
            fooled[cand] = self.success(p32, y[cand])
        return fooled, pred

    def _restart(self, model, x, y, eps, step, xa, idx, st: "_State", r: int) -> None:
        """One restart over the active samples ``idx`` (None: all), updating the state ``st``."""
        track = self.keep == "first-success"
        if idx is not None:
            x, y, eps, step, xa = x[idx], y[idx], eps[idx], step[idx], xa[idx]
        xa = xa.detach()
        for t in range(self.steps):
            xa.requires_grad_(True)
            z = self.logits(model, xa)
            loss = per_sample_loss(z, y, self.loss, targeted=self.targeted, temperature=self.temperature)
            (grad,) = torch.autograd.grad(loss.sum(), xa)
            xa = xa.detach()
            if track:
                fooled, pred = self._confirmed(model, xa, y, z.detach())
                if idx is None:
                    st.freeze(None, fooled, xa, pred, t, r)
                elif bool(fooled.any()):  # early exit: freeze the fooled samples, then drop them
                    st.freeze(idx, fooled, xa, pred, t, r)
                    live = ~fooled
                    idx, x, y, eps, step, xa, grad = (v[live] for v in (idx, x, y, eps, step, xa, grad))
                    if idx.numel() == 0:
                        return
            xa = project(ascent_step(xa, grad, step, self.norm), x, eps, self.norm)
        if not track and self.restarts == 1:  # training: the plain last iterate, no extra forward
            st.out.copy_(xa)
            return
        with torch.no_grad():
            z = self.logits(model, xa) if self.precision == "fp32" else self.logits_fp32(model, xa)
            loss = per_sample_loss(z, y, self.loss, targeted=self.targeted, temperature=self.temperature)
        pred = z.argmax(1)
        fooled = self.success(pred, y)
        prev_done = st.done if idx is None else st.done[idx]
        st.freeze(idx, fooled, xa, pred, self.steps, r)
        prev_best = st.best if idx is None else st.best[idx]
        better = ~fooled & ~prev_done & ((loss.double() > prev_best) | (r == 0))
        _put(st.out, idx, better, xa)
        _put(st.pred, idx, better, pred)
        _put(st.best, idx, better, loss.double())


class _State:
    """Per-sample results of a PGD run: the returned point, its prediction, whether (and at which
    step and restart) it was first fooled, and the best loss of a point not fooled."""

    def __init__(self, x: torch.Tensor, n: int) -> None:
        dev = x.device
        self.out = x.clone()
        self.pred = torch.full((n,), NEVER, dtype=torch.long, device=dev)
        self.done = torch.zeros(n, dtype=torch.bool, device=dev)  # fooled: out holds the frozen iterate
        self.step = torch.full((n,), NEVER, dtype=torch.long, device=dev)
        self.run = torch.full((n,), NEVER, dtype=torch.long, device=dev)
        self.best = torch.full((n,), float("-inf"), dtype=torch.float64, device=dev)  # loss of out (not fooled)

    def freeze(self, idx: torch.Tensor | None, fooled: torch.Tensor, xa: torch.Tensor, pred: torch.Tensor,
               t: int, r: int) -> None:
        """Record the first fooling iterate (step ``t`` of restart ``r``) of samples not fooled before."""
        new = fooled & ~(self.done if idx is None else self.done[idx])
        _put(self.out, idx, new, xa)
        _put(self.pred, idx, new, pred)
        _put(self.step, idx, new, torch.full_like(pred, t))
        _put(self.run, idx, new, torch.full_like(pred, r))
        _put(self.done, idx, new, new)


def _put(dst: torch.Tensor, idx: torch.Tensor | None, mask: torch.Tensor, src: torch.Tensor) -> None:
    """``dst[idx][mask] = src[mask]`` (``idx`` None: the full batch)."""
    if idx is None:
        if dst.device.type == "cpu":  # touch only the selected rows
            dst[mask] = src[mask]
        else:
            _where_put(dst, mask, src)
    else:
        dst[idx[mask]] = src[mask]


def _where_put(dst: torch.Tensor, mask: torch.Tensor, src: torch.Tensor) -> None:
    """``dst[mask] = src[mask]`` without a device sync (no data-dependent shapes)."""
    dst.copy_(torch.where(mask.reshape((-1,) + (1,) * (dst.dim() - 1)), src, dst))


class FGSM(PGD):
    """FGSM (Goodfellow et al. 2015): one step of size eps along the gradient sign (L2: the
    normalized gradient). ``random_start=True`` gives RS-FGSM (Wong et al. 2020, "fast is better than
    free"): start U(-eps_i, eps_i), step 1.25 * eps_i, projected back to the ball."""

    def __init__(self, *, norm: str = "linf", random_start: bool = False, step: float | torch.Tensor | None = None,
                 rel_step: float | None = None, loss: str = "ce", targeted: bool = False, temperature: float = 1.0,
                 keep: str = "first-success", precision: str = "fp32", name: str | None = None) -> None:
        self.family = "rs-fgsm" if random_start else "fgsm"
        if rel_step is None:
            rel_step = 1.25 if random_start else 1.0
        super().__init__(1, norm=norm, step=step, rel_step=rel_step, random_start=random_start, restarts=1,
                         loss=loss, targeted=targeted, temperature=temperature, keep=keep, precision=precision,
                         name=name)
