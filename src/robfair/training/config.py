"""The training configuration: one pydantic model, loaded from YAML or flags, every key checked.

    cfg = TrainConfig(data="digits", model="smallcnn", method="trades", method_options={"beta": 6},
                      epochs=20, eps="0.1", out="runs/trades")
    cfg = load_config("configs/frl.yaml", epochs=40)      # YAML file, then overrides
    cfg.to_yaml()

Unknown keys and bad values raise a one-line :class:`~robfair.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import AttackError, ConfigError, RobfairError, one_line
from ..runfolder import RunFolder
from ..safeio import read_yaml_file
from ..utils import parse_eps

log = logging.getLogger(__name__)

#: keys that may change when a run is resumed (they do not change what is computed)
RESUME_FREE_KEYS = ("resume", "device", "out")
#: the final audit's keys: unset (None), a resumed run takes its recorded values and a new run the defaults
FINAL_AUDIT_KEYS = ("probe", "probe_tolerance")
#: the block a run folder's config.yaml carries besides the config (versions, commit, resolved device)
RUN_INFO_KEY = "run_info"

Select = Literal["avg+worst", "avg-rob", "worst-rob", "clean", "last"]
#: the criteria that score an epoch by robust validation accuracy
ROBUST_SELECT = ("avg+worst", "avg-rob", "worst-rob")


def probe_budget(value: Any, what: str = "probe") -> float | str:
    """A reliability probe budget as a config file stores it (:func:`robfair.auditing.probe.parse_budget`
    reads every form: None the default, a multiple ``2`` / ``"2x"``, ``0`` / ``"off"``, ``"all"``): a
    float multiple, or ``"all"``. A bad value is a one-line :class:`~robfair.errors.RobfairError`."""
    from ..auditing.probe import parse_budget  # lazy: start-up time (`robfair --help` loads this module, not torch)

    budget = parse_budget(value, what)
    return "all" if math.isinf(budget) else budget


def probe_fraction(value: Any, what: str = "probe tolerance") -> float:
    """The probe's tolerance, a fraction (:func:`robfair.auditing.probe.parse_tolerance`; None the
    default, 0.01 = 1 point). A bad value is a one-line :class:`~robfair.errors.RobfairError`."""
    from ..auditing.probe import parse_tolerance  # lazy: start-up time (`robfair --help` loads this module, not torch)

    return parse_tolerance(value, what)


def _unless_none(parse: Any) -> Any:
    """A pydantic before-validator: None stays None (the default), anything else goes through
    ``parse``, whose one-line error becomes the field's."""

    def check(v: Any) -> Any:
        try:
            return None if v is None else parse(v)
        except RobfairError as e:
            raise ValueError(str(e)) from None

    return BeforeValidator(check)


#: a config's reliability probe budget (training config, study audit block): a float multiple of the
#: audit's attacks' compute, "all", or None (the default); read by robfair.auditing.probe.parse_budget
ProbeBudget = Annotated[float | Literal["all"] | None, _unless_none(probe_budget)]
#: a config's probe tolerance: a fraction (0.01 = 1 point) or None (the default)
ProbeTolerance = Annotated[float | None, _unless_none(probe_fraction)]


