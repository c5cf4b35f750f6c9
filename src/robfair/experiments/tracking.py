"""Optional TensorBoard scalars per epoch (extra ``[tensorboard]``): a trainer callback.

    from robfair.experiments.tracking import TensorBoardCallback
    train(cfg, callbacks=[TensorBoardCallback("runs/x/tensorboard")])
    # study YAML: tracking: {tensorboard: true}    CLI: robfair sweep ... --tensorboard

Per epoch: ``train/loss``, ``train/acc``, ``lr``, ``val/{clean_acc,rob_acc,worst_clean_acc,
worst_rob_acc,bndy_err,...}`` and ``val_class/rob_acc/<class>`` for every class/group.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from ..errors import ConfigError

try:  # the trainer's callback base; hooks are duck-typed, so this is only for isinstance checks
    from ..training.trainer import Callback as _Base
except Exception:  # pragma: no cover
    _Base = object  # type: ignore[assignment,misc]


def require_tensorboard() -> Any:
    """``torch.utils.tensorboard.SummaryWriter``; a one-line ConfigError when tensorboard is missing."""
    try:
        import tensorboard  # noqa: F401  # lazy: optional extra (robfair[tensorboard])
        from torch.utils.tensorboard import SummaryWriter  # lazy: optional extra (robfair[tensorboard])
    except ImportError:
        raise ConfigError("TensorBoard tracking was asked for but tensorboard is not installed; "
                          "pip install tensorboard (robfair's 'tensorboard' extra), or drop --tensorboard / tracking.tensorboard") from None
    return SummaryWriter


def _tag(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(name)) or "_"


class TensorBoardCallback(_Base):
    """Writes the trainer's per-epoch record as scalars. ``writer`` may be any object with
    ``add_scalar(tag, value, step)``/``flush``/``close`` (tests pass a recorder)."""

    def __init__(self, log_dir: str | Path, writer: Any = None) -> None:
        self.log_dir = Path(log_dir)
        self.writer = writer if writer is not None else require_tensorboard()(log_dir=str(self.log_dir))

    def _add(self, tag: str, value: Any, step: int) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        if math.isfinite(value):
            self.writer.add_scalar(tag, float(value), step)

    def on_epoch_end(self, epoch: int, record: dict[str, Any]) -> None:
        step = int(record.get("epoch", epoch + 1))
        train = record.get("train") or {}
        self._add("train/loss", train.get("loss"), step)
        self._add("train/acc", train.get("acc"), step)
        self._add("lr", record.get("lr"), step)
        val = record.get("val") or {}
        for key, value in (val.get("summary") or {}).items():
            self._add(f"val/{key}", value, step)
        for group, row in (val.get("per_group") or {}).items():
            for rate in ("clean_acc", "rob_acc"):
                self._add(f"val_class/{rate}/{_tag(group)}", row.get(rate), step)
        self.writer.flush()

    def on_train_end(self, result: Any) -> None:
        self.writer.close()
