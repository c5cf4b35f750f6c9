"""The radius parsed once (robfair.attacks.radius): what Radius.parse and Sweep.parse accept and
refuse, in one line each, and that what they return is trusted below them: the attacks broadcast a
Radius without checking its values again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robfair.attacks import Radius, Sweep, as_eps, check_image_eps
from robfair.attacks.radius import parse_range
from robfair.errors import RobfairError


@pytest.mark.parametrize("value, want", [(0.1, 0.1), ("8/255", 8 / 255), (" 2*4/255 ", 8 / 255), (0, 0.0),
                                         (torch.tensor(0.25), 0.25), (np.float64(0.5), 0.5)])
def test_a_number_parses_to_a_float_radius(value, want):
    r = Radius.parse(value)
    assert not r.per_sample and r.value == pytest.approx(want) and r.label == pytest.approx(want)
    assert r.max() == pytest.approx(want) and r.n is None


@pytest.mark.parametrize("value, words", [("8/", "is not a number"), (-0.1, ">= 0"), (float("nan"), "finite"),
                                          (True, "must be a number"), ("1" * 80, "characters long")])
def test_a_bad_number_is_one_line_naming_the_option(value, words):
    with pytest.raises(RobfairError, match=words) as e:
        Radius.parse(value, what="--eps")
    assert "\n" not in str(e.value) and str(e.value).startswith("--eps")


def test_a_per_sample_radius_is_checked_once_and_kept_on_the_cpu_in_float32():
    r = Radius.parse(np.array([0.0, 0.1, 0.2]), n=3)
    assert r.per_sample and r.n == 3 and r.label == "per-sample" and r.value.dtype == torch.float32
    assert r.value.device.type == "cpu" and r.max() == pytest.approx(0.2)
    assert torch.equal(r.subset(torch.tensor([2, 0])).value, torch.tensor([0.2, 0.0]))
    assert torch.equal(r.batch(1, 2, "cpu").value, torch.tensor([0.1, 0.2]))
    assert Radius.parse(r, n=3) is r  # a Radius is taken as it is


@pytest.mark.parametrize("value, words", [
    (torch.zeros(4), r"one value per sample \(3\), got shape \(4,\)"),
    (torch.zeros(3, 1), r"got shape \(3, 1\)"),
    (torch.tensor([0.1, -0.1, 0.0]), "negative or non-finite"),
    (torch.tensor([0.1, float("inf"), 0.0]), "negative or non-finite"),
    (torch.tensor([True, False, True]), "real numbers"),
    (np.array(["a", "b", "c"]), "real numbers"),
])
def test_a_bad_per_sample_radius_is_refused_where_it_enters(value, words):
    with pytest.raises(RobfairError, match=words):
        Radius.parse(value, n=3)


def test_a_per_sample_radius_of_another_dataset_is_refused_even_when_already_parsed():
    r = Radius.parse(torch.zeros(4))
    with pytest.raises(RobfairError, match=r"one value per sample \(3\)"):
        Radius.parse(r, n=3)


def test_only_parse_makes_a_radius():
    with pytest.raises(TypeError, match="Radius.parse"):
        Radius(0.1)


def test_as_eps_trusts_a_radius_and_checks_anything_else():
    x = torch.zeros(3, 1, 2, 2, dtype=torch.float64)
    r = Radius.parse(0.3)
    e = as_eps(r, x)
    assert e.shape == (3, 1, 1, 1) and e.dtype == torch.float64
    assert float(e[0]) == 0.3  # straight to float64: 0.3 does not pass through float32
    per = Radius.parse(torch.tensor([0.1, 0.2, 0.3]))
    assert torch.allclose(as_eps(per, x).reshape(-1), torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64))
    with pytest.raises(RobfairError, match="3 values but the batch has 2"):
        as_eps(per, x[:2])
    with pytest.raises(RobfairError, match=">= 0"):
        as_eps(torch.tensor([0.1, -0.2, 0.3]), x)  # a plain tensor: an attack called directly checks it


def test_as_eps_reads_no_value_of_a_radius(monkeypatch):
    """The trusted path does not look at the values (no isfinite, no comparison: no device sync)."""
    x = torch.zeros(2, 3)
    r = Radius.parse(torch.tensor([0.1, 0.2]))
    calls = []
    real = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: calls.append(1) or real(t))
    as_eps(r, x)
    assert calls == []
    as_eps(torch.tensor([0.1, 0.2]), x)
    assert calls  # and the unchecked path does


def test_sweep_parses_text_and_lists_once():
    s = Sweep.parse("0:16/255:9")
    assert isinstance(s, Sweep) and list(s) == pytest.approx([2 * k / 255 for k in range(9)])
    assert Sweep.parse(s) is s
    assert list(Sweep.parse([0, "4/255", 8 / 255])) == pytest.approx([0, 4 / 255, 8 / 255])
    balls = s.balls()
    assert all(isinstance(b, Radius) and not b.per_sample for b in balls) and balls[-1].max() == pytest.approx(16 / 255)
    assert list(Sweep([0.1, 0.2])) == [0.1, 0.2]  # the constructor checks too


@pytest.mark.parametrize("values, words", [([], "empty"), ([0.2, 0.1], "increasing"), ([0.1, 0.1], "twice"),
                                           ([0.1, -1], ">= 0"), (0.1, "list of radii"), ("0:1", "START:STOP:N"),
                                           ("1:0:3", "below start"), ("0:1:x", "not an integer"),
                                           ("0:1:1", "cannot span"), ("0:1:100000", "N <= 10000")])
def test_a_bad_sweep_is_one_line(values, words):
    with pytest.raises(RobfairError, match=words) as e:
        Sweep.parse(values)
    assert "\n" not in str(e.value)


def test_parse_range_is_the_sweep_text_form():
    assert parse_range("0.1:0.1:1") == [0.1]


def test_the_image_cap_takes_a_radius_and_knows_l2_attacks():
    with pytest.raises(RobfairError, match="--eps 8 is above 1"):
        check_image_eps(Radius.parse("8"), ["pgd20"])
    assert check_image_eps(Radius.parse("8"), ["pgd20-l2"]).max() == 8  # an L2 radius scales with the dimension
    assert check_image_eps(Radius.parse("8"), ["pgd20"], allow_large=True).max() == 8
    with pytest.raises(RobfairError, match="above 1"):
        check_image_eps(Radius.parse(torch.tensor([0.1, 2.0])), ["fgsm"])  # a per-sample radius: its largest value
