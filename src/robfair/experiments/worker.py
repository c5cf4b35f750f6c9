"""Run one sweep run in this process, from its folder alone.

    python -m robfair.experiments.worker runs/frl-table/method=trades,seed=0 [--index runs/frl-table/index.sqlite]

Reads ``RUN_DIR/run.yaml`` (the training config and audit settings the sweep wrote), claims the run in
the index (when given), trains with ``resume=True`` (an interrupted run continues from
``checkpoints/last.pt``; a finished one only re-audits), audits the selected checkpoint, writes
``audit.json`` + ``outcomes.npz`` (and ``eps_sweep.json``, :func:`robfair.auditing.eps_sweep.eps_sweep`, when the
study asks for robust accuracy vs eps), and closes
the claim with the headline metrics. ``attempts.jsonl`` in the folder logs every attempt.

SIGTERM / Ctrl-C (or the parent sweep dying, with ``--die-with-parent``) stops the run between two
Python statements and gives the claim back; checkpoints are written atomically, so the next claim
resumes exactly. Exit codes: 0 done, 1 failed, 3 busy (another worker has it), 143 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from .. import training  # called as training.train at run time, so the trainer can be swapped (tests do)
from ..auditing import AuditReport
from ..auditing.eps_sweep import eps_sweep
from ..data import load_dataset
from ..errors import RobfairError
from ..runfolder import RunFolder
from ..safeio import claim_outputs
from .config import RunSpec
from .store import Store, headline_metrics, process_alive, process_start
from .tracking import TensorBoardCallback

log = logging.getLogger(__name__)

EXIT_CODES = {"done": 0, "failed": 1, "busy": 3, "missing": 3, "interrupted": 143}


class Interrupted(BaseException):
    """Raised in the main thread by SIGTERM (a BaseException, so no ``except Exception`` swallows it)."""


def _on_term(signum: int, _frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


class _Watch(threading.Thread):
    """Heartbeat of the claim and, optionally, the parent process. On a lost claim or a dead parent
    it sends SIGTERM to this process, which stops the run cleanly in the main thread."""

    def __init__(self, index: Path | None, run_id: str, *, interval: float, parent: int | None,
                 wal: bool, stale_after: float) -> None:
        super().__init__(daemon=True, name="robfair-heartbeat")
        self.index, self.run_id, self.interval = index, run_id, interval
        self.wal, self.stale_after = wal, stale_after
        self.parent, self.parent_start = parent, process_start(parent) if parent else None
        self.pid = os.getpid()
        self.stopped = threading.Event()
        self.reason: str | None = None

    def run(self) -> None:
        store = Store(self.index, wal=self.wal, stale_after=self.stale_after) if self.index else None
        last = time.monotonic()
        try:
            while not self.stopped.wait(0.25):
                if self.parent and not process_alive(self.parent, self.parent_start):
                    return self._interrupt("the sweep that started this worker is gone")
                if store is not None and time.monotonic() - last >= self.interval:
                    last = time.monotonic()
                    if not store.heartbeat(self.run_id, pid=self.pid):
                        return self._interrupt("the claim was taken over by another worker")
        finally:
            if store is not None:
                store.close()

    def _interrupt(self, reason: str) -> None:
        self.reason = reason
        log.warning("stopping %s: %s", self.run_id, reason)
        os.kill(self.pid, signal.SIGTERM)

    def stop(self) -> None:
        self.stopped.set()


def run_spec(spec: RunSpec, run_dir: Path, *, threads: int | None = None) -> Any:
    """Train (resuming) and audit one run in this process; returns the AuditReport."""
    if threads:
        torch.set_num_threads(int(threads))
    run = RunFolder(run_dir)
    run.repair_metrics()
    cfg = spec.train_config(run_dir, resume=True)
    a = spec.audit
    callbacks = []
    if spec.tracking.get("tensorboard"):
        callbacks.append(TensorBoardCallback(run.tensorboard))

    # the study's audit settings; the probe (cfg.probe, cfg.probe_tolerance) is the audit block's, so
    # config.yaml records what the audit ran
    run_audit = training.audit_hook(cfg, a["attacks"], eps=a["eps"], batch_size=a["batch_size"], seed=a["seed"],
                                    early_exit=a["early_exit"], precision=a["precision"],
                                    channels_last=a.get("channels_last"))

    def do_audit(model: Any, data: Any) -> AuditReport:
        rep = run_audit(model, data)
        rep.meta.update(run=spec.name, split=a["split"], checkpoint=str(run.best))
        return rep

    test = None
    if a["split"] != "test":
        test = load_dataset(cfg.data, a["split"])
    result = training.train(cfg, callbacks=callbacks, final_audit=do_audit, test_data=test)
    if a.get("eps_sweep"):
        data = test if test is not None else load_dataset(cfg.data, a["split"])
        sweep = eps_sweep(result.best_model, data, list(a["attacks"]), sorted(set(a["eps_sweep"])),
                          batch_size=a["batch_size"], device=cfg.device, seed=a["seed"], precision=a["precision"],
                          channels_last=a.get("channels_last"), early_exit=a["early_exit"])
        sweep.meta.update(run=spec.name, split=a["split"])
        run.write_json(run.eps_sweep, sweep.to_json())
    return result.audit


def execute(run_dir: str | Path, index: str | Path | None = None, *, threads: int | None = None,
            parent: int | None = None, heartbeat_s: float = 10.0, stale_after: float = 120.0,
            wal: bool = True, job_id: str | None = None) -> str:
    """Claim, run and close one run; returns 'done', 'failed', 'busy' or 'interrupted'.

    ``parent``: a process id (the sweep); when that process dies the run stops and gives its claim back."""
    run_dir = Path(run_dir)
    spec = RunSpec.load(run_dir)
    index_path = Path(index) if index is not None else None
    store = Store(index_path, wal=wal, stale_after=stale_after) if index_path is not None else None
    if store is not None:
        store.register(spec.name, study=spec.study, group=spec.group, run_dir=run_dir, config_hash=spec.hash)
        got = store.claim(spec.name, job_id=job_id)
        if got != "claimed":
            log.info("%s: not run (%s)", spec.name, got)
            store.close()
            return "done" if got == "done" else "busy"
    run = RunFolder(run_dir)
    watch = _Watch(index_path, spec.name, interval=heartbeat_s, parent=parent, wal=wal,
                   stale_after=stale_after)
    in_main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _on_term) if in_main else None
    old_int = signal.getsignal(signal.SIGINT) if in_main else None
    t0 = time.perf_counter()
    status, error, folder = "failed", None, None
    try:  # from the claim on, every way out closes it (an interrupt here included)
        folder = claim_outputs([run_dir], "run folder", inside=True)  # and no `robfair train` writes it meanwhile
        run.remove_orphan_temps()  # the claim is ours: what a killed attempt left can go
        epochs_before = len(run.repair_metrics())
        run.log_attempt("start", resumed_after_epochs=epochs_before, job_id=job_id)
        watch.start()
        try:
            rep = run_spec(spec, run_dir, threads=threads)
        finally:
            watch.stop()
        if in_main:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a few ms of bookkeeping; never cut in half
        status = "done"
        metrics = headline_metrics(rep)
        if store is not None:
            store.finish(spec.name, "done", metrics=metrics)
        run.log_attempt("done", seconds=round(time.perf_counter() - t0, 2), **metrics)
    except (Interrupted, KeyboardInterrupt) as e:
        if in_main:  # a second Ctrl-C / SIGTERM must not cut the release short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        status = "interrupted"
        reason = watch.reason or f"{type(e).__name__} {e}".strip()
        if store is not None:
            store.release(spec.name, reason=reason)
        run.log_attempt("interrupted", reason=reason, seconds=round(time.perf_counter() - t0, 2))
    except RobfairError as e:
        error = str(e)
    except Exception as e:  # a bug or a crash: keep the sweep going, record it on the run
        log.exception("run %s failed", spec.name)
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
    finally:
        if folder is not None:
            folder.release()
        if in_main:
            signal.signal(signal.SIGTERM, old)
            signal.signal(signal.SIGINT, old_int)
    if status == "failed":
        if store is not None:
            store.finish(spec.name, "failed", error=error)
        run.log_attempt("failed", error=error, seconds=round(time.perf_counter() - t0, 2))
        log.error("run %s failed: %s", spec.name, error)
    if store is not None:
        store.close()
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m robfair.experiments.worker", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--index", type=Path, default=None, help="the study's index.sqlite (claims the run)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--die-with-parent", action="store_true")
    p.add_argument("--heartbeat", type=float, default=10.0)
    p.add_argument("--stale-after", type=float, default=120.0)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        status = execute(args.run_dir, args.index, threads=args.threads,
                         parent=os.getppid() if args.die_with_parent else None,
                         heartbeat_s=args.heartbeat, stale_after=args.stale_after)
    except RobfairError as e:
        log.error("%s", e)
        return 2
    return EXIT_CODES[status]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
