"""The options several commands share, and what turns them into values: the model bundle
(``--model`` and how to read it: :class:`ModelArgs`, :func:`model_options`, :func:`load_model_arg`),
the probe's ``--probe`` / ``--probe-tolerance`` (:func:`probe_options`), and a radius option
(:func:`image_radius`: ``--eps`` parsed into a :class:`robfair.attacks.radius.Radius` once, here at
the edge, and capped for [0, 1] images; the library trusts what it returns).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ..errors import ConfigError
from ..inert import term
from ..runfolder import CHECKPOINTS_DIR
from .app import console

if TYPE_CHECKING:  # lazy: typing only
    from ..attacks.radius import Radius, Sweep

MODEL_OPTION = typer.Option(..., "--model", "-m", help="A robfair checkpoint, TorchScript file, torch.export .pt2, "
                            "state dict / .safetensors (with --arch), or robustbench:NAME.")
ARCH_OPTION = typer.Option(None, "--arch", help="FILE.py:NAME, the class or factory a state dict was saved from (default: none; needed for weights-only files).")
ARCH_KWARGS_OPTION = typer.Option(None, "--arch-kwargs", help="Its arguments as JSON/YAML, e.g. '{\"width\": 32}' (default: none).")
MODEL_DIR_OPTION = typer.Option(None, "--model-dir", help="RobustBench's model folder for robustbench:NAME (default ./models).")
MEAN_OPTION = typer.Option(None, "--mean", help="The model expects normalized inputs: per-channel mean "
                           "(0.49,0.48,0.45) or a preset: cifar10, cifar100, imagenet (default: none, the model takes [0, 1] images).")
STD_OPTION = typer.Option(None, "--std", help="Per-channel std (or a preset); with --mean (default: none).")
CLASS_MAP_OPTION = typer.Option(None, "--class-map", help="State the model's class order: 'model' (its stored "
                                "names), DATA=MODEL renames, the names in output order, or a .json/.yaml file (default: none, names must match).")

@dataclass(frozen=True)
class ModelArgs:
    """--model and the options that say how to read it, as one value: what :func:`model_options` hands a
    command (``source``) instead of seven parameters each command would declare again."""

    model: str
    arch: Optional[str] = None
    arch_kwargs: Optional[str] = None
    model_dir: Optional[Path] = None
    mean: Optional[str] = None
    std: Optional[str] = None
    class_map: Optional[str] = None


#: the bundle's options, in the order --help lists them: (parameter, annotation, typer option)
_MODEL_PARAMS = (("model", str, MODEL_OPTION), ("arch", Optional[str], ARCH_OPTION),
                 ("arch_kwargs", Optional[str], ARCH_KWARGS_OPTION), ("model_dir", Optional[Path], MODEL_DIR_OPTION),
                 ("mean", Optional[str], MEAN_OPTION), ("std", Optional[str], STD_OPTION),
                 ("class_map", Optional[str], CLASS_MAP_OPTION))


def model_options(command: Any) -> Any:
    """A command that loads one model (audit, certify) declares ``source: ModelArgs`` first; this puts the
    bundle's seven options in its place for typer (``--model``, ``--arch``, ``--arch-kwargs``,
    ``--model-dir``, ``--mean``, ``--std``, ``--class-map``) and calls it with them as one ``ModelArgs``."""
    import functools
    import inspect
    import typing

    hints = typing.get_type_hints(command)
    sig = inspect.signature(command)
    rest = [q.replace(annotation=hints.get(q.name, q.annotation)) for q in sig.parameters.values() if q.name != "source"]
    bundle = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=ann)
              for name, ann, option in _MODEL_PARAMS]

    @functools.wraps(command)
    def with_source(**kwargs: Any) -> Any:
        source = ModelArgs(**{name: kwargs.pop(name) for name, _, _ in _MODEL_PARAMS})
        return command(source=source, **kwargs)

    del with_source.__wrapped__  # typer reads the signature below, not the command's own
    with_source.__signature__ = sig.replace(parameters=bundle + rest)
    with_source.__annotations__ = {q.name: q.annotation for q in bundle + rest} | {"return": hints.get("return")}
    return with_source


#: --probe / --probe-tolerance: the same meaning wherever an audit runs (audit, train, demo, leaderboard)
PROBE_HELP = ("Reliability probe budget: AutoAttack on the samples the attacks left robust, within B times the "
              "audit's attacks' compute (default {default}; 'all': every robust sample, exactly AutoAttack per class; "
              "0: off)")
PROBE_TOLERANCE_HELP = ("The probe flags a class whose robust accuracy it shows overstated by more than POINTS "
                        "(95%, every statement at once) (default {default}).")
PROBE_OPTION = typer.Option(None, "--probe", metavar="B", help=PROBE_HELP.format(default="1") + ".")
PROBE_TOLERANCE_OPTION = typer.Option(None, "--probe-tolerance", metavar="POINTS",
                                      help=PROBE_TOLERANCE_HELP.format(default="1"))


def probe_options(probe: Optional[str], probe_tolerance: Optional[float]) -> tuple:
    """``--probe`` and ``--probe-tolerance``, checked before anything is computed: the budget
    (:func:`robfair.auditing.probe.parse_budget`: a multiple, ``all`` = ``inf``, ``0`` off) and the
    tolerance as a fraction (the option takes points); None where the option was not given."""
    from ..auditing.probe import parse_budget

    budget = None if probe is None else parse_budget(probe, "--probe")
    if probe_tolerance is not None and not 0 <= probe_tolerance < 100:
        raise ConfigError(f"--probe-tolerance must be points of robust accuracy in [0, 100) (e.g. 1, 0.5), got "
                          f"{probe_tolerance:g}")
    return budget, None if probe_tolerance is None else probe_tolerance / 100


def check_classes(meta: dict, ds, class_map: Optional[str] = None):
    """The model's image shape and class count must match the dataset's, and so must the class names it
    stores (order included) unless ``--class-map`` states the mapping; returns the dataset with its
    labels in the model's order (one-line errors)."""
    from ..data import class_order, parse_class_map, with_class_order
    from ..models import check_model_data

    check_model_data(meta, ds.in_shape, ds.num_classes)
    if class_map is not None:
        order, renames = parse_class_map(class_map, meta.get("classes"))
        meta["class_order"] = class_order(None, ds.classes, stated=True)
        return with_class_order(ds, order, renames)
    meta["class_order"] = class_order(meta.get("classes"), ds.classes,
                                      what=f"the model ({meta.get('source', 'checkpoint')})")
    if meta["class_order"].get("note"):  # said once, before the long work; audit.json keeps it in meta.class_order
        where = f"{meta['path']}: " if meta.get("path") else ""
        console.print(f"note: {term(where + meta['class_order']['note'])}", highlight=False, soft_wrap=True)
    return ds


