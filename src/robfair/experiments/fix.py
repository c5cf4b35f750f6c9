"""Fix anyone's model: audit it, fine-tune it with a fair method, audit it again, and prove the change class by class.

    import robfair
    res = robfair.fix("weights.pt", data="cifar10-jpeg", out="runs/fix-frl", arch="mynet.py:Net", method="frl-rwrm",
              epochs=3, lr=5e-4, optimizer="adam", attacks=["fgsm", "pgd20"])
    res.summary["worst"]        # the weakest class before and after, its paired test, the average cost
    res.comparison.per_class    # every class: before, after, difference, paired interval, McNemar p, Holm

One call, three steps on one test split:

1. **before**: :func:`robfair.audit` of the model as given (any source ``robfair audit`` takes: a state
   dict or safetensors file with ``arch``, TorchScript, a RobustBench file, a robfair checkpoint), at the
   run's eps, seed, precision, attacks and reliability probe -> ``RUN/before/audit.json`` + outcomes.npz.
2. **fine-tune**: :func:`robfair.training.train` of that model with ``method`` (FRL, CFA, FAAL, ... any
   registered method), on the training split minus a validation split carved from it (``val_per_class``;
   a robfair checkpoint's own recorded split is reused, so the run never validates on samples its model
   trained on; a file from elsewhere cannot say what it trained on, and the report says so), best.pt by
   the method's criterion -> ``RUN/train/`` (a run folder like any other: report, compare and resume
   work on it; the user's own formats beside best.pt: best.weights.pt, .safetensors, .ts).
3. **after**: the training run's final audit of the selected checkpoint, built by the same hook as step
   1 (:func:`robfair.training.runner.audit_hook`) from the same config, so the samples, attacks, eps,
   seed, batch size and probe are those of step 1 -> ``RUN/train/audit.json`` + outcomes.npz.

Then :func:`robfair.experiments.compare` of after vs before (paired: per class the exact McNemar test
on the samples that flipped, Holm's step-down over classes; averages McNemar; worst class and gap by
bootstrap) and the cost of the method (clean and average robust accuracy given up per point of
worst-class robust accuracy gained) -> ``RUN/fix.json`` + ``RUN/fix.md``, written together, last.

``resume=True`` continues a run cut short: a finished before-audit is read back (refused when its
settings or model file differ from this call's), the training resumes from its last checkpoint, a
finished training's audit is read back, and the report is written again.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from ..attacks import get_attack
from ..auditing.audit_report import AuditReport
from ..data import load_dataset
from ..data.npz import training_spec
from ..errors import ConfigError, ModelError, RobfairError
from ..models.checkpoint import read_checkpoint
from ..models.sources import detect_format
from ..report.tables import Table, pct, to_markdown
from ..runfolder import FIX_REPORT, RunFolder, read_jsonl
from ..safeio import ResultSet, check_output_dir, file_digest, read_json
from ..training.config import TrainConfig, load_config
from ..training.runner import audit_hook, build_model, train
from ..utils import to_jsonable, write_json
from .compare import Comparison, compare, p_text

log = logging.getLogger(__name__)

SCHEMA = "robfair.fix/1"
BEFORE_DIR, TRAIN_DIR, REPORT_JSON, REPORT_MD = "before", "train", FIX_REPORT, "fix.md"
#: the settings a finished before-audit must share with a resumed call (else it audited something else)
_BEFORE_KEYS = ("data", "model", "arch", "arch_kwargs", "mean", "std", "model_dir", "init", "eps", "seed",
                "precision", "channels_last", "probe", "probe_tolerance", "attacks", "audit_batch_size")


@dataclass
class FixResult:
    """What :func:`fix` returns: both audits, their comparison, the summary (``fix.json``'s
    ``summary``) and the run folder."""

    out: Path
    before: AuditReport
    after: AuditReport
    comparison: Comparison
    summary: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def train_dir(self) -> Path:
        return self.out / TRAIN_DIR

    def tables(self) -> list[Table]:
        """The report's tables: the headline (worst class, averages, cost), then compare's per-class
        and aggregate tables (after vs before)."""
        agg = [t for t in self.comparison.tables() if t.key == "compare-aggregates"]
        return [summary_table(self.summary), classes_table(self.comparison)] + agg

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "summary": self.summary, "settings": self.settings,
                "comparison": self.comparison.to_json()}

    def markdown(self) -> str:
        src = (self.settings.get("source") or {}).get("path") or self.settings.get("model")
        return to_markdown(self.tables(), title=f"robfair fix: {self.settings.get('method')} on {src}",
                           intro=intro_text(self.summary, self.settings))


# ================================================================================ the config
def fix_config(model: str, data: str, out: str | Path, *, method: str = "frl-rwrm", config: str | Path | None = None,
               **options: Any) -> TrainConfig:
    """The fine-tuning run's :class:`TrainConfig`: ``config`` (a YAML file, optional) with ``options``
    (any TrainConfig key) on top, ``out`` = ``RUN/train``. A robfair checkpoint of a registered
    architecture becomes that architecture with ``init`` = the checkpoint (its validation split is
    reused); any other file is the model file itself (``model`` with ``arch`` / ``mean`` / ...)."""
    given = {k: v for k, v in options.items() if v is not None}
    model = str(model)
    spec = _checkpoint_spec(model)
    if spec is not None:
        if spec.get("source"):  # trained from a file: its weights go back in as that file (the message says how)
            own = Path(model).with_name(Path(model).stem + ".weights.pt")
            raise ConfigError(f"{model} is a robfair checkpoint of a model trained from {spec['source'].get('model')}; "
                              f"fix its weights as a model file: --model {own}"
                              + (f" --arch {spec['source']['arch']}" if spec["source"].get("arch") else ""))
        given.update(model=spec["name"], init=model)
        if spec.get("kwargs"):
            given.setdefault("model_kwargs", dict(spec["kwargs"]))
    else:
        given["model"] = model
    given.update(data=data, method=method, out=str(Path(out) / TRAIN_DIR))
    return load_config(config, **given).check_selection()


def _checkpoint_spec(model: str) -> dict[str, Any] | None:
    """The architecture spec of a robfair checkpoint (``save_checkpoint``), or None for any other model."""
    p = Path(model).expanduser()
    if model.startswith("robustbench:") or not p.is_file() or detect_format(p) != "torch":
        return None
    try:
        _, meta = read_checkpoint(p)
    except ModelError:  # a state dict (or a file load_any will name the problem of)
        return None
    spec = meta.get("spec")
    return spec if isinstance(spec, dict) else None


def _settings(cfg: TrainConfig, attacks: Sequence[str], audit_batch_size: int, source: dict[str, Any] | None) -> dict[str, Any]:
    d = cfg.to_dict()
    out = {k: d.get(k) for k in _BEFORE_KEYS if k in d}
    out.update(attacks=list(attacks), audit_batch_size=int(audit_batch_size), method=cfg.method,
               method_options=dict(cfg.method_options), epochs=cfg.epochs, val_per_class=cfg.val_per_class,
               select=cfg.select, source=source)
    return out


def _source_record(cfg: TrainConfig) -> dict[str, Any]:
    """The model's file and digest: what the before-audit audited (a resume refuses another file)."""
    path = cfg.init if cfg.init else cfg.model
    p = Path(str(path)).expanduser()
    rec: dict[str, Any] = {"path": str(p.resolve()) if p.is_file() else str(path)}
    if p.is_file():
        rec["sha256"] = file_digest(p)
    if cfg.arch:
        arch_file = Path(str(cfg.arch).rsplit(":", 1)[0]).expanduser()
        rec["arch"] = str(cfg.arch)
        if arch_file.is_file():
            rec["arch_sha256"] = file_digest(arch_file)
    return rec


