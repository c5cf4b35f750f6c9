"""Throughput of randomized-smoothing CERTIFY against a plain batched forward of the same model.

    python benchmarks/bench_certify.py                  # smallcnn on digits-size inputs, cifar-cnn on 32x32, CPU
    python benchmarks/bench_certify.py --quick          # CI smoke run: tiny n, one repeat
    python benchmarks/bench_certify.py --device cuda --models preact-resnet18 --batch 1000

Printed, per model (all measured in this run; the two variants alternate, each repeated; the
median is reported; CPU clock by default, one torch thread):

- CERTIFY: ``robfair.certify`` over ``samples`` images (n0 + n noise draws each, ``batch`` draws per
  forward): noise draws per second, everything included (noise, packing, counting, the bound).
- floor: the same number of forwards of an already-made batch of ``batch`` images (no noise), with
  the argmax: draws per second of a plain batched forward, in the layout certify runs the model in
  (channels_last for convolutional models, the audit's policy) and in the default NCHW layout.
- ratio CERTIFY / channels_last floor (target >= 0.9: the cost is the forwards, nothing else),
  CERTIFY / NCHW floor, and the share of the time spent drawing the noise alone.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import torch

from robfair import certifying as C
from robfair.data import Dataset
from robfair.hardware import channels_last, wants_channels_last
from robfair.utils import resolve_device, tune_allocator


def bench_model(name: str, shape: tuple[int, int, int], args, device: torch.device) -> dict[str, list[float]]:
    from robfair.models import create

    torch.manual_seed(0)
    model = create(name, 10, shape).to(device).eval()  # certify's (it converts it as the audit does)
    nchw = create(name, 10, shape).to(device).eval()
    nchw.load_state_dict(model.state_dict())
    layout = wants_channels_last(model)
    as_run = create(name, 10, shape).to(device).eval()  # the layout certify runs it in
    as_run = as_run.to(memory_format=torch.channels_last) if layout else as_run
    as_run.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(0)
    ds = Dataset(x=torch.rand((args.samples,) + shape, generator=g), y=torch.arange(args.samples) % 10,
                 classes=[str(i) for i in range(10)])
    xb = torch.rand((args.batch,) + shape, generator=g).to(device)
    xb_run = channels_last(xb) if layout else xb
    now = time.process_time if args.clock == "cpu" else time.perf_counter

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def run_certify() -> tuple[float, int, int]:
        sync()
        t = now()
        rep = C.certify(model, ds, 0.25, n0=args.n0, n=args.n, batch_size=args.batch, device=device)
        sync()
        return now() - t, rep.meta["noise_draws"], rep.meta["forwards"]

    @torch.no_grad()
    def run_floor(forwards: int, net=nchw, x=xb) -> float:
        sync()
        t = now()
        for _ in range(forwards):
            net(x).argmax(1)
        sync()
        return now() - t

    @torch.no_grad()
    def run_noise(forwards: int) -> float:
        gen = torch.Generator(device=device).manual_seed(0)
        sync()
        t = now()
        for _ in range(forwards):
            torch.randn(xb.shape, generator=gen, device=device).mul_(0.25).add_(xb[0])
        sync()
        return now() - t

    _, draws, forwards = run_certify()  # warm-up (and the forward count of one run)
    run_floor(min(forwards, 3))
    run_floor(min(forwards, 3), as_run, xb_run)
    out: dict[str, list[float]] = {"certify": [], "floor": [], "floor_run": [], "noise": [], "layout": [layout]}
    for r in range(args.repeats):
        t_c, d_c, f_c = run_certify()
        t_r = run_floor(f_c, as_run, xb_run)
        t_f = run_floor(f_c)
        t_n = run_noise(f_c)
        out["certify"].append(d_c / t_c)
        out["floor_run"].append(f_c * args.batch / t_r)
        out["floor"].append(f_c * args.batch / t_f)
        out["noise"].append(t_n / t_c)
        print(f"  [{name} {r + 1}/{args.repeats}] CERTIFY {d_c} draws in {t_c:.3f}s ({f_c} forwards); "
              f"floor {f_c} forwards in {t_r:.3f}s ({'channels_last' if layout else 'NCHW'}), "
              f"{t_f:.3f}s (NCHW); noise alone {t_n:.3f}s", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CI smoke run: 4 samples, n 200, one repeat")
    p.add_argument("--device", default="cpu")
    p.add_argument("--models", default="smallcnn:1x8x8,cifar-cnn:3x32x32",
                   help="NAME:CxHxW list (robfair architectures)")
    p.add_argument("--samples", type=int, default=None, help="images certified per run (default 10; 4 with --quick)")
    p.add_argument("--n0", type=int, default=100)
    p.add_argument("--n", type=int, default=None, help="estimation draws (default 2000; 200 with --quick)")
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=None, help="default 5 (1 with --quick)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = p.parse_args()
    args.samples = args.samples or (4 if args.quick else 10)
    args.n = args.n or (200 if args.quick else 2000)
    args.repeats = args.repeats or (1 if args.quick else 5)
    if args.quick:
        args.batch = min(args.batch, 200)
    torch.set_num_threads(args.threads)
    logging.getLogger("robfair").setLevel(logging.ERROR)  # random weights: the near-chance warning is expected
    device = resolve_device(args.device)
    if device.type == "cuda":
        args.clock = "wall"  # the GPU's work is not process CPU time
    tuned = tune_allocator()
    from robfair.hardware import describe

    print(f"# machine: {describe(device)}")
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, batch {args.batch}, "
          f"samples {args.samples} x (n0 {args.n0} + n {args.n}), repeats {args.repeats} (median, alternating), "
          f"clock {args.clock}, allocator tuned: {tuned}")
    results = []
    for spec in args.models.split(","):
        name, dims = spec.split(":")
        shape = tuple(int(s) for s in dims.split("x"))
        results.append((name, shape, bench_model(name, shape, args, device)))
    print("\nnoise draws per second, median over repeats (CERTIFY / plain batched forward in the layout certify "
          "runs the model in, channels_last for conv nets; target >= 0.9)")
    for name, shape, b in results:
        c, f, fr = (statistics.median(b[k]) for k in ("certify", "floor", "floor_run"))
        lay = "channels_last" if b["layout"][0] else "NCHW"
        print(f"  {name} {'x'.join(map(str, shape))}: CERTIFY {c:,.0f}/s, {lay} forward {fr:,.0f}/s, ratio {c / fr:.3f}; "
              f"NCHW forward {f:,.0f}/s, ratio {c / f:.3f}; noise drawing alone "
              f"{100 * statistics.median(b['noise']):.1f}% of CERTIFY's time")


if __name__ == "__main__":
    main()
