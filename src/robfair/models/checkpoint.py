"""Safe checkpoints: written atomically, read with ``torch.load(weights_only=True)`` only.

A robfair checkpoint is a dict holding nothing but tensors and plain values::

    {"format": "robfair-checkpoint", "version": 1, "spec": model.robfair_spec,
     "classes": [...], "state_dict": {...}, "extra": {...}}

``spec`` is what ``create`` needs to rebuild the architecture, so ``load_checkpoint(path)`` alone gives
a ready model. Loading never unpickles code: a file that holds pickled objects is refused.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import pickletools
import re
import warnings
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ModelError
from ..utils import atomic_path
from .factory import MODELS, create, unwrap_model

log = logging.getLogger(__name__)

FORMAT = "robfair-checkpoint"
VERSION = 1
_PREFIXES = ("module.", "_orig_mod.")
# what a tensors-only pickle imports: tensor/storage rebuilders, OrderedDict, top-level torch names
_SAFE_GLOBAL = re.compile(r"^(torch\._utils\.\w+|torch\.serialization\.\w+|torch\.\w+|collections\.OrderedDict)$")
_SPEC_KEYS = ("name", "num_classes", "in_shape", "kwargs", "mean", "std")
#: the spec name of a model trained from a model file (``robfair train --model FILE``): its ``source``
#: entry says how to rebuild it (:func:`robfair.models.sources.rebuild_source`)
SOURCE_NAME = "model-file"
#: where such a model carries its spec (not ``robfair_spec``: it is the user's code, its faults are its own)
SOURCE_SPEC_ATTR = "robfair_source_spec"
#: rebuilds a SOURCE_NAME spec's model, ``builder(spec, path)``; set by robfair.models.sources (which reads
#: the model files: it imports this module, so the dependency is handed down, not imported up)
SOURCE_BUILDER: list[Any] = []


def _check_loadable(obj: Any, where: str) -> None:
    """Raise ModelError unless ``obj`` holds only what ``torch.load(weights_only=True)`` accepts."""
    if obj is None or type(obj) in (bool, int, float, str) or isinstance(obj, torch.Tensor):
        return
    if type(obj) in (dict, OrderedDict):
        for k, v in obj.items():
            if type(k) not in (str, int):
                raise ModelError(
                    f"{where} has a key of type {type(k).__name__}; use str or int keys so weights_only loading accepts it"
                )
            _check_loadable(v, f"{where}[{k!r}]")
        return
    if type(obj) in (list, tuple):
        for i, v in enumerate(obj):
            _check_loadable(v, f"{where}[{i}]")
        return
    raise ModelError(
        f"{where} is a {type(obj).__module__}.{type(obj).__name__}; checkpoints hold only tensors, numbers, "
        "strings, bools, None, lists and dicts (weights_only loading) - convert it, e.g. with .tolist() or torch.as_tensor"
    )


def _strip(key: str) -> str:
    while key.startswith(_PREFIXES):
        key = key.split(".", 1)[1]
    return key


def save_checkpoint(path: str | os.PathLike, model: nn.Module, *, classes: list[str], extra: dict | None = None) -> None:
    """Write ``model`` (built by ``create``; DDP / compile / AveragedModel wrappers are peeled) with its
    class names and ``extra`` (optimizer state, epoch, metrics...: tensors and plain values only) to
    ``path`` atomically: a crash never leaves a half-written file, and a failed save leaves ``path`` as
    it was. Tensors are stored contiguous on the CPU, so channels_last / GPU models load anywhere."""
    net = unwrap_model(model)
    spec = getattr(net, "robfair_spec", None) or getattr(net, SOURCE_SPEC_ATTR, None)
    if not isinstance(spec, dict):
        raise ModelError(
            "model has no robfair_spec; build it with robfair.models.create(...) so the checkpoint can rebuild it"
        )
    if not isinstance(classes, (list, tuple)) or not all(isinstance(c, str) for c in classes):
        raise ModelError(f"classes must be a list of class-name strings, got {classes!r}; pass dataset.classes")
    if len(classes) != spec["num_classes"]:
        raise ModelError(
            f"classes has {len(classes)} names but the model predicts {spec['num_classes']} classes; pass dataset.classes"
        )
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        raise ModelError(f"extra must be a dict, got {type(extra).__name__}; pass e.g. extra={{'epoch': 3}}")
    _check_loadable(extra, "extra")
    _check_loadable(spec, "model.robfair_spec")
    state = {_strip(k): v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "spec": spec,
        "classes": list(classes),
        "state_dict": state,
        "extra": extra,
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    log.debug("saved checkpoint %s (%s)", path, spec["name"])


#: the error path scans at most this many bytes of a pickle for the names it would import
_SCAN_BYTES = 64 << 20


def _pickle_bytes(path: Path) -> bytes | None:
    """The main pickle of a torch file (``data.pkl`` of the zip format, else the raw file), capped
    at ``_SCAN_BYTES`` (a zip entry that claims more is cut there, never inflated in full)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith("data.pkl")]
            if not names:
                return None
            with z.open(names[0]) as f:
                return f.read(_SCAN_BYTES)
    with open(path, "rb") as f:
        return f.read(_SCAN_BYTES)


