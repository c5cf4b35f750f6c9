"""An attack radius, parsed and checked once where it enters robfair, then trusted.

    from robfair.attacks.radius import Radius, Sweep
    r = Radius.parse("8/255")                    # a float; "0.1", 8/255, a 0-d tensor too
    r = Radius.parse(per_sample, n=len(dataset)) # an (n,) tensor / array: one radius per dataset item
    s = Sweep.parse("0:16/255:9")                # an eps sweep: increasing, distinct radii

Where a radius enters (the CLI's options, :func:`robfair.audit`, :func:`robfair.auditing.engine.
evaluate` or an attack called directly with a plain number or tensor) it is parsed here, and this
module holds every message about a bad one: not a number, negative, NaN / inf, a per-sample tensor
of the wrong length. Below that, nothing checks it again: the engine slices a :class:`Radius` per
batch (:meth:`Radius.batch`) and the attacks' :func:`robfair.attacks.attack.as_eps` broadcasts a
``Radius`` without looking at its values (no device sync per batch). A ``Radius`` can only be made
by :meth:`Radius.parse` (or sliced from one), so holding one means it was checked.

The cap on an L-inf radius for [0, 1] images (``--eps 8`` for 8/255) needs the attacks' names and
lives beside their grammar: :func:`robfair.attacks.names.check_image_eps`.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import torch

from ..errors import AttackError
from ..parsing import parse_eps

_MADE_HERE = object()  # only Radius.parse and Radius's own slicing build a Radius


class Radius:
    """One ball's radius: ``value`` is a float, or an ``(n,)`` float32 tensor (one radius per dataset
    item; on the CPU, or on the batch's device once sliced by :meth:`batch`). Made by :meth:`parse`."""

    __slots__ = ("value",)

    def __init__(self, value: float | torch.Tensor, token: object = None) -> None:
        if token is not _MADE_HERE:
            raise TypeError("a Radius is made by Radius.parse(eps, n) (so that holding one means it was checked)")
        self.value = value

    @classmethod
    def parse(cls, eps: Any, n: int | None = None, *, what: str = "epsilon") -> "Radius":
        """``eps`` checked: a number or text (``"8/255"``; :func:`robfair.parsing.parse_eps`), a 0-d
        tensor, or a per-sample ``(n,)`` tensor / numpy array (``n``: the dataset's size, when known).
        A ``Radius`` is returned as it is (only a per-sample one's length is compared with ``n``)."""
        if isinstance(eps, Radius):
            if eps.per_sample and n is not None and eps.n != n:
                raise _length_error(n, tuple(eps.value.shape))
            return eps
        if isinstance(eps, np.ndarray):
            if not np.issubdtype(eps.dtype, np.number) or np.issubdtype(eps.dtype, np.complexfloating):
                raise AttackError(f"{what} must hold real numbers, got a {eps.dtype} array; pass floats such as 8/255")
            eps = torch.as_tensor(eps)
        if isinstance(eps, torch.Tensor):
            if eps.is_complex() or eps.dtype == torch.bool:
                raise AttackError(f"{what} must hold real numbers, got a {eps.dtype} tensor; pass floats such as 8/255")
            if eps.ndim == 0:
                return cls(parse_eps(float(eps), what), _MADE_HERE)
            if eps.ndim != 1 or (n is not None and eps.numel() != n):
                raise _length_error(n, tuple(eps.shape))
            e = eps.detach().to(device="cpu", dtype=torch.float32)
            if not bool(torch.isfinite(e).all()) or bool((e < 0).any()):
                raise AttackError(f"per-sample {what} has negative or non-finite values; pass values >= 0")
            return cls(e, _MADE_HERE)
        return cls(parse_eps(eps, what), _MADE_HERE)

    @property
    def per_sample(self) -> bool:
        return isinstance(self.value, torch.Tensor)

    @property
    def n(self) -> int | None:
        """How many samples a per-sample radius covers (None for one float)."""
        return int(self.value.numel()) if self.per_sample else None

    @property
    def label(self) -> float | str:
        """What a report records: the float, or ``"per-sample"``."""
        return "per-sample" if self.per_sample else float(self.value)

    def max(self) -> float:
        """The largest radius (0 for an empty per-sample one)."""
        if not self.per_sample:
            return float(self.value)
        return float(self.value.max()) if self.value.numel() else 0.0

    def subset(self, index: torch.Tensor) -> "Radius":
        """The radii of the dataset items ``index`` (a float stays itself)."""
        if not self.per_sample:
            return self
        return Radius(self.value[index.to(self.value.device)], _MADE_HERE)

    def batch(self, pos: int, m: int, device: torch.device | str | None = None) -> "Radius":
        """The radii of samples ``pos .. pos + m`` on ``device`` (a float stays itself): what the
        engine hands an attack per batch, trusted there."""
        if not self.per_sample:
            return self
        return Radius(self.value[pos:pos + m].to(device), _MADE_HERE)

    def broadcast(self, x: torch.Tensor, what: str = "epsilon") -> torch.Tensor:
        """Shaped ``(N, 1, ..., 1)`` against ``x``, on its device and dtype; the values are not
        looked at again (only the sample count, which costs no device sync)."""
        n = x.shape[0]
        if self.per_sample:
            if self.value.numel() != n:
                raise AttackError(f"{what} has {self.value.numel()} values but the batch has {n} samples; "
                                  f"pass a float or an ({n},) tensor")
            e = self.value.to(device=x.device, dtype=x.dtype)
        else:  # straight to x's dtype: 0.3 must not pass through float32 on its way to a float64 batch
            e = torch.full((n,), float(self.value), device=x.device, dtype=x.dtype)
        return e.reshape((n,) + (1,) * (x.dim() - 1))

    def __repr__(self) -> str:
        return f"Radius(per-sample, n={self.n})" if self.per_sample else f"Radius({float(self.value):g})"


