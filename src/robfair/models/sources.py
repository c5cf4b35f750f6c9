"""Every way a researcher's model reaches robfair: one function, :func:`load_any`.

    model, meta = load_any("runs/at/checkpoints/best.pt")                    # a robfair checkpoint
    model, meta = load_any("net.ts")                                         # TorchScript (jit.script / jit.trace)
    model, meta = load_any("net.pt2")                                        # torch.export program
    model, meta = load_any("weights.pt", arch="mynet.py:SmallCNN", arch_kwargs={"width": 32})   # state dict
    model, meta = load_any("weights.safetensors", arch="mynet.py:build")     # safetensors
    model, meta = load_any("robustbench:Standard", model_dir="models")       # models/cifar10/Linf/Standard.pt

The format is read from the file's content, not its extension: a torch zip archive with ``code/``
and ``constants.pkl`` entries is TorchScript, one with ``archive_format`` / ``models/*.json`` is a
``torch.export`` program, a file that starts with a little-endian header length and a JSON header is
safetensors, any other torch file is read with ``torch.load(weights_only=True)`` (never unpickling
code) and is either a robfair checkpoint or a state dict (possibly nested under ``state_dict`` /
``model``, keys possibly prefixed ``module.`` / ``_orig_mod.``). Nothing is ever downloaded.

``meta`` has ``source`` (which form loaded), ``path``, ``classes`` (the class names the file stores,
or None), ``spec`` (the robfair architecture spec, or None) and ``extra``. The model is in eval mode,
on the CPU (``map_location``), and carries ``robfair_classes`` when the file names its classes, so
:func:`robfair.audit` can refuse a dataset whose class order differs.

Why one module: load_any's format detection and each format's loader and refusal are one
dispatch table, read top to bottom.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any, Mapping

import torch
import yaml
from torch import nn

from ..errors import ModelError
from ..safeio import file_digest, input_file, read_text_capped, yaml_loads
from ..utils import atomic_path
from . import checkpoint as _ckpt
from .parts import own_module, with_normalization
from .factory import create
from .usercode import import_dotted, import_file

log = logging.getLogger(__name__)

#: the forms ``--model`` accepts, for error messages
FORMS = ("a robfair checkpoint (.pt from `robfair train` / save_checkpoint)",
         "TorchScript (torch.jit.save)", "a torch.export program (.pt2, torch.export.save)",
         "a state dict (.pt, weights_only) or .safetensors file with --arch FILE.py:NAME",
         "robustbench:NAME (a file in RobustBench's MODEL_DIR/<dataset>/<threat>/<NAME>.pt layout)")

_NESTED_KEYS = ("state_dict", "model_state_dict", "model", "net", "ema", "model_ema")
_CLASS_KEYS = ("classes", "class_names")

#: standard CIFAR-10 label order (RobustBench's models predict in this order)
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
_CIFAR10 = (0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616)

#: RobustBench entries whose definitions robfair's own architectures reproduce exactly
#: (robustbench/model_zoo/cifar10.py): name -> (robfair model, kwargs, mean, std).
#: ``sub_block1`` weights (stored, unused by the forward pass) are dropped.
ROBUSTBENCH_BUILTIN: dict[tuple[str, str, str], tuple[str, dict[str, Any], Any, Any]] = {
    ("cifar10", "Linf", "Standard"): ("wrn", {"depth": 28, "widen": 10}, None, None),
    ("cifar10", "L2", "Standard"): ("wrn", {"depth": 28, "widen": 10}, None, None),
    ("cifar10", "Linf", "Carmon2019Unlabeled"): ("wrn", {"depth": 28, "widen": 10}, None, None),
    ("cifar10", "Linf", "Sehwag2020Hydra"): ("wrn", {"depth": 28, "widen": 10}, None, None),
    ("cifar10", "Linf", "Wang2020Improving"): ("wrn", {"depth": 28, "widen": 10}, None, None),
    ("cifar10", "Linf", "Hendrycks2019Using"): ("wrn", {"depth": 28, "widen": 10}, 0.5, 0.5),  # 2x - 1
    ("cifar10", "Linf", "Zhang2019Theoretically"): ("wrn", {"depth": 34, "widen": 10}, None, None),
    ("cifar10", "Linf", "Huang2020Self"): ("wrn", {"depth": 34, "widen": 10}, None, None),
    ("cifar10", "Linf", "Zhang2019You"): ("wrn", {"depth": 34, "widen": 10}, None, None),
    ("cifar10", "Linf", "Zhang2020Attacks"): ("wrn", {"depth": 34, "widen": 10}, None, None),
    ("cifar10", "Linf", "Rice2020Overfitting"): ("wrn", {"depth": 34, "widen": 20}, *_CIFAR10),
    ("cifar10", "L2", "Rice2020Overfitting"): ("preact-resnet18", {}, *_CIFAR10),
    ("cifar10", "L2", "Rony2019Decoupling"): ("wrn", {"depth": 28, "widen": 10},
                                              (0.491, 0.482, 0.447), (0.247, 0.243, 0.262)),
}
_RB_SHAPES = {"cifar10": (10, (3, 32, 32)), "cifar100": (100, (3, 32, 32))}


def forms_hint() -> str:
    return "; ".join(FORMS)


# ============================================================================== detection
def detect_format(path: Path) -> str:
    """``"torchscript"``, ``"export"``, ``"torch"`` (a torch.save file), ``"safetensors"`` or ``"unknown"``,
    from the file's bytes (nothing is unpickled or executed)."""
    with open(path, "rb") as f:
        head = f.read(64)
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError):
            return "unknown"
        tails = {n.split("/", 1)[1] if "/" in n else n for n in names}
        if "archive_format" in tails or any(t.startswith("models/") and t.endswith(".json") for t in tails) \
                or any(t.startswith("serialized_exported_program") for t in tails):
            return "export"
        if "constants.pkl" in tails or any(t.startswith("code/") for t in tails):
            return "torchscript"
        if "data.pkl" in tails:
            return "torch"
        return "unknown"
    if len(head) >= 9:
        (n,) = struct.unpack("<Q", head[:8])
        if head[8:9] == b"{" and 0 < n <= path.stat().st_size - 8:
            return "safetensors"
    if head[:1] == b"\x80" and len(head) > 1 and head[1] in range(2, 6):  # a legacy (non-zip) torch pickle
        return "torch"
    return "unknown"