# ================================================================================ the loop
def fix(model: str | Path, data: str, out: str | Path, *, method: str = "frl-rwrm",
        attacks: Sequence[str] = ("pgd20",), config: str | Path | None = None, resume: bool = False,
        audit_batch_size: int = 256, bootstrap: int = 2000, alpha: float = 0.05,
        callbacks: Sequence[Any] = (), progress: Callable[[str, str, int, int], None] | None = None,
        **options: Any) -> FixResult:
    """Audit ``model``, fine-tune it with ``method`` on ``data``'s training split, audit the selected
    checkpoint on the same test samples, and compare (see the module docstring).

    ``options``: any :class:`~robfair.training.config.TrainConfig` key (``arch``, ``arch_kwargs``,
    ``mean``, ``std``, ``model_dir``, ``epochs``, ``lr``, ``optimizer``, ``batch_size``, ``eps``,
    ``method_options``, ``val_per_class``, ``probe``, ``seed``, ``device``, ``precision`` ...).
    ``attacks``: the audit's attacks, both times; ``bootstrap`` / ``alpha``: the comparison's.
    ``callbacks``: the trainer's; ``progress(step, stage, done, total)``: both audits' progress
    (step ``"before"`` / ``"after"``). Refuses, before any computation, a run folder that holds
    results unless ``resume``."""
    attacks = [str(a) for a in attacks if str(a).lower() != "none"]
    if not attacks:
        raise ConfigError("fix needs at least one audit attack; pass e.g. --attack pgd20")
    for a in attacks:  # a bad name now, not after the before-audit and the training
        get_attack(a)
    if isinstance(audit_batch_size, bool) or not isinstance(audit_batch_size, int) or audit_batch_size < 1:
        raise ConfigError(f"audit batch size must be an integer >= 1, got {audit_batch_size!r}")
    out = Path(out).expanduser()
    cfg = fix_config(str(model), data, out, method=method, config=config, resume=resume or None, **options)
    check_output_dir(out, "--out", allow="run" if resume else None, claim=True,
                     fix="pass --resume to continue the fix in it, or choose another --out")
    cfg.resolve_final_audit(_recorded(cfg) if resume else None)
    source = _source_record(cfg)
    settings = _settings(cfg, attacks, audit_batch_size, source)

    data_spec, notice = training_spec(cfg.data)
    if notice:
        log.warning(notice)
    full = load_dataset(data_spec, "train")
    full.validate()
    test = load_dataset(data_spec, "test")
    seconds: dict[str, float] = {}

    def stage_progress(step: str) -> Callable[[str, int, int], None] | None:
        return None if progress is None else (lambda stage, done, total: progress(step, stage, done, total))

    # 1. before
    before_path = out / BEFORE_DIR / "audit.json"
    t0 = time.perf_counter()
    if resume and before_path.is_file():
        before = AuditReport.load(before_path)
        _check_before(settings, before_path)
    else:
        net = build_model(cfg.model_copy(), full.num_classes, full.in_shape, full)
        hook = audit_hook(cfg, attacks, progress=stage_progress("before"), batch_size=audit_batch_size)
        before = hook(net.eval(), test)
        before.save(before_path, extras={"fix_settings": to_jsonable(settings, strict=False)})
    seconds["before"] = time.perf_counter() - t0

    # 2. fine-tune, 3. after (the run's final audit: the same hook, the same config)
    folder = RunFolder(cfg.out)
    t0 = time.perf_counter()
    if resume and folder.audit.is_file() and _finished(folder, cfg):
        after = AuditReport.load(folder.audit)
    else:
        cfg.resume = folder.last.is_file()
        hook = audit_hook(cfg, attacks, progress=stage_progress("after"), batch_size=audit_batch_size)
        result = train(cfg, callbacks=callbacks, final_audit=hook, train_data=full, test_data=test)
        after = result.audit
    seconds["train_and_after"] = time.perf_counter() - t0

    cmp = compare({"before": before, "after": after}, n_boot=bootstrap, seed=cfg.seed, alpha=alpha)
    summary = summarize(cmp, before, after, alpha=alpha)
    summary["seconds"] = {"before_audit": _meta_seconds(before), "after_audit": _meta_seconds(after),
                          "training": _training_seconds(folder), "this_call": {k: round(v, 3) for k, v in seconds.items()}}
    summary["split"] = _split_note(cfg)
    res = FixResult(out=out, before=before, after=after, comparison=cmp, summary=summary, settings=settings)
    with ResultSet() as rs:
        with rs.file(out / REPORT_MD) as tmp:
            tmp.write_text(res.markdown())
        with rs.file(out / REPORT_JSON, last=True) as tmp:
            write_json(tmp, to_jsonable(res.to_json(), strict=False))
    return res


