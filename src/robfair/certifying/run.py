"""CERTIFY over a dataset: which samples (per class, every k-th), the loop over them with its checkpoint,
and the report; :func:`certify` is ``robfair.certify``."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from .. import __version__
from ..auditing.engine import autocast, evaluation_model
from ..errors import ConfigError, DataError, ModelError
from ..hardware import channels_last as to_channels_last
from ..hardware import check_precision, wants_channels_last
from ..metrics.stats import check_alpha, cp_lower
from ..utils import resolve_device
from .certify_report import CertifyReport, default_radii
from .checkpointing import CHECKPOINT_SCHEMA, fingerprint, load_state, save_state
from .checks import sanity_warnings
from .smoothing import (ABSTAIN, PASS_ESTIMATE, PASS_SELECT, NoiseCounter, Progress, check_draws, check_model,
                        positive, radius_from_p)

log = logging.getLogger(__name__)


# ============================================================================== CERTIFY over a dataset
def select_indices(dataset, *, per_class: int | None = None, skip: int = 1,
                   indices: Sequence[int] | None = None) -> np.ndarray:
    """The dataset indices to certify: ``indices`` as given, else every ``skip``-th sample, keeping the
    first ``per_class`` of each class (in dataset order) when set."""
    n = len(dataset)
    if indices is not None:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size == 0 or idx.min() < 0 or idx.max() >= n or np.unique(idx).size != idx.size:
            raise DataError(f"indices must be distinct sample numbers in [0, {n}); pass e.g. range(0, {n}, 10)")
        return idx
    if skip < 1:
        raise ConfigError(f"skip must be >= 1, got {skip}")
    idx = np.arange(0, n, skip, dtype=np.int64)
    if per_class is not None:
        if per_class < 1:
            raise ConfigError(f"per_class must be >= 1, got {per_class}")
        y = dataset.y.cpu().numpy()[idx]
        keep = np.zeros(idx.size, bool)
        for c in np.unique(y):
            keep[np.flatnonzero(y == c)[:per_class]] = True
        idx = idx[keep]
    return idx


def certify(
    model: nn.Module,
    dataset,
    sigma: float = 0.25,
    *,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int = 1000,
    radii: Sequence[float] | None = None,
    seed: int = 0,
    device: str | torch.device | None = "auto",
    indices: Sequence[int] | None = None,
    per_class: int | None = None,
    skip: int = 1,
    checkpoint: str | Path | None = None,
    checkpoint_every: float = 30.0,
    progress: Progress | None = None,
    precision: str = "fp32",
    channels_last: bool | None = None,
) -> CertifyReport:
    """CERTIFY every selected sample of ``dataset`` (see the module docstring).

    Parameters
    ----------
    model: maps images in [0, 1] (and their noisy versions) to logits.
    sigma: the noise level of the smoothed classifier (L2, in [0, 1] pixel units).
    n0, n: noise draws for selecting the top class and for estimating its probability.
    alpha: failure probability of each certificate.
    batch_size: noise draws per forward pass.
    radii: radii for the tables (default 0, sigma/2, sigma, 1.5 sigma, 2 sigma).
    indices / per_class / skip: which samples (see :func:`select_indices`); default all.
    checkpoint: a file holding per-sample progress (written atomically every ``checkpoint_every``
        seconds and on interruption); an existing one for the same model, data and settings is
        resumed, one for anything else is refused. It is left in place; delete it when done.
    progress: ``(stage, done, total)`` callback, called after each block of samples.
    precision / channels_last: as the audit runs the model (:func:`robfair.auditing.engine.evaluate`):
        bf16 / fp16 autocast only where the device runs it natively (the certificate is then the
        smoothed classifier's of the model at that precision, and ``meta["precision"]`` says so);
        channels_last None: on for models with 2-D convolutions (the noise and the counts are the
        same in fp32).
    """
    sigma = positive(sigma, "sigma")
    check_draws(n0, n, batch_size)
    check_alpha(alpha)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    radii_t = tuple(float(r) for r in radii) if radii else default_radii(sigma)
    if any(not math.isfinite(r) or r < 0 for r in radii_t):
        raise ConfigError(f"radii must be finite and >= 0, got {list(radii_t)}")
    if len(dataset) == 0:
        raise DataError("the dataset is empty; check the path and the split")
    dataset.validate()
    positions = select_indices(dataset, per_class=per_class, skip=skip, indices=indices)
    dev = resolve_device(device)
    precision = check_precision(precision, dev, what="precision")
    layout = wants_channels_last(model, channels_last)
    images = (lambda pos: to_channels_last(dataset.images(pos).to(dev))) if layout else \
        (lambda pos: dataset.images(pos).to(dev))  # noqa: E731
    K = dataset.num_classes

    # run as the audit runs it: eval mode on the device, channels_last where the policy says, its own dtype,
    # its forward's faults named as its own; its training mode restored afterwards
    with evaluation_model(model, dev, layout) as net:
        check_model(net, images(positions[:batch_size]), K, precision)  # before the first noise draw
        total = positions.size
        settings = {"sigma": sigma, "n0": int(n0), "n": int(n), "alpha": float(alpha), "batch_size": int(batch_size),
                    "seed": int(seed), "schema": CHECKPOINT_SCHEMA}
        if precision != "fp32":  # other counts: never resumed from an fp32 checkpoint (fp32's keys as before)
            settings["precision"] = precision
        ck_path = Path(checkpoint).expanduser() if checkpoint is not None else None
        fp = fingerprint(model, dataset, settings, positions) if ck_path is not None else ""
        state = {"base_pred": np.zeros(total, np.int64), "selected": np.zeros(total, np.int64),
                 "n_top": np.zeros(total, np.int64), "p_lower": np.zeros(total, np.float64),
                 "pred": np.full(total, ABSTAIN, np.int64), "radius": np.zeros(total, np.float64)}
        done = np.zeros(total, bool)
        resumed = 0
        if ck_path is not None:
            loaded = load_state(ck_path, fp, total)
            if loaded is not None:
                done, state = loaded
                resumed = int(done.sum())
                log.info("resuming %s: %d of %d samples already certified", ck_path, resumed, total)

        counter = NoiseCounter(net, sigma, K, batch_size=batch_size, seed=seed, device=dev, precision=precision,
                               channels_last=layout)
        block = max(1, batch_size // min(n0, n))  # samples per block: fixed by the settings, so resume is exact
        t0 = time.perf_counter()
        last_save = t0
        if progress is not None:
            progress("certify", resumed, total)
        try:
            for start in range(0, total, block):
                sl = slice(start, min(start + block, total))
                if done[sl].all():
                    continue
                pos = positions[sl]
                x = images(pos)
                with torch.no_grad(), autocast(dev, precision):
                    base = counter.note(net(x)).argmax(1)
                c0 = counter.counts(x, pos.tolist(), int(n0), PASS_SELECT)
                c_a = c0.argmax(1)
                c1 = counter.counts(x, pos.tolist(), int(n), PASS_ESTIMATE)
                n_a = c1.gather(1, c_a[:, None]).squeeze(1)
                n_a_np = n_a.cpu().numpy()
                counter.refuse_nonfinite(f"of dataset items {int(pos[0])}..{int(pos[-1])}")
                p_low = np.asarray(cp_lower(n_a_np, int(n), alpha), dtype=np.float64).reshape(-1)
                ok = p_low > 0.5
                state["base_pred"][sl] = base.cpu().numpy()
                state["selected"][sl] = c_a.cpu().numpy()
                state["n_top"][sl] = n_a_np
                state["p_lower"][sl] = p_low
                state["pred"][sl] = np.where(ok, state["selected"][sl], ABSTAIN)
                state["radius"][sl] = np.where(ok, np.asarray(radius_from_p(p_low, sigma)).reshape(-1), 0.0)
                done[sl] = True
                if ck_path is not None and (time.perf_counter() - last_save >= checkpoint_every):
                    save_state(ck_path, fp, done, state)
                    last_save = time.perf_counter()
                if progress is not None:
                    progress("certify", int(done.sum()), total)
        except BaseException as e:
            if ck_path is not None and done.any() and not isinstance(e, ModelError):  # the model's fault: no resume
                save_state(ck_path, fp, done, state)
                log.info("certify interrupted: %d of %d samples saved in %s; rerun to resume",
                            int(done.sum()), total, ck_path)
            raise
        if ck_path is not None:
            save_state(ck_path, fp, done, state)
        seconds = time.perf_counter() - t0

    y = dataset.y.cpu().numpy()[positions]
    g = dataset.g.cpu().numpy()[positions] if dataset.g is not None else y
    meta = {
        "robfair_version": __version__, "torch_version": torch.__version__, "dataset": getattr(dataset, "name", ""),
        "n_samples": int(total), "dataset_size": len(dataset), "num_classes": K,
        "model": getattr(model, "robfair_spec", {"name": type(model).__name__}),
        "batch_size": int(batch_size), "seed": int(seed), "device": str(dev), "precision": precision,
        "channels_last": bool(layout),
        "resumed_samples": resumed, "seconds": round(seconds, 3),
        "noise_draws": counter.draws, "forwards": counter.forwards,
        "draws_per_second": round(counter.draws / seconds, 1) if seconds > 0 else None,
        "reference": "Cohen, Rosenfeld & Kolter, ICML 2019; official code locuslab/smoothing code/core.py @ bdfa2280bc07",
    }
    rep = CertifyReport(index=positions, y=y, g=g, base_pred=state["base_pred"], selected=state["selected"],
                        n_top=state["n_top"], p_lower=state["p_lower"], pred=state["pred"], radius=state["radius"],
                        class_names=list(dataset.classes),
                        group_names=list(dataset.groups) if dataset.g is not None else None,
                        sigma=sigma, n0=int(n0), n=int(n), alpha=float(alpha), radii=radii_t, meta=meta)
    rep.warnings = sanity_warnings(rep)
    for w in rep.warnings:
        log.warning(w)
    return rep