def _pickled_globals(path: Path) -> list[str]:
    """Names of the Python objects a pickle would import, found by reading opcodes (nothing runs).
    Reads consecutive pickles (the legacy torch format stores several) until the data stops parsing."""
    found: list[str] = []
    try:
        data = _pickle_bytes(path)
    except (OSError, KeyError, zipfile.BadZipFile):
        return found
    stream = io.BytesIO(data or b"")
    for _ in range(8):
        strings: list[str] = []
        try:
            for op, arg, _pos in pickletools.genops(stream):
                if op.name in ("GLOBAL", "INST"):
                    found.append(str(arg).replace(" ", "."))
                elif op.name == "STACK_GLOBAL":
                    found.append(".".join(strings[-2:]) if len(strings) >= 2 else "?")
                elif isinstance(arg, str):
                    strings.append(arg)
        except Exception:  # not (or no longer) pickle data
            break
        if stream.tell() >= len(data or b""):
            break
    return found


def _noisy_last(name: str) -> tuple[bool, str]:
    return name.startswith(("__builtin__.", "builtins.")), name


def _torch_load(path: Path, map_location: Any) -> Any:
    try:
        with warnings.catch_warnings():  # a plain pickle's protocol: torch warns before its refusal, which is ours to word
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        code = [g for g in _pickled_globals(path) if not _SAFE_GLOBAL.match(g)]
        code += re.findall(r"GLOBAL (\S+?)\.? ", str(e))[:1]
        if code:
            raise ModelError(
                f"refusing to load {path}: it holds pickled code ({', '.join(sorted(set(code), key=_noisy_last)[:3])}); robfair "
                "checkpoints hold only tensors and plain values - save model.state_dict() and pass --arch FILE.py:NAME, "
                "or save the model as TorchScript (torch.jit.save) or torch.export (.pt2)"
            ) from None
        raise ModelError(
            f"cannot read {path} as a torch checkpoint (not a valid pickle); the file is corrupt or not a torch file - "
            "re-download or re-save it"
        ) from None
    except Exception as e:  # torch raises RuntimeError, EOFError, KeyError, ... for damaged files
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ModelError(
            f"cannot read {path} as a torch checkpoint ({type(e).__name__}{': ' + detail[:120] if detail else ''}); "
            "the file is corrupt or not a torch file - re-download or re-save it"
        ) from None


