"""The one evaluation loop: (model, dataset, attacks, eps, precision, memory format, device, seed)
-> per-sample :class:`Outcomes`.

    out = evaluate(model, dataset, ["fgsm", "pgd20"], 8/255, device="cpu", seed=0)
    out.report("pgd20")          # a GroupReport rebuilt from the per-sample outcomes
    out.reports()                # every attack, plus "worst-case" with more than one attack
    out.save("outcomes.npz")     # atomic; Outcomes.load(path) restores it exactly (robfair.auditing.outcomes)

Everything that runs a model over a dataset (``audit()``, the eps sweep, boundary distances by
bisection, the trainer's validation, the sweep worker) goes through :func:`evaluate` or its one
attack call, :func:`run_attack`, so they share:

- one clean forward pass per batch, shared by every attack (and every radius of a sweep);
- early exit with refill: robfair's multi-step PGD runs through :meth:`robfair.attacks.PGD.stream`
  (:func:`refills`), one pass over the data per attack (per radius of a sweep), so samples fooled
  early leave and the active batch refills from the batches still to come (late steps run at full
  batch). Each batch keeps its own generator, so the outcomes equal those batch by batch
  (``refill=False``); other attacks (FGSM, AutoAttack, plain callables) run batch by batch in the
  first pass. Only the batches in flight live on the device;
- the model in eval mode on ``device`` (restored afterwards), optionally ``channels_last``, the
  forward passes under ``precision`` autocast;
- datasets on any device (batches are moved to ``device``; labels and groups come back to the CPU
  with ``.cpu()``);
- each attack's random generator seeded per batch from ``(seed, attack name, [radius in a sweep,]
  dataset index of the batch's first sample)`` (:func:`batch_generator`), never from the attack's
  position in the list nor from the batches before: ``pgd20`` alone and ``pgd20`` after ``fgsm``
  give the same outcomes, and so does an audit sharded into whole batches (``evaluate(indices=...)``
  on each rank of a torchrun audit) once its parts are joined (boundary distances by bisection
  seed their batches the same way, in a stream of their own);
- the sanity checks of :mod:`robfair.auditing.checks` on the outcomes (``Outcomes.warnings``).

``eps`` is parsed and validated where it enters (CLI, config, :func:`robfair.audit`) into a
:class:`~robfair.attacks.radius.Radius` (a float or one value per dataset item) or, for a sweep, a
:class:`~robfair.attacks.radius.Sweep`; :func:`evaluate` takes those as they are (a plain number,
tensor or list is parsed there, once) and hands each attack its batch's ``Radius``, which the
attacks trust.

Why one module: evaluate, its refill passes and the attack call are one algorithm: THE
loop every audit, sweep and validation runs.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from collections import deque
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from ..attacks import get_attack
from ..attacks.attack import STEP_UNKNOWN, Attack, count_passes
from ..attacks.pgd import FGSM, PGD, Chunk
from ..attacks.radius import Radius, Sweep
from ..errors import AttackError, DataError, RobfairError
from ..hardware import channels_last as to_channels_last
from ..hardware import check_precision, wants_channels_last
from ..models.validate import check_input_gradient, check_model_output, guarded, nonfinite_error
from ..seeding import attack_seed, batch_generator  # noqa: F401 - attack_seed: exported as robfair.auditing.attack_seed
from ..utils import resolve_device
from .checks import outcome_warnings
from .outcomes import NOT_FOOLED, WORST_CASE, Outcomes

log = logging.getLogger(__name__)


#: Progress callback: (stage, done, total).
Progress = Callable[[str, int, int], None]


# ============================================================================ attacks
def resolve_attacks(attacks: Sequence[Any], precision: str = "fp32") -> list[tuple[str, Any]]:
    """``[(name, attack object)]`` from names or attack objects; each name once. Objects are copied
    before their precision is set, so the caller's attack is never changed."""
    out: list[tuple[str, Any]] = []
    for a in attacks:
        obj = get_attack(a) if isinstance(a, str) else a
        name = str(a).strip().lower() if isinstance(a, str) else getattr(obj, "name", type(obj).__name__)
        if name in [n for n, _ in out] or name == WORST_CASE:
            raise AttackError(f"attack '{name}' is listed twice; list each attack once")
        if precision != "fp32" and hasattr(obj, "precision"):
            obj = copy.copy(obj)
            obj.precision = precision
        out.append((name, obj))
    return out


