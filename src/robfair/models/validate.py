"""The one check of a user's model against its data, run before any long work.

robfair calls ``model(x)`` with ``x`` a float batch ``(N, C, H, W)`` in ``[0, 1]`` and expects one
row of ``K`` finite float logits per image. Whatever the model does instead (its forward raises, it
returns a tuple, a dict, ``None``, integers, the wrong shape, NaN or Inf) is the user's model's
fault, not robfair's: :func:`check_model_output` turns each into one :class:`ModelError` line that
names the model, what it returned or raised (its own message, one line) and what robfair expects.
The audit engine runs it on the first batch of every evaluation (and reuses those logits for the
batch's clean predictions, so it costs no extra forward), ``certify`` on its first samples, and
``robfair leaderboard`` on every model before the first audit starts (:func:`robfair.auditing.engine.
validate_model`).

Everything that runs a user's model runs it through :func:`guarded` (:class:`UserModel`): what its
forward raises on any batch, an attack's included, is a :class:`ModelError` naming it (one of
robfair's own architectures is left alone: a failure there is robfair's bug). A model whose
weights are float64 (or float16 / bfloat16) just works: every batch reaches it in its own dtype
(float32 pixels are exact in float64), and half-precision logits come back as float32, as the
attacks' own ``logits`` do.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator

import torch
from torch import nn

from ..errors import ModelError, RobfairError
from .parts import Normalized, copy_tags, fmt_shape, own_module
from .factory import check_model_data

#: what robfair does with a model, for the end of every message of this module
EXPECTS = "robfair calls model(x) with x a float32 batch (N, C, H, W) in [0, 1] and expects (N, K) logits"


class NonFiniteLogits(ModelError):
    """The model returned NaN or Inf logits for ``bad`` of ``n`` inputs: their argmax is garbage."""

    def __init__(self, message: str, bad: int = 0, n: int = 0) -> None:
        super().__init__(message)
        self.bad, self.n = int(bad), int(n)


# ============================================================================== names
def _chain(model: Any) -> Iterator[Any]:
    """``model`` and the modules its wrappers (``Normalized``, :class:`UserModel`, DDP, a
    ``torch.export`` adapter) hold as ``.net`` / ``.module``, outermost first."""
    seen = 0
    while model is not None and seen < 8:
        yield model
        seen += 1
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
            continue
        mods = getattr(model, "_modules", None)  # a ScriptModule's is no dict: no .get
        try:
            model = mods["net"] if mods is not None and "net" in mods else None
        except (KeyError, TypeError, RuntimeError):  # pragma: no cover - an exotic container
            model = None


def model_name(model: Any) -> str:
    """How messages name a model: its file (``robfair_source``, set by ``load_any``), else its
    robfair architecture, else its class."""
    for m in _chain(model):
        src = getattr(m, "robfair_source", None)
        if isinstance(src, str) and src:
            return f"the model {src}"
    for m in _chain(model):
        spec = getattr(m, "robfair_spec", None)
        if isinstance(spec, dict) and spec.get("name"):
            return f"the model ({spec['name']})"
    inner = [m for m in _chain(model) if not isinstance(m, (Normalized, UserModel))]
    return f"the model ({type(inner[0] if inner else model).__name__})"


# ============================================================================== the model as robfair runs it
def input_dtype(model: nn.Module) -> torch.dtype | None:
    """The dtype of the model's first floating parameter (or buffer), None without one."""
    for t in itertools.chain(model.parameters(), model.buffers()):
        if t.is_floating_point():
            return t.dtype
    return None


def robfair_built(model: Any) -> bool:
    """True for one of robfair's own architectures (``robfair_spec``): a failure inside it is
    robfair's, never the user's."""
    return any(getattr(m, "robfair_spec", None) for m in _chain(model))


