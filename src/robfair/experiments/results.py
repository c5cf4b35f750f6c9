"""Read finished run folders (sweep runs, ``robfair train`` runs, ``robfair demo`` runs) for reports.

    entries, skipped = load_runs("runs/frl-table")                       # every run folder below
    entries, skipped = load_runs("runs/frl-table", skip_incomplete=True)  # half-written ones skipped

A run folder is a folder with ``run.yaml`` (sweep) or ``config.yaml`` (trainer). It is finished when
it has a checkpoint and a readable ``audit.json`` (and ``eps_sweep.json`` when its study asked for
one). A half-written folder is an error naming it - or, with ``skip_incomplete``, skipped with a
warning (the report lists it).

A bare audit file is a run too (``load_runs("audit.json")``, ``load_paths([...])``): one written by
``robfair audit --out`` or by the Python API (``write_json(path, report.to_json())``), named after
its folder (``audit.json``) or its file name, its eps sweep (``audit --eps-sweep``) included; the
demo's combined ``runs/demo/audit.json`` gives one run per model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

import yaml

from ..auditing import AuditReport
from ..auditing.eps_sweep import EpsSweep
from ..errors import RobfairError
from ..report.certify import read_certify
from ..report.tables import RunEntry
from ..runfolder import (AUDIT_FILE, CHECKPOINTS_DIR, CONFIG_FILE, RUN_SPEC_FILE, TENSORBOARD_DIR, RunFolder,
                         is_audit_file)
from ..safeio import input_file, read_json, read_text_capped, yaml_loads
from .config import RUN_SCHEMA, RunSpec
from .store import INDEX_NAME, Store

_SKIP_DIRS = {CHECKPOINTS_DIR, TENSORBOARD_DIR, "slurm", "__pycache__"}
_SEED_SUFFIX = re.compile(r"(?:^|[,_-])seed[=_-]?\d+$|[_-]s\d+$")


def read_audit(path: str | Path) -> Any:
    """An AuditReport from ``audit.json`` (with the per-sample outcomes of ``outcomes.npz`` beside it,
    when present); RobfairError when missing, truncated or not an audit."""
    return AuditReport.load(path)


def read_eps_sweep(path: str | Path) -> list[Any] | None:
    """One AuditReport per radius of ``eps_sweep.json`` (an :class:`~robfair.auditing.eps_sweep.EpsSweep`;
    None when absent); RobfairError when broken."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        sweep = EpsSweep.from_json(read_json(path, "eps sweep"))
        for a, e in zip(sweep.audits, sweep.eps):
            a.meta.setdefault("eps", e)
        return sweep.audits
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, RobfairError):
        raise RobfairError(f"{path} is truncated or not an eps sweep") from None


def incomplete_reason(run_dir: str | Path, spec: RunSpec | None = None) -> str | None:
    """Why ``run_dir`` is not a finished run (None when it is): no checkpoint, no or broken audit.json,
    no or broken eps_sweep.json when its study asks for one."""
    run = RunFolder(run_dir)
    missing = run.missing()
    if missing is not None:
        return missing
    try:
        read_audit(run.audit)
    except RobfairError as e:
        return str(e).replace(str(run.audit), AUDIT_FILE)
    if spec is not None and spec.audit.get("eps_sweep"):
        try:
            if read_eps_sweep(run.eps_sweep) is None:
                return f"{run.eps_sweep.name} is missing"
        except RobfairError as e:
            return str(e)
    return None


