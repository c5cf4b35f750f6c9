"""What a training method is: a batch loss plus optional hooks. It never owns the loop.

A method is one class in one file, registered with one line::

    @METHODS.register("my-method", help="one line shown by `robfair methods`")
    class MyMethod(Method):
        class Options(TradesOptions):           # validated from the config's `method_options`
            gamma: float = Field(1.0, ge=0)       # (TradesOptions: beta; BasedOptions: base + beta)

        default_attack = "pgd10"                # the training attack when the config names none

        def loss(self, model, x, y, g, ctx):
            x_adv = self.adversarial(model, x, y, ctx)   # the training attack, each sample at sample_eps(y)
            logits = model(x_adv)
            ctx.record(logits, y)               # counted as training accuracy (optional)
            return F.cross_entropy(logits, y, weight=self.class_weights())

The trainer sets ``method.ctx`` (a :class:`TrainContext`) before ``on_train_start``. Per-class hooks
(``class_weights``, ``class_eps``) return a (K,) tensor on ``ctx.device`` or None; a method that
updates them in ``on_epoch_end`` from the validation report (FRL's dual step, WAT's Hedge weights)
saves its state in ``state_dict`` so a resumed run continues exactly, and reports it in
``epoch_state`` so it lands in ``metrics.jsonl``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...attacks import ATTACKS, get_attack, parse_attack_name, require_target_rule
from ...errors import ConfigError, RobfairError, one_line
from ...registry import Registry


class _MethodRegistry(Registry):
    """The method registry: a registered class that does not set its own ``name`` gets the
    registered one (errors and listings name the method, not its base class)."""

    def add(self, name: str, obj: Any, **kw: Any) -> None:
        super().add(name, obj, **kw)
        if isinstance(obj, type) and "name" not in vars(obj):
            obj.name = name


METHODS: Registry = _MethodRegistry("method", ConfigError)


def resolve_epoch(value: float, epochs: int) -> int:
    """An epoch option: values >= 1 are epoch counts, values below 1 fractions of ``epochs``."""
    return int(value) if value >= 1 else int(round(value * epochs))


def base_attack(base: str) -> str:
    """The training attack of a method's base: TRADES' KL maximization, else PGD-10 on the CE."""
    return "trades-kl" if base == "trades" else "pgd10"


# ----------------------------------------------------------------------------- the loop's attacks
def _same(model: torch.nn.Module) -> torch.nn.Module:
    return model


class DeviceAttack:
    """A configured attack as the training loop calls it: on ``unwrap(model)`` (the trainer passes
    the DDP unwrapper: attacks need no gradient sync), every radius multiplied by ``scale()`` (the
    eps warm-up; None: 1)."""

    def __init__(self, attack: Any, scale: Callable[[], float] | None = None,
                 unwrap: Callable[[torch.nn.Module], torch.nn.Module] = _same) -> None:
        self.attack = attack
        self.name = getattr(attack, "name", str(attack))
        self.scale = scale  # the eps warm-up factor in (0, 1] (training attacks), None: 1
        self.unwrap = unwrap

    def __call__(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, eps: Any, **kw: Any) -> torch.Tensor:
        s = 1.0 if self.scale is None else self.scale()
        return self.attack(self.unwrap(model), x, y, eps if s == 1.0 else eps * s, **kw)

    def __getattr__(self, name: str) -> Any:
        """The wrapped attack's settings (``steps``, ``step``, ``norm``, ...) read through the wrapper."""
        if name == "attack":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.attack, name)