class UserModel(nn.Module):
    """The model as robfair runs it: fed its own dtype (the dtype is read from the weights at each
    call, so ``.to(dtype)`` on the wrapper keeps it right; float16 / bfloat16 logits come back as
    float32, float64 ones stay float64; gradients flow back to the input), and, unless it is one of
    robfair's architectures, what its forward raises is one :class:`ModelError` line naming it
    (its type and first line, ``sys.exit`` included). Ctrl-C, running out of memory and robfair's
    own errors pass through as they are."""

    def __init__(self, net: nn.Module, *, own_faults: bool = True) -> None:
        super().__init__()
        self.net = net
        self.own_faults = own_faults
        self.training = net.training

    def forward(self, x: torch.Tensor) -> Any:
        dtype = input_dtype(self.net)
        xin = x.to(dtype) if dtype is not None and x.is_floating_point() and x.dtype != dtype else x
        try:
            z = self.net(xin)
        except (KeyboardInterrupt, RobfairError, MemoryError, torch.OutOfMemoryError):
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's forward: anything it raises is its own
            if not self.own_faults:
                raise
            raise ModelError(f"{model_name(self)} raised {_raised(e)} on a batch of shape {tuple(x.shape)}; "
                             f"{EXPECTS}: fix the model's forward, or pick the --data it was trained for") from None
        if isinstance(z, torch.Tensor) and z.dtype in (torch.float16, torch.bfloat16):
            z = z.float()
        return z


def guarded(model: nn.Module) -> nn.Module:
    """``model`` as robfair runs it (:class:`UserModel`): a user's model is wrapped (its faults named
    as its own, its dtype fed to it); one of robfair's architectures only when its weights are not
    float32. The try block costs nothing on a forward that succeeds."""
    if isinstance(model, UserModel):
        return model
    own = not robfair_built(model)
    if not own and input_dtype(model) in (None, torch.float32):
        return model
    return copy_tags(model, UserModel(model, own_faults=own))


