"""The run folder: every file name of a run, its atomic writes and its repair, in one place.

    run = RunFolder("runs/frl")
    run.best, run.last                 # checkpoints/best.pt, checkpoints/last.pt
    run.audit, run.outcomes            # audit.json, outcomes.npz beside it
    run.append_metrics(record)         # one line of metrics.jsonl
    run.repair_metrics(through_epoch=3)  # after a kill: torn lines and epochs ahead of last.pt dropped

The layout (``robfair train`` writes the first five, a sweep run adds the rest)::

    RUN_DIR/config.yaml          the resolved training config + run_info (versions, git commit, device)
           /checkpoints/last.pt  model + optimizer, scheduler, scaler, EMA, method and RNG state
           /checkpoints/best.pt  the selected model with its validation summary
           /metrics.jsonl        one JSON object per finished epoch
           /audit.json           the final audit (schema robfair.audit/1, docs/audit-json.md)
           /outcomes.npz         its per-sample outcomes (:func:`outcomes_path`)
           /examples.npz         the weakest class's example images, when asked for (:func:`examples_path`)
           /run.yaml             the sweep's run spec (robfair.experiments.config.RunSpec)
           /attempts.jsonl       one line per attempt event (start / done / failed / interrupted / adopt)
           /eps_sweep.json       audits at several radii (when the study asks for them)
           /worker.log           the worker's log (local backend)
           /tensorboard/         TensorBoard events (when tracking asks for them)

Ground floor: this module imports only :mod:`robfair.errors` and :mod:`robfair.utils` (no torch,
no numpy); reading an ``audit.json`` into a report is ``robfair.auditing.AuditReport.load(run.audit)``,
reading and writing checkpoints is ``robfair.models`` (at the paths given here). The output guard
(:mod:`robfair.safeio`) recognises run folders with :func:`is_run_folder` / :func:`holds_results`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from .utils import atomic_path, input_file, to_jsonable, write_json

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
RUN_SPEC_FILE = "run.yaml"
METRICS_FILE = "metrics.jsonl"
AUDIT_FILE = "audit.json"
OUTCOMES_FILE = "outcomes.npz"
EXAMPLES_FILE = "examples.npz"
EPS_SWEEP_FILE = "eps_sweep.json"
CERTIFY_FILE = "certify.json"
ATTEMPTS_FILE = "attempts.jsonl"
WORKER_LOG = "worker.log"
CHECKPOINTS_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"
BEST_CHECKPOINT = "best.pt"
LAST_CHECKPOINT = "last.pt"

#: files of a run folder that are its results (never replaced by another command)
RUN_FILES = (AUDIT_FILE, OUTCOMES_FILE, EXAMPLES_FILE, EPS_SWEEP_FILE, METRICS_FILE, CONFIG_FILE, RUN_SPEC_FILE,
             ATTEMPTS_FILE, WORKER_LOG)
#: what marks a folder as a run folder
RUN_MARKERS = (CHECKPOINTS_DIR, METRICS_FILE, RUN_SPEC_FILE)
#: what marks a folder as a study folder (the sweep's index, robfair.experiments.store.INDEX_NAME, and study file)
STUDY_MARKERS = ("index.sqlite", "study.yaml")


# ================================================================================ audit files
def audit_file(path: str | os.PathLike) -> Path:
    """The audit JSON to read for a path: ``path/audit.json`` for a folder, else ``path`` itself."""
    p = Path(path).expanduser()
    return p / AUDIT_FILE if p.is_dir() else p


def audit_target(path: str | os.PathLike) -> Path:
    """The audit JSON to write for a path: ``path`` when it ends in ``.json``, else
    ``path/audit.json`` (a folder, existing or not)."""
    p = Path(path).expanduser()
    return p if p.suffix.lower() == ".json" else p / AUDIT_FILE


def is_audit_file(path: str | os.PathLike) -> bool:
    """``path`` is named ``audit.json`` (a run folder's own audit, named after its folder)."""
    return Path(path).name == AUDIT_FILE


def sidecar_path(audit_json: str | os.PathLike, kind: str) -> Path:
    """A file that belongs to one audit JSON (``kind``: outcomes, examples): ``<kind>.npz`` beside ``audit.json``, else
    ``<stem>.<kind>.npz`` (so two audits written to one folder never share one)."""
    p = Path(audit_json)
    return p.parent / (f"{kind}.npz" if p.name == AUDIT_FILE else f"{p.stem}.{kind}.npz")


def outcomes_path(audit_json: str | os.PathLike) -> Path:
    """The per-sample outcomes beside an audit JSON: ``outcomes.npz`` for ``audit.json``, else
    ``<stem>.outcomes.npz``."""
    return sidecar_path(audit_json, "outcomes")


def examples_path(audit_json: str | os.PathLike) -> Path:
    """The example images beside an audit JSON: ``examples.npz`` for ``audit.json``, else
    ``<stem>.examples.npz``."""
    return sidecar_path(audit_json, "examples")


# ================================================================================ JSON lines
def _json_lines(path: Path, *, warn: bool = False) -> list[Any]:
    """The parsed lines of a JSON-lines file; blank and unreadable lines (a torn write) skipped."""
    out = []
    for line in input_file(path, "JSON-lines file").read_bytes().decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if warn:
                log.warning("dropping a half-written line of %s", path)
    return out


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, unreadable lines (a torn write) and non-objects
    skipped; empty when the file is missing (RobfairError when it is a FIFO, socket or device)."""
    p = Path(path)
    return [r for r in _json_lines(p) if isinstance(r, dict)] if p.exists() and not p.is_dir() else []


def is_study_folder(path: str | os.PathLike) -> bool:
    """A folder with a sweep's index or study file."""
    p = Path(path)
    return p.is_dir() and any((p / m).exists() for m in STUDY_MARKERS)


def is_run_folder(path: str | os.PathLike) -> bool:
    """A folder with a checkpoints folder, a metrics.jsonl or a run.yaml."""
    return RunFolder(path).is_run()


#: the report of a fix folder (``robfair fix``: before/, train/, fix.json, fix.md)
FIX_REPORT = "fix.json"


def holds_results(path: str | os.PathLike) -> bool:
    """A folder with a run's, a study's or a demo's results in it. A run folder whose first epoch
    never finished (config.yaml, an empty checkpoints/) holds none: it may be started again."""
    p = Path(path)
    if not p.is_dir():
        return False
    run = RunFolder(p)
    if run.audit.exists() or run.run_spec.exists() or is_study_folder(p):
        return True
    if run.is_run() and run.finished_an_epoch():
        return True
    if (p / FIX_REPORT).exists():
        return True
    # a demo folder (st/, at/) or a fix folder (before/, train/: robfair fix)
    return any(holds_results(p / sub) for sub in ("st", "at", "before", "train") if (p / sub).is_dir())


# ================================================================================ the run folder
class RunFolder:
    """The files of one run (see the module docstring). Paths only until a method writes."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunFolder) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    # ---------------------------------------------------------------- paths
    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def run_spec(self) -> Path:
        return self.root / RUN_SPEC_FILE

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def audit(self) -> Path:
        return self.root / AUDIT_FILE

    @property
    def outcomes(self) -> Path:
        return outcomes_path(self.audit)

    @property
    def examples(self) -> Path:
        return examples_path(self.audit)

    @property
    def eps_sweep(self) -> Path:
        return self.root / EPS_SWEEP_FILE

    @property
    def certify(self) -> Path:
        return self.root / CERTIFY_FILE

    @property
    def attempts(self) -> Path:
        return self.root / ATTEMPTS_FILE

    @property
    def worker_log(self) -> Path:
        return self.root / WORKER_LOG

    @property
    def tensorboard(self) -> Path:
        return self.root / TENSORBOARD_DIR

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS_DIR

    @property
    def best(self) -> Path:
        return self.checkpoints / BEST_CHECKPOINT

    @property
    def last(self) -> Path:
        return self.checkpoints / LAST_CHECKPOINT

    # ---------------------------------------------------------------- state
    def is_run(self) -> bool:
        """The folder exists and has one of :data:`RUN_MARKERS`."""
        return self.root.is_dir() and any((self.root / m).exists() for m in RUN_MARKERS)

    def has_checkpoint(self) -> bool:
        return self.best.exists() or self.last.exists()

    def finished_an_epoch(self) -> bool:
        """A checkpoint or a non-empty metrics.jsonl (True when the file cannot be checked)."""
        if self.has_checkpoint():
            return True
        try:
            return self.metrics.is_file() and self.metrics.stat().st_size > 0
        except OSError:
            return True

    def missing(self) -> str | None:
        """What a finished run lacks on disk before its audit is read (None: nothing)."""
        if not self.has_checkpoint():
            return "it has no checkpoints"
        return None

    # ---------------------------------------------------------------- writing
    def prepare(self) -> None:
        """Create the folder and its checkpoints folder."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)

    def write_text(self, path: Path, text: str) -> Path:
        """Write ``text`` to ``path`` (a file of this run) atomically."""
        with atomic_path(path) as tmp:
            tmp.write_text(text)
        return path

    def write_json(self, path: Path, obj: Any, *, strict: bool = False) -> Path:
        """Write ``obj`` to ``path`` (a file of this run) atomically, as :func:`robfair.utils.write_json`;
        ``strict``: sanitised first by :func:`robfair.utils.to_jsonable` (NaN and infinities -> null)."""
        write_json(path, to_jsonable(obj) if strict else obj)
        return path

    def append_metrics(self, record: dict[str, Any]) -> None:
        """Append one epoch's record to metrics.jsonl (a kill mid-line leaves a torn last line, which
        :meth:`repair_metrics` drops)."""
        with open(self.metrics, "a") as f:
            f.write(json.dumps(record) + "\n")

    def log_attempt(self, event: str, **detail: Any) -> None:
        """Append one line to ``attempts.jsonl`` (start / done / failed / interrupted / adopt)."""
        rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "event": event, "pid": os.getpid(),
               "host": socket.gethostname(), **detail}
        with open(self.attempts, "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")

    # ---------------------------------------------------------------- repair
    def read_metrics(self) -> list[dict[str, Any]]:
        """The epoch records of metrics.jsonl, unreadable lines skipped (nothing is written)."""
        return [r for r in read_jsonl(self.metrics) if "epoch" in r]

    def repair_metrics(self, through_epoch: int | None = None, *, create: bool = False) -> list[dict[str, Any]]:
        """Rewrite metrics.jsonl (atomically) with its readable epoch records only: a process killed
        mid-write leaves half a line, a run killed between the append and ``last.pt`` a line ahead of
        its checkpoint (``through_epoch``: the epochs ``last.pt`` holds; later records are dropped).
        Returns the records kept. A missing file stays missing unless ``create``."""
        path = self.metrics
        if not path.exists():
            if create:
                self.write_text(path, "")
            return []
        good = []
        for rec in _json_lines(path, warn=True):
            if not (isinstance(rec, dict) and "epoch" in rec):
                log.warning("dropping a line of %s that is not an epoch record", path)
            elif through_epoch is None or rec["epoch"] <= through_epoch:
                good.append(rec)
        self.write_text(path, "".join(json.dumps(r) + "\n" for r in good))
        return good

    def remove_orphan_temps(self) -> list[Path]:
        """Delete what a killed atomic write left in the folder and its checkpoints (see
        :func:`remove_orphan_temps`)."""
        return remove_orphan_temps(self.root) + remove_orphan_temps(self.checkpoints)


