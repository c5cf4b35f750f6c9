"""The contract every registered attack keeps, parametrized over the registry (as torchattacks'
attack tests): each example name an attack registers (``forms=``) runs here, so a new attack file
gets these tests with no edit to this one.

Per-sample ball and [0, 1] box, eps 0 returns x exactly, some sample moves, input gradients only,
modes restored, same seeded generator -> same result (``__call__`` gives ``run``'s ``x_adv``),
``run``'s prediction / fooled / fooled-step agree with the model at ``x_adv``, a targeted attack never
aims at the true label, and an attack with its own ``stream`` gives what ``run`` gives chunk by chunk.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from robfair.attacks import ATTACKS, NEVER, STEP_UNKNOWN, eval_mode, get_attack, parse_attack_name
from robfair.attacks.attack import Attack
from robfair.errors import AttackError


def registered_forms() -> list:
    """Every example name of every attack (``contract_forms``, else ``forms``, else the name); an
    attack whose optional package (``requires=``, any one of the module names) is missing is
    skipped with the reason; ``contract_slow`` marks its cases slow."""
    out = []
    for e in ATTACKS:
        need = e.meta.get("requires", ())
        missing = bool(need) and not any(importlib.util.find_spec(m) is not None for m in need)
        marks = [pytest.mark.skip(reason=f"{e.name} needs one of {', '.join(need)} (an optional package)")] if missing else []
        if e.meta.get("contract_slow"):
            marks.append(pytest.mark.slow)
        forms = e.meta.get("contract_forms") or e.meta.get("forms") or (e.name,)
        out += [pytest.param(f, marks=marks, id=f) for f in forms]
    return out


def registered_attacks() -> list:
    """One form per registered attack (its first contract form), with the same marks."""
    out, seen = [], set()
    for p in registered_forms():
        base = ATTACKS.entry(parse_attack_name(p.values[0])[0]).name
        if base not in seen:
            seen.add(base)
            out.append(p)
    return out


# the common suffixes combined (the registrations' examples show them one or two at a time)
COMBINED_FORMS = ["pgd3-r3", "pgd5-l2-cw-r2", "pgd5-cw-t", "rs-fgsm-cw", "fgsm-l2-cw-t"]


def _dist(x_adv: torch.Tensor, x: torch.Tensor, norm: str) -> torch.Tensor:
    d = (x_adv - x).flatten(1)
    return d.abs().amax(1) if norm == "linf" else d.norm(dim=1)


def check_attack_contract(name: str, model: torch.nn.Module, x: torch.Tensor, eps: torch.Tensor, **overrides) -> None:
    """Assert the contract for attack ``name`` on ``model`` (a classifier in [0, 1]) and per-sample
    ``eps`` (zeros and large radii included). Labels are the clean predictions, so a targeted
    attack that aimed at the true label could fool no sample."""
    with torch.no_grad(), eval_mode(model):
        y = model(x).argmax(1)
    if hasattr(model, "seen_training"):
        model.seen_training.clear()
    atk = get_attack(name, **overrides)
    flags = {n: m.training for n, m in model.named_modules()}
    res = atk.run(model, x, y, eps, generator=torch.Generator().manual_seed(0))
    x_adv = res.x_adv
    # shape, dtype, detached, box, each sample's own ball, eps 0 -> x exactly
    assert x_adv.shape == x.shape and x_adv.dtype == x.dtype and not x_adv.requires_grad
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert torch.all(_dist(x_adv, x, atk.norm) <= eps + 1e-6), name
    assert torch.equal(x_adv[eps == 0], x[eps == 0])
    assert not torch.equal(x_adv[eps > 0], x[eps > 0]), f"{name} moved no sample"
    # input gradients only, eval mode while attacking, each submodule's flag restored afterwards
    assert all(p.grad is None and p.requires_grad for p in model.parameters())
    if hasattr(model, "seen_training"):
        assert model.seen_training and not any(model.seen_training)
    assert {n: m.training for n, m in model.named_modules()} == flags
    # run's prediction is the model's at x_adv; fooled and the step of first success agree with it
    with torch.no_grad():
        pred = model.eval()(x_adv).argmax(1)
    for n, m in model.named_modules():
        m.training = flags[n]
    assert torch.equal(res.adv_pred, pred), name
    assert torch.equal(res.fooled, pred != y), name
    assert not res.fooled[eps == 0].any()  # the labels are the clean predictions
    step = res.fooled_step
    assert torch.equal(step == NEVER, ~res.fooled), name
    assert bool(((step >= 0) | (step == STEP_UNKNOWN))[res.fooled].all()), name
    assert bool((res.fooled_run[~res.fooled] == -1).all()), name  # no run fooled an unfooled sample
    # determinism: the same seeded generator gives the same result, and __call__ is run's x_adv
    again = atk(model, x, y, eps, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again, x_adv), name
    if getattr(atk, "targeted", False):
        # never the true label: explicit targets equal to y are refused, and the rule's own targets
        # fool samples whose true label the attack would otherwise only reinforce
        with pytest.raises(AttackError):
            atk.run(model, x, y, eps, targets=y)
        big = eps >= 1.0
        assert res.fooled[big].any(), f"{name} fooled no sample at eps >= 1: are its targets the true labels?"


def check_stream_contract(name: str, model: torch.nn.Module, x: torch.Tensor, eps: torch.Tensor, **overrides) -> None:
    """An attack that overrides :meth:`Attack.stream` (PGD refills its batch across chunks) must
    yield, per chunk, what ``run`` gives chunk by chunk with the same generator, and leave the
    generator in the same state."""
    atk = get_attack(name, **overrides)
    if type(atk).stream is Attack.stream:
        return  # the default stream is run chunk by chunk
    with torch.no_grad(), eval_mode(model):
        y = model(x).argmax(1)
    sizes = [5, 0, 7, len(y) - 12]
    chunks, pos = [], 0
    for m in sizes:
        chunks.append((x[pos:pos + m], y[pos:pos + m], eps[pos:pos + m]))
        pos += m
    gen = torch.Generator().manual_seed(3)
    one_by_one = [atk.run(model, *c, generator=gen, early_exit=True) for c in chunks]
    gen2 = torch.Generator().manual_seed(3)
    streamed = list(atk.stream(model, iter(chunks), generator=gen2, early_exit=True, batch_size=6))
    assert [len(r) for r in streamed] == sizes, name
    assert torch.equal(gen.get_state(), gen2.get_state()), f"{name}: stream draws other random numbers than run"
    for a, b in zip(one_by_one, streamed):
        assert torch.equal(a.fooled, b.fooled) and torch.equal(a.adv_pred, b.adv_pred), name
        assert torch.equal(a.fooled_step, b.fooled_step) and torch.equal(a.fooled_run, b.fooled_run), name
        assert torch.allclose(a.x_adv, b.x_adv, atol=1e-6, rtol=0), name


def check_half_precision(name: str, precision: str, **overrides) -> None:
    """``precision="bf16"/"fp16"`` on CPU: every forward the attack takes a gradient through runs at
    that precision (the attack calls ``self.logits(model, x)``), and ``x_adv`` is still fp32, finite,
    in the box and in each sample's ball."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.rand(32, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = model(x).argmax(1)
    eps = torch.linspace(0, 0.3, 32)
    dtypes = []
    model[1].register_forward_hook(lambda m, i, o: dtypes.append(o.dtype) if torch.is_grad_enabled() else None)
    atk = get_attack(name, precision=precision, **overrides)
    x_adv = atk(model, x, y, eps, generator=torch.Generator().manual_seed(0))
    assert x_adv.dtype == torch.float32 and torch.isfinite(x_adv).all(), name
    assert x_adv.min() >= 0 and x_adv.max() <= 1 and torch.all(_dist(x_adv, x, atk.norm) <= eps + 1e-6), name
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    wrong = sorted({str(d) for d in dtypes if d != half})
    assert not wrong, f"{name}: forwards with gradients ran at {wrong} under precision {precision}; use self.logits(model, x)"