# ============================================================================== the check
def guard_training(model: nn.Module) -> nn.Module:
    """A user's model to train (``robfair train --model FILE``), in place: what its forward raises
    becomes one :class:`ModelError` line naming it as the user's fault (as :class:`UserModel` does
    for audits), while the module, its state dict keys and its class name stay the user's -- its
    class is swapped for a same-named subclass whose ``forward`` guards the original. Ctrl-C, running
    out of memory and robfair's own errors pass through. A TorchScript module (whose ``forward`` is
    compiled) is returned as it is: its errors name the TorchScript interpreter already."""
    own = own_module(model)
    cls = type(own)
    if isinstance(own, torch.jit.ScriptModule) or getattr(cls, "_robfair_guarded", False) or robfair_built(model):
        return model  # compiled, guarded already, or robfair's own architecture (its faults are robfair's)

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        try:
            return cls.forward(self, *args, **kwargs)
        except (KeyboardInterrupt, RobfairError, MemoryError, torch.OutOfMemoryError):
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's forward: anything it raises is its own
            shape = tuple(args[0].shape) if args and isinstance(args[0], torch.Tensor) else "?"
            phase = "training" if self.training else "evaluation"
            raise ModelError(f"{model_name(model)} raised {_raised(e)} in {phase} on a batch of "
                             f"shape {shape}; fix the model's forward (the run resumes from its last checkpoint "
                             "with --resume)") from None

    own.__class__ = type(cls.__name__, (cls,), {"forward": forward, "_robfair_guarded": True,
                                                 "__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return model


def _raised(e: BaseException) -> str:
    """``Type: first line`` of what the model raised (a TorchScript error: the Python exception it
    ends with, not the interpreter's preamble); ``SystemExit: sys.exit(code)``."""
    if isinstance(e, SystemExit):
        return f"SystemExit: sys.exit({e.code!r})"
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    kind = type(e).__name__
    if lines and lines[0].startswith("The following operation failed in the TorchScript interpreter"):
        last = lines[-1].removeprefix("builtins.")
        head, sep, rest = last.partition(": ")
        kind, lines = (f"{head} (in TorchScript)", [rest]) if sep and head.replace(".", "").isidentifier() else \
            (f"{kind} (in TorchScript)", [last])
    line = lines[0] if lines else ""
    line = line[:200] + ("..." if len(line) > 200 else "")
    return f"{kind}: {line}" if line else kind


def _what(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return f"Tensor {tuple(obj.shape)}"
    return type(obj).__name__


def _returned(name: str, z: Any, x: torch.Tensor, num_classes: int | None) -> str | None:
    """Why ``z`` is not the (N, K) logits of ``x`` (None when it is; finiteness apart)."""
    n = x.shape[0]
    want = f"({n}, {num_classes if num_classes else 'K'})"
    tail = f"for a batch of shape {tuple(x.shape)}; {EXPECTS}"
    if isinstance(z, dict) or (hasattr(z, "keys") and hasattr(z, "__getitem__") and not isinstance(z, torch.Tensor)):
        keys = list(z.keys())
        key = next((k for k in keys if str(k) == "logits"), keys[0] if keys else None)
        fix = f"return out[{key!r}] from forward (or wrap the model so it does)" if key is not None else \
            "return the logits tensor from forward"
        return (f"{name} returned a {type(z).__name__} with keys {[str(k) for k in keys][:6]} {tail}: {fix}")
    if isinstance(z, (tuple, list)):
        items = ", ".join(_what(v) for v in z[:4]) + (", ..." if len(z) > 4 else "")
        return (f"{name} returned a {type(z).__name__} of {len(z)} ({items}) {tail}: return the logits alone from "
                "forward (e.g. out[0]), or wrap the model so it does")
    if not isinstance(z, torch.Tensor):
        return f"{name} returned {'None' if z is None else 'a ' + type(z).__name__} {tail}: return the logits tensor"
    if not z.is_floating_point():
        return (f"{name} returned {str(z.dtype).removeprefix('torch.')} values of shape {tuple(z.shape)} {tail}: "
                "return the float scores before argmax, not class ids")
    if z.ndim != 2 or z.shape[0] != n:
        return f"{name} returned a tensor of shape {tuple(z.shape)} {tail} (here {want}): one row of logits per image"
    if num_classes is not None and z.shape[1] != num_classes:
        return (f"{name} outputs {z.shape[1]} logits but the dataset has {num_classes} classes; "
                "pick the matching --data or model")
    if z.shape[1] < 2:
        return (f"{name} outputs {z.shape[1]} logit per image {tail}: a binary model needs two logits "
                "(e.g. torch.cat([-z, z], 1))")
    return None


def nonfinite_weights(model: nn.Module) -> list[str]:
    """The names of the model's floating weights and buffers that hold NaN or Inf (a full scan)."""
    try:
        state = model.state_dict()
    except Exception:  # noqa: BLE001 - a program without a state dict: nothing to name
        return []
    return [k for k, v in state.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())]


def _bad_weights(model: nn.Module) -> str:
    """", its weights hold NaN/Inf in a, b" when they do (only on the error path)."""
    names = nonfinite_weights(model)
    if not names:
        return ""
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"; its weights hold NaN/Inf ({', '.join(names[:3])}{more}): pick a checkpoint from before it diverged"


def nonfinite_error(model: nn.Module, bad: int, m: int, where: str, precision: str = "fp32") -> NonFiniteLogits:
    """The refusal of NaN / Inf logits: ``bad`` of ``m`` ``where`` (e.g. "samples of the first batch");
    under a half ``precision`` the message says that logits overflow there sooner."""
    half = (f"; at precision {precision} large logits overflow to Inf: try --precision fp32 (Python: "
            "precision='fp32')") if precision != "fp32" else ""
    return NonFiniteLogits(f"{model_name(model)} returned NaN/Inf logits for {bad} of {m} {where}; an argmax of NaN "
                           f"is no prediction: {EXPECTS.replace('(N, K) logits', '(N, K) finite logits')}"
                           f"{_bad_weights(model)}{half}", bad, m)


def _check_inputs(model: nn.Module, x: torch.Tensor, num_classes: int | None) -> None:
    """What can be refused before the forward: a robfair architecture's spec, a normalization of
    another channel count, a ``torch.export`` program's fixed image shape."""
    name = model_name(model)
    c = x.shape[1] if x.ndim >= 2 else None
    for m in _chain(model):
        if getattr(m, "robfair_spec", None) and num_classes is not None:
            check_model_data(m, tuple(x.shape[1:]), num_classes)
            break
        if isinstance(m, Normalized) and c is not None:
            k = max(int(t.shape[1]) if t.ndim > 1 else int(t.numel()) for t in (m.mean, m.std))
            if k not in (1, c):
                raise ModelError(f"--mean/--std (Python: mean=/std=) for {name} have {k} values but the images have "
                                 f"{c} channel{'s' if c > 1 else ''}; pass {'1 value' if c == 1 else f'1 or {c} values'}")
        want = getattr(m, "robfair_input_shape", None)
        if isinstance(want, tuple) and len(want) == x.ndim - 1:
            if any(w is not None and int(w) != int(h) for w, h in zip(want, x.shape[1:])):
                shown = "x".join("*" if w is None else str(w) for w in want)
                raise ModelError(f"{name} is a torch.export program for images of shape {shown} but the data's "
                                 f"images are {fmt_shape(x.shape[1:])}; pick the --data it was exported for, or "
                                 "re-export it with dynamic_shapes for these images")


def call_model(model: nn.Module, x: torch.Tensor) -> Any:
    """``model(x)`` as robfair runs it (:func:`guarded`)."""
    return guarded(model)(x)


def check_model_output(model: nn.Module, x: torch.Tensor, num_classes: int | None = None, *,
                       where: str = "samples of the first batch", precision: str = "fp32") -> torch.Tensor:
    """Run ``model`` on ``x`` (no gradients; the caller's autocast applies) and return its logits,
    or raise one :class:`ModelError` line: the forward raised, the output is not one row of
    ``num_classes`` (None: any K >= 2) float logits per image, or it holds NaN / Inf
    (:class:`NonFiniteLogits`, with the count; ``precision``: the autocast it ran under, for the message)."""
    _check_inputs(model, x, num_classes)
    with torch.no_grad():
        z = call_model(model, x)
    why = _returned(model_name(model), z, x, num_classes)
    if why is not None:
        raise ModelError(why)
    finite = torch.isfinite(z).all(1)
    bad = int((~finite).sum())
    if bad:
        raise nonfinite_error(model, bad, int(z.shape[0]), where, precision)
    return z


def check_input_gradient(model: nn.Module, x: torch.Tensor) -> None:
    """The logits depend differentiably on the input (gradient attacks need it): one forward and
    backward of one image; a forward under ``torch.no_grad()`` or a ``.detach()`` is refused."""
    xg = x[:1].detach().clone().requires_grad_(True)
    with torch.enable_grad():
        z = call_model(model, xg)
        ok = isinstance(z, torch.Tensor) and z.requires_grad
        if ok:
            try:
                (g,) = torch.autograd.grad(z.float().sum(), xg, allow_unused=True)
            except (KeyboardInterrupt, MemoryError, torch.OutOfMemoryError):
                raise
            except Exception as e:  # noqa: BLE001 - the backward of the user's forward (an in-place op ...)
                if robfair_built(model):  # robfair's own architecture: robfair's bug
                    raise
                raise ModelError(f"the backward pass of {model_name(model)} failed ({_raised(e)}) on one image of "
                                 f"shape {tuple(xg.shape[1:])}; robfair's attacks need input gradients: fix the "
                                 "forward (e.g. an in-place operation on a tensor autograd needs)") from None
            ok = g is not None
    if not ok:
        raise ModelError(f"{model_name(model)} returns logits without a gradient with respect to its input (a "
                         "forward under torch.no_grad(), a .detach() or a non-differentiable step); robfair's "
                         "attacks need input gradients: make the forward differentiable, or audit with an attack of "
                         "your own (a callable)")