def remove_orphan_temps(folder: str | os.PathLike, *, recursive: bool = False) -> list[Path]:
    """Delete the ``.NAME.XXXX.tmp`` files that :func:`robfair.utils.atomic_path` leaves when its
    process is killed mid-write (a killed save of a 13 MB checkpoint leaves 13 MB). Only files of
    exactly that pattern are touched; returns what was removed."""
    root = Path(folder)
    if not root.is_dir():
        return []
    found = root.rglob(".*.tmp") if recursive else root.glob(".*.tmp")
    removed = []
    for p in found:
        if p.is_file() and p.name.count(".") >= 3:
            try:
                p.unlink()
                removed.append(p)
            except OSError:
                pass
    if removed:
        log.info("removed %d temporary file(s) a killed process left in %s", len(removed), root)
    return removed


__all__ = ["RunFolder", "audit_file", "audit_target", "is_study_folder", "is_audit_file", "outcomes_path", "examples_path", "sidecar_path", "read_jsonl",
           "is_run_folder", "holds_results", "remove_orphan_temps", "RUN_FILES", "RUN_MARKERS", "STUDY_MARKERS",
           "AUDIT_FILE", "OUTCOMES_FILE", "EXAMPLES_FILE", "METRICS_FILE", "CONFIG_FILE", "RUN_SPEC_FILE", "EPS_SWEEP_FILE",
           "CERTIFY_FILE",
           "ATTEMPTS_FILE", "WORKER_LOG", "CHECKPOINTS_DIR", "TENSORBOARD_DIR", "BEST_CHECKPOINT", "LAST_CHECKPOINT"]