def _contract_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.rand(16, 3, 4, 4, generator=g)
    x[0] = 0.0
    x[1] = 1.0
    return x, torch.tensor([0.0, 0.5, 0.0, 8 / 255, 0.03, 1.0, 0.3, 2.0] * 2)


@pytest.mark.parametrize("name", registered_forms() + COMBINED_FORMS)
def test_every_registered_attack_keeps_the_contract(name, mixed_model):
    x, eps = _contract_inputs()
    overrides = ATTACKS.entry(parse_attack_name(name)[0]).meta.get("contract_overrides", {})
    check_attack_contract(name, mixed_model, x, eps, **overrides)
    check_stream_contract(name, mixed_model.eval(), x, eps, **overrides)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("name", registered_attacks())
def test_every_registered_attack_runs_at_half_precision_on_cpu(name, precision):
    check_half_precision(name, precision, **ATTACKS.entry(parse_attack_name(name)[0]).meta.get("contract_overrides", {}))


def test_every_attack_registers_example_forms_that_parse():
    for entry in ATTACKS:
        forms = entry.meta.get("forms") or (entry.name,)
        for form in forms:
            assert get_attack(form).name == form


DUMMY = '''
import torch

from robfair.attacks.attack import NORMS, Attack, check_choice, project
from robfair.attacks.names import ATTACKS


@ATTACKS.register("dummy-noise", help="test only: seeded sign noise of size eps, projected",
                  forms=("dummy-noise", "dummy-noise-l2"))
class DummyNoise(Attack):
    def __init__(self, *, norm="linf", reach=1.0, precision="fp32", name=None):
        super().__init__(precision=precision)
        self.norm = check_choice(norm, NORMS, "norm")
        self.reach = reach
        self.name = name or "dummy-noise"

    def perturb(self, model, x, y, eps, *, generator, early_exit):
        sign = torch.randint(0, 2, x.shape, generator=generator, device=x.device).to(x.dtype) * 2 - 1
        x_adv = (x + self.reach * eps * sign).clamp(0, 1)
        return x_adv if self.reach > 1 else project(x_adv, x, eps, self.norm)
'''