def _recorded(cfg: TrainConfig) -> TrainConfig | None:
    folder = RunFolder(cfg.out)
    if not folder.config.is_file():
        return None
    try:
        return load_config(folder.config)
    except RobfairError:
        return None


def _finished(folder: RunFolder, cfg: TrainConfig) -> bool:
    """The training ran all its epochs (its audit.json is written only then; this checks the record)."""
    rows = read_jsonl(folder.metrics) if folder.metrics.is_file() else []
    return bool(rows) and int(rows[-1].get("epoch", 0)) >= cfg.epochs


def _check_before(settings: dict[str, Any], path: Path) -> None:
    """Refuse a finished before-audit made with other settings (AuditReport.load has read and checked the file)."""
    saved = read_json(path, "audit").get("fix_settings") or {}
    now = to_jsonable(settings, strict=False)
    diff = [k for k in (*_BEFORE_KEYS, "source") if saved.get(k) != now.get(k)]
    if diff:
        raise ConfigError(f"{path} audited the model with other settings ({', '.join(diff)} differ); pass the "
                          "options of the first call to resume it, or choose another --out")


def _meta_seconds(rep: AuditReport) -> float | None:
    v = (rep.meta or {}).get("seconds")
    return None if v is None else float(v)


def _training_seconds(folder: RunFolder) -> float | None:
    if not folder.metrics.is_file():
        return None
    total = 0.0
    for row in read_jsonl(folder.metrics):
        t = row.get("time") or {}
        total += float(t.get("train_s", 0.0)) + float(t.get("val_s", 0.0))
    return round(total, 3)


