"""Attack.run -> AttackResult: the attack's own logits decide success, and they equal a re-evaluation."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

from robfair.attacks import NEVER, PGD, STEP_UNKNOWN, AttackResult, get_attack


def _data(model, n=300, seed=0, d=20):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    y[: n // 10] = (y[: n // 10] + 1) % 5  # some clean mistakes: fooled at the start (step 0)
    return x, y


@pytest.mark.parametrize("name", ["pgd10", "pgd6-cw-r3", "fgsm", "rs-fgsm", "pgd5-l2", "trades-kl", "pgd0"])
@pytest.mark.parametrize("early_exit", [False, True])
def test_predictions_equal_an_fp32_reevaluation(mlp_factory, name, early_exit):
    model = mlp_factory(dtype=torch.float32)
    x, y = _data(model)
    eps = torch.linspace(0, 0.8 if "l2" in name else 0.2, len(y))
    atk = get_attack(name)
    res = atk.run(model, x, y, eps, generator=torch.Generator().manual_seed(4), early_exit=early_exit and name != "trades-kl")
    assert isinstance(res, AttackResult) and len(res) == len(y)
    with torch.no_grad():
        again = model(res.x_adv).argmax(1)
    assert torch.equal(res.adv_pred, again)
    assert torch.equal(res.fooled, again != y)
    assert 0.1 < res.fooled.double().mean() < 0.95
    # __call__ is the same attack, returning x_adv only
    x_adv = atk(model, x, y, eps, generator=torch.Generator().manual_seed(4), early_exit=early_exit and name != "trades-kl")
    assert torch.equal(x_adv, res.x_adv)
    if name == "trades-kl":
        assert torch.all(res.fooled_step[res.fooled] == STEP_UNKNOWN)
    else:
        assert torch.all(res.fooled_step[res.fooled] >= 0) and torch.all(res.fooled_run[res.fooled] >= 0)
        assert torch.all(res.fooled_step[(y != model(x).argmax(1))] == 0)  # clean mistakes: the start
    assert torch.all(res.fooled_step[~res.fooled] == NEVER)


def test_fooled_step_is_the_first_fooling_iterate(mlp_factory):
    """Reference: PGD-j with keep='last' is iterate j; fooled_step must be the first j that fools."""
    model = mlp_factory()
    x = torch.rand(200, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = model(x).argmax(1)
    eps, K = 0.15, 8
    iterates = [PGD(j, rel_step=1.0, keep="last")(model, x, y, eps, generator=torch.Generator().manual_seed(3))
                for j in range(K + 1)]
    fooled = torch.stack([model(it).argmax(1) != y for it in iterates])
    first = torch.where(fooled.any(0), fooled.double().argmax(0), torch.full_like(y, NEVER))
    res = PGD(K, rel_step=1.0).run(model, x, y, eps, generator=torch.Generator().manual_seed(3), early_exit=True)
    assert (first > 1).any() and (first == NEVER).any()
    assert torch.equal(res.fooled_step, first)


def test_restart_of_first_success_is_recorded(mlp_factory):
    model = mlp_factory()
    x = torch.rand(300, 20, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = model(x).argmax(1)
    res = PGD(2, restarts=4).run(model, x, y, 0.12, generator=torch.Generator().manual_seed(0))
    # a sample fooled in restart r was not fooled by any earlier restart: rerun with r restarts
    for r in range(1, 4):
        fewer = PGD(2, restarts=r).run(model, x, y, 0.12, generator=torch.Generator().manual_seed(0))
        assert torch.equal(fewer.fooled, res.fooled & (res.fooled_run < r))
    assert (res.fooled_run > 0).any()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_never_counts_a_sample_fp32_would_not(precision):
    """Near-ties: an MLP whose logits are all close, so bf16 / fp16 and fp32 disagree on some x_adv."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5))
    with torch.no_grad():
        model[2].weight.mul_(0.02)
        model[2].bias.zero_()
        model[2].bias.add_(30.0)  # large common offset: half precision cannot resolve the differences
    x = torch.rand(2000, 20, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = model(x).argmax(1)
    atk = PGD(5, precision=precision)
    res = atk.run(model, x, y, 0.05, generator=torch.Generator().manual_seed(2), early_exit=True)
    with torch.no_grad():
        p32 = model(res.x_adv).argmax(1)
        with torch.autocast("cpu", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[precision]):
            p_half = model(res.x_adv).float().argmax(1)
    assert (p_half != p32).any()  # the situation really arises
    assert torch.equal(res.adv_pred, p32)
    assert torch.equal(res.fooled, p32 != y)


def test_autoattack_flags_are_returned_not_printed(capfd):
    pytest.importorskip("pyautoattack")
    from robfair.attacks import AutoAttack

    class Probs(torch.nn.Module):  # outputs probabilities: AutoAttack's own check flags it
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3 * 4 * 4, 4)

        def forward(self, x):
            return self.lin(x.flatten(1)).softmax(1)

    torch.manual_seed(0)
    model = Probs()
    x = torch.rand(6, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    y = model(x).argmax(1)
    atk = AutoAttack(attacks=["apgd-ce"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may escape as a Python warning either
        res = atk.run(model, x, y, 0.01, generator=torch.Generator().manual_seed(0))
    assert any("probability distribution" in w for w in res.warnings), res.warnings
    assert all(w.startswith("autoattack: ") and "\n" not in w for w in res.warnings)
    out, err = capfd.readouterr()
    assert "probability" not in err and "probability" not in out
    assert not logging.getLogger("auto-attack").handlers
    with torch.no_grad():
        assert torch.equal(res.adv_pred, model(res.x_adv).argmax(1))


# -- streaming: the active batch refills across chunks ------------------------------------------------
def _chunks(x, y, eps, sizes):
    out, pos = [], 0
    for m in sizes:
        out.append((x[pos:pos + m], y[pos:pos + m], eps[pos:pos + m]))
        pos += m
    return out


@pytest.mark.parametrize("name", ["pgd10", "pgd6-r2", "pgd5-cw-t2", "pgd5-l2", "pgd4-trand", "fgsm", "pgd0"])
def test_stream_equals_chunk_by_chunk_and_keeps_the_batch_full(mlp_factory, name):
    model = mlp_factory(dtype=torch.float32)
    x, y = _data(model, n=330, seed=1)
    eps = torch.rand(len(y), generator=torch.Generator().manual_seed(2)) * (0.8 if "l2" in name else 0.2)
    sizes = [64, 64, 0, 64, 64, 64, 10]
    atk = get_attack(name)
    sizes_seen = []
    hook = model[1].register_forward_hook(lambda m, i, o: sizes_seen.append(i[0].shape[0]))
    gen = torch.Generator().manual_seed(9)
    one_by_one = [atk.run(model, *c, generator=gen, early_exit=True) for c in _chunks(x, y, eps, sizes)]
    work_chunks, calls_chunks = sum(sizes_seen), len(sizes_seen)
    sizes_seen.clear()
    gen2 = torch.Generator().manual_seed(9)
    streamed = list(atk.stream(model, iter(_chunks(x, y, eps, sizes)), generator=gen2, early_exit=True, batch_size=64))
    hook.remove()
    assert torch.equal(gen.get_state(), gen2.get_state())
    assert [len(r) for r in streamed] == sizes
    for a, b in zip(one_by_one, streamed):
        assert torch.equal(a.adv_pred, b.adv_pred) and torch.equal(a.fooled, b.fooled)
        assert torch.equal(a.fooled_step, b.fooled_step) and torch.equal(a.fooled_run, b.fooled_run)
        assert torch.allclose(a.x_adv, b.x_adv, atol=1e-6, rtol=0)
    assert sum(sizes_seen) == work_chunks  # the same per-sample work ...
    if name not in ("pgd0", "fgsm"):
        assert len(sizes_seen) < calls_chunks  # ... in fewer, fuller passes
        assert max(sizes_seen) == 64
        runs = 2 if "-t2" in name else 1
        passes = [s for s in sizes_seen if s > 1]  # (-trand learns K from one sample per chunk)
        full = sum(s == 64 for s in passes)
        # only the tail (and the chunks' own target-ranking forwards) run below full batch
        assert full >= len(passes) - (atk.steps + 1) * runs - len(sizes), passes


def test_stream_checks_the_last_iterate_without_gradient_in_full_batches(mlp_factory):
    """A row whose next forward is only its final check leaves the gradient batch (its place
    refills) and is checked with the others without gradient: the gradient passes cover exactly
    the steps that need a gradient, the gradient-free ones exactly the rows never fooled before
    their last iterate, at most a batch at a time; outcomes equal chunk by chunk."""
    model = mlp_factory(dtype=torch.float32)
    x, y = _data(model, n=330, seed=4)
    eps = torch.rand(len(y), generator=torch.Generator().manual_seed(5)) * 0.2
    sizes, k, batch = [64, 64, 64, 64, 64, 10], 6, 64
    atk = PGD(k)
    calls = []
    hook = model[1].register_forward_hook(lambda m, i, o: calls.append((i[0].shape[0], torch.is_grad_enabled())))
    streamed = list(atk.stream(model, iter(_chunks(x, y, eps, sizes)), generator=torch.Generator().manual_seed(1),
                               early_exit=True, batch_size=batch))
    hook.remove()
    gen = torch.Generator().manual_seed(1)
    one_by_one = [atk.run(model, *c, generator=gen, early_exit=True) for c in _chunks(x, y, eps, sizes)]
    for a, b in zip(one_by_one, streamed):
        assert torch.equal(a.adv_pred, b.adv_pred) and torch.equal(a.fooled_step, b.fooled_step)
    step = torch.cat([r.fooled_step for r in streamed])
    last = int(((step == NEVER) | (step == k)).sum())  # rows whose last iterate had to be checked
    assert 0 < last < len(y) and (step == NEVER).any() and (step >= 0).any()
    with_grad = [n for n, g in calls if g]
    without = [n for n, g in calls if not g]
    assert sum(with_grad) == int(torch.where((step >= 0) & (step < k), step + 1, k).sum())
    assert sum(without) == last and max(without) <= batch and len(without) < last / 8
    assert max(with_grad) == batch


def test_stream_loads_more_chunks_while_a_slow_sample_holds_the_oldest(mlp_factory, monkeypatch):
    """Chunks whose samples fall at once but one (eps 0: never fooled, all k + 1 passes): with
    only MAX_LOADED chunks loaded the batch drains while the oldest waits; within LOAD_BUDGET more
    chunks load and the batch stays full. Same outcomes, fewer passes."""
    from robfair.attacks import pgd

    model = mlp_factory(dtype=torch.float32)
    x, y = _data(model, n=16 * 12, seed=6)
    eps = torch.full((len(y),), 1.0)
    eps[::16] = 0.0  # one sample per chunk keeps its clean prediction through every step
    y[::16] = model(x[::16]).argmax(1).detach()
    chunks = _chunks(x, y, eps, [16] * 12)
    atk = PGD(10)
    runs, default = {}, pgd.LOAD_BUDGET
    for budget in (default, 0):
        monkeypatch.setattr(pgd, "LOAD_BUDGET", budget)
        calls = []
        hook = model[1].register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
        runs[budget] = (list(atk.stream(model, iter(chunks), generator=torch.Generator().manual_seed(2),
                                        early_exit=True, batch_size=16)), calls)
        hook.remove()
    (big, big_calls), (small, small_calls) = runs[default], runs[0]
    for a, b in zip(big, small):
        assert torch.equal(a.adv_pred, b.adv_pred) and torch.equal(a.fooled_step, b.fooled_step)
    assert (torch.cat([r.fooled_step for r in big])[::16] == NEVER).all()
    assert sum(big_calls) == sum(small_calls)
    assert len(big_calls) < len(small_calls)


def test_stream_accepts_chunk_objects_with_clean_logits_and_training_keep_last(mlp_factory):
    model = mlp_factory(dtype=torch.float32)
    x, y = _data(model, n=100, seed=3)
    from robfair.attacks import Chunk

    with torch.no_grad():
        z = model(x)
    calls = []
    h = model.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    res = list(get_attack("pgd3-t2").stream(model, [Chunk(x[:50], y[:50], 0.1, logits=z[:50]),
                                                    Chunk(x[50:], y[50:], 0.1, logits=z[50:])],
                                            generator=torch.Generator().manual_seed(0), early_exit=False))
    h.remove()
    assert sum(calls) == 100 * 2 * 4  # 2 targets x (3 steps + final check); no forward to rank targets
    gen = torch.Generator().manual_seed(0)
    ref = [get_attack("pgd3-t2").run(model, x[s], y[s], 0.1, generator=gen) for s in (slice(0, 50), slice(50, 100))]
    assert torch.equal(torch.cat([r.fooled for r in res]), torch.cat([r.fooled for r in ref]))
    last = list(PGD(3, keep="last").stream(model, [(x[:50], y[:50], 0.1), (x[50:], y[50:], 0.1)],
                                           generator=torch.Generator().manual_seed(0), early_exit=False))
    gen = torch.Generator().manual_seed(0)
    ref = torch.cat([PGD(3, keep="last")(model, x[s], y[s], 0.1, generator=gen) for s in (slice(0, 50), slice(50, 100))])
    assert torch.allclose(torch.cat([r.x_adv for r in last]), ref, atol=1e-6)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("name", ["pgd3", "pgd3-l2", "trades-kl"])
def test_random_start_and_steps_keep_the_input_memory_layout(channels, name):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(channels, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 3)).to(memory_format=torch.channels_last)
    x = torch.rand(10, channels, 8, 8, generator=torch.Generator().manual_seed(1))
    x = x.contiguous(memory_format=torch.channels_last)
    if channels == 1:  # both layouts are "contiguous": the strides say which one the kernels see
        x = torch.empty_strided(x.shape, (64, 1, 8, 1)).copy_(x)
    y = torch.zeros(10, dtype=torch.long)
    strides = []
    model[0].register_forward_hook(lambda m, i, o: strides.append(i[0].stride()[1:]))
    atk = get_attack(name)
    atk(model, x, y, 0.1, generator=torch.Generator().manual_seed(0))
    assert strides and all(s == x.stride()[1:] for s in strides), (strides, x.stride())
    if name == "pgd3":
        strides.clear()
        list(atk.stream(model, [(x[:4], y[:4], 0.1), (x[4:], y[4:], 0.1)], batch_size=3,
                        generator=torch.Generator().manual_seed(0)))
        assert strides and all(s == x.stride()[1:] for s in strides)
