"""The reliability probe: official AutoAttack on a stratified sample, compared with the audit's attacks.

PGD can overstate robustness (gradient masking, too few steps, a bad step size): on a PGD-AT digits
model PGD-20 said 34% robust and AutoAttack 12%, and one class went from 76.5% to 0%. Every audit
therefore runs AutoAttack (through :class:`robfair.attacks.AutoAttack`, the official package) on up to
``per_group`` samples of every group (seeded, stratified) and compares, sample by sample, with the
worst case over the audit's own attacks of the same norm on the same samples.

Per group (and over all probe samples) the discordant samples are those robust under the audit's
attacks but fooled by AutoAttack (``b``) and the reverse (``c``). Under "the audit's attacks are as
strong as AutoAttack" each discordant sample is equally likely either way, so the exact one-sided
binomial (McNemar) test of ``b`` out of ``b + c`` at 1/2 says whether AutoAttack finds significantly
more errors; the per-group p-values are Holm-adjusted. Where it does, a warning names the groups and
how many points of robust accuracy the audit overstates there.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

import numpy as np
import torch

from ..attacks import get_attack
from ..attacks.autoattack import load_backend
from ..metrics.stats import holm, mcnemar_exact
from .checks import WORST_CASE
from .distributed import evaluate_sharded

log = logging.getLogger(__name__)

DEFAULT_PER_GROUP = 20
ALPHA = 0.05


def stratified_sample(groups: np.ndarray, per_group: int, seed: int) -> np.ndarray:
    """Sorted positions: up to ``per_group`` of each group's samples, chosen by a seeded permutation."""
    rng = np.random.Generator(np.random.PCG64([int(seed), 0x9E0B]))
    picks = []
    for g in np.unique(groups):
        pos = np.flatnonzero(groups == g)
        picks.append(pos[rng.permutation(pos.size)[:per_group]])
    return np.sort(np.concatenate(picks)) if picks else np.empty(0, dtype=np.int64)


def probe_attack(attack_names: Sequence[str]) -> tuple[str | None, list[str], str]:
    """(AutoAttack name or None, the audit's attacks it is compared with, why none)."""
    untargeted: dict[str, list[str]] = {"linf": [], "l2": []}
    for name in attack_names:
        try:
            atk = get_attack(name)
        except Exception:  # an attack object passed by the caller: compare by its attributes
            continue
        if getattr(atk, "family", "") == "autoattack":
            return None, [], f"the audit already runs {name}"
        if getattr(atk, "targeted", False) or getattr(atk, "family", "") == "trades-kl":
            continue
        untargeted.setdefault(getattr(atk, "norm", "linf"), []).append(name)
    for norm, aa in (("linf", "autoattack"), ("l2", "autoattack-l2")):
        if untargeted.get(norm):
            return aa, untargeted[norm], ""
    return None, [], "no untargeted L-inf or L2 attack to compare with"