def _length_error(n: int | None, shape: tuple) -> AttackError:
    want = f"one value per sample ({n})" if n is not None else "one value per sample, as an (N,) tensor"
    return AttackError(f"a per-sample epsilon needs {want}, got shape {shape}")


class Sweep(tuple):
    """The radii of an eps sweep: non-empty, increasing and distinct floats. Made by :meth:`parse`."""

    __slots__ = ()

    @classmethod
    def parse(cls, values: Any, what: str = "eps_values") -> "Sweep":
        """``"START:STOP:N"`` (:func:`parse_range`) or a list of radii, checked; a Sweep as it is."""
        if isinstance(values, Sweep):
            return values
        if isinstance(values, str):
            values = parse_range(values)
        if isinstance(values, (torch.Tensor, np.ndarray)):
            values = values.reshape(-1).tolist()
        if not isinstance(values, Iterable):
            raise AttackError(f"{what} must be a list of radii, got {values!r}; pass e.g. [0, 4/255, 8/255] "
                              "or '0:16/255:9'")
        vals = [parse_eps(v, "eps sweep radius") for v in values]
        if not vals:
            raise AttackError(f"{what} is empty; pass at least one radius, e.g. [0, 8/255]")
        if vals != sorted(vals):
            raise AttackError(f"{what} {vals} must be increasing; sort them (the sweep reuses smaller radii)")
        if len(set(vals)) != len(vals):
            raise AttackError(f"{what} {vals} lists a radius twice; list each radius once")
        return tuple.__new__(cls, vals)

    def __new__(cls, values: Iterable[float] = ()) -> "Sweep":
        return cls.parse(list(values))

    def balls(self) -> list[Radius]:
        """Each radius as a :class:`Radius` (checked here, trusted by the attacks)."""
        return [Radius(float(v), _MADE_HERE) for v in self]


def parse_range(text: str) -> list[float]:
    """``"0:16/255:9"`` -> 9 radii evenly spaced from 0 to 16/255 (both included).

    ``START:STOP:N``: fractions allowed, ``START <= STOP``, ``N >= 2`` (``N = 1`` only when
    START == STOP). Raises a one-line ``AttackError`` naming the fix."""
    parts = str(text).split(":")
    example = "write START:STOP:N, e.g. 0:16/255:9"
    if len(parts) != 3:
        raise AttackError(f"eps sweep {text!r} is not START:STOP:N; {example}")
    start = parse_eps(parts[0], "eps sweep start")
    stop = parse_eps(parts[1], "eps sweep stop")
    try:
        n = int(parts[2].strip())
    except ValueError:
        raise AttackError(f"eps sweep {text!r}: N = {parts[2]!r} is not an integer; {example}") from None
    if stop < start:
        raise AttackError(f"eps sweep {text!r}: stop {stop:g} is below start {start:g}; "
                          "write START:STOP:N with START <= STOP, e.g. 0:16/255:9")
    if n < 1 or (n == 1 and stop != start):
        raise AttackError(f"eps sweep {text!r}: N = {n} points cannot span [{start:g}, {stop:g}]; use N >= 2")
    if n > 10_000:
        raise AttackError(f"eps sweep {text!r}: N = {n} radii is more than a sweep needs; use N <= 10000")
    return [float(v) for v in np.linspace(start, stop, n)]