def build_attack(name: str | None, options: dict[str, Any], *, train: bool,
                 scale: Callable[[], float] | None = None,
                 unwrap: Callable[[torch.nn.Module], torch.nn.Module] = _same) -> DeviceAttack | None:
    """``get_attack(name, **options)`` for the training loop (None for no name or "none").
    Training attacks (``train``) must not aim at the label (a targeted form needs its own target
    rule) and return the last iterate (``keep="last"``, where the attack has that option).
    ``scale``: a callable giving the factor every radius is multiplied by (the eps warm-up);
    ``unwrap``: what the attack is called on instead of the model (the trainer: the module inside DDP)."""
    if name is None or name.lower() == "none":
        return None
    if train:
        try:
            require_target_rule(name)
        except RobfairError as e:
            raise ConfigError(str(e)) from None
    opts = dict(options)
    if train and "keep" in inspect.signature(ATTACKS.get(parse_attack_name(name)[0])).parameters:
        opts.setdefault("keep", "last")
    return DeviceAttack(get_attack(name, **opts), scale, unwrap)


@dataclass
class TrainContext:
    """What the trainer shares with the method (and with callbacks) while it runs.

    ``attack`` is the configured training attack, ``attack(model, x, y, eps, generator=...)``; it
    takes input gradients only and restores the model's train mode. ``generator`` is the device
    generator for attack random starts (re-seeded from the config seed every epoch). ``eps`` is the
    global training radius. ``epoch`` counts from 0; ``step`` counts optimizer steps.
    ``train_class_acc`` holds last epoch's per-class training accuracy on the logits the method
    recorded (None before the first epoch ends).

    What a method needs from the loop, without importing the trainer or the DDP plumbing:
    ``all_reduce(t)`` sums a tensor over ranks (identity in one process), ``unwrap(model)`` is the
    module inside a DDP wrapper, ``build_attack(name, options)`` builds a further training attack
    (e.g. FRL's PGD-AT pre-training), ``val_batches(batch_size)`` iterates this rank's validation
    shard as ``(x, y, g)`` on ``device`` (WAT's re-attacked validation cost), and ``model`` is the
    trainer's evaluation model (EMA weights when enabled)."""

    #: the run's :class:`robfair.training.config.TrainConfig` (not imported here: the config validates
    #: its method through this package, so the arrow points from config to methods only)
    cfg: Any
    device: torch.device
    num_classes: int
    class_names: list[str]
    eps: float
    attack: Callable[..., torch.Tensor] | None = None
    generator: torch.Generator | None = None
    epoch: int = 0
    step: int = 0
    epochs: int = 1
    rank: int = 0
    world_size: int = 1
    train_class_acc: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    all_reduce: Callable[[torch.Tensor], torch.Tensor] = field(default=lambda t: t, repr=False)
    unwrap: Callable[[torch.nn.Module], torch.nn.Module] = field(default=lambda m: m, repr=False)
    attack_factory: Callable[[str, dict[str, Any]], Any] | None = field(default=None, repr=False)
    val_batches: Callable[[int], Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] | None = \
        field(default=None, repr=False)
    model: torch.nn.Module | None = field(default=None, repr=False)
    _logits: torch.Tensor | None = field(default=None, repr=False)
    _labels: torch.Tensor | None = field(default=None, repr=False)

    def record(self, logits: torch.Tensor, y: torch.Tensor) -> None:
        """Count ``logits`` toward this epoch's training accuracy (no device sync)."""
        self._logits, self._labels = logits.detach(), y

    def build_attack(self, name: str, options: dict[str, Any] | None = None) -> Any:
        """A training attack other than ``attack`` (last iterate kept), built as the trainer builds its own."""
        if self.attack_factory is not None:
            return self.attack_factory(name, dict(options or {}))
        return build_attack(name, dict(options or {}), train=True, unwrap=self.unwrap)

    def take_record(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        out = (self._logits, self._labels)
        self._logits = self._labels = None
        return out


class Method:
    """Base class of training methods: override ``loss``; the hooks are optional."""

    class Options(BaseModel):
        """The method's options (config key ``method_options``); unknown keys are rejected."""

        model_config = ConfigDict(extra="forbid")

    name: ClassVar[str] = "base"
    #: training attack used when the config's ``attack`` is empty; None: the method attacks nothing.
    default_attack: ClassVar[str | None] = None
    #: the option that picks a TRADES or PGD-AT base (e.g. ``"base"``); when set, the instance's
    #: ``default_attack`` follows it (:func:`base_attack`), so the class value is only the listing's default
    base_option: ClassVar[str | None] = None
    #: the config's ``select`` when it is empty; None: ``clean`` without a training attack, else ``avg+worst``
    default_select: ClassVar[str | None] = None
    #: where the method and each of its modes come from (``robfair methods NAME`` shows them):
    #: ``"method"`` -> the paper; ``"option=value"`` -> paper equations / official repository at a commit
    sources: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.base_option is not None:  # the class value (listings): the default base's attack
            cls.default_attack = base_attack(cls.Options.model_fields[cls.base_option].default)

    def __init__(self, options: "Method.Options | dict[str, Any] | None" = None, ctx: TrainContext | None = None):
        self.options = self.parse_options(options)
        self.ctx: TrainContext | None = ctx
        if self.base_option is not None:
            self.default_attack = base_attack(getattr(self.options, self.base_option))  # type: ignore[misc]

    @classmethod
    def parse_options(cls, options: "Method.Options | dict[str, Any] | None") -> "Method.Options":
        """Validate ``options`` against ``cls.Options``; a bad key or value is a one-line ConfigError."""
        if isinstance(options, cls.Options):
            return options
        try:
            return cls.Options(**(options or {}))
        except ValidationError as e:
            raise ConfigError(one_line(e, cls.Options, unknown=f"method '{cls.name}' has no option '{{key}}'",
                                       invalid=f"method '{cls.name}' option '{{key}}'", valid=f"valid options (robfair methods {cls.name})",
                                       fix="fix it in method_options", root="method_options")) from None

    # ------------------------------------------------------------------ the batch loss
    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        """The scalar loss of one batch (x in [0, 1], labels y, group ids g); the trainer backprops it."""
        raise NotImplementedError

    # ------------------------------------------------------------------ per-class hooks
    def class_weights(self) -> torch.Tensor | None:
        """(K,) loss weight per class, or None for uniform. Long-tail / FRL methods override."""
        return None

    def class_eps(self) -> torch.Tensor | None:
        """(K,) training radius per class, or None for the global ``ctx.eps``."""
        return None

    def sample_eps(self, y: torch.Tensor) -> torch.Tensor | float:
        """The training radius of each sample: ``class_eps()[y]`` when set, else the global eps."""
        ce = self.class_eps()
        if ce is None:
            assert self.ctx is not None, "the trainer sets method.ctx before training"
            return self.ctx.eps
        return ce.to(y.device)[y]

    def adversarial(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: TrainContext) -> torch.Tensor:
        """``x'``: the run's training attack on the batch, each sample at its own radius :meth:`sample_eps`
        with the epoch's generator (the one preamble every adversarial method's ``loss`` starts with)."""
        if ctx.attack is None:
            raise ConfigError(f"{self.name} needs a training attack but attack is 'none'; set attack "
                              f"(e.g. {self.default_attack or 'pgd10'})")
        return ctx.attack(model, x, y, self.sample_eps(y), generator=ctx.generator)

    def clean_and_adversarial(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                              ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f(x), f(x'))`` with ``x'`` from :meth:`adversarial`; the adversarial logits are recorded as
        the training accuracy (robust accuracy on the training batch), as MART and WAT report it."""
        x_adv = self.adversarial(model, x, y, ctx)
        logits, logits_adv = model(x), model(x_adv)
        ctx.record(logits_adv, y)
        return logits, logits_adv

    # ------------------------------------------------------------------ epoch hooks
    def epoch_order(self, labels: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor | None:
        """The epoch's sample indices (class re-sampling), or None (default) for the trainer's shuffle.
        Called once per epoch with the training labels and the trainer's CPU order generator."""
        return None

    def on_train_start(self, ctx: TrainContext) -> None:
        """Called once before the first epoch (and again after a resume)."""

    def on_epoch_start(self, ctx: TrainContext) -> None:
        """Called before each training epoch (``ctx.epoch`` is set)."""

    def on_epoch_end(self, ctx: TrainContext, val_report: Any | None) -> None:
        """Called after validation with the validation ``GroupReport`` (None without a split)."""

    #: set True to have the trainer validate the initial model once before the first epoch
    initial_validation: bool = False

    def on_initial_validation(self, ctx: TrainContext, val_report: Any) -> None:
        """Called once before epoch 1 of a fresh run (not on resume) when ``initial_validation`` is True."""

    def eval_model(self) -> torch.nn.Module | None:
        """A model of the method's own that replaces the trained one for validation-based selection,
        ``best.pt`` and the final audit (CFA's fairness-gated weight average), or None (default): the
        trainer's model (its EMA when ``cfg.ema``). ``on_epoch_end`` always sees the report of the
        trainer's model; when this returns a model, the trainer validates it too and selects on it."""
        return None

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume this method exactly (tensors, numbers, lists)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""

    def epoch_state(self) -> dict[str, Any]:
        """JSON-able quantities logged per epoch to metrics.jsonl (multipliers, weights, class eps...)."""
        out: dict[str, Any] = {}
        w, e = self.class_weights(), self.class_eps()
        if w is not None:
            out["class_weights"] = [float(v) for v in w.detach().cpu()]
        if e is not None:
            out["class_eps"] = [float(v) for v in e.detach().cpu()]
        return out


class TradesOptions(Method.Options):
    """TRADES's one option, declared once: every TRADES-based method's ``Options`` derives from it."""

    beta: float = Field(6.0, ge=0, description="TRADES beta: weight of the KL (boundary) term (official 6)")


class BasedOptions(TradesOptions):
    """A method that adjusts a TRADES or PGD-AT base (CFA, DAFA, FAAL, ...): which base, and TRADES's beta
    when it is TRADES. Set ``base_option = "base"`` on the method so its training attack follows it."""

    base: Literal["trades", "pgd-at"] = Field("trades", description="the adversarial training the method adjusts")


def build_method(name: str, options: "Method.Options | dict[str, Any] | None" = None) -> Method:
    """The registered method ``name`` with validated ``options`` (ConfigError when unknown or bad)."""
    cls = METHODS.get(name)
    return cls(options)


def describe_method(name: str) -> dict[str, Any]:
    """What ``robfair methods NAME`` shows: the canonical name, aliases, one-line help, docstring, the
    default training attack and selection, every option (type, default, description) and the source of
    the method and of each mode."""
    entry = METHODS.entry(name)
    cls = entry.obj
    method = cls()
    opts = []
    for key, f in cls.Options.model_fields.items():
        ann = f.annotation
        typ = ann.__name__ if isinstance(ann, type) else str(ann).replace("typing.", "")
        opts.append({"option": key, "default": getattr(method.options, key), "type": typ,
                     "description": f.description or ""})
    doc = (cls.__doc__ or "").strip()
    mod = __import__(cls.__module__, fromlist=["_"])
    return {"name": entry.name, "aliases": list(entry.aliases), "help": entry.help, "doc": doc,
            "module_doc": (mod.__doc__ or "").strip(), "default_attack": method.default_attack,
            "default_select": cls.default_select or ("clean" if method.default_attack is None else "avg+worst"),
            "options": opts, "sources": dict(cls.sources)}


def describe_methods() -> list[dict[str, Any]]:
    """One row per registered method: name, aliases, default training attack, default selection, help."""
    rows = []
    for entry in METHODS:
        d = describe_method(entry.name)
        rows.append({"method": d["name"], "aliases": ", ".join(d["aliases"]), "attack": d["default_attack"] or "-",
                     "select": d["default_select"], "description": d["help"]})
    return rows
