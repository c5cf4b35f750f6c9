"""The one loss library of the training methods: every per-sample loss and every reduction lives here.

Per-sample losses return an (N,) tensor in float32 (computed in float32 even under autocast);
reductions turn per-sample values and optional per-sample weights into the batch loss. A method is
then the choice of an attack, a per-sample loss, weights and a reduction::

    kl = trades_kl(logits_nat, logits_adv)                       # KL(p(x) || p(x')) per sample
    ce = F.cross_entropy(logits_nat, y, reduction="none")
    loss = trades_loss(ce, kl, beta, w_nat=w[y], w_bndy=None)    # sum w CE / sum w + beta mean KL

=================== =============================================================================
``trades_kl``        ``sum_k p_k(x) (log p_k(x) - log p_k(x'))`` (TRADES, FRL, CFA, DAFA, WAT, MART)
``weighted_mean``    ``sum w v / sum w`` (``weighted-mean``) or ``sum w v / N`` (``mean``)
``trades_loss``      CE term + beta * KL term under the normalizations ``ratio``, ``mean-k``, ``joint``
``focal_loss``       ``(1 - p_y)^gamma CE`` (Lin et al. 2017)
``ldam_loss``        ``CE(s (z - m_y e_y), y)`` (Cao et al. 2019); ``ldam_margins`` gives ``m``
``logit_adjusted_ce`` ``CE(z + offsets, y)`` (Menon et al. 2021)
``mart_loss``        MART's boosted CE + KL weighted by ``1 - p_y(x)`` (Wang et al. 2020)
``class_balanced_weights`` Cui et al.'s inverse effective numbers
=================== =============================================================================
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

Normalization = Literal["ratio", "mean-k", "joint"]

__all__ = ["trades_kl", "weighted_mean", "trades_loss", "focal_loss", "ldam_margins", "ldam_loss",
           "logit_adjusted_ce", "mart_loss", "class_balanced_weights", "per_class_sums", "Normalization"]


# ================================================================================ per-sample losses
def trades_kl(logits_nat: torch.Tensor, logits_adv: torch.Tensor) -> torch.Tensor:
    """(N,) ``KL(softmax f(x) || softmax f(x'))`` summed over classes, in float32 (TRADES' boundary term)."""
    log_p_nat = F.log_softmax(logits_nat.float(), dim=1)
    log_p_adv = F.log_softmax(logits_adv.float(), dim=1)
    return (log_p_nat.exp() * (log_p_nat - log_p_adv)).sum(dim=1)


def focal_loss(logits: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
    """(N,) focal loss ``(1 - p_y)^gamma * CE`` (``gamma = 0``: CE, bit for bit)."""
    ce = F.cross_entropy(logits.float(), y, reduction="none")
    if gamma == 0:
        return ce
    # clamped away from 0 so that gamma < 1 has a finite gradient when p_y rounds to 1
    return (1 - torch.exp(-ce)).clamp_min(torch.finfo(ce.dtype).tiny) ** gamma * ce


def ldam_margins(counts: torch.Tensor, max_margin: float) -> torch.Tensor:
    """LDAM margins ``m_k = C / n_k^(1/4)`` with C such that the rarest class gets ``max_margin``."""
    m = counts.double().clamp_min(1) ** -0.25
    return (m * (max_margin / m.max())).float()


def ldam_loss(logits: torch.Tensor, y: torch.Tensor, margins: torch.Tensor, s: float = 1.0) -> torch.Tensor:
    """(N,) LDAM loss ``CE(s * (z - m_y e_y), y)``."""
    z = logits.float()
    m = margins.to(z.device)
    z = z - m[None, :] * F.one_hot(y, z.shape[1]).to(z.dtype)
    return F.cross_entropy(s * z, y, reduction="none")


def logit_adjusted_ce(logits: torch.Tensor, y: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """(N,) ``CE(z + offsets, y)`` (offsets ``tau * log prior`` give Menon et al.'s logit adjustment)."""
    return F.cross_entropy(logits.float() + offsets.to(logits.device)[None, :], y, reduction="none")


def class_balanced_weights(counts: torch.Tensor, beta: float) -> torch.Tensor:
    """Cui et al.'s weights ``(1 - beta) / (1 - beta^n_k)`` (inverse effective number), mean 1 over
    classes; ``beta = 0`` gives all ones. An empty class is counted as one sample."""
    n = counts.double().clamp_min(1)
    w = (1 - beta) / (1 - beta ** n)
    return (w / w.mean()).float()


# ================================================================================ reductions
def weighted_mean(values: torch.Tensor, weights: torch.Tensor | None,
                  reduction: Literal["weighted-mean", "mean"] = "weighted-mean") -> torch.Tensor:
    """``sum_i w_i v_i / sum_i w_i`` (``weighted-mean``) or ``sum_i w_i v_i / N`` (``mean``); the plain
    mean without weights; 0 (with a graph) when every weight is 0."""
    if weights is None:
        return values.mean()
    weights = weights.to(values.dtype)
    if reduction == "mean":
        return (weights * values).mean()
    den = weights.sum()
    return (weights * values).sum() / torch.where(den > 0, den, torch.ones_like(den))


def trades_loss(ce: torch.Tensor, kl: torch.Tensor, beta: float | torch.Tensor, *,
                w_nat: torch.Tensor | None = None, w_bndy: torch.Tensor | None = None,
                normalization: Normalization = "ratio", num_classes: int | None = None) -> torch.Tensor:
    """TRADES' batch loss from per-sample CE and KL and optional per-sample weights (None: uniform).

    ``ratio``  (TRADES, FRL HEAD): ``sum w_n CE / sum w_n + beta * sum w_b KL / sum w_b``
    ``mean-k``:                    ``mean(K w_n CE) + beta * mean(K w_b KL)``
    ``joint``  (FRL 2021 code):    ``sum(w_n CE + beta w_b KL) / sum(w_n + w_b)``

    A missing weight is uniform ``1/K`` for ``mean-k`` and ``joint`` (``num_classes`` needed there), so
    without weights ``ratio`` and ``mean-k`` are plain TRADES and ``joint`` is half of it. ``beta`` may be
    a per-sample (N,) tensor (``ratio`` only is then meaningful as ``sum w_n CE / sum w_n + mean(beta KL)``
    when ``w_bndy`` is None)."""
    if normalization == "ratio":
        return weighted_mean(ce, w_nat) + _beta_term(kl, beta, w_bndy)
    if num_classes is None:
        raise ValueError(f"trades_loss normalization {normalization!r} needs num_classes")
    k = num_classes
    wn = w_nat.to(ce.dtype) if w_nat is not None else torch.full_like(ce, 1.0 / k)
    wb = w_bndy.to(kl.dtype) if w_bndy is not None else torch.full_like(kl, 1.0 / k)
    if normalization == "mean-k":
        return (k * wn * ce).mean() + beta * (k * wb * kl).mean()
    if normalization == "joint":
        return (wn * ce + beta * wb * kl).sum() / (wn + wb).sum()
    raise ValueError(f"unknown TRADES normalization {normalization!r}; choose ratio, mean-k or joint")


def _beta_term(kl: torch.Tensor, beta: float | torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    if isinstance(beta, torch.Tensor) and beta.dim() > 0:
        return weighted_mean(beta * kl, w)
    return beta * weighted_mean(kl, w)


def mart_loss(logits_nat: torch.Tensor, logits_adv: torch.Tensor, y: torch.Tensor, beta: float,
              weights: torch.Tensor | None = None) -> torch.Tensor:
    """The MART loss of one batch from clean and adversarial logits (float32 even under autocast), with
    the official code's 1.0001 / 1e-12 / 1.0000001 guards; ``weights``: optional (N,) per-sample
    weights (weighted means)::

        BCE_i = -log p_y(x'_i) - log(1 - max_{k != y} p_k(x'_i))
        loss  = mean_i BCE_i + beta * mean_i KL_i * (1 - p_y(x_i))
    """
    logits_nat, logits_adv = logits_nat.float(), logits_adv.float()
    p_adv = torch.softmax(logits_adv, dim=1)
    p_other = p_adv.masked_fill(F.one_hot(y, p_adv.shape[1]).bool(), -1.0).amax(dim=1)
    bce = F.cross_entropy(logits_adv, y, reduction="none") - torch.log(1.0001 - p_other + 1e-12)
    p_y = torch.softmax(logits_nat, dim=1).gather(1, y[:, None]).squeeze(1)
    reg = trades_kl(logits_nat, logits_adv) * (1.0000001 - p_y)
    return weighted_mean(bce, weights) + beta * weighted_mean(reg, weights)


# ================================================================================ per-class bookkeeping
def per_class_sums(values: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(K,) sum of ``values`` over the samples of each class (float64, on ``values``' device)."""
    out = torch.zeros(num_classes, dtype=torch.float64, device=values.device)
    return out.index_add_(0, y.to(values.device), values.detach().double())
