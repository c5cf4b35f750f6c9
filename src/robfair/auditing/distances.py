"""Distance from each sample to the decision boundary, summarized per group (Tran et al.'s
explanatory variable: the group whose samples sit closer to the boundary loses more accuracy under
attack).

    rep = boundary_distances(model, dataset, method="auto")      # exact if the model is affine
    rep.summary()               # per group: n, mean, sd, median, quantiles, min, max, censored
    rep.histogram(bins=20)      # shared bin edges, counts per group
    rep.frame()                 # one row per sample

The distance of a sample is the smallest perturbation (in the attack's norm: L-inf or L2) that
changes the model's *prediction* ``yhat`` — for a correctly classified sample, the smallest
perturbation that makes it an error. Summaries use correctly classified samples by default
(``which="correct"``). Three ways to get it:

``exact``
    For an affine model ``z = W x + b`` (e.g. ``mlp`` with ``hidden=[]``), the prediction's cell is
    the polytope ``{z_yhat >= z_k for all k}``, and the distance from a point inside it to its
    boundary is the smallest distance to one of its facets::

        d(x) = min_{k != yhat} (z_yhat - z_k) / ||w_yhat - w_k||_q      (q: dual norm; L-inf -> L1)

    (binary: ``|w.x + b| / ||w||_q``). ``W`` and ``b`` are read off the model (one forward pass of
    the basis vectors) and affinity is checked at random points. This is the distance in R^D: the
    [0, 1] pixel box is ignored, so it is a lower bound where the box binds.
``bisection``
    The smallest radius at which ``attack`` flips the prediction, by bisection on a per-sample
    radius tensor: every round attacks all unfinished samples of a batch at once, each at the
    midpoint of its own bracket. Returns the bracket: ``upper`` (the attack flipped the prediction
    there: an upper bound on the true distance, up to attack failure) and ``lower`` (the attack did
    not flip it there: *not* a certificate). Samples not flipped at ``eps_max`` are censored
    (distance ``inf``). Respects the [0, 1] box.
``linearized``
    The first-order estimate ``min_{k != yhat} (z_yhat - z_k) / ||grad_x (z_yhat - z_k)||_q``
    (exact for affine models, cheap: one backward pass per candidate class).
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..attacks import get_attack
from ..errors import ConfigError, DataError, ModelError, RobfairError
from ..seeding import batch_generator
from ..utils import resolve_device
from .distributed import gather_parts, shard_batches
from .engine import evaluation_model, run_attack, sample_order

log = logging.getLogger(__name__)

SCHEMA = "robfair.distances/1"
METHODS = ("exact", "bisection", "linearized")
NORMS = ("linf", "l2")
_DUAL = {"linf": 1.0, "l2": 2.0}
Progress = Callable[[str, int, int], None]


def _acc(device: torch.device) -> torch.dtype:
    """float64 for accumulating distances, except on MPS (no float64 there)."""
    return torch.float32 if torch.device(device).type == "mps" else torch.float64


def _check_norm(norm: str) -> str:
    if norm not in NORMS:
        raise ConfigError(f"unknown norm {norm!r}; choose one of: {', '.join(NORMS)}")
    return norm


def dual_norm(v: torch.Tensor, norm: str) -> torch.Tensor:
    """||v||_q over all but the first axis, q the dual of ``norm`` (L-inf -> L1, L2 -> L2)."""
    return torch.linalg.vector_norm(v.flatten(1), ord=_DUAL[_check_norm(norm)], dim=1)


# ============================================================================ exact (affine models)
@torch.no_grad()
def affine_params(model: nn.Module, in_shape: Sequence[int], *, device: Any = None, check: bool = True,
                  rtol: float = 1e-4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W, b)`` with ``model(x) = x.flatten() @ W.T + b`` for an affine model (float64, W: (K, D)).

    With ``check``, affinity is tested first at random points of [0, 1]^D (``f(a x1 + (1-a) x2) =
    a f(x1) + (1-a) f(x2)``, relative tolerance ``rtol``) and a ``ModelError`` is raised when it
    fails (use ``method="bisection"`` or ``"linearized"``). Then a float64 copy of the model gives
    ``b = model(0)`` and ``W[:, i] = model(e_i) - b`` (batched forwards of the basis vectors): exact
    up to float64 rounding for float32 weights."""
    params = list(model.parameters())
    dev = device if device is not None else (params[0].device if params else torch.device("cpu"))
    dtype = params[0].dtype if params else torch.float32
    D = int(np.prod(in_shape))
    was_training = model.training
    model.eval()
    try:
        if check:
            gen = torch.Generator(device="cpu").manual_seed(seed)
            x1, x2 = (torch.rand((8, *in_shape), generator=gen).to(dev, dtype) for _ in range(2))
            a = torch.rand((8,) + (1,) * len(in_shape), generator=gen).to(dev, dtype)
            acc = _acc(x1.device)
            mix = model(a * x1 + (1 - a) * x2).to(acc)
            af = a.flatten(1).to(acc)
            lin = af * model(x1).to(acc) + (1 - af) * model(x2).to(acc)
            scale = float(lin.abs().max().clamp_min(1.0))
            if not torch.allclose(mix, lin, rtol=rtol, atol=rtol * scale):
                raise ModelError("the model is not affine in its input, so the exact linear distance does not apply; "
                                 "use method 'bisection' or 'linearized'")
        dev64 = torch.device("cpu") if torch.device(dev).type == "mps" else dev  # MPS has no float64
        m64 = copy.deepcopy(model).to(device=dev64, dtype=torch.float64).eval()
        b = m64(torch.zeros((1, *in_shape), device=dev64, dtype=torch.float64))[0]
        cols = []
        for start in range(0, D, 1024):
            k = min(1024, D - start)
            basis = torch.zeros((k, D), device=dev64, dtype=torch.float64)
            basis[torch.arange(k, device=dev64), torch.arange(start, start + k, device=dev64)] = 1
            cols.append(m64(basis.view(-1, *in_shape)) - b)
        W = torch.cat(cols).T.contiguous()  # (K, D)
    finally:
        model.train(was_training)
    return W, b


