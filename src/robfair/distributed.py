"""DistributedDataParallel plumbing kept out of the training loop.

Launch ``torchrun --nproc-per-node N robfair train ...``: torchrun sets WORLD_SIZE/RANK/LOCAL_RANK,
:func:`setup` joins the process group (NCCL on CUDA, gloo on CPU) and picks this rank's device.
Every rank walks its own shard of each epoch's shuffled order; validation outcomes are gathered so
every rank builds the same report as a single process would; only rank 0 writes files.
Without torchrun (WORLD_SIZE unset or 1) every function here is a no-op.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .errors import ConfigError
from .utils import resolve_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_info() -> DistInfo:
    """The rank layout torchrun announced in the environment (single process when absent)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return DistInfo(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))


def setup(device: str = "auto") -> tuple[DistInfo, torch.device, bool]:
    """Join the process group when launched by torchrun. Returns (rank info, this rank's device,
    whether this call created the group, so the caller knows to destroy it)."""
    info = env_info()
    dev = resolve_device(device)
    if not info.enabled:
        return info, dev, False
    if dev.type == "cuda":
        count = torch.cuda.device_count()
        if info.local_rank >= count:
            raise ConfigError(f"torchrun started local rank {info.local_rank} but this node has {count} GPU"
                              f"{'s' if count != 1 else ''}; pass --nproc-per-node {count} (one process per GPU), "
                              "or --device cpu")
        dev = torch.device("cuda", info.local_rank)
        torch.cuda.set_device(dev)
    if dist.is_initialized():
        return info, dev, False
    backend = "nccl" if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, timeout=collective_timeout())
    log.info("rank %d/%d joined the %s process group on %s", info.rank, info.world_size, backend, dev)
    return info, dev, True


#: minutes a rank waits in a collective for the others (``ROBFAIR_DIST_TIMEOUT`` overrides)
DEFAULT_TIMEOUT_MIN = 60


def collective_timeout():
    """How long a rank waits in a collective before it gives up: ``ROBFAIR_DIST_TIMEOUT`` minutes,
    default 60. torch's own default for NCCL is 10 minutes, less than a sharded audit's ranks may
    wait for one another (rank 0 regenerates the examples' batches, and a rank's last batch of
    AutoAttack can take minutes on a large model) before the next gather."""
    text = os.environ.get("ROBFAIR_DIST_TIMEOUT", "").strip()
    try:
        minutes = float(text) if text else float(DEFAULT_TIMEOUT_MIN)
    except ValueError:
        minutes = -1.0
    if not 0 < minutes < 1e6:  # NaN, inf and absurd values too
        raise ConfigError(f"ROBFAIR_DIST_TIMEOUT must be a positive number of minutes, got {text!r}; e.g. 60")
    return datetime.timedelta(minutes=minutes)


def wrap(model: torch.nn.Module, info: DistInfo, device: torch.device) -> torch.nn.Module:
    """``DistributedDataParallel(model)`` when distributed, else the model itself."""
    if not info.enabled:
        return model
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a DDP wrapper (attacks and checkpoints use it directly)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def shard(order: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """This rank's part of an epoch's order: every ``world_size``-th index, cut to equal lengths so
    all ranks take the same number of optimizer steps."""
    if not info.enabled:
        return order
    per_rank = len(order) // info.world_size
    return order[info.rank::info.world_size][:per_rank]


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum a tensor over ranks (in place, returned)."""
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def gather_cat(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Concatenate a 1-D tensor over ranks (rank order); shards may have different lengths."""
    if not info.enabled:
        return t
    parts: list[torch.Tensor] = [None] * info.world_size  # type: ignore[list-item]
    dist.all_gather_object(parts, t.cpu())
    return torch.cat(parts)


def broadcast_object(obj, info: DistInfo):
    """Rank 0's ``obj`` on every rank."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def cleanup(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
