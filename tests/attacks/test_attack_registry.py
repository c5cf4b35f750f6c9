"""Attack names -> configured attacks."""

from __future__ import annotations

import pytest

from robfair.attacks import ATTACKS, FGSM, PGD, AutoAttack, TradesKL, describe_attacks, get_attack
from robfair.errors import AttackError


@pytest.mark.parametrize("name,cls,attrs", [
    ("pgd20", PGD, {"steps": 20, "norm": "linf", "loss": "ce", "restarts": 1, "targeted": False}),
    ("pgd7", PGD, {"steps": 7}),
    ("PGD50-CW-R5", PGD, {"steps": 50, "loss": "cw", "restarts": 5}),
    ("pgd10-r3-l2-t", PGD, {"steps": 10, "norm": "l2", "restarts": 3, "targeted": True}),
    ("fgsm", FGSM, {"steps": 1, "random_start": False, "rel_step": 1.0}),
    ("rs-fgsm", FGSM, {"random_start": True, "rel_step": 1.25}),
    ("fgsm-l2", FGSM, {"norm": "l2"}),
    ("trades-kl", TradesKL, {"steps": 10, "rel_step": 0.25, "noise_std": 0.001}),
    ("autoattack", AutoAttack, {"version": "standard", "norm": "linf"}),
    ("aa-l2", AutoAttack, {"norm": "l2"}),
    ("autoattack-plus", AutoAttack, {"version": "plus"}),
])
def test_names_parse(name, cls, attrs):
    atk = get_attack(name)
    assert type(atk) is cls
    for k, v in attrs.items():
        assert getattr(atk, k) == v, k
    assert atk.name == name.lower()


def test_defaults_and_overrides():
    atk = get_attack("pgd10", keep="last", precision="bf16", rel_step=0.5)
    assert (atk.keep, atk.precision, atk.rel_step, atk.random_start) == ("last", "bf16", 0.5, True)
    assert get_attack("pgd20").keep == "first-success"
    assert get_attack("pgd20", steps=5).steps == 5


@pytest.mark.parametrize("bad,msg", [
    ("foo", "pgd<k>"), ("pgd20-x", "suffix"), ("trades-kl-cw", "does not take"), ("fgsm-plus", "does not take"),
    ("pgd10-l2-linf", "twice"), ("fgsm", "does not take option"),
])
def test_unknown_names_list_the_forms(bad, msg):
    with pytest.raises(AttackError, match=msg) as info:
        get_attack(bad, **({"steps": 3} if bad == "fgsm" else {}))
    assert "\n" not in str(info.value)


def test_describe_rows_cover_every_family():
    rows = describe_attacks()
    assert all(set(r) == {"name", "forms", "help"} and r["help"] for r in rows)
    names = " ".join(r["name"] for r in rows)
    for fam in ATTACKS.names():
        assert (fam if fam != "pgd" else "pgd<k>") in names