class TrainConfig(BaseModel):
    """Everything a training run depends on. Defaults follow the field's CIFAR recipe (spec section 3)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # lr: .inf is refused, not trained

    # --- what is trained
    data: str = Field("digits", description="dataset spec NAME[:PATH] (its 'train' split is used)")
    model: str = Field("smallcnn", description="architecture name (robfair.models), or a model file to fine-tune as "
                                               "audit's --model takes it (state dict / safetensors with arch, "
                                               "TorchScript, robustbench:NAME)")
    model_kwargs: dict[str, Any] = Field(default_factory=dict, description="extra architecture arguments")
    arch: str | None = Field(None, description="model file: the architecture of a state dict / safetensors file, "
                                               "FILE.py:NAME or module:NAME")
    arch_kwargs: dict[str, Any] = Field(default_factory=dict, description="model file: the arguments of arch")
    mean: list[float] | float | str | None = Field(
        None, description="model file: the input normalization it expects (per channel, or a preset such as cifar10)")
    std: list[float] | float | str | None = Field(None, description="model file: see mean")
    model_dir: str | None = Field(None, description="model file robustbench:NAME: RobustBench's model folder")
    model_source: dict[str, Any] | None = Field(
        None, description="model file: filled in when the run starts (its path, SHA-256, format, arch and its "
                          "SHA-256, normalization); a resume refuses a changed file")
    init: str | None = Field(None, description="robfair checkpoint to start from (fine-tuning)")
    method: str = Field("standard", description="training method (standard, pgd-at, trades, ...)")
    method_options: dict[str, Any] = Field(default_factory=dict, description="the method's own options")

    # --- optimization
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(128, ge=1)
    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(0.1, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD momentum (Adam: beta1)")
    weight_decay: float = Field(5e-4, ge=0)
    nesterov: bool = False
    schedule: Literal["piecewise", "cosine", "constant"] = "piecewise"
    milestones: list[float] | None = Field(
        None, description="piecewise: epochs at which lr *= gamma; values below 1 are fractions of the run "
                          "(default: 0.5 and 0.75 of epochs)")
    gamma: float = Field(0.1, gt=0, le=1)
    warmup_epochs: float = Field(0, ge=0, description="linear warm-up from lr/100, in epochs")
    ema: float | None = Field(None, gt=0, lt=1, description="EMA decay of the weights (e.g. 0.999); None: off")
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    channels_last: bool | None = Field(
        None, description="channels_last memory format; None: on for models with 2-D convolutions")
    compile: str | None = Field(
        None, description="torch.compile backend for the training step's forward passes ('inductor'; 'aot_eager' "
                          "traces without generating code); None: eager. Guarded: where this torch has no compile "
                          "or compiling fails, the run goes on eager with one warning; not in the config hash")
    augment: Literal["none", "crop-flip"] = "none"
    crop_padding: int = Field(4, ge=0, description="crop-flip: zero padding before the random crop")

    # --- threat model
    eps: float = Field(8 / 255, description="training radius (and validation radius); '8/255' allowed")
    eps_warmup: float = Field(0, ge=0, description="ramp the training radius linearly from 0 to eps over this many "
                                                   "epochs (per step; validation stays at eps); 0: off")
    attack: str | None = Field(None, description="training attack; None: the method's default")
    attack_options: dict[str, Any] = Field(
        default_factory=dict, description="overrides for the training attack (e.g. steps); step default eps/4")

    # --- validation and model selection
    val_per_class: int | float = Field(
        0.1, description="validation split carved from train: samples per class (int) or fraction; 0: none")
    val_attack: str = Field("pgd10", description="validation attack, or 'none' for clean only")
    val_attack_options: dict[str, Any] = Field(default_factory=dict)
    val_batch_size: int | None = Field(None, ge=1, description="default: batch_size")
    select: Select | None = Field(
        None, description="best.pt criterion on validation; None: the method's (clean for standard training "
                          "and other methods without a training attack, avg+worst otherwise; last without "
                          "a validation split); a robust criterion for a method without a training attack is refused")
    val_split: Literal["init", "seed"] = Field(
        "init", description="with init: reuse the init run's recorded validation split (init), or draw one from "
                            "seed / val_per_class (seed; refused if it holds the init run's training samples)")

    # --- the final audit's reliability probe (robfair train --probe; a sweep sets them from its audit block)
    probe: ProbeBudget = Field(
        None, description="reliability probe budget of the final test audit: AutoAttack on the samples its attacks left "
                          "robust, within this multiple of their compute (e.g. 1, 2x); 'all': every robust sample "
                          "(exactly AutoAttack per class); 0: off; None: the run's recorded value on resume, else "
                          "robfair's default (1), recorded when the run starts")
    probe_tolerance: ProbeTolerance = Field(
        None, description="the overstatement a class may have before the probe flags it, a fraction (0.01 = 1 point; "
                          "the CLI's --probe-tolerance takes points); None: as probe (default 0.01)")

    # --- bookkeeping
    seed: int = Field(0, ge=0)
    device: str = "auto"
    out: str | None = Field(None, description="run folder (config.yaml, checkpoints/, metrics.jsonl)")
    resume: bool = False

    # ------------------------------------------------------------------ construction
    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise ConfigError(one_line(e, type(self))) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> "TrainConfig":  # type: ignore[override]
        """As pydantic's, with a one-line ConfigError instead of a ValidationError."""
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as e:
            raise ConfigError(one_line(e, cls)) from None

    @field_validator("eps", mode="before")
    @classmethod
    def _parse_eps(cls, v: Any) -> float:
        try:
            return parse_eps(v, "eps")
        except RobfairError as e:
            raise ValueError(str(e)) from None

    @field_validator("val_per_class")
    @classmethod
    def _check_val(cls, v: int | float) -> int | float:
        if isinstance(v, float) and not 0 <= v < 1:
            raise ValueError("a fraction must be in [0, 1); or pass an int count per class such as 300")
        if isinstance(v, int) and v < 0:
            raise ValueError("must be >= 0")
        return v

    @model_validator(mode="after")
    def _check_all(self) -> "TrainConfig":
        from .methods import build_method  # lazy: start-up time (`robfair --help` loads this module, not torch)

        method = build_method(self.method, self.method_options)  # ConfigError naming the method / option
        # resolve: canonical method name, every option spelled out, the method's default attack
        self.method = method.name
        self.method_options = method.options.model_dump(mode="json")
        if self.attack is None:
            self.attack = method.default_attack
        if self.attack and self.attack.lower() != "none":
            from ..attacks import require_target_rule  # lazy: start-up time (`robfair --help` loads this module, not torch)

            try:
                require_target_rule(self.attack)
            except AttackError as e:
                if "target rule" in str(e):
                    raise ConfigError(f"attack: {e}") from None
                # an unknown name is reported where the attack is built, with the list of names
        if self.select is None:
            no_robust = method.default_attack is None or str(self.val_attack).lower() == "none"
            self.select = ("last" if self.val_per_class == 0 else
                           method.default_select or ("clean" if no_robust else "avg+worst"))
        self._check_model_file()
        if self.milestones is not None and self.schedule == "piecewise":
            res = self.resolved_milestones()
            bad = [m for m in self.milestones if not m > 0] + [m for m in res if not 0 < m <= self.epochs]
            if bad or res != sorted(res):
                raise ConfigError(f"milestones {self.milestones} must be increasing epochs in (0, {self.epochs}] "
                                  "(or fractions of the run below 1, e.g. [0.5, 0.75]); fix milestones or epochs")
        if self.eps_warmup > self.epochs:
            raise ConfigError(f"eps_warmup ({self.eps_warmup:g}) is longer than the run ({self.epochs} epochs); "
                              "lower eps_warmup")
        if self.warmup_epochs >= self.epochs:
            raise ConfigError(f"warmup_epochs ({self.warmup_epochs:g}) must be below epochs ({self.epochs}); "
                              "lower warmup_epochs")
        if self.val_per_class == 0 and self.select != "last":
            raise ConfigError(f"select '{self.select}' needs a validation split but val_per_class is 0; "
                              "set val_per_class (e.g. 0.1) or select: last")
        return self

    @property
    def model_file(self) -> bool:
        """Whether ``model`` is a model file (or robustbench:NAME) to fine-tune, not a robfair architecture."""
        from ..models.sources import is_model_file  # lazy: start-up time (`robfair --help` loads this module, not torch)

        return is_model_file(self.model)

    def _check_model_file(self) -> None:
        """The keys of a model file go with one, and a robfair architecture's with it."""
        file_keys = [k for k in ("arch", "mean", "std", "model_dir") if getattr(self, k) is not None]
        file_keys += ["arch_kwargs"] if self.arch_kwargs else []
        if not self.model_file:
            if file_keys:
                raise ConfigError(f"{', '.join(file_keys)} are for a model file (--model FILE) but model "
                                  f"'{self.model}' is a robfair architecture; drop them (its normalization: "
                                  "model_kwargs mean / std)")
            return
        if self.model_kwargs:
            raise ConfigError(f"model {self.model} is a model file; its constructor's arguments go in arch_kwargs "
                              "(--arch-kwargs), not model_kwargs")
        if self.init:
            raise ConfigError(f"model {self.model} is a model file and is itself the starting point; drop init")
        if self.arch_kwargs and self.arch is None:
            raise ConfigError("arch_kwargs needs arch FILE.py:NAME; pass both")

    def selection_problem(self) -> str | None:
        """Why this run's ``best.pt`` selection is not honest, or None: a method that trains on no attack
        (standard training, ...) selected by robust validation accuracy. Such a model's robust accuracy
        is near zero at every epoch, so the argmax picks noise -- in practice the least-trained
        checkpoint (issue 22: epoch 2, 22% clean, where the last epoch had 38%)."""
        if self.select not in ROBUST_SELECT or str(self.val_attack).lower() == "none":
            return None
        from .methods import build_method  # lazy: start-up time (`robfair --help` loads this module, not torch)

        if build_method(self.method, self.method_options).default_attack is not None:
            return None
        return (f"method {self.method} trains on no attack, so select '{self.select}' would pick best.pt by its "
                "near-zero robust validation accuracy (noise: the least-trained checkpoint); set select: clean "
                "(or last) for this run")

    def check_selection(self) -> "TrainConfig":
        """Refuse (one-line ConfigError) a selection :meth:`selection_problem` names; returns self.
        Checked where a run is set up (``robfair train``, :func:`robfair.training.train`, a study's
        expansion), not when a recorded config is read back."""
        problem = self.selection_problem()
        if problem:
            raise ConfigError(problem)
        return self

    # ------------------------------------------------------------------ derived values
    def resolved_milestones(self) -> list[float]:
        """The milestones in epochs (fractions below 1 times ``epochs``)."""
        if self.milestones is not None:
            return [m * self.epochs if m < 1 else float(m) for m in self.milestones]
        return [0.5 * self.epochs, 0.75 * self.epochs]

    def resolve_final_audit(self, recorded: "TrainConfig | None" = None) -> None:
        """Fill the final audit's unset keys (``probe``, ``probe_tolerance``) in place: from
        ``recorded`` (the config of the run being resumed, so the resumed run audits as it was set
        up to) where it has them, else with robfair's defaults (a new run records what it uses)."""
        for key in FINAL_AUDIT_KEYS:
            if getattr(self, key) is None and recorded is not None:
                setattr(self, key, getattr(recorded, key))
        self.probe = probe_budget(self.probe)
        self.probe_tolerance = probe_fraction(self.probe_tolerance)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self, run_info: dict[str, Any] | None = None) -> str:
        """The config as YAML (loadable by ``load_config``), optionally with a ``run_info`` block."""
        d = self.to_dict()
        if run_info:
            d[RUN_INFO_KEY] = run_info
        return yaml.safe_dump(d, sort_keys=False)

    def differences(self, other: "TrainConfig", ignore: tuple[str, ...] = RESUME_FREE_KEYS) -> list[str]:
        """Keys whose values differ from ``other`` (except ``ignore``)."""
        a, b = self.to_dict(), other.to_dict()
        return [k for k in a if k not in ignore and a[k] != b.get(k)]


