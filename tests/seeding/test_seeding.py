"""Every seed robfair derives (robfair.seeding): the values are part of every recorded result."""

from pathlib import Path

import numpy as np
import pytest
import torch

import robfair
from robfair.seeding import (TRAIN_STREAMS, attack_generator, attack_seed, batch_generator, derive_seed,
                             make_generator, noise_seed, seed_everything)


def test_the_seeds_never_change():
    """Pinned: a changed value would change every training run, audit and certificate made before,
    and a run resumed across the change would continue on other streams."""
    assert [derive_seed(0, p, 0, 0) for p in ("order", "augment", "attack", "val", "val-initial")] == [
        2918264622725855778, 8597659618385908031, 3291213472928352369, 2494635221133837528, 6102389744414414618]
    assert derive_seed(3, "attack", 2, 1) == 1464443633431822560
    assert attack_seed(0, "pgd20", 5) == 2604910017137505434
    assert attack_seed(0, "pgd20", 0.5, 5) == 5686219781456259468
    assert noise_seed(0, 12, 3) == 8540573758458845510


def test_each_stream_epoch_and_rank_gets_its_own_63_bit_seed():
    seeds = {derive_seed(7, p, e, r) for p in TRAIN_STREAMS for e in range(3) for r in range(2)}
    assert len(seeds) == len(TRAIN_STREAMS) * 6
    assert all(0 <= s < 2**63 for s in seeds)
    with pytest.raises(KeyError):
        derive_seed(0, "no-such-stream", 0)


def test_generators_are_seeded_as_their_keys_say():
    cpu = torch.device("cpu")
    assert make_generator(cpu, 11).initial_seed() == 11
    assert attack_generator(cpu, 0, "pgd20", 5).initial_seed() == attack_seed(0, "pgd20", 5)
    assert batch_generator(cpu, 0, "pgd20", 5).initial_seed() == attack_seed(0, "pgd20", 5)
    assert batch_generator(cpu, 0, "pgd20", 5, radius=0.5).initial_seed() == attack_seed(0, "pgd20", 0.5, 5)
    a = torch.rand(4, generator=make_generator(cpu, 3))
    assert torch.equal(a, torch.rand(4, generator=make_generator(cpu, 3)))


def test_seed_everything_repeats_the_global_streams():
    seed_everything(5)
    first = (np.random.rand(), torch.rand(2))
    seed_everything(5)
    assert np.random.rand() == first[0] and torch.equal(torch.rand(2), first[1])


def test_no_other_module_derives_seeds_from_a_seed_sequence():
    src = Path(robfair.__file__).parent
    users = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if "SeedSequence" in p.read_text())
    assert users == ["seeding.py"]
