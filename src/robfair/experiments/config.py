"""A study: one base training run, a grid of overrides, seeds and audit settings, in one YAML file.

    study = load_study("studies/frl-table.yaml")
    runs = study.expand(out="runs/frl-table")      # -> [RunSpec], one per (variant, grid point, seed)
    runs[0].name, runs[0].train, runs[0].audit, runs[0].hash

The YAML (``yaml.safe_load``; every key checked, unknown keys rejected by name)::

    name: frl-table
    base:                      # a TrainConfig: every key of `robfair train --config`
      data: digits
      method: trades
      eps: 0.1
      epochs: 10
    grid:                      # lists -> cartesian product (a list of such mappings: their union)
      lr: [0.01, 0.1]
      method_options.beta: [1, 6]       # dotted keys set one entry of a mapping key
    variants:                  # named override sets, crossed with the grid
      - {name: pgd-at, method: pgd-at}
      - {name: trades-b6, method: trades, method_options: {beta: 6}}
    seeds: [0, 1, 2]
    audit: {attacks: [pgd20], eps: "${eps}"}   # every flag of `robfair audit`
    vars: {root: ~/data}
    requires: [fair-constraint]  # methods the study needs; missing -> the study is skipped with a message

``${...}`` references are resolved per run: ``${eps}`` / ``${method_options.beta}`` (the run's own
training config), ``${run.name}`` / ``${run.group}``, ``${base.eps}`` / ``${audit.eps}`` (the study
document), ``${vars.root}`` or just ``${root}`` (``vars``). A string that is exactly one reference
keeps the referenced value's type (``eps: ${base.eps}`` stays a number).

Run names are built from the overrides (``trades-b6,lr=0.1,seed=0``), sanitized to
``[A-Za-z0-9._,=+-]``; two runs with one name (or names equal up to case) are an error.

Why one module: the study schema, its ``${...}`` references and its expansion into runs
are one grammar; each part validates against the others.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
import logging
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..attacks import get_attack
from ..data import DATASETS
from ..data.loading import parse_spec
from ..errors import ConfigError, RobfairError, one_line
from ..models.factory import check_model_args
from ..runfolder import RunFolder
from ..safeio import read_text_capped, read_yaml_file, yaml_loads
from ..training import TrainConfig
from ..training.config import ProbeBudget, ProbeTolerance
from ..utils import parse_eps

log = logging.getLogger(__name__)

RUN_SCHEMA = "robfair.run/1"
#: TrainConfig keys that do not change what a run computes (excluded from the config hash)
HASH_FREE_KEYS = ("resume", "device", "out", "compile")
#: TrainConfig keys of the final audit that a study sets in its audit block (never in base, grid or variants):
#: left out of a run's train settings, filled in from its audit settings by RunSpec.train_config
AUDIT_TRAIN_KEYS = ("probe", "probe_tolerance")
#: the training keys of a model file (robfair train --model FILE): left out of a run's spec when unset, so the
#: config hashes of the studies made before they existed stay
MODEL_FILE_KEYS = ("arch", "arch_kwargs", "mean", "std", "model_dir", "model_source")
#: audit settings that change the speed, never an outcome (channels_last: identical predictions), so
#: run folders made before their default changed still match
AUDIT_HASH_FREE_KEYS = ("channels_last",)
_REF = re.compile(r"\$\{([^}]*)\}")
_NAME_OK = re.compile(r"[^A-Za-z0-9._,=+-]+")
MAX_NAME = 120


# ============================================================================== pydantic blocks
class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AuditSettings(_Block):
    """The final test audit of every run; one key per flag of ``robfair audit``."""

    attacks: list[str] = Field(default_factory=lambda: ["pgd20"], min_length=1,
                               description="attacks (worst case over them is the headline)")
    eps: float | str | None = Field(None, description="audit radius; default: the run's training eps")
    eps_sweep: list[float | str] = Field(default_factory=list,
                                         description="extra radii for robust accuracy vs eps (optional)")
    split: Literal["test", "train"] = "test"
    batch_size: int = Field(256, ge=1)
    seed: int | None = Field(None, ge=0, description="attack random starts; default: the run's seed")
    early_exit: bool = True
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    channels_last: bool | None = Field(None, description="channels-last memory format; default (None): on for "
                                                         "models with 2-D convolutions (same predictions)")
    bootstrap: int = Field(1000, ge=0, le=100_000, description="bootstrap resamples for worst/gap intervals in reports")
    probe: ProbeBudget = Field(
        None, description="reliability probe budget: AutoAttack on the samples the attacks left robust, within this "
                          "multiple of their compute (e.g. 1, 2x); 'all': every robust sample (exactly AutoAttack per "
                          "group); 0: off; default (None): 1")
    probe_tolerance: ProbeTolerance = Field(None, description="the overstatement a group may have before the probe "
                                                              "flags it, a fraction (0.01 = 1 point); default (None): 0.01")


class LocalSettings(_Block):
    """``--backend local``: worker processes on this machine."""

    workers: int = Field(1, ge=1, description="runs at a time")
    gpus: list[int] | None = Field(None, description="GPU ids handed out round-robin to worker slots")
    threads: int | None = Field(None, ge=1, description="torch threads per run; default: cores / workers")


class SlurmSettings(_Block):
    """``--backend slurm``: one submitit job array (one task per run)."""

    partition: str | None = None
    gpus_per_node: int = Field(1, ge=0)
    cpus_per_task: int = Field(8, ge=1)
    mem_gb: float | None = Field(32, gt=0)
    timeout_min: int = Field(720, ge=1)
    array_parallelism: int = Field(32, ge=1)
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    setup: list[str] = Field(default_factory=list, description="shell lines run before each job (module load ...)")
    additional_parameters: dict[str, Any] = Field(default_factory=dict, description="extra #SBATCH options")


class TrackingSettings(_Block):
    tensorboard: bool = Field(False, description="write TensorBoard scalars per epoch (extra [tensorboard])")


class ReportSettings(_Block):
    title: str | None = None
    baseline: str | None = Field(None, description="setting (run name without seed) for DAFA's rho")


class StudyConfig(_Block):
    """One study. ``base`` and the overrides are validated as ``TrainConfig`` per run in ``expand``."""

    name: str = Field(..., min_length=1)
    description: str = ""
    size: Literal["cpu", "paper"] | None = None
    out: str | None = Field(None, description="output folder; default runs/<name>")
    vars: dict[str, Any] = Field(default_factory=dict)
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, Any] | list[dict[str, Any]] = Field(default_factory=dict)
    variants: list[dict[str, Any]] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    requires: list[str] = Field(default_factory=list, description="methods that must be registered")
    audit: AuditSettings = Field(default_factory=AuditSettings)
    local: LocalSettings = Field(default_factory=LocalSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    tracking: TrackingSettings = Field(default_factory=TrackingSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("lists a seed twice; list each seed once")
        if any(s < 0 for s in v):
            raise ValueError("seeds must be >= 0")
        return v

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: Any, source: str = "study") -> "StudyConfig":
        if not isinstance(data, dict):
            raise ConfigError(f"{source} must hold a mapping of keys (name, base, grid, seeds, audit ...); "
                              "write 'key: value' lines")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ConfigError(f"{source}: {_one_line(e, cls)}") from None

    # ------------------------------------------------------------------ derived
    def missing_methods(self) -> list[str]:
        """Methods in ``requires`` that this robfair does not register (the study cannot run yet)."""
        from ..training import METHODS  # lazy: start-up time (imports every method, ~0.1 s; report/compare need none)

        return [m for m in self.requires if m not in METHODS]

    def expand(self, out: str | Path | None = None) -> list["RunSpec"]:
        """Every run of the study, validated (``TrainConfig`` per run), with unique names."""
        return expand(self, out)

    @property
    def out_dir(self) -> Path:
        return Path(self.out or f"runs/{self.name}").expanduser()


# ============================================================================== runs
class RunSpec(BaseModel):
    """One run of a study: what ``run.yaml`` in its folder holds (the folder alone reproduces it)."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(RUN_SCHEMA, alias="schema")
    study: str
    name: str
    group: str = Field(description="the name without the seed: runs of one setting")
    seed: int
    variant: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict, description="what this run changes from base")
    train: dict[str, Any]
    audit: dict[str, Any]
    tracking: dict[str, Any] = Field(default_factory=dict)
    hash: str = ""

    def model_post_init(self, _ctx: Any) -> None:
        if not self.hash:
            self.hash = config_hash(self.train, self.audit)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", by_alias=True), sort_keys=False)

    @classmethod
    def load(cls, run_dir: str | Path) -> "RunSpec":
        """Read ``RUN_DIR/run.yaml``; a one-line ConfigError when it is missing or broken."""
        p = RunFolder(run_dir).run_spec
        try:
            data = yaml_loads(read_text_capped(p, "run file", error=ConfigError), f"run file {p}")
        except FileNotFoundError:
            raise ConfigError(f"{p} does not exist; {run_dir} is not a sweep run folder (write one with "
                              "`robfair sweep STUDY.yaml`)") from None
        except yaml.YAMLError:
            raise ConfigError(f"{p} is not valid YAML (a half-written run folder?); delete the folder "
                              "and re-run the sweep") from None
        if not isinstance(data, dict) or data.get("schema") != RUN_SCHEMA:
            raise ConfigError(f"{p} is not a robfair run file (schema {RUN_SCHEMA}); delete the folder and re-run the sweep")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ConfigError(f"{p}: {_one_line(e, cls, fix='delete the folder and re-run the sweep')}") from None

    def train_config(self, run_dir: str | Path | None = None, **overrides: Any) -> Any:
        """The run's :class:`~robfair.training.TrainConfig` (``out`` = ``run_dir`` when given), its
        final audit's probe (``probe``, ``probe_tolerance``) from the audit settings."""
        d = dict(self.train)
        d.update({k: self.audit.get(k) for k in AUDIT_TRAIN_KEYS})
        if run_dir is not None:
            d["out"] = str(run_dir)
        d.update(overrides)
        return TrainConfig(**d)