def _split_note(cfg: TrainConfig) -> str:
    if cfg.init:
        return (f"validation split: the one recorded in {cfg.init} (reused: the fine-tuning never validates on "
                "samples that model trained on)")
    return (f"validation split: val_per_class {cfg.val_per_class!r} carved from {cfg.data}'s training split with seed "
            f"{cfg.seed}; a model file does not record what it trained on, so if it saw these samples, best.pt's "
            "selection favours memorised ones (the test audit is unaffected)")


# ================================================================================ the summary
def _rows(cmp: Comparison, metric: str) -> Any:
    pc = cmp.per_class
    return pc[(pc["metric"] == metric) & (pc["run"] == cmp.labels[1])]


def _agg(cmp: Comparison, statistic: str) -> dict[str, Any] | None:
    ag = cmp.aggregates
    sub = ag[(ag["statistic"] == statistic) & (ag["run"] == cmp.labels[1])]
    return None if sub.empty else sub.iloc[0].to_dict()


def _weakest(values: dict[str, float]) -> list[str]:
    low = min(values.values())
    return [k for k, v in values.items() if v == low]


def summarize(cmp: Comparison, before: AuditReport, after: AuditReport, *, alpha: float = 0.05) -> dict[str, Any]:
    """The headline of a fix: the weakest class before (its robust accuracy before and after, with the
    paired per-class test, Holm-adjusted) and after, the worst-class and average differences with
    their tests, the cost (points of clean and of average robust accuracy given up per point of
    worst-class robust accuracy gained; None when the worst class did not gain), both probes' verdicts
    and a one-line verdict."""
    rob = _rows(cmp, "rob_acc")
    b_vals = dict(zip(rob["class"], rob["ref_value"]))
    a_vals = dict(zip(rob["class"], rob["value"]))
    weak_before, weak_after = _weakest(b_vals), _weakest(a_vals)
    focus = weak_before[0]
    r = rob[rob["class"] == focus].iloc[0]
    cls = {"class": focus, "tied": weak_before[1:], "before": float(r["ref_value"]), "after": float(r["value"]),
           "diff": float(r["diff"]), "lo": float(r["lo"]), "hi": float(r["hi"]), "p": float(r["p"]),
           "p_holm": float(r["p_holm"]), "flips": None if r["flips"] is None or (isinstance(r["flips"], float) and math.isnan(r["flips"])) else int(r["flips"]),
           "test": str(r["test"]), "beyond": bool(r["beyond"])}
    worst = _agg(cmp, "robust worst") or {}
    avg_rob, avg_clean = _agg(cmp, "robust avg") or {}, _agg(cmp, "clean avg") or {}
    gain = float(worst.get("diff", math.nan))
    clean_cost, rob_cost = -float(avg_clean.get("diff", math.nan)), -float(avg_rob.get("diff", math.nan))
    per_point = None
    if gain > 0:
        per_point = {"clean": clean_cost / gain, "robust_avg": rob_cost / gain}

    def stat(d: dict[str, Any]) -> dict[str, Any]:
        return {k: (None if isinstance(d.get(k), float) and math.isnan(d[k]) else d.get(k))
                for k in ("ref_value", "value", "diff", "lo", "hi", "p", "beyond", "test", "flips", "p_resolution")}

    summary = {
        "weakest_before": weak_before, "weakest_after": weak_after, "class": cls,
        "worst": stat(worst), "robust_avg": stat(avg_rob), "clean_avg": stat(avg_clean),
        "gap": stat(_agg(cmp, "robust gap") or {}),
        "cost": {"clean_points": 100 * clean_cost, "robust_avg_points": 100 * rob_cost, "worst_gain_points": 100 * gain,
                 "per_worst_point": per_point},
        "probe": {"before": (before.probe or {}).get("verdict"), "after": (after.probe or {}).get("verdict")},
        "probe_class": {"before": _probe_of(before, focus), "after": _probe_of(after, focus)},
        "alpha": alpha, "notes": list(cmp.notes),
    }
    summary["verdict"] = verdict_line(summary)
    return summary


