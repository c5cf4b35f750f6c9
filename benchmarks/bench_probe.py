"""The reliability probe's power, false alarms and cost (issue 20 part 3).

    python benchmarks/bench_probe.py --cache ~/.cache/robfair-bench-probe   # simulation + three real models
    python benchmarks/bench_probe.py --quick                                  # CI smoke run: digits, tiny grid (< 60 s)
    python benchmarks/bench_probe.py --parts sim --reps 2000                  # the simulation alone, more replicates
    python benchmarks/bench_probe.py --parts which --cache DIR                # which of AutoAttack's attacks finds it

The probe's two stages are :func:`robfair.auditing.probe.probe_stages` (10 classes: the screen,
AutoAttack's APGD-DLR, on many samples; then AutoAttack's whole standard cascade, APGD-CE, APGD-T,
FAB-T and Square, on the screen's survivors); every table names them from there or from the
probe's record (``stages``).

**Simulation** (``--parts sim``). The probe's own design code (:mod:`robfair.auditing.probe_design`:
``random_orders``, ``Design``, ``run_design``, ``simulated_attack``), run against known outcomes
instead of a model. A scenario is K classes of ``n_c`` samples, ``R = round(r n_c)`` of each robust
under the audit; one class is overstated by ``delta`` (``D = round(delta n_c)`` of its robust
samples are fooled by AutoAttack), the others are faithful (D = 0). Each replicate draws the
probe's seeded random orders afresh (and seeds the design's draw of a round's remainder alike, as
the probe does), so every prefix the design looks at is an exact hypergeometric draw of the
class's robust samples. Where AutoAttack finds the overstatement:

- ``first``: the screen (APGD-DLR) fools those D samples (a cross-entropy PGD that stopped short,
  or missed what the DLR loss finds);
- ``later``: only AutoAttack's cascade on the screen's survivors does (gradient masking that the
  screen does not get past either), at budgets 1x, 10x, 100x and ``all``: where the default budget
  is weak.

The budget is a multiple of the audit's own cost: ``K (R u_robust + (n_c - R) u_fooled)`` units,
``u_*`` the units an FGSM + PGD-20 audit spends on a sample it leaves robust / fools, measured in
this run on the digits model (``evaluate(...).meta["attack_units"]`` over the robust and the fooled
samples); each simulated stage charges its units per attacked sample, also measured on that model
(the screen on its robust samples, the cascade on the screen's survivors: :func:`measure_costs`);
the design starts from ``PRIOR_COST`` as the probe does. ``--costs`` gives all four instead.

Per scenario, over ``--reps`` replicates (Wilson 95% intervals): **power** (the overstated class is
flagged), **false alarms** (any class whose overstatement is within the tolerance flagged:
familywise), **miscoverage** (any class's lower or upper bound on the wrong side of its true D: the
familywise error of every statement the probe makes), and the budget spent (probe units / audit
units). Two nulls: (a) a faithful attack (D = 0 everywhere), (b) every class overstated by the
largest D within the tolerance (``floor(0.01 n_c)``, any flag false). Targets at the default budget:
power >= 90% at 10 points for K = 10; familywise false alarms <= 5%. The design's bounds are
memoised here (``finite_population_bounds`` is a pure function; the cache returns what it would).

**Real models** (``--parts real``): a PGD-AT small CNN on digits (the demo's), a small CNN on
Fashion-MNIST (bench_audit's quick model) and cifar-cnn PGD-AT on a CIFAR-10 JPEG subset, trained
here (``--cache`` keeps them). Cost: ``audit(..., probe=0)`` and ``audit(..., probe=1)`` alternating
in one process, CPU time (``time.process_time``, one torch thread), median of ``--repeats``; the
units ratio is the probe record's ``cost.ratio``. Found: the probe at 1x (and 10x for a weak attack)
beside ``probe="all"`` on the same samples (every robust sample through both stages: the exact
overstatement per class): is each flagged class really overstated, is each bound on the right side
of the exact value.

**Which of AutoAttack's attacks finds the audit's overstatement** (``--parts which``; the evidence
for the screen): per model, on the samples FGSM + PGD-20 leave robust (digits: the test split;
Fashion-MNIST: ``--which-fashion`` test images; CIFAR-10 JPEG: ``--which-cifar`` test images, a
tenth per class), each of APGD-CE, APGD-DLR, APGD-T (1, 3 and 9 targets), FAB-T and Square alone,
as the official package's classes with the settings its standard version gives them (one official
``AutoAttack(version="standard")``, seed 0, each attack as its ``run_standard_evaluation`` calls
it), and the whole standard AutoAttack (robfair's wrapper of it, seed 0): how many each fools,
how many of those AutoAttack fools too, how many it fools that AutoAttack does not, and how many
of AutoAttack's it misses; CPU seconds (one thread) and passes through the model per sample.
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_audit import trained as quick_model  # noqa: E402  (the digits / Fashion-MNIST models of bench_audit)

from robfair import hardware  # noqa: E402
from robfair.attacks.autoattack import AutoAttack, _Adapter, load_backend  # noqa: E402
from robfair.attacks.attack import count_passes  # noqa: E402
from robfair.auditing import audit, evaluate  # noqa: E402
from robfair.auditing import probe_design  # noqa: E402
from robfair.auditing.probe import ALPHA, DEFAULT_BUDGET, DEFAULT_TOLERANCE, _attack_name, probe_stages  # noqa: E402
from robfair.auditing.probe_design import FIRST, REST, Design, random_orders, run_design, simulated_attack  # noqa: E402
from robfair.data import load_dataset, subsample  # noqa: E402
from robfair.errors import RobfairError  # noqa: E402
from robfair.metrics.stats import finite_population_bounds, wilson  # noqa: E402
from robfair.models import load_checkpoint, save_checkpoint  # noqa: E402
from robfair.training import TrainConfig, train  # noqa: E402
from robfair.utils import atomic_path, tune_allocator  # noqa: E402

LATER = "later"


def stage_names(stages: dict[str, list[str]]) -> dict[str, str]:
    """The probe's stages (``probe_stages`` or a record's ``stages``) as AutoAttack's paper names its
    attacks: ``{"first": "APGD-DLR", "rest": "APGD-CE + APGD-T + FAB-T + Square"}``."""
    return {k: " + ".join(map(_attack_name, v)) for k, v in stages.items()}


#: the simulation's classes are 10 or 100: the screen and the cascade of ``probe_stages(10)``
SIM_STAGES = stage_names(probe_stages(10))
WHERE = {FIRST: f"the screen ({SIM_STAGES[FIRST]}) finds it",
         LATER: f"only AutoAttack's cascade finds it ({SIM_STAGES[REST]}, on the screen's survivors)"}
CONFIGS = ((10, 1000), (10, 250), (100, 100))
RATES = (0.2, 0.5, 0.8)
DELTAS = (0.05, 0.10, 0.20, 0.40)
LATER_BUDGETS = (1.0, 10.0, 100.0, math.inf)
AUDIT_ATTACKS = ("fgsm", "pgd20")
POWER_TARGET, ALARM_TARGET = 0.90, 0.05


# ============================================================================ simulation
@dataclass(frozen=True)
class Scenario:
    """``kind``: ``power`` (class 0 overstated by ``delta``, the rest faithful), ``faithful`` (D = 0
    everywhere) or ``at-tolerance`` (every class at the largest D within the tolerance)."""

    kind: str
    K: int
    n_c: int
    r: float
    delta: float = 0.0
    where: str = FIRST
    budget: float = DEFAULT_BUDGET

    def robust(self) -> int:
        return int(round(self.r * self.n_c))

    def overstated(self, tolerance: float) -> list[int]:
        """D per class."""
        if self.kind == "power":
            return [int(round(self.delta * self.n_c))] + [0] * (self.K - 1)
        if self.kind == "faithful":
            return [0] * self.K
        return [int(math.floor(tolerance * self.n_c + 1e-9))] * self.K


@dataclass(frozen=True)
class Costs:
    """Units per sample: the audit's on a sample it leaves robust / fools, AutoAttack's per sample
    each stage attacks; ``source`` says where they come from."""

    audit_robust: float
    audit_fooled: float
    first: float
    rest: float
    source: str

    def audit_units(self, scn: Scenario) -> float:
        R = scn.robust()
        return scn.K * (R * self.audit_robust + (scn.n_c - R) * self.audit_fooled)


@contextmanager
def cached_bounds() -> Iterator[None]:
    """The design's bounds memoised (a pure function of its arguments: the same results, faster)."""
    original = probe_design.finite_population_bounds
    probe_design.finite_population_bounds = functools.lru_cache(maxsize=None)(finite_population_bounds)
    try:
        yield
    finally:
        probe_design.finite_population_bounds = original