def load_config_dict(path: str | Path) -> dict[str, Any]:
    """The raw mapping of a YAML config file (a run folder's config.yaml works too), not validated."""
    p = Path(path)
    if p.is_dir():
        p = RunFolder(p).config
    data = read_yaml_file(p, "config file", folder="pass a .yaml file or a run folder") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping of keys to values; write 'key: value' lines")
    data.pop(RUN_INFO_KEY, None)
    return data


def load_config(path: str | Path | None = None, **overrides: Any) -> TrainConfig:
    """Read a YAML config (a run folder's config.yaml works too), apply ``overrides``, validate."""
    data: dict[str, Any] = load_config_dict(path) if path is not None else {}
    given = {k: v for k, v in overrides.items() if v is not None}
    rescale_milestones(data, given)
    data.update(given)
    return TrainConfig(**data)


def rescale_milestones(data: dict[str, Any], overrides: dict[str, Any]) -> None:
    """When ``overrides`` change a config's ``epochs`` but not its ``milestones``, milestones given as
    epoch counts keep their place in the run (``[15, 18]`` of 20 epochs -> ``[3, 3.6]`` of 4); fractions
    (values below 1) need no change. Edits ``data`` in place and logs what it did."""
    ms, old, new = data.get("milestones"), data.get("epochs"), overrides.get("epochs")
    if not ms or new is None or old is None or "milestones" in overrides or new == old:
        return
    try:
        # epoch counts keep their share of the run; one that lands below 1 epoch is written as that share
        scaled = [m if m < 1 else (m * float(new) / float(old) if m * float(new) / float(old) >= 1
                                   else m / float(old)) for m in ms]
    except TypeError:
        return  # not numbers: validation names the problem
    log.info("epochs %s -> %s: milestones %s rescaled to %s", old, new, ms, scaled)
    data["milestones"] = scaled
