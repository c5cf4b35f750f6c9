"""Certified L2 robustness per class by randomized smoothing (Cohen, Rosenfeld & Kolter, ICML 2019).

    rep = robfair.certify(model, dataset, sigma=0.25, n0=100, n=100_000, alpha=0.001)
    rep.table()                 # per class: certified accuracy at each radius [Wilson 95%], abstain rate, radii
    rep.report_at(0.25)         # a GroupReport: clean_acc = smoothed accuracy, rob_acc = certified accuracy at r
    rep.outcomes()              # per sample: prediction, p_A lower bound, certified radius

The smoothed classifier is g(x) = argmax_c P[f(x + e) = c], e ~ N(0, sigma^2 I). CERTIFY (the paper's
Algorithm, as in the official ``code/core.py`` of locuslab/smoothing, commit bdfa2280bc07):
n0 noise draws pick the top class c_A; n fresh draws count how often f returns c_A; the one-sided
Clopper-Pearson (1 - alpha) lower bound p_A of that proportion gives the radius sigma * Phi^-1(p_A),
and the sample is abstained when p_A <= 1/2. With probability >= 1 - alpha per sample, g(x') = c_A for
every ||x' - x||_2 < radius. PREDICT (hypothesis test on the top two counts) is :func:`predict`.

Noise is drawn on the model's device in batches of ``batch_size`` forwards; short draws of several
samples share one forward. Every sample's noise comes from its own generator, seeded from (seed,
dataset index, pass), so a sample's result does not depend on which other samples are certified,
and an interrupted run resumed from its checkpoint gives the same numbers as an uninterrupted one.
The noise is not clipped to [0, 1]: the certificate is for the smoothed classifier on R^d, as in the
paper; models must accept inputs outside the box (robfair models do).

Modules (mirroring :mod:`robfair.auditing`): :mod:`~robfair.certifying.smoothing` (the statistics, the noise
counter, PREDICT), :mod:`~robfair.certifying.run` (CERTIFY over a dataset: :func:`certify`, which is
``robfair.certify``), :mod:`~robfair.certifying.certify_report` (:class:`CertifyReport` and certify.json),
:mod:`~robfair.certifying.checks` (sanity warnings and the check against an L2 attack),
:mod:`~robfair.certifying.checkpointing` (the resumable state).
"""

from __future__ import annotations

from ..metrics.stats import cp_lower, cp_upper
from .certify_report import NOT_CERTIFIED, SCHEMA, CertifyReport, default_radii
from .checks import SoftSmoothed, attack_check, check_line, sanity_warnings
from .run import certify, select_indices
from .smoothing import ABSTAIN, MAX_DRAWS, NoiseCounter, check_draws, max_radius, predict, radius_from_p

__all__ = ["ABSTAIN", "MAX_DRAWS", "NOT_CERTIFIED", "SCHEMA", "CertifyReport", "NoiseCounter", "SoftSmoothed",
           "attack_check", "certify", "check_draws", "check_line", "cp_lower", "cp_upper", "default_radii", "max_radius",
           "predict", "radius_from_p", "sanity_warnings", "select_indices"]
