"""Adversarial attacks with per-sample epsilon: ``attack(model, x, y, eps) -> x_adv``.

    from robfair.attacks import get_attack
    attack = get_attack("pgd20")                       # or "pgd20-l2", "pgd50-cw-r5", "autoattack"
    x_adv = attack(model, x, y, eps=8/255, generator=torch.Generator().manual_seed(0), early_exit=True)

Inputs are in [0, 1] (normalization inside the model); ``eps`` is a float or an (N,) tensor. Attacks
take input gradients only (no parameter ``.grad``), run the model in eval mode and restore its modes.

Every module of this package is imported here, so a new attack is one new file that registers its
factory in :data:`ATTACKS` (see ``registry.py`` for what a registration states).
"""

from ..registry import import_submodules
from .names import ATTACKS, check_image_eps, describe_attacks, get_attack, parse_attack_name, require_target_rule, target_rule

import_submodules(__name__, __path__)

from .autoattack import AutoAttack  # noqa: E402
from .attack import NEVER, STEP_UNKNOWN, Attack, AttackResult, as_eps, eval_mode, per_sample_loss, project, random_start
from .pgd import FGSM, PGD, Chunk
from .radius import Radius, Sweep
from .trades import TradesKL

__all__ = [
    "ATTACKS",
    "Attack",
    "AttackResult",
    "NEVER",
    "STEP_UNKNOWN",
    "AutoAttack",
    "Chunk",
    "FGSM",
    "PGD",
    "Radius",
    "Sweep",
    "TradesKL",
    "as_eps",
    "check_image_eps",
    "describe_attacks",
    "eval_mode",
    "get_attack",
    "parse_attack_name",
    "per_sample_loss",
    "project",
    "random_start",
    "require_target_rule",
    "target_rule",
]
