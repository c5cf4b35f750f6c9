"""Attack names -> configured attacks.

Grammar: ``BASE[-SUFFIX]...`` with suffixes in any order.

=============  ====================================================================
BASE           ``fgsm``, ``rs-fgsm``, ``pgd<k>`` (k steps: pgd10, pgd20, pgd50; plain
               ``pgd`` is pgd10), ``trades-kl``, ``autoattack`` (alias ``aa``)
``-l2``        L2 ball instead of L-inf (``-linf`` is the default)
``-cw``        Carlini-Wagner margin loss instead of cross-entropy (``-ce``)
``-r<R>``      R random restarts (PGD)
``-t``         targeted, worst case over the min(9, K-1) most likely other classes (APGD-T's rule)
``-t<k>``      targeted, worst case over the k most likely other classes (``-t1``: the runner-up)
``-trand``     targeted at one seeded random other class per sample
``-plus``      AutoAttack version (``-standard``, ``-plus``, ``-rand``)
=============  ====================================================================

Examples: ``pgd20``, ``pgd20-l2``, ``pgd50-cw-r5``, ``pgd20-t``, ``pgd20-cw-t3``, ``pgd10-trand``,
``rs-fgsm``, ``autoattack-l2``. A targeted attack never aims at the true label: the labels an attack
receives are always the true ones and the suffix states where the targets come from.
Keyword overrides go to the attack's constructor: ``get_attack("pgd10", keep="last")``.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any, Callable

from ..errors import AttackError
from ..registry import Registry
from .autoattack import VERSIONS, AutoAttack
from .base import Attack
from .pgd import FGSM, PGD
from .trades import TradesKL

ATTACKS: Registry[Callable[..., Attack]] = Registry("attack", AttackError)

ATTACKS.add("fgsm", functools.partial(FGSM, random_start=False),
            help="FGSM: one step of size eps along the gradient sign (L2: normalized gradient)")
ATTACKS.add("rs-fgsm", functools.partial(FGSM, random_start=True),
            help="RS-FGSM (Wong et al. 2020): random start, one step of 1.25 eps, projected")
ATTACKS.add("pgd", PGD, help="PGD-k (Madry): k steps of eps/4 from a random start in each sample's ball")
ATTACKS.add("trades-kl", TradesKL, help="TRADES inner maximization of KL(f(x) || f(x')), 10 steps of eps/4")
ATTACKS.add("autoattack", AutoAttack, aliases=("aa",),
            help="AutoAttack (APGD-CE, APGD-T, FAB-T, Square), official pyautoattack, optional")

_FORMS = {
    "fgsm": "fgsm, fgsm-l2, fgsm-cw, fgsm-t",
    "rs-fgsm": "rs-fgsm, rs-fgsm-l2",
    "pgd": "pgd<k>: pgd10, pgd20, pgd20-l2, pgd50-cw-r5, pgd20-t, pgd20-t3, pgd10-trand",
    "trades-kl": "trades-kl, trades-kl-l2",
    "autoattack": "autoattack, autoattack-l2, autoattack-plus, autoattack-rand",
}
_HELP_FORMS = ("fgsm, rs-fgsm, pgd<k> (e.g. pgd20), trades-kl, autoattack; "
               "suffixes -l2, -cw, -r<R> (restarts), -t / -t<k> / -trand (targeted), e.g. pgd50-cw-r5")
_PGD = re.compile(r"^pgd(\d*)(?:-(.*))?$")


def _suffix(token: str) -> tuple[str, Any]:
    fixed = {"l2": ("norm", "l2"), "linf": ("norm", "linf"), "cw": ("loss", "cw"), "ce": ("loss", "ce"),
             "t": ("targeted", True)}
    if token in fixed:
        return fixed[token]
    if token in VERSIONS:
        return "version", token
    m = re.fullmatch(r"r(\d+)", token)
    if m:
        return "restarts", int(m.group(1))
    m = re.fullmatch(r"t(\d+)", token)
    if m:
        if int(m.group(1)) < 1:
            raise AttackError(f"'-{token}' asks for no target; use -t1 or more, -t (up to 9) or -trand")
        return "n_targets", int(m.group(1))
    if token == "trand":
        return "targets", "random"
    raise AttackError(f"unknown attack suffix '-{token}'; use {_HELP_FORMS}")


def parse_attack_name(name: str) -> tuple[str, dict[str, Any]]:
    """``"pgd50-cw-r5"`` -> ``("pgd", {"steps": 50, "loss": "cw", "restarts": 5})``."""
    key = str(name).strip().lower()
    kwargs: dict[str, Any] = {}
    m = _PGD.match(key)
    if m:
        base, rest = "pgd", m.group(2)
        if m.group(1):
            kwargs["steps"] = int(m.group(1))
    else:
        bases = sorted({n for e in ATTACKS for n in (e.name, *e.aliases)}, key=len, reverse=True)
        base = next((b for b in bases if key == b or key.startswith(b + "-")), None)
        if base is None:
            raise AttackError(f"unknown attack '{name}'; use {_HELP_FORMS}")
        base, rest = ATTACKS.canonical(base), key[len(base) + 1:] or None
    for token in rest.split("-") if rest else []:
        k, v = _suffix(token)
        if k in kwargs and kwargs[k] != v:
            raise AttackError(f"attack '{name}' sets {k} twice; keep one of the conflicting suffixes")
        kwargs[k] = v
    if ("n_targets" in kwargs or "targets" in kwargs):
        if "n_targets" in kwargs and "targets" in kwargs:
            raise AttackError(f"attack '{name}' names two target rules; keep one of -t<k> and -trand")
        kwargs["targeted"] = True
    return base, kwargs


def target_rule(name: str) -> str | None:
    """The stated target rule of an attack name: ``None`` (untargeted), ``"default"`` (bare
    ``-t``: the top ``min(9, K - 1)`` classes), ``"top<k>"`` or ``"random"``."""
    _, kw = parse_attack_name(name)
    if not kw.get("targeted"):
        return None
    if kw.get("targets") == "random":
        return "random"
    return f"top{kw['n_targets']}" if "n_targets" in kw else "default"


def require_target_rule(name: str, where: str = "training attack") -> None:
    """Refuse a bare ``-t`` where an attack *trains* a model: the default worst case over the top
    9 classes is an evaluation rule; training must name one (``-t<k>`` or ``-trand``)."""
    if target_rule(name) == "default":
        stem = str(name).strip().lower()
        stem = "-".join(p for p in stem.split("-") if p != "t")
        raise AttackError(f"{where} '{name}' is targeted without a target rule; name one: {stem}-trand "
                          f"(a seeded random other class) or {stem}-t1 (the most likely other class)")


def get_attack(name: str, **overrides: Any) -> Attack:
    """A configured attack from its name (see the module doc); ``overrides`` are constructor
    arguments (``steps``, ``step``, ``rel_step``, ``restarts``, ``keep``, ``precision`` ...)."""
    base, kwargs = parse_attack_name(name)
    factory = ATTACKS.get(base)
    accepted = set(inspect.signature(factory).parameters)
    for k in list(kwargs) + list(overrides):
        if k not in accepted:
            what = f"option '{k}'" if k in overrides else f"the suffix for '{k}'"
            raise AttackError(f"attack '{base}' does not take {what}; it accepts: {', '.join(sorted(accepted))}")
    kwargs.update(overrides)
    kwargs.setdefault("name", str(name).strip().lower())
    return factory(**kwargs)


def describe_attacks() -> list[dict[str, str]]:
    """Rows (name, forms, help) for ``robfair attacks``."""
    rows = []
    for entry in ATTACKS:
        label = "pgd<k>" if entry.name == "pgd" else entry.name
        if entry.aliases:
            label += f" ({', '.join(entry.aliases)})"
        rows.append({"name": label, "forms": _FORMS.get(entry.name, entry.name), "help": entry.help})
    rows.append({"name": "suffixes", "forms": "-l2, -cw, -r<R>, -t, -t<k>, -trand, -plus/-rand",
                 "help": "L2 ball, CW margin loss, R restarts, targeted (worst case over the top 9 / k other "
                         "classes, or a seeded random one; never the true label), AutoAttack version"})
    return rows
