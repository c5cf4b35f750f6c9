"""One adversarial-training step of robfair's trainer against a reference-style step, and the
trainer's channels_last / bf16 fast paths.

    python benchmarks/bench_train.py              # PreAct-ResNet-18, batch 128, CPU, 3 repeats
    python benchmarks/bench_train.py --quick      # CI smoke run: cifar-cnn, batch 16, 1 repeat
    python benchmarks/bench_train.py --device cuda --paths fp32,bf16+cl

A robfair step is one batch of ``Trainer._train_epoch`` on a one-batch dataset: the method's loss
(the training attack takes input gradients only), ``backward``, the optimizer and scheduler steps,
exactly the code path of ``robfair train``. The reference-style step is what most research code does:
the attack calls ``loss.backward()`` (so every attack step also computes the parameter gradients),
then zero_grad, the training loss, backward and the update. Both start from the same weights with the
same optimizer (SGD, momentum 0.9, weight decay 5e-4), alternate within each repeat, and are timed
after one warm-up step each.

Printed (medians over repeats, all measured in this run, nothing asserted):
(a) PGD-10 AT:  reference step time / robfair step time (target >= 1.4x)
(b) TRADES (10 KL steps, beta 6): reference / robfair
(c) robfair PGD-AT step through the trainer with channels_last, bf16 autocast, and both:
    speed-up over the fp32 contiguous trainer step
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F

from robfair.data import Dataset
from robfair.hardware import describe
from robfair.models import create
from robfair.training import Trainer, TrainConfig
from robfair.utils import resolve_device, tune_allocator

EPS = 8 / 255
LR, MOMENTUM, WD = 0.01, 0.9, 5e-4


# ------------------------------------------------------------------ reference-style steps
def _project(x_adv: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.min(torch.max(x_adv, x - eps), x + eps).clamp(0, 1)


def reference_pgd_at_step(model, opt, x, y, eps: float, steps: int) -> None:
    """PGD-AT as reference code writes it: the attack backpropagates into the parameters too."""
    alpha = eps / 4
    model.eval()
    x_adv = _project(x + torch.empty_like(x).uniform_(-eps, eps), x, eps)
    for _ in range(steps):
        x_adv.requires_grad_(True)
        loss = F.cross_entropy(model(x_adv), y)
        loss.backward()  # parameter grads accumulate: the cost robfair's attacks skip
        grad = x_adv.grad
        x_adv = _project(x_adv.detach() + alpha * grad.sign(), x, eps)
    model.train()
    opt.zero_grad()
    F.cross_entropy(model(x_adv), y).backward()
    opt.step()


def reference_trades_step(model, opt, x, y, eps: float, steps: int, beta: float = 6.0) -> None:
    """TRADES in the same reference style: KL attack with ``loss.backward()``, then CE + beta * KL."""
    alpha = eps / 4
    model.eval()
    with torch.no_grad():
        p_nat = F.softmax(model(x), dim=1)
    x_adv = _project(x + 0.001 * torch.randn_like(x), x, eps)
    for _ in range(steps):
        x_adv.requires_grad_(True)
        loss_kl = F.kl_div(F.log_softmax(model(x_adv), dim=1), p_nat, reduction="sum")
        loss_kl.backward()
        grad = x_adv.grad
        x_adv = _project(x_adv.detach() + alpha * grad.sign(), x, eps)
    model.train()
    opt.zero_grad()
    logits = model(x)
    kl = F.kl_div(F.log_softmax(model(x_adv), dim=1), F.softmax(logits, dim=1), reduction="sum") / len(x)
    (F.cross_entropy(logits, y) + beta * kl).backward()
    opt.step()


# ------------------------------------------------------------------ robfair through the trainer
def robfair_trainer(model, data: Dataset, method: str, device: torch.device, steps: int, **cfg) -> Trainer:
    """A Trainer whose every ``_train_epoch`` call is exactly one training step on ``data``."""
    config = TrainConfig(method=method, attack_options={"steps": steps}, eps=EPS, batch_size=len(data),
                         epochs=1000, lr=LR, momentum=MOMENTUM, weight_decay=WD, schedule="constant",
                         val_per_class=0, select="last", device=str(device), **cfg)
    return Trainer(model, data, None, None, config)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CI smoke run: cifar-cnn, batch 16, 1 repeat")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, auto")
    p.add_argument("--model", default=None, help="default preact-resnet18 (cifar-cnn with --quick)")
    p.add_argument("--batch", type=int, default=None, help="default 128 (16 with --quick)")
    p.add_argument("--repeats", type=int, default=None, help="default 3 (1 with --quick)")
    p.add_argument("--steps", type=int, default=10, help="attack steps (PGD-10 / TRADES' 10)")
    p.add_argument("--paths", default="fp32+cl,bf16,bf16+cl", help="trainer fast paths to time ('' for none)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = p.parse_args()
    args.model = args.model or ("cifar-cnn" if args.quick else "preact-resnet18")
    args.batch = args.batch or (16 if args.quick else 128)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    tuned = tune_allocator()
    print(f"# machine: {describe(device)}")
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, model {args.model}, "
          f"batch {args.batch}, {args.steps} attack steps, repeats {args.repeats}, allocator tuned: {tuned}",
          flush=True)

    torch.manual_seed(0)
    base = create(args.model, 10, (3, 32, 32))
    x = torch.rand(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))
    data = Dataset(x=x, y=y, classes=[str(i) for i in range(10)], name="bench")
    xd, yd = x.to(device), y.to(device)

    def fresh():
        return copy.deepcopy(base).to(device)

    def reference(step_fn):
        model = fresh()
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
        return lambda: step_fn(model, opt, xd, yd, EPS, args.steps)

    def robfair(method, **cfg):
        trainer = robfair_trainer(fresh(), data, method, device, args.steps, **cfg)
        epoch = iter(range(10 ** 9))
        return lambda: trainer._train_epoch(next(epoch))

    fast = {"fp32+cl": dict(channels_last=True), "bf16": dict(precision="bf16"),
            "bf16+cl": dict(precision="bf16", channels_last=True)}
    paths = [s.strip() for s in args.paths.split(",") if s.strip()]
    unknown = [s for s in paths if s not in fast]
    if unknown:
        p.error(f"unknown --paths {unknown}; choose from {', '.join(fast)}")
    runs: dict[str, Callable[[], object]] = {
        "ref:at": reference(reference_pgd_at_step), "rf:at": robfair("pgd-at"),
        "ref:trades": reference(reference_trades_step), "rf:trades": robfair("trades"),
    }
    runs.update({f"rf:at:{name}": robfair("pgd-at", **fast[name]) for name in paths})

    for name, fn in runs.items():  # warm-up: allocator, oneDNN primitives
        t = timed(fn, device)
        print(f"  [warm-up] {name:>14}: {t:.2f}s", flush=True)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.repeats):
        for name, fn in runs.items():
            t = timed(fn, device)
            times[name].append(t)
            print(f"  [repeat {r + 1}/{args.repeats}] {name:>14}: {t:.2f}s", flush=True)
    med = {name: statistics.median(v) for name, v in times.items()}

    print()
    print(f"{args.model}, batch {args.batch}, device {device}, threads {torch.get_num_threads()} "
          f"(median of {args.repeats})")
    print(f"(a) PGD-{args.steps} AT step: reference {med['ref:at']:.2f}s, robfair {med['rf:at']:.2f}s -> "
          f"robfair {med['ref:at'] / med['rf:at']:.2f}x faster (target >= 1.4x)")
    print(f"(b) TRADES step:     reference {med['ref:trades']:.2f}s, robfair {med['rf:trades']:.2f}s -> "
          f"robfair {med['ref:trades'] / med['rf:trades']:.2f}x faster")
    for name in paths:
        t = med[f"rf:at:{name}"]
        print(f"(c) trainer PGD-AT step, {name:>7}: {t:.2f}s -> {med['rf:at'] / t:.2f}x vs fp32 contiguous")


if __name__ == "__main__":
    main()