def compare_probe(main: Any, probe: Any, attacks: list[str], aa_name: str, *, alpha: float = ALPHA) -> dict[str, Any]:
    """The probe's record (JSON-ready) and warnings, from the main outcomes restricted to the probe
    samples (``main``) and the AutoAttack outcomes on them (``probe``, same order)."""
    clean_ok = main.clean_pred == main.y
    rob_main = clean_ok & (main.worst_pred(0, attacks) == main.y)
    rob_aa = clean_ok & (probe.adv_pred[aa_name][0] == probe.y)
    groups = main.group
    names = main.group_names
    rows: dict[str, dict[str, Any]] = {}
    for gi in np.unique(groups):
        sel = groups == gi
        b = int((rob_main & ~rob_aa & sel).sum())
        c = int((~rob_main & rob_aa & sel).sum())
        n = int(sel.sum())
        rows[str(names[gi])] = {"n": n, "robust_acc": float(rob_main[sel].mean()), "autoattack_robust_acc":
                                float(rob_aa[sel].mean()), "overstatement": float((b - c) / n), "only_autoattack_fools": b,
                                "only_audit_fools": c, "p": mcnemar_exact(b, c, "greater")}
    for r, ph in zip(rows.values(), holm([r["p"] for r in rows.values()])):
        r["p_holm"] = ph
    b, c = int((rob_main & ~rob_aa).sum()), int((~rob_main & rob_aa).sum())
    n = int(main.y.size)
    overall = {"n": n, "robust_acc": float(rob_main.mean()), "autoattack_robust_acc": float(rob_aa.mean()),
               "overstatement": float((b - c) / n), "only_autoattack_fools": b, "only_audit_fools": c,
               "p": mcnemar_exact(b, c, "greater")}
    flagged = [g for g, r in rows.items() if r["p_holm"] < alpha]
    warnings: list[str] = []
    if flagged or overall["p"] < alpha:
        shown = flagged or sorted((g for g, r in rows.items() if r["overstatement"] > 0),
                                  key=lambda g: -rows[g]["overstatement"])[:5]
        parts = [f"{g} {100 * rows[g]['robust_acc']:.1f}% -> {100 * rows[g]['autoattack_robust_acc']:.1f}% "
                 f"(+{100 * rows[g]['overstatement']:.1f} pts, p={rows[g]['p_holm']:.2g})" for g in shown]
        label = " + ".join(attacks)
        warnings.append(
            f"reliability probe: AutoAttack finds significantly more errors than {label} on {n} probe samples "
            f"(robust {100 * overall['robust_acc']:.1f}% -> {100 * overall['autoattack_robust_acc']:.1f}%, "
            f"overstated by {100 * overall['overstatement']:.1f} pts, exact paired test p={overall['p']:.2g}); "
            f"{'groups' if flagged else 'largest by group'}: {'; '.join(parts)}. "
            f"Audit with --attack {aa_name} before trusting these numbers")
    return {"attack": aa_name, "compared_with": attacks, "alpha": alpha, "overall": overall, "per_group": rows,
            "flagged_groups": flagged, "warnings": warnings}


def reliability_probe(model: Any, dataset: Any, outcomes: Any, attacks: list[str], eps: Any, *,
                      per_group: int = DEFAULT_PER_GROUP, seed: int = 0, batch_size: int = 256,
                      device: Any = "auto", precision: str = "fp32", channels_last: bool | None = None,
                      alpha: float = ALPHA, dist: Any = None) -> dict[str, Any]:
    """Run the probe for an audit whose per-sample outcomes are ``outcomes`` (see the module doc).
    Returns the record stored under ``"probe"`` in audit.json (``{"skipped": reason}`` when none ran).

    AutoAttack's result depends on the batch it attacks, so the probe samples (sorted by dataset
    index) are attacked in fixed chunks of ``batch_size``, each seeded from its first sample's index;
    under torchrun (``dist``) the chunks are spread over the ranks and the outcomes gathered
    (:func:`robfair.audit.distributed.evaluate_sharded`), so any number of ranks gives one
    process's record."""
    aa_name, compared, why = probe_attack(attacks)
    if aa_name is None:
        return {"skipped": why}
    try:
        load_backend()
    except Exception as e:  # noqa: BLE001 - the package is a core dependency; say so when it is missing
        return {"skipped": str(e)}
    t0 = time.perf_counter()
    pos = stratified_sample(outcomes.group, int(per_group), seed)
    main = outcomes.select(pos)
    eps_p = eps[torch.as_tensor(main.index)] if isinstance(eps, torch.Tensor) else eps
    # the probe evaluates dataset items ``main.index``; a per-sample eps is passed for those items only
    sub = dataset.subset(torch.as_tensor(main.index)) if isinstance(eps, torch.Tensor) else dataset
    # default memory format: pyautoattack's input check calls .view(), which fails on channels_last batches
    probe = evaluate_sharded(model, sub, [aa_name], eps_p, dist=dist, batch_size=batch_size, device=device, seed=seed,
                             precision=precision, channels_last=False,
                             indices=None if isinstance(eps, torch.Tensor) else main.index, stage="reliability probe")
    rec = compare_probe(main, probe, compared, aa_name, alpha=alpha)
    rec["per_group_max"] = int(per_group)
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    for w in rec["warnings"]:
        log.warning(w)
    return rec


__all__ = ["reliability_probe", "compare_probe", "stratified_sample", "probe_attack", "DEFAULT_PER_GROUP", "WORST_CASE"]