# ============================================================================== architectures
def import_arch(arch: str) -> Any:
    """``"path/to/file.py:NAME"`` or ``"package.module:NAME"`` -> the class or factory ``NAME``.

    The file is the user's own code and runs on import as ``python file.py`` would: with its folder
    (and, inside a package, the package root) on the import path for that import only
    (:mod:`robfair.models.usercode`)."""
    if not isinstance(arch, str) or ":" not in arch:
        raise ModelError(f"--arch {arch!r} must be FILE.py:NAME or module:NAME, e.g. --arch mynet.py:SmallCNN")
    where, _, name = arch.rpartition(":")
    if not where or not name.isidentifier():
        raise ModelError(f"--arch {arch!r} must be FILE.py:NAME with NAME a class or function, e.g. mynet.py:SmallCNN")
    file = Path(where).expanduser()
    if where.endswith(".py") or (file.exists() and not file.is_dir()):
        if file.exists() and not file.is_dir():
            input_file(file, "--arch file", error=ModelError)  # a FIFO or device: refused, never imported
        if not file.is_file():
            raise ModelError(f"--arch file {file} does not exist; pass the .py file that defines {name}")
        module = import_file(file, f"robfair_user_arch_{abs(hash(str(file.resolve())))}")
    else:
        module = import_dotted(where)
    obj = getattr(module, name, None)
    if obj is None or not callable(obj):
        found = sorted(k for k, v in vars(module).items() if isinstance(v, type) and issubclass(v, nn.Module)
                       and v.__module__ == module.__name__)
        raise ModelError(f"{where} has no class or function '{name}'"
                         + (f"; it defines: {', '.join(found)}" if found else "") + " - pass --arch FILE.py:NAME")
    return obj


def build_arch(arch: Any, arch_kwargs: Mapping[str, Any] | None = None) -> nn.Module:
    """Build the user's architecture (a spec string, class or factory) with ``arch_kwargs``."""
    factory = import_arch(arch) if isinstance(arch, str) else arch
    kwargs = dict(arch_kwargs or {})
    try:
        net = factory(**kwargs)
    except TypeError as e:
        raise ModelError(f"building {getattr(factory, '__name__', factory)}(**{kwargs}) failed ({e}); "
                         "pass the constructor's arguments with --arch-kwargs '{\"width\": 32}'") from None
    except (KeyboardInterrupt, ModelError):
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's constructor: what it raises is its own
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        raise ModelError(f"building {getattr(factory, '__name__', factory)}(**{kwargs}) raised {type(e).__name__}"
                         f"{': ' + first if first else ''}; fix the constructor, or pass its arguments with "
                         "--arch-kwargs") from None
    if not isinstance(net, nn.Module):
        raise ModelError(f"{getattr(factory, '__name__', factory)} returned a {type(net).__name__}, not a torch.nn.Module; "
                         "pass a module class or a function that returns one")
    return net


def parse_arch_kwargs(text: str | None) -> dict[str, Any]:
    """``--arch-kwargs``: inline JSON/YAML (``'{"width": 32}'``, ``'width: 32'``) or a .json/.yaml file."""
    if text is None or not str(text).strip():
        return {}
    p = Path(str(text)).expanduser()
    is_file = p.suffix.lower() in (".json", ".yaml", ".yml") and p.exists() and not p.is_dir()
    src = read_text_capped(p, "--arch-kwargs file", error=ModelError) if is_file else str(text)
    try:
        value = yaml_loads(src, "--arch-kwargs", error=ModelError)  # YAML is a superset of JSON
    except yaml.YAMLError as e:
        raise ModelError(f"--arch-kwargs {text!r} is not JSON/YAML ({str(e).splitlines()[0]}); write e.g. '{{\"width\": 32}}'") from None
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ModelError(f"--arch-kwargs must be a mapping of argument names to values, got {value!r}; write e.g. '{{\"width\": 32}}'")
    return value


