"""The speed of the one evaluation loop: early exit against its ideal bound, channels_last, bf16.

Trains (or loads, with --st / --at) a standard and a PGD-AT small CNN on digits, then attacks the
test split with PGD-20 (L-inf) at each eps three ways, with the same generator seed so every
sample's outcome is identical (checked):

  full    every sample runs all 20 steps (``early_exit=False``), batch by batch;
  early   fooled samples leave the batch (``early_exit=True``), batch by batch: late steps run on
          a shrinking batch;
  refill  ``PGD.stream``: fooled samples leave and the batch refills from the batches still to
          come, so late steps run at full batch.

Then the same three through ``engine.evaluate`` (the loop every audit, eps sweep and trainer
validation runs: ``early_exit=False``; ``refill=False``, batch by batch; the default, where PGD
streams with refill), each batch with its own seeded generator, outcomes compared per sample; the
whole evaluation is timed (its one clean forward per batch included).

The ideal bound is what the steps actually needed per sample allow: n x (k + 1) passes without
early exit over sum_i (fooled_step_i + 1, or k + 1 for a sample never fooled). Target: the refill
speed-up within 10% of the bound. Then channels_last (and the 1-channel stride trap: a
channels_last model fed default-stride inputs, as a random start drawn in the default layout did),
and bf16 autocast, emulated on a CPU without bf16 units (robfair refuses it there by default).

Beside the bound, ``model x`` is what the passes each way actually ran allow: every forward pass
costs a + b * n (n samples; a, b fitted on this machine at the start, with and without the input
gradient), so ``model x`` = the full way's passes over the refill way's under that cost. Where
``refill/bound`` falls short, ``model x`` says how much of it the fixed cost of the passes (the
>= k + 1 sequential passes a sample never fooled needs, run on a draining batch at the end of the
stream) explains; the rest is bookkeeping. ``--split all`` streams the whole digits set (1,797
images), which amortises that tail.

Timing: CPU clock (``time.process_time``), one torch thread by default, variants alternate within
each repeat (rotating order), median over repeats; ratios are within this run only. The glibc
allocator is tuned as the CLI tunes it (:func:`robfair.utils.tune_allocator`: freed memory is kept,
not page-faulted back every step); ``ROBFAIR_NO_MALLOPT=1`` measures the untuned allocator.

    python benchmarks/bench_audit.py                 # 30 training epochs, 5 repeats
    python benchmarks/bench_audit.py --quick         # CI smoke run: 3 epochs, 1 repeat, subset
    python benchmarks/bench_audit.py --out ckpts     # keep the trained models (reuse with --st/--at)
    python benchmarks/bench_audit.py --st ckpts/standard.pt --at ckpts/pgd-at.pt --split all
    python benchmarks/bench_audit.py --data fashion-mnist --engine-only --ways full refill --repeats 3

``--data fashion-mnist`` is a realistic audit size: the Fashion-MNIST test set (10,000 28x28 images,
Debian's dataset-fashion-mnist or idx files in ~/.robfair/data/fashion-mnist) against a small CNN
(``--width``, default 4) the bench trains in about a minute (3 epochs on the first ``--train-n``
training images, PGD-AT at ``--train-eps``); one full PGD-20 evaluation there takes ~30 s on one
core, hence ``--engine-only`` (only the engine table) and ``--ways full refill`` (the two the bound
needs). It is off by default: the CI smoke run (``--quick``) stays on digits.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from robfair import hardware
from robfair.attacks import PGD
from robfair.auditing import evaluate
from robfair.data import Dataset
from robfair.data import load_dataset
from robfair.models import load_checkpoint, save_checkpoint
from robfair.utils import tune_allocator


def trained(method: str, epochs: int, out: Path, eps: float, data: str = "digits", width: int = 32,
            train_n: int | None = None):
    """The demo's small CNN (digits), or on Fashion-MNIST a ``width`` small CNN trained on the first
    ``train_n`` training images (a quick model: the bench times attacks, not training)."""
    from robfair.demo import demo_config
    from robfair.training import TrainConfig, train

    if data == "digits":
        cfg = demo_config(method, method, out=out / method, eps=eps, epochs=epochs, seed=0, device="cpu")
        return train(cfg).best_model
    tr = load_dataset(data, split="train")
    if train_n is not None and train_n < len(tr.y):
        tr = tr.subset(torch.arange(train_n))
    cfg = TrainConfig(data=data, model="smallcnn", model_kwargs={"width": width}, method=method, eps=eps,
                      epochs=epochs, batch_size=128, optimizer="adam", lr=2e-3, weight_decay=0.0, schedule="cosine",
                      val_per_class=0, val_attack="none", seed=0, device="cpu", out=str(out / method))
    return train(cfg, train_data=tr).best_model


def chunks(x, y, eps, batch):
    return [(x[i:i + batch], y[i:i + batch], eps) for i in range(0, len(y), batch)]


def attack(model, x, y, eps, mode: str, batch: int, steps: int):
    """(fooled, fooled_step) over the whole set, one way."""
    atk = PGD(steps)
    gen = torch.Generator().manual_seed(0)
    if mode == "refill":
        res = list(atk.stream(model, chunks(x, y, eps, batch), generator=gen, early_exit=True, batch_size=batch))
    else:
        res = [atk.run(model, *c, generator=gen, early_exit=mode == "early") for c in chunks(x, y, eps, batch)]
    return torch.cat([r.fooled for r in res]), torch.cat([r.fooled_step for r in res])


def engine(model, ds, eps, mode: str, batch: int, steps: int):
    """(fooled, fooled_step) through engine.evaluate, one way."""
    out = evaluate(model, ds, [PGD(steps)], eps, batch_size=batch, device="cpu", seed=0, channels_last=False,
                   early_exit=mode != "full", refill=mode == "refill")
    name = out.attacks[0]
    return torch.from_numpy(out.adv_pred[name][0] != out.y), torch.from_numpy(out.first_step[name][0])


class Passes:
    """Records every forward pass of a model: (batch size, with input gradient)."""

    def __init__(self, model) -> None:
        self.calls: list[tuple[int, bool]] = []
        model.register_forward_pre_hook(lambda _m, inp: self.calls.append((int(inp[0].shape[0]),
                                                                           torch.is_grad_enabled())))


def pass_cost(model, x, y, batch: int, reps: int = 30) -> dict:
    """Fitted cost of one forward pass, a + b * n CPU seconds, with the input gradient ("grad") and
    without ("plain"): medians of interleaved timings at n = 1 and n = batch."""
    sizes = (1, min(batch, len(y)))
    t = {(g, n): [] for g in (True, False) for n in sizes}
    for _ in range(reps):
        for n in sizes:
            xb = x[:n].clone()
            t0 = time.process_time()
            xg = xb.requires_grad_(True)
            (gr,) = torch.autograd.grad(torch.nn.functional.cross_entropy(model(xg), y[:n]), xg)
            t[(True, n)].append(time.process_time() - t0)
            t0 = time.process_time()
            with torch.no_grad():
                model(xb)
            t[(False, n)].append(time.process_time() - t0)
    out = {}
    for g in (True, False):
        m1, mb = (statistics.median(t[(g, n)]) for n in sizes)
        b = max(0.0, (mb - m1) / (sizes[1] - 1))
        out[g] = (max(0.0, m1 - b), b)
    return out


def modelled(calls: list[tuple[int, bool]], cost: dict) -> float:
    return sum(cost[g][0] + cost[g][1] * n for n, g in calls)


def alternate(fns: dict, repeats: int) -> dict:
    """Median CPU seconds per variant; variants alternate, the order rotating every repeat."""
    names = list(fns)
    times = {k: [] for k in names}
    out = {}
    for r in range(repeats):
        for k in names[r % len(names):] + names[:r % len(names)]:
            t = time.process_time()
            out[k] = fns[k]()
            times[k].append(time.process_time() - t)
    return {k: statistics.median(v) for k, v in times.items()}, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 training epochs, 1 repeat (CI smoke run)")
    p.add_argument("--st", type=Path, help="checkpoint of a standard model (default: train one)")
    p.add_argument("--at", type=Path, help="checkpoint of a PGD-AT model (default: train one)")
    p.add_argument("--eps", type=float, nargs="+", default=[0.1, 0.2])
    p.add_argument("--data", choices=["digits", "fashion-mnist"], default="digits",
                   help="digits (8x8), or the Fashion-MNIST test set (10,000 28x28 images: a realistic audit size; "
                        "needs Debian's dataset-fashion-mnist or the idx files in ~/.robfair/data/fashion-mnist)")
    p.add_argument("--split", choices=["test", "all"], default="test",
                   help="digits test split (451 images), or train + test (1797: a longer stream to refill from)")
    p.add_argument("--n", type=int, default=None, help="attack only the first N images (Fashion-MNIST --quick: 1024)")
    p.add_argument("--width", type=int, default=4, help="Fashion-MNIST: the small CNN's width (digits: the demo's 32)")
    p.add_argument("--train-n", type=int, default=10000, help="Fashion-MNIST: train on the first N training images")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: digits 30, Fashion-MNIST 3)")
    p.add_argument("--ways", nargs="+", choices=["full", "early", "refill"], default=["full", "early", "refill"],
                   help="the ways timed (full and refill always: the bound needs them)")
    p.add_argument("--models", nargs="+", choices=["standard", "pgd-at"], default=["standard", "pgd-at"],
                   help="the models benchmarked")
    p.add_argument("--engine-only", action="store_true",
                   help="only the engine.evaluate table (no direct PGD.stream table, channels_last or bf16 parts)")
    p.add_argument("--train-eps", type=float, default=0.1, help="PGD-AT training radius")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--out", type=Path, default=None, help="keep the trained checkpoints in this folder")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    tuned = tune_allocator()
    torch.manual_seed(0)
    fashion = args.data != "digits"
    if fashion and args.split != "test":
        print("--split all is for digits; Fashion-MNIST attacks its 10,000-image test set (use --n for fewer)",
              file=sys.stderr)
        return 2
    epochs, repeats = (3, 1) if args.quick else (3 if fashion else 30, 5)
    epochs = args.epochs or (1 if fashion and args.quick else epochs)
    repeats = args.repeats or repeats
    ways = [m for m in ("full", "early", "refill") if m in set(args.ways) | {"full", "refill"}]
    ds = load_dataset(args.data, split="test")
    x, y = ds.images(), ds.y
    if args.split == "all":
        tr = load_dataset("digits", split="train")
        x, y = torch.cat([x, tr.images()]), torch.cat([y, tr.y])
    n = args.n if args.n is not None else 1024 if fashion and args.quick else None
    if n is not None:
        x, y = x[:n], y[:n]
    with tempfile.TemporaryDirectory() as tmp:
        where = args.out or Path(tmp)
        models = {}
        for name, ck, method in (("standard", args.st, "standard"), ("pgd-at", args.at, "pgd-at")):
            if name not in args.models:
                continue
            if ck:
                models[name] = load_checkpoint(ck)[0].eval()
            else:
                models[name] = trained(method, epochs, where, args.train_eps, args.data, args.width,
                                       args.train_n).eval()
                if args.out:
                    save_checkpoint(args.out / f"{name}.pt", models[name], classes=list(ds.classes))
    what = (f"{args.data} test, small CNN width {args.width} ({epochs} epochs on {args.train_n} training images)"
            if fashion and not (args.st or args.at) else f"{args.data} test" if fashion
            else f"digits {'test' if args.split == 'test' else 'train+test'}")
    print(f"# bench_audit: {what} n={len(y)}, PGD-{args.steps} L-inf, batch {args.batch}, "
          f"CPU clock, median of {repeats}, alternating{' [quick]' if args.quick else ''}")
    print(f"# machine: {hardware.describe('cpu')}; glibc allocator tuned: {tuned}")
    k = args.steps
    passes = {name: Passes(model) for name, model in models.items()}
    costs = {name: pass_cost(model, x, y, args.batch) for name, model in models.items()}
    for name, c in costs.items():
        print(f"# one forward pass ({name}): with input gradient {c[True][0] * 1e3:.2f} ms + "
              f"{c[True][1] * 1e3:.3f} ms/sample, without {c[False][0] * 1e3:.2f} ms + {c[False][1] * 1e3:.3f} ms/sample")
    print()

    def table(run) -> bool:
        """One row per (model, eps): the three ways timed by ``run(model, eps, mode)``; True when
        every outcome matched."""
        print(f"{'model':<9} {'eps':>5} {'rob acc':>8} {'same':>5} {'full s':>7} {'early s':>8} {'refill s':>9} "
              f"{'early x':>8} {'refill x':>9} {'bound x':>8} {'refill/bound':>13} {'passes f/e/r':>13} {'model x':>8}")
        good = True
        for name, model in models.items():
            for eps in args.eps:
                calls = {}

                def once(m, model=model, eps=eps, name=name):
                    passes[name].calls.clear()
                    res = run(model, eps, m)
                    calls[m] = list(passes[name].calls)
                    return res

                fns = {m: (lambda m=m: once(m)) for m in ways}
                t, out = alternate(fns, repeats)
                fooled, fstep = out["full"]
                same = all(torch.equal(out[m][0], fooled) and torch.equal(out[m][1], fstep) for m in out)
                good &= same
                needed = torch.where(fooled, fstep + 1, torch.full_like(fstep, k + 1)).sum().item()
                bound = len(y) * (k + 1) / needed
                rx = t["full"] / t["refill"]
                npass = "/".join(str(sum(g for _, g in calls[m])) if m in calls else "-" for m in ("full", "early", "refill"))
                early_s, early_x = ((f"{t['early']:>8.2f}", f"{t['full'] / t['early']:>7.2f}x") if "early" in t
                                    else (f"{'-':>8}", f"{'-':>8}"))
                mx = modelled(calls["full"], costs[name]) / modelled(calls["refill"], costs[name])
                print(f"{name:<9} {eps:>5g} {1 - fooled.double().mean().item():>8.4f} {str(same):>5} {t['full']:>7.2f} "
                      f"{early_s} {t['refill']:>9.2f} {early_x} {rx:>8.2f}x {bound:>7.2f}x {rx / bound:>13.2f} "
                      f"{npass:>13} {mx:>7.2f}x")
        return good

    ok = True
    if not args.engine_only:
        ok &= table(lambda model, eps, m: attack(model, x, y, eps, m, args.batch, k))
        print()
    # the same through the engine (one clean forward per batch, per-batch generators)
    ds_all = Dataset(x=x, y=y, classes=list(ds.classes), name=args.data)
    print("through engine.evaluate (whole evaluation timed):")
    ok &= table(lambda model, eps, m: engine(model, ds_all, eps, m, args.batch, k))
    if args.engine_only:
        if not ok:
            print("MISMATCH: early exit or refill changed an outcome", file=sys.stderr)
            return 1
        return 0

    # channels_last: exact strides vs contiguous, and the 1-channel stride trap
    cl_name = "pgd-at" if "pgd-at" in models else "standard"
    model = models[cl_name]
    eps = args.eps[0]
    cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
    x_cl = hardware.channels_last(x)
    fns = {"contiguous": lambda: attack(model, x, y, eps, "full", args.batch, k),
           "channels_last": lambda: attack(cl, x_cl, y, eps, "full", args.batch, k),
           "cl model, default strides": lambda: attack(cl, x, y, eps, "full", args.batch, k)}
    t, out = alternate(fns, repeats)
    same = all(torch.equal(out[m][0], out["contiguous"][0]) for m in out)
    ok &= same
    print()
    print(f"channels_last ({cl_name}, eps {eps:g}, PGD-{k} full, input {tuple(x.shape[1:])}): contiguous "
          f"{t['contiguous']:.2f} s, channels_last {t['channels_last']:.2f} s "
          f"({t['contiguous'] / t['channels_last']:.2f}x), channels_last model on default-stride input "
          f"{t['cl model, default strides']:.2f} s ({t['cl model, default strides'] / t['channels_last']:.2f}x slower "
          f"than exact strides); identical predictions: {same}")

    # bf16: refused by default where not native; emulated here to show why
    nat = hardware.native_precisions("cpu")["bf16"]
    n_bf = 128
    xs, ys = x_cl[:n_bf], y[:n_bf]
    old = os.environ.get(hardware.EMULATION_ENV)
    os.environ[hardware.EMULATION_ENV] = "1"
    try:
        hardware.check_precision("bf16", "cpu")

        def run(prec):
            return PGD(5, precision=prec).run(cl, xs, ys, eps, generator=torch.Generator().manual_seed(0))

        t, out = alternate({"fp32": lambda: run("fp32"), "bf16": lambda: run("bf16")}, max(1, repeats))
    finally:
        if old is None:
            os.environ.pop(hardware.EMULATION_ENV, None)
        else:
            os.environ[hardware.EMULATION_ENV] = old
    diff = (out["bf16"].fooled != out["fp32"].fooled).sum().item()
    print(f"bf16 autocast ({'native' if nat else 'emulated: refused by default'}; PGD-5, {n_bf} images, "
          f"channels_last): fp32 {t['fp32']:.2f} s, bf16 {t['bf16']:.2f} s = {t['bf16'] / t['fp32']:.1f}x the fp32 time; "
          f"{diff} of {n_bf} outcomes differ")
    if not ok:
        print("MISMATCH: early exit, refill or channels_last changed an outcome", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
