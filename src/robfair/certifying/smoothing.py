"""The smoothed classifier's statistics and noise draws (Cohen et al. 2019): the certified radius of a
lower bound, the largest radius n draws can certify, the noise counter every draw goes through, and
PREDICT (:func:`predict`, the paper's hypothesis test on the top two counts)."""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from scipy.stats import norm
from torch import nn

from ..auditing.engine import autocast
from ..errors import ConfigError
from ..models.validate import check_model_output, guarded, nonfinite_error
from ..metrics.stats import check_alpha, cp_lower, mcnemar_exact
from ..seeding import make_generator, noise_seed
from ..utils import resolve_device

log = logging.getLogger(__name__)

#: the prediction of an abstained sample
ABSTAIN = -1
#: noise-draw passes (part of every sample's seed)
PASS_SELECT, PASS_ESTIMATE, PASS_PREDICT = 0, 1, 2

Progress = Callable[[str, int, int], None]


# ============================================================================== statistics
def radius_from_p(p_lower: Any, sigma: float) -> np.ndarray | float:
    """sigma * Phi^-1(p) where p > 1/2, else 0 (abstain)."""
    p = np.asarray(p_lower, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(p > 0.5, sigma * norm.ppf(np.clip(p, 0.5, 1.0)), 0.0)
    return float(out) if out.ndim == 0 else out


def max_radius(n: int, alpha: float, sigma: float) -> float:
    """The largest radius CERTIFY can return with n draws: every draw is c_A, so p_A = alpha^(1/n)."""
    return float(radius_from_p(cp_lower(n, n, alpha), sigma))


# ============================================================================== noise sampling
#: noise draws per sample (``n0`` and ``n`` each) that certify runs at most: a billion draws of one
#: sample are already a million forwards of 1000 (Cohen et al. certify with n = 100000)
MAX_DRAWS = 10**9


def check_draws(n0: Any, n: Any, batch_size: Any, *, cli: bool = False) -> None:
    """One-line ``ConfigError`` for noise-draw counts that are not positive integers or beyond
    :data:`MAX_DRAWS`, before anything runs (``cli``: the message names the options)."""
    for what, opt, v in (("n0", "--n0", n0), ("n", "--n", n), ("batch_size", "--batch-size", batch_size)):
        name = opt if cli else what
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}")
        if what != "batch_size" and v > MAX_DRAWS:
            given, fix = (f"{opt} {v}", f"{opt} {100 if what == 'n0' else 100000}") if cli else \
                (f"{what}={v}", f"{what}={100 if what == 'n0' else 100000}")
            raise ConfigError(f"{given} is beyond what certify can run: at most {MAX_DRAWS} noise draws per sample "
                              f"(already a million forwards of 1000 draws, hours per sample); pass e.g. {fix} "
                              "(Cohen et al. use n0 100, n 100000)")


def _chunks(num: int, batch_size: int) -> Iterator[int]:
    """Sizes of the forwards one sample's ``num`` draws are split into (never a list: ``num`` may be large)."""
    q, r = divmod(num, batch_size)
    for _ in range(q):
        yield batch_size
    if r:
        yield r