# ============================================================================== state dicts
def _is_state(obj: Any) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def find_state_dict(obj: Any, path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors of a (possibly nested) checkpoint dict, and the container's other plain values."""
    container: dict[str, Any] = {}
    for _ in range(4):
        if _is_state(obj):
            return {str(k): v for k, v in obj.items()}, container
        if not isinstance(obj, dict):
            break
        key = next((k for k in _NESTED_KEYS if isinstance(obj.get(k), dict)), None)
        if key is None:
            break
        container = {k: v for k, v in obj.items() if k != key and not isinstance(v, (dict, torch.Tensor))} or container
        obj = obj[key]
    what = f"a dict with keys {sorted(map(str, obj))[:6]}" if isinstance(obj, dict) else f"a {type(obj).__name__}"
    raise ModelError(f"{path} holds {what}, not a state dict; save model.state_dict() (optionally under a "
                     "'state_dict' or 'model' key)")


def _strip_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}


def fit_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with the key prefixes removed that keep it from matching ``model`` (``module.``,
    ``_orig_mod.``, or one prefix shared by every key such as ``model.``)."""
    want = set(model.state_dict())
    cands = [state, {_ckpt._strip(k): v for k, v in state.items()}]
    firsts = {k.split(".", 1)[0] for k in cands[1]}
    if len(firsts) == 1 and all("." in k for k in cands[1]):
        cands.append(_strip_prefix(cands[1], next(iter(firsts)) + "."))
    for c in cands:
        if set(c) == want:
            return c
    return max(cands, key=lambda c: len(set(c) & want))


def load_weights(model: nn.Module, state: dict[str, torch.Tensor], path: Path, name: str) -> nn.Module:
    """Load ``state`` into ``model`` strictly (one-line ModelError naming missing/unexpected/wrong-shape keys)."""
    state = fit_state_dict(model, state)
    _ckpt._load_state(model, state, path, name, fix="pass the --arch (and --arch-kwargs) the weights were saved from")
    return model


def _read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    try:
        from safetensors import safe_open  # lazy: optional extra (robfair[safetensors])
    except ImportError:
        raise ModelError(f"{path} is a safetensors file; install the reader with `pip install safetensors` "
                         "(or `pip install robfair[safetensors]`)") from None
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            return {k: f.get_tensor(k) for k in f.keys()}, dict(meta)
    except Exception as e:
        raise ModelError(f"cannot read {path} as safetensors ({type(e).__name__}: {str(e)[:120]}); re-save it with "
                         "safetensors.torch.save_file") from None


def _classes_from(value: Any, path: Path | None = None, where: str = "classes") -> list[str] | None:
    """The class names a model file stores: a JSON list (``json.dumps(names)``), or text with one
    name a line (or comma-separated), as ``str`` or as the ``bytes`` TorchScript's and torch.export's
    extra files come back as; a list or tuple of names; a mapping ``{index: name}`` or
    ``{name: index}``. None when nothing is stored (empty, or only a class count);
    ``ModelError`` (one line) when something is stored that is no list of names, so a class order the
    file claims is never silently dropped."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ModelError(f"{path}: its {where} entry is not UTF-8 text; store the class names as "
                             "json.dumps(names)") from None
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json.loads(value)
        except ValueError:
            value = [s for s in value.replace(",", "\n").splitlines() if s.strip()]
    if value is None or isinstance(value, (int, float)) or (isinstance(value, (list, tuple, dict)) and not value):
        return None  # nothing stored, or only a count
    if isinstance(value, dict):  # {index: name} (idx_to_class) or {name: index} (class_to_idx)
        keys, vals = list(value), list(value.values())
        if all(str(k).lstrip("-").isdigit() for k in keys):
            value = [value[k] for k in sorted(keys, key=lambda k: int(k))]
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in vals) and sorted(vals) == list(range(len(vals))):
            value = sorted(keys, key=lambda k: value[k])
    if isinstance(value, (list, tuple)) and all(isinstance(c, (str, int)) and not isinstance(c, bool) for c in value):
        names = [str(c).strip() for c in value]
        if len(set(names)) != len(names) or not all(names):
            raise ModelError(f"{path}: its {where} entry names the classes {names}, which are not unique and "
                             "non-empty; store one distinct name per output, in output order")
        return names
    raise ModelError(f"{path}: its {where} entry is a {type(value).__name__}, not a list of class names; store "
                     "them as json.dumps(names) (one name per output, in output order)")


