"""On-device augmentation of image batches (float32 in [0, 1], (N, C, H, W)).

    x = random_crop_flip(x, padding=4, generator=g)     # the CIFAR recipe, one gather per batch

A batch transform, not a dataset: the trainer applies it to each training batch on the device the
batch lives on, with a generator re-seeded every epoch (:func:`robfair.seeding.derive_seed`), so a
resumed run draws the same crops.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def random_crop_flip(x: torch.Tensor, padding: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """CIFAR augmentation on a batch, on its device: zero-pad by ``padding``, crop back to H x W at a
    random offset per sample, flip horizontally with probability 1/2. Vectorized (one gather)."""
    n, _, h, w = x.shape
    gdev = generator.device if generator is not None else x.device
    oy = torch.randint(0, 2 * padding + 1, (n,), generator=generator, device=gdev).to(x.device)
    ox = torch.randint(0, 2 * padding + 1, (n,), generator=generator, device=gdev).to(x.device)
    flip = (torch.rand(n, generator=generator, device=gdev) < 0.5).to(x.device)
    xp = F.pad(x, (padding,) * 4) if padding else x
    rows = oy[:, None] + torch.arange(h, device=x.device)
    cols = ox[:, None] + torch.arange(w, device=x.device)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    out = xp[torch.arange(n, device=x.device)[:, None, None], :, rows[:, :, None], cols[:, None, :]]  # N,H,W,C
    return out.permute(0, 3, 1, 2).contiguous()