def test_a_new_attack_file_registers_itself_and_gets_the_contract(monkeypatch, tmp_path, mixed_model):
    from _shared import drop_in

    from robfair.attacks import describe_attacks

    assert drop_in(monkeypatch, tmp_path, "robfair.attacks", ATTACKS, "dummy_noise.py", DUMMY) == ["dummy-noise"]
    assert {"dummy-noise", "dummy-noise-l2"} <= {p.id for p in registered_forms()}
    assert "dummy-noise" in [r["name"] for r in describe_attacks()]
    assert get_attack("dummy-noise-l2").norm == "l2"
    with pytest.raises(AttackError, match="does not take"):
        get_attack("dummy-noise-r3")  # the common grammar applies, the factory's signature decides
    g = torch.Generator().manual_seed(1)
    x = torch.rand(16, 3, 4, 4, generator=g)
    eps = torch.tensor([0.0, 0.5, 0.0, 8 / 255, 0.03, 1.0, 0.3, 2.0] * 2)
    for form in ATTACKS.entry("dummy-noise").meta["forms"]:
        check_attack_contract(form, mixed_model, x, eps)
    # and the contract can fail: the same file with a step that leaves the ball
    with pytest.raises(AssertionError):
        check_attack_contract("dummy-noise", mixed_model, x, eps * 0 + 0.1, reach=3.0)
    # ... an attack that returns x unchanged fails it
    with pytest.raises(AssertionError, match="moved no sample"):
        check_attack_contract("dummy-noise", mixed_model, x, eps, reach=0.0)


DUMMY_STREAM = DUMMY.replace("dummy-noise", "dummy-stream").replace("class DummyNoise", "class DummyStream") + '''

    def stream(self, model, chunks, *, generator=None, early_exit=True, batch_size=None, predict=True):
        for x, y, eps in chunks:  # a fresh generator per chunk: not what run gives
            yield self.run(model, x, y, eps, generator=torch.Generator().manual_seed(0), early_exit=early_exit)
'''


def test_a_new_attack_with_its_own_stream_gets_the_stream_contract(monkeypatch, tmp_path, mixed_model):
    from _shared import drop_in

    assert drop_in(monkeypatch, tmp_path, "robfair.attacks", ATTACKS, "dummy_stream.py", DUMMY_STREAM) == ["dummy-stream"]
    x, eps = _contract_inputs()
    check_attack_contract("dummy-stream", mixed_model, x, eps)
    with pytest.raises(AssertionError, match="other random numbers"):
        check_stream_contract("dummy-stream", mixed_model.eval(), x, eps)
    check_stream_contract("pgd5", mixed_model.eval(), x, eps)  # the built-in override passes


DUMMY_GRAD = '''
import torch

from robfair.attacks.attack import Attack, project
from robfair.attacks.names import ATTACKS


@ATTACKS.register("dummy-step", help="test only: one signed gradient step", forms=("dummy-step",))
class DummyStep(Attack):
    def __init__(self, *, norm="linf", precision="fp32", name=None):
        super().__init__(precision=precision)
        self.norm = norm
        self.name = name or "dummy-step"

    def perturb(self, model, x, y, eps, *, generator, early_exit):
        xa = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(torch.nn.functional.cross_entropy(self.logits(model, xa), y, reduction="sum"), xa)
        return project((x + eps * g.sign()).clamp(0, 1), x, eps, self.norm).detach()
'''


def test_a_new_attack_gets_the_half_precision_check(monkeypatch, tmp_path):
    from _shared import drop_in

    assert drop_in(monkeypatch, tmp_path, "robfair.attacks", ATTACKS, "dummy_step.py", DUMMY_GRAD) == ["dummy-step"]
    assert "dummy-step" in {p.id for p in registered_attacks()}
    for precision in ("bf16", "fp16"):
        check_half_precision("dummy-step", precision)
    # the check can fail: the same attack calling the model directly ignores the precision
    direct = DUMMY_GRAD.replace("dummy-step", "dummy-direct").replace("self.logits(model, xa)", "model(xa)")
    drop_in(monkeypatch, tmp_path, "robfair.attacks", ATTACKS, "dummy_direct.py", direct)
    with pytest.raises(AssertionError, match="use self.logits"):
        check_half_precision("dummy-direct", "bf16")