# ============================================================================== exported / scripted programs
class _FixedBatch(nn.Module):
    """Runs a program exported for one batch size (or a range ``low..batch`` of them) on any batch:
    chunks of at most ``batch``, a chunk below ``low`` padded with copies of its last image, trimmed."""

    def __init__(self, net: nn.Module, batch: int, low: int | None = None) -> None:
        super().__init__()
        self.net = net
        self.batch = batch
        self.low = batch if low is None else low

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, lo = self.batch, self.low
        if lo <= x.shape[0] <= b:
            return self.net(x)
        outs = []
        for i in range(0, x.shape[0], b):
            chunk = x[i:i + b]
            m = chunk.shape[0]
            if m < lo:
                chunk = torch.cat([chunk, chunk[-1:].expand(lo - m, *chunk.shape[1:])])
            outs.append(self.net(chunk)[:m])
        return torch.cat(outs)


class _Exported(nn.Module):
    """A ``torch.export`` program as a module; train()/eval() do not retrace it (the program was
    exported in the mode it will run in)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def train(self, mode: bool = True) -> "_Exported":
        self.training = mode
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _export_input(ep: Any) -> tuple[tuple[int, int | None] | None, tuple[int | None, ...] | None]:
    """The batch sizes a ``torch.export`` program accepts (``(low, high)``, high None: no bound)
    and the fixed sizes of its image dimensions (None where dynamic), from its first user input."""
    inputs = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in ep.graph_signature.user_inputs]
    shape = inputs[0].meta["val"].shape if inputs else None
    if shape is None:
        return None, None

    def bounds(d: Any) -> tuple[int, int | None] | None:
        if isinstance(d, int):
            return int(d), int(d)
        vr = ep.range_constraints.get(getattr(getattr(d, "node", None), "expr", None))
        if vr is None:
            return None
        lo, hi = vr.lower, vr.upper
        return int(lo), None if bool(hi > 2**31) else int(hi)  # torch's int_oo: no upper bound

    image = tuple(int(d) if isinstance(d, int) else None for d in shape[1:])
    return bounds(shape[0]), image


def _load_export(path: Path) -> tuple[nn.Module, list[str] | None]:
    extra = {"classes": ""}
    try:
        ep = torch.export.load(str(path), extra_files=extra)
    except Exception as e:
        raise ModelError(f"cannot read {path} as a torch.export program ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}); "
                         f"re-export it with torch.export.save (torch {torch.__version__} reads it)") from None
    net = ep.module()
    try:
        batch, image = _export_input(ep)
    except Exception:  # pragma: no cover - metadata layout differs across torch versions
        batch, image = None, None
    model: nn.Module = _Exported(net)
    if batch is not None and (batch[0] > 1 or batch[1] is not None):
        lo, hi = batch
        if hi is not None and lo == hi:
            log.info("%s was exported for batch size %d; running it in chunks of that size", path, hi)
        else:
            log.info("%s was exported for batch sizes %d..%s; running it in chunks within them", path, lo, hi)
        model = _FixedBatch(model, hi if hi is not None else max(lo, 1 << 30), low=lo)
    if image is not None:
        model.robfair_input_shape = image  # the image shape its guards fix: checked against the data up front
    return model, _classes_from(extra.get("classes"), path, "extra file 'classes'")


def _load_torchscript(path: Path, map_location: Any) -> tuple[nn.Module, list[str] | None]:
    extra = {"classes": ""}
    try:
        with warnings.catch_warnings():  # torch deprecates TorchScript; reading a user's file is still right
            warnings.simplefilter("ignore", DeprecationWarning)
            net = torch.jit.load(str(path), map_location=map_location, _extra_files=extra)
    except Exception as e:
        raise ModelError(f"cannot read {path} as TorchScript ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}); "
                         "re-save it with torch.jit.save") from None
    return net, _classes_from(extra.get("classes"), path, "extra file 'classes'")


# ============================================================================== robustbench
def robustbench_dir(model_dir: str | os.PathLike | None) -> Path:
    """RobustBench's ``model_dir``: the argument, ``$ROBFAIR_ROBUSTBENCH_DIR``, else ``./models`` (its default)."""
    return Path(model_dir or os.environ.get("ROBFAIR_ROBUSTBENCH_DIR") or "models").expanduser()


def _rb_file(name: str, model_dir: Path) -> tuple[Path, str, str, str]:
    parts = name.split("/")
    if len(parts) == 3:
        dataset, threat, model_name = parts
        f = model_dir / dataset / threat / f"{model_name}.pt"
        if not f.is_file():
            raise ModelError(f"robustbench:{name}: {f} does not exist; place the file RobustBench downloads there "
                             "(robfair never downloads) or pass --model-dir")
        return f, dataset, threat, model_name
    if len(parts) != 1 or not parts[0]:
        raise ModelError(f"robustbench:{name} is not valid; write robustbench:NAME or robustbench:DATASET/THREAT/NAME")
    hits = sorted(model_dir.glob(f"*/*/{name}.pt")) if model_dir.is_dir() else []
    if not hits:
        raise ModelError(f"robustbench:{name}: no {model_dir}/<dataset>/<threat>/{name}.pt; place RobustBench's file "
                         "there (robfair never downloads) or pass --model-dir DIR")
    if len(hits) > 1:
        opts = ", ".join(f"robustbench:{h.parent.parent.name}/{h.parent.name}/{name}" for h in hits)
        raise ModelError(f"robustbench:{name} is ambiguous in {model_dir}; choose one of: {opts}")
    f = hits[0]
    return f, f.parent.parent.name, f.parent.name, name


