"""What the hardware runs fast: reduced precision and memory format choices, decided by measurement.

- :func:`measure_speedups` is the probe: on first use per machine (CPU model + flags hash) and torch
  version it times a representative small conv net (:func:`probe_net`: cifar-cnn's four 3x3 conv-BN-ReLU
  blocks and two pools, 32x32 images, batch 8; one forward + input gradient, the step every attack repeats) in
  fp32 NCHW, fp32 channels_last and under bf16 / fp16 autocast, alternating, about half a second, and keeps
  the medians' ratios in ``$ROBFAIR_CACHE_DIR`` (default ``~/.cache/robfair``), written atomically.
  The probe uses this net, not the user's model: a per-model probe would cost a model's forward and
  backward in every precision on first use (seconds for a ResNet-18 on a CPU), before any work.
- :func:`check_precision` refuses ``bf16`` / ``fp16`` where the probe measured them no faster than
  fp32, in one line with the measured ratio, naming ``fp32``. Set ``ROBFAIR_EMULATED_PRECISION=1`` to
  run them anyway (tests and dry runs of GPU scripts do; the numbers are then bf16's, the speed is not).
  On a CUDA device torch's own report decides (``is_bf16_supported``, compute capability).
- :func:`wants_channels_last` is the default memory format: channels_last for models with 2-D
  convolutions where the probe measured it faster than NCHW (identical predictions either way), unless
  the caller decided; a caller asking for it where it measured slower gets one warning with the ratio.
- :func:`cpu_flags` / :func:`native_precisions`'s flag table are reported facts only (what the kernel
  lists); no decision is made from a flag name.
- :func:`describe` is the one line benchmarks print about the machine they ran on (CPU model, the
  flags that matter, cores, torch and its capability, the measured speed-ups).
- :class:`GuardedCompile` is ``torch.compile`` where it works: the trainer's step under ``compile:``,
  eager with one warning where this torch has no compile or compiling fails.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import RobfairError
from .utils import atomic_path

log = logging.getLogger(__name__)

EMULATION_ENV = "ROBFAIR_EMULATED_PRECISION"
CACHE_ENV = "ROBFAIR_CACHE_DIR"
#: bump when the probe's net, batch or timing changes: older records are measured again
PROBE_VERSION = 2
PROBE_WHAT = ("a representative conv net (cifar-cnn's shape: 4 x conv3x3-BN-ReLU, 32/64 channels, 2 max-pools, "
              "32x32, batch 8; forward + input gradient), not the user's model")
#: the CPU flags that bear on reduced precision and convolution speed (reported, never decisive)
_CPU_NATIVE = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}
_ARM_NATIVE = {"bf16": ("bf16",), "fp16": ("asimdhp", "fphp")}
FLAGS_THAT_MATTER = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                     "amx_tile", "amx_bf16", "amx_fp16", "amx_int8", "avx_vnni", "asimd", "asimdhp", "fphp",
                     "bf16", "sve", "sve2")


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


def flag_precisions(device: Any = "cpu") -> dict[str, bool]:
    """``{"bf16": ..., "fp16": ...}``: which reduced precisions the CPU's flag names suggest units for
    (a reported fact; the decision is :func:`native_precisions`, measured)."""
    flags = cpu_flags()
    table = _ARM_NATIVE if platform.machine().lower() in ("aarch64", "arm64") else _CPU_NATIVE
    return {p: any(n in flags for n in names) for p, names in table.items()}


def native_precisions(device: Any) -> dict[str, bool]:
    """``{"fp32": True, "bf16": ..., "fp16": ...}``: which autocast dtypes run faster than fp32 here.
    CPU: measured by the probe (:func:`measure_speedups`, ratio > 1); CUDA: torch's report."""
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
        speed = measure_speedups(dev)["speedup"]
        for p in ("bf16", "fp16"):
            out[p] = _faster(speed.get(p))
    return out


def _faster(ratio: Any) -> bool:
    return isinstance(ratio, (int, float)) and ratio > 1.0


# ---------------------------------------------------------------- the probe
def cache_dir() -> Path:
    """Where the probe keeps its records: ``$ROBFAIR_CACHE_DIR``, else ``~/.cache/robfair``."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else Path("~/.cache").expanduser() / "robfair"


def machine_key(device: Any = "cpu") -> str:
    """The probe's cache key: CPU model, a hash of its flags, torch's version, the device and the
    probe's own version."""
    dev = _device(device)
    flags = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
    what = torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type
    raw = f"{cpu_model()}|{flags}|torch {torch.__version__}|{what}|probe {PROBE_VERSION}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def cache_file(device: Any = "cpu") -> Path:
    return cache_dir() / f"speed-{machine_key(device)}.json"


