"""A handful of the weakest class's images, clean and adversarial, for the report's example strip.

    ex = weakest_examples(model, dataset, outcomes, eps, batch_size=256, seed=0)   # after evaluate()
    ex.save("runs/x/examples.npz")      # atomic; Examples.load(path) restores it
    ex.matches(outcomes)                # True: the stored predictions are those of outcomes.npz

Outcomes hold predictions, not images, and keeping every adversarial input of an audit would cost
gigabytes; so the images are *regenerated*: the few batches that hold the chosen samples are run
again through :func:`robfair.auditing.engine.evaluate` with the audit's seed, batch size, precision
and memory format. The engine seeds each batch's attack generator from the batch itself, so the
replayed batches reproduce the audit's adversarial inputs, and :func:`weakest_examples` checks it:
every regenerated prediction must equal the one recorded in the outcomes, otherwise no examples
are returned (and a warning is logged) rather than images that do not belong to the numbers.

What is chosen (deterministic, from the outcomes only):

- the *strongest attack*: the one with the lowest robust accuracy over all samples (ties: the later
  in the attack list);
- the *weakest class*: the lowest robust accuracy under the worst case over every attack (the class
  the report marks as worst; ties: the lowest class index); with groups it is still a class;
- the samples: from the (at most :data:`MAX_BATCHES`) batches holding the most samples of that class
  fooled by the strongest attack, those fooled first, then its clean mistakes, then the robust
  ones, each by dataset order; at most ``n`` (default :data:`DEFAULT_EXAMPLES`).

The file stores uint8 images (``round(255 x)``): ``clean`` and ``adv`` of shape ``(k, C, H, W)``,
with the dataset index, label, group, and the clean and adversarial predictions of the float
inputs the audit attacked (the stored uint8 adversarial image is within 1/510 of that input).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import RobfairError
from ..utils import to_jsonable
from ..runfolder import EXAMPLES_FILE, examples_path  # noqa: F401 - the audit's side files are the run folder's
from .engine import evaluate
from .outcomes import Outcomes, npz_header, read_npz, write_npz

log = logging.getLogger(__name__)

EXAMPLES_SCHEMA = "robfair.examples/1"
#: how many examples an audit keeps by default
DEFAULT_EXAMPLES = 8
#: at most this many batches are run again to regenerate the examples
MAX_BATCHES = 2


def to_uint8(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """Images in [0, 1] as uint8 (``round(255 x)``, clipped)."""
    a = x.detach().float().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)
    return np.clip(np.rint(a * 255.0), 0, 255).astype(np.uint8)


@dataclass
class Examples:
    """Clean and adversarial images of a few samples of the weakest class (see the module doc)."""

    index: np.ndarray  # (k,) dataset indices
    y: np.ndarray
    group: np.ndarray
    clean: np.ndarray  # (k, C, H, W) uint8
    adv: np.ndarray  # (k, C, H, W) uint8
    clean_pred: np.ndarray
    adv_pred: np.ndarray
    attack: str
    weakest: int  # the class id
    class_names: list[str]
    group_names: list[str]
    has_groups: bool
    eps: float | str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.index.size)

    def matches(self, outcomes: Outcomes | None) -> bool:
        """True when every stored prediction, label and group equals the outcomes' for that dataset
        index (the examples belong to these outcomes); False otherwise or when ``outcomes`` is None."""
        if outcomes is None or self.attack not in outcomes.adv_pred or outcomes.class_names != self.class_names:
            return False
        pos = {int(i): p for p, i in enumerate(outcomes.index)}
        if any(int(i) not in pos for i in self.index):
            return False
        p = np.array([pos[int(i)] for i in self.index], dtype=np.int64)
        return bool(np.array_equal(outcomes.y[p], self.y) and np.array_equal(outcomes.group[p], self.group)
                    and np.array_equal(outcomes.clean_pred[p], self.clean_pred)
                    and np.array_equal(outcomes.adv_pred[self.attack][0, p], self.adv_pred))

    # -- file -----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write ``path`` (``.npz``, compressed, atomically)."""
        header = {"schema": EXAMPLES_SCHEMA, "attack": self.attack, "weakest": int(self.weakest),
                  "class_names": list(self.class_names), "group_names": list(self.group_names),
                  "has_groups": bool(self.has_groups), "eps": self.eps, "meta": to_jsonable(self.meta)}
        return write_npz(path, {"index": self.index, "y": self.y, "group": self.group, "clean": self.clean,
                                "adv": self.adv, "clean_pred": self.clean_pred, "adv_pred": self.adv_pred,
                                "header": npz_header(header)})

    @classmethod
    def load(cls, path: str | Path) -> "Examples":
        with read_npz(path, EXAMPLES_SCHEMA, "examples") as (h, z):
            ex = cls(index=z["index"], y=z["y"], group=z["group"], clean=z["clean"], adv=z["adv"],
                     clean_pred=z["clean_pred"], adv_pred=z["adv_pred"], attack=str(h["attack"]),
                     weakest=int(h["weakest"]), class_names=list(h["class_names"]),
                     group_names=list(h["group_names"]), has_groups=bool(h["has_groups"]), eps=h.get("eps"),
                     meta=dict(h.get("meta", {})))
        k = ex.index.size
        if (ex.clean.dtype != np.uint8 or ex.adv.dtype != np.uint8 or ex.clean.shape != ex.adv.shape
                or ex.clean.ndim != 4 or ex.clean.shape[0] != k
                or any(a.shape != (k,) for a in (ex.y, ex.group, ex.clean_pred, ex.adv_pred))):
            raise RobfairError(f"{path} has inconsistent arrays; re-run the audit")
        return ex


