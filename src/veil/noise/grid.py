"""The 2^k grid for real-valued noise (DESIGN §2).

A real value ``x`` is rounded *exactly* to the nearest multiple of ``2^k`` (ties to even),
integer noise in grid units is added, and the result is mapped back. The set of possible
outputs is the grid whatever the input, so the low-order bits of a release say nothing about
the input (the Mironov 2012 attack on float Laplace, Haney et al. 2022's precision attack).
Rounding moves each coordinate by at most ``2^k/2``, so two inputs at L1 distance Δ land at
most ``Δ/2^k + d`` grid units apart (d = number of coordinates): mechanisms calibrate to that.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from veil.errors import InvalidArgumentError

__all__ = ["MAX_EXPONENT", "from_grid", "grid_exponent", "to_grid"]

_LIMIT = 1 << 61  # grid integers stay below this, so value + noise cannot overflow int64
MAX_EXPONENT = 1023 - 62
"""The coarsest grid whose every output is a finite double: a value plus its noise is below
2^62 grid units (each below 2^61), at most 2^62 as a double, and ``2^62 · 2^961 = 2^1023``."""


def grid_exponent(scale: Fraction | int, dimension: int = 1) -> int:
    """The largest ``k`` with ``100 · dimension · 2^k < scale``.

    Mechanisms pass ``scale = min(sensitivity, nominal noise std)``: then the grid's extra
    sensitivity ``dimension · 2^k`` adds less than 1% to the noise and the output rounding
    (``≤ 2^(k-1)``) is below 0.5% of the noise's standard deviation.
    """
    s = Fraction(scale)
    if s <= 0:
        raise InvalidArgumentError(f"grid scale must be > 0, got {s}")
    if dimension < 1:
        raise InvalidArgumentError(f"dimension must be ≥ 1, got {dimension}")
    # target = p/q = s/(100·dimension); 2^k < p/q compared in integers (a Fraction's
    # arithmetic costs microseconds)
    p, q = s.numerator, s.denominator * 100 * dimension
    k = math.floor(math.log2(p) - math.log2(q)) + 1

    def below(j: int) -> bool:  # 2^j < p/q
        return q << j < p if j >= 0 else q < p << -j

    while not below(k):
        k -= 1
    while below(k + 1):
        k += 1
    return k


def _check_range(m: int, k: int) -> int:
    if abs(m) >= _LIMIT:
        raise InvalidArgumentError(
            f"a value of magnitude ≈ 2^{m.bit_length() + k} is too large for the noise grid "
            f"2^{k} (at most 2^61 grid steps); clamp the data to tighter bounds"
        )
    return m


def _round_fraction(v: Fraction, k: int) -> int:
    return _check_range(round(v / Fraction(2) ** k), k)


def _as_fraction(v: object) -> Fraction:
    if isinstance(v, np.integer):
        return Fraction(int(v))
    if isinstance(v, int | Fraction | Decimal):
        return Fraction(v)
    if isinstance(v, float | np.floating):
        return Fraction(float(v))
    raise InvalidArgumentError(f"cannot put {v!r} of type {type(v).__name__} on the noise grid")


def to_grid(values: NDArray[Any], k: int) -> NDArray[np.int64]:
    """Exact nearest multiple of ``2^k`` (ties to even), in grid units, as int64.

    Accepts float, integer or object (int/Fraction/Decimal) arrays; floats are dyadic
    rationals, so ``ldexp`` then ``rint`` is exact.
    """
    arr = np.asarray(values)
    if arr.dtype.kind == "f":
        with np.errstate(over="ignore"):  # an overflow becomes inf and is refused below
            if abs(k) <= 1000:  # 2^-k is a normal double: the product is exact (or inf)
                scaled = np.multiply(arr, math.ldexp(1.0, -k), dtype=np.float64)
            else:
                scaled = np.ldexp(arr.astype(np.float64), -k)
        np.rint(scaled, out=scaled)
        top = max(float(scaled.max()), -float(scaled.min())) if scaled.size else 0.0
        if not math.isfinite(top):
            raise InvalidArgumentError(
                f"values must be finite and below 2^61 steps of the noise grid 2^{k}, "
                f"got {float(np.max(np.abs(arr)))!r}; clamp the data to tighter bounds"
            )
        if top >= _LIMIT:
            _check_range(int(top), k)
        return _as_int64_in_place(scaled)
    if arr.dtype.kind in "iu":
        if arr.size and int(np.max(np.abs(arr.astype(np.float64)))) >= 1 << 62:
            return np.array(
                [_round_fraction(Fraction(int(v)), k) for v in arr.ravel()], dtype=np.int64
            ).reshape(arr.shape)
        a = arr.astype(np.int64)
        if k <= 0:
            if a.size and int(np.max(np.abs(a))) >= _LIMIT >> -k:
                _check_range(int(np.max(np.abs(a))) << -k, k)
            return a << -k
        q = a >> k
        r = a - (q << k)
        half = 1 << (k - 1)
        q += (r > half) | ((r == half) & (q & 1 == 1))
        return q
    flat = [_round_fraction(_as_fraction(v), k) for v in arr.ravel()]
    return np.array(flat, dtype=np.int64).reshape(arr.shape)


_IN_PLACE = 1 << 16
"""Values converted at a time in place: a block small enough for the processor's caches
(numpy copies an overlapping source first), so an array of millions is converted without
allocating another (a fresh array's first touch costs more than the conversion)."""


def _as_int64_in_place(scaled: NDArray[np.float64]) -> NDArray[np.int64]:
    """``scaled.astype(np.int64)`` for integral doubles below 2^61, written over ``scaled``'s
    memory (the caller's own array) block by block: the same integers, exactly."""
    if scaled.ndim != 1 or not scaled.flags.c_contiguous:
        return scaled.astype(np.int64)
    out = scaled.view(np.int64)
    for start in range(0, scaled.size, _IN_PLACE):
        out[start : start + _IN_PLACE] = scaled[start : start + _IN_PLACE]
    return out


def from_grid(m: NDArray[np.int64], k: int, *, overwrite: bool = False) -> NDArray[np.float64]:
    """``m · 2^k`` as float64 (a fixed function of ``m``: post-processing of the grid value).

    ``overwrite``: the result may be written over ``m``'s memory (the caller's own array,
    which then must not be read again), block by block — the same doubles, no new array."""
    if overwrite and abs(k) <= 1000 and m.ndim == 1 and m.flags.c_contiguous:
        out = m.view(np.float64)
        step = math.ldexp(1.0, k)  # exact scaling by a power of two
        for start in range(0, m.size, _IN_PLACE):
            out[start : start + _IN_PLACE] = m[start : start + _IN_PLACE] * step
        return out
    out = m.astype(np.float64)
    if abs(k) <= 1000:
        out *= math.ldexp(1.0, k)  # exact scaling by a power of two
        return out
    return np.ldexp(out, k)
