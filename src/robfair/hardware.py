"""What the hardware runs natively: reduced precision and memory format choices, decided once.

- :func:`check_precision` refuses ``bf16`` / ``fp16`` where the device has no native units for it
  (on a CPU without AVX512-BF16 / AMX, bf16 autocast is emulated and measured 14-23x *slower* than
  fp32), with one line naming ``fp32``. Set ``ROBFAIR_EMULATED_PRECISION=1`` to run the emulated
  path anyway (tests and dry runs of GPU scripts do; the numbers are then bf16's, the speed is not).
- :func:`wants_channels_last` is the default memory format: channels_last for models with 2-D
  convolutions (faster convolutions, identical predictions), unless the caller decided.
- :func:`describe` is the one line benchmarks print about the machine they ran on.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
from typing import Any

import torch
from torch import nn

from .errors import RobfairError

log = logging.getLogger(__name__)

EMULATION_ENV = "ROBFAIR_EMULATED_PRECISION"
_CPU_NATIVE = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}
_ARM_NATIVE = {"bf16": ("bf16",), "fp16": ("asimdhp", "fphp")}


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags the kernel reports (``/proc/cpuinfo``; empty where unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return frozenset()
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return frozenset(flags)


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's processor string elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("model name", "hardware", "cpu model") and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _device(device: Any):
    return device if isinstance(device, torch.device) else torch.device(str(device))


def cpu_capability() -> str:
    """torch's dispatch level for CPU kernels (``AVX2``, ``AVX512``, ``SVE256``, ``DEFAULT`` ...)."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 - older torch
        return "unknown"


def native_precisions(device: Any) -> dict[str, bool]:
    """``{"fp32": True, "bf16": ..., "fp16": ...}``: which autocast dtypes run on native units."""
    dev = _device(device)
    out = {"fp32": True, "bf16": True, "fp16": True}
    if dev.type == "cuda":
        try:
            out["bf16"] = bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # older torch: no including_emulation
            out["bf16"] = bool(torch.cuda.is_bf16_supported())
        major, minor = torch.cuda.get_device_capability(dev)
        out["fp16"] = (major, minor) >= (5, 3)
    elif dev.type == "cpu":
        flags = cpu_flags()
        arm = platform.machine().lower() in ("aarch64", "arm64")
        table = _ARM_NATIVE if arm else _CPU_NATIVE
        for p, names in table.items():
            out[p] = any(n in flags for n in names)
    return out


def describe(device: Any = "cpu") -> str:
    """One line: the device, torch's CPU capability and which reduced precisions are native."""
    dev = _device(device)
    nat = native_precisions(dev)
    red = ", ".join(f"{p} {'native' if nat[p] else 'emulated'}" for p in ("bf16", "fp16"))
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        cap = ".".join(map(str, torch.cuda.get_device_capability(dev)))
        return f"cuda {name} (sm {cap}); {red}; torch {torch.__version__}"
    cpu = f"{cpu_model()} ({platform.machine()})"
    return (f"{dev.type} {cpu}, torch CPU capability {cpu_capability()}, {os.cpu_count()} logical cores, "
            f"{torch.get_num_threads()} torch threads; {red}; torch {torch.__version__}")


def check_precision(precision: str, device: Any, *, what: str = "--precision") -> str:
    """``precision`` if the device runs it natively; a one-line ``RobfairError`` naming ``fp32``
    otherwise (``ROBFAIR_EMULATED_PRECISION=1`` allows the emulated path, with a warning)."""
    p = str(precision).lower()
    if p not in ("fp32", "bf16", "fp16"):
        raise RobfairError(f"{what} must be fp32, bf16 or fp16, got {precision!r}")
    if p == "fp32":
        return p
    dev = _device(device)
    if native_precisions(dev)[p]:
        return p
    where = f"this CPU (torch capability {cpu_capability()}, no {' / '.join(_CPU_NATIVE[p])})" \
        if dev.type == "cpu" else f"device {dev}"
    if os.environ.get(EMULATION_ENV, "").strip() not in ("", "0"):
        log.warning("%s %s is emulated on %s: expect it to run many times slower than fp32", what, p, where)
        return p
    raise RobfairError(f"{what} {p} is not native on {where} and runs many times slower than fp32; "
                       f"use {what} fp32 (or set {EMULATION_ENV}=1 to emulate it anyway)")


def wants_channels_last(model: Any, option: bool | None = None) -> bool:
    """The memory format decision: the caller's ``option`` when given, else True exactly when the
    model has a 2-D convolution (channels_last speeds those up and changes no prediction)."""
    if option is not None:
        return bool(option)
    return isinstance(model, nn.Module) and any(isinstance(m, nn.Conv2d) for m in model.modules())


def channels_last(x: Any) -> Any:
    """A 4-D batch in exact channels_last strides (1-channel images too, whose default strides are
    ambiguous and would keep convolutions on the default-format path); other tensors unchanged."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        return x
    want = torch.empty_like(x, memory_format=torch.channels_last)
    if x.stride() == want.stride():
        return x
    return want.copy_(x)
