"""A sharded evaluation: each torchrun rank runs whole batches of the data, the outcomes are joined.

    torchrun --nproc-per-node 4 -m robfair audit -m best.pt --data cifar10 -a pgd20 --out runs/a

:func:`evaluate_sharded` is :func:`robfair.auditing.engine.evaluate` spread over the ranks of a process
group (:mod:`robfair.distributed`: NCCL on CUDA, gloo on CPU). How it keeps the result
equal to one process:

- **Whole batches, no padding.** The samples (all, or ``indices`` in their order) are cut into the
  batches one process would run (``batch_size`` each, the last one possibly shorter); rank ``r``
  takes batches ``r, r + W, r + 2W, ...`` (:func:`shard_batches`). Every sample is evaluated
  exactly once; a rank left without a batch contributes nothing.
- **The same random starts.** The engine seeds each attack's generator per batch from (seed,
  attack name, dataset index of the batch's first sample), so a batch draws the same starts on
  whichever rank runs it (AutoAttack included: its seed is drawn from that generator).
- **The distances too.** :func:`robfair.auditing.distances.boundary_distances` with ``dist`` shards
  the same whole batches (its bisection seeds each batch like the engine) and gathers through
  :func:`gather_parts`.
- **One join.** Every rank gathers every part (``all_gather_object``) and joins them with
  :meth:`Outcomes.concat` (sorted by dataset index, overlap refused), so every rank holds the full
  outcomes and everything built on them (reports, the probe's stratified sample, warnings) is
  computed alike everywhere; only rank 0 writes files (the CLI's job). The sanity checks run again
  on the joined outcomes; the attacks' own messages are kept once each, sorted per attack (so their
  order is the same for any number of ranks, one included).
- **Failures never hang the others.** Each rank catches its own error and hands it to the gather
  instead of leaving the collective; every rank then raises: the failing rank its own error, the
  others :class:`RankFailed` naming that rank and its message (exit code 2 at the CLI, which prints
  the line on rank 0 only).

Timings are per run: ``meta["seconds"]`` is this evaluation's wall time (gather included),
``attack_seconds`` the attack time summed over ranks, and ``meta["distributed"]`` records the world
size and each shard's seconds. Attacked-sample counts and the attacks' passes (``attack_units``)
are summed, so they equal one process's.
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any, Sequence

import numpy as np
import torch.distributed as torch_dist  # not `dist`: that is the DistInfo argument below

from ..distributed import DistInfo
from ..errors import RobfairError
from .checks import outcome_warnings
from .engine import evaluate, sample_order
from .outcomes import Outcomes

log = logging.getLogger(__name__)


def _single() -> DistInfo:
    return DistInfo()


class RankFailed(RobfairError):
    """Another rank of a sharded evaluation failed; raised on every rank that did not."""


def shard_batches(order: np.ndarray, batch_size: int, info: DistInfo) -> np.ndarray:
    """This rank's samples of ``order``: its whole batches (``batch_size`` consecutive items of
    ``order``, the last batch possibly shorter), batches ``rank, rank + world_size, ...``, in order.
    Over all ranks every item appears exactly once (no padding, nothing dropped)."""
    order = np.asarray(order, dtype=np.int64)
    if not info.enabled:
        return order
    bs = int(batch_size)
    starts = np.arange(0, order.size, bs)[info.rank::info.world_size]
    if not starts.size:
        return order[:0]
    return np.concatenate([order[s:s + bs] for s in starts])


def _gather(obj: Any, info: DistInfo) -> list[Any]:
    if not info.enabled:
        return [obj]
    box: list[Any] = [None] * info.world_size
    torch_dist.all_gather_object(box, obj)
    return box


def settle(statuses: Sequence[dict[str, Any]], rank: int, own: BaseException | None = None) -> None:
    """Raise on every rank when any rank failed: the failing rank re-raises ``own``, the others a
    :class:`RankFailed` naming the first failed rank and its message. ``statuses``: one dict per
    rank, ``{"ok": True}`` or ``{"ok": False, "error": type name, "message": line, "user": bool}``."""
    failed = [(r, s) for r, s in enumerate(statuses) if not s.get("ok")]
    if not failed:
        return
    if own is not None:
        raise own
    r, s = failed[0]
    kind = "" if s.get("user") else f"{s.get('error', 'error')}: "
    more = f" (and {len(failed) - 1} more rank{'s' if len(failed) > 2 else ''})" if len(failed) > 1 else ""
    raise RankFailed(f"rank {r} failed{more}: {kind}{s.get('message', '')}")


def _status(exc: BaseException) -> dict[str, Any]:
    lines = str(exc).strip().splitlines()
    return {"ok": False, "error": type(exc).__name__, "message": lines[0][:300] if lines else "",
            "user": isinstance(exc, (RobfairError, OSError, MemoryError))}


def run_on_every_rank(fn, info: DistInfo):
    """``fn()`` on this rank, then an agreement step: when any rank's ``fn`` raised, every rank
    raises (see :func:`settle`) instead of some ranks waiting in a later collective for ever.
    Returns ``fn``'s value on this rank (only a status travels, not the value)."""
    box: list[Any] = []

    def keep() -> None:
        box.append(fn())

    gather_parts(keep, info)
    return box[0]