def parse_stats(text: Optional[str], what: str):
    """``--mean``/``--std``: a preset name (``cifar10``, ``cifar100``, ``imagenet``; the key of
    ``NORMALIZATION_PRESETS``) or comma-separated finite numbers (a std positive), one line naming
    the option otherwise; how many values the images need is checked against their channels later."""
    if text is None:
        return None
    import difflib
    import math

    from ..errors import ModelError
    from ..models.parts import NORMALIZATION_PRESETS, preset_key

    presets = ", ".join(NORMALIZATION_PRESETS)
    example = f"--{what} {'0.2471,0.2435,0.2616' if what == 'std' else '0.4914,0.4822,0.4465'} (one per channel)"
    t = text.strip().strip("()[]").strip()
    key = preset_key(t)
    if key is not None:
        return key
    parts = [v.strip() for v in t.split(",")]
    try:
        vals = [float(v) for v in parts]
    except ValueError:
        if not t or "" in parts:
            raise ModelError(f"--{what} {text!r} has an empty value; write one number per channel, e.g. {example}, "
                             f"or a preset: {presets}") from None
        near = difflib.get_close_matches(t.lower(), list(NORMALIZATION_PRESETS), n=1, cutoff=0.6)
        raise ModelError(f"--{what} {text!r} is neither numbers nor a normalization preset"
                         + (f" (did you mean {near[0]}?)" if near else "")
                         + f"; write e.g. {example} or a preset: {presets}") from None
    if not all(math.isfinite(v) for v in vals):
        raise ModelError(f"--{what} {text!r} must hold finite numbers; write e.g. {example} or a preset: {presets}")
    if what == "std" and min(vals) <= 0:
        raise ModelError(f"--std {text!r} must be positive (each channel's standard deviation, the divisor of the "
                         f"normalization); write e.g. {example} or a preset: {presets}")
    return vals