# ============================================================================ choosing
def strongest_attack(outcomes: Outcomes) -> str:
    """The attack with the lowest robust accuracy over all samples (ties: the later one)."""
    if not outcomes.attacks:
        raise RobfairError("these outcomes have no attack")
    rob = [float(outcomes.robust(0, [a]).mean()) for a in outcomes.attacks]
    best = min(rob)
    return [a for a, r in zip(outcomes.attacks, rob) if r == best][-1]


def weakest_class(outcomes: Outcomes) -> int:
    """The class with the lowest robust accuracy under the worst case over every attack (ties:
    the lowest class id); classes without samples are skipped."""
    robust = outcomes.robust(0)
    k = len(outcomes.class_names)
    n = np.bincount(outcomes.y, minlength=k)
    r = np.bincount(outcomes.y, weights=robust.astype(np.float64), minlength=k)
    acc = np.where(n > 0, r / np.maximum(n, 1), np.inf)
    return int(np.argmin(acc))


def choose(outcomes: Outcomes, n: int = DEFAULT_EXAMPLES, batch_size: int = 256,
           max_batches: int = MAX_BATCHES) -> tuple[str, int, np.ndarray, np.ndarray]:
    """``(attack, class, chosen positions, positions of the batches to run again)``, positions being
    indices into ``outcomes`` (see the module doc for the rule)."""
    attack = strongest_attack(outcomes)
    c = weakest_class(outcomes)
    y = outcomes.y
    adv = outcomes.adv_pred[attack][0]
    cat = np.where(outcomes.clean_pred != y, 1, np.where(adv != y, 0, 2))  # 0 fooled, 1 clean mistake, 2 robust
    cand = np.flatnonzero(y == c)
    bs = int(batch_size)
    batch = cand // bs
    scores = []
    for b in np.unique(batch):
        in_b = cand[batch == b]
        scores.append((-min(n, int((cat[in_b] == 0).sum())), -min(n, in_b.size), int(b)))
    picked: list[int] = []
    have = 0
    for _, neg_size, b in sorted(scores):
        if have >= n or len(picked) >= max_batches:
            break
        picked.append(b)
        have += -neg_size
    picked.sort()
    in_picked = cand[np.isin(batch, picked)]
    order = np.lexsort((in_picked, cat[in_picked]))
    chosen = in_picked[order][:n]
    rows = np.concatenate([np.arange(b * bs, min((b + 1) * bs, outcomes.n)) for b in picked]) if picked else \
        np.empty(0, np.int64)
    return attack, c, chosen, rows


# ============================================================================ regenerating
def weakest_examples(model: torch.nn.Module, dataset: Any, outcomes: Outcomes, eps: float | torch.Tensor, *,
                     n: int = DEFAULT_EXAMPLES, attacks: list[tuple[str, Any]] | list[Any] | None = None,
                     batch_size: int = 256, device: str | torch.device | None = "auto", seed: int = 0,
                     precision: str = "fp32", channels_last: bool | None = None,
                     early_exit: bool = True) -> Examples | None:
    """The weakest class's examples of an evaluation ``outcomes`` of ``dataset`` (made by
    :func:`robfair.auditing.engine.evaluate` with the same ``eps``, ``batch_size``, ``seed``,
    ``precision``, ``channels_last`` and ``early_exit``). ``attacks``: the attack objects or names
    that evaluation ran, in its order (default: the names in the outcomes).

    Returns None when there is nothing to show (``n`` is 0, no attack, a sweep) or when the
    replayed predictions differ from the recorded ones (logged as a warning: an attack whose
    randomness does not come from the engine's generator, or non-deterministic kernels)."""
    if n <= 0 or not outcomes.attacks or (outcomes.radii is not None and len(outcomes.radii) > 1):
        return None
    attack, c, chosen, rows = choose(outcomes, n, batch_size)
    if chosen.size == 0:
        return None
    names = outcomes.attacks
    objs = list(attacks) if attacks is not None else list(names)
    obj = objs[names.index(attack)] if len(objs) == len(names) else attack
    idx = outcomes.index[rows]
    rerun = evaluate(model, dataset, [obj], eps, batch_size=batch_size, device=device, seed=seed,
                     precision=precision, channels_last=channels_last, early_exit=early_exit, indices=idx,
                     keep_adv=True, stage="examples")
    at = np.searchsorted(rows, chosen)  # rows is increasing: positions of the chosen samples in the rerun
    rname = rerun.attacks[0]
    adv_pred = rerun.adv_pred[rname][0, at]
    if not (np.array_equal(rerun.clean_pred[at], outcomes.clean_pred[chosen])
            and np.array_equal(adv_pred, outcomes.adv_pred[attack][0, chosen])):
        log.warning("the example images were not written: running %s again on %d samples did not reproduce the "
                    "audit's predictions (an attack with its own randomness, or non-deterministic kernels)",
                    attack, len(idx))
        return None
    x_adv = rerun.adv_inputs[rname][torch.as_tensor(at)]
    clean = dataset.images(torch.as_tensor(outcomes.index[chosen]))
    return Examples(index=outcomes.index[chosen].astype(np.int64), y=outcomes.y[chosen], group=outcomes.group[chosen],
                    clean=to_uint8(clean), adv=to_uint8(x_adv), clean_pred=outcomes.clean_pred[chosen],
                    adv_pred=adv_pred.astype(np.int64), attack=attack, weakest=c,
                    class_names=list(outcomes.class_names), group_names=list(outcomes.group_names),
                    has_groups=bool(outcomes.has_groups), eps=outcomes.eps,
                    meta={"seed": seed, "batch_size": int(batch_size), "replayed_samples": int(len(idx)),
                          "seconds": rerun.meta.get("seconds")})
