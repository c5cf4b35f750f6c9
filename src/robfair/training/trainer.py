"""The one training loop. Methods plug in a batch loss and hooks; the loop owns everything else.

    trainer = Trainer(model, train, val, method=None, cfg=cfg)     # method None: cfg.method
    result = trainer.fit()                                          # -> RunResult

Per epoch: shuffle (a generator seeded from ``cfg.seed`` and the epoch), optional on-device CIFAR
augmentation (:func:`robfair.data.augment.random_crop_flip`), ``method.loss`` under autocast, one
optimizer step per batch, the LR schedule stepped **per iteration** (milestones and warm-up given
in epochs are converted to steps, so warm-up is smooth and any batch count works), EMA update,
then validation: per-group clean and robust outcomes under ``cfg.val_attack`` ->
:class:`~robfair.metrics.GroupReport` -> one line of ``metrics.jsonl``, ``best.pt`` by
``cfg.select`` on validation only, ``last.pt`` every epoch.

Randomness: data order, augmentation and attack random starts use generators re-seeded from
``(cfg.seed, purpose, epoch, rank)`` every epoch (:func:`robfair.seeding.derive_seed`); the global
torch / numpy / python RNGs are saved in ``last.pt``. A killed run resumed with ``resume=True``
therefore redoes the interrupted epoch from exactly the state it started with and ends
bit-identical (on CPU) to an uninterrupted run.

The run folder (``cfg.out``; None trains in memory and writes nothing), written through
:class:`robfair.runfolder.RunFolder`::

    config.yaml            resolved config + run_info (versions, git commit, device)
    checkpoints/last.pt    model + optimizer, scheduler, scaler, EMA, method state, RNG states, epoch, step
    checkpoints/best.pt    the selected model (EMA weights when ``cfg.ema``) with its validation summary
    metrics.jsonl          one JSON object per epoch
    audit.json             ``final_audit(best_model, test)`` when both are given

Why one module: the loop, its resume state and its checkpoint writes change together: a
resume is bit-identical only while they agree.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ..auditing.engine import evaluate
from ..data.augment import random_crop_flip
from ..errors import ConfigError
from ..hardware import channels_last as to_channels_last
from ..hardware import GuardedCompile, check_precision, wants_channels_last
from ..metrics import GroupReport
from ..models import save_checkpoint
from ..models.checkpoint import read_checkpoint
from ..models.sources import save_own_formats
from ..models.validate import NonFiniteLogits
from ..provenance import run_info
from ..runfolder import RunFolder
from ..seeding import derive_seed, make_generator
from ..utils import to_jsonable
from .. import distributed as D
from .checkpointing import plain, rng_state, set_rng_state
from .config import TrainConfig
from .methods import Method, TrainContext, build_method
from .methods.method import build_attack
from .optim import eps_warmup_scale, make_optimizer, make_scheduler
from .selection import RATES as _RATES
from .selection import Selection, val_summary

log = logging.getLogger(__name__)

_AMP = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: statistics of each rate kept in metrics.jsonl (GroupReport.aggregates has more)
_AGG_KEYS = ("avg", "class_mean", "worst", "best", "gap", "sd", "tail_k", "worst_group")


# ================================================================================ callbacks / result
class Callback:
    """Progress hooks for the CLI (rich bars) or notebooks; every method is optional. The library
    itself never prints. ``record`` is the metrics.jsonl line of the epoch."""

    def on_train_start(self, trainer: "Trainer") -> None: ...
    def on_epoch_start(self, epoch: int, num_batches: int) -> None: ...
    def on_batch(self, epoch: int, batch: int, num_batches: int) -> None: ...
    def on_val_start(self, epoch: int, num_batches: int) -> None: ...
    def on_val_batch(self, epoch: int, batch: int, num_batches: int) -> None: ...
    def on_epoch_end(self, epoch: int, record: dict[str, Any]) -> None: ...
    #: the final audit's progress (``robfair.training.train(final_audit=[attacks])``): its batches
    #: (stage ``"audit"``), then the reliability probe (:data:`robfair.auditing.probe.PROGRESS_STAGE`, in units)
    def on_audit_progress(self, stage: str, done: int, total: int) -> None: ...
    def on_train_end(self, result: "RunResult") -> None: ...


class ProgressCallback(Callback):
    """The trainer's events as one ``progress(stage, done, total)`` function (the CLI's bars, the demo's
    lines): stages ``epochs``, ``epoch N train``, ``epoch N validation`` and the final audit's ``audit`` /
    ``audit: STAGE``, each under ``label: `` when a label is given."""

    def __init__(self, progress: Callable[[str, int, int], None] | None, label: str = "") -> None:
        self.progress, self.label = progress, label
        self.epochs = 0

    def report(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(f"{self.label}: {stage}" if self.label else stage, done, total)

    def on_train_start(self, trainer: "Trainer") -> None:
        self.epochs = trainer.cfg.epochs
        self.report("epochs", getattr(trainer, "start_epoch", 0), self.epochs)

    def on_batch(self, epoch: int, batch: int, num_batches: int) -> None:
        self.report(f"epoch {epoch + 1} train", batch + 1, num_batches)

    def on_val_batch(self, epoch: int, batch: int, num_batches: int) -> None:
        self.report(f"epoch {epoch + 1} validation", batch + 1, num_batches)

    def on_epoch_end(self, epoch: int, record: dict[str, Any]) -> None:
        self.report("epochs", epoch + 1, self.epochs)

    def on_audit_progress(self, stage: str, done: int, total: int) -> None:
        self.report("audit" if stage == "audit" else f"audit: {stage}", done, total)


@dataclass
class RunResult:
    """What ``fit`` returns. ``model`` is the trained model after the last epoch (raw weights);
    ``best_model`` the selected one (EMA weights when enabled); ``history`` the metrics.jsonl lines."""

    model: nn.Module
    best_model: nn.Module
    history: list[dict[str, Any]]
    best_epoch: int | None
    best_score: float | None
    out: Path | None = None
    audit: Any = None

    @property
    def last_path(self) -> Path | None:
        return None if self.out is None else RunFolder(self.out).last

    @property
    def best_path(self) -> Path | None:
        return None if self.out is None else RunFolder(self.out).best


# ================================================================================ the trainer
class Trainer:
    """Train ``model`` on ``train`` with ``method`` (default: ``cfg.method``), select on ``val``.

    ``model`` comes from ``robfair.models.create`` (checkpoints rebuild it from its spec). ``train``,
    ``val`` and ``test`` are ``robfair.data.Dataset``; ``val=None`` trains without validation
    (``cfg.select`` must then be ``last``). ``final_audit(best_model, test)`` runs after training
    when both are given; its result (``.to_json()`` or a dict) is saved as ``audit.json``. The final
    audit's keys of ``cfg`` left unset (``probe``, ``probe_tolerance``: None) are filled in place when
    the run starts: a resumed run's recorded values, else the defaults (config.yaml records them).
    ``callbacks``: :class:`Callback` objects for progress display."""

    def __init__(self, model: nn.Module, train: Any, val: Any = None, method: Method | None = None,
                 cfg: TrainConfig | None = None, *, test: Any = None, callbacks: Sequence[Any] = (),
                 final_audit: Callable[[nn.Module, Any], Any] | None = None,
                 split: dict[str, Any] | None = None) -> None:
        self.cfg = cfg = cfg if cfg is not None else TrainConfig()
        self.split = split  # the validation split's record (runner.make_split), saved in every checkpoint
        if val is None and cfg.select != "last":
            raise ConfigError(f"select '{cfg.select}' needs a validation set; pass val or set select: last")
        if not cfg.resume and method is None:  # a new run is selected honestly (a resumed one as it was recorded)
            cfg.check_selection()
        if val is not None and len(val) == 0:
            raise ConfigError("the validation set is empty; raise val_per_class or pass val=None with select: last")
        self.dist, self.device, self._owns_group = D.setup(cfg.device)
        check_precision(cfg.precision, self.device, what="precision")  # bf16 where it is not native: refused
        self.method = method if method is not None else build_method(cfg.method, cfg.method_options)
        self.callbacks = list(callbacks)
        self.final_audit = final_audit
        self.test = test
        self.out = Path(cfg.out).expanduser() if cfg.out and self.dist.is_main else None
        self.run_dir = Path(cfg.out).expanduser() if cfg.out else None
        #: the run folder this process writes (rank 0 only; None in memory) and the one every rank reads
        self.folder = RunFolder(self.out) if self.out is not None else None
        self.run = RunFolder(self.run_dir) if self.run_dir is not None else None
        self.class_names = list(train.classes)
        self.num_classes = len(self.class_names)

        # --- model, data, attacks
        self.channels_last = wants_channels_last(model, cfg.channels_last)  # default: on for conv nets
        fmt = torch.channels_last if self.channels_last else torch.preserve_format
        self.raw_model = model.to(self.device, memory_format=fmt)
        self.model = D.wrap(self.raw_model, self.dist, self.device)
        #: what the training step runs (the attack's passes and the loss): torch.compile'd when cfg.compile
        self.step_model = GuardedCompile(self.model, cfg.compile) if cfg.compile else self.model
        self.train_ds = train.place(self.device)
        self.val_ds = None
        if val is not None:
            shard = torch.arange(self.dist.rank, len(val), self.dist.world_size)
            self.val_ds = (val.subset(shard) if self.dist.enabled else val).place(self.device)
        self._eps_scale = 1.0  # eps warm-up factor of the current step (cfg.eps_warmup)
        self.train_attack = build_attack(cfg.attack, cfg.attack_options, train=True, scale=self._get_eps_scale,
                                         unwrap=D.unwrap)
        self.val_attack = build_attack(cfg.val_attack, cfg.val_attack_options, train=False, unwrap=D.unwrap)

        # --- optimization
        self.batch_size = cfg.batch_size
        n_local = len(D.shard(torch.arange(len(train)), self.dist))
        self.steps_per_epoch = max(1, math.ceil(n_local / self.batch_size))
        self.optimizer = make_optimizer(self.raw_model.parameters(), cfg)
        self.scheduler = make_scheduler(self.optimizer, cfg, self.steps_per_epoch)
        self.amp_dtype = _AMP.get(cfg.precision)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.precision == "fp16")
        self.ema = None
        if cfg.ema is not None:
            self.ema = AveragedModel(self.raw_model, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema), use_buffers=True)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True

        self.ctx = TrainContext(cfg=cfg, device=self.device, num_classes=self.num_classes,
                                class_names=self.class_names, eps=cfg.eps, attack=self.train_attack,
                                epochs=cfg.epochs, rank=self.dist.rank, world_size=self.dist.world_size,
                                all_reduce=lambda t: D.all_reduce_sum(t, self.dist), unwrap=D.unwrap,
                                attack_factory=lambda name, opts: build_attack(name, opts, train=True,
                                                                               scale=self._get_eps_scale,
                                                                               unwrap=D.unwrap),
                                val_batches=None if self.val_ds is None else
                                lambda bs: self.val_ds.batches(bs, device=self.device))
        self.ctx.model = self._trainer_eval_model
        self.method.ctx = self.ctx
        # per-class training counts, for methods that need the class prior (long-tail losses, re-sampling)
        self.ctx.extra["train_counts"] = torch.bincount(train.y.cpu(), minlength=self.num_classes)
        self.epoch = 0  # completed epochs
        self.step = 0
        self.selection = Selection(cfg.select)  # the best epoch so far (best.pt)
        self.history: list[dict[str, Any]] = []
        self._best_state: dict[str, torch.Tensor] | None = None

    # ------------------------------------------------------------------ eps warm-up, selection
    def _get_eps_scale(self) -> float:
        return self._eps_scale

    def eps_warmup_scale(self, step: int) -> float:
        """The factor on every training radius at optimizer step ``step`` (:func:`.optim.eps_warmup_scale`)."""
        return eps_warmup_scale(step, self.cfg, self.steps_per_epoch)

    @property
    def best_epoch(self) -> int | None:
        return self.selection.epoch

    @property
    def best_score(self) -> float | None:
        return self.selection.score

    @property
    def eval_model(self) -> nn.Module:
        """The model selected, saved as best and audited: the method's own model when it supplies one
        (``Method.eval_model``, e.g. CFA's FAWA average), else the EMA weights when enabled."""
        own = self.method.eval_model()
        return own if own is not None else self._trainer_eval_model

    @property
    def _trainer_eval_model(self) -> nn.Module:
        """The trainer's own evaluation model: the EMA weights when enabled, else the trained model."""
        return self.ema.module if self.ema is not None else self.raw_model

    # ------------------------------------------------------------------ run folder
    def _prepare_run_dir(self) -> None:
        """Refuse to overwrite a run; on resume check the config and load ``last.pt``."""
        if self.run_dir is None:
            if self.cfg.resume:
                raise ConfigError("resume needs a run folder; set out to the folder of the run to continue")
            self.cfg.resolve_final_audit()
            return
        assert self.run is not None
        last = self.run.last
        if self.folder is not None:  # what a killed save left: .last.pt.XXXX.tmp and the like
            self.folder.remove_orphan_temps()
        resumed = self.cfg.resume and last.exists()
        if resumed:
            self._load_resume(last)
        elif not self.cfg.resume and self.run.finished_an_epoch():  # as the CLI's output guard (safeio) judges it
            raise ConfigError(f"run folder {self.run_dir} already holds a run; pass resume to continue it "
                              "or choose another out folder")
        else:
            self.cfg.resolve_final_audit()  # config.yaml records the probe the final audit runs with
        D.barrier(self.dist)  # every rank has checked the folder before rank 0 writes to it
        if self.folder is not None:
            self.folder.prepare()
            if not resumed:
                self.folder.write_text(self.folder.config, self.cfg.to_yaml(run_info(self.device, self.dist.world_size)))
            # the metrics lines of completed epochs only: a crash may leave a line ahead of last.pt, or half a line
            self.history = self.folder.repair_metrics(through_epoch=self.epoch, create=True)

    def _train_state(self) -> dict[str, Any]:
        return plain({
            "epoch": self.epoch,
            "step": self.step,
            "config": self.cfg.to_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "method": self.method.state_dict(),
            "best": {"epoch": self.best_epoch, "score": self.best_score},
            "rng": self._gather_rng(),
        })

    def _gather_rng(self) -> list[dict[str, Any]]:
        """Every rank's RNG state, indexed by rank (collective: all ranks call it)."""
        state = rng_state()
        if not self.dist.enabled:
            return [state]
        states: list[Any] = [None] * self.dist.world_size
        dist.all_gather_object(states, state)
        return states

    def _load_resume(self, path: Path) -> None:
        loaded, meta = read_checkpoint(path, map_location="cpu")
        state = meta["extra"].get("trainer")
        if not state:
            raise ConfigError(f"{path} holds no training state; it cannot be resumed - start a new run")
        saved = TrainConfig(**state["config"])
        self.cfg.resolve_final_audit(saved)  # the final audit's unset keys: the run's own
        saved.resolve_final_audit()  # a run recorded before they existed: the defaults
        diff = self.cfg.differences(saved)
        if diff:
            a, b = saved.to_dict(), self.cfg.to_dict()
            what = ", ".join(f"{k} ({a[k]!r} -> {b[k]!r})" for k in diff)
            raise ConfigError(f"cannot resume {self.run_dir}: the config changed: {what}; resume with the "
                              "original config or choose another out folder")
        self.raw_model.load_state_dict(loaded)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        if self.ema is not None:
            self.ema.load_state_dict(state["ema"])
        self._resume_method_state = state["method"]
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.selection.epoch, self.selection.score = state["best"]["epoch"], state["best"]["score"]
        rng = state["rng"]
        self._resume_rng = rng[self.dist.rank] if self.dist.rank < len(rng) else rng[0]
        log.info("resuming %s after epoch %d (step %d)", self.run_dir, self.epoch, self.step)

    def _save(self, record: dict[str, Any], is_best: bool) -> None:
        state = self._train_state()  # collective under DDP: every rank computes it
        if self.folder is None:
            if is_best:
                self._best_state = {k: v.detach().clone() for k, v in self.eval_model.state_dict().items()}
            return
        self.folder.append_metrics(record)
        if is_best:
            save_checkpoint(self.folder.best, self.eval_model, classes=self.class_names,
                            extra=plain({"epoch": record["epoch"], "select": self.cfg.select,
                                          "score": self.best_score,
                                          "val": (record.get("val") or {}).get("summary"), "split": self.split}))
        save_checkpoint(self.folder.last, self.raw_model, classes=self.class_names,
                        extra={"trainer": state, "split": self.split})

    # ------------------------------------------------------------------ the loop
    def fit(self) -> RunResult:
        """Train ``cfg.epochs`` epochs (continuing a resumed run) and return the result."""
        cfg = self.cfg
        self._resume_method_state = None
        self._resume_rng = None
        self._prepare_run_dir()
        self.method.on_train_start(self.ctx)
        if self._resume_method_state is not None:
            self.method.load_state_dict(self._resume_method_state)
        if self._resume_rng is not None:
            set_rng_state(self._resume_rng)
        self._emit("on_train_start", self)
        if self.epoch == 0 and self.val_ds is not None and self.method.initial_validation:
            # e.g. FRL fine-tuning: the first dual step uses the initial model's validation errors
            self.method.on_initial_validation(self.ctx, self._validate(0, self._trainer_eval_model, initial=True))
        for epoch in range(self.epoch, cfg.epochs):
            t0 = time.perf_counter()
            train_stats = self._train_epoch(epoch)
            t1 = time.perf_counter()
            report = self._validate(epoch, self._trainer_eval_model) if self.val_ds is not None else None
            self.method.on_epoch_end(self.ctx, report)
            if report is not None and self.method.eval_model() is not None:
                report = self._validate(epoch, self.method.eval_model())  # selection uses the method's model
            t2 = time.perf_counter()
            self.epoch = epoch + 1
            record = self._record(epoch, train_stats, report, {"train_s": t1 - t0, "val_s": t2 - t1})
            self._save(record, record["select"]["is_best"])
            self.history.append(record)
            self._emit("on_epoch_end", epoch, record)
            log.info("epoch %d/%d: train loss %.4f, val %s", epoch + 1, cfg.epochs, train_stats["loss"],
                     (record["val"] or {}).get("summary"))
        D.barrier(self.dist)
        result = RunResult(model=self.raw_model, best_model=self._load_best(), history=self.history,
                           best_epoch=self.best_epoch, best_score=self.best_score, out=self.run_dir)
        if self.test is not None and self.final_audit is not None and self.dist.is_main:
            result.audit = self.final_audit(result.best_model, self.test)
            if self.folder is not None:
                if hasattr(result.audit, "save"):  # an AuditReport: audit.json + outcomes.npz
                    result.audit.save(self.folder.audit)
                else:
                    payload = result.audit.to_json() if hasattr(result.audit, "to_json") else result.audit
                    self.folder.write_json(self.folder.audit, payload, strict=True)
        self._emit("on_train_end", result)
        D.barrier(self.dist)
        if self._owns_group:
            D.cleanup(self.dist)
        return result

    def _load_best(self) -> nn.Module:
        with torch.no_grad():  # a ScriptModule's deepcopy clones its parameters through autograd: no leaves
            best = copy.deepcopy(self.eval_model)
        for p, q in zip(best.parameters(), self.eval_model.parameters()):
            p.requires_grad_(q.requires_grad)
        if self.folder is not None and self.folder.best.exists():
            loaded, _ = read_checkpoint(self.folder.best, map_location="cpu")
            best.load_state_dict(loaded)
            best.robfair_source = str(self.folder.best)  # the final audit names the file it audits
            # a model file's weights also in the user's own forms: best.weights.pt (+ .safetensors / .ts)
            save_own_formats(best, self.folder.best, self.class_names)
        elif self._best_state is not None:
            best.load_state_dict(self._best_state)
        return best.eval()

    def _emit(self, name: str, *args: Any) -> None:
        if not self.dist.is_main:
            return
        for cb in self.callbacks:
            fn = getattr(cb, name, None)
            if fn is not None:
                fn(*args)

    def _train_epoch(self, epoch: int) -> dict[str, Any]:
        cfg, dev, K = self.cfg, self.device, self.num_classes
        ctx = self.ctx
        ctx.epoch, ctx.step = epoch, self.step
        ctx.generator = make_generator(dev, derive_seed(cfg.seed, "attack", epoch, self.dist.rank))
        aug_gen = make_generator(dev, derive_seed(cfg.seed, "augment", epoch, self.dist.rank))
        order_gen = make_generator(torch.device("cpu"), derive_seed(cfg.seed, "order", epoch))
        # a method may draw the epoch's order itself (class re-sampling): epoch_order(labels, generator)
        epoch_order = getattr(self.method, "epoch_order", None)
        perm = epoch_order(self.train_ds.y, order_gen) if epoch_order is not None else None
        if perm is None:
            perm = torch.randperm(len(self.train_ds), generator=order_gen)
        order = D.shard(perm, self.dist)
        order = order.to(self.train_ds.x.device)  # one copy per epoch, then device-side indexing
        batches = order.split(self.batch_size)
        lr = self.optimizer.param_groups[0]["lr"]
        self.model.train()
        self.method.on_epoch_start(ctx)
        self._emit("on_epoch_start", epoch, len(batches))
        acc_dtype = torch.float32 if dev.type == "mps" else torch.float64  # MPS has no float64
        loss_sum = torch.zeros((), device=dev, dtype=acc_dtype)
        correct = torch.zeros(K, device=dev, dtype=acc_dtype)
        seen = torch.zeros(K, device=dev, dtype=acc_dtype)
        eps_first = None
        for b, idx in enumerate(batches):
            self._eps_scale = self.eps_warmup_scale(self.step)
            eps_first = self._eps_scale if eps_first is None else eps_first
            x, y, g = self.train_ds.batch(idx, dev)
            if cfg.augment == "crop-flip":
                x = random_crop_flip(x, cfg.crop_padding, aug_gen)
            if self.channels_last:
                x = to_channels_last(x)
            with self._autocast():
                loss = self.method.loss(self.step_model, x, y, g, ctx)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            if self.ema is not None:
                self.ema.update_parameters(self.raw_model)
            self.step += 1
            ctx.step = self.step
            loss_sum += loss.detach().to(acc_dtype) * len(y)
            logits, yl = ctx.take_record()
            if logits is not None:
                correct += torch.bincount(yl, weights=(logits.argmax(1) == yl).to(acc_dtype), minlength=K)
                seen += torch.bincount(yl, minlength=K).to(acc_dtype)
            self._emit("on_batch", epoch, b, len(batches))
        n = torch.tensor(float(len(order)), device=dev, dtype=acc_dtype)
        stats = D.all_reduce_sum(torch.cat([loss_sum[None], n[None], correct, seen]), self.dist).cpu().double()
        loss_sum, n, correct, seen = stats[0], stats[1], stats[2:2 + K], stats[2 + K:]
        mean_loss = float(loss_sum / n)
        if not math.isfinite(mean_loss):
            raise ConfigError(f"training diverged: the loss is {mean_loss} in epoch {epoch + 1}; lower lr, "
                              "add warmup_epochs or use precision fp32")
        ctx.train_class_acc = torch.where(seen > 0, correct / seen.clamp_min(1), torch.nan).float()
        acc = float(correct.sum() / seen.sum()) if float(seen.sum()) > 0 else None
        out = {"loss": mean_loss, "acc": acc, "n": int(n), "lr": lr}
        if cfg.eps_warmup > 0:  # the training radius ramp: eps at the epoch's first and last step
            out["eps"] = [cfg.eps * (eps_first or 1.0), cfg.eps * self._eps_scale]
        return out

    def _autocast(self) -> torch.autocast:
        """Mixed precision per ``cfg.precision`` (a no-op for fp32)."""
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32, enabled=self.amp_dtype is not None)

    def _validate(self, epoch: int, model: nn.Module | None = None, initial: bool = False) -> Any:
        """Clean and robust predictions of ``model`` (default: ``eval_model``) on the validation split,
        through the audit engine (same loop, precision and memory format as ``robfair audit``)
        -> GroupReport (all ranks merged)."""
        cfg, dev, ds = self.cfg, self.device, self.val_ds
        model = model if model is not None else self.eval_model
        bs = cfg.val_batch_size or cfg.batch_size
        nb = math.ceil(len(ds) / bs)
        self._emit("on_val_start", epoch, nb)
        attacks = [self.val_attack.attack] if self.val_attack is not None and cfg.eps > 0 else []
        try:
            out = evaluate(D.unwrap(model), ds, attacks, float(cfg.eps), batch_size=bs, device=dev,
                           seed=derive_seed(cfg.seed, "val-initial" if initial else "val", epoch, self.dist.rank),
                           precision=cfg.precision, channels_last=self.channels_last, early_exit=True,
                           progress=lambda _s, done, _t: self._emit("on_val_batch", epoch, done - 1, nb))
        except NonFiniteLogits as e:  # the model being trained, not a file of the user's: it diverged
            when = "before training" if initial else f"in epoch {epoch + 1}"
            raise ConfigError(f"training diverged: the model returns NaN/Inf logits for {e.bad} of {e.n} validation "
                              f"samples {when}; lower lr, add warmup_epochs or use precision fp32") from None
        adv = out.adv_pred[out.attacks[0]][0] if attacks else out.clean_pred
        y, g, clean, adv = (D.gather_cat(torch.from_numpy(a), self.dist) for a in (out.y, out.group, out.clean_pred, adv))
        has_groups = ds.g is not None
        return GroupReport.from_outcomes(y=y, clean_pred=clean, adv_pred=adv, groups=g if has_groups else None,
                                         class_names=ds.classes, group_names=ds.group_names if has_groups else None,
                                         attack=cfg.val_attack, eps=cfg.eps)

    def _record(self, epoch: int, train: dict[str, Any], report: Any, times: dict[str, float]) -> dict[str, Any]:
        """One metrics.jsonl line; also updates the best-epoch bookkeeping."""
        val = None
        summary = None
        if report is not None:
            summary = val_summary(report)
            frame = report.by_group
            per_group = {str(name): {"n": int(row["n"]), **{r: row[r] for r in _RATES}}
                         for name, row in frame.iterrows()}
            agg = report.aggregates()
            val = {"summary": summary, "per_group": per_group,
                   "aggregates": {r: {k: agg[r][k] for k in _AGG_KEYS} for r in _RATES}}
            if not report.groups_are_classes:
                val["per_class"] = {str(name): {"n": int(row["n"]), **{r: row[r] for r in _RATES}}
                                    for name, row in report.by_class.iterrows()}
        score, is_best = self.selection.update(epoch + 1, summary)
        return to_jsonable({
            "epoch": epoch + 1,
            "step": self.step,
            "lr": train.pop("lr"),
            "train": train,
            "val": val,
            "select": {"criterion": self.cfg.select, "score": score, "is_best": is_best,
                       "best_epoch": self.best_epoch},
            "method": self.method.epoch_state(),
            "time": times,
        })