def autocast(device: torch.device, precision: str):
    """Autocast for ``precision`` on ``device`` (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        raise RobfairError(f"precision must be fp32, bf16 or fp16, got {precision!r}")
    return torch.autocast(device_type=device.type, dtype=dtype)


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, precision: str = "fp32") -> torch.Tensor:
    with autocast(x.device, precision):
        return model(x).argmax(1)


@torch.no_grad()
def clean_predict(model: nn.Module, x: torch.Tensor, precision: str = "fp32") -> torch.Tensor:
    """:func:`predict`, with -1 for a sample whose logits are not all finite (the caller refuses
    it; one elementwise test on the logits, no extra synchronization)."""
    with autocast(x.device, precision):
        z = model(x)
    return torch.where(torch.isfinite(z).all(1), z.argmax(1), -1)


def run_attack(attack: Any, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: Radius | float | torch.Tensor, *,
               generator: torch.Generator | None, early_exit: bool = True, precision: str = "fp32",
               warnings: list[str] | None = None,
               adv_out: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The one place an attack is called: ``(adversarial prediction, step first fooled)`` per sample.

    ``y`` is always the true label (a targeted attack picks its targets by its own rule). An attack
    with ``run(...)`` (every robfair attack: :class:`robfair.attacks.AttackResult`) gives the
    prediction from its own logits and the step (``-1`` never fooled, ``-2`` fooled at an unrecorded
    step); its reliability messages are appended to ``warnings``. A plain callable
    (``attack(model, x, y, eps) -> x_adv``) has ``x_adv`` evaluated once more, steps unrecorded.
    ``adv_out``: a list the adversarial batch is appended to (detached), for callers that keep images.
    ``eps``: the batch's :class:`~robfair.attacks.radius.Radius` (robfair's attacks trust it; another
    callable gets its plain float or tensor), or a plain radius the attack checks (the bisection's
    midpoints)."""
    if isinstance(eps, Radius) and not isinstance(attack, Attack):
        eps = eps.value
    runner = getattr(attack, "run", None)
    if callable(runner):
        res = runner(model, x, y, eps, generator=generator, early_exit=early_exit)
        if warnings is not None:
            warnings += [w for w in getattr(res, "warnings", []) if w not in warnings]
        if adv_out is not None:
            adv_out.append(res.x_adv.detach())
        step = getattr(res, "fooled_step", None)
        return res.adv_pred, step if step is not None else _unknown_steps(res.adv_pred, y)
    x_adv = attack(model, x, y, eps, generator=generator, early_exit=early_exit)
    if adv_out is not None:
        adv_out.append(x_adv.detach())
    pred = predict(model, x_adv, precision)
    return pred, _unknown_steps(pred, y)


