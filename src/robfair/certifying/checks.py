"""What a certify result is checked against: sanity warnings (abstain rates, a model at chance level) and
an L2 attack on the smoothed classifier (a certificate an attack contradicts is a bug)."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import torch
from scipy.stats import binom
from torch import nn

from ..attacks import get_attack
from ..attacks.attack import noise
from ..errors import AttackError, DataError
from ..metrics import wilson
from ..seeding import make_generator, noise_seed
from ..utils import resolve_device
from .certify_report import CertifyReport
from .smoothing import ABSTAIN, max_radius, positive, predict

log = logging.getLogger(__name__)


def sanity_warnings(rep: CertifyReport) -> list[str]:
    """Checks a certificate run should pass: the smoothed classifier is not near chance, abstention is
    not the rule, and nothing is certified beyond the largest radius n draws allow."""
    out: list[str] = []
    if len(rep) == 0:
        return out
    K = len(rep.class_names)
    acc = float(rep.correct.mean())
    if rep.abstain.mean() > 0.5:
        out.append(f"the smoothed classifier abstains on {100 * rep.abstain.mean():.0f}% of samples at sigma "
                   f"{rep.sigma:g}: the base model is not robust to this noise; train with gaussian-aug at this sigma")
    elif acc <= 1.5 / K:
        out.append(f"the smoothed classifier is near chance ({100 * acc:.1f}% for {K} classes) at sigma {rep.sigma:g}; "
                   "the certified numbers say little: use a model trained with noise (gaussian-aug) or a smaller sigma")
    rmax = max_radius(rep.n, rep.alpha, rep.sigma)
    if (rep.radius > rmax * (1 + 1e-9)).any():
        out.append(f"radii above the largest certifiable radius {rmax:.4f} (bug)")
    return out


# ============================================================================== consistency with an attack
class SoftSmoothed(nn.Module):
    """log E_e[softmax(f(x + sigma e))], estimated with ``m`` fresh draws per call: a differentiable
    surrogate of the smoothed classifier to attack (Salman et al. 2019's SmoothAdv objective)."""

    def __init__(self, model: nn.Module, sigma: float, m: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.model, self.sigma, self.m, self.generator = model, float(sigma), int(m), generator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        e = noise("normal", (self.m,) + tuple(x.shape), x, self.generator)
        z = self.model((x.unsqueeze(0) + self.sigma * e).reshape((self.m * b,) + tuple(x.shape[1:])))
        p = torch.softmax(z.float(), dim=1).reshape(self.m, b, -1).mean(0)
        return p.clamp_min(1e-20).log()


def attack_check(model: nn.Module, dataset, rep: CertifyReport, radius: float, *, attack: str = "pgd20-l2",
                 per_class: int = 20, noise_samples: int = 32, n_predict: int = 1000, alpha: float | None = None,
                 batch_size: int = 1000, seed: int = 0, device: str | torch.device | None = "auto",
                 level: float = 0.001) -> dict[str, Any]:
    """Sanity check of the certificates against an L2 attack on the *smoothed* classifier at ``radius``.

    On up to ``per_class`` certified samples of each class (the first in order): L2 PGD on
    :class:`SoftSmoothed` (``noise_samples`` draws per step), then PREDICT (``n_predict`` draws) at the
    adversarial point. A sample certified at ``radius`` whose attacked smoothed prediction is a definite
    wrong class contradicts its certificate; a few are expected (each certificate and each PREDICT fails
    with probability alpha). Warnings (appended to ``rep.warnings``) when the contradictions exceed
    what that allows (binomial tail below ``level``), or when a class's certified accuracy is above
    its empirical robust accuracy beyond their Wilson intervals. Returns the numbers per class."""
    radius = positive(radius, "check radius")
    atk = get_attack(attack)
    if getattr(atk, "norm", None) != "l2":
        raise AttackError(f"the certificate check needs an L2 attack, got '{attack}'; pass e.g. pgd20-l2")
    alpha = rep.alpha if alpha is None else float(alpha)
    dev = resolve_device(device)
    pos_of = {int(k): i for i, k in enumerate(rep.index)}
    chosen: list[int] = []
    for c in range(len(rep.class_names)):
        members = np.flatnonzero(rep.y == c)
        chosen.extend(members[:per_class].tolist())
    chosen_a = np.asarray(sorted(chosen), dtype=np.int64)
    if chosen_a.size == 0:
        raise DataError("no certified samples to check; run certify first")
    ds_idx = rep.index[chosen_a]
    assert all(int(k) in pos_of for k in ds_idx)
    was = model.training
    model.eval()
    model = model.to(dev)
    gen = make_generator(dev, noise_seed(seed, 0, 3))
    soft = SoftSmoothed(model, rep.sigma, noise_samples, gen)
    adv_pred = np.empty(chosen_a.size, dtype=np.int64)
    step = max(1, batch_size // noise_samples)
    t0 = time.perf_counter()
    try:
        for s in range(0, chosen_a.size, step):
            idx = ds_idx[s:s + step]
            x = dataset.images(idx).to(dev)
            y = torch.as_tensor(rep.y[chosen_a[s:s + step]], device=dev)
            x_adv = atk(soft, x, y, radius, generator=gen, early_exit=False)
            adv_pred[s:s + step] = predict(model, x_adv, rep.sigma, n=n_predict, alpha=alpha, batch_size=batch_size,
                                           seed=seed + 1, keys=idx.tolist(), device=dev)
    finally:
        model.train(was)
    y_c = rep.y[chosen_a]
    cert = rep.certified(radius)[chosen_a]
    robust = adv_pred == y_c
    contra = cert & (adv_pred != ABSTAIN) & (adv_pred != y_c)
    p_fail = min(1.0, 2 * alpha)
    warnings: list[str] = []
    n_cert, n_contra = int(cert.sum()), int(contra.sum())
    tail = float(binom.sf(n_contra - 1, n_cert, p_fail)) if n_contra else 1.0
    if n_contra and tail < level:
        warnings.append(f"certificate check at radius {radius:g}: {attack} on the smoothed classifier found a wrong "
                        f"prediction for {n_contra} of {n_cert} samples certified at that radius (expected at most "
                        f"about {n_cert * p_fail:.1f}); the certificates or the model's noise handling are suspect")
    rows = []
    for c, name in enumerate(rep.class_names):
        m = y_c == c
        k = int(m.sum())
        lo_c, _ = wilson(int(cert[m].sum()), k)
        _, hi_r = wilson(int(robust[m].sum()), k)
        row = {"class": name, "n": k, "certified": float(cert[m].mean()) if k else math.nan,
               "empirical_robust": float(robust[m].mean()) if k else math.nan, "contradictions": int(contra[m].sum())}
        rows.append(row)
        if k and lo_c > hi_r:
            warnings.append(f"certificate check at radius {radius:g}: class {name} certified accuracy "
                            f"{100 * row['certified']:.1f}% exceeds its robust accuracy under {attack} on the smoothed "
                            f"classifier ({100 * row['empirical_robust']:.1f}%) beyond sampling error")
    result = {"radius": radius, "attack": attack, "noise_samples": int(noise_samples), "n_predict": int(n_predict),
              "n": int(chosen_a.size), "certified": float(cert.mean()), "empirical_robust": float(robust.mean()),
              "n_certified": n_cert, "n_robust": int(robust.sum()), "contradictions": n_contra,
              "certified_abstained": int((cert & (adv_pred == ABSTAIN)).sum()),
              "contradiction_tail_p": tail, "per_class": rows, "warnings": warnings,
              "seconds": round(time.perf_counter() - t0, 3)}
    rep.warnings.extend(warnings)
    rep.meta.setdefault("attack_check", []).append({k: v for k, v in result.items() if k != "warnings"})
    for w in warnings:
        log.warning(w)
    return result


def check_line(chk: dict[str, Any]) -> str:
    """One sentence on an :func:`attack_check` result: certified against empirical robust accuracy on
    the same samples, the relation that holds (<, = or >) and what it means.

    Certified accuracy is a lower bound on the smoothed classifier's robust accuracy (each certificate
    fails with probability alpha) and the attack's is an upper bound (an attack can miss), so
    certified <= empirical is the expected order. Certified above empirical means more certified
    samples were called not robust at the attacked point than uncertified ones robust: PREDICT there
    returned a definite wrong class (a contradicted certificate) or abstained, its ``n_predict``
    fresh draws unable to separate the top two classes. The certificate does not rule an abstention
    out (near the edge of the certified ball the top class may be barely ahead), so abstentions are a
    limit of PREDICT's draws, not evidence against the certificate; contradictions are, beyond the
    rate the failure probabilities allow (the check's warning)."""
    n, k_cert, k_rob = int(chk["n"]), int(chk["n_certified"]), int(chk["n_robust"])
    contra, abst = int(chk["contradictions"]), int(chk["certified_abstained"])
    rel, meaning = ("<", "the expected order: a certificate is a lower bound on robust accuracy, an attack an upper "
                    "one") if k_cert < k_rob else ("=", "the lower and the upper bound meet") if k_cert == k_rob else \
        (">", "more certified samples were not robust at the attacked point than uncertified ones were robust: "
              "contradicted certificates (a definite wrong class) or PREDICT abstaining there (its "
              f"{chk['n_predict']} draws could not separate the top two classes: a limit of PREDICT's draws, "
              "not a contradiction)")
    return (f"check at radius {chk['radius']:g} ({chk['attack']} on the smoothed classifier, {n} samples): "
            f"certified {100 * k_cert / n:.1f}% ({k_cert}) {rel} empirical robust {100 * k_rob / n:.1f}% ({k_rob}), "
            f"{meaning}; {contra} contradicted certificates, {abst} certified samples where PREDICT abstained")