def evaluate_sharded(model: Any, dataset: Any, attacks: Sequence[Any], eps: Any, *, dist: DistInfo | None = None,
                     indices: Any = None, batch_size: int = 256, progress: Any = None, **kwargs: Any) -> Outcomes:
    """:func:`robfair.auditing.engine.evaluate` over the ranks of ``dist`` (None or one rank: this
    process alone), joined into the outcomes of all samples (``indices``: those items, in that
    order, cut into batches). Other keywords go to ``evaluate``. See the module docstring."""
    info = dist or _single()
    t0 = time.perf_counter()
    mine = shard_batches(sample_order(indices, len(dataset)), batch_size, info)

    def part() -> Outcomes | None:
        if not mine.size:
            return None
        idx = None if (indices is None and not info.enabled) else mine
        return evaluate(model, dataset, attacks, eps, indices=idx, batch_size=batch_size,
                        progress=progress if info.is_main else None, **kwargs)

    parts = [p for p in gather_parts(part, info) if p is not None]
    return _join(parts, info, time.perf_counter() - t0)


def gather_parts(fn, info: DistInfo) -> list[Any]:
    """``fn()`` on this rank, then every rank's value, in rank order, on every rank (one process:
    ``[fn()]``). When any rank's ``fn`` raised, every rank raises instead (see :func:`settle`).
    The values travel pickled (``all_gather_object``; on NCCL through this rank's current CUDA
    device, which :func:`robfair.distributed.setup` sets from LOCAL_RANK), so they should
    hold CPU data (numpy arrays, CPU tensors): a CUDA tensor would be unpickled onto the device
    index it came from."""
    own: BaseException | None = None
    value = None
    try:
        value = fn()
    except Exception as e:  # noqa: BLE001 - handed to every rank, then re-raised here
        own = e
        if info.enabled:
            log.debug("rank %d failed:\n%s", info.rank, traceback.format_exc())
    if not info.enabled:
        if own is not None:
            raise own
        return [value]
    gathered = _gather({"ok": True, "value": value} if own is None else _status(own), info)
    settle(gathered, info.rank, own)
    return [g["value"] for g in gathered]


def _join(parts: list[Outcomes], info: DistInfo, seconds: float) -> Outcomes:
    checks = [outcome_warnings(p) for p in parts]  # the rest of each part's warnings: the attacks' own
    said = [m for p, c in zip(parts, checks) for m in p.warnings if m not in c]
    out = Outcomes.concat(parts) if len(parts) > 1 else parts[0]
    ordered: list[str] = []
    for name in out.attacks:  # once each, sorted per attack: the same for any number of ranks
        tag = f"[{name}] "
        ordered += sorted({m for m in said if m.startswith(tag)})
    ordered += sorted({m for m in said if m not in ordered})
    out.warnings = (outcome_warnings(out) if len(parts) > 1 else checks[0]) + ordered
    metas = [p.meta for p in parts]
    meta = dict(metas[0])
    meta["seconds"] = round(seconds, 3)
    meta["attack_seconds"] = {k: round(sum(m.get("attack_seconds", {}).get(k, 0.0) for m in metas), 3)
                              for k in metas[0].get("attack_seconds", {})}
    counts = {}
    for k, v in metas[0].get("attacked_samples", {}).items():
        vals = [m["attacked_samples"][k] for m in metas]
        counts[k] = [int(sum(c)) for c in zip(*vals)] if isinstance(v, list) else int(sum(vals))
    meta["attacked_samples"] = counts
    meta["attack_units"] = {k: int(sum(m.get("attack_units", {}).get(k, 0) for m in metas))
                            for k in metas[0].get("attack_units", {})}
    if info.enabled:
        meta["distributed"] = {"world_size": info.world_size,
                               "shard_seconds": [m.get("seconds") for m in metas]}
    out.meta = meta
    return out


__all__ = ["RankFailed", "evaluate_sharded", "gather_parts", "run_on_every_rank", "settle", "shard_batches"]
