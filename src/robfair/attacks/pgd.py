"""PGD (Madry et al. 2018) and FGSM / RS-FGSM, L-inf or L2, CE or CW loss, restarts, targeted.

Evaluation semantics (``keep="first-success"``, the default)
    Every iterate is checked, the random start included. A sample that is misclassified by some
    iterate is *fooled*, and the returned ``x_adv`` is its **first** fooling iterate, frozen. A
    sample never fooled gets its final iterate. With restarts (or targets), the first run that
    fools a sample wins, and a sample no run fools gets the final iterate of the run with the
    highest score (the loss; for targeted runs the untargeted margin ``max_{j!=y} z_j - z_y``, which
    is comparable across targets). Success is judged on the logits the attack computes itself:
    :meth:`~robfair.attacks.Attack.run` returns them as ``adv_pred`` with the step and run of first
    success (no second forward). Under ``bf16`` / ``fp16`` a success is confirmed in fp32 before it
    counts, and the last iterate is checked in fp32.

    The check at iterate ``t`` reuses the logits of the forward pass that computes the gradient at
    ``t``; only the last iterate needs one extra forward. PGD-k therefore costs k forward+input-grad
    passes plus one forward per run. Under ``bf16`` / ``fp16`` the extra forwards are fp32 ones, one
    per sample: its success confirmed once (plus any reduced-precision success fp32 rejects), or its
    last iterate checked; a sample already fooled is never forwarded in fp32 again, early exit or not.

Targeted attacks (``targeted=True``; names ``-t``, ``-t<k>``, ``-trand``)
    ``y`` is always the **true** label; the targets come from a stated rule, never from ``y``:
    ``targets="top"`` attacks the ``n_targets`` most likely other classes by clean logit, one run
    each (default ``min(9, K - 1)``, as AutoAttack's APGD-T), and a sample counts as fooled if any
    run misclassifies it (the worst case over targets); ``targets="random"`` draws one other class
    per sample with the caller's generator. An explicit ``targets=`` tensor ((N,) or (N, k)) may
    be passed to :meth:`run`; a target equal to the true label is refused. Losses: ``ce`` is minus
    the cross-entropy to the target, ``cw`` the targeted margin ``z_t - z_y``.

Early exit and streaming
    ``early_exit=True`` removes fooled samples from the active batch, so later steps get cheaper.
    :meth:`PGD.stream` goes further: it attacks a sequence of chunks (e.g. a dataset's batches) and
    refills the active batch from the chunks still to come, so late steps still run at full batch
    size. A sample whose next forward is only the check of its last iterate leaves the gradient
    batch at once (its place refills) and waits for a batch of such checks, run without gradient.
    Up to MAX_LOADED chunks are held, more while their state fits in LOAD_BUDGET (a chunk is
    yielded when its slowest sample is done, k + 1 passes at most, and the chunks behind it must
    keep the batch full meanwhile). Every sample's computation depends only on itself (eval
    mode) and its random starts are drawn when its chunk is loaded, for the whole chunk, run after
    run, so the outcome per sample, the generator's state afterwards and the result of each chunk
    are the same with and without early exit, and the same streamed or chunk by chunk.

Training semantics (``keep="last"``)
    Returns the plain last iterate (the usual adversarial-training input) and skips the success
    checks and the final forward. With several runs, per sample the first run whose last iterate
    fools (else the highest score). ``early_exit`` is refused: it would freeze samples at their
    first success.

Why one module: FGSM and PGD share the step, the projection and the streaming machinery
that refills the active batch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch
from torch import nn

from ..errors import AttackError
from .attack import (LOSSES, NEVER, NORMS, Attack, AttackResult, as_eps, ascent_step, check_choice, check_inputs,
                   eval_mode, per_sample_loss, project, random_start)
from .names import ATTACKS

KEEPS = ("first-success", "last")
TARGET_RULES = ("top", "random")
#: target classes of the default ``-t`` rule (AutoAttack's APGD-T uses 9), capped at K - 1
DEFAULT_TARGETS = 9
#: chunks a stream may always hold at once (the active batch refills from them) ...
MAX_LOADED = 4
#: ... and more while the loaded chunks' state (inputs, results, random starts) stays under this many
#: bytes: a chunk waits for its slowest sample (up to k + 1 passes), and fast-fooled chunks behind it
#: must keep the batch full meanwhile
LOAD_BUDGET = 256 << 20


@dataclass
class Chunk:
    """One piece of a stream: images ``x`` in [0, 1], **true** labels ``y``, ``eps`` (a float or an
    (N,) tensor, checked; or a :class:`~robfair.attacks.radius.Radius`, trusted), optionally the clean ``logits`` (they rank the targets of ``-t`` without another
    forward) and explicit ``targets`` ((N,) or (N, k)). ``generator``: this chunk's own random
    generator (its random starts and random targets); None uses the stream's."""

    x: torch.Tensor
    y: torch.Tensor
    eps: Any
    logits: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    generator: torch.Generator | None = None


