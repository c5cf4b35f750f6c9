"""How close robfair's PGD gets to the cost floor, against a reference-style PGD, and what
channels_last and bf16 autocast buy.

    python benchmarks/bench_attack.py                     # batch 128, PreAct-ResNet-18 + cifar-cnn, CPU
    python benchmarks/bench_attack.py --quick             # CI smoke run: batch 16, one repeat
    python benchmarks/bench_attack.py --threads 1 --clock cpu    # on a shared, busy machine
    python benchmarks/bench_attack.py --device cuda --models preact-resnet18

Printed, per model (all measured in this run; each time is the minimum over repeats, which is the
estimate least disturbed by other processes; runs of the different variants alternate):

(a)  robfair PGD-k time / floor, where the floor is an actual run of k x (forward + input-gradient
     backward) + 1 forward: the least an attack that checks every iterate can cost.
     Targets: <= 1.05 (PreAct-ResNet-18), <= 1.15 (cifar-cnn). Given for fp32, channels_last and
     bf16 + channels_last, each against its own floor.
(a') the same ratio estimated as 1 + (attack's own per-run overhead) / floor, the overhead being
     PGD-k minus its floor on a trivial model of the same input size: far less noisy than (a).
(b)  the ratio for a reference-style PGD (``loss.backward()`` with parameters requiring grad, as in
     most research code), and robfair's speed-up over it.
(c)  channels_last speed-up of robfair's PGD (fp32), (d) bf16 autocast + channels_last speed-up.
(e)  bf16 + channels_last PGD-k / its own bf16 floor, with most samples fooled (random labels: about
     90% fooled at the start, each confirmed in fp32 once) and with none fooled (labels = the clean
     predictions, eps 0: every sample's last iterate checked in fp32), per model at its own batch
     (``--half-batch``, default PreAct-ResNet-18 32, cifar-cnn 128): the median over repeats of the
     ratio to the floor run next to it (floor, fooled, floor, none alternate), CPU clock (process
     time; use --threads 1). Target: <= 1.10 either way.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from robfair.attacks import PGD
from robfair.attacks.attack import count_passes
from robfair.hardware import describe
from robfair.utils import resolve_device, tune_allocator

EPS = 8 / 255


def reference_pgd(model, x, y, eps: float, alpha: float, steps: int, generator: torch.Generator) -> torch.Tensor:
    """PGD as most reference code writes it: loss.backward() (parameter grads computed too),
    model.zero_grad() each step, no success tracking."""
    delta = torch.empty_like(x).copy_(torch.rand(x.shape, generator=generator, device=generator.device))
    delta = (2 * delta - 1) * eps
    delta = (x + delta).clamp(0, 1) - x
    for _ in range(steps):
        delta.requires_grad_(True)
        loss = F.cross_entropy(model(x + delta), y)
        loss.backward()
        grad = delta.grad.detach()
        delta = (delta.detach() + alpha * grad.sign()).clamp(-eps, eps)
        delta = (x + delta).clamp(0, 1) - x
        model.zero_grad()
    return (x + delta).detach()


def trivial_model(device: torch.device, channels_last: bool) -> nn.Module:
    """A 1x1 convolution to 10 channels, averaged: forward and backward cost next to nothing, so
    PGD's own work shows; the input gradient comes back in the input's memory format, as with a
    real network."""
    net = nn.Sequential(nn.Conv2d(3, 10, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten()).to(device).eval()
    return net.to(memory_format=torch.channels_last) if channels_last else net


def autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return torch.autocast(device_type=device.type, enabled=False)
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def floor_run(model, x, y, k: int, precision: str, device: torch.device) -> None:
    """k forward + input-gradient passes and one forward: what PGD-k cannot avoid."""
    for _ in range(k):
        xa = x.clone().requires_grad_(True)
        with autocast(device, precision):
            z = model(xa)
        torch.autograd.grad(F.cross_entropy(z.float(), y, reduction="sum"), xa)
    with torch.no_grad(), autocast(device, precision):
        model(x)


class Timer:
    def __init__(self, device: torch.device, clock: str) -> None:
        self.device = device
        self.now = time.process_time if clock == "cpu" else time.perf_counter
        self.best: dict[str, float] = {}

    def __call__(self, key: str, fn: Callable[[], object]) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t = self.now()
        fn()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        dt = self.now() - t
        self.best[key] = min(dt, self.best.get(key, float("inf")))
        return dt


def bench_model(name: str, args, device: torch.device) -> dict[str, float]:
    from robfair.models import create  # the library's own architectures

    torch.manual_seed(0)
    k = args.steps
    base = create(name, 10, (3, 32, 32)).to(device).eval()
    model_cl = create(name, 10, (3, 32, 32)).to(device).eval().to(memory_format=torch.channels_last)
    model_cl.load_state_dict(base.state_dict())  # same weights, channels_last strides kept
    x = torch.rand(args.batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    modes = {"fp32": (base, x, "fp32"), "fp32+cl": (model_cl, x_cl, "fp32"), "bf16+cl": (model_cl, x_cl, "bf16")}
    gen = lambda r: torch.Generator(device).manual_seed(r)  # noqa: E731
    timer = Timer(device, args.clock)

    # warm-up: allocator, oneDNN primitives, autocast caches
    for model, xm, precision in modes.values():
        floor_run(model, xm, y, 1, precision, device)
        PGD(1, precision=precision)(model, xm, y, EPS, generator=gen(0))
    reference_pgd(base, x, y, EPS, EPS / 4, 1, gen(0))

    for r in range(args.repeats):
        for m, (model, xm, precision) in modes.items():
            attack = PGD(k, precision=precision)  # evaluation semantics: first success, every iterate checked
            t_floor = timer(f"{m}:floor", lambda: floor_run(model, xm, y, k, precision, device))
            t_pgd = timer(f"{m}:pgd", lambda: attack(model, xm, y, EPS, generator=gen(r)))
            line = f"  [{name} {r + 1}/{args.repeats} {m:8}] floor {t_floor:7.3f}s  PGD-{k} {t_pgd:7.3f}s"
            if m == "fp32":
                t_ref = timer("ref", lambda: reference_pgd(model, xm, y, EPS, EPS / 4, k, gen(r)))
                line += f"  reference {t_ref:7.3f}s"
            print(line, flush=True)

    # PGD's own work, on a model that costs nothing (many repeats: it is quick)
    for m, (_, xm, precision) in modes.items():
        triv = trivial_model(device, channels_last=m.endswith("+cl"))
        attack = PGD(k, precision=precision)
        for r in range(max(5, 5 * args.repeats)):
            timer(f"{m}:triv_floor", lambda: floor_run(triv, xm, y, k, precision, device))
            timer(f"{m}:triv_pgd", lambda: attack(triv, xm, y, EPS, generator=gen(r)))
    return timer.best


def bench_half(name: str, batch: int, args, device: torch.device) -> dict[str, object]:
    """(e): bf16 + channels_last PGD-k against its bf16 floor, with most samples fooled and with
    none, alternating; per repeat the ratio to the floor run just before it."""
    from robfair.models import create  # the library's own architectures

    torch.manual_seed(0)
    k = args.steps
    model = create(name, 10, (3, 32, 32)).to(device).eval().to(memory_format=torch.channels_last)
    x = torch.rand(batch, 3, 32, 32, device=device).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        clean = model(x).argmax(1)
    cases = {"fooled": (torch.randint(0, 10, (batch,), device=device), EPS), "none": (clean, 0.0)}
    attack = PGD(k, precision="bf16")
    gen = lambda r: torch.Generator(device).manual_seed(r)  # noqa: E731
    timer = Timer(device, "wall" if device.type == "cuda" else "cpu")
    out: dict[str, object] = {}
    for case, (y, eps) in cases.items():  # warm-up, and what each case is: fooled share, fp32 rows
        floor_run(model, x, y, 1, "bf16", device)
        with count_passes() as c:
            res = attack.run(model, x, y, eps, generator=gen(0))
        out[f"{case}:fooled"] = float(res.fooled.float().mean())
        out[f"{case}:fp32_rows"] = c.forward / batch
    ratios: dict[str, list[float]] = {case: [] for case in cases}
    for r in range(args.half_repeats):
        for case, (y, eps) in cases.items():
            t_floor = timer("floor", lambda: floor_run(model, x, y, k, "bf16", device))
            t_pgd = timer(case, lambda: attack(model, x, y, eps, generator=gen(r)))
            ratios[case].append(t_pgd / t_floor)
            print(f"  [{name} b{batch} {r + 1}/{args.half_repeats} bf16+cl {case:6}] floor {t_floor:7.3f}s  "
                  f"PGD-{k} {t_pgd:7.3f}s  ratio {t_pgd / t_floor:.3f}", flush=True)
    for case, rs in ratios.items():
        out[f"{case}:ratio"] = statistics.median(rs)
        out[f"{case}:spread"] = (min(rs), max(rs))
    return out


def half_batches(spec: str, quick: bool) -> dict[str, int]:
    """``--half-batch``: ``model=batch`` pairs, comma-separated (quick: batch 4 each)."""
    out = {}
    for part in spec.split(","):
        name, _, b = part.partition("=")
        if name.strip():
            out[name.strip()] = 4 if quick else int(b)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CI smoke run: batch 16, 1 repeat")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, auto")
    p.add_argument("--models", default="preact-resnet18,cifar-cnn")
    p.add_argument("--batch", type=int, default=None, help="default 128 (16 with --quick)")
    p.add_argument("--repeats", type=int, default=None, help="default 3 (1 with --quick)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: process CPU time, steadier on a busy machine (use with --threads 1)")
    p.add_argument("--half-batch", default="preact-resnet18=32,cifar-cnn=128",
                   help="(e) bf16 PGD / bf16 floor: model=batch pairs ('' skips it; quick: batch 4)")
    p.add_argument("--half-repeats", type=int, default=None, help="(e) repeats, median (default 5, 1 with --quick)")
    args = p.parse_args()
    args.batch = args.batch or (16 if args.quick else 128)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.half_repeats = args.half_repeats or (1 if args.quick else 5)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    tuned = tune_allocator()
    from robfair.hardware import describe  # here, not at the top: the import block is the bf16 branch's to change

    print(f"# machine: {describe(device)}")
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, batch {args.batch}, "
          f"PGD-{args.steps}, repeats {args.repeats} (min), clock {args.clock}, allocator tuned: {tuned}")
    k = args.steps
    results = [(name, bench_model(name, args, device)) for name in args.models.split(",") if name.strip()]

    print(f"\n(a) robfair PGD-{k} / floor [{k} x (fwd + input-grad) + 1 fwd];  (a') 1 + own overhead / floor")
    print("(b) reference PGD (loss.backward, parameter grads) / the same floor, and robfair's speed-up over it")
    print("(c) channels_last speed-up;  (d) bf16 autocast + channels_last speed-up (robfair PGD vs fp32 contiguous)")
    for name, b in results:
        print(f"\n{name}: floor fp32 {b['fp32:floor']:.3f}s, PGD-{k} {b['fp32:pgd']:.3f}s, reference {b['ref']:.3f}s")
        for m in ("fp32", "fp32+cl", "bf16+cl"):
            own = b[f"{m}:triv_pgd"] - b[f"{m}:triv_floor"]
            print(f"  {m:8} (a) {b[f'{m}:pgd'] / b[f'{m}:floor']:.3f}   (a') {1 + own / b[f'{m}:floor']:.3f}"
                  f"   (own overhead {1000 * own:.1f} ms per PGD-{k} run)")
        print(f"  (b) reference {b['ref'] / b['fp32:floor']:.3f}; robfair {b['ref'] / b['fp32:pgd']:.2f}x faster")
        print(f"  (c) channels_last {b['fp32:pgd'] / b['fp32+cl:pgd']:.2f}x   "
              f"(d) bf16 + channels_last {b['fp32:pgd'] / b['bf16+cl:pgd']:.2f}x")

    halves = half_batches(args.half_batch, args.quick)
    if halves:
        print(f"\n(e) bf16 + channels_last PGD-{k} / its bf16 floor, median of {args.half_repeats} alternating "
              f"repeats, {'wall' if device.type == 'cuda' else 'CPU'} clock; {describe(device)}")
        half = [(name, b, bench_half(name, b, args, device)) for name, b in halves.items()]
        for name, b, h in half:
            for case in ("fooled", "none"):
                lo, hi = h[f"{case}:spread"]
                print(f"  {name} b{b} {case:6} {h[f'{case}:ratio']:.3f} (range {lo:.3f}-{hi:.3f}; "
                      f"{100 * h[f'{case}:fooled']:.0f}% fooled, {h[f'{case}:fp32_rows']:.2f} fp32 forwards "
                      "per sample)")


if __name__ == "__main__":
    main()