def config_hash(train: dict[str, Any], audit: dict[str, Any]) -> str:
    """A short hash of what a run computes: its train config (less resume/device/out) and audit settings."""
    payload = {"train": {k: v for k, v in train.items() if k not in HASH_FREE_KEYS},
               "audit": {k: v for k, v in audit.items() if k not in AUDIT_HASH_FREE_KEYS}}
    blob = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_differences(a: RunSpec, b: RunSpec) -> list[str]:
    """Keys whose values differ between two runs' train/audit settings ('train.epochs: 1 -> 2').
    Keys present on one side only are ignored (a newer robfair may add keys with defaults)."""
    out = []
    for part, free in (("train", HASH_FREE_KEYS), ("audit", AUDIT_HASH_FREE_KEYS)):
        da, db = getattr(a, part), getattr(b, part)
        for k in da:
            if k in free or k not in db:
                continue
            if json.dumps(da[k], sort_keys=True, default=str) != json.dumps(db[k], sort_keys=True, default=str):
                out.append(f"{part}.{k}: {da[k]!r} -> {db[k]!r}")
    return out


# ============================================================================== loading
def load_study(path: str | Path, **overrides: Any) -> StudyConfig:
    """Read a study YAML (``yaml.safe_load``); ``overrides`` replace top-level keys (e.g. ``out``)."""
    p = Path(path).expanduser()
    data = read_yaml_file(p, "study file", missing="check the path (studies/ holds the shipped ones)",
                          folder="pass a .yaml file such as studies/frl-table.yaml")
    if data is None:
        raise ConfigError(f"study file {str(p)!r} is empty; write at least 'name:' and 'base:'")
    if isinstance(data, dict):
        data.setdefault("name", p.stem)
        data.update({k: v for k, v in overrides.items() if v is not None})
    return StudyConfig.from_dict(data, source=f"study {p.name}")


