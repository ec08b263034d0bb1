"""Exact building blocks: random words, rigorous exp bounds, lazy uniforms, Bernoulli trials.

Proof note (shared by every sampler in :mod:`veil.noise`). A sampler draws a uniform real
``W ∈ [0, 1)`` *lazily*: first a w-bit integer ``v`` (``W ∈ [v, v+1)/2^w``), then 64 more bits
at a time only when needed. An event ``W < c`` for a threshold ``c`` (rational, or irrational
like ``exp(-γ)``) is decided from integer bounds ``lo ≤ 2^p·c ≤ hi``: it is certainly true when
``v + 1 ≤ lo``, certainly false when ``v ≥ hi``, and otherwise more bits are drawn and ``c`` is
bounded at a higher precision. The decision therefore equals ``[W < c]`` for the infinitely
precise ``W``, so ``P(event) = c`` exactly; floating point never enters a probability (it is
used only to *guess* a table index that is then verified with the integer bounds).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from veil.errors import InternalError, InvalidArgumentError
from veil.random import RandomSource, system_source

__all__ = [
    "LazyUniform",
    "bernoulli",
    "bernoulli_exp",
    "draw_u32",
    "draw_u64",
    "draw_word",
    "exp_neg_bounds",
    "resolve_source",
    "uniform_int",
]

Bounds = Callable[[int], tuple[int, int]]


def resolve_source(source: RandomSource | None) -> RandomSource:
    """``source`` or, when None, the operating system's CSPRNG."""
    return system_source() if source is None else source


def check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise InvalidArgumentError(f"size must be a non-negative integer, got {size!r}")
    return int(size)


def draw_u32(source: RandomSource, n: int) -> NDArray[np.uint32]:
    """``n`` independent uniform 32-bit words (one bulk request)."""
    data = source.random_bytes(4 * n)
    if len(data) != 4 * n:
        raise InternalError(f"random source returned {len(data)} bytes instead of {4 * n}")
    return np.frombuffer(data, dtype="<u4").astype(np.uint32, copy=False)


def draw_word(source: RandomSource) -> int:
    """One uniform 32-bit word as a Python int: ``draw_u32(source, 1)[0]`` (the same 4 bytes,
    little-endian) without an array (one proposal's acceptance word)."""
    data = source.random_bytes(4)
    if len(data) != 4:
        raise InternalError(f"random source returned {len(data)} bytes instead of 4")
    return int.from_bytes(data, "little")


def draw_u64(source: RandomSource, n: int) -> NDArray[np.uint64]:
    """``n`` independent uniform 64-bit words (one bulk request)."""
    data = source.random_bytes(8 * n)
    if len(data) != 8 * n:
        raise InternalError(f"random source returned {len(data)} bytes instead of {8 * n}")
    return np.frombuffer(data, dtype="<u8").astype(np.uint64, copy=False)