def exact_linear_distance(W: torch.Tensor, b: torch.Tensor, x: torch.Tensor,
                          norm: str = "linf") -> tuple[torch.Tensor, torch.Tensor]:
    """``(distance, prediction)`` of the affine classifier ``argmax(W x + b)`` for samples ``x``
    ((N, ...) flattened to (N, D)): ``min_{k != yhat} (z_yhat - z_k) / ||w_yhat - w_k||_q``.
    A class with ``w_k = w_yhat`` never wins by perturbation (its term is inf)."""
    W, b = W.double(), b.double()
    xf = x.flatten(1).to(W.device).double()
    z = xf @ W.T + b
    pred = z.argmax(1)
    K = W.shape[0]
    pair = torch.linalg.vector_norm(W[:, None, :] - W[None, :, :], ord=_DUAL[_check_norm(norm)], dim=2)  # (K, K)
    den = pair[pred]  # (N, K)
    num = z.gather(1, pred[:, None]) - z  # (N, K), >= 0
    d = torch.where(den > 0, num / den.clamp_min(1e-300), torch.full_like(num, math.inf))
    d[torch.arange(len(pred)), pred] = math.inf
    return (d.min(1).values if K > 1 else torch.full((len(pred),), math.inf, dtype=torch.float64)), pred.to(x.device)