class PGD(Attack):
    """PGD: k steps of projected steepest ascent from a random start in each sample's own ball.

    Args:
        steps: number of gradient steps k (0 returns the start).
        norm: ``"linf"`` (sign steps) or ``"l2"`` (normalized-gradient steps).
        step: absolute step size, a float or an (N,) tensor; ``None`` (default) uses
            ``rel_step * eps_i`` per sample.
        rel_step: step relative to each sample's epsilon; 0.25 gives the standard 2/255 at 8/255.
        random_start: start uniformly inside each sample's ball (L-inf: U(-eps_i, eps_i) per pixel;
            L2: uniform in the L2 ball of radius eps_i); otherwise start at x.
        restarts: independent random starts; per sample the first that fools wins, else the
            highest final score.
        loss: ``"ce"`` (cross-entropy) or ``"cw"`` (Carlini-Wagner margin).
        targeted: attack towards target classes chosen by ``targets`` (``y`` stays the true label).
        targets: the target rule: ``"top"`` (the ``n_targets`` most likely other classes by clean
            logit, the worst case over them) or ``"random"`` (one seeded random other class).
        n_targets: targets of the ``"top"`` rule; ``None`` = ``min(9, K - 1)``; capped at ``K - 1``.
        temperature: logits are divided by it inside the loss (temperature-scaled PGD).
        keep: ``"first-success"`` (evaluation, default; alias ``"best"``) or ``"last"`` (training);
            see the module doc.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` autocast for the forward passes.
    """

    family = "pgd"

    def __init__(self, steps: int = 10, *, norm: str = "linf", step: float | torch.Tensor | None = None,
                 rel_step: float = 0.25, random_start: bool = True, restarts: int = 1, loss: str = "ce",
                 targeted: bool = False, targets: str = "top", n_targets: int | None = None,
                 temperature: float = 1.0, keep: str = "first-success", precision: str = "fp32",
                 name: str | None = None) -> None:
        super().__init__(precision=precision)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise AttackError(f"PGD steps must be an integer >= 0, got {steps!r}; use e.g. steps=10")
        if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 1:
            raise AttackError(f"PGD restarts must be an integer >= 1, got {restarts!r}; use e.g. restarts=5")
        if not rel_step > 0:
            raise AttackError(f"rel_step must be > 0, got {rel_step!r}; use e.g. 0.25 (2/255 at 8/255)")
        if not temperature > 0:
            raise AttackError(f"temperature must be > 0, got {temperature!r}; use 1.0 for plain logits")
        if step is not None and not isinstance(step, torch.Tensor) and not float(step) >= 0:
            raise AttackError(f"step must be >= 0, got {step!r}; use e.g. 2/255 or leave it None for eps/4")
        rule = check_choice(targets, TARGET_RULES, "target rule")
        if n_targets is not None and (isinstance(n_targets, bool) or not isinstance(n_targets, int) or n_targets < 1):
            raise AttackError(f"n_targets must be an integer >= 1, got {n_targets!r}; use e.g. -t3 for 3 targets")
        if rule == "random" and n_targets not in (None, 1):
            raise AttackError("the random target rule draws one target per sample; drop n_targets or use -t<k>")
        self.steps = steps
        self.norm = check_choice(norm, NORMS, "norm")
        self.step = step
        self.rel_step = float(rel_step)
        self.random_start = bool(random_start)
        self.restarts = restarts
        self.loss = check_choice(loss, LOSSES, "loss")
        self.targeted = bool(targeted)
        self.targets = rule
        self.n_targets = n_targets
        self.temperature = float(temperature)
        self.keep = check_choice("first-success" if keep == "best" else keep, KEEPS, "keep")
        self.name = name or self._default_name()

    def _default_name(self) -> str:
        parts = [f"{self.family}{self.steps}" if self.family == "pgd" else self.family]
        if self.norm == "l2":
            parts.append("l2")
        if self.loss == "cw":
            parts.append("cw")
        if self.restarts > 1:
            parts.append(f"r{self.restarts}")
        if self.targeted:
            parts.append("trand" if self.targets == "random" else f"t{self.n_targets or ''}")
        return "-".join(parts)

    def step_sizes(self, eps: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Per-sample step sizes shaped like ``eps``: ``step`` if given, else ``rel_step * eps_i``."""
        if self.step is None:
            return eps * self.rel_step
        return as_eps(self.step, x, what="step")

    # -- the attack ----------------------------------------------------------------------------
    def perturb(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: torch.Tensor, *,
                generator: torch.Generator | None, early_exit: bool) -> torch.Tensor:
        return self.perturb_result(model, x, y, eps, generator=generator, early_exit=early_exit, predict=False).x_adv

    def perturb_result(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: torch.Tensor, *,
                       generator: torch.Generator | None, early_exit: bool, predict: bool,
                       targets: torch.Tensor | None = None) -> AttackResult:
        pool = _Pool(self, model, iter([Chunk(x, y, eps, targets=targets)]), generator, early_exit,
                     batch_size=x.shape[0], predict=predict, checked=True)
        (res,) = pool.advance()
        return res

    def stream(self, model: nn.Module, chunks: Iterable[Chunk | tuple], *, generator: torch.Generator | None = None,
               early_exit: bool = True, batch_size: int | None = None, predict: bool = True) -> Iterator[AttackResult]:
        """Attack every chunk of ``chunks`` (``Chunk`` objects or ``(x, y, eps[, logits])``
        tuples) and yield one :class:`AttackResult` per chunk, in order. The active batch
        (``batch_size``, default: the first chunk's size) is refilled from the chunks still to come
        as samples leave it, so late steps run at full batch. Each chunk's result equals
        ``run(model, x, y, eps, generator=...)`` chunk by chunk with the same generator (a chunk
        with its own ``Chunk.generator``: ``run`` with that one)."""
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
            raise AttackError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        model = self._prepare(model)
        pool = _Pool(self, model, iter(chunks), generator, early_exit, batch_size=batch_size, predict=predict)
        while True:
            with eval_mode(model), torch.enable_grad():
                ready = pool.advance()
            if not ready:
                return
            yield from ready

    # -- pieces the pool uses --------------------------------------------------------------------
    def _targets(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor | None,
                 explicit: torch.Tensor | None, generator: torch.Generator | None) -> torch.Tensor | None:
        """(N, k) target classes by the rule (never the true label), or None when untargeted."""
        if not self.targeted:
            if explicit is not None:
                raise AttackError(f"attack '{self.name}' is untargeted but targets were given; use a -t attack")
            return None
        n = x.shape[0]
        if logits is None:  # in eval mode even for a train-mode attack: no batch-norm update, any batch size
            with torch.no_grad(), eval_mode(model):
                logits = self.logits(model, x if explicit is None and self.targets == "top" else x[:1])
        k_classes = int(logits.shape[1])
        if k_classes < 2:
            raise AttackError(f"a targeted attack needs at least 2 classes, the model has {k_classes}")
        if explicit is not None:
            t = torch.as_tensor(explicit, device=x.device).long()
            t = t[:, None] if t.dim() == 1 else t
            if t.dim() != 2 or t.shape[0] != n or t.shape[1] < 1:
                raise AttackError(f"targets must have shape ({n},) or ({n}, k), got {tuple(t.shape)}")
            if n and (bool((t < 0).any()) or bool((t >= k_classes).any())):
                raise AttackError(f"targets must be class indices in [0, {k_classes}); got some outside")
            if n and bool((t == y[:, None]).any()):
                raise AttackError("a target equals the sample's true label, which measures clean accuracy; "
                                  "pass other classes as targets or use the -t / -trand rules")
            return t
        if self.targets == "random":
            dev = generator.device if generator is not None else x.device
            r = torch.randint(1, k_classes, (n,), generator=generator, device=dev).to(x.device)
            return ((y + r) % k_classes)[:, None]
        k = min(self.n_targets or DEFAULT_TARGETS, k_classes - 1)
        z = logits.detach().float().scatter(1, y[:, None], float("-inf"))
        return z.topk(k, dim=1).indices

    def _score(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """What picks among the runs that did not fool a sample: the loss (untargeted) or the
        untargeted margin (targeted runs: comparable across targets)."""
        if self.targeted:
            return per_sample_loss(z, y, "cw")
        return per_sample_loss(z, y, self.loss, temperature=self.temperature)

    def _prepare(self, model: nn.Module) -> nn.Module:
        if torch.is_inference_mode_enabled():
            raise AttackError("attacks need input gradients; call the attack outside torch.inference_mode()")
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        return model


class _ChunkState:
    """A loaded chunk: its inputs, the targets and random starts of every run (drawn at load, for
    the whole chunk, run after run), and the per-sample results."""

    def __init__(self, atk: PGD, model: nn.Module, chunk: Chunk, generator: torch.Generator | None,
                 checked: bool) -> None:
        x, y = (chunk.x, chunk.y) if checked else check_inputs(chunk.x, chunk.y)
        eps = chunk.eps if checked else as_eps(chunk.eps, x)
        n = x.shape[0]
        self.n, self.x, self.y, self.eps = n, x, y, eps
        self.step = atk.step_sizes(eps, x) if n else eps
        self.targets = atk._targets(model, x, y, chunk.logits, chunk.targets, generator) if n else None
        n_t = 1 if self.targets is None else self.targets.shape[1]
        self.runs = n_t * atk.restarts
        self.restarts = atk.restarts
        self.starts = None
        if atk.random_start and n:
            self.starts = torch.stack([random_start(x, eps, atk.norm, generator) for _ in range(self.runs)])
        dev = x.device
        self.out = x.clone()
        self.pred = torch.full((n,), NEVER, dtype=torch.long, device=dev)
        self.done = torch.zeros(n, dtype=torch.bool, device=dev)
        self.fstep = torch.full((n,), NEVER, dtype=torch.long, device=dev)
        self.frun = torch.full((n,), NEVER, dtype=torch.long, device=dev)
        self.entered = 0
        self.left = 0
        self.nbytes = 2 * x.nbytes + (0 if self.starts is None else self.starts.nbytes)

    def start(self, run: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return self.x[i] if self.starts is None else self.starts[run, i]

    def target(self, run: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        if self.targets is None:
            return torch.full_like(i, -1)
        return self.targets[i, torch.div(run, self.restarts, rounding_mode="floor")]

    def result(self, atk: PGD, model: nn.Module, predict: bool) -> AttackResult:
        if predict and self.n and atk.keep == "last" and self.runs == 1:  # training attack asked for predictions
            with torch.no_grad():
                self.pred = atk.logits_fp32(model, self.out).argmax(1)
            self.done = self.pred != self.y
            self.fstep = torch.where(self.done, atk.steps, NEVER)
            self.frun = torch.where(self.done, 0, NEVER)
        return AttackResult(self.out, self.pred, self.done, self.fstep, self.frun)


class _Pool:
    """The active batch of a PGD run: one row per sample being attacked, each at its own run and
    step, refilled from the loaded chunks (and the input iterator) as rows leave."""

    def __init__(self, atk: PGD, model: nn.Module, chunks: Iterator[Chunk | tuple], generator, early_exit: bool,
                 batch_size: int | None, predict: bool, checked: bool = False) -> None:
        if early_exit and atk.keep == "last":
            raise AttackError("early_exit freezes samples at their first success, which keep='last' does not want; "
                              "use early_exit=False for training or keep='first-success' for evaluation")
        self.atk, self.model, self.chunks, self.gen = atk, model, chunks, generator
        self.early_exit, self.predict, self.checked = early_exit, predict, checked
        self.batch = batch_size
        self.loaded: dict[int, _ChunkState] = {}
        self.order: list[int] = []  # ids of loaded chunks, oldest first
        self.next_id = 0
        self.exhausted = False
        self.rows: dict[str, torch.Tensor] | None = None
        self.layout: tuple[int, ...] | None = None
        # rows whose last forward is only the final check (last step of their last run): they
        # leave the gradient batch and are checked together in one no-grad forward
        self.checks: list[dict[str, torch.Tensor]] = []
        self.n_checks = 0
        self.loaded_bytes = 0
        self.n_classes = 0  # the model's logits, known after the first forward

    def _can_load(self) -> bool:
        """Another chunk may be loaded: MAX_LOADED always, more within LOAD_BUDGET."""
        return not self.exhausted and (len(self.order) < MAX_LOADED or self.loaded_bytes < LOAD_BUDGET)

    # -- input ------------------------------------------------------------------------------
    def _load(self) -> bool:
        if not self._can_load():
            return False
        try:
            item = next(self.chunks)
        except StopIteration:
            self.exhausted = True
            return False
        if not isinstance(item, Chunk):
            if not isinstance(item, (tuple, list)) or len(item) not in (3, 4):
                raise AttackError("a stream yields Chunk objects or (x, y, eps[, clean_logits]) tuples")
            item = Chunk(*item)
        gen = item.generator if item.generator is not None else self.gen
        cs = _ChunkState(self.atk, self.model, item, gen, self.checked)
        if self.batch is None:
            self.batch = max(1, cs.n)
        if self.layout is None and cs.n and cs.x.stride(0) == cs.x[0].numel():
            self.layout = tuple(cs.x.stride()[1:])
        self.loaded[self.next_id] = cs
        self.loaded_bytes += cs.nbytes
        self.order.append(self.next_id)
        self.next_id += 1
        return True

    def _fill(self) -> None:
        if self.batch is None and not self._load():
            return
        active = 0 if self.rows is None else self.rows["i"].shape[0]
        new = []
        while active < self.batch:
            cid = next((c for c in self.order if self.loaded[c].entered < self.loaded[c].n), None)
            if cid is None:
                if not self._load():
                    break
                continue
            cs = self.loaded[cid]
            m = min(self.batch - active, cs.n - cs.entered)
            i = torch.arange(cs.entered, cs.entered + m, device=cs.x.device)
            cs.entered += m
            active += m
            zero = torch.zeros_like(i)
            new.append(dict(c=torch.full_like(i, cid), i=i, run=zero, t=zero.clone(), xa=cs.start(zero, i),
                            x=cs.x[i], y=cs.y[i], eps=cs.eps[i], step=cs.step[i], tgt=cs.target(zero, i),
                            done=torch.zeros_like(i, dtype=torch.bool),
                            best=torch.full(i.shape, float("-inf"), dtype=torch.float64, device=i.device),
                            runs=torch.full_like(i, cs.runs)))
        if not new:
            return
        if self.rows is not None:
            new.insert(0, self.rows)
        self.rows = {k: torch.cat([r[k] for r in new]) if len(new) > 1 else new[0][k] for k in new[0]}
        self.rows["xa"] = self._relayout(self.rows["xa"].detach())

    def _relayout(self, t: torch.Tensor) -> torch.Tensor:
        """Keep the input's memory layout (e.g. channels_last, 1-channel images included)."""
        if self.layout is None or tuple(t.stride()[1:]) == self.layout or t.shape[0] == 0:
            return t
        out = torch.empty_strided(t.shape, (t[0].numel(),) + self.layout, dtype=t.dtype, device=t.device)
        return out.copy_(t)

    # -- the loop ---------------------------------------------------------------------------
    def advance(self) -> list[AttackResult]:
        """Iterate until the oldest loaded chunk is finished; return the finished chunks' results
        (oldest first); an empty list once the input is exhausted."""
        while True:
            ready = []
            while self.order and self.loaded[self.order[0]].left == self.loaded[self.order[0]].n:
                cs = self.loaded.pop(self.order.pop(0))
                self.loaded_bytes -= cs.nbytes
                ready.append(cs.result(self.atk, self.model, self.predict))
            if ready:
                return ready
            if not self._iterate():
                return []

    def _by_chunk(self, mask: torch.Tensor, R: dict[str, torch.Tensor] | None = None):
        R = self.rows if R is None else R
        rows = mask.nonzero().squeeze(1)
        if rows.numel() == 0:
            return
        cids = R["c"][rows]
        for cid in torch.unique(cids).tolist():
            sel = rows[cids == cid]
            yield self.loaded[cid], sel, R["i"][sel]

    def _iterate(self) -> bool:
        """One forward (+ input gradient) over the active rows, or the no-grad final check of
        the rows waiting for it. False when nothing is left."""
        self._fill()
        self._finish_plain()
        R = self.rows
        active = 0 if R is None else R["i"].shape[0]
        if active == 0:
            if self.checks:
                self._check_final()
                return True
            # nothing active: whatever is loaded is finished (or nothing is left at all)
            if self.order and self.loaded[self.order[0]].left != self.loaded[self.order[0]].n:
                raise RuntimeError("PGD stream stalled with unfinished samples and no active rows")
            return bool(self.order)
        self.rows = self._pass(R)
        if self.checks and (self.n_checks >= self.batch or self._blocked(active)):
            self._check_final()
        return True

    def _blocked(self, active: int) -> bool:
        """The batch is under-full because no more chunks may be loaded, and the oldest chunk
        waits only for final checks set aside: checking them frees it."""
        if active >= self.batch or self.exhausted or self._can_load() or not self.order:
            return False
        cs = self.loaded[self.order[0]]
        waiting = sum(int((r["c"] == self.order[0]).sum()) for r in self.checks)
        return waiting == cs.n - cs.left

    def _check_final(self) -> None:
        """The final check of the rows set aside (at most one batch, oldest first), in one
        forward without gradient."""
        parts, self.checks, self.n_checks = self.checks, [], 0
        R = parts[0] if len(parts) == 1 else {k: torch.cat([r[k] for r in parts]) for k in parts[0]}
        n = R["i"].shape[0]
        if n > self.batch:  # the rest waits for the next check
            self.checks, self.n_checks = [{k: v[self.batch:] for k, v in R.items()}], n - self.batch
            R = {k: v[:self.batch] for k, v in R.items()}
        R["xa"] = self._relayout(R["xa"])
        rest = self._pass(R)
        if rest is not None and rest["i"].shape[0]:
            raise RuntimeError("PGD stream: a row kept its place after its final check")

    def _pass(self, R: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """One forward over the rows ``R`` (with the input gradient unless all are final), the
        success checks and the next step; returns the rows that stay."""
        atk, model = self.atk, self.model
        steps = atk.steps
        track = atk.keep == "first-success"
        final = R["t"] == steps
        half = atk.precision != "fp32"
        tgt = R["tgt"] if atk.targeted else None
        xa = R["xa"]
        # under bf16 / fp16 the fp32 forwards (confirmations, last iterates) skip the rows already
        # fooled: their result is frozen and was confirmed once, so fp32 has nothing left to decide
        live = ~R["done"]
        if bool(final.all()):
            grad = None
            with torch.no_grad():
                if not half:
                    z = atk.logits(model, xa)
                elif bool(live.all()):
                    z = atk.logits_fp32(model, xa)
                else:
                    z = self._fp32_rows(xa, final & live)
            exact = live if half else final
        else:
            xa.requires_grad_(True)
            z = atk.logits(model, xa)
            loss = per_sample_loss(z, R["y"], atk.loss, target=tgt, temperature=atk.temperature)
            (grad,) = torch.autograd.grad(loss.sum(), xa)
            xa = xa.detach()
            z = z.detach()
            exact = torch.zeros_like(final)
            if half and bool((final & live).any()):  # the last iterate is judged in fp32
                exact = final & live
                z = self._fp32_rows(xa, exact, z)
        self.n_classes = int(z.shape[1])
        check = final if not track else torch.ones_like(final)
        pred = z.argmax(1)
        fooled = (pred != R["y"]) & check
        if half and bool((fooled & ~exact & live).any()):  # confirm half-precision successes in fp32
            cand = (fooled & ~exact & live).nonzero().squeeze(1)
            with torch.no_grad():
                p32 = atk.logits_fp32(model, xa[cand]).argmax(1)
            pred = pred.clone()
            pred[cand] = p32
            fooled[cand] = p32 != R["y"][cand]
        new = fooled & ~R["done"]
        if bool(new.any()):
            for cs, sel, i in self._by_chunk(new, R):
                cs.out[i] = xa[sel]
                cs.pred[i] = pred[sel]
                cs.fstep[i] = R["t"][sel]
                cs.frun[i] = R["run"][sel]
                cs.done[i] = True
            R["done"] = R["done"] | new
        if bool(final.any()):
            score = atk._score(z, R["y"]).double()
            better = final & ~fooled & ~R["done"] & ((score > R["best"]) | (R["run"] == 0))
            if bool(better.any()):
                for cs, sel, i in self._by_chunk(better, R):
                    cs.out[i] = xa[sel]
                    cs.pred[i] = pred[sel]
                R["best"] = torch.where(better, score, R["best"])
        leave = final & (R["run"] + 1 >= R["runs"])
        if self.early_exit and track:
            leave = leave | R["done"]
        nxt = final & ~leave
        go = ~final & ~leave
        if bool(go.any()):
            # the step for every row (elementwise, per row): the rows that do not go either leave
            # or restart below, so no gather is needed
            xa = project(ascent_step(xa, grad, R["step"], atk.norm), R["x"], R["eps"], atk.norm)
            R["t"] = R["t"] + go.long()
        if bool(nxt.any()):
            xa = xa.clone() if not bool(go.any()) else xa
            for cs, sel, i in self._by_chunk(nxt, R):
                run = R["run"][sel] + 1
                xa[sel] = cs.start(run, i)
                R["tgt"][sel] = cs.target(run, i)
                R["run"][sel] = run
                R["t"][sel] = 0
        R["xa"] = xa
        return self._drop(leave, R)

    def _fp32_rows(self, xa: torch.Tensor, rows: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        """``z`` (zeros where None: rows already fooled, whose logits decide nothing) with the
        fp32 logits of the rows ``rows`` (a mask), computed without gradient."""
        idx = rows.nonzero().squeeze(1)
        with torch.no_grad():
            z32 = self.atk.logits_fp32(self.model, xa[idx]) if idx.numel() else None
        if z is None:
            dtype = torch.float32 if z32 is None else z32.dtype
            z = torch.zeros((xa.shape[0], self.n_classes), dtype=dtype, device=xa.device)
        else:
            z = z.clone()
        if z32 is not None:
            z[idx] = z32.to(z.dtype)
        return z

    def _finish_plain(self) -> None:
        """Training, one run: a row whose last step is done returns its plain last iterate."""
        R = self.rows
        if R is None or self.atk.keep != "last" or R["i"].shape[0] == 0:
            return
        fin = (R["t"] == self.atk.steps) & (R["runs"] == 1)
        if bool(fin.any()):
            for cs, sel, i in self._by_chunk(fin):
                cs.out[i] = R["xa"][sel]
            self._drop(fin)

    def _drop(self, leave: torch.Tensor, R: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor] | None:
        """Count the rows ``leave`` of ``R`` (default: the active rows) as finished, and (evaluation)
        set aside the rows whose next forward is only their final check (last step of their last
        run): they leave the gradient batch, whose free places refill, and are checked together
        without gradient (:meth:`_check_final`). Return the rest (the active rows are replaced by
        it when ``R`` is None)."""
        rows = self.rows if R is None else R
        out = leave
        if self.atk.keep == "first-success":
            aside = (rows["t"] == self.atk.steps) & (rows["run"] + 1 >= rows["runs"]) & ~leave
            if bool(aside.any()):
                self.checks.append(self._take(rows, aside.nonzero().squeeze(1)))
                self.n_checks += self.checks[-1]["i"].shape[0]
                out = leave | aside
        any_leave = bool(leave.any())
        if any_leave:
            cids, counts = torch.unique(rows["c"][leave], return_counts=True)
            for cid, m in zip(cids.tolist(), counts.tolist()):
                self.loaded[cid].left += m
        if out is not leave or any_leave:
            rows = self._take(rows, (~out).nonzero().squeeze(1))
        if R is None:
            self.rows = rows
        return rows

    def _take(self, rows: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """The rows ``idx`` (an index tensor: one nonzero for all the columns), input layout kept."""
        sub = {k: v.index_select(0, idx) for k, v in rows.items()}
        sub["xa"] = self._relayout(sub["xa"])
        return sub

class FGSM(PGD):
    """FGSM (Goodfellow et al. 2015): one step of size eps along the gradient sign (L2: the
    normalized gradient). ``random_start=True`` gives RS-FGSM (Wong et al. 2020, "fast is better than
    free"): start U(-eps_i, eps_i), step 1.25 * eps_i, projected back to the ball."""

    def __init__(self, *, norm: str = "linf", random_start: bool = False, step: float | torch.Tensor | None = None,
                 rel_step: float | None = None, loss: str = "ce", targeted: bool = False, temperature: float = 1.0,
                 keep: str = "first-success", precision: str = "fp32", name: str | None = None) -> None:
        self.family = "rs-fgsm" if random_start else "fgsm"
        if rel_step is None:
            rel_step = 1.25 if random_start else 1.0
        super().__init__(1, norm=norm, step=step, rel_step=rel_step, random_start=random_start, restarts=1,
                         loss=loss, targeted=targeted, temperature=temperature, keep=keep, precision=precision,
                         name=name)


ATTACKS.add("fgsm", functools.partial(FGSM, random_start=False),
            help="FGSM: one step of size eps along the gradient sign (L2: normalized gradient)",
            forms=("fgsm", "fgsm-l2", "fgsm-cw", "fgsm-t"))
ATTACKS.add("rs-fgsm", functools.partial(FGSM, random_start=True),
            help="RS-FGSM (Wong et al. 2020): random start, one step of 1.25 eps, projected",
            forms=("rs-fgsm", "rs-fgsm-l2"))
ATTACKS.add("pgd", PGD, help="PGD-k (Madry): k steps of eps/4 from a random start in each sample's ball",
            label="pgd<k>", counted="steps",
            forms=("pgd10", "pgd20", "pgd20-l2", "pgd20-t", "pgd20-t3", "pgd10-trand", "pgd50-cw-r5"))
