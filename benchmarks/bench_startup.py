"""Start-up cost: what a CLI audit pays on top of the same audit run in-process.

Measured with CPU time (user + system of the child process, ``resource.getrusage``), one torch
thread, variants alternating, median over repeats:

  python -c pass             the interpreter alone
  import robfair.cli         what ``robfair --help`` needs before it can print
  robfair --help             the whole help command
  robfair audit ...          the CLI audit of a digits checkpoint (PGD-20, eps 0.1, 451 images, no
                             bootstrap so the audit itself dominates less)
  in-process audit           ``robfair.audit(...)`` in a warm process (imports done, model loaded):
                             the CPU time of the call itself

The CLI overhead is ``robfair audit`` minus the in-process audit. Point PYTHONPATH at another
checkout to measure it (before / after a change) with the same script.

    python benchmarks/bench_startup.py --model ckpt.pt [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def child_cpu(cmd: list[str], env: dict) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


IN_PROCESS = """
import resource, sys, time
import torch
torch.set_num_threads(1)
import robfair
from robfair.data import load_dataset
from robfair.models import load_checkpoint
net, meta = load_checkpoint(sys.argv[1])
ds = load_dataset("digits", split="test")
t = time.process_time()
robfair.audit(net, ds, attacks=["pgd20"], eps=0.1, device="cpu")
print(time.process_time() - t)
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="a digits checkpoint")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    py = sys.executable
    cli = [py, "-c", "import sys; from robfair.cli import main; sys.argv[0] = 'robfair'; main()"]
    variants = {
        "python -c pass": [py, "-c", "pass"],
        "import robfair.cli": [py, "-c", "import robfair.cli"],
        "robfair --help": cli + ["--help"],
        "robfair audit": cli + ["audit", "--model", str(args.model), "--data", "digits", "--attack", "pgd20",
                                "--eps", "0.1", "--device", "cpu", "--bootstrap", "0"],
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    inproc: list[float] = []
    names = list(variants)
    for r in range(args.repeats):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(child_cpu(variants[k], env))
        out = subprocess.run([py, "-c", IN_PROCESS, str(args.model)], env=env, check=True, capture_output=True,
                             text=True).stdout.split()
        inproc.append(float(out[-1]))
    med = {k: statistics.median(v) for k, v in times.items()}
    ip = statistics.median(inproc)
    src = next((p for p in sys.path if p.endswith("src")), "installed robfair")
    from robfair.hardware import describe  # imports torch: only after the children were timed

    print(f"# machine: {describe('cpu')}")
    print(f"# bench_startup: CPU seconds (user+sys), median of {args.repeats}, alternating; robfair from {src}")
    for k, v in med.items():
        print(f"{k:<22} {v:7.2f} s")
    print(f"{'in-process audit':<22} {ip:7.2f} s")
    print(f"CLI audit overhead over in-process: {med['robfair audit'] - ip:.2f} s "
          f"(of which the interpreter {med['python -c pass']:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
