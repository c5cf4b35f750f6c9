"""From a config to a finished run: load data, carve the validation split, build the model, train.

    from robfair.training import TrainConfig, train
    result = train(TrainConfig(data="digits", model="smallcnn", method="pgd-at", eps="0.1",
                               epochs=10, out="runs/pgd-at", probe="2x"), final_audit=["pgd20"])
    result.best_model, result.history[-1]["val"]["summary"], result.audit.probe["verdict"]
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..auditing import audit
from ..data import load_dataset, stratified_split
from ..data.npz import training_spec
from ..errors import ConfigError, ModelError
from ..models import create, load_checkpoint, model_classes
from ..models.checkpoint import read_checkpoint
from ..models.sources import load_source, source_spec, tag_source
from ..models.validate import check_model_output, guard_training, nonfinite_weights
from ..seeding import seed_everything
from .config import TrainConfig
from .trainer import RunResult, Trainer

log = logging.getLogger(__name__)


def split_train_val(full: Any, cfg: TrainConfig) -> tuple[Any, Any]:
    """(train, val) carved from a training set with ``stratified_split(y, cfg.val_per_class, cfg.seed)``;
    val is None when ``val_per_class`` is 0. The test set is never involved."""
    tr, va, _ = make_split(full, cfg)
    return (full, None) if va is None else (full.subset(tr), full.subset(va))


def split_record(full: Any, cfg: TrainConfig, val_idx: torch.Tensor | None, source: str = "seed",
                 seed: int | None = None, val_per_class: Any = None) -> dict[str, Any]:
    """What a checkpoint records about its validation split: the data, its size, how the split was
    drawn and the validation indices (into the full training set)."""
    return {"data": str(cfg.data), "n": int(len(full)), "seed": int(cfg.seed if seed is None else seed),
            "val_per_class": cfg.val_per_class if val_per_class is None else val_per_class,
            "source": source, "val_indices": None if val_idx is None else val_idx.detach().cpu().long().clone()}


def init_split(path: str) -> dict[str, Any] | None:
    """The split recorded in checkpoint ``path`` (None for checkpoints written before splits were recorded)."""
    _, meta = read_checkpoint(path)
    extra = meta.get("extra") or {}
    rec = extra.get("split")
    if rec is None and isinstance(extra.get("trainer"), dict):
        rec = extra["trainer"].get("split")
    return rec


def make_split(full: Any, cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, Any]]:
    """(train indices, val indices or None, the split record) for ``full``.

    Without ``init``: ``stratified_split(y, val_per_class, seed)``. With ``init`` whose checkpoint records
    a split of the same data, ``val_split: init`` (default) reuses that split (the fine-tuning run then
    never validates on the initial model's training samples) and refuses a different ``val_per_class``;
    ``val_split: seed`` draws its own split and refuses one whose validation samples the initial model
    trained on. Errors are one line naming the fix."""
    n = len(full)
    rec = init_split(cfg.init) if cfg.init else None
    same_data = rec is not None and rec.get("data") == str(cfg.data) and int(rec.get("n", -1)) == n
    if cfg.init and rec is None:
        log.warning("--init %s records no validation split (an older checkpoint): robfair cannot check that "
                    "this run's validation samples were not its training samples", cfg.init)
    elif rec is not None and not same_data:
        if rec.get("data") == str(cfg.data):
            raise ConfigError(f"--init {cfg.init} was trained on {rec.get('n')} samples of {cfg.data} but this run "
                              f"has {n}; use the same training data as the init run")
        log.info("--init %s was trained on %s, this run on %s: no split check", cfg.init, rec.get("data"), cfg.data)
    init_val = rec.get("val_indices") if same_data else None
    init_val = None if init_val is None else torch.as_tensor(init_val).long()
    if same_data and cfg.val_split == "init" and cfg.val_per_class:
        if rec.get("val_per_class") != cfg.val_per_class or init_val is None:
            raise ConfigError(f"--init {cfg.init} was validated on val_per_class {rec.get('val_per_class')!r} "
                              f"(seed {rec.get('seed')}) and this run reuses that split; set val_per_class "
                              f"{rec.get('val_per_class')!r}, or val_split: seed for a new split that avoids "
                              "the init run's training samples")
        va = init_val.sort().values
        mask = torch.ones(n, dtype=torch.bool)
        mask[va] = False
        tr = torch.nonzero(mask).flatten()
        return tr, va, split_record(full, cfg, va, source=f"init:{rec.get('source', 'seed')}",
                                    seed=int(rec.get("seed", cfg.seed)), val_per_class=rec.get("val_per_class"))
    if not cfg.val_per_class:
        return torch.arange(n), None, split_record(full, cfg, None)
    tr, va = stratified_split(full.y, cfg.val_per_class, cfg.seed, classes=full.classes)
    if same_data:
        init_train = torch.ones(n, dtype=torch.bool)
        if init_val is not None:
            init_train[init_val] = False
        leaked = int(init_train[va].sum())
        if leaked:
            raise ConfigError(f"{leaked} of the {len(va)} validation samples of this split (seed {cfg.seed}, "
                              f"val_per_class {cfg.val_per_class!r}) were training samples of --init {cfg.init}; "
                              f"use val_split: init (the default), or seed {rec.get('seed')} and val_per_class "
                              f"{rec.get('val_per_class')!r}")
    return tr, va, split_record(full, cfg, va)


def load_init(model: nn.Module, path: str) -> None:
    """Copy the weights of checkpoint ``path`` into ``model`` (fine-tuning); the architecture, its
    arguments and the class count must match."""
    loaded, meta = load_checkpoint(path)
    want, have = getattr(model, "robfair_spec", {}), meta["spec"]
    diff = [k for k in ("name", "num_classes", "in_shape", "kwargs") if want.get(k) != have.get(k)]
    if diff:
        what = ", ".join(f"{k} {have.get(k)!r} (config: {want.get(k)!r})" for k in diff)
        raise ModelError(f"--init {path} does not fit the configured model: it has {what}; "
                         "pick a checkpoint of the same architecture and class count, or change model")
    bad = nonfinite_weights(loaded)
    if bad:
        raise ModelError(f"--init {path} holds NaN/Inf in {len(bad)} weight tensors ({', '.join(bad[:3])}"
                         f"{', ...' if len(bad) > 3 else ''}); pick a checkpoint from before that run diverged")
    model.load_state_dict(loaded.state_dict())


def build_model(cfg: TrainConfig, num_classes: int, in_shape: tuple[int, int, int], data: Any = None) -> nn.Module:
    """``robfair.models.create(cfg.model, ...)``, initialized from ``cfg.init`` when set; or, for a model
    file (:attr:`TrainConfig.model_file`), the user's model as ``audit`` loads it
    (:func:`robfair.models.sources.load_source`), checked on a batch of ``data`` (its output: one
    row of ``num_classes`` finite logits per image; the class names its file stores: the data's),
    with its source recorded in ``cfg.model_source`` (a resume refuses a changed file)."""
    if not cfg.model_file:
        model = create(cfg.model, num_classes, in_shape, **cfg.model_kwargs)
        if cfg.init:
            load_init(model, cfg.init)
        return model
    model, record = load_source(cfg.model, arch=cfg.arch, arch_kwargs=cfg.arch_kwargs, model_dir=cfg.model_dir,
                                mean=cfg.mean, std=cfg.std)
    stored = model_classes(model)
    if data is not None and stored is not None and list(stored) != list(data.classes):
        raise ModelError(f"{cfg.model} predicts the classes {stored[:4]}... in that order but {cfg.data} has "
                         f"{list(data.classes)[:4]}...; train it on the data it was made for")
    if data is not None:
        x = data.x[: min(len(data), 8)].float()
        check_model_output(model, x, num_classes, where="training images of the first batch")
    cfg.model_source = {k: record[k] for k in ("model", "format", "sha256", "arch", "arch_sha256")}
    return guard_training(tag_source(model, source_spec(record, num_classes, in_shape)))


def audit_hook(cfg: TrainConfig, attacks: Sequence[str], *, progress: Callable[[str, int, int], None] | None = None,
               **options: Any) -> Callable[[nn.Module, Any], Any]:
    """The standard final audit of a run, as a ``final_audit(best_model, test)`` hook:
    :func:`robfair.audit` under ``attacks`` at the run's ``eps``, ``seed``, ``device``, ``precision``
    and memory format, with the config's reliability probe, ``probe=cfg.probe`` (a budget: a
    multiple of the audit's attacks' compute, default 1; ``"all"``: every robust sample; 0: off)
    and ``probe_tolerance=cfg.probe_tolerance``, read when the audit runs (the trainer fills them
    in: a resumed run's recorded ones, else the defaults). ``progress(stage, done, total)`` gets the
    audit's progress (its batches, stage ``"audit"``, then :data:`robfair.auditing.probe.PROGRESS_STAGE`
    in units); ``options`` are further arguments of :func:`robfair.audit` (``batch_size=`` ...)."""
    attacks = list(attacks)

    def final_audit(model: nn.Module, test: Any) -> Any:
        kwargs: dict[str, Any] = dict(eps=cfg.eps, seed=cfg.seed, device=cfg.device, precision=cfg.precision,
                                      channels_last=cfg.channels_last, probe=cfg.probe,
                                      probe_tolerance=cfg.probe_tolerance, progress=progress)
        return audit(model, test, attacks=attacks, **{**kwargs, **options})

    return final_audit


def _audit_progress(callbacks: Sequence[Any]) -> Callable[[str, int, int], None]:
    """The final audit's progress, to every callback's ``on_audit_progress(stage, done, total)``."""
    hooks = [cb.on_audit_progress for cb in callbacks if getattr(cb, "on_audit_progress", None) is not None]

    def progress(stage: str, done: int, total: int) -> None:
        for hook in hooks:
            hook(stage, done, total)

    return progress


def train(cfg: TrainConfig, *, callbacks: Sequence[Any] = (),
          final_audit: Callable[[nn.Module, Any], Any] | Sequence[str] | str | None = None,
          train_data: Any = None, test_data: Any = None) -> RunResult:
    """Run one training config end to end and return the :class:`RunResult`.

    ``train_data`` / ``test_data`` override loading ``cfg.data`` (splits "train" / "test"). The test
    split is only loaded when ``final_audit`` is given; it runs after training on the selected
    model and its result lands in ``audit.json`` (``result.audit``). ``final_audit`` is either
    attack names (``["pgd20"]``): the standard audit (:func:`audit_hook`) with the config's
    reliability probe, ``cfg.probe`` (budget: a multiple of the audit's attacks' compute, default
    1; ``"all"``; 0 off) and ``cfg.probe_tolerance``, its progress going to the callbacks'
    ``on_audit_progress``; or a callable ``final_audit(best_model, test)`` of your own (it then
    decides the probe: pass ``probe=cfg.probe`` to :func:`robfair.audit` to keep the config's)."""
    cfg.check_selection()  # a run trained on no attack is not selected by robust accuracy
    if isinstance(final_audit, str):
        final_audit = [final_audit]
    if final_audit is not None and not callable(final_audit):
        final_audit = audit_hook(cfg, final_audit, progress=_audit_progress(callbacks))
    seed_everything(cfg.seed)
    data_spec = cfg.data
    if train_data is None:
        data_spec, notice = training_spec(cfg.data)
        if notice:
            log.warning(notice)
    full = train_data if train_data is not None else load_dataset(data_spec, "train")
    full.validate()
    tr_idx, va_idx, split = make_split(full, cfg)
    tr, va = (full, None) if va_idx is None else (full.subset(tr_idx), full.subset(va_idx))
    test = test_data
    if final_audit is not None and test is None:
        test = load_dataset(data_spec, "test")
    model = build_model(cfg, full.num_classes, full.in_shape, full)
    return Trainer(model, tr, va, None, cfg, test=test, callbacks=callbacks, final_audit=final_audit,
                   split=split).fit()