def _check_format(obj: Any, path: Path) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise ModelError(
                f"{path} is a bare state_dict, not a robfair checkpoint (it does not name its architecture); build the "
                "model with robfair.models.create(name, num_classes, in_shape), call model.load_state_dict(...), "
                "then re-save it with robfair.models.save_checkpoint"
            )
        what = f"a dict with keys {sorted(map(str, obj))[:6]}" if isinstance(obj, dict) else f"a {type(obj).__name__}"
        raise ModelError(
            f"{path} is a torch file but not a robfair checkpoint (it holds {what}); load the weights into "
            "robfair.models.create(...) and re-save with robfair.models.save_checkpoint"
        )
    version = obj.get("version")
    if not isinstance(version, int) or version < 1:
        raise ModelError(f"{path} has an invalid robfair checkpoint version {version!r}; re-save it with save_checkpoint")
    if version > VERSION:
        raise ModelError(f"{path} was written by a newer robfair (checkpoint version {version}); upgrade robfair")
    spec, classes, state = obj.get("spec"), obj.get("classes"), obj.get("state_dict")
    if not isinstance(spec, dict) or any(k not in spec for k in _SPEC_KEYS) or not isinstance(spec.get("kwargs"), dict):
        raise ModelError(f"{path} has an incomplete model spec; re-save it with robfair.models.save_checkpoint")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise ModelError(f"{path} has no list of class names; re-save it with robfair.models.save_checkpoint")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelError(f"{path} has no valid state_dict; re-save it with robfair.models.save_checkpoint")
    extra = obj.get("extra", {})
    return {"format": FORMAT, "version": version, "spec": spec, "classes": classes, "extra": extra if extra is not None else {}}


def _build(spec: dict[str, Any], path: Path) -> nn.Module:
    if spec["name"] == SOURCE_NAME and isinstance(spec.get("source"), dict) and SOURCE_BUILDER:
        return SOURCE_BUILDER[0](spec, path)
    if spec["name"] not in MODELS:
        raise ModelError(
            f"{path} uses architecture '{spec['name']}', which this robfair does not know; choose one of: "
            f"{', '.join(MODELS.names())} - or upgrade robfair / register the architecture in robfair.models.MODELS"
        )
    try:
        with torch.device("meta"):  # no memory or init cost: the weights come from the file
            return create(
                spec["name"], spec["num_classes"], spec["in_shape"], mean=spec["mean"], std=spec["std"], **spec["kwargs"]
            )
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from None


def _load_state(model: nn.Module, state: dict[str, torch.Tensor], path: Path, name: str,
                fix: str = "the file was edited or saved from a different model - re-save it with robfair.models.save_checkpoint") -> None:
    want = model.state_dict()
    missing = [k for k in want if k not in state]
    unexpected = [k for k in state if k not in want]
    wrong = [k for k in want if k in state and tuple(state[k].shape) != tuple(want[k].shape)]
    if missing or unexpected or wrong:
        parts = []
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong-shape", wrong)):
            if keys:
                parts.append(f"{len(keys)} {label} (e.g. '{keys[0]}')")
        raise ModelError(
            f"{path}: the weights do not match architecture '{name}' ({', '.join(parts)}); {fix}"
        )
    model.load_state_dict(state, assign=True)


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the model saved by ``save_checkpoint`` and return ``(model in eval mode, meta)``.

    ``meta = {"format", "version", "spec", "classes", "extra"}``. The model's tensors live where
    ``map_location`` puts them (default CPU). Reads with ``torch.load(weights_only=True)`` only; a file
    that holds pickled code, a bare state_dict, a corrupt file or mismatched weights raise ModelError."""
    path = Path(path).expanduser()
    state, meta = read_checkpoint(path, map_location)
    model = _build(meta["spec"], path)
    _load_state(model, state, path, meta["spec"]["name"])
    model.eval()
    return model, meta


def read_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(state_dict, meta)`` of a checkpoint ``save_checkpoint`` wrote, without rebuilding the model
    (the trainer loads it into the model it holds); the same checks and one-line errors as
    :func:`load_checkpoint`."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelError(f"checkpoint {path} does not exist; check the path (train one with `robfair train`)")
    if path.is_dir():
        raise ModelError(f"checkpoint {path} is a directory; pass the .pt file inside it (e.g. {path}/checkpoints/best.pt)")
    if not path.is_file():
        raise ModelError(f"checkpoint {path} is not a regular file (a device, pipe or socket); pass a .pt file")
    obj = _torch_load(path, map_location)
    meta = _check_format(obj, path)
    return obj["state_dict"], meta