def _one_line(e: ValidationError, model: type[BaseModel], fix: str = "fix it in the study file") -> str:
    """A study-file validation error as one line (:func:`robfair.errors.one_line`)."""
    return one_line(e, model, unknown="unknown key '{key}'", invalid="key '{key}'", valid="valid keys here", fix=fix,
                    root="study")


# ============================================================================== references
def resolve_refs(obj: Any, lookup: Any, where: str = "") -> Any:
    """Replace ``${path}`` in every string of ``obj`` (dicts and lists walked) with ``lookup(path)``.
    A string that is one reference keeps the value's type; embedded references are formatted."""
    if isinstance(obj, dict):
        return {k: resolve_refs(v, lookup, f"{where}.{k}" if where else str(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [resolve_refs(v, lookup, f"{where}[{i}]") for i, v in enumerate(obj)]
    if not isinstance(obj, str) or "${" not in obj:
        return obj
    whole = _REF.fullmatch(obj.strip())
    if whole:
        return lookup(whole.group(1).strip(), where)

    def fmt(m: re.Match) -> str:
        v = lookup(m.group(1).strip(), where)
        return v if isinstance(v, str) else (f"{v:g}" if isinstance(v, float) else json.dumps(v) if isinstance(v, (dict, list)) else str(v))

    out = _REF.sub(fmt, obj)
    if "${" in out:
        raise ConfigError(f"'{where}' has an unclosed reference in {obj!r}; write ${{name}}")
    return out


def _get_path(d: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(d, dict) and p in d:
            d = d[p]
        elif isinstance(d, list) and p.isdigit() and int(p) < len(d):
            d = d[int(p)]
        else:
            raise KeyError(p)
    return d


class _Resolver:
    """Looks references up in the run (train config, run name) then the study document and vars;
    resolves recursively with cycle detection."""

    def __init__(self, doc: dict[str, Any], train: dict[str, Any], run: dict[str, Any]) -> None:
        self.doc, self.train, self.run = doc, train, run
        self.train_keys = set(TrainConfig.model_fields)
        self.stack: list[str] = []

    def __call__(self, ref: str, where: str) -> Any:
        if not ref:
            raise ConfigError(f"'{where}' has an empty reference ${{}}; write ${{name}}, e.g. ${{eps}} or ${{base.eps}}")
        if ref in self.stack:
            raise ConfigError(f"reference cycle {' -> '.join(self.stack + [ref])} in '{where}'; break the cycle")
        parts = ref.split(".")
        head = parts[0]
        if head in self.train_keys:
            source, path = self.train, parts
        elif head == "run":
            source, path = self.run, parts[1:]
        elif head == "study":
            source, path = self.doc, parts[1:]
        elif head in StudyConfig.model_fields:
            source, path = self.doc, parts
        elif head in (self.doc.get("vars") or {}):
            source, path = self.doc["vars"], parts
        else:
            raise ConfigError(f"unknown reference ${{{ref}}} in '{where}'; use a training key (${{eps}}), "
                              "${base.KEY}, ${vars.NAME} or ${run.name}, or define it under vars")
        try:
            value = _get_path(source, path)
        except KeyError:
            raise ConfigError(f"reference ${{{ref}}} in '{where}' names nothing; check the spelling "
                              "(training keys, base, vars, audit, run.name)") from None
        self.stack.append(ref)
        try:
            return resolve_refs(copy.deepcopy(value), self, where)
        finally:
            self.stack.pop()


# ============================================================================== expansion
def _set_key(d: dict[str, Any], key: str, value: Any, where: str) -> None:
    """``d[key] = value``; a dotted key sets one entry inside a mapping key (method_options.beta)."""
    parts = key.split(".")
    fields = TrainConfig.model_fields
    if parts[0] not in fields:
        close = difflib.get_close_matches(parts[0], list(fields), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(f"unknown training key '{parts[0]}' in {where}; {hint}valid keys: {', '.join(fields)}")
    if parts[0] == "seed" and where.startswith(("grid", "variants", "base")):
        raise ConfigError(f"'seed' in {where}: list seeds under the top-level 'seeds:' key instead")
    if parts[0] in AUDIT_TRAIN_KEYS and where.startswith(("grid", "variant", "base")):
        raise ConfigError(f"'{parts[0]}' in {where}: the final audit's reliability probe is set in the study's "
                          f"audit block; write audit: {{{parts[0]}: ...}} instead")
    if parts[0] == "out" and where.startswith(("grid", "variants", "base")):
        raise ConfigError(f"'out' in {where}: each run goes to <study out>/<run name>; set the study's "
                          "top-level 'out' (or --out) instead")
    if len(parts) == 1:
        d[key] = copy.deepcopy(value)
        return
    cur = d.setdefault(parts[0], {})
    if not isinstance(cur, dict):
        raise ConfigError(f"'{key}' in {where}: '{parts[0]}' is not a mapping; set it whole instead")
    cur = d[parts[0]] = dict(cur)
    for p in parts[1:-1]:
        nxt = cur.get(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"'{key}' in {where}: '{p}' is not a mapping; set it whole instead")
        cur[p] = dict(nxt)
        cur = cur[p]
    cur[parts[-1]] = copy.deepcopy(value)


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, dict):
        return "-".join(f"{k}-{_fmt_value(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return "-".join(_fmt_value(x) for x in v)
    return str(v)


def sanitize(name: str) -> str:
    """A file-system-safe run name: [A-Za-z0-9._,=+-], no leading dot, at most 120 characters
    (longer names keep a prefix and a short hash of the full name)."""
    s = _NAME_OK.sub("_", name).strip("_") or "run"
    if s.startswith("."):
        s = "_" + s[1:]
    if len(s) > MAX_NAME:
        s = s[: MAX_NAME - 9] + "~" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return s


def _grid_blocks(study: StudyConfig) -> list[list[tuple[str, list[Any]]]]:
    blocks = study.grid if isinstance(study.grid, list) else [study.grid]
    if isinstance(study.grid, list) and not study.grid:
        raise ConfigError("the grid is an empty list, so the study has no runs; give at least one mapping "
                          "(e.g. grid: {method: [standard, pgd-at]}) or remove 'grid'")
    out = []
    for bi, block in enumerate(blocks):
        where = f"grid[{bi}]" if isinstance(study.grid, list) else "grid"
        if not isinstance(block, dict):
            raise ConfigError(f"{where} must be a mapping of key: [values]; write e.g. lr: [0.01, 0.1]")
        items = []
        for k, v in block.items():
            vals = v if isinstance(v, list) else [v]
            if not vals:
                raise ConfigError(f"{where}.{k} is an empty list, so the grid has no runs; give at least one value")
            items.append((str(k), vals))
        out.append(items)
    return out


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Label of each grid key in run names: its last dotted part, unless that is ambiguous."""
    last = [k.split(".")[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def expand(study: StudyConfig, out: str | Path | None = None) -> list[RunSpec]:
    """Expand ``study`` into validated runs: variants x grid points x seeds, deterministic order."""
    from ..training import METHODS  # lazy: start-up time (imports every method, ~0.1 s; report/compare need none)

    out_dir = Path(out).expanduser() if out is not None else study.out_dir
    doc = study.model_dump(mode="json")
    base: dict[str, Any] = {}
    for k, v in study.base.items():
        _set_key(base, str(k), v, "base")
    variants: list[tuple[str | None, dict[str, Any]]] = []
    seen_variants: set[str] = set()
    for i, var in enumerate(study.variants):
        if not isinstance(var, dict) or not isinstance(var.get("name"), str) or not var["name"].strip():
            raise ConfigError(f"variants[{i}] needs a 'name' (a string) and the keys it overrides; "
                              "write e.g. - {name: trades-b6, method: trades}")
        name = var["name"].strip()
        if name in seen_variants:
            raise ConfigError(f"variant name '{name}' is used twice; give each variant its own name")
        seen_variants.add(name)
        ov: dict[str, Any] = {}
        for k, v in var.items():
            if k != "name":
                ov[str(k)] = v
                _set_key({}, str(k), v, f"variants[{i}] ({name})")  # key check only
        variants.append((name, ov))
    if not variants:
        variants = [(None, {})]

    runs: list[RunSpec] = []
    names: dict[str, str] = {}
    hashes: dict[str, str] = {}
    for var_name, var_ov in variants:
        for items in _grid_blocks(study):
            keys = [k for k, _ in items]
            labels = _short_keys(keys)
            for k in keys:
                _set_key({}, k, None, "grid")  # key check
            for combo in itertools.product(*[vals for _, vals in items]):
                point = dict(zip(keys, combo))
                for seed in study.seeds:
                    train = copy.deepcopy(base)
                    for k, v in var_ov.items():
                        _set_key(train, k, v, f"variant {var_name}")
                    for k, v in point.items():
                        _set_key(train, k, v, "grid")
                    train["seed"] = seed
                    parts = ([var_name] if var_name else []) + [f"{labels[k]}={_fmt_value(v)}" for k, v in point.items()]
                    group_raw = ",".join(parts) or "base"
                    name = sanitize(f"{group_raw},seed={seed}")
                    group = sanitize(group_raw)
                    run_info = {"name": name, "group": group, "seed": seed, "variant": var_name}
                    resolver = _Resolver(doc, train, run_info)
                    train = resolve_refs(train, resolver, "base")
                    resolver.train = train
                    audit = resolve_refs(doc["audit"], resolver, "audit")
                    method = train.get("method", "standard")
                    if isinstance(method, str) and method not in METHODS:
                        raise ConfigError(f"study {study.name}: run {name} uses method '{method}', which is not "
                                          f"registered (registered: {', '.join(METHODS.names())}); fix the name "
                                          "or install the robfair version that has it")
                    train["out"] = str(out_dir / name)
                    train["resume"] = True
                    try:
                        cfg = TrainConfig(**train).check_selection()
                    except RobfairError as e:
                        raise ConfigError(f"study {study.name}, run {name}: {e}") from None
                    _check_names(cfg, f"study {study.name}, run {name}")
                    audit = _finish_audit(audit, cfg, name)
                    overrides = {**var_ov, **point}
                    spec = RunSpec(study=study.name, name=name, group=group, seed=seed, variant=var_name,
                                   overrides=json.loads(json.dumps(overrides, default=str)),
                                   train={k: v for k, v in cfg.to_dict().items() if k not in AUDIT_TRAIN_KEYS
                                          and not (k in MODEL_FILE_KEYS and not v)},
                                   audit=audit, tracking=study.tracking.model_dump())
                    if spec.hash in hashes:  # the same run reached through two grid blocks: run it once
                        log.info("run %s is the same as %s; it is run once, under the first name", name, hashes[spec.hash])
                        continue
                    key = name.lower()
                    if key in names:
                        raise ConfigError(f"two runs are named '{name}' (also '{names[key]}'); give the variants "
                                          "distinct names or change the grid values that collide after sanitizing")
                    names[key] = name
                    hashes[spec.hash] = name
                    runs.append(spec)
    if not runs:
        raise ConfigError(f"study {study.name} expands to no runs; give grid values, variants and seeds")
    return runs


def _check_names(cfg: Any, where: str) -> None:
    """Dataset, model and training attack names exist (a typo fails now, not in every worker)."""
    try:
        DATASETS.canonical(parse_spec(cfg.data)[0])
        if not cfg.model_file:  # a model file is read where it is trained
            check_model_args(cfg.model, cfg.model_kwargs)
        for atk in (cfg.attack, cfg.val_attack):
            if atk and atk.lower() != "none":
                get_attack(atk)
    except RobfairError as e:
        raise ConfigError(f"{where}: {e}") from None


def _finish_audit(audit: dict[str, Any], cfg: Any, name: str) -> dict[str, Any]:
    """Audit settings of one run, with defaults filled in from its training config."""
    try:
        a = AuditSettings(**audit)
    except ValidationError as e:
        raise ConfigError(f"run {name}: audit {_one_line(e, AuditSettings)}") from None
    try:
        for atk in a.attacks:
            get_attack(atk)
        eps = cfg.eps if a.eps is None else parse_eps(a.eps, "audit.eps")
        sweep = [parse_eps(e, "audit.eps_sweep") for e in a.eps_sweep]
    except RobfairError as e:
        raise ConfigError(f"run {name}: audit: {e}") from None
    d = a.model_dump(mode="json")
    d.update(eps=eps, eps_sweep=sweep, seed=cfg.seed if a.seed is None else a.seed)
    for key in ("probe", "probe_tolerance"):
        if d.get(key) is None:  # the default: left out so the config hashes of existing studies stay
            d.pop(key, None)
    return d