def find_run_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is a run folder, else every run folder below it (sorted)."""
    if (root / RUN_SPEC_FILE).exists() or (root / CONFIG_FILE).exists():
        return [root]
    found = set()
    for marker in (RUN_SPEC_FILE, CONFIG_FILE):
        for p in root.rglob(marker):
            rel = p.parent.relative_to(root).parts
            if any(part.startswith(".") or part in _SKIP_DIRS for part in rel):
                continue
            found.add(p.parent)
    # a run folder inside another run folder is not a run (e.g. nothing); keep the outermost
    dirs = sorted(found)
    return [d for d in dirs if not any(o != d and o in d.parents for o in dirs)]


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        d = yaml_loads(read_text_capped(path, "run file"), f"{path}", error=RobfairError)
    except (OSError, yaml.YAMLError):
        raise RobfairError(f"{path} is unreadable or not YAML") from None
    if not isinstance(d, dict):
        raise RobfairError(f"{path} is not a mapping")
    return d


def _sweep_from_audit(path: Path) -> list[Any] | None:
    """The eps sweep ``robfair audit --eps-sweep`` stores inside audit.json (its main attack's)."""
    try:
        d = read_json(path, "audit file")
    except (OSError, RobfairError):
        return None
    sweeps = d.get("eps_sweep") if isinstance(d, dict) else None
    if not isinstance(sweeps, dict) or not sweeps:
        return None
    attacks = (d.get("meta") or {}).get("attacks") or []
    key = next((a for a in reversed(attacks) if a in sweeps), next(iter(sweeps)))
    try:
        return list(EpsSweep.from_json(sweeps[key]).reports)
    except (RobfairError, KeyError, TypeError, ValueError):
        raise RobfairError(f"{path}: its eps_sweep entry is not an eps sweep; re-run `robfair audit --eps-sweep`") from None


def _audit_config(audit: Any) -> dict[str, Any]:
    meta = getattr(audit, "meta", {}) or {}
    model = meta.get("model") or {}
    out: dict[str, Any] = {}
    if meta.get("dataset"):
        out["data"] = meta["dataset"]
    if isinstance(model, dict) and model.get("name"):
        out["model"] = model["name"]
    if meta.get("checkpoint"):
        out["checkpoint"] = meta["checkpoint"]
    return out


def load_audit_file(path: str | Path) -> list[RunEntry]:
    """Runs from one audit JSON file (see the module docstring); RobfairError when it is not one."""
    path = Path(path).expanduser()
    try:
        input_file(path, "audit file")  # a FIFO, socket or device: its own line
    except FileNotFoundError:
        raise RobfairError(f"{path} does not exist; pass a run folder, a study folder or an audit.json file") from None
    try:
        d = read_json(path, "audit file")
    except (OSError, RobfairError):
        raise RobfairError(f"{path} is truncated or not JSON; pass an audit.json written by robfair") from None
    name = path.parent.resolve().name if is_audit_file(path) else path.stem
    if isinstance(d, dict) and d.get("schema") == "robfair.demo/1":
        out = []
        for label, rep in (d.get("runs") or {}).items():
            try:
                audit = AuditReport.from_json(rep)
            except (RobfairError, KeyError, TypeError, ValueError) as e:
                raise RobfairError(f"{path}: run '{label}' is not a robfair audit ({e})") from None
            run_dir = path.parent / {"standard": "st", "pgd-at": "at"}.get(label, label)
            out.append(RunEntry(name=str(label), audit=audit, config=_audit_config(audit),
                                path=run_dir if RunFolder(run_dir).metrics.exists() else None))
        return out
    audit = read_audit(path)
    return [RunEntry(name=name, audit=audit, config=_audit_config(audit), eps_sweep=_sweep_from_audit(path),
                     path=path.parent, certify=read_certify(path.parent) if is_audit_file(path) else None)]


def load_paths(paths: Sequence[str | Path], *, skip_incomplete: bool = False) -> tuple[list[RunEntry], list[str]]:
    """:func:`load_runs` over several folders / audit files, in the order given; a run whose name
    an earlier one already has gets the folder above its name in front (``b/audit_10k_best``)."""
    entries: list[RunEntry] = []
    skipped: list[str] = []
    for p in paths:
        e, s = load_runs(p, skip_incomplete=skip_incomplete)
        entries += e
        skipped += s
    seen: set[str] = set()
    for e in entries:
        if e.name in seen and e.path is not None:
            folder = Path(e.path).resolve()
            prefix = folder.parent.name if folder.name == e.name.split("/")[-1] else folder.name
            new = f"{prefix}/{e.name}"
            if e.group == e.name:
                e.group = new
            e.name = new
        seen.add(e.name)
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise RobfairError(f"two runs are both named '{dup[0]}'; report them separately or rename a folder")
    return entries, skipped


def load_entry(run_dir: Path, root: Path) -> RunEntry:
    """One finished run; RobfairError naming the folder and what is missing otherwise."""
    spec = None
    run = RunFolder(run_dir)
    if run.run_spec.exists():
        try:
            spec = RunSpec.load(run_dir)
        except RobfairError as e:
            raise RobfairError(str(e)) from None
    reason = incomplete_reason(run_dir, spec)
    if reason is not None:
        raise RobfairError(f"run folder {run_dir} is not finished: {reason}")
    audit = read_audit(run.audit)
    eps_sweep = read_eps_sweep(run.eps_sweep) or _sweep_from_audit(run.audit)
    cert = read_certify(run_dir)
    if spec is not None:
        return RunEntry(name=spec.name, group=spec.group, seed=spec.seed, config=dict(spec.train),
                        overrides=dict(spec.overrides), audit=audit, eps_sweep=eps_sweep, path=run_dir, certify=cert)
    config = _read_yaml(run.config) if run.config.exists() else {}
    config.pop("run_info", None)
    name = run_dir.name if run_dir == root else run_dir.relative_to(root).as_posix()
    seed = config.get("seed")
    group = _SEED_SUFFIX.sub("", name) or name
    return RunEntry(name=name, group=group, seed=seed if isinstance(seed, int) else None, config=config,
                    audit=audit, eps_sweep=eps_sweep, path=run_dir, certify=cert)


def load_runs(root: str | Path, *, skip_incomplete: bool = False) -> tuple[list[RunEntry], list[str]]:
    """Every finished run under ``root`` and the warnings of skipped ones. Errors (one line): no run
    folder at all; a half-written run (unless ``skip_incomplete``); nothing finished."""
    root = Path(root).expanduser()
    if not root.exists():
        raise RobfairError(f"{root} does not exist; pass a run folder or a study output folder such as runs/frl-table")
    if root.is_file():
        if is_audit_file(root) and (RunFolder(root.parent).run_spec.exists() or RunFolder(root.parent).config.exists()):
            root = root.parent  # the run folder it belongs to (config, metrics.jsonl, checkpoints)
        else:
            return load_audit_file(root), []
    dirs = find_run_dirs(root)
    if not dirs and RunFolder(root).audit.is_file():
        return load_audit_file(RunFolder(root).audit), []
    if not dirs:
        raise RobfairError(f"no runs under {root} (no folder with run.yaml or config.yaml, no audit.json); pass a "
                           "study output folder such as runs/frl-table, an audit.json, or run `robfair sweep STUDY.yaml` first")
    entries, skipped = [], []
    for d in dirs:
        try:
            entries.append(load_entry(d, root))
        except RobfairError as e:
            if not skip_incomplete:
                raise RobfairError(f"{e}; finish it (`robfair sweep` resumes it), delete it, or pass "
                                   "--skip-incomplete") from None
            skipped.append(f"skipped {d}: {str(e).split(': ', 1)[-1]}")
    if not entries:
        raise RobfairError(f"no finished runs under {root} ({len(skipped)} unfinished); wait for the sweep or "
                           "run `robfair sweep` to finish them")
    index = root / INDEX_NAME
    if index.exists():  # the study's order (grid order), not the alphabetical order of folders
        try:
            with Store(index) as store:
                order = {r["id"]: i for i, r in enumerate(store.rows())}
            entries.sort(key=lambda e: order.get(e.name, len(order)))
        except RobfairError:
            pass
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise RobfairError(f"two runs are both named '{dup[0]}'; report their study folders separately")
    return entries, skipped


def study_info(root: str | Path) -> dict[str, Any]:
    """The ``study.yaml`` a sweep wrote in ``root`` (empty dict when there is none)."""
    p = Path(root).expanduser() / "study.yaml"
    if not p.exists():
        return {}
    try:
        return _read_yaml(p)
    except RobfairError:
        return {}


__all__ = ["find_run_dirs", "incomplete_reason", "load_audit_file", "load_entry", "load_paths", "load_runs", "read_audit",
           "read_eps_sweep", "study_info", "RUN_SCHEMA"]
