"""Where runs execute: ``local`` worker processes (default) or a Slurm job array through submitit.

Both hand each run to :func:`robfair.experiments.worker.execute` in a process of its own; the worker
claims the run in the index, so whatever the backend does twice (a re-submitted job, two sweeps at
once) is still trained once.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing import connection
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import ConfigError
from .store import Store

log = logging.getLogger(__name__)

#: (run, index row, how it ended) -> progress display in the CLI
OnFinish = Callable[[Any, dict[str, Any] | None, str], None]

BACKENDS = ("local", "slurm")
#: imported once by the fork server, so a run's process starts in milliseconds; torch imports
#: ``torch._dynamo`` lazily when the first optimizer is built (seconds) and the digits loader imports
#: scikit-learn. Missing modules are skipped.
PRELOAD = ("robfair.experiments.worker", "robfair.training", "robfair.auditing", "robfair.data", "torch._dynamo",
           "torch.optim", "sklearn.datasets")


@dataclass
class Job:
    """A planned run as a backend sees it."""

    name: str
    run_dir: Path


def check_backend(name: str) -> None:
    """Fail before anything is written when a backend or its optional extra is missing."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend '{name}'; choose one of: {', '.join(BACKENDS)}")
    if name == "slurm":
        try:
            import submitit  # noqa: F401  (lazy: optional extra, robfair[slurm])
        except ImportError:
            raise ConfigError("the slurm backend needs submitit, which is not installed; "
                              "pip install submitit (robfair's 'slurm' extra), or use --backend local") from None


# ============================================================================== local
def _child(run_dir: str, index: str, threads: int | None, gpu: int | None, heartbeat_s: float,
           stale_after: float, parent: int) -> None:
    """Entry point of one worker process (forkserver/spawn): log to RUN_DIR/worker.log, run, exit."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    logf = open(Path(run_dir) / "worker.log", "a", buffering=1)
    os.dup2(logf.fileno(), 1)
    os.dup2(logf.fileno(), 2)
    sys.stdout = sys.stderr = logf
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=logf, force=True)
    from .worker import EXIT_CODES, execute  # lazy: start-up time (the worker imports the trainer and every method)

    try:
        status = execute(run_dir, index, threads=threads, parent=parent, heartbeat_s=heartbeat_s,
                         stale_after=stale_after)
    except Exception as e:  # RunSpec unreadable and the like: the run cannot even start
        log.error("%s", e)
        sys.exit(2)
    logf.flush()
    sys.exit(EXIT_CODES[status])


def _context() -> Any:
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        # one server process imports torch once; every run is a fresh fork of it (its own process)
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(list(PRELOAD))
        return ctx
    return mp.get_context("spawn")


class LocalBackend:
    """``workers`` runs at a time on this machine, each in its own process.

    ``gpus``: ids handed out round-robin to worker slots (``CUDA_VISIBLE_DEVICES``); ``threads``:
    torch threads per run (default: cores / workers, or ``OMP_NUM_THREADS`` when set)."""

    def __init__(self, workers: int = 1, *, gpus: Sequence[int] | None = None, threads: int | None = None,
                 heartbeat_s: float = 10.0, stale_after: float = 120.0, poll_s: float = 1.0) -> None:
        self.workers = max(1, int(workers))
        self.gpus = list(gpus) if gpus else []
        env_threads = os.environ.get("OMP_NUM_THREADS")
        self.threads = threads or (int(env_threads) if env_threads and env_threads.isdigit()
                                   else max(1, (os.cpu_count() or 1) // self.workers))
        self.heartbeat_s, self.stale_after, self.poll_s = heartbeat_s, stale_after, poll_s

    def run(self, jobs: Sequence[Job], index: Path, on_finish: OnFinish | None = None) -> None:
        """Run every job (skipping those the index says are done); returns when none is left."""
        ctx = _context()
        store = Store(index, stale_after=self.stale_after)
        queue: deque[Job] = deque(jobs)
        active: dict[int, tuple[Any, Job]] = {}  # slot -> (process, job)
        waiting: list[Job] = []  # claimed by a live worker of another sweep
        last_wait_check = 0.0
        notify = on_finish or (lambda *a: None)
        try:
            while queue or active or waiting:
                for slot in range(self.workers):
                    if slot in active or not queue:
                        continue
                    job = queue.popleft()
                    row = store.get(job.name)
                    if row is not None and row["status"] == "done":
                        notify(job, row, "done")
                        continue
                    if row is not None and row["status"] == "running" and not store.is_stale(row):
                        waiting.append(job)
                        continue
                    gpu = self.gpus[slot % len(self.gpus)] if self.gpus else None
                    p = ctx.Process(target=_child, name=f"robfair-run-{job.name}",
                                    args=(str(job.run_dir), str(index), self.threads, gpu, self.heartbeat_s,
                                          self.stale_after, os.getpid()))
                    p.start()
                    active[slot] = (p, job)
                if active:
                    connection.wait([p.sentinel for p, _ in active.values()], timeout=self.poll_s)
                elif waiting:
                    time.sleep(self.poll_s)
                for slot, (p, job) in list(active.items()):
                    if p.exitcode is None:
                        continue
                    p.join()
                    del active[slot]
                    row = store.get(job.name)
                    code = p.exitcode
                    if code == 3:  # another sweep's worker holds it: wait for that one
                        waiting.append(job)
                        continue
                    how = {0: "done", 1: "failed", 143: "interrupted"}.get(code, f"crashed (exit {code})")
                    if how.startswith("crashed"):  # killed hard (OOM killer ...): nothing closed the claim
                        store.abandon(job.name, pid=p.pid, error=f"worker process exited with code {code}")
                        row = store.get(job.name)
                    notify(job, row, how)
                if waiting and time.monotonic() - last_wait_check >= self.poll_s:
                    last_wait_check = time.monotonic()
                    for job in list(waiting):
                        row = store.get(job.name)
                        if row is None or row["status"] == "pending" or store.is_stale(row):
                            waiting.remove(job)
                            queue.append(job)
                        elif row["status"] in ("done", "failed"):  # finished by the other worker
                            waiting.remove(job)
                            notify(job, row, row["status"])
        except BaseException:
            # Ctrl-C / kill: each worker gives its run back, then we stop. A second Ctrl-C must not
            # cut this short, and a claim a worker could not close (killed hard) is released here.
            in_main = threading.current_thread() is threading.main_thread()
            old_int = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
            try:
                for p, _ in active.values():
                    if p.exitcode is None:
                        p.terminate()
                for p, _ in active.values():
                    p.join(timeout=60)
                    if p.exitcode is None:
                        p.kill()
                        p.join(timeout=10)
                for p, job in active.values():
                    try:
                        store.release(job.name, pid=p.pid, reason="the sweep was interrupted")
                    except Exception:  # noqa: BLE001 - the index is busy or gone; is_stale() still sees the dead pid
                        log.warning("could not release the claim of %s", job.name)
            finally:
                if in_main:
                    signal.signal(signal.SIGINT, old_int)
            raise
        finally:
            store.close()


# ============================================================================== slurm
def slurm_entry(run_dir: str, index: str) -> str:
    """What one Slurm array task runs (picklable for submitit)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .worker import execute  # lazy: start-up time (the worker imports the trainer and every method)

    job = os.environ.get("SLURM_ARRAY_JOB_ID")
    task = os.environ.get("SLURM_ARRAY_TASK_ID")
    job_id = f"{job}_{task}" if job and task else os.environ.get("SLURM_JOB_ID")
    status = execute(run_dir, index, wal=False, job_id=job_id)
    if status == "failed":
        raise RuntimeError(f"run {run_dir} failed; see its attempts.jsonl and the index")
    return status


