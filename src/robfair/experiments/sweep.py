"""Expand a study into run folders and run what is not finished, exactly once.

    result = sweep(load_study("studies/frl-table.yaml"), workers=2)     # local processes
    result = sweep(study, backend="slurm")                               # one submitit job array

The output folder::

    <out>/study.yaml          the study as run (resolved)
    <out>/index.sqlite        the run index (status, attempts, timings, headline metrics)
    <out>/<run name>/run.yaml the run's train config + audit settings (reproduces it alone)
                   /config.yaml, checkpoints/, metrics.jsonl, audit.json   (the trainer's run folder)
                   /attempts.jsonl, worker.log

Per run, by its folder (the folder is the truth; the index coordinates):
complete (``audit.json`` readable, config hash equal) -> skipped; checkpoints present -> resumed;
a folder holding a *different* config under the same name -> error (delete it or change ``--out``).
Everything is validated before anything is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ..errors import ConfigError
from ..runfolder import RunFolder
from ..utils import atomic_path
from .backends import Job, LocalBackend, SlurmBackend, check_backend
from .config import RunSpec, StudyConfig, config_differences
from .results import incomplete_reason, read_audit
from .store import INDEX_NAME, Store, headline_metrics

log = logging.getLogger(__name__)


@dataclass
class PlannedRun:
    spec: RunSpec
    run_dir: Path
    state: str  # "new" | "partial" (resumes) | "complete"

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class SweepResult:
    study: str
    out: Path
    runs: list[PlannedRun] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None  # why the whole study was skipped (a required method is missing)
    submitted: list[Any] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["status"] == "failed"]

    @property
    def done(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["status"] == "done"]


# ============================================================================== folder state
def folder_state(run_dir: Path, spec: RunSpec) -> str:
    """'new', 'partial' or 'complete'; ConfigError when the folder holds something else."""
    if not run_dir.exists() or not any(run_dir.iterdir()):
        return "new"
    if not RunFolder(run_dir).run_spec.exists():
        raise ConfigError(f"{run_dir} exists and is not a run of this sweep (no run.yaml); move it away or "
                          "choose another --out")
    try:
        old = RunSpec.load(run_dir)
    except ConfigError:
        raise ConfigError(f"{run_dir}/run.yaml is unreadable (a half-written run folder); delete the folder "
                          "and re-run the sweep") from None
    if old.hash != spec.hash:
        diff = config_differences(old, spec)
        if diff:
            raise ConfigError(f"run folder {run_dir} was made with another config ({'; '.join(diff[:3])}); "
                              "delete it to redo the run, or choose another --out")
    return "complete" if incomplete_reason(run_dir, spec) is None else "partial"


# ============================================================================== plan / sweep
def plan(study: StudyConfig, out: str | Path | None = None) -> list[PlannedRun]:
    """The study's runs and the state of each folder (nothing is written)."""
    out_dir = Path(out).expanduser() if out is not None else study.out_dir
    runs = []
    for spec in study.expand(out_dir):
        run_dir = out_dir / spec.name
        runs.append(PlannedRun(spec, run_dir, folder_state(run_dir, spec)))
    return runs


def sweep(study: StudyConfig, *, out: str | Path | None = None, backend: str = "local", workers: int | None = None,
          gpus: list[int] | None = None, threads: int | None = None, device: str | None = None,
          partition: str | None = None, retry_failed: bool = False, dry_run: bool = False, wait: bool = False,
          tensorboard: bool | None = None, stale_after: float = 120.0, heartbeat_s: float = 10.0,
          on_plan: Callable[[list[PlannedRun]], None] | None = None,
          on_finish: Callable[[Any, dict[str, Any] | None, str], None] | None = None) -> SweepResult:
    """Run every unfinished run of ``study`` once; see the module docstring."""
    out_dir = Path(out).expanduser() if out is not None else study.out_dir
    result = SweepResult(study.name, out_dir)
    missing = study.missing_methods()
    if missing:
        result.skipped = (f"study {study.name} needs method(s) {', '.join(missing)}, not registered in this robfair; "
                          "it runs once they land (nothing was run)")
        return result
    check_backend(backend)
    if tensorboard is not None:
        study = study.model_copy(update={"tracking": study.tracking.model_copy(update={"tensorboard": tensorboard})})
    if study.tracking.tensorboard:
        from .tracking import require_tensorboard  # lazy: start-up time (tracking imports the trainer)

        require_tensorboard()
    if partition is not None:
        study = study.model_copy(update={"slurm": study.slurm.model_copy(update={"partition": partition})})
    runs = plan(study, out_dir)
    if device is not None:
        for r in runs:
            r.spec.train["device"] = device  # not part of the hash: a resumed run may move devices
    result.runs = runs
    if on_plan is not None:
        on_plan(runs)
    index = out_dir / INDEX_NAME
    if dry_run:
        if index.exists():
            with Store(index) as store:
                result.rows = store.rows([r.name for r in runs])
        return result

    # ---- from here on we write: study.yaml, run.yaml files, the index
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_dir / "study.yaml") as tmp:
        tmp.write_text(yaml.safe_dump(study.model_dump(mode="json"), sort_keys=False))
    wal = backend == "local"
    todo: list[Job] = []
    with Store(index, wal=wal, stale_after=stale_after) as store:
        for r in runs:
            run = RunFolder(r.run_dir)
            if not run.run_spec.exists() or RunSpec.load(r.run_dir).model_dump() != r.spec.model_dump():
                run.write_text(run.run_spec, r.spec.to_yaml())
            store.register(r.name, study=study.name, group=r.spec.group, run_dir=r.run_dir, config_hash=r.spec.hash)
            row = store.get(r.name)
            if r.state == "complete":
                live = row["status"] == "running" and not store.is_stale(row)  # closing its claim right now
                if row["status"] != "done" and not live:  # finished but not recorded (died after audit.json)
                    store.adopt(r.name, headline_metrics(read_audit(run.audit)))
                    run.log_attempt("adopt")
                continue
            if row["status"] == "done":  # the index says done but the folder lost its results: redo
                store.reset(r.name)
            elif row["status"] == "failed":
                if not retry_failed:
                    continue
                store.reset(r.name)
            todo.append(Job(r.name, r.run_dir))
    if todo:
        if backend == "local":
            be = LocalBackend(workers or study.local.workers, gpus=gpus or study.local.gpus,
                              threads=threads or study.local.threads, heartbeat_s=heartbeat_s, stale_after=stale_after)
            be.run(todo, index, on_finish)
        else:
            sb = SlurmBackend(study.slurm, study=study.name, folder=out_dir / "slurm", wait=wait)
            result.submitted = sb.run(todo, index, on_finish)
    with Store(index, wal=wal) as store:
        result.rows = store.rows([r.name for r in runs])
    return result