def _probe_of(rep: AuditReport, group: str) -> dict[str, Any] | None:
    """The reliability probe's word on one class: flagged or not, and AutoAttack's corrected estimate of its
    robust accuracy with the upper bound (None without a probe record for it)."""
    g = ((rep.probe or {}).get("per_group") or {}).get(group)
    if not isinstance(g, dict):
        return None
    return {"flagged": bool(g.get("flagged")), "corrected": g.get("corrected_robust_acc"), "hi": g.get("corrected_hi")}


def _pts(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:+.1f}"


def verdict_line(s: dict[str, Any]) -> str:
    """One sentence: the weakest class's change with its paired p, the worst class's, the averages' cost."""
    c, w, ra, ca, cost = s["class"], s["worst"], s["robust_avg"], s["clean_avg"], s["cost"]
    tied = f" (tied with {', '.join(c['tied'])})" if c["tied"] else ""
    parts = [f"class {c['class']}{tied}, the weakest before: robust {pct(c['before'])}% → {pct(c['after'])}% "
             f"({_pts(c['diff'])} points, {c['test']} p {p_text(c['p'])}, Holm {p_text(c['p_holm'])}: "
             f"{'beyond the noise' if c['beyond'] else 'within the noise'})"]
    if w.get("value") is not None:
        parts.append(f"worst-class robust {pct(w['ref_value'])}% → {pct(w['value'])}% ({_pts(w['diff'])} points, "
                     f"bootstrap p {p_text(w['p'], w.get('p_resolution') or math.nan)})")
    parts.append(f"average robust {_pts(ra.get('diff'))} points (p {p_text(ra.get('p', math.nan))}), clean "
                 f"{_pts(ca.get('diff'))} points (p {p_text(ca.get('p', math.nan))})")
    for side in ("before", "after"):
        pr = (s.get("probe_class") or {}).get(side)
        if pr and pr["flagged"] and pr.get("corrected") is not None:
            parts.append(f"the reliability probe flags class {c['class']} {side}: AutoAttack puts its robust accuracy "
                         f"at {pct(pr['corrected'])}% (at most {pct(pr['hi'])}%), below the attacks' "
                         f"{pct(c[side])}%")
    pp = cost.get("per_worst_point")
    if pp is not None:
        parts.append(f"per worst-class point gained: {_given(pp['clean'])} clean and {_given(pp['robust_avg'])} average "
                     "robust")
    else:
        parts.append("the worst class did not gain, so the method bought nothing here")
    return "; ".join(parts)


def _given(cost: float, digits: int = 2) -> str:
    """``0.24 points given up`` / ``0.84 points gained`` for a cost in points (given up when positive)."""
    return f"{cost:.{digits}f} points given up" if cost >= 0 else f"{-cost:.{digits}f} points gained"


def classes_table(cmp: Comparison) -> Table:
    """Per class: clean and robust accuracy before and after, the robust difference with its interval, and
    the paired test (exact McNemar p, Holm-adjusted over the classes); red / green: robust accuracy worse /
    better beyond the noise. The numbers: compare's per-class rows of both metrics."""
    rob, clean = _rows(cmp, "rob_acc"), _rows(cmp, "clean_acc")
    cols = ["class", "clean before", "clean after", "Δ clean", "robust before", "robust after", "Δ robust [interval]",
            "p", "p (Holm)"]
    rows, emph, good = [], [], []
    for (_, r), (_, c) in zip(rob.iterrows(), clean.iterrows()):
        star = " *" if r["beyond"] else ""
        rows.append([str(r["class"]), pct(c["ref_value"]), pct(c["value"]), _pts(c["diff"]) + (" *" if c["beyond"] else ""),
                     pct(r["ref_value"]), pct(r["value"]), f"{_pts(r['diff'])} [{_pts(r['lo'])}, {_pts(r['hi'])}]{star}",
                     p_text(r["p"]), p_text(r["p_holm"])])
        worse_c, better_c = bool(c["beyond"]) and c["diff"] < 0, bool(c["beyond"]) and c["diff"] > 0
        worse, better = bool(r["beyond"]) and r["diff"] < 0, bool(r["beyond"]) and r["diff"] > 0
        emph.append([False, False, False, worse_c, False, False, worse, False, False])
        good.append([False, False, False, better_c, False, False, better, False, False])
    how = cmp._how()[0]
    frame = cmp.per_class[cmp.per_class["metric"].isin(["clean_acc", "rob_acc"])].reset_index(drop=True)
    return Table("fix-classes", "Per class, before and after", cols, rows, frame,
                 f"Percent; Δ = after - before in points; {how}.", emph, good)