def simulate(scn: Scenario, reps: int, costs: Costs, *, tolerance: float = DEFAULT_TOLERANCE,
             alpha: float = ALPHA, seed: int = 0) -> dict[str, Any]:
    """``reps`` runs of the probe's design on ``scn``'s outcomes (replicate i: orders seeded
    ``seed + i``, and so is the design's draw of a round's remainder, as the probe seeds both from
    its one seed). Counts of replicates: ``hits`` (class 0 flagged; power scenarios), ``alarms``
    (a class within the tolerance flagged), ``miscovered`` (some class's bounds exclude its D);
    ``spent``: probe units / audit units per replicate; ``attacked``: per stage, the samples it
    attacked per replicate (all classes)."""
    K, n_c, R = scn.K, scn.n_c, scn.robust()
    D = scn.overstated(tolerance)
    if max(D) > R:
        raise ValueError(f"{scn}: D {max(D)} exceeds the robust count {R}")
    groups = np.repeat(np.arange(K), n_c)
    robust = np.zeros(K * n_c, dtype=bool)
    fooled = np.zeros(K * n_c, dtype=bool)
    for c in range(K):
        robust[c * n_c:c * n_c + R] = True
        fooled[c * n_c:c * n_c + D[c]] = True
    none = np.zeros_like(fooled)
    first, rest = ((fooled, none) if scn.where == FIRST else (none, fooled))
    attack = simulated_attack([first] * K, [rest] * K, {FIRST: costs.first, REST: costs.rest})
    names = [f"c{c}" for c in range(K)]
    base = costs.audit_units(scn)
    within = [c for c in range(K) if D[c] <= tolerance * n_c]
    hits = alarms = miscovered = 0
    spent, attacked = [], {FIRST: [], REST: []}
    for i in range(reps):
        des = Design(random_orders(groups, robust, names, seed + i), budget=scn.budget * base, alpha=alpha,
                     tolerance=tolerance, seed=seed + i)
        run_design(des, attack)
        rows = des.per_group()
        flag = [rows[n]["flagged"] for n in names]
        hits += bool(scn.kind == "power" and flag[0])
        alarms += any(flag[c] for c in within)
        miscovered += any(not (rows[n]["lower"] * n_c - 1e-9 <= D[c] <= rows[n]["upper"] * n_c + 1e-9)
                          for c, n in enumerate(names))
        spent.append(des.spent / base)
        for stage in attacked:
            attacked[stage].append(des.attacked[stage])
    return {"reps": reps, "hits": hits, "alarms": alarms, "miscovered": miscovered, "spent": spent,
            "attacked": attacked}


def grid(quick: bool = False) -> list[Scenario]:
    """The scenarios: power where the screen finds it (1x), where only AutoAttack's cascade on the
    screen's survivors does (1x, 10x, 100x, all), and the two nulls (1x); ``delta > r`` is skipped."""
    configs, rates, deltas, later = ((((10, 250),), (0.5,), (0.10, 0.40), (1.0, math.inf)) if quick
                                     else (CONFIGS, RATES, DELTAS, LATER_BUDGETS))
    out = []
    for K, n_c in configs:
        for r in rates:
            for d in deltas:
                if d > r + 1e-9:
                    continue
                out.append(Scenario("power", K, n_c, r, d, FIRST))
                out.extend(Scenario("power", K, n_c, r, d, LATER, b) for b in later)
            out.append(Scenario("faithful", K, n_c, r))
            out.append(Scenario("at-tolerance", K, n_c, r))
    return out