class NoiseCounter:
    """Counts of the base classifier's predictions under Gaussian noise, batched on the model's device.

    ``counts(x, keys, num, stage)`` returns an (m, K) int64 tensor: for each of the m inputs, how often
    ``model(x_i + sigma * e).argmax()`` returned each class over ``num`` draws. Draws of one sample are
    split into forwards of ``batch_size``; the short remainders of several samples share a forward.

    ``precision`` is the forwards' autocast (the audit's :func:`~robfair.auditing.engine.autocast`);
    ``channels_last``: the noisy batch is laid out channels_last (the noise is drawn as before, so
    its values are the same; the scaling writes it in the new layout)."""

    def __init__(self, model: nn.Module, sigma: float, num_classes: int, *, batch_size: int, seed: int,
                 device: torch.device, precision: str = "fp32", channels_last: bool = False) -> None:
        self.model, self.sigma, self.K = model, float(sigma), int(num_classes)
        self.batch_size, self.seed, self.device = int(batch_size), int(seed), device
        self.precision, self.channels_last = precision, bool(channels_last)
        self.forwards = 0
        self.draws = 0
        #: inputs since the last :meth:`refuse_nonfinite` whose logits were not all finite (a device
        #: counter: no synchronization per forward), and the inputs seen since then
        self.nonfinite: Any = 0
        self.seen = 0

    @torch.no_grad()
    def counts(self, x: torch.Tensor, keys: Sequence[int], num: int, stage: int) -> torch.Tensor:
        m, K, bs = x.shape[0], self.K, self.batch_size
        gens = [make_generator(self.device, noise_seed(self.seed, k, stage)) for k in keys]
        out = torch.zeros(m * K, dtype=torch.long, device=self.device)
        pending: list[tuple[int, int]] = []
        filled = 0
        for j in range(m):
            for size in _chunks(num, bs):
                if filled + size > bs:
                    self._forward(x, gens, pending, out)
                    pending, filled = [], 0
                pending.append((j, size))
                filled += size
        if pending:
            self._forward(x, gens, pending, out)
        return out.view(m, K)

    def _forward(self, x: torch.Tensor, gens: list[torch.Generator], batch: list[tuple[int, int]],
                 out: torch.Tensor) -> None:
        shape = tuple(x.shape[1:])
        if len(batch) == 1:
            j, size = batch[0]
            xin = torch.randn((size,) + shape, generator=gens[j], device=self.device, dtype=x.dtype)
            xin = self._scaled(xin).add_(x[j])
            owner = None
        else:
            xin = torch.cat([torch.randn((s,) + shape, generator=gens[j], device=self.device, dtype=x.dtype)
                             for j, s in batch])
            idx = torch.cat([torch.full((s,), j, dtype=torch.long) for j, s in batch]).to(self.device)
            xin = self._scaled(xin).add_(x[idx])
            owner = idx
        with autocast(xin.device, self.precision):
            z = self.model(xin)
        pred = self.note(z).argmax(1)
        flat = pred + batch[0][0] * self.K if owner is None else owner * self.K + pred
        out.index_add_(0, flat, torch.ones_like(flat))
        self.forwards += 1
        self.draws += int(xin.shape[0])

    def _scaled(self, e: torch.Tensor) -> torch.Tensor:
        """``sigma * e``, in place, or written channels_last (the same values: one multiply either way)."""
        if not self.channels_last or e.dim() != 4:
            return e.mul_(self.sigma)
        return torch.mul(e, self.sigma, out=torch.empty_like(e, memory_format=torch.channels_last))

    def note(self, z: torch.Tensor) -> torch.Tensor:
        """Count the rows of logits ``z`` that are not all finite; returns ``z``."""
        self.nonfinite = self.nonfinite + (~torch.isfinite(z).all(1)).sum()
        self.seen += int(z.shape[0])
        return z

    def refuse_nonfinite(self, where: str) -> None:
        """One :class:`~robfair.models.validate.NonFiniteLogits` line when a forward since the last
        call returned NaN / Inf logits (their argmax would count as a vote), with the count."""
        bad = int(self.nonfinite)
        if bad:
            raise nonfinite_error(self.model, bad, self.seen, f"inputs {where} (clean images and their Gaussian "
                                  f"noise at sigma {self.sigma:g}, which certify never clips to [0, 1]: the model "
                                  "must take inputs outside the box)")
        self.nonfinite, self.seen = 0, 0


def predict(model: nn.Module, x: torch.Tensor, sigma: float, *, n: int = 1000, alpha: float = 0.001,
            batch_size: int = 1000, seed: int = 0, keys: Sequence[int] | None = None,
            device: str | torch.device | None = "auto") -> np.ndarray:
    """PREDICT: the smoothed prediction of each input in ``x`` (N, C, H, W), or ``ABSTAIN`` (-1) where a
    two-sided binomial test of the top two counts does not reject equality at level ``alpha``; with
    probability >= 1 - alpha a returned class is g(x). ``keys`` seed each input's noise (default 0..N-1)."""
    check_alpha(alpha)
    check_draws(1, n, batch_size)
    dev = resolve_device(device)
    keys = list(range(x.shape[0])) if keys is None else [int(k) for k in keys]
    was = model.training
    model.eval()
    try:
        net = guarded(model.to(dev))
        out = check_model(net, x[:batch_size].to(dev), None)
        counter = NoiseCounter(net, sigma, out, batch_size=batch_size, seed=seed, device=dev)
        c = counter.counts(x.to(dev), keys, n, PASS_PREDICT).cpu().numpy()
        counter.refuse_nonfinite("of PREDICT")
    finally:
        model.train(was)
    top = np.argsort(-c, axis=1, kind="stable")[:, :2]
    res = np.full(x.shape[0], ABSTAIN, dtype=np.int64)
    for i in range(x.shape[0]):
        c1, c2 = int(c[i, top[i, 0]]), int(c[i, top[i, 1]])
        if c1 + c2 > 0 and mcnemar_exact(c1, c2) <= alpha:  # the two-sided exact binomial test at 1/2
            res[i] = top[i, 0]
    return res


def check_model(model: nn.Module, x: torch.Tensor, num_classes: int | None, precision: str = "fp32") -> int:
    """The model takes these images and returns one finite logit per class of the dataset (any
    K >= 2 for ``num_classes`` None), under ``precision``; returns K (one-line ModelError otherwise)."""
    with autocast(x.device, precision):
        z = check_model_output(model, x, num_classes, where="clean images, the first to certify", precision=precision)
    return int(z.shape[1])


def positive(v: Any, what: str) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number > 0, got {v!r}; pass e.g. 0.25") from None
    if not math.isfinite(f) or f <= 0:
        raise ConfigError(f"{what} must be a finite number > 0, got {v!r}; pass e.g. 0.25")
    return f