# ============================================================================ linearized margin
def linearized_margin(model: nn.Module, x: torch.Tensor, *, norm: str = "linf",
                      candidates: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(distance, prediction)``: ``min_{k != yhat} (z_yhat - z_k) / ||grad_x (z_yhat - z_k)||_q``.

    ``candidates``: only the that many runner-up classes (largest other logits) are considered (None:
    all K - 1; use e.g. 9 for 100-class models). One backward pass per candidate; the model is in
    eval mode while the gradients are taken."""
    _check_norm(norm)
    was = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.enable_grad():
            xg = x.detach().clone().requires_grad_(True)
            z = model(xg)
            if z.dtype != torch.float32 and z.dtype != torch.float64:
                z = z.float()
            K = z.shape[1]
            pred = z.argmax(1)
            ar = torch.arange(len(pred), device=z.device)
            if candidates is None or candidates >= K - 1:
                others = [torch.full_like(pred, k) for k in range(K)]
            else:
                if candidates < 1:
                    raise ConfigError(f"candidates must be >= 1, got {candidates}; or None for every class")
                top = z.detach().topk(candidates + 1, dim=1).indices[:, 1:]
                others = [top[:, j] for j in range(candidates)]
            acc = _acc(z.device)
            best = torch.full((len(pred),), math.inf, dtype=acc, device=z.device)
            for j, k in enumerate(others):
                margin = z[ar, pred] - z[ar, k]
                (grad,) = torch.autograd.grad(margin.sum(), xg, retain_graph=j < len(others) - 1)
                gn = dual_norm(grad, norm).to(acc)
                d = torch.where(gn > 0, margin.detach().to(acc) / gn.clamp_min(torch.finfo(acc).tiny),
                                torch.full_like(gn, math.inf))
                d = torch.where(k == pred, torch.full_like(d, math.inf), d)
                best = torch.minimum(best, d)
    finally:
        for m, flag in was:
            m.training = flag
    return best, pred.detach()


# ============================================================================ bisection
def minimal_eps(model: nn.Module, x: torch.Tensor, attack: str | Any = "pgd20", *, eps_max: float,
                tol: float | None = None, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(lower, upper, prediction)``: per sample, ``attack`` flips the prediction at radius
    ``upper`` and did not at ``lower``; ``upper - lower <= tol`` (default ``eps_max / 64``).

    Batched: each round attacks every sample whose bracket is still wider than ``tol``, each at the
    midpoint of its own bracket (one per-sample radius tensor). Samples the attack cannot flip at
    ``eps_max`` get ``lower = eps_max``, ``upper = inf``."""
    atk = get_attack(attack) if isinstance(attack, str) else attack
    if not eps_max > 0 or not math.isfinite(eps_max):
        raise ConfigError(f"eps_max must be a positive finite radius, got {eps_max}; pass e.g. 16/255")
    tol = eps_max / 64 if tol is None else float(tol)
    if not tol > 0:
        raise ConfigError(f"tol must be > 0, got {tol}; pass e.g. eps_max / 64")
    with torch.no_grad():
        pred = model(x).argmax(1)
    n = x.shape[0]
    lo = torch.zeros(n, dtype=_acc(x.device), device=x.device)
    hi = torch.full((n,), float(eps_max), dtype=_acc(x.device), device=x.device)

    def flips(idx: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        p, _ = run_attack(atk, model, x[idx], pred[idx], eps.to(x.dtype), generator=generator, early_exit=True)
        return p != pred[idx]

    all_idx = torch.arange(n, device=x.device)
    ok = flips(all_idx, hi)
    lo[~ok] = float(eps_max)
    hi[~ok] = math.inf
    while True:
        todo = (ok & (hi - lo > tol * (1 + 1e-9))).nonzero().squeeze(1)
        if todo.numel() == 0:
            break
        mid = (lo[todo] + hi[todo]) / 2
        f = flips(todo, mid)
        hi[todo[f]] = mid[f]
        lo[todo[~f]] = mid[~f]
    return lo, hi, pred


# ============================================================================ the report
@dataclass
class DistanceReport:
    """Per-sample distances to the decision boundary and their per-group summaries.

    ``distance`` is the method's value (``bisection``: the upper end of the bracket, ``inf`` when
    censored at ``eps_max``); ``lower`` is the bracket's lower end (bisection only)."""

    method: str
    norm: str
    distance: np.ndarray
    y: np.ndarray
    pred: np.ndarray
    groups: np.ndarray
    class_names: list[str]
    group_names: list[str]
    lower: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def correct(self) -> np.ndarray:
        return self.pred == self.y

    def frame(self) -> pd.DataFrame:
        """One row per sample: group, class, prediction, correct, distance (and lower)."""
        f = pd.DataFrame({
            "group": np.asarray(self.group_names, dtype=object)[self.groups],
            "class": np.asarray(self.class_names, dtype=object)[self.y],
            "pred": np.asarray(self.class_names, dtype=object)[self.pred],
            "correct": self.correct,
            "distance": self.distance,
        })
        if self.lower is not None:
            f["lower"] = self.lower
        return f

    def _select(self, which: str) -> np.ndarray:
        if which == "correct":
            return self.correct
        if which == "all":
            return np.ones_like(self.correct)
        raise ConfigError(f"which={which!r} is not valid; use 'correct' or 'all'")

    def _keys(self, by: str) -> tuple[np.ndarray, list[str]]:
        if by == "group":
            return self.groups, list(self.group_names)
        if by == "class":
            return self.y, list(self.class_names)
        raise ConfigError(f"by={by!r} is not valid; use 'group' or 'class'")

    def summary(self, by: str = "group", which: str = "correct",
                quantiles: Sequence[float] = (0.1, 0.25, 0.75, 0.9)) -> pd.DataFrame:
        """Per group (or class): n, censored (distance beyond ``eps_max``), mean and sd of the finite
        distances, median, ``quantiles``, min, max. Quantiles and the median count censored samples
        as +inf (correct order statistics); ``which``: ``correct`` samples only, or ``all``."""
        keys, names = self._keys(by)
        sel = self._select(which)
        rows = []
        for i, name in enumerate(names):
            d = self.distance[sel & (keys == i)]
            fin = d[np.isfinite(d)]
            row: dict[str, Any] = {by: name, "n": int(d.size), "censored": int(d.size - fin.size)}
            row["mean"] = float(fin.mean()) if fin.size else math.nan
            row["sd"] = float(fin.std(ddof=0)) if fin.size else math.nan
            row["median"] = float(np.quantile(d, 0.5, method="lower")) if d.size else math.nan
            for q in quantiles:
                row[f"q{int(round(100 * q)):02d}"] = float(np.quantile(d, q, method="lower")) if d.size else math.nan
            row["min"] = float(d.min()) if d.size else math.nan
            row["max"] = float(d.max()) if d.size else math.nan
            rows.append(row)
        return pd.DataFrame(rows).set_index(by)

    def histogram(self, bins: int = 20, by: str = "group", which: str = "correct",
                  range: tuple[float, float] | None = None) -> dict[str, Any]:
        """Histogram data with shared bin edges: ``{"edges": [...], "counts": {group: [...]},
        "censored": {group: n}}`` (censored samples are counted apart)."""
        keys, names = self._keys(by)
        sel = self._select(which)
        fin_all = self.distance[sel & np.isfinite(self.distance)]
        if range is None:
            hi = float(fin_all.max()) if fin_all.size else 1.0
            range = (0.0, hi if hi > 0 else 1.0)
        edges = np.histogram_bin_edges(fin_all, bins=bins, range=range)
        counts, censored = {}, {}
        for i, name in enumerate(names):
            d = self.distance[sel & (keys == i)]
            counts[name] = np.histogram(d[np.isfinite(d)], bins=edges)[0].tolist()
            censored[name] = int((~np.isfinite(d)).sum())
        return {"edges": edges.tolist(), "counts": counts, "censored": censored, "by": by, "which": which}

    def to_json(self, bins: int = 20) -> dict[str, Any]:
        """Summaries, histogram data and the per-sample distances (inf as null)."""
        def clean(v: Any) -> Any:
            return None if isinstance(v, float) and not math.isfinite(v) else v

        summ = self.summary()
        return {
            "schema": SCHEMA,
            "method": self.method,
            "norm": self.norm,
            "meta": self.meta,
            "class_names": list(self.class_names),
            "group_names": list(self.group_names),
            "summary": {str(g): {k: clean(v) for k, v in row.items()} for g, row in summ.to_dict(orient="index").items()},
            "histogram": self.histogram(bins=bins),
            "y": self.y.tolist(),
            "pred": self.pred.tolist(),
            "groups": self.groups.tolist(),
            "distance": [clean(float(v)) for v in self.distance],
            "lower": None if self.lower is None else [clean(float(v)) for v in self.lower],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "DistanceReport":
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise DataError(f"not a distance report (schema {SCHEMA} expected); pass DistanceReport.to_json() output")
        arr = lambda v: np.array([math.inf if a is None else a for a in v], dtype=np.float64)  # noqa: E731
        return cls(method=d["method"], norm=d["norm"], distance=arr(d["distance"]), y=np.asarray(d["y"], np.int64),
                   pred=np.asarray(d["pred"], np.int64), groups=np.asarray(d["groups"], np.int64),
                   class_names=list(d["class_names"]), group_names=list(d["group_names"]),
                   lower=None if d.get("lower") is None else arr(d["lower"]), meta=dict(d.get("meta", {})))


def boundary_distances(
    model: nn.Module,
    dataset: Any,
    method: str = "auto",
    *,
    norm: str | None = None,
    attack: str | Any = "pgd20",
    eps_max: float | None = None,
    tol: float | None = None,
    candidates: int | None = None,
    batch_size: int = 256,
    device: str | torch.device | None = "auto",
    seed: int = 0,
    indices: Any = None,
    progress: Progress | None = None,
    dist: Any = None,
) -> DistanceReport:
    """Distance of every sample of ``dataset`` (or of its items ``indices``, in that order) to
    ``model``'s decision boundary, per group.

    ``method``: ``exact`` (affine models), ``bisection`` (``attack``, up to ``eps_max``, bracket
    width ``tol``), ``linearized`` or ``auto`` (exact when the model is affine, else bisection).
    ``norm`` defaults to the attack's norm (L-inf for ``pgd20``). ``eps_max`` is required for
    bisection (e.g. twice the audit radius).

    Bisection seeds each batch's attack generator like the audit's engine
    (:func:`robfair.seeding.batch_generator` from ``seed``, the attack's name and the dataset
    index of the batch's first sample, in a ``"bisection"`` stream of its own), so a batch's
    distances do not depend on the batches before it. ``dist``: a joined process group's
    :class:`~robfair.distributed.DistInfo` (torchrun): the rank runs whole batches
    ``rank, rank + world_size, ...`` (:func:`robfair.auditing.distributed.shard_batches`), the parts
    are gathered, and every rank returns the report one process would."""
    if method not in (*METHODS, "auto"):
        raise ConfigError(f"unknown distance method {method!r}; choose one of: auto, {', '.join(METHODS)}")
    if len(dataset) == 0:
        raise DataError("the dataset is empty; check the path and the split")
    if isinstance(batch_size, bool) or int(batch_size) < 1:
        raise ConfigError(f"batch size must be >= 1, got {batch_size}")
    dataset.validate()
    atk = get_attack(attack) if isinstance(attack, str) else attack
    name = getattr(atk, "name", str(attack))
    norm = _check_norm(norm or getattr(atk, "norm", "linf"))
    if method in ("bisection", "auto") and getattr(atk, "norm", norm) != norm:
        raise ConfigError(f"the attack works in {atk.norm} but norm={norm}; pick an attack of the same norm")
    if method == "bisection" and eps_max is None:
        raise ConfigError("bisection needs eps_max, the largest radius tried (e.g. 2 x the audit radius); pass eps_max")
    dev = resolve_device(device)
    bs = int(batch_size)
    n_all = len(dataset)
    order = sample_order(indices, n_all)
    info = dist
    mine = order if info is None else shard_batches(order, bs, info)
    main_rank = info is None or info.is_main

    def part() -> dict[str, Any]:
        how = method
        W = b = None
        m_all = mine.size
        dist_v = np.empty(m_all)
        lower = np.empty(m_all)
        pred = np.empty(m_all, dtype=np.int64)
        with evaluation_model(model, dev) as net:
            if how in ("exact", "auto"):
                try:
                    W, b = affine_params(net, dataset.in_shape, device=dev, seed=seed)
                    how = "exact"
                except ModelError:
                    if how == "exact":
                        raise
                    how = "bisection"
            if how == "bisection" and eps_max is None:
                raise ConfigError("bisection needs eps_max, the largest radius tried (e.g. 2 x the audit radius); "
                                  "pass eps_max")
            if m_all:
                ds = dataset if indices is None and info is None else dataset.subset(torch.from_numpy(mine))
                pos = 0
                total = math.ceil(m_all / bs)
                for i, (x, _y, _g) in enumerate(ds.batches(bs, device=dev)):
                    m = x.shape[0]
                    if how == "exact":
                        d, p = exact_linear_distance(W, b, x, norm)
                    elif how == "linearized":
                        d, p = linearized_margin(net, x, norm=norm, candidates=candidates)
                    else:
                        gen = batch_generator(dev, seed, name, int(mine[pos]), stage="bisection")
                        lo, d, p = minimal_eps(net, x, atk, eps_max=float(eps_max), tol=tol, generator=gen)
                        lower[pos:pos + m] = lo.cpu().double().numpy()
                    dist_v[pos:pos + m] = d.detach().cpu().double().numpy()  # (CPU float64)
                    pred[pos:pos + m] = p.cpu().numpy()
                    pos += m
                    if progress is not None and main_rank:
                        progress(f"distances ({how})", i + 1, total)
        return {"method": how, "index": mine, "distance": dist_v, "lower": lower, "pred": pred}

    parts = gather_parts(part, info) if info is not None else [part()]
    methods = sorted({p["method"] for p in parts})
    if len(methods) > 1:  # every rank decides affinity on the same model and points; never seen
        raise ModelError(f"the ranks disagree on the distance method ({', '.join(methods)}); pass method explicitly")
    method = methods[0]
    index = np.concatenate([p["index"] for p in parts])
    pos_of = np.full(n_all, -1, dtype=np.int64)
    pos_of[order] = np.arange(order.size)
    where = pos_of[index]
    if (where < 0).any() or np.unique(where).size != order.size or where.size != order.size:
        raise RobfairError("the gathered distance shards do not cover the samples exactly once")
    dist_all = np.empty(order.size)
    lower_all = np.empty(order.size)
    pred_all = np.empty(order.size, dtype=np.int64)
    for key, arr in (("distance", dist_all), ("lower", lower_all), ("pred", pred_all)):
        arr[where] = np.concatenate([p[key] for p in parts])
    meta = {"dataset": getattr(dataset, "name", ""), "n": int(order.size), "seed": seed}
    if method == "bisection":
        meta.update(attack=name, eps_max=float(eps_max),  # type: ignore[arg-type]
                    tol=float(tol if tol is not None else float(eps_max) / 64),  # type: ignore[arg-type]
                    seeding="per batch", batch_size=bs)
    sel = torch.from_numpy(order)
    y = dataset.y.cpu()[sel].numpy().astype(np.int64)
    groups = dataset.group_ids.cpu()[sel].numpy().astype(np.int64)
    return DistanceReport(method=method, norm=norm, distance=dist_all, y=y, pred=pred_all, groups=groups,
                          class_names=list(dataset.classes), group_names=list(dataset.group_names),
                          lower=lower_all if method == "bisection" else None, meta=meta)