def robustbench_keys(state: dict[str, torch.Tensor], arch: str) -> dict[str, torch.Tensor]:
    """RobustBench's WideResNet / PreActResNet(PreActBlockV2, bn_before_fc) key names -> robfair's
    (``Normalized(net)``: ``net.`` prefix; stages in ``layers``)."""
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if k.startswith("sub_block1.") or k in ("mu", "sigma"):
            continue  # unused by the forward pass / normalization constants robfair sets itself
        parts = k.split(".")
        if arch == "wrn" and parts[0] in ("block1", "block2", "block3") and parts[1] == "layer":
            parts = ["layers", str(int(parts[0][-1]) - 1), *parts[2:]]
            parts = ["shortcut" if p == "convShortcut" else p for p in parts]
        elif arch == "wrn" and parts[0] == "bn1":
            parts[0] = "bn"
        elif arch == "preact-resnet18" and parts[0].startswith("layer") and parts[0][5:].isdigit():
            parts = ["layers", str(int(parts[0][5:]) - 1), *parts[1:]]
            if len(parts) > 4 and parts[3] == "shortcut" and parts[4] == "0":
                del parts[4]
        out["net." + ".".join(parts)] = v
    return out


def robustbench_file_state(record: Mapping[str, Any], trained: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights of a RobustBench model that robfair built from its own architecture and trained
    (``trained``: its state dict, robfair's key names), under the key names of the RobustBench file it
    came from (``record``: :func:`load_source`'s), so that RobustBench's own class loads them with
    ``load_state_dict(strict=True)``: every key of the file (``module.`` prefixes stripped), each
    replaced by its trained value where :func:`robustbench_keys` maps it, the rest (unused
    ``sub_block1`` weights, normalization constants) as the file has them."""
    name = str(record["model"]).split(":", 1)[1]
    f, dataset, threat, model_name = _rb_file(name, robustbench_dir(record.get("model_dir")))
    state, _ = find_state_dict(_ckpt._torch_load(f, "cpu"), f)
    arch = ROBUSTBENCH_BUILTIN[(dataset, threat, model_name)][0]
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        key = _ckpt._strip(key)
        mapped = robustbench_keys({key: value}, arch)
        new = next(iter(mapped), None)
        out[key] = (trained[new] if new in trained else value).detach().cpu().contiguous().clone()
    return out


def load_robustbench(name: str, *, model_dir: str | os.PathLike | None = None,
                     map_location: Any = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """A RobustBench model from a file already in ``MODEL_DIR/<dataset>/<threat>/<NAME>.pt``.

    With the ``robustbench`` package importable its own definition is built; without it, the entries of
    :data:`ROBUSTBENCH_BUILTIN` are built from robfair's WRN / PreAct-ResNet-18 with their normalization.
    Weights are read with ``torch.load(weights_only=True)``; nothing is downloaded."""
    f, dataset, threat, model_name = _rb_file(name, robustbench_dir(model_dir))
    obj = _ckpt._torch_load(f, map_location)
    state, _ = find_state_dict(obj, f)
    state = {_ckpt._strip(k): v for k, v in state.items()}
    classes = list(CIFAR10_CLASSES) if dataset == "cifar10" else None
    meta: dict[str, Any] = {"source": "robustbench", "path": str(f), "classes": classes, "spec": None, "extra": {},
                            "robustbench": {"dataset": dataset, "threat": threat, "name": model_name}}
    try:
        # lazy: optional extra (robustbench; robfair builds the listed architectures without it)
        from robustbench.model_zoo.enums import BenchmarkDataset, ThreatModel
        from robustbench.model_zoo.models import model_dicts
    except ImportError:
        model_dicts = None
    if model_dicts is not None:
        try:
            entry = model_dicts[BenchmarkDataset(dataset)][ThreatModel(threat)][model_name]
        except (KeyError, ValueError):
            raise ModelError(f"robustbench has no model {dataset}/{threat}/{model_name}; check the name "
                             "(robustbench's model zoo lists them)") from None
        net = entry["model"]()
        state = _strip_prefix(state, "model.") if not set(state) & set(net.state_dict()) else state
        own = net.state_dict()
        state.update({k: own[k] for k in ("mu", "sigma") if k in own and k not in state})  # constants set in __init__
        load_weights(net, state, f, f"robustbench {model_name}")
        meta["architecture"] = "robustbench"
        return net.eval(), meta
    key = (dataset, threat, model_name)
    if key not in ROBUSTBENCH_BUILTIN or dataset not in _RB_SHAPES:
        known = ", ".join(f"{d}/{t}/{n}" for d, t, n in ROBUSTBENCH_BUILTIN)
        raise ModelError(f"robustbench:{dataset}/{threat}/{model_name} needs the robustbench package for its "
                         f"architecture (`pip install robustbench`); without it robfair builds: {known}")
    arch, kwargs, mean, std = ROBUSTBENCH_BUILTIN[key]
    k, shape = _RB_SHAPES[dataset]
    with torch.device("meta"):
        model = create(arch, k, shape, mean=mean, std=std, **kwargs)
    mapped = robustbench_keys(state, arch)
    mapped["mean"] = torch.tensor(model.robfair_spec["mean"] or [0.0] * 3).view(1, -1, 1, 1)
    mapped["std"] = torch.tensor(model.robfair_spec["std"] or [1.0] * 3).view(1, -1, 1, 1)
    _ckpt._load_state(model, mapped, f, f"robustbench {model_name} ({arch} {kwargs})",
                      fix="the file does not hold this RobustBench entry; install robustbench for its own definition")
    meta["spec"] = model.robfair_spec
    meta["architecture"] = f"robfair {arch}"
    return model.eval(), meta


# ============================================================================== the entry point
def _tag(model: nn.Module, classes: list[str] | None) -> nn.Module:
    if classes is not None:
        try:
            model.robfair_classes = list(classes)
        except (AttributeError, RuntimeError, TypeError):  # e.g. a ScriptModule refusing new attributes
            pass
    return model


def load_any(spec: str | os.PathLike, *, arch: Any = None, arch_kwargs: Mapping[str, Any] | None = None,
             model_dir: str | os.PathLike | None = None, map_location: Any = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """Load a model from any supported form (see the module doc); returns ``(model in eval mode, meta)``.

    ``arch``: ``"FILE.py:NAME"``, ``"module:NAME"``, a class or a factory, required for a bare state
    dict or a safetensors file; ``arch_kwargs`` its constructor arguments. ``model_dir``: RobustBench's
    model folder for ``robustbench:NAME``. Raises a one-line :class:`ModelError` naming the forms.
    The model carries ``robfair_source`` (``spec`` as given), so a fault of the model's own (its
    forward raising, a tuple for logits, NaN) is named after its file."""
    model, meta = _load_any(spec, arch=arch, arch_kwargs=arch_kwargs, model_dir=model_dir, map_location=map_location)
    code = arch if arch is None or isinstance(arch, str) else getattr(arch, "__name__", type(arch).__name__)
    try:
        model.robfair_source = str(spec) if code is None else f"{spec} ({code})"
    except (AttributeError, RuntimeError, TypeError):  # pragma: no cover - a module refusing new attributes
        pass
    return model, meta


def _load_any(spec: str | os.PathLike, *, arch: Any, arch_kwargs: Mapping[str, Any] | None,
              model_dir: str | os.PathLike | None, map_location: Any) -> tuple[nn.Module, dict[str, Any]]:
    """:func:`load_any` without the source tag."""
    if isinstance(spec, str) and spec.startswith("robustbench:"):
        if arch is not None:
            raise ModelError("robustbench models bring their architecture; drop --arch")
        model, meta = load_robustbench(spec.split(":", 1)[1], model_dir=model_dir, map_location=map_location)
        return _tag(model, meta["classes"]), meta
    path = Path(spec).expanduser()
    if not path.exists():
        raise ModelError(f"model {path} does not exist; pass one of: {forms_hint()}")
    if path.is_dir():
        raise ModelError(f"model {path} is a directory; pass the file inside it (e.g. {path}/checkpoints/best.pt)")
    if not path.is_file():  # /dev/zero, a pipe: never read without end
        raise ModelError(f"model {path} is not a regular file (a device, pipe or socket); pass a model file")
    kind = detect_format(path)
    base = {"path": str(path), "spec": None, "extra": {}}
    if kind == "torchscript":
        if arch is not None:
            raise ModelError(f"{path} is TorchScript, which brings its architecture; drop --arch")
        net, classes = _load_torchscript(path, map_location)
        return _tag(net.eval(), classes), {**base, "source": "torchscript", "classes": classes}
    if kind == "export":
        if arch is not None:
            raise ModelError(f"{path} is a torch.export program, which brings its architecture; drop --arch")
        net, classes = _load_export(path)
        return _tag(net, classes), {**base, "source": "export", "classes": classes}
    if kind == "safetensors":
        state, smeta = _read_safetensors(path)
        if arch is None:
            raise ModelError(f"{path} is a safetensors file of weights only; pass the architecture with "
                             "--arch FILE.py:NAME (Python: arch=...)")
        classes = next((_classes_from(smeta[k], path, f"metadata '{k}'") for k in _CLASS_KEYS if k in smeta), None)
        net = load_weights(build_arch(arch, arch_kwargs), state, path, str(arch))
        return _tag(net.eval(), classes), {**base, "source": "safetensors", "classes": classes, "extra": smeta}
    if kind == "unknown":
        with open(path, "rb") as f:
            text = f.read(64)
        what = "a git-lfs pointer (run `git lfs pull`)" if text.startswith(b"version https://git-lfs") else "none of them"
        raise ModelError(f"{path} is {what}; --model takes: {forms_hint()}")
    # a torch.save file: robfair checkpoint, or a state dict for --arch
    obj = _ckpt._torch_load(path, map_location)
    if isinstance(obj, dict) and obj.get("format") == _ckpt.FORMAT:
        if arch is not None:
            raise ModelError(f"{path} is a robfair checkpoint, which names its architecture; drop --arch")
        model, meta = _ckpt.load_checkpoint(path, map_location)
        return _tag(model, meta["classes"]), {**meta, "path": str(path), "source": "robfair-checkpoint"}
    state, container = find_state_dict(obj, path)
    if arch is None:
        raise ModelError(f"{path} is a state dict (weights without their architecture); pass --arch FILE.py:NAME "
                         "(and --arch-kwargs) for the model class it was saved from, or save the model as TorchScript "
                         "(torch.jit.save) or torch.export (.pt2)")
    classes = next((_classes_from(container[k], path, f"'{k}' entry") for k in _CLASS_KEYS if k in container), None)
    net = load_weights(build_arch(arch, arch_kwargs), state, path, str(arch))
    return _tag(net.eval(), classes), {**base, "source": "state-dict", "classes": classes,
                                        "extra": {k: v for k, v in container.items() if k not in _CLASS_KEYS}}


def model_classes(model: nn.Module) -> list[str] | None:
    """The class names a loaded model predicts, in output order, when its file named them."""
    c = getattr(model, "robfair_classes", None)
    return list(c) if isinstance(c, (list, tuple)) else None


# ============================================================================== training a model file
#: the forms of --model that robfair train fine-tunes as they are (a robfair checkpoint goes through --init)
TRAINABLE = ("state-dict", "safetensors", "torchscript", "export", "robustbench")


def is_model_file(model: str) -> bool:
    """Whether a training config's ``model`` names a model file or ``robustbench:NAME`` (as audit's
    ``--model``) rather than one of robfair's architectures (names without a path, a suffix or a colon)."""
    m = str(model)
    return m.startswith("robustbench:") or "/" in m or os.sep in m or Path(m).suffix != "" or Path(m).is_file()


def _arch_ref(arch: str | None) -> tuple[str | None, str | None]:
    """``FILE.py:NAME`` with FILE made absolute (a run folder outlives the working directory) and its
    SHA-256; a ``module:NAME`` as it is (no hash)."""
    if arch is None or ":" not in arch:
        return arch, None
    where, _, name = arch.rpartition(":")
    file = Path(where).expanduser()
    if file.is_file():
        return f"{file.resolve()}:{name}", file_digest(file)
    return arch, None


def load_source(model: str, *, arch: str | None = None, arch_kwargs: Mapping[str, Any] | None = None,
                model_dir: str | None = None, mean: Any = None, std: Any = None) -> tuple[nn.Module, dict[str, Any]]:
    """A model file to fine-tune (``robfair train --model FILE``): :func:`load_any` (with ``arch`` /
    ``arch_kwargs`` / ``model_dir``), wrapped in ``Normalized`` for ``mean`` / ``std``, checked that it
    can train, and the record of where it came from: ``{"model", "format", "sha256", "arch",
    "arch_sha256", "arch_kwargs", "mean", "std", "model_dir"}`` (paths absolute). One-line
    :class:`ModelError` for a form that cannot be trained, saying why."""
    net, meta = load_any(model, arch=arch, arch_kwargs=arch_kwargs, model_dir=model_dir)
    form = meta["source"]
    shown = str(model)
    if form == "robfair-checkpoint" and meta["spec"]["name"] == _ckpt.SOURCE_NAME:
        was = meta["spec"]["source"]
        own = Path(meta["path"]).with_name(f"{Path(meta['path']).stem}.weights.pt")
        raise ModelError(f"{shown} is a robfair checkpoint of a model trained from {was.get('model')}; fine-tune its "
                         f"weights as a model file: --model {own}" + (f" --arch {was['arch']}" if was.get("arch") else ""))
    if form == "robfair-checkpoint":
        raise ModelError(f"{shown} is a robfair checkpoint; fine-tune it with --init {shown} and its architecture as "
                         f"--model {meta['spec']['name']} (that also keeps the validation split it was trained with)")
    if form == "export":
        program = net
        while isinstance(program, (_Exported, _FixedBatch)):  # robfair's adapters keep the program's mode
            program = program.net
        try:
            program.train()
        except NotImplementedError as e:
            raise ModelError(f"{shown} is a torch.export program, which cannot be trained here: its module cannot switch "
                             f"to training mode ({str(e).strip() or 'train() is not supported'}), so BatchNorm and dropout "
                             "would train as in evaluation; save model.state_dict() and pass --arch FILE.py:NAME, or save "
                             "the model as TorchScript (torch.jit.script)") from None
        program.eval()
    if not any(p.requires_grad for p in net.parameters()):
        what = ("a frozen TorchScript module (torch.jit.freeze made its weights constants)" if form == "torchscript"
                else "a model without parameters that require gradients")
        raise ModelError(f"{shown} is {what}: there is nothing to train; save it unfrozen (torch.jit.script / "
                         "torch.jit.trace without freeze), or as a state dict with --arch FILE.py:NAME")
    if mean is not None or std is not None:
        net = with_normalization(net, mean, std)
    path = Path(meta["path"]).resolve()
    arch_ref, arch_sha = _arch_ref(arch)
    record = {"model": f"robustbench:{model.split(':', 1)[1]}" if str(model).startswith("robustbench:") else str(path),
              "format": form, "sha256": file_digest(path), "arch": arch_ref, "arch_sha256": arch_sha,
              "arch_kwargs": dict(arch_kwargs or {}), "mean": mean, "std": std,
              "model_dir": None if model_dir is None else str(Path(model_dir).expanduser().resolve())}
    return net, record


def source_spec(record: dict[str, Any], num_classes: int, in_shape: Any) -> dict[str, Any]:
    """The checkpoint spec of a model trained from a file: :func:`load_source`'s ``record`` under
    ``source`` (how :func:`rebuild_source` builds it again)."""
    return {"name": _ckpt.SOURCE_NAME, "num_classes": int(num_classes), "in_shape": [int(d) for d in in_shape],
            "kwargs": {}, "mean": None, "std": None, "source": dict(record)}


def tag_source(model: nn.Module, spec: dict[str, Any]) -> nn.Module:
    """``model`` carrying ``spec`` where ``save_checkpoint`` reads it (not ``robfair_spec``: the model
    is the user's own code, so its faults stay named as its own)."""
    setattr(model, _ckpt.SOURCE_SPEC_ATTR, spec)
    return model


def rebuild_source(spec: dict[str, Any], path: Path) -> nn.Module:
    """The model of a checkpoint trained from a file, built again from its recorded source (the
    architecture file for a state dict / safetensors, the model file itself for TorchScript and
    RobustBench); the checkpoint's weights are loaded after. One line when the source is gone."""
    rec = spec["source"]
    try:
        if rec.get("format") in ("state-dict", "safetensors"):
            net: nn.Module = build_arch(rec["arch"], rec.get("arch_kwargs"))
        else:
            net, _ = load_any(rec["model"], model_dir=rec.get("model_dir"))
    except ModelError as e:
        raise ModelError(f"{path} was trained from {rec.get('model')} ({rec.get('format')}, architecture "
                         f"{rec.get('arch') or 'in the file'}), which cannot be built again here ({e}); put the source "
                         f"back, or load {path.parent}/{path.stem}.weights.pt into your own class") from None
    if rec.get("mean") is not None or rec.get("std") is not None:
        net = with_normalization(net, rec.get("mean"), rec.get("std"))
    return tag_source(net, spec)


_ckpt.SOURCE_BUILDER[:] = [rebuild_source]


def save_own_formats(model: nn.Module, best: str | os.PathLike, classes: list[str]) -> list[Path]:
    """Beside checkpoint ``best`` (``.../best.pt``), the weights of a model trained from a file in a
    form the user's code loads as it is: ``best.weights.pt`` (``own.state_dict()``, the keys of their
    own class, ``torch.load(weights_only=True)``), and in the source's own format where it has one:
    ``best.safetensors`` (from a safetensors file, ``classes`` in its metadata) or ``best.ts``
    (TorchScript, ``classes`` as an extra file). Each written atomically; returns the paths."""
    spec = getattr(model, _ckpt.SOURCE_SPEC_ATTR, None)
    if not isinstance(spec, dict):
        return []
    best = Path(best)
    own = own_module(model)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in own.state_dict().items()}
    form = spec["source"].get("format")
    if form == "robustbench" and getattr(model, "robfair_spec", None) is not None:
        # built from robfair's own architecture (no robustbench package): back to RobustBench's key names
        state = robustbench_file_state(spec["source"], model.state_dict())
    written = [best.with_name(f"{best.stem}.weights.pt")]
    with atomic_path(written[0]) as tmp:
        torch.save(state, tmp)
    if form == "safetensors":
        from safetensors.torch import save_file  # lazy: optional extra (the source was read with it)

        written.append(best.with_name(f"{best.stem}.safetensors"))
        with atomic_path(written[-1]) as tmp:
            save_file(state, str(tmp), metadata={"classes": json.dumps(list(classes))})
    elif form == "torchscript":
        script = copy.deepcopy(own).eval()
        if any(t.device.type != "cpu" for t in script.state_dict().values()):
            script = script.cpu()  # (on the CPU already, .cpu() of a ScriptModule only warns about .grad)
        written.append(best.with_name(f"{best.stem}.ts"))
        with atomic_path(written[-1]) as tmp:
            torch.jit.save(script, str(tmp), _extra_files={"classes": json.dumps(list(classes))})
    return written