def run_grid(scenarios: Sequence[Scenario], reps: int, costs: Costs, *, reps_k100: int | None = None, seed: int = 0,
             log: Any = None) -> list[dict[str, Any]]:
    """:func:`simulate` over ``scenarios`` (``reps_k100`` replicates where K >= 100), each result
    with its scenario and Wilson intervals."""
    rows = []
    t0 = time.process_time()
    with cached_bounds():
        for i, scn in enumerate(scenarios):
            n = reps_k100 if reps_k100 and scn.K >= 100 else reps
            res = simulate(scn, n, costs, seed=seed)
            for key in ("hits", "alarms", "miscovered"):
                res[f"{key}_ci"] = wilson(res[key], n)
            rows.append({"scenario": scn, **res})
            if log:
                log(f"[sim {i + 1}/{len(scenarios)}] {scn.kind} K={scn.K} n_c={scn.n_c} r={scn.r:g} "
                    f"delta={scn.delta:g} {scn.where} {budget_text(scn.budget)}: {n} reps, "
                    f"{time.process_time() - t0:.0f} s so far")
    return rows


def budget_text(b: float) -> str:
    return "all" if math.isinf(b) else f"{b:g}x"


def rate(k: int, n: int, ci: tuple[float, float]) -> str:
    return f"{k / n:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def sim_tables(rows: list[dict[str, Any]], costs: Costs) -> str:
    """The power and false-alarm tables (markdown) and the targets' check."""
    by = {r["scenario"]: r for r in rows}
    configs = sorted({(s.K, s.n_c) for s in by}, key=lambda c: (c[0], -c[1]))
    rates = sorted({s.r for s in by})
    deltas = sorted({s.delta for s in by if s.kind == "power"})
    later = sorted({s.budget for s in by if s.where == LATER})
    out = [f"Costs (units per sample; {costs.source}): audit FGSM + PGD-20 {costs.audit_robust:.1f} on a robust "
           f"sample, {costs.audit_fooled:.1f} on a fooled one; the screen ({SIM_STAGES[FIRST]}) {costs.first:.0f}, "
           f"AutoAttack's cascade ({SIM_STAGES[REST]}) {costs.rest:.0f} per attacked sample.", ""]

    def cell(scn: Scenario, key: str = "hits") -> str:
        r = by.get(scn)
        return "–" if r is None else rate(r[key], r["reps"], r[f"{key}_ci"])

    def spent(scns) -> str:
        got = [x for s in scns if s in by for x in by[s]["spent"]]
        return f"{statistics.mean(got):.2f} / {max(got):.2f}" if got else "–"

    def probed(scns) -> str:
        got = {st: [x for s in scns if s in by for x in by[s]["attacked"][st]] for st in (FIRST, REST)}
        if not got[FIRST]:
            return "–"
        return f"{statistics.mean(got[FIRST]):.0f} + {statistics.mean(got[REST]):.0f}"

    def others(scns) -> str:
        rs = [by[s] for s in scns if s in by]
        k, n = sum(r["alarms"] for r in rs), sum(r["reps"] for r in rs)
        return f"{k} / {n}"

    def miscov(scns) -> str:
        rs = [by[s] for s in scns if s in by]
        return f"{sum(r['miscovered'] for r in rs)} / {sum(r['reps'] for r in rs)}"

    head = " | ".join(f"δ = {100 * d:g} pts" for d in deltas)
    for where, budgets in ((FIRST, [DEFAULT_BUDGET]), (LATER, later)):
        out += [f"**Power: one class overstated; {WHERE[where]}** — share of replicates in "
                "which it is flagged [Wilson 95%]; others flagged = replicates with a faithful class flagged; "
                "miscovered = replicates with some bound on the wrong side; spent = probe units / audit units, "
                f"mean / max; probed = samples through the screen ({SIM_STAGES[FIRST]}) + through the cascade, all "
                "classes, mean per replicate.", "",
                f"| K | n_c | robust r | budget | {head} | others flagged | miscovered | spent | probed |",
                "|---|---|---|---|" + "---|" * len(deltas) + "---|---|---|---|"]
        for K, n_c in configs:
            for r in rates:
                for b in budgets:
                    scns = [Scenario("power", K, n_c, r, d, where, b) for d in deltas]
                    if not any(s in by for s in scns):
                        continue
                    out.append(f"| {K} | {n_c} | {100 * r:g}% | {budget_text(b)} | "
                               + " | ".join(cell(s) for s in scns)
                               + f" | {others(scns)} | {miscov(scns)} | {spent(scns)} | {probed(scns)} |")
        out.append("")
    out += ["**False alarms at the default budget (1x)** — share of replicates with any class flagged [Wilson 95%]: "
            "(a) a faithful attack, D = 0 in every class; (b) every class overstated by floor(0.01 n_c) samples, "
            "the largest overstatement within the 1-point tolerance.", "",
            "| K | n_c | robust r | (a) faithful | miscovered (a) | (b) at the tolerance | miscovered (b) | "
            "spent (b) | probed (b) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for K, n_c in configs:
        for r in rates:
            a, b = Scenario("faithful", K, n_c, r), Scenario("at-tolerance", K, n_c, r)
            if a not in by:
                continue
            out.append(f"| {K} | {n_c} | {100 * r:g}% | {cell(a, 'alarms')} | {miscov([a])} | {cell(b, 'alarms')} | "
                       f"{miscov([b])} | {spent([b])} | {probed([b])} |")
    out += ["", targets(rows)]
    return "\n".join(out)


def targets(rows: list[dict[str, Any]]) -> str:
    """The issue's targets at the default budget, as measured: power at 10 points for K = 10 (where
    the screen finds it) and the familywise false alarms of every null."""
    pw = [r for r in rows if r["scenario"].kind == "power" and r["scenario"].K == 10 and r["scenario"].where == FIRST
          and abs(r["scenario"].delta - 0.10) < 1e-9 and r["scenario"].budget == DEFAULT_BUDGET]
    fa = [r for r in rows if r["scenario"].kind != "power" and r["scenario"].budget == DEFAULT_BUDGET]
    lines = []
    if pw:
        low = min(pw, key=lambda r: r["hits"] / r["reps"])
        s = low["scenario"]
        lines.append(f"Target power >= {POWER_TARGET:.0%} at 10 points, K = 10: lowest "
                     f"{rate(low['hits'], low['reps'], low['hits_ci'])} "
                     f"(n_c {s.n_c}, r {s.r:g}) -> {'met' if low['hits'] / low['reps'] >= POWER_TARGET else 'MISSED'}.")
    if fa:
        top = max(fa, key=lambda r: r["alarms"] / r["reps"])
        s = top["scenario"]
        lines.append(f"Target familywise false alarms <= {ALARM_TARGET:.0%}: highest "
                     f"{rate(top['alarms'], top['reps'], top['alarms_ci'])} "
                     f"({s.kind}, K {s.K}, n_c {s.n_c}, r {s.r:g}) -> "
                     f"{'met' if top['alarms'] / top['reps'] <= ALARM_TARGET else 'MISSED'}.")
    finite = [(x, r["scenario"]) for r in rows if math.isfinite(r["scenario"].budget) for x in r["spent"]]
    if finite:
        most, s = max(finite, key=lambda t: t[0] / t[1].budget)
        lines.append(f"Budget: the largest spend of any replicate at a finite budget is {most / s.budget:.4f} of its "
                     f"budget ({s.kind}, K {s.K}, n_c {s.n_c}, r {s.r:g}, {budget_text(s.budget)}) -> "
                     f"{'within it' if most <= s.budget * (1 + 1e-9) else 'OVERSPENT'}.")
    mis = [r for r in rows if r["miscovered"]]
    total = sum(r["miscovered"] for r in rows), sum(r["reps"] for r in rows)
    lines.append(f"Miscovered (some bound on the wrong side of the true D): {total[0]} of {total[1]} replicates over "
                 f"all scenarios (worst: {max((r['miscovered'] / r['reps'] for r in mis), default=0):.3f}; "
                 f"the design promises <= {ALPHA:g} per scenario).")
    return "\n".join(lines)


# ============================================================================ real models
@dataclass
class Real:
    name: str
    model: Any
    test: Any  # the audited test samples
    eps: float
    what: str
    eps_label: str = ""

    def __post_init__(self) -> None:
        self.eps_label = self.eps_label or f"{self.eps:g}"


def _cached(path: Path | None, make, classes: list[str]):
    if path is not None and path.is_file():
        return load_checkpoint(path)[0].eval(), True
    model = make().eval()
    if path is not None:
        save_checkpoint(path, model, classes=classes)
    return model, False


def real_model(name: str, args, work: Path) -> Real:
    """The model ``name`` (trained here, or loaded from ``--cache``) and its audited test samples."""
    cache = Path(args.cache) if args.cache else None
    if name == "digits":
        epochs = 3 if args.quick else 30
        test = load_dataset("digits", split="test")
        model, hit = _cached(cache and cache / f"digits-pgd-at-e{epochs}.pt",
                             lambda: quick_model("pgd-at", epochs, work / "digits", 0.1, "digits"), list(test.classes))
        what = f"smallcnn (the demo's), PGD-AT eps 0.1, {epochs} epochs; digits test split"
        return Real(name, model, test, 0.1, what + (" [cached]" if hit else ""))
    if name == "fashion-mnist":
        test = load_dataset("fashion-mnist", split="test", limit=args.n_fashion)
        model, hit = _cached(cache and cache / "fashion-smallcnn-w4-pgd-at-e3.pt",
                             lambda: quick_model("pgd-at", 3, work / "fashion", 0.1, "fashion-mnist", 4, 10000),
                             list(test.classes))
        what = ("smallcnn width 4, PGD-AT eps 0.1, 3 epochs on 10,000 training images (bench_audit's); "
                "Fashion-MNIST test")
        return Real(name, model, test, 0.1, what + (" [cached]" if hit else ""))
    if name == "cifar10-jpeg":
        test = load_dataset("cifar10-jpeg", split="test", test_per_class=args.n_cifar // 10)
        per_class, epochs = 500, 5
        eps = 8 / 255

        def make():
            tr = load_dataset("cifar10-jpeg", split="train", per_class=per_class)
            cfg = TrainConfig(data="cifar10-jpeg", model="cifar-cnn", method="pgd-at", eps=eps, attack="pgd3",
                              epochs=epochs, batch_size=128, optimizer="adam", lr=2e-3, weight_decay=0.0,
                              schedule="cosine", val_per_class=0, val_attack="none", seed=0, device="cpu",
                              out=str(work / "cifar"))
            return train(cfg, train_data=tr).best_model

        model, hit = _cached(cache and cache / f"cifar-cnn-pgd-at-pc{per_class}-e{epochs}.pt", make, list(test.classes))
        what = (f"cifar-cnn, PGD-AT (PGD-3) eps 8/255, {epochs} epochs on {per_class} training images per class; "
                "CIFAR-10 JPEG test")
        return Real(name, model, test, eps, what + (" [cached]" if hit else ""), "8/255")
    raise RobfairError(f"unknown model {name!r}")


def which_models(get, models: Sequence[str], args: argparse.Namespace) -> list[Real]:
    """The models of the which-attack table with its test samples: digits' test split (quick: 40
    of it), ``--which-fashion`` Fashion-MNIST and ``--which-cifar`` CIFAR-10 JPEG test images."""
    out = []
    for name in models:
        m = get(name)
        if name == "digits":
            test = subsample(m.test, limit=40) if args.quick else m.test
        elif args.quick:
            continue
        elif name == "fashion-mnist" and args.which_fashion > 0:
            test = load_dataset("fashion-mnist", split="test", limit=args.which_fashion)
        elif name == "cifar10-jpeg" and args.which_cifar >= 10:
            test = load_dataset("cifar10-jpeg", split="test", test_per_class=args.which_cifar // 10)
        else:
            continue
        out.append(Real(m.name, m.model, test, m.eps, f"{m.what}, {len(test)} of them", m.eps_label))
    return out


def measure_costs(m: Real, first_n: int, rest_n: int) -> Costs:
    """The simulation's costs from a real FGSM + PGD-20 audit and the probe's two stages on ``m``
    (``probe_stages``: the screen on ``first_n`` robust samples, the cascade on up to ``rest_n`` of
    the screen's survivors)."""
    attacks = list(AUDIT_ATTACKS)
    out = evaluate(m.model, m.test, attacks, m.eps, device="cpu", seed=0)
    rob = out.robust(0, attacks)
    per = {}
    for key, sel in (("robust", rob), ("fooled", ~rob)):
        sub = evaluate(m.model, m.test, attacks, m.eps, device="cpu", seed=0, indices=out.index[sel])
        per[key] = sum(sub.meta["attack_units"].values()) / max(int(sel.sum()), 1)
    stages = probe_stages(len(m.test.classes))
    names = stage_names(stages)
    idx = out.index[rob][:first_n]
    aa1 = AutoAttack(stages=stages[FIRST])
    r1 = evaluate(m.model, m.test, [aa1], m.eps, device="cpu", seed=0, indices=idx)
    survivors = idx[r1.robust(0, [aa1.name])][:rest_n]
    aa2 = AutoAttack(stages=stages[REST])
    r2 = evaluate(m.model, m.test, [aa2], m.eps, device="cpu", seed=0, indices=survivors)
    return Costs(per["robust"], per["fooled"], sum(r1.meta["attack_units"].values()) / max(len(idx), 1),
                 sum(r2.meta["attack_units"].values()) / max(len(survivors), 1),
                 f"measured on the {m.name} model at eps {m.eps:g}: the audit on its {int(rob.sum())} robust and "
                 f"{int((~rob).sum())} fooled test samples, the screen ({names[FIRST]}) on {len(idx)} robust samples, "
                 f"the cascade ({names[REST]}) on {len(survivors)} of its survivors")


def probe_cost(m: Real, repeats: int, log: Any = None) -> dict[str, Any]:
    """CPU seconds of ``audit(probe=0)`` and ``audit(probe=1)``, alternating (the order swapping
    each repeat), median of ``repeats``; the probe record of the last probed run."""
    times: dict[float, list[float]] = {0.0: [], DEFAULT_BUDGET: []}
    rec = None
    for i in range(repeats):
        for b in ((0.0, DEFAULT_BUDGET) if i % 2 == 0 else (DEFAULT_BUDGET, 0.0)):
            t = time.process_time()
            rep = audit(m.model, m.test, list(AUDIT_ATTACKS), eps=m.eps, device="cpu", seed=0, probe=b)
            times[b].append(time.process_time() - t)
            if b:
                rec = rep.probe
                robust = rep.outcomes.robust(0, list(AUDIT_ATTACKS)).mean()
        if log:
            log(f"[cost {m.name} {i + 1}/{repeats}] probe 0: {times[0.0][-1]:.1f} s, probe 1: "
                f"{times[DEFAULT_BUDGET][-1]:.1f} s CPU")
    off, on = statistics.median(times[0.0]), statistics.median(times[DEFAULT_BUDGET])
    return {"model": m, "off": off, "on": on, "rec": rec, "robust": float(robust), "repeats": repeats}


def cost_table(rows: list[dict[str, Any]]) -> str:
    stages = "; ".join(dict.fromkeys(f"{n[FIRST]}, then {n[REST]} on its survivors"
                                     for n in (stage_names(r["rec"]["stages"]) for r in rows)))
    out = ["**The probe's cost at the default budget (1x), FGSM + PGD-20 audits** — units: the probe's passes "
           "through the model over the audit's attacks' (`probe.cost.ratio`); CPU: `audit(probe=1)` over "
           "`audit(probe=0)`, whole audits, median of alternating repeats, and the probe's share (its extra CPU over "
           f"the audit without it); screened: samples through the screen, cascade: its survivors through AutoAttack's "
           f"cascade (the records' stages: {stages}).",
           "", "| model | n | robust (audit) | units ratio | CPU probe 0 / 1 (s) | CPU ratio | probe extra / audit | "
           "screened | cascade | flagged | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rec, m = r["rec"], r["model"]
        o = rec["overall"]
        flagged = ", ".join(rec["flagged_groups"]) or "none"
        out.append(f"| {m.name} | {o['n']} | {100 * r['robust']:.1f}% | {rec['cost']['ratio']:.3f} | "
                   f"{r['off']:.2f} / {r['on']:.2f} | {r['on'] / r['off']:.2f} | "
                   f"{(r['on'] - r['off']) / r['off']:.2f} | "
                   f"{o['first_attacked']} of {o['robust']} | {o['rest_attacked']} | {flagged} | "
                   f"{'passed' if rec['passed'] else 'flagged'} |")
    out.append("")
    for r in rows:
        out.append(f"- {r['model'].name}: {r['model'].what}; {r['repeats']} repeats.")
    return "\n".join(out)


def check_against_exact(m: Real, attacks: list[str], budgets: Sequence[float], log: Any = None) -> dict[str, Any]:
    """The probe at ``budgets`` against ``probe="all"`` on the same samples (the exact per-class
    overstatement of ``attacks`` relative to AutoAttack)."""
    t = time.process_time()
    exact = audit(m.model, m.test, attacks, eps=m.eps, device="cpu", seed=0, probe="all").probe
    t_exact = time.process_time() - t
    runs = {}
    for b in budgets:
        runs[b] = audit(m.model, m.test, attacks, eps=m.eps, device="cpu", seed=0, probe=b).probe
    if log:
        log(f"[check {m.name} {'+'.join(attacks)} eps {m.eps_label}] exact in {t_exact:.0f} s CPU")
    return {"model": m, "attacks": attacks, "exact": exact, "runs": runs, "exact_seconds": t_exact}


def check_rows(c: dict[str, Any]) -> tuple[list[str], dict[float, dict[str, Any]]]:
    """Per class and budget: the probe's numbers beside the exact ones; per budget, the classes
    flagged, those really overstated (exact > tolerance; ``later`` those where the screen's part
    alone is within it: only AutoAttack's cascade finds them), flags on classes not really
    overstated, misses, and bounds on the wrong side (``screen bound violated``: ``upper_first``
    below the screen's exact part)."""
    ex = c["exact"]["per_group"]
    tol = c["exact"]["tolerance"]
    screen = stage_names(c["exact"]["stages"])[FIRST]
    lines, per = [], {}
    for b, rec in c["runs"].items():
        k = per[b] = {"flagged": [], "overstated": [], "later": [], "false flags": 0, "missed": 0,
                      "bounds violated": 0, "screen bound violated": 0, "statements": 0,
                      "ratio": rec["cost"]["ratio"]}
        for g, r in rec["per_group"].items():
            e = ex[g]
            d, d1 = e["lower"], e["first_fooled"] / max(e["n"], 1)
            k["statements"] += 1
            k["flagged"] += [g] if r["flagged"] else []
            k["overstated"] += [g] if d > tol else []
            k["later"] += [g] if d > tol and d1 <= tol else []
            k["false flags"] += r["flagged"] and d <= tol
            k["missed"] += (not r["flagged"]) and d > tol
            k["bounds violated"] += not (r["lower"] - 1e-9 <= d <= r["upper"] + 1e-9)
            k["screen bound violated"] += d1 > r["upper_first"] + 1e-9
            lines.append(f"| {budget_text(b)} | {g} | {r['n']} | {100 * r['robust_acc']:.1f} | "
                         f"{r['first_attacked']} + {r['rest_attacked']} | {r['first_fooled'] + r['rest_fooled']} | "
                         f"{100 * r['overstatement']:.1f} [{100 * r['lower']:.1f}, {100 * r['upper']:.1f}] | "
                         f"{100 * r['upper_first']:.1f} | {'**yes**' if r['flagged'] else 'no'} | "
                         f"{100 * d:.1f} ({screen} {100 * d1:.1f}) |")
    return lines, per


def check_table(checks: list[dict[str, Any]]) -> str:
    stages = "; ".join(dict.fromkeys(f"the screen {n[FIRST]}, the cascade {n[REST]}"
                                     for n in (stage_names(c["exact"]["stages"]) for c in checks)))
    out = ["**What it found, against the exact answer** — the probe at the budget shown beside `probe=\"all\"` on "
           "the same samples (every audit-robust sample through the screen and its survivors through AutoAttack's "
           f"cascade: the exact overstatement per class; {stages}). Overstated = classes whose exact overstatement "
           "exceeds the 1-point tolerance (of them, cascade only = those where the screen's part alone does not); "
           "bounds violated = a class's [lower, upper] or its upper bound against the screen on the wrong side of "
           "the exact value.", "",
           "| model | attacks | eps | n | exact overall (screen's part) | budget | units ratio | overstated (cascade "
           "only) | flagged | false flags | missed | bounds violated |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    for c in checks:
        m, ex = c["model"], c["exact"]
        o = ex["overall"]
        lines, per = check_rows(c)
        for b, k in per.items():
            out.append(f"| {m.name} | {' + '.join(c['attacks'])} | {m.eps_label} | {o['n']} | "
                       f"{100 * o['lower']:.1f} ({100 * o['first_fooled'] / max(o['n'], 1):.1f}) | {budget_text(b)} | "
                       f"{k['ratio']:.2f} | {len(k['overstated'])} ({len(k['later'])}) | "
                       f"{', '.join(k['flagged']) or 'none'} | {k['false flags']} | {k['missed']} | "
                       f"{k['bounds violated'] + k['screen bound violated']} of {2 * k['statements']} |")
        names = stage_names(ex["stages"])
        spent = {s: [sum(r[key] for r in ex["rounds"] if r["stage"] == s) for key in ("units", "samples")]
                 for s in dict.fromkeys(r["stage"] for r in ex["rounds"])}
        units = ", ".join(f"{names.get(s, s)} {u / max(n, 1):.0f}" for s, (u, n) in spent.items())
        details += [f"*{m.name}, {' + '.join(c['attacks'])}, eps {m.eps_label}* ({o['n']} samples; exact run "
                    f"{c['exact_seconds']:.0f} s CPU, {ex['cost']['ratio']:.0f}x the audit's units; units per sample: "
                    f"{units}; exact verdict: {ex['verdict']})", "",
                    "| budget | class | n | robust % | probed (screen + cascade) | fooled | "
                    "overstatement [lower, upper] | upper vs the screen | flagged | exact (of which the screen) |",
                    "|---|---|---|---|---|---|---|---|---|---|", *lines, ""]
    return "\n".join(out + ["", "Per class (points of robust accuracy):", ""] + details)


# ============================================================================ which attack finds it
#: the attacks run alone on the audit's robust samples: (label, the official attribute, its settings)
ALONE = (("APGD-CE", "apgd", {"loss": "ce"}), ("APGD-DLR", "apgd", {"loss": "dlr"}),
         ("APGD-T, 1 target", "apgd_targeted", {"n_target_classes": 1}),
         ("APGD-T, 3 targets", "apgd_targeted", {"n_target_classes": 3}),
         ("APGD-T, 9 targets", "apgd_targeted", {"n_target_classes": 9}),
         ("FAB-T", "fab", {"targeted": True, "n_restarts": 1}), ("Square", "square", {}))
WHOLE = "AutoAttack (standard)"


def which_attacks(m: Real, log: Any = None) -> dict[str, Any]:
    """On the samples FGSM + PGD-20 leave robust on ``m.test``: each attack of :data:`ALONE` alone,
    the official package's class with the settings its standard version gives it (one official
    ``AutoAttack(version="standard", seed=0)``; each attack set up as its ``run_standard_evaluation``
    sets it up, e.g. APGD-DLR is its APGD with the DLR loss), and the whole standard AutoAttack
    (robfair's wrapper, seed 0). Per attack: the samples it fools (a boolean per robust sample),
    its CPU seconds and its passes through the model (the audit's units)."""
    attacks = list(AUDIT_ATTACKS)
    out = evaluate(m.model, m.test, attacks, m.eps, device="cpu", seed=0)
    idx = out.index[out.robust(0, attacks)]
    x, y = m.test.images(idx), m.test.y[torch.as_tensor(idx, dtype=torch.long)]
    whole = AutoAttack(seed=0)
    net = _Adapter(m.model, whole, x.dtype)  # the official attacks' model: each pass counted as robfair's attacks count it
    official = load_backend()(net, norm="Linf", eps=m.eps, version="standard", seed=0, device="cpu")
    rows: dict[str, dict[str, Any]] = {}

    def timed(label: str, run) -> None:
        t = time.process_time()
        with count_passes() as passes:
            fooled = run()
        rows[label] = {"fooled": fooled.cpu().numpy(), "seconds": time.process_time() - t, "units": passes.units}
        if log:
            log(f"[which {m.name}] {label}: fooled {int(fooled.sum())} of {len(idx)} in {rows[label]['seconds']:.1f} s CPU")

    def alone(attr: str, settings: dict[str, Any]):
        def run():
            atk = getattr(official, attr)
            for key, value in settings.items():
                setattr(atk, key, value)
            atk.seed = 0
            with torch.random.fork_rng():  # the official code reseeds the global generator
                adv = atk.perturb(x.clone(), y.clone())
            with torch.no_grad():
                return net(adv).argmax(1) != y
        return run

    for label, attr, settings in ALONE:
        timed(label, alone(attr, settings))
    timed(WHOLE, lambda: whole.run(m.model, x, y, m.eps).fooled)
    return {"model": m, "n": out.n, "robust": len(idx), "rows": rows}


def which_table(results: list[dict[str, Any]]) -> str:
    """Per model and attack: fooled alone, of them fooled by the whole AutoAttack too, fooled that
    AutoAttack does not fool, AutoAttack's it misses; CPU seconds and units per sample."""
    out = ["**Which of AutoAttack's attacks finds the audit's overstatement** — on the samples FGSM + PGD-20 "
           "left robust, each attack alone (the official package's classes, the standard version's settings: "
           "100 steps, 1 restart; FAB-T 9 targets; Square 5,000 queries; seed 0) beside the whole standard "
           "AutoAttack (its cascade: APGD-CE, APGD-T, FAB-T, Square). Of AutoAttack's = fooled by this attack "
           "and by AutoAttack; beyond = fooled by this attack, not by AutoAttack; misses = fooled by AutoAttack, "
           "not by this attack; CPU: seconds, one thread; units: passes through the model per sample (a forward "
           "1, with the input gradient 2).", "",
           "| model | audit-robust | attack | fooled | of AutoAttack's | beyond | misses | CPU (s) | units / sample |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        m, rows = r["model"], r["rows"]
        aa = rows[WHOLE]["fooled"]
        for label, row in rows.items():
            f = row["fooled"]
            out.append(f"| {m.name} | {r['robust']} of {r['n']} | {label} | {int(f.sum())} | {int((f & aa).sum())} | "
                       f"{int((f & ~aa).sum())} | {int((aa & ~f).sum())} | {row['seconds']:.1f} | "
                       f"{row['units'] / max(r['robust'], 1):,.0f} |")
        dlr = rows["APGD-DLR"]["fooled"]
        out.append(f"| {m.name} | {r['robust']} of {r['n']} | APGD-DLR or AutoAttack | {int((dlr | aa).sum())} | "
                   f"{int(aa.sum())} | {int((dlr & ~aa).sum())} | 0 | – | – |")
    out.append("")
    for r in results:
        out.append(f"- {r['model'].name}: {r['model'].what}, eps {r['model'].eps_label}.")
    return "\n".join(out)


# ============================================================================ main
def machine_line() -> str:
    load = os.getloadavg()
    return (f"{hardware.describe('cpu')}; "
            f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min)")


def parse_costs(text: str | None) -> Costs | None:
    if text is None:
        return None
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        vals = []
    if len(vals) != 4 or min(vals) <= 0:
        raise RobfairError(f"--costs must be four positive numbers AUDIT_ROBUST,AUDIT_FOOLED,FIRST,REST "
                           f"(e.g. 43.9,13,213,9500), got {text!r}")
    return Costs(*vals, source="given with --costs")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="CI smoke run: digits only (3 epochs), a tiny grid, few replicates, one repeat (< 60 s)")
    p.add_argument("--parts", nargs="+", choices=["sim", "real", "which"], default=["sim", "real", "which"],
                   help="sim: the simulation; real: cost and the comparison with probe='all'; which: which of "
                        "AutoAttack's attacks finds the audit's overstatement (default: all three)")
    p.add_argument("--reps", type=int, default=None, help="replicates per scenario, K = 10 (default 1000; quick 20)")
    p.add_argument("--reps-k100", type=int, default=None, help="replicates per scenario, K = 100 (default 500)")
    p.add_argument("--seed", type=int, default=0, help="the simulation's first replicate seed")
    p.add_argument("--costs", default=None,
                   help="AUDIT_ROBUST,AUDIT_FOOLED,FIRST,REST units per sample for the simulation "
                        "(default: measured on the digits model in this run)")
    p.add_argument("--models", nargs="+", choices=["digits", "fashion-mnist", "cifar10-jpeg"], default=None,
                   help="real models (default all three; quick: digits)")
    p.add_argument("--cache", default=None, help="keep the trained models in this folder (reruns skip training)")
    p.add_argument("--repeats", type=int, default=None, help="cost: alternating repeats (default 3; quick 1)")
    p.add_argument("--n-fashion", type=int, default=10000, help="Fashion-MNIST test images audited (cost)")
    p.add_argument("--n-cifar", type=int, default=2500, help="CIFAR-10 JPEG test images audited (cost; per class: /10)")
    p.add_argument("--exact-fashion", type=int, default=300,
                   help="Fashion-MNIST test images of the comparison with probe='all' (0: none)")
    p.add_argument("--exact-cifar", type=int, default=200,
                   help="CIFAR-10 JPEG test images of the comparison with probe='all' (0: none)")
    p.add_argument("--which-fashion", type=int, default=1500,
                   help="Fashion-MNIST test images of the which-attack table (0: none)")
    p.add_argument("--which-cifar", type=int, default=600,
                   help="CIFAR-10 JPEG test images of the which-attack table, a tenth per class (0: none)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="also write the markdown to this file")
    args = p.parse_args(argv)
    for key in ("reps", "reps_k100", "repeats", "n_fashion", "n_cifar"):
        if getattr(args, key) is not None and getattr(args, key) < 1:
            print(f"error: --{key.replace('_', '-')} must be >= 1, got {getattr(args, key)}", file=sys.stderr)
            return 2
    try:
        costs = parse_costs(args.costs)
    except RobfairError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # --threads torch threads and the library's warnings quiet (the probe's verdicts are in the
    # tables), for this run only: a caller (a test) gets its settings back
    threads, logger = torch.get_num_threads(), logging.getLogger("robfair")
    level = logger.level
    torch.set_num_threads(args.threads)
    logger.setLevel(logging.ERROR)
    try:
        return run(args, costs)
    finally:
        torch.set_num_threads(threads)
        logger.setLevel(level)


def run(args: argparse.Namespace, costs: Costs | None) -> int:
    """The benchmark as :func:`main` set it up; the markdown on stdout (and ``--out``), exit code."""
    reps = args.reps or (20 if args.quick else 1000)
    reps_k100 = args.reps_k100 or (reps if args.quick else 500)
    repeats = args.repeats or (1 if args.quick else 3)
    models = args.models or (["digits"] if args.quick else ["digits", "fashion-mnist", "cifar10-jpeg"])
    tuned = tune_allocator()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t_start = time.perf_counter()
    doc = ["# bench_probe: the reliability probe's power, false alarms and cost" + (" [quick]" if args.quick else ""),
           "", f"Machine: {machine_line()}; glibc allocator tuned: {tuned}.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        try:
            loaded: dict[str, Real] = {}

            def get(name: str) -> Real:
                if name not in loaded:
                    t = time.perf_counter()
                    loaded[name] = real_model(name, args, work)
                    log(f"[model {name}] ready in {time.perf_counter() - t:.0f} s: {loaded[name].what}")
                return loaded[name]

            if "sim" in args.parts:
                if costs is None:
                    costs = measure_costs(get("digits"), 8 if args.quick else 64, 4 if args.quick else 16)
                scenarios = grid(args.quick)
                t = time.process_time()
                rows = run_grid(scenarios, reps, costs, reps_k100=reps_k100, seed=args.seed, log=log)
                doc += ["## Simulation (the probe's design on exact draws)", "",
                        f"{len(scenarios)} scenarios, {reps} replicates each (K = 100: {reps_k100}), seeds "
                        f"{args.seed}..; {time.process_time() - t:.0f} s CPU.", "", sim_tables(rows, costs), ""]
            if "real" in args.parts:
                cost_rows = [probe_cost(get(name), repeats, log) for name in models]
                doc += ["## Real models", "", cost_table(cost_rows), ""]
                checks = []
                if "digits" in models:
                    d = get("digits")
                    if args.quick:  # a few samples: the smoke run checks the comparison runs, not the numbers
                        small = Real(d.name, d.model, subsample(d.test, limit=40), 0.2, d.what + ", 40 of them")
                        checks.append(check_against_exact(small, list(AUDIT_ATTACKS), [DEFAULT_BUDGET], log))
                    else:
                        checks.append(check_against_exact(d, list(AUDIT_ATTACKS), [DEFAULT_BUDGET], log))
                        at2 = Real(d.name, d.model, d.test, 0.2, d.what)
                        checks.append(check_against_exact(at2, list(AUDIT_ATTACKS), [DEFAULT_BUDGET], log))
                        checks.append(check_against_exact(d, ["pgd2"], [DEFAULT_BUDGET, 10.0], log))
                for name, n in (("fashion-mnist", args.exact_fashion), ("cifar10-jpeg", args.exact_cifar)):
                    if name in models and n > 0 and not args.quick:
                        m = get(name)
                        sub = Real(m.name, m.model, subsample(m.test, limit=n), m.eps,
                                   f"{m.what}, {n} of them (stratified)", m.eps_label)
                        checks.append(check_against_exact(sub, list(AUDIT_ATTACKS), [DEFAULT_BUDGET], log))
                if checks:
                    doc += [check_table(checks), ""]
            if "which" in args.parts:
                found = [which_attacks(m, log) for m in which_models(get, models, args)]
                if found:
                    doc += ["## Which of AutoAttack's attacks finds it", "", which_table(found), ""]
        except RobfairError as e:  # a dataset that is not there, a bad option: one line, exit 2
            print(f"error: {e}", file=sys.stderr)
            return 2
    doc.append(f"Total {time.perf_counter() - t_start:.0f} s wall; machine at the end: {machine_line()}.")
    text = "\n".join(doc) + "\n"
    print(text)
    if args.out:
        with atomic_path(args.out) as tmp_path:
            tmp_path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