def probe_net() -> nn.Module:
    """The probe's net: cifar-cnn's layers (the CIFAR-size conv nets' convolutions, BN and pools), eval mode.
    A smaller net (two convolutions, no pools) measured channels_last at 1.0x where cifar-cnn gains 1.3-1.4x."""
    g = torch.Generator().manual_seed(0)

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    net = nn.Sequential(*block(3, 32), *block(32, 32), nn.MaxPool2d(2), *block(32, 64), *block(64, 64), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return net.eval()


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed_steps(dev: torch.device, budget_s: float) -> dict[str, Any]:
    """Median seconds of one forward + input gradient per variant, the variants alternating. On a CPU the
    process's CPU time is the clock (other jobs on the cores change it little), elsewhere wall time."""
    clock = time.process_time if dev.type == "cpu" else time.perf_counter
    net = probe_net().to(dev)
    net_cl = probe_net().to(dev).to(memory_format=torch.channels_last)
    x = torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(dev)
    x_cl = channels_last(x)
    y = torch.arange(8, device=dev) % 10
    loss_fn = nn.CrossEntropyLoss()

    def step(model, inp, dtype):
        inp = inp.detach().requires_grad_(True)
        # no cast cache: nested in an outer autocast region it would hand one precision's weight copies to the next
        with torch.autocast(dev.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None, cache_enabled=False):
            loss = loss_fn(model(inp).float(), y[: len(inp)])
        torch.autograd.grad(loss, inp)

    variants = {"fp32": (net, x, None), "channels_last": (net_cl, x_cl, None),
                "bf16": (net, x, torch.bfloat16), "fp16": (net, x, torch.float16)}
    times: dict[str, list[float]] = {k: [] for k in variants}
    failed: dict[str, str] = {}

    def timed(k, n=8):
        m, inp, dt = variants[k]
        _sync(dev)
        t0 = clock()
        step(m, inp[:n], dt)
        _sync(dev)
        return clock() - t0

    # screening on 2 images: a precision the device's autocast lacks is absent; one 3x slower than fp32
    # (emulated) is decided there, since timing it at full size would cost most of the budget
    screen: dict[str, float] = {}
    for k in variants:
        try:
            timed(k, 2)
            screen[k] = timed(k, 2)
        except Exception as e:  # noqa: BLE001 - a precision the device's autocast lacks is measured as absent
            failed[k] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    if "fp32" in failed:  # nothing to compare with: every variant counts as not faster
        return {"ratio": {}, "fp32_s": float("nan"), "rounds": 0, "failed": dict.fromkeys(variants, failed["fp32"]),
                "screened": []}
    slow = {k: screen["fp32"] / v for k, v in screen.items() if k != "fp32" and v > 3 * screen["fp32"]}
    live = [k for k in variants if k not in failed and k not in slow]
    for k in live:  # warm-up at full size
        timed(k)
    t_end = time.perf_counter() + budget_s
    rounds = 0
    while rounds < 5 or (time.perf_counter() < t_end and rounds < 200):
        for k in (live if rounds % 2 == 0 else live[::-1]):
            times[k].append(timed(k))
        rounds += 1
    med = {k: statistics.median(times[k]) for k in live}
    ratio = {k: med["fp32"] / med[k] for k in live}
    ratio.update(slow)
    return {"ratio": ratio, "fp32_s": med["fp32"], "rounds": rounds, "failed": failed, "screened": sorted(slow)}


_MEASURED: dict[str, dict[str, Any]] = {}


def measure_speedups(device: Any = "cpu", *, refresh: bool = False, budget_s: float = 0.25) -> dict[str, Any]:
    """The probe's record for ``device``: ``speedup`` maps ``bf16`` / ``fp16`` (autocast ÷ fp32) and
    ``channels_last`` (÷ NCHW, fp32) to the measured ratio of speeds (> 1: faster; None: the
    precision does not run here), with the machine's facts, the cache file and whether it came from
    the cache. Measured once per machine and torch version (``refresh``: again)."""
    dev = _device(device)
    path = cache_file(dev)
    key = machine_key(dev)
    if not refresh and key in _MEASURED:
        return _MEASURED[key]
    rec = None if refresh else _read_record(path, key)
    if rec is None:
        t0 = time.perf_counter()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one thread: the ratios, not the machine's load, decide
        try:  # the caller's random streams untouched (a seeded run is the same whether the probe ran or not),
            # gradients on even inside no_grad / inference_mode, no outer autocast
            with torch.random.fork_rng(devices=[]), torch.inference_mode(False), torch.enable_grad(), \
                    torch.autocast(dev.type, enabled=False):
                res = _timed_steps(dev, budget_s)
        finally:
            torch.set_num_threads(threads)
        speed = {k: (None if k in res["failed"] else round(res["ratio"][k], 3)) for k in ("bf16", "fp16", "channels_last")}
        rec = {"probe": PROBE_VERSION, "key": key, "what": PROBE_WHAT, "device": str(dev), "cpu": cpu_model(),
               "machine": platform.machine(), "torch": torch.__version__, "cpu_capability": cpu_capability(),
               "threads": 1, "flags": sorted(f for f in FLAGS_THAT_MATTER if f in cpu_flags()),
               "fp32_step_ms": round(1e3 * res["fp32_s"], 3), "speedup": speed, "rounds": res["rounds"],
               "failed": res["failed"], "screened": res["screened"], "probe_s": round(time.perf_counter() - t0, 3),
               "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            with atomic_path(path) as tmp:
                tmp.write_text(json.dumps(rec, indent=2) + "\n")
        except Exception as e:  # noqa: BLE001 - an unwritable cache costs a re-measurement, nothing else
            log.debug("speed probe record not written to %s: %s", path, e)
        rec = dict(rec, cached=False)
    else:
        rec = dict(rec, cached=True)
    rec["cache_file"] = str(path)
    _MEASURED[key] = rec
    return rec


def _read_record(path: Path, key: str) -> dict[str, Any] | None:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = (isinstance(rec, dict) and rec.get("key") == key and rec.get("probe") == PROBE_VERSION
          and isinstance(rec.get("speedup"), dict))
    return rec if ok else None


def speedup_text(rec: dict[str, Any]) -> str:
    """``bf16 2.41x, fp16 0.77x, channels_last 1.12x`` (speed ÷ fp32 NCHW; ``-``: does not run)."""
    sp = rec["speedup"]
    return ", ".join(f"{k} {'-' if sp.get(k) is None else f'{sp[k]:.2f}x'}" for k in ("bf16", "fp16", "channels_last"))


def flags_text() -> str:
    """The CPU flags that matter that this CPU lists (``none of ...`` when it lists none)."""
    have = [f for f in FLAGS_THAT_MATTER if f in cpu_flags()]
    return " ".join(have) if have else "none of the AVX2 / AVX-512 / AMX / NEON flags"


def describe(device: Any = "cpu") -> str:
    """One line: the device (CPU model, the flags that matter, cores), torch and its capability, and
    the measured speed-ups of reduced precision and channels_last (the probe's)."""
    dev = _device(device)
    if dev.type == "cuda":
        nat = native_precisions(dev)
        red = ", ".join(f"{p} {'native' if nat[p] else 'emulated'}" for p in ("bf16", "fp16"))
        name = torch.cuda.get_device_name(dev)
        cap = ".".join(map(str, torch.cuda.get_device_capability(dev)))
        return (f"cuda {name} (sm {cap}); {red} (torch's report); host {cpu_model()} ({platform.machine()}, flags: "
                f"{flags_text()}, {os.cpu_count()} logical cores); torch {torch.__version__}")
    rec = measure_speedups(dev)
    cpu = f"{cpu_model()} ({platform.machine()})"
    return (f"{dev.type} {cpu}, flags: {flags_text()}; torch CPU capability {cpu_capability()}, {os.cpu_count()} "
            f"logical cores, {torch.get_num_threads()} torch threads; measured speed-up ÷ fp32 NCHW (probe, 1 thread): "
            f"{speedup_text(rec)}; torch {torch.__version__}")


def check_precision(precision: str, device: Any, *, what: str = "--precision") -> str:
    """``precision`` if the device runs it faster than fp32 (measured on a CPU); a one-line
    ``RobfairError`` with the measured ratio, naming ``fp32``, otherwise (``ROBFAIR_EMULATED_PRECISION=1``
    allows it anyway, with a one-line warning)."""
    p = str(precision).lower()
    if p not in ("fp32", "bf16", "fp16"):
        raise RobfairError(f"{what} must be fp32, bf16 or fp16, got {precision!r}")
    if p == "fp32":
        return p
    dev = _device(device)
    if native_precisions(dev)[p]:
        return p
    if dev.type == "cpu":
        rec = measure_speedups(dev)
        r = rec["speedup"].get(p)
        how = ("is not native here (measured: it does not run)" if r is None
               else f"is not native here (measured {r:.2f}x fp32's speed, not faster)")
        where = (f"this CPU ({cpu_model()}, torch capability {cpu_capability()}; probe: {rec['cache_file']})")
    else:
        how, where = "is not native", f"device {dev}"
    if os.environ.get(EMULATION_ENV, "").strip() not in ("", "0"):
        log.warning("%s %s %s on %s: running it anyway (%s=1)", what, p, how, where, EMULATION_ENV)
        return p
    raise RobfairError(f"{what} {p} {how} on {where}; use {what} fp32 (or set {EMULATION_ENV}=1 to run it anyway)")


_WARNED: set[str] = set()


def _model_device(model: Any) -> torch.device:
    if isinstance(model, nn.Module):
        for t in model.parameters():
            return t.device
    return torch.device("cpu")


def channels_last_pays(device: Any = "cpu") -> bool:
    """Whether channels_last is faster than NCHW here: measured on a CPU, assumed on CUDA (cuDNN's
    tensor-core convolutions want it)."""
    dev = _device(device)
    if dev.type == "cuda":
        return True
    if dev.type != "cpu":
        return False
    return _faster(measure_speedups(dev)["speedup"].get("channels_last"))


def wants_channels_last(model: Any, option: bool | None = None) -> bool:
    """The memory format decision: the caller's ``option`` when given (True where the probe measured
    channels_last slower: one warning with the ratio), else True exactly when the model has a 2-D
    convolution and channels_last is faster here (it changes no prediction)."""
    conv = isinstance(model, nn.Module) and any(isinstance(m, nn.Conv2d) for m in model.modules())
    if option is not None:
        if option and conv and _model_device(model).type == "cpu" and not channels_last_pays("cpu"):
            rec = measure_speedups("cpu")
            r = rec["speedup"].get("channels_last")
            msg = (f"channels_last measured {'-' if r is None else f'{r:.2f}'}x NCHW's speed on this CPU "
                   f"(slower; probe: {rec['cache_file']}); it was asked for, so it is used")
            if msg not in _WARNED:
                _WARNED.add(msg)
                log.warning(msg)
        return bool(option)
    return conv and channels_last_pays(_model_device(model))
class GuardedCompile(nn.Module):
    """``torch.compile(model, backend=backend)`` where this torch has it, falling back to ``model`` itself
    (eager) for good, with one warning, if compiling fails on a call. The eager model is the
    ``_orig_mod`` submodule, as in torch's own wrapper, so :func:`robfair.models.factory.unwrap` and
    checkpoints see the plain model; parameters are shared."""

    def __init__(self, model: nn.Module, backend: str = "inductor") -> None:
        super().__init__()
        self._orig_mod = model
        self.backend = backend
        self.failure: str | None = None
        object.__setattr__(self, "_compiled", None)  # not a submodule: its parameters are _orig_mod's
        if not hasattr(torch, "compile"):
            self.failure = f"torch {torch.__version__} has no torch.compile"
        else:
            try:
                object.__setattr__(self, "_compiled", torch.compile(model, backend=backend))
            except Exception as e:  # noqa: BLE001 - the guard: any failure to set up compile means eager
                self.failure = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        if self.failure:
            log.warning("torch.compile (%s) unavailable, running eager: %s", backend, self.failure)

    @property
    def compiled(self) -> bool:
        """Whether calls go through the compiled module (False: eager, see ``failure``)."""
        return self._compiled is not None and self.failure is None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.compiled:
            try:
                return self._compiled(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - a compile error falls back; the model's own error re-raises below
                self.failure = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                log.warning("torch.compile (%s) failed, running eager from now on: %s", self.backend, self.failure)
        return self._orig_mod(*args, **kwargs)


def channels_last(x: Any) -> Any:
    """A 4-D batch in exact channels_last strides (1-channel images too, whose default strides are
    ambiguous and would keep convolutions on the default-format path); other tensors unchanged."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        return x
    want = torch.empty_like(x, memory_format=torch.channels_last)
    if x.stride() == want.stride():
        return x
    return want.copy_(x)