def exp_neg_bounds(q: Fraction, prec: int) -> tuple[int, int]:
    """Integers ``lo ≤ 2^prec · exp(-q) ≤ hi`` with ``hi - lo ≤ 2``, for rational ``q ≥ 0``.

    Integer arithmetic only: ``q`` is halved ``s`` times to ``r ≤ 1/2``; ``exp(-r)`` is the
    alternating Taylor series (partial sums bracket the limit, terms rounded outward); the
    interval is squared ``s`` times rounding outward. ``16 + s`` guard bits absorb the
    rounding, so the final interval, shifted to ``prec`` bits, has width at most 2.
    """
    if q < 0:
        raise InternalError(f"exp_neg_bounds needs q ≥ 0, got {q}")
    one_p = 1 << prec
    if q == 0:
        return one_p, one_p
    if q > prec:  # exp(-q) < exp(-prec) < 2^-prec
        return 0, 1
    s = (q.numerator // q.denominator).bit_length() + 1
    w = prec + s + 16
    n, d = q.numerator, q.denominator << s  # r = n/d ≤ 1/2
    one = 1 << w
    lo_sum = hi_sum = one
    t_lo = t_hi = one
    k = 1
    while True:
        t_lo = (t_lo * n) // (d * k)
        t_hi = -((-t_hi * n) // (d * k))
        if k % 2:
            lo_sum -= t_hi
            hi_sum -= t_lo
        else:
            lo_sum += t_lo
            hi_sum += t_hi
        k += 1
        if t_hi <= 1:
            nxt = -((-t_hi * n) // (d * k))  # bounds the remainder of the series
            lo_sum -= nxt
            hi_sum += nxt
            break
    lo, hi = max(lo_sum, 0), min(hi_sum, one)
    for _ in range(s):
        lo = (lo * lo) >> w
        hi = -((-hi * hi) >> w)
    shift = w - prec
    return lo >> shift, -((-hi) >> shift)


def fraction_bounds(c: Fraction) -> Bounds:
    """Bounds function of a rational threshold ``c``: ``floor/ceil(2^p · c)``."""

    def bounds(prec: int) -> tuple[int, int]:
        scaled = c.numerator << prec
        return scaled // c.denominator, -((-scaled) // c.denominator)

    return bounds


def exp_bounds(gamma: Fraction) -> Bounds:
    """Bounds function of the threshold ``exp(-gamma)``."""
    return lambda prec: exp_neg_bounds(gamma, prec)


class LazyUniform:
    """One uniform real ``W ∈ [v, v+1)/2^bits``, refined 64 bits at a time when needed."""

    __slots__ = ("bits", "source", "v")

    def __init__(self, v: int, bits: int, source: RandomSource) -> None:
        self.v, self.bits, self.source = int(v), bits, source

    def below(self, bounds: Bounds) -> bool:
        """Exactly ``[W < c]`` where ``bounds(p)`` brackets ``2^p·c`` (width ≤ 2)."""
        while True:
            lo, hi = bounds(self.bits)
            if self.v + 1 <= lo:
                return True
            if self.v >= hi:
                return False
            extra = int.from_bytes(self.source.random_bytes(8), "little")
            self.v = (self.v << 64) | extra
            self.bits += 64


def below_const(u: NDArray[np.uint32], bounds: Bounds, source: RandomSource) -> NDArray[np.bool_]:
    """Vectorised ``[W_i < c]`` for 32-bit words ``u`` (refines the rare ambiguous ones)."""
    lo, hi = bounds(32)
    out = u.astype(np.int64) < lo  # v + 1 ≤ lo
    if hi - lo >= 1:
        ambiguous = np.flatnonzero((u >= lo) & (u < hi))
        for i in ambiguous:
            out[i] = LazyUniform(int(u[i]), 32, source).below(bounds)
    return out


def bernoulli(p: Fraction, size: int, *, source: RandomSource | None = None) -> NDArray[np.bool_]:
    """``size`` exact Bernoulli(p) trials for a rational ``0 ≤ p ≤ 1``.

    Contract: each entry is True with probability exactly ``p``, independently (proof note
    above: ``[W < p]`` decided on the lazily refined uniform ``W``). 4 random bytes per trial.
    """
    p = Fraction(p)
    if not 0 <= p <= 1:
        raise InvalidArgumentError(f"a Bernoulli probability must lie in [0, 1], got {p}")
    n = check_size(size)
    src = resolve_source(source)
    return below_const(draw_u32(src, n), fraction_bounds(p), src)


def bernoulli_exp(
    gamma: Fraction, size: int, *, source: RandomSource | None = None
) -> NDArray[np.bool_]:
    """``size`` exact Bernoulli(exp(-gamma)) trials for a rational ``gamma ≥ 0``.

    Contract: each entry is True with probability exactly ``exp(-gamma)``. The threshold is
    bracketed by :func:`exp_neg_bounds` (integer arithmetic) instead of Canonne–Kamath–Steinke's
    Algorithm 1; both are exact, this one needs one 32-bit word per trial.
    """
    gamma = Fraction(gamma)
    if gamma < 0:
        raise InvalidArgumentError(f"gamma must be ≥ 0 for Bernoulli(exp(-gamma)), got {gamma}")
    n = check_size(size)
    src = resolve_source(source)
    return below_const(draw_u32(src, n), exp_bounds(gamma), src)


def uniform_int(bound: int, size: int, *, source: RandomSource | None = None) -> NDArray[np.int64]:
    """``size`` integers uniform on ``{0, …, bound-1}`` without modulo bias (``bound ≤ 2^63``).

    Rejection: a w-bit word ``x`` (w = 32 or 64) is kept only when ``x < bound·⌊2^w/bound⌋``,
    so ``x mod bound`` is exactly uniform; rejected entries are redrawn as a batch.
    """
    if isinstance(bound, bool) or not isinstance(bound, int | np.integer) or bound < 1:
        raise InvalidArgumentError(f"bound must be a positive integer, got {bound!r}")
    bound = int(bound)
    if bound > 1 << 63:
        raise InvalidArgumentError(f"uniform_int supports bounds up to 2**63, got {bound}")
    n = check_size(size)
    src = resolve_source(source)
    out = np.empty(n, dtype=np.int64)
    pending = np.arange(n)
    wide = bound > 1 << 32
    w = 64 if wide else 32
    limit = ((1 << w) // bound) * bound
    while pending.size:
        x = draw_u64(src, pending.size) if wide else draw_u32(src, pending.size).astype(np.uint64)
        ok = x < np.uint64(limit) if limit < 1 << 64 else np.ones(x.size, dtype=bool)
        out[pending[ok]] = (x[ok] % np.uint64(bound)).astype(np.int64)
        pending = pending[~ok]
    return out
