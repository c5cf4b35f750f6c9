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

Adding an attack is one file in this package: its module registers the factory with
``@ATTACKS.register("name", help=..., forms=(...))`` (or ``ATTACKS.add``) and the package imports
every module on import (:func:`robfair.registry.import_submodules`). What a registration may state
(``Entry.meta``), all optional:

``forms``     example names, shown by ``robfair attacks`` and run by the contract tests
              (``tests/attacks/test_attack_contract.py``); default: the bare name
``label``     how ``robfair attacks`` names the base (``"pgd<k>"``); default: the name
``counted``   the constructor argument a number glued to the name sets (``pgd20``: ``steps``)
``suffixes``  suffix tokens of this attack only: ``{"plus": ("version", "plus")}``
``requires``  module names of an optional package (any one): the contract tests skip without it
``contract_overrides``  constructor arguments the contract tests add (a cheaper budget)
``contract_forms``  the names the contract tests run (default: ``forms``); ``contract_slow``: mark them slow

The suffixes of the table above are common to every attack; ``get_attack`` refuses a suffix whose
argument the factory does not take.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable

from ..errors import AttackError
from ..registry import Registry
from .attack import Attack
from .radius import Radius

ATTACKS: Registry[Callable[..., Attack]] = Registry("attack", AttackError)

#: suffixes every attack's name may carry (an attack that lacks the argument refuses it in get_attack)
_COMMON = {"l2": ("norm", "l2"), "linf": ("norm", "linf"), "cw": ("loss", "cw"), "ce": ("loss", "ce"),
           "t": ("targeted", True)}
_SUFFIX_HELP = "-l2, -cw, -r<R> (restarts), -t / -t<k> / -trand (targeted)"


def _label(entry) -> str:
    return entry.meta.get("label", entry.name)


def _help_forms() -> str:
    """The one-line grammar reminder of every error, from the registry (no list to keep in sync)."""
    extra = sorted({f"-{tok}" for e in ATTACKS for tok in e.meta.get("suffixes", {})})
    examples = next((e.meta["forms"][-1] for e in ATTACKS if e.meta.get("counted") and e.meta.get("forms")), None)
    tail = f", e.g. {examples}" if examples else ""
    return (f"{', '.join(_label(e) for e in ATTACKS)}; suffixes {_SUFFIX_HELP}"
            f"{', ' + ', '.join(extra) if extra else ''}{tail}")


def _suffix(token: str, entry) -> tuple[str, Any]:
    if token in _COMMON:
        return _COMMON[token]
    # the attack's own tokens first, then the other attacks' (so ``fgsm-plus`` is refused by
    # get_attack as an argument FGSM does not take, not as an unknown word)
    for e in (entry, *ATTACKS):
        own = e.meta.get("suffixes", {})
        if token in own:
            return tuple(own[token])
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
    raise AttackError(f"unknown attack suffix '-{token}'; use {_help_forms()}")


def _split_base(key: str) -> tuple[str, dict[str, Any], str | None] | None:
    """(canonical base, kwargs set by the base itself, the rest of the name) or None. The longest
    matching name wins (``rs-fgsm`` before ``fgsm``); a ``counted`` base takes a number (``pgd20``)."""
    names = sorted(((n, e) for e in ATTACKS for n in (e.name, *e.aliases)), key=lambda t: len(t[0]), reverse=True)
    for n, e in names:
        counted = e.meta.get("counted")
        pattern = rf"{re.escape(n)}(\d*)" if counted else re.escape(n)
        m = re.fullmatch(rf"{pattern}(?:-(.*))?", key)
        if m:
            kwargs = {counted: int(m.group(1))} if counted and m.group(1) else {}
            return e.name, kwargs, m.groups()[-1] or None
    return None


def parse_attack_name(name: str) -> tuple[str, dict[str, Any]]:
    """``"pgd50-cw-r5"`` -> ``("pgd", {"steps": 50, "loss": "cw", "restarts": 5})``."""
    key = str(name).strip().lower()
    split = _split_base(key)
    if split is None:
        raise AttackError(f"unknown attack '{name}'; use {_help_forms()}")
    base, kwargs, rest = split
    entry = ATTACKS.entry(base)
    for token in rest.split("-") if rest else []:
        k, v = _suffix(token, entry)
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


def check_image_eps(eps: float | Radius, attacks: Any = ("pgd",), *, allow_large: bool = False,
                    what: str = "--eps") -> float | Radius:
    """Refuse an L-inf radius above 1 for [0, 1] images (every image is then reachable from every
    other: a typo such as ``--eps 8`` for 8/255) unless ``allow_large`` (``--allow-large-eps``).
    L2 attacks (``-l2``) are not capped: their radius scales with the input dimension. ``eps``: a
    checked float or :class:`~robfair.attacks.radius.Radius` (its largest value); returned as given."""
    largest = eps.max() if isinstance(eps, Radius) else float(eps)
    if allow_large or largest <= 1:
        return eps
    names = [attacks] if isinstance(attacks, str) else list(attacks or ["pgd"])
    linf = [a for a in names if parse_attack_name(a)[1].get("norm", "linf") == "linf"]
    if linf:
        raise AttackError(f"{what} {largest:g} is above 1, larger than the whole [0, 1] pixel range of an L-inf ball "
                          f"({', '.join(linf[:3])}); write e.g. 8/255, or pass --allow-large-eps if you mean it")
    return eps


def describe_attacks() -> list[dict[str, str]]:
    """Rows (name, forms, help) for ``robfair attacks``."""
    rows = []
    for entry in ATTACKS:
        label = _label(entry)
        if entry.aliases:
            label += f" ({', '.join(entry.aliases)})"
        forms = entry.meta.get("forms") or (entry.name,)
        forms_text = ", ".join(forms)
        if entry.meta.get("counted"):
            forms_text = f"{_label(entry)}: {forms_text}"
        rows.append({"name": label, "forms": forms_text, "help": entry.help})
    extra = sorted({f"-{tok}" for e in ATTACKS for tok in e.meta.get("suffixes", {})})
    rows.append({"name": "suffixes", "forms": ", ".join(["-l2", "-cw", "-r<R>", "-t", "-t<k>", "-trand", *extra]),
                 "help": "L2 ball, CW margin loss, R restarts, targeted (worst case over the top 9 / k other "
                         "classes, or a seeded random one; never the true label), and each attack's own "
                         "(AutoAttack version)"})
    return rows