class SlurmBackend:
    """One submitit job array, one task per run, resources from the study's ``slurm:`` block."""

    def __init__(self, settings: Any, *, study: str, folder: Path, wait: bool = False) -> None:
        check_backend("slurm")
        self.settings, self.study, self.folder, self.wait = settings, study, Path(folder), wait

    def parameters(self) -> dict[str, Any]:
        s = self.settings
        params: dict[str, Any] = dict(name=f"robfair-{self.study}", nodes=1, tasks_per_node=1,
                                      gpus_per_node=s.gpus_per_node, cpus_per_task=s.cpus_per_task,
                                      timeout_min=s.timeout_min, slurm_array_parallelism=s.array_parallelism)
        if s.mem_gb is not None:
            params["mem_gb"] = s.mem_gb
        for key in ("partition", "account", "qos", "constraint"):
            if getattr(s, key):
                params[f"slurm_{key}"] = getattr(s, key)
        if s.setup:
            params["slurm_setup"] = list(s.setup)
        if s.additional_parameters:
            params["slurm_additional_parameters"] = dict(s.additional_parameters)
        return params

    def run(self, jobs: Sequence[Job], index: Path, on_finish: OnFinish | None = None) -> list[Any]:
        import submitit  # lazy: optional extra (robfair[slurm])

        executor = submitit.AutoExecutor(folder=str(self.folder / "%j"))
        executor.update_parameters(**self.parameters())
        submitted = executor.map_array(slurm_entry, [str(j.run_dir) for j in jobs], [str(index)] * len(jobs))
        with Store(index, wal=False) as store:
            for job, sub in zip(jobs, submitted):
                store.set_job(job.name, str(sub.job_id))
        if self.wait:
            with Store(index, wal=False) as store:
                for job, sub in zip(jobs, submitted):
                    try:
                        sub.result()
                        how = "done"
                    except Exception:  # the task failed; its error is on the index row
                        how = "failed"
                    if on_finish:
                        on_finish(job, store.get(job.name), how)
        return submitted