def summary_table(s: dict[str, Any]) -> Table:
    """The headline as a table: statistic, before, after, difference [interval], p, test."""
    def row(name: str, d: dict[str, Any], p_holm: float | None = None) -> list[str]:
        lo, hi = d.get("lo"), d.get("hi")
        ci = "" if lo is None or hi is None else f" [{_pts(lo)}, {_pts(hi)}]"
        p = p_text(d.get("p", math.nan) if d.get("p") is not None else math.nan, d.get("p_resolution") or math.nan)
        if p_holm is not None:
            p += f" (Holm {p_text(p_holm)})"
        return [name, pct(d.get("ref_value", d.get("before"))), pct(d.get("value", d.get("after"))),
                _pts(d.get("diff")) + ci, p, str(d.get("test") or "-")]

    c = s["class"]
    rows = [row(f"robust, class {c['class']} (weakest before)", c, c["p_holm"]), row("robust, worst class", s["worst"]),
            row("robust, average", s["robust_avg"]), row("clean, average", s["clean_avg"]),
            row("robust, gap (best - worst)", s["gap"])]
    pb, pa = (s.get("probe_class") or {}).get("before"), (s.get("probe_class") or {}).get("after")
    if pb or pa:
        def est(pr: dict[str, Any] | None) -> str:
            if not pr or pr.get("corrected") is None:
                return "-"
            return f"{pct(pr['corrected'])} (≤ {pct(pr['hi'])}{', flagged' if pr['flagged'] else ''})"
        rows.append([f"robust, class {c['class']}, AutoAttack-corrected (probe)", est(pb), est(pa), "-", "-",
                     "reliability probe"])
    cost = s["cost"]
    pp = cost.get("per_worst_point")
    note = (f"Percent; difference = after - before in points [interval]. Weakest before: "
            f"{', '.join(s['weakest_before'])}; after: {', '.join(s['weakest_after'])}. Cost: "
            f"{_given(cost['clean_points'], 1)} of clean and {_given(cost['robust_avg_points'], 1)} of average robust "
            f"accuracy for {cost['worst_gain_points']:+.1f} points of worst-class robust accuracy"
            + (f" (per worst-class point: {_given(pp['clean'])} clean, {_given(pp['robust_avg'])} average robust)." if pp else
               " (the worst class did not gain)."))
    frame = pd.DataFrame(rows, columns=["statistic", "before", "after", "difference", "p", "test"])
    return Table("fix-summary", "What the fix changed", list(frame.columns), rows, frame, note)


def intro_text(s: dict[str, Any], settings: dict[str, Any]) -> str:
    src = settings.get("source") or {}
    lines = [f"- verdict: {s['verdict']}",
             f"- model: {src.get('path')} (sha256 {str(src.get('sha256', '-'))[:16]})"
             + (f", architecture {src.get('arch')}" if src.get("arch") else ""),
             f"- method: {settings.get('method')} {settings.get('method_options')}, {settings.get('epochs')} epochs, "
             f"best.pt by {settings.get('select')}; {s.get('split')}",
             f"- audit (before and after, the same test samples): {settings.get('data')} test split, attacks "
             f"{', '.join(settings.get('attacks') or [])}, eps {settings.get('eps'):.6g}, seed {settings.get('seed')}, "
             f"probe {settings.get('probe')}",
             f"- reliability probe before: {_probe_text(s['probe']['before'])}",
             f"- reliability probe after: {_probe_text(s['probe']['after'])}",
             "- seconds: " + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in (s.get("seconds") or {}).items()
                                       if isinstance(v, (int, float)))]
    lines += [f"- note: {n}" for n in s.get("notes", [])]
    return "\n".join(lines)


def _probe_text(verdict: str | None) -> str:
    return "-" if not verdict else verdict.removeprefix("reliability probe: ")