def _unknown_steps(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.where(pred != y, torch.full_like(pred, STEP_UNKNOWN), torch.full_like(pred, NOT_FOOLED))


@contextlib.contextmanager
def evaluation_model(model: nn.Module, device: torch.device, channels_last: bool | None = False):
    """The model (DDP unwrapped) in eval mode on ``device``, channels-last if asked, as robfair runs
    a user's model (:func:`robfair.models.validate.guarded`: fed its own dtype, so float64 / half
    weights just work, and what its forward raises, in any batch or attack, is a ModelError naming
    it); its training mode is restored afterwards."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        model = model.module
    was_training = model.training
    model.eval()
    if wants_channels_last(model, channels_last):
        model = model.to(memory_format=torch.channels_last)
    model = model.to(device)
    try:
        yield guarded(model)
    finally:
        model.train(was_training)


# ============================================================================ the loop
def sample_order(indices: Any, n: int) -> np.ndarray:
    """The dataset items an evaluation runs, in order, as int64: all ``n`` when ``indices`` is
    None, else ``indices`` (a sequence, array or tensor on any device), each in ``0..n-1``."""
    if indices is None:
        return np.arange(n, dtype=np.int64)
    order = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices, dtype=np.int64).reshape(-1)
    if order.size and (order.min() < 0 or order.max() >= n):
        raise DataError(f"indices must lie in 0..{n - 1}; got {int(order.min())}..{int(order.max())}")
    return order


def check_eps(eps: Any, n: int) -> Radius | Sweep:
    """What :func:`evaluate` is given: a :class:`Radius` or :class:`Sweep` (checked where they entered:
    taken as they are), or a plain radius (a number, text, an (n,) tensor / array) or list of radii,
    parsed here once."""
    if isinstance(eps, (list, tuple)):
        return Sweep.parse(eps, "sweep radii")
    return Radius.parse(eps, n)


def evaluate(
    model: nn.Module,
    dataset: Any,
    attacks: Sequence[str | Any],
    eps: float | torch.Tensor | Sequence[float],
    *,
    batch_size: int = 256,
    device: str | torch.device | None = "auto",
    seed: int = 0,
    precision: str = "fp32",
    channels_last: bool | None = None,
    early_exit: bool = True,
    indices: Any = None,
    monotone: bool = True,
    refill: bool = True,
    progress: Progress | None = None,
    stage: str = "audit",
    keep_adv: bool = False,
) -> Outcomes:
    """Run ``attacks`` on ``dataset`` (or its items ``indices``) and return per-sample outcomes.

    ``eps``: a float; an (N,) tensor with one radius per dataset item; or an increasing list of
    radii (an eps sweep). A single radius attacks every sample (clean mistakes included, so
    ``adv_acc`` is the accuracy on adversarial inputs). A sweep shares the clean pass across radii,
    never attacks clean mistakes (robust errors at every radius) and, with ``monotone`` (default),
    does not attack again a sample already fooled at a smaller radius: its perturbation lies in
    every larger ball, so the robust error is exact and the curve monotone (see
    :mod:`robfair.auditing.eps_sweep`). ``attacks`` may be empty (clean predictions only).
    ``precision``: bf16 / fp16 only where the device runs them natively (:func:`robfair.hardware.
    check_precision`); ``channels_last`` None: on for models with 2-D convolutions. ``refill``
    (default): PGD's active batch refills across batches (same outcomes, fewer, fuller passes);
    ``progress`` counts batches over every pass of the data. ``keep_adv`` (single radius only, for
    a few batches: :mod:`robfair.auditing.examples`): keep every sample's adversarial input in
    ``Outcomes.adv_inputs``."""
    if len(dataset) == 0:
        raise DataError("the dataset is empty; check the path and the split")
    if isinstance(batch_size, bool) or int(batch_size) < 1:
        raise RobfairError(f"batch size must be >= 1, got {batch_size}")
    dev = resolve_device(device)
    precision = check_precision(precision, dev, what="precision")
    channels_last = wants_channels_last(model, channels_last)
    n_all = len(dataset)
    eps_v = check_eps(eps, n_all)
    if indices is not None:
        idx = torch.from_numpy(sample_order(indices, n_all))
        if isinstance(eps_v, Radius):
            eps_v = eps_v.subset(idx)
        ds = dataset.subset(idx)
    else:
        idx = torch.arange(n_all)
        ds = dataset
    sweep = isinstance(eps_v, Sweep)
    if keep_adv and sweep:
        raise RobfairError("keep_adv keeps the inputs of one radius; evaluate a single eps")
    radii: list[float] | None = list(eps_v) if sweep else (None if eps_v.per_sample else [float(eps_v.value)])
    balls: list[Radius] = eps_v.balls() if sweep else [eps_v]  # what the attacks are handed (trusted)
    R = len(radii) if radii is not None else 1
    named = resolve_attacks(attacks, precision)
    n = len(ds)
    K = ds.num_classes
    y_all = np.empty(n, dtype=np.int64)
    g_all = np.empty(n, dtype=np.int64)
    clean_all = np.empty(n, dtype=np.int64)
    adv_all = {name: np.empty((R, n), dtype=np.int64) for name, _ in named}
    step_all = {name: np.full((R, n), NOT_FOOLED, dtype=np.int64) for name, _ in named}
    timings = {name: 0.0 for name, _ in named}
    units = {name: 0 for name, _ in named}  # the attacks' passes through the model (GRADIENT_PASS_UNITS)
    said: dict[str, list[str]] = {name: [] for name, _ in named}  # the attacks' own reliability messages
    attacked = {name: [0] * R for name, _ in named}
    kept: dict[str, list[torch.Tensor]] | None = {name: [] for name, _ in named} if keep_adv else None
    bs = int(batch_size)
    total_batches = math.ceil(n / bs)
    # PGD attacks refill their active batch across batches (PGD.stream): one pass over the data per
    # attack (and radius of a sweep); every other attack runs batch by batch in the first pass
    refilled = {name for name, atk in named if refill and refills(atk, early_exit)}
    gradients = any(isinstance(atk, Attack) for _, atk in named)  # robfair's attacks need input gradients
    passes = [(name, atk, j) for name, atk in named if name in refilled
              for j in range(R) if not sweep or radii[j] > 0]  # type: ignore[index]
    total = total_batches * max(1, len(passes))
    done = [0]
    t0 = time.perf_counter()

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(stage, done[0], total)

    def first_pass(net: nn.Module) -> Any:
        """The data once: checks, the one clean forward per batch, the batch-by-batch attacks."""
        pos = 0
        for b, (x, y, g) in enumerate(ds.batches(bs, device=dev)):
            if channels_last:
                x = to_channels_last(x)
            m = x.shape[0]
            if b == 0:  # the model's output is checked once, here, on the whole first batch; its logits are kept
                if not torch.isfinite(x).all():
                    raise DataError("the dataset holds NaN or infinite pixels; clean the data first")
                clean = _first_batch(net, x, K, precision, gradients).argmax(1)
            else:
                clean = clean_predict(net, x, precision)
            y_all[pos:pos + m] = y.cpu().numpy()
            g_all[pos:pos + m] = g.cpu().numpy()
            clean_all[pos:pos + m] = clean.cpu().numpy()
            if b and clean_all[pos:pos + m].min() < 0:  # NaN / Inf logits past the first batch
                bad = int((clean_all[pos:pos + m] < 0).sum())
                raise nonfinite_error(model, bad, m, f"samples of batch {b + 1} (dataset items {int(idx[pos])}.."
                                                     f"{int(idx[pos + m - 1])}; the batches before it were finite)",
                                      precision)
            first = int(idx[pos])  # the dataset index of the batch's first sample seeds its generators
            for name, atk in named:
                if name in refilled:
                    if sweep:  # radius 0 (or the row a first radius starts from): the clean prediction
                        adv_all[name][0, pos:pos + m] = clean_all[pos:pos + m]
                    continue
                ta = time.perf_counter()
                with count_passes() as pc:
                    if not sweep:
                        e_b = eps_v.batch(pos, m, dev)
                        pred, step = run_attack(atk, net, x, y, e_b, generator=batch_generator(dev, seed, name, first),
                                                early_exit=early_exit, precision=precision, warnings=said[name],
                                                adv_out=None if kept is None else kept[name])
                        adv_all[name][0, pos:pos + m] = pred.cpu().numpy()
                        step_all[name][0, pos:pos + m] = step.cpu().numpy()
                        attacked[name][0] += m
                    else:
                        gens = [batch_generator(dev, seed, name, first, e) for e in radii]  # type: ignore[union-attr]
                        _sweep_batch(atk, net, x, y, clean, balls, gens, monotone, early_exit, precision,  # type: ignore[arg-type]
                                     adv_all[name][:, pos:pos + m], step_all[name][:, pos:pos + m], attacked[name],
                                     said[name])
                units[name] += pc.units
                timings[name] += time.perf_counter() - ta
            yield pos, x, y
            pos += m
            tick()

    def again() -> Any:
        """The data once more (for a refilled attack after the first)."""
        pos = 0
        for x, y, _g in ds.batches(bs, device=dev):
            if channels_last:
                x = to_channels_last(x)
            yield pos, x, y
            pos += x.shape[0]
            tick()

    with evaluation_model(model, dev, channels_last) as net:
        source = first_pass(net)
        if not passes:
            for _ in source:
                pass
        for name, atk, j in passes:
            ta = time.perf_counter()
            waited = [0.0]  # seconds spent producing the batches (the first pass runs the other attacks)
            others = sum(units.values())  # the first pass's attacks run inside this one's block: not its passes
            with count_passes() as pc:
                _refill_pass(atk, net, _timed(source, waited), name, j, balls if sweep else None, eps_v, monotone,
                             dev, seed, idx, bs, y_all, clean_all, adv_all[name], step_all[name], attacked[name],
                             said[name], None if kept is None else kept[name])
            units[name] += pc.units - (sum(units.values()) - others)
            timings[name] += time.perf_counter() - ta - waited[0]
            source = again()
    eps_label: float | str | None = (radii[0] if radii is not None and len(radii) == 1 else
                                     None if radii is not None else "per-sample")
    has_groups = ds.g is not None
    out = Outcomes(index=idx.numpy().astype(np.int64), y=y_all, group=g_all, clean_pred=clean_all, adv_pred=adv_all,
                   first_step=step_all, class_names=list(ds.classes), group_names=list(ds.group_names),
                   has_groups=has_groups, radii=radii, eps=eps_label)
    if kept is not None:
        out.adv_inputs = {name: torch.cat([a.float().cpu() for a in xs]) for name, xs in kept.items()}
    if sweep:
        for name, _ in named:
            out.min_eps[f"sweep:{name}"] = _sweep_min_eps(out, name)
    out.meta = {"device": str(dev), "seed": seed, "batch_size": int(batch_size), "precision": precision,
                "channels_last": bool(channels_last), "early_exit": bool(early_exit),
                "seconds": round(time.perf_counter() - t0, 3),
                "attack_seconds": {k: round(v, 3) for k, v in timings.items()},
                "attack_units": dict(units),
                "attacked_samples": attacked if sweep else {k: v[0] for k, v in attacked.items()},
                "refilled": [name for name, _ in named if name in refilled]}
    out.warnings = outcome_warnings(out) + [f"[{name}] {w}" for name, ws in said.items() for w in ws]
    return out


def validate_model(model: nn.Module, dataset: Any, *, batch_size: int = 256, device: str | torch.device | None = "auto",
                   precision: str = "fp32", channels_last: bool | None = None, gradients: bool = True) -> None:
    """The check :func:`evaluate` makes on its first batch, alone (``robfair leaderboard`` runs it on
    every model before the first audit starts): the model takes the dataset's first batch and
    returns finite (N, K) logits, with input gradients when ``gradients``; else one ModelError line."""
    if len(dataset) == 0:
        raise DataError("the dataset is empty; check the path and the split")
    dev = resolve_device(device)
    precision = check_precision(precision, dev, what="precision")
    channels_last = wants_channels_last(model, channels_last)
    x, _y, _g = next(iter(dataset.batches(int(batch_size), device=dev)))
    if channels_last:
        x = to_channels_last(x)
    with evaluation_model(model, dev, channels_last) as net:
        _first_batch(net, x, dataset.num_classes, precision, gradients)


def _first_batch(net: nn.Module, x: torch.Tensor, num_classes: int, precision: str, gradients: bool) -> torch.Tensor:
    """The first batch's logits under ``precision``, checked (:func:`robfair.models.validate.
    check_model_output`; with ``gradients``, also that they have input gradients)."""
    with autocast(x.device, precision):
        z = check_model_output(net, x, num_classes, precision=precision)
    if gradients:
        check_input_gradient(net, x)
    return z


def refills(attack: Any, early_exit: bool) -> bool:
    """True for the attacks :func:`evaluate` streams with refill: robfair's own multi-step PGD in
    evaluation mode (first success kept) with early exit; FGSM, AutoAttack, subclasses that change
    the attack and plain callables run batch by batch."""
    t = type(attack)
    return (bool(early_exit) and isinstance(attack, PGD) and not isinstance(attack, FGSM)
            and attack.keep == "first-success" and attack.steps > 0 and t.run is Attack.run
            and t.stream is PGD.stream and t.perturb_result is PGD.perturb_result)


def _timed(it: Any, acc: list[float]) -> Any:
    """``it``, adding to ``acc[0]`` the seconds spent producing each item."""
    it = iter(it)
    while True:
        t = time.perf_counter()
        try:
            item = next(it)
        except StopIteration:
            acc[0] += time.perf_counter() - t
            return
        acc[0] += time.perf_counter() - t
        yield item


def _refill_pass(atk: Any, net: nn.Module, source: Any, name: str, j: int, balls: list[Radius] | None, eps_v: Any,
                 monotone: bool, dev: torch.device, seed: int, idx: torch.Tensor, bs: int, y_all: np.ndarray,
                 clean_all: np.ndarray, adv: np.ndarray, step: np.ndarray, attacked: list[int],
                 said: list[str], adv_out: list[torch.Tensor] | None = None) -> None:
    """One attack (radius ``balls[j]`` of a sweep) over every batch of ``source`` with ``PGD.stream``:
    the active batch refills from the batches still to come. Each batch is one chunk with its own
    generator (:func:`batch_generator`, as batch by batch), and a sweep's chunk holds the samples
    :func:`_sweep_batch` would attack, so the outcomes equal the batch-by-batch path's."""
    pending: deque = deque()

    def chunks() -> Any:
        for pos, x, y in source:
            m = x.shape[0]
            first = int(idx[pos])
            if balls is None:
                e_b = eps_v.batch(pos, m, dev)
                pending.append((pos, None))
                yield Chunk(x, y, e_b, generator=batch_generator(dev, seed, name, first))
                continue
            sl = slice(pos, pos + m)
            prev = adv[j - 1, sl] if monotone and j > 0 else clean_all[sl]
            adv[j, sl] = prev
            if monotone and j > 0:
                step[j, sl] = step[j - 1, sl]
            act = np.flatnonzero(prev == y_all[sl])  # not yet fooled (monotone) / clean-correct
            if act.size == 0:
                continue
            a = torch.from_numpy(act).to(x.device)
            pending.append((pos, act))
            yield Chunk(x[a], y[a], balls[j], generator=batch_generator(dev, seed, name, first, float(balls[j].value)))

    for res in atk.stream(net, chunks(), early_exit=True, batch_size=bs):
        pos, act = pending.popleft()
        p, s = res.adv_pred.cpu().numpy(), res.fooled_step.cpu().numpy()
        said += [w for w in res.warnings if w not in said]
        if act is None:
            if adv_out is not None:
                adv_out.append(res.x_adv.detach())
            adv[0, pos:pos + p.size] = p
            step[0, pos:pos + p.size] = s
            attacked[0] += p.size
            continue
        attacked[j] += act.size
        keep = p != y_all[pos + act] if monotone else np.ones(act.size, dtype=bool)
        adv[j, pos + act[keep]] = p[keep]
        step[j, pos + act[keep]] = s[keep]


def _sweep_batch(atk: Any, net: nn.Module, x: torch.Tensor, y: torch.Tensor, clean: torch.Tensor,
                 radii: list[Radius], gens: list[torch.Generator], monotone: bool, early_exit: bool, precision: str,
                 adv_out: np.ndarray, step_out: np.ndarray, attacked: list[int], said: list[str]) -> None:
    """One batch of an eps sweep for one attack: rows of ``adv_out`` / ``step_out`` per radius."""
    witness = clean.clone()  # prediction under the smallest perturbation found so far
    fooled = clean != y  # robust errors so far (clean mistakes at every radius)
    step = torch.full_like(clean, NOT_FOOLED)
    for j, e in enumerate(radii):
        active = (~fooled if monotone else clean == y).nonzero().squeeze(1)
        pred = witness if monotone else clean.clone()
        st = step if monotone else torch.full_like(clean, NOT_FOOLED)
        if e.max() > 0 and active.numel():
            p, s = run_attack(atk, net, x[active], y[active], e, generator=gens[j], early_exit=early_exit,
                              precision=precision, warnings=said)
            attacked[j] += int(active.numel())
            if monotone:
                hit = p != y[active]
                witness[active[hit]] = p[hit]
                fooled[active[hit]] = True
                step[active[hit]] = s[hit]
            else:
                pred[active] = p
                st[active] = s
        adv_out[j] = pred.cpu().numpy()
        step_out[j] = st.cpu().numpy()


def _sweep_min_eps(out: Outcomes, name: str) -> np.ndarray:
    """Per sample the smallest radius of the sweep at which it is a robust error (inf: none)."""
    radii = np.asarray(out.radii, dtype=np.float64)
    wrong = out.adv_pred[name] != out.y[None, :]  # (R, n)
    wrong |= (out.clean_pred != out.y)[None, :]
    first = np.where(wrong.any(0), wrong.argmax(0), -1)
    return np.where(first >= 0, radii[np.clip(first, 0, None)], np.inf)