def load_model_arg(model: str, arch: Optional[str], arch_kwargs: Optional[str], model_dir: Optional[Path],
                   mean: Optional[str], std: Optional[str]):
    """``--model`` (+ ``--arch``/``--arch-kwargs``/``--model-dir``) loaded with ``robfair.models.load_any``,
    wrapped in ``Normalized`` for ``--mean``/``--std``; returns (model, meta)."""
    from ..models import load_any, with_normalization
    from ..models.sources import parse_arch_kwargs

    if arch is None and arch_kwargs is not None:
        from ..errors import ModelError

        raise ModelError("--arch-kwargs needs --arch FILE.py:NAME; pass both")
    net, meta = load_any(model, arch=arch, arch_kwargs=parse_arch_kwargs(arch_kwargs), model_dir=model_dir)
    m, s = parse_stats(mean, "mean"), parse_stats(std, "std")
    if m is not None or s is not None:
        net = with_normalization(net, m, s)
        meta = {**meta, "normalization": {"mean": mean, "std": std}}
    return net, meta


def display_label(model: str) -> str:
    """A model's name on plots and tables: the run for a run's checkpoint, the RobustBench name."""
    return model.split(":", 1)[1] if model.startswith("robustbench:") else checkpoint_label(Path(model))


def model_label(model: str) -> str:
    return model.split(":", 1)[1].split("/")[-1] if model.startswith("robustbench:") else Path(model).stem


def checkpoint_label(path: Path) -> str:
    """``runs/trades/checkpoints/best.pt`` -> ``trades (best.pt)``: the run, not the file name."""
    path = Path(path)
    if path.parent.name == CHECKPOINTS_DIR and path.parent.parent.name:
        return f"{path.parent.parent.name} ({path.name})"
    return path.name


def image_radius(value: Any, attacks: Any, *, allow_large: bool = False, what: str = "--eps") -> "Radius":
    """A radius option (``--eps 8/255``) as a checked :class:`~robfair.attacks.radius.Radius`: parsed once
    (its messages name ``what``) and, for L-inf ``attacks``, refused above 1 unless ``allow_large``
    (:func:`robfair.attacks.names.check_image_eps`). What it returns goes down as it is."""
    from ..attacks import Radius, check_image_eps

    return check_image_eps(Radius.parse(value, what=what), attacks, allow_large=allow_large, what=what)


def image_sweep(text: str, attacks: Any, *, allow_large: bool = False, what: str = "--eps-sweep") -> "Sweep":
    """``--eps-sweep START:STOP:N`` as a checked :class:`~robfair.attacks.radius.Sweep` (its largest
    radius capped as :func:`image_radius` caps one)."""
    from ..attacks import Sweep, check_image_eps

    sweep = Sweep.parse(text, what)
    check_image_eps(max(sweep), attacks, allow_large=allow_large, what=what)
    return sweep


def checkpoint_radius(meta: dict, attacks: Any, *, allow_large: bool = False) -> "Radius":
    """The radius a checkpoint was trained at (its ``eps`` / ``train_eps``), else 8/255: the default of
    ``--eps``, checked as :func:`image_radius` checks the option."""
    extra = meta.get("extra") or {}
    for key in ("eps", "train_eps"):
        if key in extra and extra[key] is not None:
            return image_radius(extra[key], attacks, allow_large=allow_large, what="the checkpoint's training eps")
    return image_radius(8 / 255, attacks, allow_large=allow_large)
